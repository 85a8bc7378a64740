/* conv.c — the cpu backend's 2-D convolution: im2col + SGEMM.
 *
 * Per image n (x_n is c x h x w, y_n is k x oh*ow, col is c*r*s x oh*ow):
 *   forward      col = im2col(x_n);      y_n   = W[k x crs] * col
 *   bwd-data     col = W^T * dy_n;       dx_n  = col2im(col)
 *   bwd-filter   col = im2col(x_n);      dW^T += col * dy_n^T
 * With a batch of at least as many images as threads, images are handed to
 * the threads one at a time, each thread with its own im2col buffer in the
 * workspace and a single-threaded GEMM: the GEMMs of a small network are
 * too small to split well, images are not. A smaller batch runs image by
 * image with a multi-threaded GEMM. Stride-1 layers use the "wide" layout
 * below; a 1x1, stride-1, unpadded filter needs no im2col at all: x_n is
 * its own column matrix. Nothing here allocates: the workspace is sized by
 * cpu_conv2d_workspace. */
#include "config.h"

#include <string.h>

#ifdef RT_HAVE_CBLAS
#ifdef RT_BLAS_BLIS
/* blis.h defines many static inline helpers it does not use */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <blis.h>
#pragma GCC diagnostic pop
#else
#include <cblas.h>
#endif
#endif

#include "cpu-impl.h"
#include "status.h"

#ifdef _OPENMP
#define CPU_SIMD _Pragma("omp simd")
#else
#define CPU_SIMD
#endif

/* Per-thread slices start on a 64-byte line so threads never share one. */
static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

static bool conv_is_pointwise(const struct rt_conv_shape *s)
{
    return s->r == 1 && s->s == 1 && s->stride_h == 1 && s->stride_w == 1 && s->pad_h == 0 &&
           s->pad_w == 0;
}

static size_t conv_crs(const struct rt_conv_shape *s)
{
    return (size_t)s->c * s->r * s->s;
}

static size_t conv_ohw(const struct rt_conv_shape *s) { return (size_t)s->oh * s->ow; }

/* A stride-1 convolution is computed "wide": on an oh x wp grid, wp the
 * padded input width, of which the first ow columns of each row are the
 * output. Then row (c, r, q) of the column matrix is ONE contiguous run of
 * the padded image, starting at (c, r, q): im2col is c*r*s long memcpys and
 * col2im as many long axpys, where the exact layout needs c*r*s*oh short
 * ones (10-30 floats in small nets, where they cost more than the GEMM).
 * The price is (s-1)/ow more GEMM columns, so it is used while that stays
 * under a half, and k*oh short copies of the output (or dy) to or from the
 * wide grid, so only when k < c*r*s: with one input channel and many
 * filters, the exact layout moves less. */
struct conv_layout {
    bool wide;
    size_t hp, wp; /* padded input (wide) */
    size_t len;    /* GEMM columns per image: oh*wp (wide) or oh*ow */
    size_t pad;    /* padded image, plus s floats of slack read past its end */
    size_t col;    /* column matrix, crs x len (0 for pointwise) */
    size_t out;    /* wide output or widened dy, k x len */
    size_t part;   /* a partial dW^T, crs x k */
    size_t off_col, off_out, slice; /* offsets in one thread's slice */
};

static struct conv_layout conv_layout(const struct rt_conv_shape *s)
{
    struct conv_layout l = {0};
    l.wide = s->stride_h == 1 && s->stride_w == 1 && !conv_is_pointwise(s) &&
             2 * (s->s - 1) <= s->ow && (size_t)s->k < conv_crs(s);
    if (l.wide) {
        l.hp = (size_t)s->h + 2 * (size_t)s->pad_h;
        l.wp = (size_t)s->w + 2 * (size_t)s->pad_w;
        l.len = (size_t)s->oh * l.wp;
        l.pad = (size_t)s->c * l.hp * l.wp + (size_t)s->s;
        l.out = (size_t)s->k * l.len;
    } else {
        l.len = conv_ohw(s);
    }
    l.col = conv_is_pointwise(s) ? 0 : conv_crs(s) * l.len;
    l.part = (size_t)s->k * conv_crs(s);
    l.off_col = align16(l.pad);
    l.off_out = l.off_col + align16(l.col);
    l.slice = l.off_out + align16(l.out);
    return l;
}

