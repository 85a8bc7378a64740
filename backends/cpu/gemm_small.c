/* gemm_small.c — C = op(A) B (beta 0) for the convolutions' many small
 * GEMMs: the Winograd forward's and backward-data's, 16 per chunk of
 * images (16-64 channels by 16-64 channels by a few hundred tiles), and
 * im2col's on one image per thread (filters by c r s by the output plane;
 * A^T for the data gradient).
 *
 * At these sizes a BLAS spends as long around its kernel as in it: it
 * scales C by beta in a pass of its own and copies A and B into packed
 * panels on every call (measured with OpenBLAS 0.3.21 on an AVX2 EPYC:
 * 32 x 144 x 32 at 38 GFLOP/s, 16 x 196 x 16 at 22, the beta pass alone
 * 10% of a seedcnn step). B's rows are contiguous, so this kernel reads
 * both operands in place: a panel of 24 columns of B stays in L1 while 4
 * rows of C at a time are summed in 12 AVX2 registers (A's elements
 * broadcast, from rows or, for A^T, columns) and written once; an inner
 * index too long for A and a panel to share L1 is cut into blocks. Each
 * element of C is one FMA chain over the inner index in order, so the bits
 * do not depend on the blocking.
 *
 * Winograd's filters' gradient, C (+)= A B^T with the tiles as the inner
 * index, comes here with B transposed a block at a time (conv.c, wino_du;
 * C added to: cpu_gemm_small_acc): rows dotted 8 lanes at a time in 4 x 2
 * tiles were 15% slower than OpenBLAS (seedcnn conv2: 12.0 ms against
 * 10.3), the inner of 144 tiles too short to pay each tile's adding up of
 * its lanes. (im2col's reads the image in place: wgrad.c.)
 *
 * Without AVX2 and FMA (or off x86-64) the BLAS does it (cpu_sgemm), and
 * where the BLAS runs AVX-512 kernels too: they have twice the width of
 * these (on a Zen 5 EPYC, seedcnn's step 11.9 ms with OpenBLAS's, 16.3
 * with these). An AVX-512 CPU whose OpenBLAS is held to its Haswell
 * kernels (OPENBLAS_CORETYPE) runs these: lenet's step 3.1 -> 1.95 ms. */
#include "config.h"

#include "cpu-impl.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define GEMM_SMALL_AVX2 1
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma")))
#define ROWS 4 /* rows of C a micro-kernel sums */
#define VECS 3 /* vectors of 8 columns: a panel of 24 */

/* Rows r < R of C's panel from column 0, NV vectors, the last one masked
 * when MASKED (its lanes past the end are neither read nor written); the
 * sums start from C's values when `more` (the next block of the inner
 * index: a float stored and loaded again is the same float, so the chain
 * goes on with the same bits). */
static inline TGT __attribute__((always_inline)) void
tile(const bool TA, const bool AT, const int R, const int NV, const bool MASKED, __m256i mask,
     bool more, int k, const float *a, int lda, const float *b, int ldb, const int32_t *at,
     float *c, int ldc)
{
    __m256 acc[ROWS][VECS];
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
#pragma GCC unroll 3
        for (int v = 0; v < VECS; v++) {
            const float *cp = c + (size_t)r * ldc + 8 * v;
            acc[r][v] = !more || r >= R || v >= NV ? _mm256_setzero_ps()
                        : MASKED && v == NV - 1    ? _mm256_maskload_ps(cp, mask)
                                                   : _mm256_loadu_ps(cp);
        }
    for (int p = 0; p < k; p++) {
        const float *bp = AT ? b + at[p] : b + (size_t)p * ldb;
        __m256 bv[VECS];
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            bv[v] = MASKED && v == NV - 1 ? _mm256_maskload_ps(bp + 8 * v, mask)
                                          : _mm256_loadu_ps(bp + 8 * v);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256 av = _mm256_broadcast_ss(TA ? a + (size_t)p * lda + r
                                                     : a + (size_t)r * lda + p);
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) {
            float *cp = c + (size_t)r * ldc + 8 * v;
            if (MASKED && v == NV - 1)
                _mm256_maskstore_ps(cp, mask, acc[r][v]);
            else
                _mm256_storeu_ps(cp, acc[r][v]);
        }
}

typedef void (*tile_fn)(__m256i mask, bool more, int k, const float *a, int lda, const float *b,
                        int ldb, const int32_t *at, float *c, int ldc);

/* One function per shape of tile, the constants folded in. T: 0 A, 1 A^T,
 * 2 A with B's rows at offsets (at[p]: row p of B starts at b + at[p]). */
#define TILE_FN(T, R, NV, M)                                                                   \
    static TGT void tile_##T##R##NV##M(__m256i mask, bool more, int k, const float *a, int lda,  \
                                       const float *b, int ldb, const int32_t *at, float *c,   \
                                       int ldc)                                                \
    {                                                                                          \
        tile(T == 1, T == 2, R, NV, M, mask, more, k, a, lda, b, ldb, at, c, ldc);             \
    }
#define TILE_FNS(T, R)                                                                         \
    TILE_FN(T, R, 1, 0) TILE_FN(T, R, 2, 0) TILE_FN(T, R, 3, 0) TILE_FN(T, R, 1, 1)            \
    TILE_FN(T, R, 2, 1) TILE_FN(T, R, 3, 1)
