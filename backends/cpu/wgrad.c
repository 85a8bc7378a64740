/* wgrad.c — the filters' gradient of a convolution whose column rows are
 * runs of the (padded) image: conv.c's wide layout, or x itself at stride
 * 1 without padding. Read in place: no im2col, no BLAS call per image.
 *
 * dW[q][j] = sum over the images and the output positions p of
 * dy[q][p] * x[row_at[j] + p], in one of two ways:
 * - by positions: 6 rows of dy by 2 column rows in 12 AVX2 registers, 8
 *   positions of an output row across the lanes, over a few images at a
 *   time; the lanes wait in memory between batches (acc: k x crs x 8
 *   floats, at most 128 KiB, in L2) and are added up once a group of
 *   images is done. One image per block spent as long loading and
 *   storing the lanes as summing lenet's conv2;
 * - by filters: outer products, 16 filters across the lanes by 6 column
 *   rows, dy transposed; no lane is wasted on short output rows (lenet's
 *   conv2: rows of 10, 2 vectors a row by positions).
 * cpu_wgrad_kind picks the one that multiplies fewer idle lanes.
 *
 * OpenBLAS ran these as C (+)= col dy^T with an im2col per image: lenet's
 * conv1 (6 x 25, inner 896) at 9.9 GFLOP/s, conv2 (16 x 150, inner 96) at
 * 21.9, packing both operands on every call (bench_ops, 1 thread).
 *
 * Each lane (or element) is one FMA chain over the images and positions
 * in order, and lanes are added in a fixed order: the bits depend only on
 * the images in the group. */
#include "config.h"

#include "cpu-impl.h"

#include <stdint.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define WGRAD_AVX2 1
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma")))
#define WG_K 6 /* rows of dy a block sums */
#define WG_J 2 /* rows of x */
#define WO_J 6 /* column rows of an outer-product block */

/* A few images: image m's padded planes at x + m * xs (x rows wq apart),
 * its dy (k x oh x ow) at dy + m * dys. */
struct wg_images {
    int n, oh, ow, nv; /* nv: whole vectors in an output row */
    size_t wq, xs, dys;
    const float *x, *dy;
    __m256i tail; /* the lanes of a last vector shorter than 8 */
};

/* NK rows of dy times NJ rows of x, one output row's vectors: the lanes
 * past ow read nothing and add +0. */
static inline TGT __attribute__((always_inline)) void
row(const int NK, const int NJ, const struct wg_images *im, const float *x0, const float *x1,
    const float *d, size_t plane, __m256 a[WG_K][WG_J])
{
    int p = 0;
    for (int v = 0; v < im->nv; v++, p += 8) {
        const __m256 v0 = _mm256_loadu_ps(x0 + p), v1 = _mm256_loadu_ps(x1 + p);
#pragma GCC unroll 6
        for (int q = 0; q < NK; q++) {
            const __m256 dq = _mm256_loadu_ps(d + (size_t)q * plane + p);
            a[q][0] = _mm256_fmadd_ps(dq, v0, a[q][0]);
            if (NJ > 1)
                a[q][1] = _mm256_fmadd_ps(dq, v1, a[q][1]);
        }
    }
    if (p < im->ow) {
        const __m256 v0 = _mm256_maskload_ps(x0 + p, im->tail),
                     v1 = _mm256_maskload_ps(x1 + p, im->tail);
#pragma GCC unroll 6
        for (int q = 0; q < NK; q++) {
            const __m256 dq = _mm256_maskload_ps(d + (size_t)q * plane + p, im->tail);
            a[q][0] = _mm256_fmadd_ps(dq, v0, a[q][0]);
            if (NJ > 1)
                a[q][1] = _mm256_fmadd_ps(dq, v1, a[q][1]);
        }
    }
}

/* The lanes of filters [q0, q0 + NK) by column rows at offsets xo[0..NJ),
 * over the images, their output rows and positions in order; acc rows are
 * crs * 8 floats apart. Only the valid positions: lenet's conv2 has 8 of
 * its 12 wide columns. */
