/* gemm_tn_smallk.c — C = A^T B where the inner index is short (at most
 * CPU_SMALLK_MAX): the dense layers' weight gradient, dW = dY^T X, whose
 * inner index is the batch (or a worker's share of it).
 *
 * Why: there C is the big matrix (seedcnn's 225 x 4608: 4 MB) and the
 * operands are small (32 x 225 and 32 x 4608 for a worker of 2). A BLAS
 * first scales C by beta in a pass of its own, then packs both operands
 * and adds its products to C: three passes over the 4 MB. Here each block
 * of C (6 rows x 64 columns, in 24 AVX-512 registers) is summed over the
 * whole inner index and written once; B's rows (4608 floats each) stay in
 * L2 between blocks. Each element of C is one FMA chain over the inner
 * index in order, from zero: the bits depend neither on the blocking nor
 * on the threads.
 *
 * AVX-512 only (elsewhere the BLAS does it, cpu.c). */
#include "config.h"

#include "cpu-impl.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))
#define SK_ROWS 6 /* rows of C a block sums */
#define SK_VECS 4 /* vectors of 16 columns: 64 */

/* Rows [0, R) of C's block from column 0, NV vectors of 16, the last one
 * masked by `last` (all ones but for a row's tail). */
static inline TGT __attribute__((always_inline)) void
block(const int R, const int NV, __mmask16 last, int k, const float *a, int lda, const float *b,
      int ldb, float *c, int ldc)
{
    __m512 acc[SK_ROWS][SK_VECS];
#pragma GCC unroll 6
    for (int r = 0; r < SK_ROWS; r++)
#pragma GCC unroll 4
        for (int v = 0; v < SK_VECS; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb, *ap = a + (size_t)p * lda;
        __m512 bv[SK_VECS];
#pragma GCC unroll 4
        for (int v = 0; v < SK_VECS; v++)
            if (v < NV)
                bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * v)
                                    : _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < SK_ROWS; r++) {
            if (r >= R)
                break;
            const __m512 av = _mm512_set1_ps(ap[r]);
#pragma GCC unroll 4
            for (int v = 0; v < SK_VECS; v++)
                if (v < NV)
                    acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < SK_ROWS; r++)
#pragma GCC unroll 4
        for (int v = 0; v < SK_VECS; v++)
            if (r < R && v < NV) {
                float *cp = c + (size_t)r * ldc + 16 * v;
                if (v == NV - 1)
                    _mm512_mask_storeu_ps(cp, last, acc[r][v]);
                else
                    _mm512_storeu_ps(cp, acc[r][v]);
            }
}

/* Rows [i0, i0 + R) of C, every column: full blocks of 64, then the rest
 * in vectors of 16 (the last one masked). R and NV constant at each call:
 * each instance keeps its accumulators in registers. */
#define ROW_BLOCKS(R)                                                                              \
    static TGT void rows_##R(int n, int k, const float *a, int lda, const float *b, int ldb,     \
                             float *c, int ldc)                                                    \
    {                                                                                              \
        int j = 0;                                                                                 \
        for (; j + 16 * SK_VECS <= n; j += 16 * SK_VECS)                                           \
            block(R, SK_VECS, 0xffff, k, a, lda, b + j, ldb, c + j, ldc);                         \
        for (; j < n; j += 16) {                                                                   \
            const int rem = n - j < 16 ? n - j : 16;                                               \
            block(R, 1, (__mmask16)((1u << rem) - 1u), k, a, lda, b + j, ldb, c + j, ldc);       \
        }                                                                                          \
    }
ROW_BLOCKS(1)
ROW_BLOCKS(2)
ROW_BLOCKS(3)
ROW_BLOCKS(4)
ROW_BLOCKS(5)
ROW_BLOCKS(6)

typedef void (*rows_fn)(int, int, const float *, int, const float *, int, float *, int);
static const rows_fn rows_of[SK_ROWS + 1] = {NULL,   rows_1, rows_2, rows_3,
                                             rows_4, rows_5, rows_6};

bool cpu_gemm_tn_smallk(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                        float *c, int ldc)
{
    if (m <= 0 || n <= 0 || k <= 0 || k > CPU_SMALLK_MAX || !cpu_has_avx512f())
        return false;
    for (int i = 0; i < m; i += SK_ROWS) {
        const int r = m - i < SK_ROWS ? m - i : SK_ROWS;
        rows_of[r](n, k, a + i, lda, b, ldb, c + (size_t)i * ldc, ldc);
    }
    return true;
}
#else
bool cpu_gemm_tn_smallk(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                        float *c, int ldc)
{
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
    return false;
}
#endif