#define TILE_FNS_T(T) TILE_FNS(T, 1) TILE_FNS(T, 2) TILE_FNS(T, 3) TILE_FNS(T, 4)
TILE_FNS_T(0)
TILE_FNS_T(1)
TILE_FNS_T(2)
#define TILE_ROW(T, R)                                                                         \
    {{tile_##T##R##1##0, tile_##T##R##2##0, tile_##T##R##3##0},                                \
     {tile_##T##R##1##1, tile_##T##R##2##1, tile_##T##R##3##1}}
#define TILE_ROWS(T) {TILE_ROW(T, 1), TILE_ROW(T, 2), TILE_ROW(T, 3), TILE_ROW(T, 4)}
/* tiles[T][R - 1][masked][NV - 1] */
static const tile_fn tiles[3][ROWS][2][VECS] = {TILE_ROWS(0), TILE_ROWS(1), TILE_ROWS(2)};

/* Floats of A's rows and a panel of B kept in L1 at once (24 KiB of
 * Zen 3's 32): beyond it the inner index is cut into blocks. Without the
 * cut a strided layer of resnet8 (32 x 210 x 144: A 18 KiB, a panel 14)
 * ran at half OpenBLAS's speed. */
#define L1_FLOATS 6144

/* Columns [0, n) of C from rows [0, k) of B, in panels (T as TILE_FN's). */
static TGT void panels(int T, int m, int n, int k, __m256i mask, bool more, const float *a,
                       int lda, const float *b, int ldb, const int32_t *at, float *c, int ldc)
{
    const bool ta = T == 1;
    for (int j = 0, w; j < n; j += w) {
        /* panels of 24; a last one of 8 or less makes the one before 16:
         * 8 columns take 4 broadcasts for 4 FMAs, 16 for 8 */
        const int left = n - j;
        w = left <= 8 * VECS ? left : left <= 8 * VECS + 8 ? 16 : 8 * VECS;
        const int nv = (w + 7) / 8, masked = w % 8 != 0;
        for (int i = 0; i < m; i += ROWS) {
            const int r = m - i < ROWS ? m - i : ROWS;
            tiles[T][r - 1][masked][nv - 1](mask, more, k, ta ? a + i : a + (size_t)i * lda, lda,
                                            b + j, ldb, at, c + (size_t)i * ldc + j, ldc);
        }
    }
}

static TGT void gemm_avx2(int T, int m, int n, int k, const float *a, int lda, const float *b,
                          int ldb, const int32_t *at, bool acc, float *c, int ldc)
{
    const bool ta = T == 1;
    const int rem = n % 8;
    int32_t lanes[8];
    for (int i = 0; i < 8; i++)
        lanes[i] = i < rem ? -1 : 0;
    const __m256i mask = _mm256_loadu_si256((const __m256i *)lanes);
    const long fit = L1_FLOATS / (m + 8 * VECS);
    const int blocks = fit >= k ? 1 : (int)((k + fit - 1) / (fit > 0 ? fit : 1));
    for (int bk = 0; bk < blocks; bk++) {
        const int k0 = (int)((long)k * bk / blocks), k1 = (int)((long)k * (bk + 1) / blocks);
        panels(T, m, n, k1 - k0, mask, acc || bk > 0, ta ? a + (size_t)k0 * lda : a + k0, lda,
               at ? b : b + (size_t)k0 * ldb, ldb, at ? at + k0 : NULL, c, ldc);
    }
}

bool cpu_avx2_kernels(void)
{
    static int use = -1; /* threads that race here store the same value */
    int u = __atomic_load_n(&use, __ATOMIC_RELAXED);
    if (u < 0) {
        __builtin_cpu_init();
        u = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            !cpu_blas_avx512();
        __atomic_store_n(&use, u, __ATOMIC_RELAXED);
    }
    return u;
}
#else
bool cpu_avx2_kernels(void) { return false; }
#endif

void cpu_gemm_small_acc(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                        int ldb, bool acc, float *c, int ldc)
{
#ifdef GEMM_SMALL_AVX2
    if (m > 0 && n > 0 && k > 0 && cpu_avx2_kernels()) {
        gemm_avx2(ta ? 1 : 0, m, n, k, a, lda, b, ldb, NULL, acc, c, ldc);
        return;
    }
#endif
    cpu_sgemm(1, ta, false, m, n, k, 1.0f, a, lda, b, ldb, acc ? 1.0f : 0.0f, c, ldc);
}

void cpu_gemm_small(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                    int ldb, float *c, int ldc)
{
    cpu_gemm_small_acc(ta, m, n, k, a, lda, b, ldb, false, c, ldc);
}

bool cpu_gemm_small_rows(int m, int n, int k, const float *a, int lda, const float *b,
                         const int32_t *at, float *c, int ldc)
{
    if (cpu_gemm_small512_rows(m, n, k, a, lda, b, at, c, ldc))
        return true;
#ifdef GEMM_SMALL_AVX2
    if (m > 0 && n > 0 && k > 0 && cpu_avx2_kernels()) {
        gemm_avx2(2, m, n, k, a, lda, b, 0, at, false, c, ldc);
        return true;
    }
#else
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)at, (void)c, (void)ldc;
#endif
    return false;
}