static inline TGT __attribute__((always_inline)) void
block(const int NK, const int NJ, const struct wg_images *im, const int *xo, int q0, bool more,
      float *acc, int crs)
{
    const size_t plane = (size_t)im->oh * im->ow;
    __m256 a[WG_K][WG_J];
#pragma GCC unroll 6
    for (int q = 0; q < WG_K; q++)
#pragma GCC unroll 2
        for (int j = 0; j < WG_J; j++)
            a[q][j] = more && q < NK && j < NJ ? _mm256_loadu_ps(acc + ((size_t)q * crs + j) * 8)
                                               : _mm256_setzero_ps();
    for (int m = 0; m < im->n; m++) {
        const float *xb = im->x + (size_t)m * im->xs, *db = im->dy + (size_t)m * im->dys;
        for (int r = 0; r < im->oh; r++)
            row(NK, NJ, im, xb + xo[0] + (size_t)r * im->wq,
                xb + xo[NJ > 1 ? 1 : 0] + (size_t)r * im->wq,
                db + (size_t)q0 * plane + (size_t)r * im->ow, plane, a);
    }
#pragma GCC unroll 6
    for (int q = 0; q < NK; q++)
#pragma GCC unroll 2
        for (int j = 0; j < NJ; j++)
            _mm256_storeu_ps(acc + ((size_t)q * crs + j) * 8, a[q][j]);
}

typedef void (*block_fn)(const struct wg_images *im, const int *xo, int q0, bool more,
                         float *acc, int crs);
#define BLOCK_FN(K, J)                                                                         \
    static TGT void block_##K##J(const struct wg_images *im, const int *xo, int q0, bool more, \
                                 float *acc, int crs)                                          \
    {                                                                                          \
        block(K, J, im, xo, q0, more, acc, crs);                                               \
    }
#define BLOCK_FNS(K) BLOCK_FN(K, 1) BLOCK_FN(K, 2)
BLOCK_FNS(1) BLOCK_FNS(2) BLOCK_FNS(3) BLOCK_FNS(4) BLOCK_FNS(5) BLOCK_FNS(6)
/* blocks[NK - 1][NJ - 1] */
static const block_fn blocks[WG_K][WG_J] = {{block_11, block_12}, {block_21, block_22},
                                            {block_31, block_32}, {block_41, block_42},
                                            {block_51, block_52}, {block_61, block_62}};

static TGT void wgrad_avx2(int k, int crs, const struct rt_wgrad_images *in,
                           const int32_t *row_at, bool more, float *acc)
{
    int32_t lanes[8];
    for (int i = 0; i < 8; i++)
        lanes[i] = i < in->ow % 8 ? -1 : 0;
    const struct wg_images im = {.n = in->n, .oh = in->oh, .ow = in->ow, .nv = in->ow / 8,
                                 .wq = in->wq, .xs = in->xs, .dys = in->dys, .x = in->x,
                                 .dy = in->dy,
                                 .tail = _mm256_loadu_si256((const __m256i *)lanes)};
    /* the x rows of a pair outer: dy's k planes stay in L1 (k oh ow <= WGRAD_L1) */
    for (int j = 0; j < crs; j += WG_J) {
        const int nj = crs - j < WG_J ? crs - j : WG_J;
        const int xo[WG_J] = {row_at[j], row_at[j + nj - 1]};
        for (int q = 0; q < k; q += WG_K) {
            const int nk = k - q < WG_K ? k - q : WG_K;
            blocks[nk - 1][nj - 1](&im, xo, q, more, acc + ((size_t)q * crs + j) * 8, crs);
        }
    }
}

/* ---- by filters: outer products, for planes with short rows --------------
 * Lanes over the filters: dW^T[j][q..q+16) += x_j[p] * dyT[p][q..q+16)
 * for the positions p in order, 6 column rows by 2 vectors of filters in
 * 12 registers, x broadcast. No lane of a short output row is wasted
 * (lenet's conv2: rows of 10, 2 vectors a row by rows; 16 filters, 2
 * vectors by filters), each element one chain, no adding up of lanes. */
struct wo_images {
    int n, oh, ow, k;
    size_t wq, xs, dts;
    const float *x, *dt; /* dt: dy transposed, plane x k an image */
    __m256i mask;        /* the lanes of a last vector of filters */
};

static inline TGT __attribute__((always_inline)) __m256 ld(const bool M, const float *p,
                                                            __m256i mask)
{
    return M ? _mm256_maskload_ps(p, mask) : _mm256_loadu_ps(p);
}

