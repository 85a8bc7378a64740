/* gemm_small512.c — the wide im2col's GEMM read from the padded image in
 * place (cpu_gemm_small_rows) at AVX-512's width, for the CPUs whose BLAS
 * runs AVX-512 kernels (cpu_blas_avx512).
 *
 * There each image's im2col rows were copied out before a BLAS GEMM, which
 * packed both operands again (lenet: 15 MB of row copies a training step,
 * 11% of it). This kernel reads the rows where they lie: a panel of 64
 * columns of them stays in L1 while 6 rows of C at a time are summed in 24
 * registers (the filters' elements broadcast) and written once; an inner
 * index too long for A and a panel to share L1 is cut into blocks. Each
 * element of C is one FMA chain over the inner index in order from 0: the
 * bits of gemm_small.c's AVX2 kernel, whatever the blocking.
 *
 * cpu_gemm_nn512 is the same kernel on a plain C = A B (row p of B at p
 * ldb), for a dense layer's data gradient, dX = dY W with the units as the
 * inner index (seedcnn, a worker's 32 x 4608 x 225: OpenBLAS 371-438 us,
 * this 298). With an inner index under ~100 the BLAS's kernels ran as
 * fast or faster (bench_ops: 64 x 120 x 84, Winograd's 32 x 196 x 32;
 * seedcnn conv2 forward 1.82 -> 2.00 ms through this kernel), and so did
 * the convolutions' backward-data GEMM (an inner index of 6-16 filters):
 * those stay with the BLAS. */
#include "config.h"

#include "cpu-impl.h"

#include <stdint.h>

static bool small512_enabled = true;

void cpu_gemm_small512_set(bool on) { small512_enabled = on; }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))
#define ROWS 6 /* rows of C a micro-kernel sums */
#define VECS 4 /* vectors of 16 columns: a panel of 64 */

/* Rows r < R of C's panel from column 0, NV vectors, the last one under
 * `last` (its lanes past the end are neither read nor written); the sums
 * start from C's values when `more` (the next block of the inner index: a
 * float stored and loaded again is the same float, so the chain goes on
 * with the same bits). Row p of B is at b + at[p]. */
static inline TGT __attribute__((always_inline)) void
tile(const int R, const int NV, __mmask16 last, bool more, int k, const float *a, int lda,
     const float *b, const int32_t *at, float *c, int ldc)
{
    __m512 acc[ROWS][VECS];
#pragma GCC unroll 6
    for (int r = 0; r < ROWS; r++)
#pragma GCC unroll 4
        for (int v = 0; v < VECS; v++) {
            const float *cp = c + (size_t)r * ldc + 16 * v;
            acc[r][v] = !more || r >= R || v >= NV ? _mm512_setzero_ps()
                        : v == NV - 1              ? _mm512_maskz_loadu_ps(last, cp)
                                                   : _mm512_loadu_ps(cp);
        }
    for (int p = 0; p < k; p++) {
        const float *bp = b + at[p];
        __m512 bv[VECS];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * v)
                                : _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512 av = _mm512_set1_ps(a[(size_t)r * lda + p]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *cp = c + (size_t)r * ldc + 16 * v;
            if (v == NV - 1)
                _mm512_mask_storeu_ps(cp, last, acc[r][v]);
            else
                _mm512_storeu_ps(cp, acc[r][v]);
        }
}

typedef void (*tile_fn)(__mmask16 last, bool more, int k, const float *a, int lda,
                        const float *b, const int32_t *at, float *c, int ldc);

/* One function per shape of tile, the constants folded in. */
#define TILE_FN(R, NV)                                                                         \
    static TGT void tile_##R##NV(__mmask16 last, bool more, int k, const float *a, int lda,    \
                                 const float *b, const int32_t *at, float *c, int ldc)         \
    {                                                                                          \
        tile(R, NV, last, more, k, a, lda, b, at, c, ldc);                                     \
    }
