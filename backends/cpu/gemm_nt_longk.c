/* gemm_nt_longk.c — C = A B^T (beta 0) with a long inner index: a dense
 * layer's forward, Y = X W^T, W held as units x inputs (seedcnn: 32 or 64
 * rows of 4,608 inputs by 225 units).
 *
 * OpenBLAS packs both operands on every call and ran a worker's share of
 * seedcnn's batch, 32 x 225 x 4608, at 131 GFLOP/s on a Zen 5 EPYC (64
 * rows: 177; this kernel 213 and 223). Here both operands are read in
 * place, along the inner index, contiguous in both: 4 rows of A by 6 rows
 * of B in 24 AVX-512 registers, 16 inner elements at a time, over blocks
 * of 1,024 inner elements (A's 4 rows and B's 6 in L1 while the block
 * lasts); at the end of a block each register's lanes are added up and
 * added to C. So each
 * element of C is: for each block in order, lane l the FMA chain over the
 * block's elements l, l + 16, ..., the lanes added in one fixed tree, the
 * block's sum added to C. Neither which rows and columns a call covers nor
 * the thread count changes the bits. */
#include "config.h"

#include "cpu-impl.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))
#define NT_R 4    /* rows of A a block sums */
#define NT_J 6    /* rows of B */
#define NT_KB 1024 /* inner elements a block: 4 + 6 rows of 4 KiB in L1 */

/* C[r][j] (+)= the sums of rows r < R of A by rows j < J of B over the
 * inner elements [0, k) of a block; C set when first. */
static inline TGT __attribute__((always_inline)) void
tile(const int R, const int J, int k, bool first, const float *a, int lda, const float *b,
     int ldb, float *c, int ldc)
{
    __m512 acc[NT_R][NT_J];
#pragma GCC unroll 4
    for (int r = 0; r < NT_R; r++)
#pragma GCC unroll 6
        for (int j = 0; j < NT_J; j++)
            acc[r][j] = _mm512_setzero_ps();
    const int whole = k / 16 * 16;
    for (int p = 0; p < k; p += 16) {
        const __mmask16 m = (__mmask16)(p < whole ? 0xffff : (1u << (k - p)) - 1);
        __m512 av[NT_R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            av[r] = _mm512_maskz_loadu_ps(m, a + (size_t)r * lda + p);
#pragma GCC unroll 6
        for (int j = 0; j < J; j++) {
            const __m512 bv = _mm512_maskz_loadu_ps(m, b + (size_t)j * ldb + p);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][j] = _mm512_fmadd_ps(av[r], bv, acc[r][j]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int j = 0; j < J; j++) {
            const float s = _mm512_reduce_add_ps(acc[r][j]);
            float *o = c + (size_t)r * ldc + j;
            *o = first ? s : *o + s;
        }
}

typedef void (*tile_fn)(int k, bool first, const float *a, int lda, const float *b, int ldb,
                        float *c, int ldc);
#define TILE_FN(R, J)                                                                          \
    static TGT void tile_##R##J(int k, bool first, const float *a, int lda, const float *b,    \
                                int ldb, float *c, int ldc)                                    \
    {                                                                                          \
        tile(R, J, k, first, a, lda, b, ldb, c, ldc);                                          \
    }
#define TILE_FNS(R)                                                                            \
    TILE_FN(R, 1) TILE_FN(R, 2) TILE_FN(R, 3) TILE_FN(R, 4) TILE_FN(R, 5) TILE_FN(R, 6)
TILE_FNS(1)
TILE_FNS(2)
TILE_FNS(3)
TILE_FNS(4)
#define TILE_ROW(R) {tile_##R##1, tile_##R##2, tile_##R##3, tile_##R##4, tile_##R##5, tile_##R##6}
/* tiles[R - 1][J - 1] */
static const tile_fn tiles[NT_R][NT_J] = {TILE_ROW(1), TILE_ROW(2), TILE_ROW(3), TILE_ROW(4)};

bool cpu_gemm_nt_longk(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                       float *c, int ldc)
{
    if (m <= 0 || n <= 0 || k <= 0 || !cpu_has_avx512f())
        return false;
    for (int p = 0; p < k; p += NT_KB) {
        const int kb = k - p < NT_KB ? k - p : NT_KB;
        /* B's 6 rows of the block stay in L1 while A's rows pass by */
        for (int j = 0; j < n; j += NT_J) {
            const int nj = n - j < NT_J ? n - j : NT_J;
            for (int i = 0; i < m; i += NT_R) {
                const int ni = m - i < NT_R ? m - i : NT_R;
                tiles[ni - 1][nj - 1](kb, p == 0, a + (size_t)i * lda + p, lda,
                                      b + (size_t)j * ldb + p, ldb, c + (size_t)i * ldc + j, ldc);
            }
        }
    }
    return true;
}
#else
bool cpu_gemm_nt_longk(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                       float *c, int ldc)
{
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
    return false;
}
#endif