static inline TGT __attribute__((always_inline)) void
oblock(const int NJ, const int NV, const bool M, const struct wo_images *im, const int32_t *xo,
       int q0, bool more, float *part)
{
    const int k = im->k;
    __m256 a[WO_J][2];
#pragma GCC unroll 6
    for (int j = 0; j < WO_J; j++)
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++)
            a[j][v] = more && j < NJ && v < NV ? ld(M && v == NV - 1, part + (size_t)j * k + 8 * v,
                                                    im->mask)
                                               : _mm256_setzero_ps();
    for (int m = 0; m < im->n; m++) {
        const float *xb = im->x + (size_t)m * im->xs, *dt = im->dt + (size_t)m * im->dts + q0;
        for (int r = 0; r < im->oh; r++) {
            const float *xr = xb + (size_t)r * im->wq, *dr = dt + (size_t)r * im->ow * k;
            for (int c = 0; c < im->ow; c++) {
                const __m256 d0 = ld(M && NV == 1, dr + (size_t)c * k, im->mask);
                const __m256 d1 = NV > 1 ? ld(M, dr + (size_t)c * k + 8, im->mask) : d0;
#pragma GCC unroll 6
                for (int j = 0; j < NJ; j++) {
                    const __m256 b = _mm256_broadcast_ss(xr + xo[j] + c);
                    a[j][0] = _mm256_fmadd_ps(b, d0, a[j][0]);
                    if (NV > 1)
                        a[j][1] = _mm256_fmadd_ps(b, d1, a[j][1]);
                }
            }
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < NJ; j++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            float *o = part + (size_t)j * k + 8 * v;
            if (M && v == NV - 1)
                _mm256_maskstore_ps(o, im->mask, a[j][v]);
            else
                _mm256_storeu_ps(o, a[j][v]);
        }
}

typedef void (*oblock_fn)(const struct wo_images *im, const int32_t *xo, int q0, bool more,
                          float *part);
#define OBLOCK_FN(J, V, M)                                                                     \
    static TGT void oblock_##J##V##M(const struct wo_images *im, const int32_t *xo, int q0,    \
                                     bool more, float *part)                                   \
    {                                                                                          \
        oblock(J, V, M, im, xo, q0, more, part);                                               \
    }
#define OBLOCK_FNS(J) OBLOCK_FN(J, 1, 0) OBLOCK_FN(J, 2, 0) OBLOCK_FN(J, 1, 1) OBLOCK_FN(J, 2, 1)
OBLOCK_FNS(1) OBLOCK_FNS(2) OBLOCK_FNS(3) OBLOCK_FNS(4) OBLOCK_FNS(5) OBLOCK_FNS(6)
#define OBLOCK_ROW(J) {{oblock_##J##1##0, oblock_##J##2##0}, {oblock_##J##1##1, oblock_##J##2##1}}
/* oblocks[NJ - 1][masked][NV - 1] */
static const oblock_fn oblocks[WO_J][2][2] = {OBLOCK_ROW(1), OBLOCK_ROW(2), OBLOCK_ROW(3),
                                              OBLOCK_ROW(4), OBLOCK_ROW(5), OBLOCK_ROW(6)};

static TGT void wgrad_outer_avx2(int k, int crs, const struct rt_wgrad_images *in,
                                 const int32_t *row_at, bool more, float *part)
{
    int32_t lanes[8];
    for (int i = 0; i < 8; i++)
        lanes[i] = i < k % 8 ? -1 : 0;
    const struct wo_images im = {.n = in->n, .oh = in->oh, .ow = in->ow, .k = k, .wq = in->wq,
                                 .xs = in->xs, .dts = in->dys, .x = in->x, .dt = in->dy,
                                 .mask = _mm256_loadu_si256((const __m256i *)lanes)};
    for (int j = 0; j < crs; j += WO_J) {
        const int nj = crs - j < WO_J ? crs - j : WO_J;
        for (int q = 0; q < k; q += 16) {
            const int left = k - q < 16 ? k - q : 16, nv = (left + 7) / 8;
            oblocks[nj - 1][left % 8 != 0][nv - 1](&im, row_at + j, q, more,
                                                   part + (size_t)j * k + q);
        }
    }
}

/* 8 x 8 floats: rows of s (ls apart) to columns of d (ld apart). */
static inline TGT __attribute__((always_inline)) void tr8(const float *s, size_t ls, float *d,
                                                         size_t ld)
{
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(s + i * ls);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    for (int i = 0; i < 8; i++) /* t[i]: column i */
        _mm256_storeu_ps(d + (size_t)i * ld, t[i]);
}

static TGT void transpose_avx2(int k, size_t plane, const float *dy, size_t ls, float *dt)
{
    const int k8 = k / 8 * 8;
    const size_t p8 = plane / 8 * 8;
    for (int q = 0; q < k8; q += 8)
        for (size_t p = 0; p < p8; p += 8)
            tr8(dy + (size_t)q * ls + p, ls, dt + p * k + q, (size_t)k);
    for (int q = 0; q < k; q++) /* the edges */
        for (size_t p = q < k8 ? p8 : 0; p < plane; p++)
            dt[p * k + q] = dy[(size_t)q * ls + p];
}
#endif