#define TILE_FNS(R) TILE_FN(R, 1) TILE_FN(R, 2) TILE_FN(R, 3) TILE_FN(R, 4)
TILE_FNS(1)
TILE_FNS(2)
TILE_FNS(3)
TILE_FNS(4)
TILE_FNS(5)
TILE_FNS(6)
#define TILE_ROW(R) {tile_##R##1, tile_##R##2, tile_##R##3, tile_##R##4}
/* tiles[R - 1][NV - 1] */
static const tile_fn tiles[ROWS][VECS] = {TILE_ROW(1), TILE_ROW(2), TILE_ROW(3),
                                          TILE_ROW(4), TILE_ROW(5), TILE_ROW(6)};

/* Floats of A's rows and a panel of B kept in L1 at once (32 KiB of the
 * 48 of a Zen 4 or 5, Ice Lake or later): beyond it the inner index is
 * cut into blocks. */
#define L1_FLOATS 8192

/* Columns [0, n) of C from rows [0, k) of B, in panels of 64. */
static TGT void panels(int m, int n, int k, bool more, const float *a, int lda, const float *b,
                       const int32_t *at, float *c, int ldc)
{
    for (int j = 0; j < n; j += 16 * VECS) {
        const int w = n - j < 16 * VECS ? n - j : 16 * VECS;
        const int nv = (w + 15) / 16, rem = w - 16 * (nv - 1);
        const __mmask16 last = cpu_lanes_below(rem);
        for (int i = 0; i < m; i += ROWS) {
            const int r = m - i < ROWS ? m - i : ROWS;
            tiles[r - 1][nv - 1](last, more, k, a + (size_t)i * lda, lda, b + j, at,
                                 c + (size_t)i * ldc + j, ldc);
        }
    }
}

static bool runs_here(int m, int n, int k)
{
    return m > 0 && n > 0 && k > 0 && small512_enabled && cpu_has_avx512f() && cpu_blas_avx512();
}

/* C (+= when more) A B over the inner index [0, k), in blocks that keep
 * A's rows and a panel in L1. */
static void rows512(int m, int n, int k, const float *a, int lda, const float *b,
                    const int32_t *at, bool more, float *c, int ldc)
{
    const long fit = L1_FLOATS / (m + 16 * VECS);
    const int blocks = fit >= k ? 1 : (int)((k + fit - 1) / (fit > 0 ? fit : 1));
    for (int bk = 0; bk < blocks; bk++) {
        const int k0 = (int)((long)k * bk / blocks), k1 = (int)((long)k * (bk + 1) / blocks);
        panels(m, n, k1 - k0, more || bk > 0, a + k0, lda, b, at + k0, c, ldc);
    }
}

bool cpu_gemm_small512_rows(int m, int n, int k, const float *a, int lda, const float *b,
                            const int32_t *at, float *c, int ldc)
{
    if (!runs_here(m, n, k))
        return false;
    rows512(m, n, k, a, lda, b, at, false, c, ldc);
    return true;
}

bool cpu_gemm_nn512(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                    float *c, int ldc)
{
    if (!runs_here(m, n, k) || (long)(k - 1) * ldb > INT32_MAX)
        return false;
    enum { CHUNK = 512 }; /* B's row starts, a chunk of the inner index at a time */
    int32_t at[CHUNK];
    for (int p0 = 0; p0 < k; p0 += CHUNK) {
        const int kc = k - p0 < CHUNK ? k - p0 : CHUNK;
        for (int p = 0; p < kc; p++)
            at[p] = (int32_t)((long)p * ldb);
        rows512(m, n, kc, a + p0, lda, b + (size_t)p0 * ldb, at, p0 > 0, c, ldc);
    }
    return true;
}
#else
bool cpu_gemm_small512_rows(int m, int n, int k, const float *a, int lda, const float *b,
                            const int32_t *at, float *c, int ldc)
{
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)at, (void)c, (void)ldc;
    return false;
}

bool cpu_gemm_nn512(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                    float *c, int ldc)
{
    (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
    return false;
}
#endif
