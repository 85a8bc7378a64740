/* gemm_small.c — C = A B (no transposes, beta 0) for the many small GEMMs
 * of the Winograd convolution's forward and backward-data: 16 per chunk of
 * images, each with 16-64 rows (channels), an inner 16-64 (channels) and a
 * few hundred columns (tiles).
 *
 * At these sizes a BLAS spends as long around its kernel as in it: it
 * scales C by beta in a pass of its own and copies A and B into packed
 * panels on every call (measured with OpenBLAS 0.3.21 on an AVX2 EPYC:
 * 32 x 144 x 32 at 38 GFLOP/s, 16 x 196 x 16 at 22, the beta pass alone
 * 10% of a seedcnn step). Both operands already fit L1 and B's rows are
 * contiguous, so this kernel reads them in place: a panel of 24 columns
 * of B stays in L1 while 4 rows of C at a time are summed in 12 AVX2
 * registers and written once. Each element of C is one FMA chain over the
 * inner index in order, so the bits do not depend on the blocking.
 *
 * The filters' gradient, C (+)= A B^T with the tiles as the inner index,
 * stays with the BLAS: rows dotted 8 lanes at a time in 4 x 2 tiles were
 * 15% slower than OpenBLAS (seedcnn conv2: 12.0 ms against 10.3), the
 * inner of 144 tiles too short to pay each tile's adding up of its lanes.
 *
 * Without AVX2 and FMA (or off x86-64) the BLAS does it (cpu_sgemm). */
#include "config.h"

#include "cpu-impl.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define GEMM_NN_AVX2 1
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma")))
#define ROWS 4 /* rows of C a micro-kernel sums */
#define VECS 3 /* vectors of 8 columns: a panel of 24 */

/* Rows r < R of C's panel from column 0, NV vectors, the last one masked
 * when MASKED (its lanes past the end are neither read nor written). */
static inline TGT __attribute__((always_inline)) void
tile(const int R, const int NV, const bool MASKED, __m256i mask, int k, const float *a, int lda,
     const float *b, int ldb, float *c, int ldc)
{
    __m256 acc[ROWS][VECS];
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
#pragma GCC unroll 3
        for (int v = 0; v < VECS; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb;
        __m256 bv[VECS];
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            bv[v] = MASKED && v == NV - 1 ? _mm256_maskload_ps(bp + 8 * v, mask)
                                          : _mm256_loadu_ps(bp + 8 * v);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256 av = _mm256_broadcast_ss(a + (size_t)r * lda + p);
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

typedef void (*tile_fn)(__m256i mask, int k, const float *a, int lda, const float *b, int ldb,
                        float *c, int ldc);

/* One function per shape of tile, the constants folded in. */
#define TILE_FN(R, NV, M)                                                                      \
    static TGT void tile_##R##_##NV##_##M(__m256i mask, int k, const float *a, int lda,        \
                                          const float *b, int ldb, float *c, int ldc)          \
    {                                                                                          \
        tile(R, NV, M, mask, k, a, lda, b, ldb, c, ldc);                                       \
    }
#define TILE_FNS(R)                                                                            \
    TILE_FN(R, 1, 0) TILE_FN(R, 2, 0) TILE_FN(R, 3, 0) TILE_FN(R, 1, 1) TILE_FN(R, 2, 1)       \
    TILE_FN(R, 3, 1)
TILE_FNS(1)
TILE_FNS(2)
TILE_FNS(3)
TILE_FNS(4)
#define TILE_ROW(R)                                                                            \
    {{tile_##R##_1_0, tile_##R##_2_0, tile_##R##_3_0},                                         \
     {tile_##R##_1_1, tile_##R##_2_1, tile_##R##_3_1}}
/* tiles[R - 1][masked][NV - 1] */
static const tile_fn tiles[ROWS][2][VECS] = {TILE_ROW(1), TILE_ROW(2), TILE_ROW(3), TILE_ROW(4)};

static TGT void gemm_nn_avx2(int m, int n, int k, const float *a, int lda, const float *b,
                             int ldb, float *c, int ldc)
{
    const int rem = n % 8;
    int32_t lanes[8];
    for (int i = 0; i < 8; i++)
        lanes[i] = i < rem ? -1 : 0;
    const __m256i mask = _mm256_loadu_si256((const __m256i *)lanes);
    for (int j = 0, w; j < n; j += w) {
        /* panels of 24; a last one of 8 or less makes the one before 16:
         * 8 columns take 4 broadcasts for 4 FMAs, 16 for 8 */
        const int left = n - j;
        w = left <= 8 * VECS ? left : left <= 8 * VECS + 8 ? 16 : 8 * VECS;
        const int nv = (w + 7) / 8, masked = w % 8 != 0;
        for (int i = 0; i < m; i += ROWS) {
            const int r = m - i < ROWS ? m - i : ROWS;
            tiles[r - 1][masked][nv - 1](mask, k, a + (size_t)i * lda, lda, b + j, ldb,
                                         c + (size_t)i * ldc + j, ldc);
        }
    }
}

static bool have_avx2_fma(void)
{
    static int have = -1; /* a race writes the same value */
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return have;
}
#endif

void cpu_gemm_nn(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c,
                 int ldc)
{
#ifdef GEMM_NN_AVX2
    if (m > 0 && n > 0 && k > 0 && have_avx2_fma()) {
        gemm_nn_avx2(m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
#endif
    cpu_sgemm(1, false, false, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