/* By positions: dy's rows kept in L1 across the x rows (24 KiB), and the
 * lanes in L2 (k * crs * 8 floats, 128 KiB). By filters: an image's dy in
 * three quarters of L1 as well (24 KiB of a 32 KiB L1, 36 of a 48 KiB
 * one). Bigger layers stay with the BLAS: seedcnn's conv1 (32 filters of
 * 26 x 26) by filters took 2.07 ms a batch with an element-wise transpose
 * against OpenBLAS's 1.24, and 1.02-3.10 with the 8 x 8 one against
 * 1.29-1.57 (alternated runs, this machine's noise). resnet8's 28 -> 14
 * layer (32 filters of 14 x 14, 24.5 KiB) by filters on a 48 KiB L1:
 * 1,033 -> 777 us at 2 threads (bench_ops, a Xeon). */
#define WGRAD_L1 6144
#define WGRAD_ACC 32768

static size_t wgrad_dyt(void)
{
    static size_t floats; /* threads that race here store the same value */
    size_t f = __atomic_load_n(&floats, __ATOMIC_RELAXED);
    if (!f) {
        long l1 = -1;
#ifdef _SC_LEVEL1_DCACHE_SIZE
        l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#endif
        f = (size_t)(l1 >= 16384 ? l1 : 32768) / sizeof(float) * 3 / 4;
        __atomic_store_n(&floats, f, __ATOMIC_RELAXED);
    }
    return f;
}

enum rt_wgrad cpu_wgrad_kind(int k, int crs, int oh, int ow)
{
    const size_t kp = (size_t)k * oh * ow;
    if (k <= 0 || crs <= 0 || oh <= 0 || ow <= 0)
        return RT_WGRAD_NONE;
    /* by filters only (wgrad512.c), and only where 3 lanes in 4 hold a
     * filter: lenet's conv1, 6 filters, ran 175 -> 407 us (bench_ops, 1
     * thread) by filters; its conv2 (16) 372 -> 259, resnet8's c32s2 (32)
     * 899 -> 724 */
    if (cpu_wgrad512())
        return kp <= wgrad_dyt() && 4 * (size_t)k >= 3 * (((size_t)k + 15) / 16 * 16)
                   ? RT_WGRAD_FILTERS
                   : RT_WGRAD_NONE;
    if (!cpu_avx2_kernels())
        return RT_WGRAD_NONE;
    /* the lanes either kernel multiplies, wasted ones included */
    if (((size_t)k + 7) / 8 * 8 * ow < (size_t)k * ((ow + 7) / 8) * 8)
        return kp <= wgrad_dyt() ? RT_WGRAD_FILTERS : RT_WGRAD_NONE;
    return kp <= WGRAD_L1 && (size_t)k * crs * 8 <= WGRAD_ACC ? RT_WGRAD_POSITIONS
                                                              : RT_WGRAD_NONE;
}

void cpu_wgrad_images(int k, int crs, const struct rt_wgrad_images *im, const int32_t *row_at,
                      bool more, float *acc)
{
#ifdef WGRAD_AVX2
    wgrad_avx2(k, crs, im, row_at, more, acc);
#else
    (void)k, (void)crs, (void)im, (void)row_at, (void)more, (void)acc;
    RT_ASSERT(!"cpu_wgrad_images where cpu_wgrad_kind says NONE");
#endif
}

void cpu_wgrad_outer(int k, int crs, const struct rt_wgrad_images *im, const int32_t *row_at,
                     bool more, float *part)
{
    if (cpu_wgrad_outer512(k, crs, im, row_at, more, part))
        return;
#ifdef WGRAD_AVX2
    wgrad_outer_avx2(k, crs, im, row_at, more, part);
#else
    (void)k, (void)crs, (void)im, (void)row_at, (void)more, (void)part;
    RT_ASSERT(!"cpu_wgrad_outer where cpu_wgrad_kind says NONE");
#endif
}

void cpu_transpose(int k, size_t plane, const float *src, size_t ls, float *dt)
{
#ifdef WGRAD_AVX2
    if (cpu_avx2_kernels() || cpu_wgrad512()) { /* (an AVX-512 CPU has AVX2) */
        transpose_avx2(k, plane, src, ls, dt);
        return;
    }
#endif
    for (int q = 0; q < k; q++)
        for (size_t p = 0; p < plane; p++)
            dt[p * k + q] = src[(size_t)q * ls + p];
}

void cpu_wgrad_lanes(int k, int crs, const float *acc, float *part)
{
    for (int q = 0; q < k; q++)
        for (int j = 0; j < crs; j++) {
            const float *l = acc + ((size_t)q * crs + j) * 8;
            part[(size_t)j * k + q] = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
        }
}
