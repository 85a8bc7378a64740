/* wgrad512.c — wgrad.c's filters' gradient by filters (outer products) at
 * AVX-512's width, for the CPUs whose BLAS runs AVX-512 kernels
 * (cpu_blas_avx512), where the gradient otherwise went to the BLAS with an
 * im2col per image.
 *
 * dW^T[j][q..q+16) += x_j[p] * dyT[p][q..q+16) for the positions p in
 * order: 16 filters across a vector, up to 12 column rows by 1 vector of
 * filters (or 6 by 2) in 12 registers, each x element broadcast straight
 * from memory into its FMA. Each element is one FMA chain over the images
 * and positions in order, as in wgrad.c's AVX2 kernel: the same bits.
 * (By positions, the AVX2 kernel ran slower on such a CPU than the BLAS:
 * lenet's conv1 175 -> 190 us, and stays off there.) */
#include "config.h"

#include "cpu-impl.h"

#include <stdint.h>

static bool wgrad512_enabled = true;

void cpu_wgrad512_set(bool on) { wgrad512_enabled = on; }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))
#define WO_ACC 12 /* accumulators: column rows x vectors of filters */

struct wo_images {
    int n, oh, ow, k;
    size_t wq, xs, dts;
    const float *x, *dt; /* dt: dy transposed, plane x k an image */
    __mmask16 last;      /* the lanes of the last vector of filters */
};

/* NJ column rows (at xo[]) by NV vectors of filters from q0; part rows are
 * k floats apart. */
static inline TGT __attribute__((always_inline)) void
oblock(const int NJ, const int NV, const struct wo_images *im, const int32_t *xo, int q0,
       bool more, float *part)
{
    const int k = im->k;
    __m512 a[WO_ACC][2];
#pragma GCC unroll 12
    for (int j = 0; j < NJ; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            const float *o = part + (size_t)j * k + 16 * v;
            a[j][v] = !more          ? _mm512_setzero_ps()
                      : v == NV - 1 ? _mm512_maskz_loadu_ps(im->last, o)
                                    : _mm512_loadu_ps(o);
        }
    for (int m = 0; m < im->n; m++) {
        const float *xb = im->x + (size_t)m * im->xs, *dt = im->dt + (size_t)m * im->dts + q0;
        for (int r = 0; r < im->oh; r++) {
            const float *xr = xb + (size_t)r * im->wq, *dr = dt + (size_t)r * im->ow * k;
            for (int c = 0; c < im->ow; c++) {
                __m512 d[2];
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++)
                    d[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(im->last, dr + (size_t)c * k + 16 * v)
                                       : _mm512_loadu_ps(dr + (size_t)c * k + 16 * v);
#pragma GCC unroll 12
                for (int j = 0; j < NJ; j++) {
                    const __m512 b = _mm512_set1_ps(xr[xo[j] + c]);
#pragma GCC unroll 2
                    for (int v = 0; v < NV; v++)
                        a[j][v] = _mm512_fmadd_ps(b, d[v], a[j][v]);
                }
            }
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < NJ; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            float *o = part + (size_t)j * k + 16 * v;
            if (v == NV - 1)
                _mm512_mask_storeu_ps(o, im->last, a[j][v]);
            else
                _mm512_storeu_ps(o, a[j][v]);
        }
}

typedef void (*oblock_fn)(const struct wo_images *im, const int32_t *xo, int q0, bool more,
                          float *part);
#define OBLOCK_FN(J, V)                                                                        \
    static TGT void oblock_##J##_##V(const struct wo_images *im, const int32_t *xo, int q0,    \
                                     bool more, float *part)                                   \
    {                                                                                          \
        oblock(J, V, im, xo, q0, more, part);                                                  \
    }
OBLOCK_FN(1, 1) OBLOCK_FN(2, 1) OBLOCK_FN(3, 1) OBLOCK_FN(4, 1) OBLOCK_FN(5, 1) OBLOCK_FN(6, 1)
OBLOCK_FN(7, 1) OBLOCK_FN(8, 1) OBLOCK_FN(9, 1) OBLOCK_FN(10, 1) OBLOCK_FN(11, 1)
OBLOCK_FN(12, 1)
OBLOCK_FN(1, 2) OBLOCK_FN(2, 2) OBLOCK_FN(3, 2) OBLOCK_FN(4, 2) OBLOCK_FN(5, 2) OBLOCK_FN(6, 2)
/* one[NJ - 1]: 1 vector of filters; two[NJ - 1]: 2 */
static const oblock_fn one[WO_ACC] = {oblock_1_1, oblock_2_1, oblock_3_1,  oblock_4_1,
                                      oblock_5_1, oblock_6_1, oblock_7_1,  oblock_8_1,
                                      oblock_9_1, oblock_10_1, oblock_11_1, oblock_12_1};
static const oblock_fn two[WO_ACC / 2] = {oblock_1_2, oblock_2_2, oblock_3_2,
                                          oblock_4_2, oblock_5_2, oblock_6_2};

static TGT void outer512(int k, int crs, const struct rt_wgrad_images *in, const int32_t *row_at,
                         bool more, float *part)
{
    struct wo_images im = {.n = in->n, .oh = in->oh, .ow = in->ow, .k = k, .wq = in->wq,
                           .xs = in->xs, .dts = in->dys, .x = in->x, .dt = in->dy};
    for (int q = 0; q < k; q += 32) {
        const int left = k - q < 32 ? k - q : 32, nv = (left + 15) / 16;
        const int rem = left - 16 * (nv - 1), rows = WO_ACC / nv;
        im.last = (__mmask16)(rem == 16 ? 0xffff : (1u << rem) - 1);
        for (int j = 0; j < crs; j += rows) {
            const int nj = crs - j < rows ? crs - j : rows;
            (nv == 1 ? one : two)[nj - 1](&im, row_at + j, q, more, part + (size_t)j * k + q);
        }
    }
}

bool cpu_wgrad_outer512(int k, int crs, const struct rt_wgrad_images *im, const int32_t *row_at,
                        bool more, float *part)
{
    if (k <= 0 || crs <= 0 || !cpu_wgrad512())
        return false;
    outer512(k, crs, im, row_at, more, part);
    return true;
}

bool cpu_wgrad512(void) { return wgrad512_enabled && cpu_has_avx512f() && cpu_blas_avx512(); }
#else
bool cpu_wgrad_outer512(int k, int crs, const struct rt_wgrad_images *im, const int32_t *row_at,
                        bool more, float *part)
{
    (void)k, (void)crs, (void)im, (void)row_at, (void)more, (void)part;
    return false;
}

bool cpu_wgrad512(void) { return false; }
#endif