static bool conv_batch_parallel(int nt, const struct rt_conv_shape *s)
{
    return nt > 1 && s->n >= nt;
}

/* bwd-filter sums images in fixed groups, each into its own partial dW, and
 * adds the partials in group order: the result depends on the thread count
 * only, yet the groups go to whichever thread is free. Several groups per
 * thread, so that a thread the OS puts aside (shared nodes are the rule for
 * ragtag) holds up one group, not half the batch. */
static int conv_groups(int nt, const struct rt_conv_shape *s)
{
    if (!conv_batch_parallel(nt, s))
        return 1;
    /* big filters: one partial per thread, or the workspace balloons */
    int per = (size_t)s->k * conv_crs(s) <= 65536 ? 4 : 1;
    return s->n < per * nt ? s->n : per * nt;
}

/* Workspace: one slice per thread, then one partial dW^T per group. */
size_t cpu_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s)
{
    const struct conv_layout l = conv_layout(s);
    const int nt = cpu_nt(d);
    return (size_t)nt * l.slice + (size_t)conv_groups(nt, s) * align16(l.part);
}

/* The output columns [lo, hi) whose input column ow*sw - pw + q lies inside
 * [0, w); the others read padding. */
static void conv_valid_range(int out, int stride, int pad, int q, int in, int *lo, int *hi)
{
    int a = pad - q; /* need ow*stride >= a */
    int l = a <= 0 ? 0 : (a + stride - 1) / stride;
    int b = in - 1 + pad - q; /* need ow*stride <= b */
    int h = b < 0 ? 0 : b / stride + 1;
    if (h > out)
        h = out;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

static void im2col(const struct rt_conv_shape *s, const float *x, float *col)
{
    const int H = s->h, W = s->w, OH = s->oh, OW = s->ow, R = s->r, S = s->s;
    const int SH = s->stride_h, SW = s->stride_w, PH = s->pad_h, PW = s->pad_w;
    for (int c = 0; c < s->c; c++) {
        const float *xc = x + (size_t)c * H * W;
        for (int r = 0; r < R; r++) {
            for (int q = 0; q < S; q++) {
                float *dst = col + (((size_t)c * R + r) * S + q) * OH * OW;
                int lo, hi;
                conv_valid_range(OW, SW, PW, q, W, &lo, &hi);
                for (int oh = 0; oh < OH; oh++) {
                    float *d = dst + (size_t)oh * OW;
                    int ih = oh * SH - PH + r;
                    if (ih < 0 || ih >= H || lo >= hi) {
                        memset(d, 0, (size_t)OW * sizeof(float));
                        continue;
                    }
                    const float *xr = xc + (size_t)ih * W;
                    for (int ow = 0; ow < lo; ow++)
                        d[ow] = 0.0f;
                    if (SW == 1) {
                        /* rows are short (10-30 floats in small nets): an
                         * inline vector loop beats a call to memcpy */
                        const float *xs = xr + (q - PW);
                        CPU_SIMD
                        for (int ow = lo; ow < hi; ow++)
                            d[ow] = xs[ow];
                    } else {
                        for (int ow = lo; ow < hi; ow++)
                            d[ow] = xr[ow * SW - PW + q];
                    }
                    for (int ow = hi; ow < OW; ow++)
                        d[ow] = 0.0f;
                }
            }
        }
    }
}

/* dx = col2im(col): dx is overwritten; overlapping windows add up. */
static void col2im(const struct rt_conv_shape *s, const float *col, float *dx)
{
    const int H = s->h, W = s->w, OH = s->oh, OW = s->ow, R = s->r, S = s->s;
    const int SH = s->stride_h, SW = s->stride_w, PH = s->pad_h, PW = s->pad_w;
    memset(dx, 0, (size_t)s->c * H * W * sizeof(float));
    for (int c = 0; c < s->c; c++) {
        float *xc = dx + (size_t)c * H * W;
        for (int r = 0; r < R; r++) {
            for (int q = 0; q < S; q++) {
                const float *src = col + (((size_t)c * R + r) * S + q) * OH * OW;
                int lo, hi;
                conv_valid_range(OW, SW, PW, q, W, &lo, &hi);
                if (lo >= hi)
                    continue;
                for (int oh = 0; oh < OH; oh++) {
                    int ih = oh * SH - PH + r;
                    if (ih < 0 || ih >= H)
                        continue;
                    const float *sr = src + (size_t)oh * OW;
                    float *xr = xc + (size_t)ih * W;
                    if (SW == 1) {
                        float *xo = xr + (q - PW);
                        CPU_SIMD
                        for (int ow = lo; ow < hi; ow++)
                            xo[ow] += sr[ow];
                    } else {
                        for (int ow = lo; ow < hi; ow++)
                            xr[ow * SW - PW + q] += sr[ow];
                    }
                }
            }
        }
    }
}

/* xp = x_n zero-padded to c x hp x wp, then s zeros of slack. */
static void pad_image(const struct rt_conv_shape *s, const struct conv_layout *l, const float *x,
                      float *xp)
{
    const size_t H = (size_t)s->h, W = (size_t)s->w, PH = (size_t)s->pad_h,
                 PW = (size_t)s->pad_w;
    for (int c = 0; c < s->c; c++) {
        const float *xc = x + (size_t)c * H * W;
        float *pc = xp + (size_t)c * l->hp * l->wp;
        memset(pc, 0, PH * l->wp * sizeof(float));
        for (size_t h = 0; h < H; h++) {
            float *row = pc + (PH + h) * l->wp;
            memset(row, 0, PW * sizeof(float));
            memcpy(row + PW, xc + h * W, W * sizeof(float));
            memset(row + PW + W, 0, PW * sizeof(float));
        }
        memset(pc + (PH + H) * l->wp, 0, (l->hp - PH - H) * l->wp * sizeof(float));
    }
    memset(xp + (size_t)s->c * l->hp * l->wp, 0, (size_t)s->s * sizeof(float));
}

/* Wide im2col: row (c, r, q) = xp[c][r][q ...] for len floats. */
static void im2col_wide(const struct rt_conv_shape *s, const struct conv_layout *l,
                        const float *xp, float *col)
{
    for (int c = 0; c < s->c; c++)
        for (int r = 0; r < s->r; r++)
            for (int q = 0; q < s->s; q++) {
                const float *src = xp + ((size_t)c * l->hp + r) * l->wp + q;
                float *dst = col + (((size_t)c * s->r + r) * s->s + q) * l->len;
                memcpy(dst, src, l->len * sizeof(float));
            }
}

static void fwd_one(int nt, const struct rt_conv_shape *s, const struct conv_layout *l,
                    const float *x, const float *w, float *y, float *sl)
{
    const int crs = (int)conv_crs(s), len = (int)l->len;
    float *col = sl + l->off_col;
    if (!l->wide) {
        if (conv_is_pointwise(s))
            col = (float *)x;
        else
            im2col(s, x, col);
        cpu_sgemm(nt, false, false, s->k, len, crs, 1.0f, w, crs, col, len, 0.0f, y, len);
        return;
    }
    float *out = sl + l->off_out;
    pad_image(s, l, x, sl);
    im2col_wide(s, l, sl, col);
    cpu_sgemm(nt, false, false, s->k, len, crs, 1.0f, w, crs, col, len, 0.0f, out, len);
    for (int k = 0; k < s->k; k++)
        for (int oh = 0; oh < s->oh; oh++)
            memcpy(y + ((size_t)k * s->oh + oh) * s->ow, out + (size_t)k * l->len + oh * l->wp,
                   (size_t)s->ow * sizeof(float));
}

/* dyw = dy_n on the wide grid, zeros in the columns past ow (so they add
 * nothing to dx or dW). */
static void widen_dy(const struct rt_conv_shape *s, const struct conv_layout *l, const float *dy,
                     float *dyw)
{
    const size_t OW = (size_t)s->ow;
    for (size_t kr = 0; kr < (size_t)s->k * s->oh; kr++) {
        float *d = dyw + kr * l->wp;
        memcpy(d, dy + kr * OW, OW * sizeof(float));
        memset(d + OW, 0, (l->wp - OW) * sizeof(float));
    }
}

/* y += x over n floats (long rows: the BLAS's vector kernel when there is one) */
static void add_row(size_t n, const float *x, float *y)
{
#ifdef RT_HAVE_CBLAS
    cblas_saxpy((int)n, 1.0f, x, 1, y, 1);
#else
    CPU_SIMD
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
#endif
}

static void bwd_data_one(int nt, const struct rt_conv_shape *s, const struct conv_layout *l,
                         const float *dy, const float *w, float *dx, float *sl)
{
    const int crs = (int)conv_crs(s), len = (int)l->len;
    float *col = sl + l->off_col;
    if (!l->wide) {
        if (conv_is_pointwise(s)) {
            cpu_sgemm(nt, true, false, crs, len, s->k, 1.0f, w, crs, dy, len, 0.0f, dx, len);
            return;
        }
        cpu_sgemm(nt, true, false, crs, len, s->k, 1.0f, w, crs, dy, len, 0.0f, col, len);
        col2im(s, col, dx);
        return;
    }
    float *dyw = sl + l->off_out, *dxp = sl;
    widen_dy(s, l, dy, dyw);
    cpu_sgemm(nt, true, false, crs, len, s->k, 1.0f, w, crs, dyw, len, 0.0f, col, len);
    memset(dxp, 0, l->pad * sizeof(float));
    for (int c = 0; c < s->c; c++)
        for (int r = 0; r < s->r; r++)
            for (int q = 0; q < s->s; q++)
                add_row(l->len, col + (((size_t)c * s->r + r) * s->s + q) * l->len,
                        dxp + ((size_t)c * l->hp + r) * l->wp + q);
    for (int c = 0; c < s->c; c++)
        for (int h = 0; h < s->h; h++)
            memcpy(dx + ((size_t)c * s->h + h) * s->w,
                   dxp + ((size_t)c * l->hp + h + s->pad_h) * l->wp + s->pad_w,
                   (size_t)s->w * sizeof(float));
}

/* acct (+)= col(x_n) * dy_n^T, i.e. dW transposed (crs x k); beta 0 for a
 * thread's first image. OpenBLAS runs this orientation ~30% faster than
 * dW = dy_n * col^T on the small-k shapes of small networks (measured on
 * its SkylakeX kernels: 288x32x576 at 115 vs 87 GFLOP/s); the transpose back
 * is one pass over dW. */
static void bwd_filter_one(int nt, const struct rt_conv_shape *s, const struct conv_layout *l,
                           const float *x, const float *dy, float beta, float *sl, float *acct)
{
    const int crs = (int)conv_crs(s), len = (int)l->len;
    float *col = sl + l->off_col;
    if (l->wide) {
        float *dyw = sl + l->off_out;
        pad_image(s, l, x, sl);
        im2col_wide(s, l, sl, col);
        widen_dy(s, l, dy, dyw);
        dy = dyw;
    } else if (conv_is_pointwise(s)) {
        col = (float *)x;
    } else {
        im2col(s, x, col);
    }
    cpu_sgemm(nt, false, true, crs, s->k, len, 1.0f, col, len, dy, len, beta, acct, s->k);
}

/* dw[k][j] = sum over the groups' partials (group order) of part[j][k]. */
static void reduce_dw(const struct rt_conv_shape *s, const float *parts, size_t pstride,
                      int groups, float *dw, size_t lo, size_t hi)
{
    const size_t crs = conv_crs(s), K = (size_t)s->k;
    for (size_t idx = lo; idx < hi; idx++) {
        const size_t k = idx / crs, j = idx % crs;
        float v = 0.0f;
        for (int g = 0; g < groups; g++)
            v += parts[(size_t)g * pstride + j * K + k];
        dw[idx] = v;
    }
}

int cpu_conv2d_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view xv, rt_view wv, rt_view yv,
                   rt_view wsv)
{
    const struct conv_layout l = conv_layout(s);
    const float *x = cpu_f(xv), *w = cpu_f(wv);
    float *y = cpu_f(yv), *ws = cpu_f(wsv);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    int nt = cpu_nt(d);
    if (!conv_batch_parallel(nt, s)) {
        for (int i = 0; i < s->n; i++)
            fwd_one(nt, s, &l, x + i * xs, w, y + i * ys, ws);
        return RT_OK;
    }
    cpu_blas_before_parallel();
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
#endif
    for (int i = 0; i < s->n; i++) /* dynamic: a preempted thread holds up one image */
        fwd_one(1, s, &l, x + i * xs, w, y + i * ys, ws + (size_t)cpu_thread_num() * l.slice);
    return RT_OK;
}

int cpu_conv2d_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dyv, rt_view wv,
                        rt_view dxv, rt_view wsv)
{
    const struct conv_layout l = conv_layout(s);
    const float *dy = cpu_f(dyv), *w = cpu_f(wv);
    float *dx = cpu_f(dxv), *ws = cpu_f(wsv);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    int nt = cpu_nt(d);
    if (!conv_batch_parallel(nt, s)) {
        for (int i = 0; i < s->n; i++)
            bwd_data_one(nt, s, &l, dy + i * ys, w, dx + i * xs, ws);
        return RT_OK;
    }
    cpu_blas_before_parallel();
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
#endif
    for (int i = 0; i < s->n; i++)
        bwd_data_one(1, s, &l, dy + i * ys, w, dx + i * xs,
                     ws + (size_t)cpu_thread_num() * l.slice);
    return RT_OK;
}

int cpu_conv2d_bwd_filter(rt_dev *d, const struct rt_conv_shape *s, rt_view xv, rt_view dyv,
                          rt_view dwv, rt_view wsv)
{
    float *dw = cpu_f(dwv);
    const size_t wsz = (size_t)s->k * conv_crs(s);
    if (s->n == 0) { /* no samples, no gradient; x, dy, ws are unchecked */
        memset(dw, 0, wsz * sizeof(float));
        return RT_OK;
    }
    const struct conv_layout l = conv_layout(s);
    const float *x = cpu_f(xv), *dy = cpu_f(dyv);
    float *ws = cpu_f(wsv);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    const int nt = cpu_nt(d), groups = conv_groups(nt, s);
    const size_t pstride = align16(l.part);
    float *parts = ws + (size_t)nt * l.slice;
    if (!conv_batch_parallel(nt, s)) {
        for (int i = 0; i < s->n; i++)
            bwd_filter_one(nt, s, &l, x + i * xs, dy + i * ys, i ? 1.0f : 0.0f, ws, parts);
        reduce_dw(s, parts, pstride, 1, dw, 0, wsz);
        return RT_OK;
    }
    cpu_blas_before_parallel();
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        const int t = cpu_thread_num(), tn = cpu_num_threads();
        float *sl = ws + (size_t)t * l.slice;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int g = 0; g < groups; g++) {
            const int lo = (int)((long)s->n * g / groups), hi = (int)((long)s->n * (g + 1) / groups);
            float *acct = parts + (size_t)g * pstride;
            for (int i = lo; i < hi; i++)
                bwd_filter_one(1, s, &l, x + i * xs, dy + i * ys, i > lo ? 1.0f : 0.0f, sl, acct);
            if (lo == hi)
                memset(acct, 0, wsz * sizeof(float));
        } /* the end of the loop is a barrier: all partials are in */
        reduce_dw(s, parts, pstride, groups, dw, wsz * t / tn, wsz * (t + 1) / tn);
    }
    return RT_OK;
}
