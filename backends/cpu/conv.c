/* conv.c — the cpu backend's 2-D convolution: im2col + SGEMM, and
 * Winograd F(2x2, 3x3) for 3x3 stride-1 layers with 8+ channels in and out
 * (see "Winograd" below; it halves seedcnn conv2's time).
 *
 * Per image n (x_n is c x h x w, y_n is k x oh*ow, col is c*r*s x oh*ow):
 *   forward      col = im2col(x_n);      y_n   = W[k x crs] * col
 *   bwd-data     col = W^T * dy_n;       dx_n  = col2im(col)
 *   bwd-filter   col = im2col(x_n);      dW^T += col * dy_n^T
 * On the wide layout (below) bwd-data runs by phases of dx instead, one
 * GEMM a phase reading dy in place, each element of dx written once
 * (conv_dgrad.c).
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

#include "cpu-blas.h"

#include "cpu-impl.h"
#include "status.h"

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

/* A convolution is computed "wide": on an oh x wq grid, wq the width of
 * the padded input's phase planes (below), of which the first ow columns
 * of each row are the output. Stride 1: the one phase plane is the padded
 * image, and row (c, r, q) of the column matrix is ONE contiguous run of
 * it, starting at (c, r, q): im2col is c*r*s long memcpys and col2im as
 * many long axpys, where the exact layout needs c*r*s*oh short ones (10-30
 * floats in small nets, where they cost more than the GEMM). Stride sh x
 * sw: the padded image is first split into sh*sw phase planes, plane (a, b)
 * holding its pixels (sh i + a, sw j + b) at (i, j), hq x wq each; tap
 * (r, q) of output (oh, ow) reads plane (r % sh, q % sw) at (oh + r / sh,
 * ow + q / sw), so its row is again one contiguous run, and the strided
 * gather happens once per pixel, not once per tap (resnet8's stride-2
 * layers). The price is wq - ow more GEMM columns per output row, so it is
 * used while that stays under a half, and k*oh
 * short copies of the output (or dy) to or from the wide grid, so only when
 * k < c*r*s: with one input channel and many filters, the exact layout
 * moves less. Valid outputs
 * never read past their plane: oh - 1 + (r - 1) / sh < hq = ceil(hp / sh),
 * and the same across. */
struct conv_layout {
    bool wide;
    size_t hp, wp; /* padded input (wide) */
    int sh, sw;    /* strides: sh x sw phase planes */
    size_t hq, wq; /* one phase plane */
    size_t len;    /* GEMM columns per image: oh*wq (wide) or oh*ow */
    size_t pad;    /* phase planes, plus s floats of slack read past their end */
    size_t col;    /* column matrix, crs x len (0 for pointwise) */
    size_t out;    /* wide output or widened dy, k x len */
    size_t part;   /* a partial dW^T, crs x k */
    size_t dyt;    /* dy transposed, len x k, for the BLAS-free filter gradient */
    size_t off_col, off_out, off_dyt, slice; /* offsets in one thread's slice */
    size_t prep;           /* floats made once a call from the filters (conv_prep) */
    struct cpu_dgrad dg;   /* the data gradient's phases (wide; conv_dgrad.c) */
};

/* Stride 1 without padding: x's planes are the padded ones. */
static bool wgrad_in_place(const struct rt_conv_shape *s, const struct conv_layout *l)
{
    return l->sh == 1 && l->sw == 1 && !s->pad_h && !s->pad_w && !conv_is_pointwise(s);
}

/* The filters' gradient read in place (wgrad.c): on the wide layout, or on
 * x itself, the column rows are runs of the image. */
static enum rt_wgrad conv_wgrad(const struct rt_conv_shape *s, const struct conv_layout *l)
{
    return l->wide || wgrad_in_place(s, l)
               ? cpu_wgrad_kind(s->k, (int)conv_crs(s), s->oh, s->ow)
               : RT_WGRAD_NONE;
}

/* What it stages an image: the padded planes unless x's own serve, dy
 * transposed when it sums by filters. */
static size_t wgrad_stage(const struct rt_conv_shape *s, const struct conv_layout *l)
{
    return (wgrad_in_place(s, l) ? 0 : cpu_align16(l->pad)) +
           (conv_wgrad(s, l) == RT_WGRAD_FILTERS ? cpu_align16((size_t)s->k * conv_ohw(s)) : 0);
}

/* It takes a few images at a time: at most 8, their staging in 128 KiB,
 * and by positions their dy in 16 KiB (L1: every pair of column rows
 * reads it again). */
static int wgrad_batch(const struct rt_conv_shape *s, const struct conv_layout *l)
{
    const size_t st = wgrad_stage(s, l);
    size_t n = st ? 32768 / st : 8;
    if (conv_wgrad(s, l) == RT_WGRAD_POSITIONS) {
        const size_t m = 4096 / ((size_t)s->k * conv_ohw(s) + 1);
        n = m < n ? m : n;
    }
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* By positions, the lanes first (k x crs x 8 floats); then the row starts
 * and the staged images. */
static size_t wgrad_lanes(const struct rt_conv_shape *s, const struct conv_layout *l)
{
    return conv_wgrad(s, l) == RT_WGRAD_POSITIONS ? cpu_align16((size_t)s->k * conv_crs(s) * 8) : 0;
}

static size_t wgrad_floats(const struct rt_conv_shape *s, const struct conv_layout *l)
{
    return wgrad_lanes(s, l) + cpu_align16(conv_crs(s)) +
           (size_t)wgrad_batch(s, l) * wgrad_stage(s, l);
}

static struct conv_layout conv_layout(const struct rt_conv_shape *s)
{
    struct conv_layout l = {0};
    l.sh = s->stride_h;
    l.sw = s->stride_w;
    l.hp = (size_t)s->h + 2 * (size_t)s->pad_h;
    l.wp = (size_t)s->w + 2 * (size_t)s->pad_w;
    l.hq = (l.hp + (size_t)l.sh - 1) / (size_t)l.sh;
    l.wq = (l.wp + (size_t)l.sw - 1) / (size_t)l.sw;
    /* extra columns: up to half of ow, at any stride. Strided layers had
     * an eighth, from when resnet8's 14 -> 7 layer (8 columns for 7) ran
     * 5-10% slower wide; since the filter gradient reads the wide layout
     * in place (wgrad.c) it runs 20% faster wide (bench_ops, its three
     * ops: 3.94 -> 3.19 ms at 2 threads, 7.42 -> 5.93 at 1) */
    const size_t extra = (l.wq - (size_t)s->ow) * 2;
    l.wide = !conv_is_pointwise(s) && s->ow > 0 && extra <= (size_t)s->ow &&
             (size_t)s->k < conv_crs(s) && l.sh <= CPU_DGRAD_MAX_STRIDE &&
             l.sw <= CPU_DGRAD_MAX_STRIDE;
    if (l.wide) {
        l.len = (size_t)s->oh * l.wq;
        l.pad = (size_t)s->c * l.sh * l.sw * l.hq * l.wq + (size_t)s->s;
        l.out = (size_t)s->k * l.len;
    } else {
        l.len = conv_ohw(s);
    }
    l.col = conv_is_pointwise(s) ? 0 : conv_crs(s) * l.len;
    /* the filters' gradient read in place keeps its lanes, row starts and
     * staged images there instead (wgrad.c) */
    if (conv_wgrad(s, &l) != RT_WGRAD_NONE && l.col < wgrad_floats(s, &l))
        l.col = wgrad_floats(s, &l);
    l.part = (size_t)s->k * conv_crs(s);
    l.off_col = cpu_align16(l.pad);
    l.dyt = conv_wgrad(s, &l) == RT_WGRAD_NONE && cpu_avx2_kernels() ? l.len * (size_t)s->k : 0;
    l.off_out = l.off_col + cpu_align16(l.col);
    l.off_dyt = l.off_out + cpu_align16(l.out);
    l.slice = l.off_dyt + cpu_align16(l.dyt);
    if (l.wide) {
        cpu_dgrad_plan(s, &l.dg);
        if (l.dg.slice > l.slice)
            l.slice = cpu_align16(l.dg.slice);
        l.prep = l.dg.filt + l.dg.at > cpu_align16(conv_crs(s)) ? l.dg.filt + l.dg.at
                                                            : cpu_align16(conv_crs(s));
    }
    return l;
}

/* Where phase plane (a, b) of channel c starts in the wide layout. */
static size_t phase_at(const struct conv_layout *l, int c, int a, int b)
{
    return (((size_t)c * l->sh + a) * l->sw + b) * l->hq * l->wq;
}

/* Where row (c, r, q) of the wide column matrix starts in the phase planes;
 * stride 1 without the divisions, which come once per row (lenet's conv2
 * has 150 rows an image). */
static size_t wide_row_at(const struct conv_layout *l, int c, int r, int q)
{
    if (l->sh == 1 && l->sw == 1)
        return ((size_t)c * l->hq + (size_t)r) * l->wq + (size_t)q;
    return phase_at(l, c, r % l->sh, q % l->sw) + (size_t)(r / l->sh) * l->wq +
           (size_t)(q / l->sw);
}

/* The fused epilogue of conv2d_fwd_bias_act, y = act(y + b[k]), applied
 * to each image's output while it is in cache; b NULL: none (conv2d_fwd). */
struct conv_epi {
    const float *b;
    enum rt_act kind;
    float alpha;
};

/* The epilogue on output plane k (hw floats) of one image, copied from src
 * on the way (src may be y). */
CPU_CLONES
static void epi_plane(const struct conv_epi *e, int k, const float *src, float *y, size_t hw)
{
    if (e && e->b)
        cpu_bias_act(e->kind, e->alpha, e->b + k, 0, src, y, hw);
    else if (src != y)
        memcpy(y, src, hw * sizeof(float));
}

/* The wide rows' first ow columns to y, through the epilogue: one clone
 * call per image, not one per row of 10-30 floats. */
CPU_CLONES
static void epi_wide(const struct rt_conv_shape *s, const struct conv_layout *l,
                     const struct conv_epi *e, const float *out, float *y)
{
    const size_t ow = (size_t)s->ow;
    for (int k = 0; k < s->k; k++)
        for (int oh = 0; oh < s->oh; oh++) {
            const float *src = out + (size_t)k * l->len + oh * l->wq;
            float *dst = y + ((size_t)k * s->oh + oh) * ow;
            if (e && e->b)
                cpu_bias_act(e->kind, e->alpha, e->b + k, 0, src, dst, ow);
            else
                cpu_copy_row(dst, src, ow);
        }
}

static bool conv_batch_parallel(int nt, const struct rt_conv_shape *s)
{
    return nt > 1 && s->n >= nt;
}

/* bwd-filter sums images in fixed groups, each into its own partial dW, and
 * adds the partials in group order: the result depends on the thread count
 * only, yet the groups go to whichever thread is free (after each thread's
 * own run of them: cpu_runs). Several groups per
 * thread, so that a thread the OS puts aside (shared nodes are the rule for
 * ragtag) holds up one group, not half the batch. */
static int conv_groups(int nt, const struct rt_conv_shape *s)
{
    if (!conv_batch_parallel(nt, s))
        return 1;
    /* Filters up to 64 K floats: 2 groups a thread. Each group costs a
     * partial dW written and summed and the set-up of its accumulation:
     * bench_ops cpu 2, bwd-filter, 8 groups a thread -> 2: lenet conv2
     * 198-200 -> 180-182 us, resnet8's c32s2 1,131-1,138 -> 876-884, c64
     * (4 -> 2) 1,513-1,523 -> 1,422-1,425; one group a thread was faster
     * still on a quiet machine (lenet conv2 177 us), but a preempted
     * thread would then hold up half the batch. Big filters: one partial
     * per thread, or the workspace balloons. */
    const size_t wsz = (size_t)s->k * conv_crs(s);
    int per = wsz <= 65536 ? 2 : 1;
    return s->n < per * nt ? s->n : per * nt;
}

static bool wino_ok(int nt, const struct rt_conv_shape *s);
static size_t wino_workspace(int nt, const struct rt_conv_shape *s);

/* Workspace: one slice per thread, then one partial dW^T per group, then
 * what conv_prep makes (or the Winograd path's, below). */
size_t cpu_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s)
{
    const int nt = cpu_nt(d);
    if (wino_ok(nt, s))
        return wino_workspace(nt, s);
    const struct conv_layout l = conv_layout(s);
    return (size_t)nt * l.slice + (size_t)conv_groups(nt, s) * cpu_align16(l.part) + l.prep;
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
                        cpu_zero_row(d, (size_t)OW);
                        continue;
                    }
                    const float *xr = xc + (size_t)ih * W;
                    cpu_zero_row(d, (size_t)lo);
                    if (SW == 1) /* rows are short (10-30 floats in small nets) */
                        cpu_copy_row(d + lo, xr + (q - PW) + lo, (size_t)(hi - lo));
                    else
                        for (int ow = lo; ow < hi; ow++)
                            d[ow] = xr[ow * SW - PW + q];
                    cpu_zero_row(d + hi, (size_t)(OW - hi));
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

/* One row of an image (w floats) into the phase rows it feeds: padded
 * column pw + iw goes to phase (pw + iw) % sw, at (pw + iw) / sw; phase b's
 * row is at row + b * ps. Stride 2 splits even and odd columns in one
 * vector loop; the others are rare. */
CPU_CLONES
static void phase_split_row(const float *x, int w, int pw, int sw, float *row, size_t ps)
{
    if (sw == 2) {
        /* x[2m] and x[2m + 1] land at column m + pw / 2 of one phase and
         * m + (pw + 1) / 2 of the other */
        float *ev = row + (pw & 1) * ps + pw / 2, *od = row + !(pw & 1) * ps + (pw + 1) / 2;
        const int m2 = w / 2;
        CPU_SIMD
        for (int m = 0; m < m2; m++) {
            ev[m] = x[2 * m];
            od[m] = x[2 * m + 1];
        }
        if (w & 1)
            ev[m2] = x[w - 1];
        return;
    }
    for (int iw = 0; iw < w; iw++)
        row[(size_t)((pw + iw) % sw) * ps + (size_t)((pw + iw) / sw)] = x[iw];
}

/* xp = x_n zero-padded and split into its phase planes (conv_layout), then
 * s zeros of slack. Stride 1: the padded image itself, whose borders alone
 * are zeroed. */
static void pad_image(const struct rt_conv_shape *s, const struct conv_layout *l, const float *x,
                      float *xp)
{
    const size_t H = (size_t)s->h, W = (size_t)s->w, PH = (size_t)s->pad_h,
                 PW = (size_t)s->pad_w;
    if (l->sh > 1 || l->sw > 1) {
        const size_t ps = l->hq * l->wq;
        memset(xp, 0, l->pad * sizeof(float));
        for (int c = 0; c < s->c; c++)
            for (size_t h = 0; h < H; h++) {
                const size_t ih = PH + h;
                float *row = xp + phase_at(l, c, (int)(ih % (size_t)l->sh), 0) +
                             ih / (size_t)l->sh * l->wq;
                phase_split_row(x + ((size_t)c * H + h) * W, s->w, s->pad_w, l->sw, row, ps);
            }
        return;
    }
    for (int c = 0; c < s->c; c++) {
        const float *xc = x + (size_t)c * H * W;
        float *pc = xp + (size_t)c * l->hp * l->wp;
        memset(pc, 0, PH * l->wp * sizeof(float));
        for (size_t h = 0; h < H; h++) {
            float *row = pc + (PH + h) * l->wp;
            cpu_zero_row(row, PW);
            cpu_copy_row(row + PW, xc + h * W, W);
            cpu_zero_row(row + PW + W, PW);
        }
        memset(pc + (PH + H) * l->wp, 0, (l->hp - PH - H) * l->wp * sizeof(float));
    }
    memset(xp + (size_t)s->c * l->hp * l->wp, 0, (size_t)s->s * sizeof(float));
}

/* Wide im2col: row (c, r, q) = the run of len floats at wide_row_at. */
static void im2col_wide(const struct rt_conv_shape *s, const struct conv_layout *l,
                        const float *xp, float *col)
{
    for (int c = 0; c < s->c; c++)
        for (int r = 0; r < s->r; r++)
            for (int q = 0; q < s->s; q++) {
                float *dst = col + (((size_t)c * s->r + r) * s->s + q) * l->len;
                memcpy(dst, xp + wide_row_at(l, c, r, q), l->len * sizeof(float));
            }
}

/* C = op(A) B, beta 0: on one thread (an image of the batch per thread)
 * the small-GEMM kernel, which reads both in place; else the BLAS split
 * over nt threads. */
static void conv_gemm(int nt, bool ta, int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float *c, int ldc)
{
    if (nt == 1)
        cpu_gemm_small(ta, m, n, k, a, lda, b, ldb, c, ldc);
    else
        cpu_sgemm(nt, ta, false, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

/* What an image's pass reads that depends on the shape and filters alone,
 * made once a call (thread t of tn its share; a barrier after it): on the
 * wide layout, the forward's column rows' starts in the phase planes (the
 * divisions cost 9% of a strided forward made per image), the data
 * gradient's filters by phase and their row starts (conv_dgrad.c). */
static void conv_prep(const struct rt_conv_shape *s, const struct conv_layout *l, bool bwd,
                      const float *w, float *prep, int t, int tn)
{
    if (!l->wide)
        return;
    if (bwd) {
        cpu_dgrad_filters(s, &l->dg, w, s->c * t / tn, s->c * (t + 1) / tn, prep,
                          (int32_t *)(prep + l->dg.filt));
        return;
    }
    RT_ASSERT(l->pad < INT32_MAX);
    int32_t *at = (int32_t *)prep;
    if (t == 0)
        for (int c = 0, j = 0; c < s->c; c++)
            for (int r = 0; r < s->r; r++)
                for (int q = 0; q < s->s; q++)
                    at[j++] = (int32_t)wide_row_at(l, c, r, q);
}

/* out = w col(xp) with col's rows read where they lie in xp (their
 * starts in at, crs of them); the same FMA chains as through col: the same
 * bits. False where the kernel does not run here. */
static bool gemm_in_place(const struct rt_conv_shape *s, const struct conv_layout *l,
                          const float *w, const float *xp, const int32_t *at, float *out)
{
    const int crs = (int)conv_crs(s);
    return cpu_gemm_small_rows(s->k, (int)l->len, crs, w, crs, xp, at, out, (int)l->len);
}

static void fwd_one(int nt, const struct rt_conv_shape *s, const struct conv_layout *l,
                    const struct conv_epi *e, const float *x, const float *w,
                    const float *prep, float *y, float *sl)
{
    const int crs = (int)conv_crs(s), len = (int)l->len;
    float *col = sl + l->off_col;
    if (!l->wide) {
        if (conv_is_pointwise(s))
            col = (float *)x;
        else
            im2col(s, x, col);
        conv_gemm(nt, false, s->k, len, crs, w, crs, col, len, y, len);
        if (e && e->b)
            for (int k = 0; k < s->k; k++)
                epi_plane(e, k, y + (size_t)k * len, y + (size_t)k * len, (size_t)len);
        return;
    }
    float *out = sl + l->off_out;
    pad_image(s, l, x, sl);
    if (nt > 1 || !gemm_in_place(s, l, w, sl, (const int32_t *)prep, out)) {
        im2col_wide(s, l, sl, col);
        conv_gemm(nt, false, s->k, len, crs, w, crs, col, len, out, len);
    }
    epi_wide(s, l, e, out, y);
}

/* dyw = dy_n on the wide grid, zeros in the columns past ow (so they add
 * nothing to dx or dW). */
static void widen_dy(const struct rt_conv_shape *s, const struct conv_layout *l, const float *dy,
                     float *dyw)
{
    const size_t OW = (size_t)s->ow;
    for (size_t kr = 0; kr < (size_t)s->k * s->oh; kr++) {
        float *d = dyw + kr * l->wq;
        cpu_copy_row(d, dy + kr * OW, OW);
        cpu_zero_row(d + OW, l->wq - OW);
    }
}

static void bwd_data_one(int nt, const struct rt_conv_shape *s, const struct conv_layout *l,
                         const struct conv_epi *e, const float *dy, const float *w,
                         const float *prep, float *dx, float *sl)
{
    (void)e;
    const int crs = (int)conv_crs(s), len = (int)l->len;
    float *col = sl + l->off_col;
    if (!l->wide) {
        if (conv_is_pointwise(s)) {
            conv_gemm(nt, true, crs, len, s->k, w, crs, dy, len, dx, len);
            return;
        }
        conv_gemm(nt, true, crs, len, s->k, w, crs, dy, len, col, len);
        col2im(s, col, dx);
        return;
    }
    /* wide: by phases, one image on this thread (conv_dgrad.c) */
    cpu_dgrad_image(s, &l->dg, prep, (const int32_t *)(prep + l->dg.filt), dy, dx, sl);
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
    if (nt == 1 && l->dyt) { /* dy transposed, then the outer-product kernel */
        float *dyt = sl + l->off_dyt;
        cpu_transpose(s->k, (size_t)len, dy, (size_t)len, dyt);
        cpu_gemm_small_acc(false, crs, s->k, len, col, len, dyt, s->k, beta != 0.0f, acct, s->k);
        return;
    }
    cpu_sgemm(nt, false, true, crs, s->k, len, 1.0f, col, len, dy, len, beta, acct, s->k);
}

/* acct = the sum over images [lo, hi) of col(x_i) dy_i^T, as above; on one
 * thread, read in place (conv_wgrad, wgrad.c) where it can. */
static void bwd_filter_images(int nt, const struct rt_conv_shape *s, const struct conv_layout *l,
                              const float *x, const float *dy, int lo, int hi, float *sl,
                              float *acct)
{
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    const int crs = (int)conv_crs(s);
    const enum rt_wgrad kind = nt > 1 ? RT_WGRAD_NONE : conv_wgrad(s, l);
    if (kind == RT_WGRAD_NONE) {
        for (int i = lo; i < hi; i++)
            bwd_filter_one(nt, s, l, x + i * xs, dy + i * ys, i > lo ? 1.0f : 0.0f, sl, acct);
        return;
    }
    float *acc = sl + l->off_col;
    int32_t *row_at = (int32_t *)(acc + wgrad_lanes(s, l));
    float *stage = acc + wgrad_lanes(s, l) + cpu_align16((size_t)crs);
    RT_ASSERT(l->pad < INT32_MAX);
    for (int c = 0, j = 0; c < s->c; c++)
        for (int r = 0; r < s->r; r++)
            for (int q = 0; q < s->s; q++)
                row_at[j++] = (int32_t)wide_row_at(l, c, r, q);
    const bool in_place = wgrad_in_place(s, l), by_filters = kind == RT_WGRAD_FILTERS;
    const int batch = wgrad_batch(s, l);
    const size_t st = wgrad_stage(s, l), plane = conv_ohw(s);
    const size_t dto = in_place ? 0 : cpu_align16(l->pad); /* dy^T after the planes */
    struct rt_wgrad_images im = {.oh = s->oh, .ow = s->ow, .wq = l->wq,
                                 .xs = in_place ? xs : st, .dys = by_filters ? st : ys};
    for (int i = lo; i < hi; i += im.n) {
        im.n = hi - i < batch ? hi - i : batch;
        for (int m = 0; m < im.n; m++) {
            if (!in_place)
                pad_image(s, l, x + (size_t)(i + m) * xs, stage + m * st);
            if (by_filters)
                cpu_transpose(s->k, plane, dy + (size_t)(i + m) * ys, plane, stage + m * st + dto);
        }
        im.x = in_place ? x + (size_t)i * xs : stage;
        im.dy = by_filters ? stage + dto : dy + (size_t)i * ys;
        if (by_filters)
            cpu_wgrad_outer(s->k, crs, &im, row_at, i > lo, acct);
        else
            cpu_wgrad_images(s->k, crs, &im, row_at, i > lo, acc);
    }
    if (hi > lo && !by_filters)
        cpu_wgrad_lanes(s->k, crs, acc, acct);
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

/* ---- Winograd F(2x2, 3x3) ------------------------------------------------------
 * A 3x3, stride-1 convolution with enough channels on both sides runs as
 * Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, 2016): the output
 * is cut into 2x2 tiles, tile (a, b) reading the 4x4 input patch at padded
 * position (2a, 2b), and
 *   forward      y_tile = A^T [ U ⊙ V ] A,  U = G g G^T,  V = B^T d B
 * with the sum over input channels inside the product: for each of the 16
 * transformed positions xi, M[xi] (k x tiles) = U[xi] (k x c) * V[xi]
 * (c x tiles), a GEMM with all the tiles of a chunk of images as columns.
 * That is 16 multiplies per 4 outputs where direct convolution needs 36.
 * The two backward ops are the exact derivatives of that computation:
 *   bwd-data     dM = A dy_tile A^T;  dV[xi] = U[xi]^T dM[xi];
 *                dx += B dV B^T scattered over the overlapping patches
 *   bwd-filter   dU[xi] = sum over tiles of dM[xi] V[xi]^T;  dw = G^T dU G
 * Outputs past oh x ow (odd sizes) have dy = 0, and patch reads past the
 * padded input are zeros, so any size and padding works. The transforms
 * only add, subtract and halve: the float32 error stays close to that of
 * the direct sum (tests/test_cpu_ops.c holds it to 1e-5 relative).
 *
 * Work is cut into chunks of whole images (about WG_TILES tiles, so the
 * GEMMs are wide enough while V and M stay in L2: per image for seedcnn's
 * 24 x 24 outputs), a multiple of 4 chunks with the images spread evenly
 * (wino_balance); the chunking depends on the shape only, so forward and
 * bwd-data repeat bit for bit at any thread count, and bwd-filter sums
 * chunks in fixed groups (conv_groups) like the im2col path. Workspace:
 * U (16 k c), one slice per thread (V, M, and scratch rows), then one
 * partial dU per group. */

#ifndef WG_TILES
#define WG_TILES 256
#endif
#define WG_CHUNK_FLOATS (384 * 1024)
#define WG_MIN_TILES 128

/* RT_CPU_NO_WINOGRAD (a -D when building) turns the path off, to compare. */
static bool wino_ok(int nt, const struct rt_conv_shape *s)
{
#ifdef RT_CPU_NO_WINOGRAD
    return false;
#endif
    return s->r == 3 && s->s == 3 && s->stride_h == 1 && s->stride_w == 1 && s->c >= 8 &&
           s->k >= 8 && s->oh >= 2 && s->ow >= 2 && s->n > 0 && (nt == 1 || s->n >= nt);
}

/* The stride of U and dU from one xi to the next: k c and a cache line
 * more. At exactly k c (16 KiB for 64 x 64) the 16 (or 16 x groups) values
 * of one filter would sit in one L1 set, and wino_filter_grad's reads of
 * them thrashed it (resnet8's 64-channel layers: 90% of the loop's time
 * on that load). */
static size_t wino_es(const struct rt_conv_shape *s) { return (size_t)s->k * s->c + 16; }

struct wino_layout {
    int th, tw;       /* tiles per image: ceil(oh/2) x ceil(ow/2) */
    size_t tpi;       /* tiles per image */
    int ipc;          /* images in the largest chunk */
    int chunks;       /* chunk ch: images [n ch / chunks, n (ch + 1) / chunks) */
    size_t pr, pc;    /* padded tile-grid image: 2th+2 x 2tw+2 */
    int twv;          /* tw rounded up to WG_VW */
    size_t pcs;       /* row stride of the bwd-data grid */
    size_t ldt;       /* row stride of V and M: the largest chunk's tiles + slack */
    size_t u;         /* 16 es: U, or a partial dU */
    size_t vxs, mxs;  /* V's and M's stride from one xi to the next */
    size_t v, m;      /* 16 vxs, 16 mxs */
    size_t off_m, off_pad, off_tmp, off_g, off_idx, off_vt, slice;
    bool w512;        /* the transforms in AVX-512 registers (wino512.c) */
    struct cpu_wino512_plane p512;
};

/* The transforms' vector loops over a row of tiles run a multiple of WG_VW
 * tiles (no scalar tail, which costs as much as the vector part when a row
 * has 12 tiles): the extra lanes read and write slack kept for them in the
 * workspace, or in the row of tiles after, which is written later. */
#define WG_VW 8
static size_t wg_round(size_t n) { return (n + WG_VW - 1) / WG_VW * WG_VW; }
/* Tiles of V transposed at a time for the filters' gradient (64 KiB for
 * 64 channels, in L2): blocks of 64 ran 5% slower than 256, which loads
 * and stores the sums in dU a quarter as often; 512 and more, no faster. */
#ifndef WG_VT
#define WG_VT 256
#endif

/* The chunk count rounded up to a multiple of WG_BALANCE, the images
 * spread evenly over the chunks: with 2 or 4 threads (and bwd-filter's
 * conv_groups) every thread gets the same number of images. Before, at 2
 * threads, resnet8's 32- and 64-channel layers had 13 chunks of up to 5
 * images (35 images against 29) and 6 of up to 12 (36 against 28): one
 * thread did 9-12% more than half. The cut depends on the shape only, not
 * on the thread count: forward and bwd-data stay the same bits at any
 * thread count. */
#define WG_BALANCE 4
static void wino_balance(int n, struct wino_layout *l)
{
    int chunks = (n + l->ipc - 1) / l->ipc;
    chunks = (chunks + WG_BALANCE - 1) / WG_BALANCE * WG_BALANCE;
    if (chunks > n)
        chunks = n > 0 ? n : 1;
    l->chunks = chunks;
    l->ipc = (n + chunks - 1) / chunks; /* <= the ipc asked for: the workspace does not grow */
    if (l->ipc < 1)
        l->ipc = 1;
}

/* Images [*i0, *i1) of chunk ch. */
static void wino_chunk_images(int n, const struct wino_layout *l, int ch, int *i0, int *i1)
{
    *i0 = (int)((long)n * ch / l->chunks);
    *i1 = (int)((long)n * (ch + 1) / l->chunks);
}

static struct wino_layout wino_layout(const struct rt_conv_shape *s)
{
    struct wino_layout l = {0};
    l.th = (s->oh + 1) / 2;
    l.tw = (s->ow + 1) / 2;
    l.tpi = (size_t)l.th * l.tw;
    l.ipc = l.tpi >= WG_TILES ? 1 : (int)(WG_TILES / l.tpi);
    /* and V + M (16 (c + k) T floats) within about 1.5 MiB, an L2's worth,
     * unless that leaves GEMMs narrower than WG_MIN_TILES (deep layers on
     * small images: there the width matters more) */
    const size_t cap = WG_CHUNK_FLOATS / (16 * ((size_t)s->c + s->k) * l.tpi);
    if ((size_t)l.ipc > cap)
        l.ipc = cap > 0 ? (int)cap : 1;
    if ((size_t)l.ipc * l.tpi < WG_MIN_TILES)
        l.ipc = (int)((WG_MIN_TILES + l.tpi - 1) / l.tpi);
    if (l.ipc > s->n)
        l.ipc = s->n > 0 ? s->n : 1;
    /* Room for this many images a chunk: it grows with n, and so must the
     * workspace (the model sizes it for its largest batch). The balanced
     * ipc is at most this, but not monotonic: 40 images fill fuller chunks
     * than 50 (4 of 10 against 8 of 7). */
    const int room = l.ipc;
    wino_balance(s->n, &l);
    l.pr = 2 * (size_t)l.th + 2;
    l.pc = 2 * (size_t)l.tw + 2;
    l.twv = (int)wg_round((size_t)l.tw);
    l.pcs = 2 * wg_round((size_t)l.tw + 1);
    l.ldt = l.tpi * (size_t)room + WG_VW;
    l.u = 16 * wino_es(s);
    l.w512 = cpu_wino512_fits(s->w, s->ow);
    if (l.w512) {
        l.p512 = (struct cpu_wino512_plane){.h = s->h, .w = s->w, .ph = s->pad_h,
                                            .pw = s->pad_w, .oh = s->oh, .ow = s->ow,
                                            .th = l.th, .tw = l.tw};
        cpu_wino512_plan(&l.p512);
    }
    /* a cache line more than c ldt: the 16 streams of a transform would
     * otherwise often sit a multiple of 4 KiB apart and fight for the same
     * L1 sets (seedcnn: 32 x 160 floats = 20 KiB) */
    l.vxs = (size_t)s->c * l.ldt + 16;
    l.mxs = (size_t)s->k * l.ldt + 16;
    l.v = 16 * l.vxs;
    l.m = 16 * l.mxs;
    l.off_m = cpu_align16(l.v);
    l.off_pad = l.off_m + cpu_align16(l.m);
    l.off_tmp = l.off_pad + cpu_align16(l.pr * l.pcs + 2 * WG_VW);
    /* tmp: wino_scatter's 16 rows of twv + 1, or wino_dy's deinterleaved
     * dy plane (2 x 2th x tw), or wino_out's 2 rows */
    size_t tmp = 16 * ((size_t)l.twv + 1);
    if (tmp < 2 * (2 * (size_t)l.th * l.tw + WG_VW))
        tmp = 2 * (2 * (size_t)l.th * l.tw + WG_VW);
    if (tmp < 4 * wg_round(l.tpi)) /* wino_dy's tile-major gathers */
        tmp = 4 * wg_round(l.tpi);
    /* g: one plane of conv2d_bwd_act's act_bias_bwd(y, dy) */
    l.off_g = l.off_tmp + cpu_align16(tmp + 2 * WG_VW);
    /* idx: wino_dy's gather offsets, 4 tpi int32 */
    l.off_idx = l.off_g + cpu_align16((size_t)s->oh * s->ow);
    /* vt: a block of WG_VT tiles of V transposed (wino_du, AVX2 only) */
    l.off_vt = l.off_idx + cpu_align16(4 * l.tpi);
    l.slice = l.off_vt + (cpu_avx2_kernels() ? cpu_align16((size_t)WG_VT * s->c) : 0);
    return l;
}

/* U, a slice per thread, a partial dU per group, then conv2d_bwd_act's sums
 * of g per image and channel (n k). */
static size_t wino_workspace(int nt, const struct rt_conv_shape *s)
{
    const struct wino_layout l = wino_layout(s);
    return cpu_align16(l.u) + (size_t)nt * l.slice + (size_t)conv_groups(nt, s) * cpu_align16(l.u) +
           (size_t)s->n * s->k;
}

/* U[xi][k][c] = (G g G^T)[xi] for filters k in [k0, k1), or U[xi][c][k]
 * when `trans` (bwd-data's GEMM then multiplies by U^T without a transpose). */
static void wino_filter(const struct rt_conv_shape *s, const float *w, float *U, int k0, int k1,
                        bool trans)
{
    const size_t ES = wino_es(s);
    for (int k = k0; k < k1; k++)
        for (int c = 0; c < s->c; c++) {
            const float *g = w + ((size_t)k * s->c + c) * 9;
            float t[4][3];
            for (int j = 0; j < 3; j++) {
                t[0][j] = g[j];
                t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
                t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
                t[3][j] = g[6 + j];
            }
            float *u = U + (trans ? (size_t)c * s->k + k : (size_t)k * s->c + c);
            for (int i = 0; i < 4; i++) {
                u[(4 * i + 0) * ES] = t[i][0];
                u[(4 * i + 1) * ES] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
                u[(4 * i + 2) * ES] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
                u[(4 * i + 3) * ES] = t[i][2];
            }
        }
}

/* dw[k][c] = G^T (sum over groups of dU[k][c]) G for idx = k*c + c in [lo, hi). */
static void wino_filter_grad(const struct rt_conv_shape *s, const float *parts, size_t pstride,
                             int groups, float *dw, size_t lo, size_t hi)
{
    const size_t ES = wino_es(s);
    for (size_t idx = lo; idx < hi; idx++) {
        float u[16];
        for (int e = 0; e < 16; e++) {
            float v = 0.0f;
            for (int g = 0; g < groups; g++)
                v += parts[(size_t)g * pstride + e * ES + idx];
            u[e] = v;
        }
        float q[3][4];
        for (int j = 0; j < 4; j++) {
            q[0][j] = u[j] + 0.5f * (u[4 + j] + u[8 + j]);
            q[1][j] = 0.5f * (u[4 + j] - u[8 + j]);
            q[2][j] = 0.5f * (u[4 + j] + u[8 + j]) + u[12 + j];
        }
        float *o = dw + idx * 9;
        for (int i = 0; i < 3; i++) {
            o[3 * i + 0] = q[i][0] + 0.5f * (q[i][1] + q[i][2]);
            o[3 * i + 1] = 0.5f * (q[i][1] - q[i][2]);
            o[3 * i + 2] = 0.5f * (q[i][1] + q[i][2]) + q[i][3];
        }
    }
}

/* The transforms run over the tiles of a row of tiles as vector loops, so
 * they get the widest vectors the CPU has (CPU_CLONES: 15% faster on
 * AVX-512 than the SSE2 default). They only add and subtract (or multiply
 * by 0 and +-1), so every clone gives the same bits. */

/* xp = one input plane placed at (ph, pw) of a zeroed pr x pc grid, stored
 * split: the even columns of every row (pr x (tw + 1)), then the odd ones,
 * so that every tile reads its 4 columns at unit stride. An unpadded plane
 * that fills the grid exactly (seedcnn's 26 x 26 -> 24 x 24) is one long
 * deinterleaving loop. */
CPU_CLONES
static void wino_pad(const struct rt_conv_shape *s, const struct wino_layout *l, const float *x,
                     float *xp)
{
    const int W = s->w, PW = s->pad_w, hw = l->tw + 1;
    float *EV = xp, *OD = xp + l->pr * (size_t)hw;
    if (s->pad_h == 0 && PW == 0 && (size_t)s->h == l->pr && (size_t)W == l->pc) {
        const size_t n = l->pr * (size_t)hw;
        CPU_SIMD
        for (size_t m = 0; m < n; m++) {
            EV[m] = x[2 * m];
            OD[m] = x[2 * m + 1];
        }
        return;
    }
    memset(xp, 0, l->pr * l->pc * sizeof(float));
    for (int h = 0; h < s->h; h++) {
        const float *xr = x + (size_t)h * W;
        float *ev = EV + ((size_t)h + s->pad_h) * hw, *od = OD + ((size_t)h + s->pad_h) * hw;
        /* padded column q = iw + PW goes to ev[q/2] or od[q/2] */
        int iw = 0;
        if (PW & 1) { /* iw = 0 is odd column PW */
            od[PW / 2] = xr[0];
            iw = 1;
        }
        const int m0 = (iw + PW) / 2, cnt = (W - iw) / 2;
        const float *xs = xr + iw;
        CPU_SIMD
        for (int m = 0; m < cnt; m++) {
            ev[m0 + m] = xs[2 * m];
            od[m0 + m] = xs[2 * m + 1];
        }
        if (iw + 2 * cnt < W)
            ev[m0 + cnt] = xr[W - 1];
    }
}

/* V[xi][t] (xi stride xs) = B^T d B for the tiles of one padded plane: one
 * loop per row i of B^T d (few pointers: no spills in the vector loop). */
CPU_CLONES
static void wino_in(const struct wino_layout *l, const float *xp, float *v, size_t xs)
{
    const size_t hw = (size_t)l->tw + 1, od = l->pr * hw;
    const int tw = l->tw, twv = l->twv;
    for (int a = 0; a < l->th; a++) {
        const float *r0 = xp + 2 * (size_t)a * hw, *r1 = r0 + hw, *r2 = r1 + hw, *r3 = r2 + hw;
        float *o = v + (size_t)a * tw;
        for (int i = 0; i < 4; i++) {
            /* row i of B^T d is p + sg * q: d0 - d2, d1 + d2, d2 - d1, d1 - d3 */
            const float *p = i == 0 ? r0 : i == 2 ? r2 : r1;
            const float *q = i == 0 ? r2 : i == 2 ? r1 : i == 1 ? r2 : r3;
            const float *po = p + od, *qo = q + od;
            const float sg = i == 1 ? 1.0f : -1.0f;
            float *o0 = o + 4 * i * xs, *o1 = o0 + xs, *o2 = o1 + xs, *o3 = o2 + xs;
            CPU_SIMD
            for (int b = 0; b < twv; b++) {
                /* columns 2b, 2b+1, 2b+2, 2b+3 are ev[b], od[b], ev[b+1], od[b+1] */
                const float e0 = p[b] + sg * q[b], e1 = po[b] + sg * qo[b],
                            e2 = p[b + 1] + sg * q[b + 1], e3 = po[b + 1] + sg * qo[b + 1];
                o0[b] = e0 - e2;
                o1[b] = e1 + e2;
                o2[b] = e2 - e1;
                o3[b] = e1 - e3;
            }
        }
    }
}

/* One output plane from M[xi][t] (xi stride xs): y_tile = A^T m A. The
 * two rows of a row of tiles go straight into y, their slack lanes (2 twv
 * floats a row, not ow) spilling into the rows after, which are written
 * later; only where a spill would pass the plane's end, through tmp. */
CPU_CLONES
static void wino_out(const struct rt_conv_shape *s, const struct wino_layout *l, const float *m,
                     size_t xs, float *y, float *tmp)
{
    const size_t OW = (size_t)s->ow, end = (size_t)s->oh * OW;
    const int tw = l->tw, twv = l->twv;
    for (int a = 0; a < l->th; a++) {
        const bool direct = (2 * (size_t)a + 1) * OW + 2 * (size_t)twv <= end;
        float *t0 = direct ? y + 2 * (size_t)a * OW : tmp;
        float *t1 = direct ? t0 + OW : tmp + 2 * (size_t)twv;
        const float *p = m + (size_t)a * tw;
        const float *m0 = p, *m1 = p + xs, *m2 = p + 2 * xs, *m3 = p + 3 * xs, *m4 = p + 4 * xs,
                    *m5 = p + 5 * xs, *m6 = p + 6 * xs, *m7 = p + 7 * xs, *m8 = p + 8 * xs,
                    *m9 = p + 9 * xs, *m10 = p + 10 * xs, *m11 = p + 11 * xs,
                    *m12 = p + 12 * xs, *m13 = p + 13 * xs, *m14 = p + 14 * xs,
                    *m15 = p + 15 * xs;
        /* row t0 first: its spill lands in t1's row, written after */
        CPU_SIMD
        for (int b = 0; b < twv; b++) {
            const float s00 = m0[b] + m4[b] + m8[b], s01 = m1[b] + m5[b] + m9[b],
                        s02 = m2[b] + m6[b] + m10[b], s03 = m3[b] + m7[b] + m11[b];
            t0[2 * b] = s00 + s01 + s02;
            t0[2 * b + 1] = s01 - s02 - s03;
        }
        CPU_SIMD
        for (int b = 0; b < twv; b++) {
            const float s10 = m4[b] - m8[b] - m12[b], s11 = m5[b] - m9[b] - m13[b],
                        s12 = m6[b] - m10[b] - m14[b], s13 = m7[b] - m11[b] - m15[b];
            t1[2 * b] = s10 + s11 + s12;
            t1[2 * b + 1] = s11 - s12 - s13;
        }
        if (direct)
            continue;
        cpu_copy_row(y + 2 * (size_t)a * OW, t0, OW);
        if (2 * a + 1 < s->oh)
            cpu_copy_row(y + (2 * (size_t)a + 1) * OW, t1, OW);
    }
}

/* dy planes of at most this many tiles a row are transformed tile-major */
#define WG_TILE_MAJOR_TW 4

/* Where wino_dy gathers from: for pixel (u, v) of the 2 x 2 dy block of
 * tile t = (a, b), its offset in the plane, or -1 past oh x ow (a zero).
 * Nothing for planes transformed by rows. */
static void wino_dy_index(const struct rt_conv_shape *s, const struct wino_layout *l,
                          int32_t *idx)
{
    const size_t T = l->tpi;
    if (l->tw > WG_TILE_MAJOR_TW || l->w512)
        return;
    for (int q = 0; q < 4; q++)
        for (int a = 0; a < l->th; a++)
            for (int b = 0; b < l->tw; b++) {
                const int h = 2 * a + q / 2, w = 2 * b + q % 2;
                idx[q * T + (size_t)a * l->tw + b] =
                    h < s->oh && w < s->ow ? h * s->ow + w : -1;
            }
}

/* The four rows i of A dy_tile A^T for n tiles, from the 2 x 2 blocks'
 * even columns (e0: their first row, e1: the second) and odd ones (o0,
 * o1): g0, g0 + g1, g0 - g1, -g1 with row i of A dy. Inline, into both
 * dy transforms' clones. */
static inline void wino_dy_math(const float *e0, const float *e1, const float *o0,
                                const float *o1, size_t n, float *dm, size_t xs)
{
    for (int i = 0; i < 4; i++) {
        const float c0 = i == 3 ? 0.0f : 1.0f, c1 = i == 0 ? 0.0f : i == 1 ? 1.0f : -1.0f;
        float *m0 = dm + 4 * i * xs, *m1 = m0 + xs, *m2 = m1 + xs, *m3 = m2 + xs;
        CPU_SIMD
        for (size_t t = 0; t < n; t++) {
            const float r0 = c0 * e0[t] + c1 * e1[t], r1 = c0 * o0[t] + c1 * o1[t];
            m0[t] = r0;
            m1[t] = r0 + r1;
            m2[t] = r0 - r1;
            m3[t] = -r1;
        }
    }
}

/* dM[xi][t] (xi stride xs) = A dy_tile A^T for one dy plane, dy = 0 past
 * oh x ow, by rows of tiles: the plane is first split into its even and
 * odd columns (one long loop when ow is even), then one loop per row i of
 * A dy: g0, g0 + g1, g0 - g1, -g1. */
CPU_CLONES
static void wino_dy_rows(const struct rt_conv_shape *s, const struct wino_layout *l,
                         const float *dy, float *dm, size_t xs, float *tmp)
{
    const size_t OW = (size_t)s->ow, tw = (size_t)l->tw, rows = 2 * (size_t)l->th;
    const size_t np = rows * tw + WG_VW; /* one split plane, slack lanes included */
    const int twv = l->twv;
    float *EV = tmp, *OD = tmp + np;
    if (OW == 2 * tw) {
        const size_t n = (size_t)s->oh * tw;
        CPU_SIMD
        for (size_t m = 0; m < n; m++) {
            EV[m] = dy[2 * m];
            OD[m] = dy[2 * m + 1];
        }
    } else { /* odd ow: column ow is a zero */
        for (size_t h = 0; h < (size_t)s->oh; h++) {
            const float *g = dy + h * OW;
            float *ev = EV + h * tw, *od = OD + h * tw;
            CPU_SIMD
            for (size_t m = 0; m < tw - 1; m++) {
                ev[m] = g[2 * m];
                od[m] = g[2 * m + 1];
            }
            ev[tw - 1] = g[OW - 1];
            od[tw - 1] = 0.0f;
        }
    }
    /* the row past an odd oh, and the slack lanes, are zeros */
    memset(EV + (size_t)s->oh * tw, 0, (np - (size_t)s->oh * tw) * sizeof(float));
    memset(OD + (size_t)s->oh * tw, 0, (np - (size_t)s->oh * tw) * sizeof(float));
    for (int a = 0; a < l->th; a++) {
        const float *e0 = EV + 2 * (size_t)a * tw, *o0 = OD + 2 * (size_t)a * tw;
        wino_dy_math(e0, e0 + tw, o0, o0 + tw, (size_t)twv, dm + (size_t)a * tw, xs);
    }
}

/* The same for small planes, tile-major: the 2 x 2 blocks are first
 * gathered (idx: one array per pixel of the block, the plane's tiles
 * contiguous), then one loop per row i of A dy over all the tiles. A 7 x 7
 * plane's 16 tiles are one AVX-512 vector, where its rows of 4 tiles left
 * most lanes idle (resnet8's 64-channel bwd-data 10-20% faster); on wide
 * planes the gathers cost more than the rows (28 x 28: 5-10% slower). */
CPU_CLONES
static void wino_dy_tiles(const struct wino_layout *l, const int32_t *idx, const float *dy,
                          float *dm, size_t xs, float *tmp)
{
    const size_t T = l->tpi, TV = wg_round(T);
    for (int q = 0; q < 4; q++) {
        const int32_t *ix = idx + q * T;
        float *p = tmp + q * TV;
        CPU_SIMD
        for (size_t t = 0; t < T; t++)
            p[t] = ix[t] >= 0 ? dy[ix[t]] : 0.0f;
        for (size_t t = T; t < TV; t++)
            p[t] = 0.0f;
    }
    wino_dy_math(tmp, tmp + 2 * TV, tmp + TV, tmp + 3 * TV, TV, dm, xs);
}

/* One dx plane from dV[xi][t] (xi stride xs): the patches B dV B^T added up
 * on the padded grid xp (plain row-major rows of pcs here), whose inner
 * h x w is dx. tmp: 16 (twv + 1) floats and slack. */
CPU_CLONES
static void wino_scatter(const struct rt_conv_shape *s, const struct wino_layout *l,
                         const float *dv, size_t xs, float *dx, float *xp, float *tmp)
{
    if (l->w512) {
        cpu_wino512_scatter(&l->p512, dv, xs, dx);
        return;
    }
    const size_t pc = l->pcs, n1 = (size_t)l->twv + 1, nb = wg_round((size_t)l->tw + 1);
    const int tw = l->tw, twv = l->twv;
    memset(xp, 0, l->pr * pc * sizeof(float));
    /* P[r][j] at tmp + (4r + j) n1: patch row r, column j of each tile; the
     * j = 2, 3 columns shifted one tile right so that padded column
     * 2b + j' (j' < 2) gathers P[r][j'][b] + P[r][j'+2][b] */
    for (int r = 0; r < 4; r++) {
        tmp[(4 * r + 0) * n1 + tw] = tmp[(4 * r + 1) * n1 + tw] = 0.0f;
        tmp[(4 * r + 2) * n1] = tmp[(4 * r + 3) * n1] = 0.0f;
    }
    float *q0 = tmp, *q1 = tmp + n1, *q2 = tmp + 2 * n1 + 1, *q3 = tmp + 3 * n1 + 1,
          *q4 = tmp + 4 * n1, *q5 = tmp + 5 * n1, *q6 = tmp + 6 * n1 + 1,
          *q7 = tmp + 7 * n1 + 1, *q8 = tmp + 8 * n1, *q9 = tmp + 9 * n1,
          *q10 = tmp + 10 * n1 + 1, *q11 = tmp + 11 * n1 + 1, *q12 = tmp + 12 * n1,
          *q13 = tmp + 13 * n1, *q14 = tmp + 14 * n1 + 1, *q15 = tmp + 15 * n1 + 1;
    for (int a = 0; a < l->th; a++) {
        const float *p = dv + (size_t)a * tw;
        const float *x0 = p, *x1 = p + xs, *x2 = p + 2 * xs, *x3 = p + 3 * xs, *x4 = p + 4 * xs,
                    *x5 = p + 5 * xs, *x6 = p + 6 * xs, *x7 = p + 7 * xs, *x8 = p + 8 * xs,
                    *x9 = p + 9 * xs, *x10 = p + 10 * xs, *x11 = p + 11 * xs,
                    *x12 = p + 12 * xs, *x13 = p + 13 * xs, *x14 = p + 14 * xs,
                    *x15 = p + 15 * xs;
        CPU_SIMD
        for (int b = 0; b < twv; b++) {
            /* Z = B X (rows), then Z B^T (columns) */
            const float z00 = x0[b], z01 = x1[b], z02 = x2[b], z03 = x3[b];
            const float z10 = x4[b] - x8[b] + x12[b], z11 = x5[b] - x9[b] + x13[b],
                        z12 = x6[b] - x10[b] + x14[b], z13 = x7[b] - x11[b] + x15[b];
            const float z20 = x4[b] + x8[b] - x0[b], z21 = x5[b] + x9[b] - x1[b],
                        z22 = x6[b] + x10[b] - x2[b], z23 = x7[b] + x11[b] - x3[b];
            const float z30 = -x12[b], z31 = -x13[b], z32 = -x14[b], z33 = -x15[b];
            q0[b] = z00;
            q1[b] = z01 - z02 + z03;
            q2[b] = z01 + z02 - z00;
            q3[b] = -z03;
            q4[b] = z10;
            q5[b] = z11 - z12 + z13;
            q6[b] = z11 + z12 - z10;
            q7[b] = -z13;
            q8[b] = z20;
            q9[b] = z21 - z22 + z23;
            q10[b] = z21 + z22 - z20;
            q11[b] = -z23;
            q12[b] = z30;
            q13[b] = z31 - z32 + z33;
            q14[b] = z31 + z32 - z30;
            q15[b] = -z33;
        }
        q0[tw] = q1[tw] = q4[tw] = q5[tw] = q8[tw] = q9[tw] = q12[tw] = q13[tw] = 0.0f;
        for (int r = 0; r < 4; r++) {
            float *row = xp + (2 * (size_t)a + r) * pc;
            const float *p0 = tmp + (4 * r) * n1, *p1 = p0 + n1, *p2 = p1 + n1, *p3 = p2 + n1;
            CPU_SIMD
            for (size_t b = 0; b < nb; b++) {
                row[2 * b] += p0[b] + p2[b];
                row[2 * b + 1] += p1[b] + p3[b];
            }
        }
    }
    for (int h = 0; h < s->h; h++)
        cpu_copy_row(dx + (size_t)h * s->w, xp + ((size_t)h + s->pad_h) * pc + s->pad_w,
                     (size_t)s->w);
}

/* V for images [i0, i1) of x: V[xi][c][t], T tiles in all. */
static void wino_in_chunk(const struct rt_conv_shape *s, const struct wino_layout *l,
                          const float *x, int i0, int i1, float *V, float *sl)
{
    const size_t T = l->ldt, xsz = (size_t)s->h * s->w;
    if (l->w512) {
        cpu_wino512_in(&l->p512, i1 - i0, s->c, x + (size_t)i0 * s->c * xsz, V, T, l->vxs);
        return;
    }
    for (int i = i0; i < i1; i++)
        for (int c = 0; c < s->c; c++) {
            wino_pad(s, l, x + ((size_t)i * s->c + c) * xsz, sl + l->off_pad);
            wino_in(l, sl + l->off_pad, V + (size_t)c * T + (size_t)(i - i0) * l->tpi,
                    l->vxs);
        }
}

/* Small planes tile-major, others by rows of tiles. */
static void wino_dy(const struct rt_conv_shape *s, const struct wino_layout *l,
                    const int32_t *idx, const float *dy, float *dm, size_t xs, float *tmp)
{
    if (l->w512)
        cpu_wino512_dy(&l->p512, dy, dm, xs);
    else if (l->tw <= WG_TILE_MAJOR_TW)
        wino_dy_tiles(l, idx, dy, dm, xs, tmp);
    else
        wino_dy_rows(s, l, dy, dm, xs, tmp);
}

static void wino_dy_chunk(const struct rt_conv_shape *s, const struct wino_layout *l,
                          const float *dy, int i0, int i1, float *M, float *sl)
{
    const size_t T = l->ldt, ysz = (size_t)s->oh * s->ow;
    int32_t *idx = (int32_t *)(sl + l->off_idx);
    wino_dy_index(s, l, idx);
    for (int i = i0; i < i1; i++)
        for (int k = 0; k < s->k; k++)
            wino_dy(s, l, idx, dy + ((size_t)i * s->k + k) * ysz,
                    M + (size_t)k * T + (size_t)(i - i0) * l->tpi, l->mxs, sl + l->off_tmp);
}

/* Forward and backward-data over the tiles of images [i0, i1), one
 * routine with the roles swapped (bwd):
 *   forward    V = B^T x B,  M = U V    (16 GEMMs),  y = A^T M A;
 *   bwd-data   M = A dy A^T, V = U^T M  (U stored transposed), dx = the
 *              patches B V B^T added up (wino_scatter). */
static void wino_data_chunk(const struct rt_conv_shape *s, const struct wino_layout *l, bool bwd,
                            const struct conv_epi *e, const float *in, const float *U,
                            float *out, int i0, int i1, float *sl)
{
    const int T = (int)(l->tpi * (size_t)(i1 - i0)), K = s->k, C = s->c, ld = (int)l->ldt;
    const int rows = bwd ? C : K, inner = bwd ? K : C;
    const size_t xsz = (size_t)s->h * s->w, ysz = (size_t)s->oh * s->ow;
    float *V = sl, *M = sl + l->off_m;
    float *src = bwd ? M : V, *dst = bwd ? V : M;
    const size_t src_xs = bwd ? l->mxs : l->vxs, dst_xs = bwd ? l->vxs : l->mxs;
    if (bwd)
        wino_dy_chunk(s, l, in, i0, i1, M, sl);
    else
        wino_in_chunk(s, l, in, i0, i1, V, sl);
    for (int e = 0; e < 16; e++)
        cpu_gemm_small(false, rows, T, inner, U + (size_t)e * wino_es(s), inner, src + e * src_xs,
                       ld, dst + e * dst_xs, ld);
    if (!bwd && l->w512) {
        cpu_wino512_out(&l->p512, i1 - i0, K, dst, (size_t)ld, dst_xs,
                        out + (size_t)i0 * K * ysz);
    }
    for (int i = i0; i < i1; i++)
        for (int p = 0; p < rows; p++) {
            const float *tiles = dst + (size_t)p * ld + (size_t)(i - i0) * l->tpi;
            if (bwd)
                wino_scatter(s, l, tiles, dst_xs, out + ((size_t)i * C + p) * xsz,
                             sl + l->off_pad, sl + l->off_tmp);
            else {
                float *yp = out + ((size_t)i * K + p) * ysz;
                if (!l->w512)
                    wino_out(s, l, tiles, dst_xs, yp, sl + l->off_tmp);
                epi_plane(e, p, yp, yp, ysz);
            }
        }
}

/* Forward (x -> y) or backward-data (dy -> dx): U from the filters, then
 * the chunks of images spread over the threads. */
static void wino_data(int nt, const struct rt_conv_shape *s, bool bwd, const struct conv_epi *e,
                      const float *in, const float *w, float *out, float *ws)
{
    const struct wino_layout l = wino_layout(s);
    float *U = ws, *slices = ws + cpu_align16(l.u);
    const int chunks = l.chunks;
    cpu_blas_before_parallel();
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        const int t = cpu_thread_num(), tn = cpu_num_threads();
        wino_filter(s, w, U, s->k * t / tn, s->k * (t + 1) / tn, bwd);
#ifdef _OPENMP
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
#endif
        for (int ch = 0; ch < chunks; ch++) {
            int i0, i1;
            wino_chunk_images(s->n, &l, ch, &i0, &i1);
            wino_data_chunk(s, &l, bwd, e, in, U, out, i0, i1, slices + (size_t)t * l.slice);
        }
    }
}

/* The backward's gradient: dy as it is (conv2d_bwd_filter), or g = dy *
 * f'(y) of conv2d_bwd_act, with y. */
struct act_grad {
    bool act;
    enum rt_act kind;
    float alpha;
    const float *y, *dy;
};

/* dU (+)= dM V^T for one xi over T tiles (K x C, dotted along the tiles).
 * With the AVX2 kernels: V transposed a block of WG_VT tiles at a time
 * into vt, and each block's dU += dM vt in registers (gemm_small.c's
 * outer products, which the dots along the tiles were not: there OpenBLAS
 * won). OpenBLAS packed both operands on every one of the 16 calls a
 * chunk; this is 8-14% faster (bench_ops cpu 2, bwd-filter: resnet8's
 * three stages 2,030-2,106 -> 1,758-1,807 us, 1,736-1,754 -> 1,599-1,629,
 * 2,001-2,017 -> 1,789-1,806; seedcnn conv2 3,990-4,049 -> 3,497-3,561).
 * Else the BLAS with B transposed. */
static void wino_du(const struct rt_conv_shape *s, const struct wino_layout *l, int T,
                    const float *dM, const float *V, bool acc, float *vt, float *dU)
{
    const int K = s->k, C = s->c, ld = (int)l->ldt;
    if (!cpu_avx2_kernels()) {
        cpu_sgemm(1, false, true, K, C, T, 1.0f, dM, ld, V, ld, acc ? 1.0f : 0.0f, dU, C);
        return;
    }
    for (int p0 = 0; p0 < T; p0 += WG_VT) {
        const int tb = T - p0 < WG_VT ? T - p0 : WG_VT;
        cpu_transpose(C, (size_t)tb, V + p0, (size_t)ld, vt);
        cpu_gemm_small_acc(false, K, C, tb, dM + p0, ld, vt, C, acc || p0 > 0, dU, C);
    }
}

/* One chunk of the backward: dM from the gradient (g formed a plane at a
 * time in the slice, its sum kept for db); dU (+)= dM V^T; then, with dx,
 * dV = U^T dM and the patches as wino_data_chunk (V's room holds dV: the
 * filter GEMMs are done with V). */
static void wino_bwd_act_chunk(const struct rt_conv_shape *s, const struct wino_layout *l,
                               const struct act_grad *ag, const float *x, const float *U,
                               float *dx, float *dU, float beta, int i0, int i1, float *sl,
                               float *sums)
{
    const int T = (int)(l->tpi * (size_t)(i1 - i0)), K = s->k, C = s->c, ld = (int)l->ldt;
    const size_t ysz = (size_t)s->oh * s->ow, xsz = (size_t)s->h * s->w;
    float *V = sl, *M = sl + l->off_m, *g = sl + l->off_g;
    if (!ag->act) {
        wino_dy_chunk(s, l, ag->dy, i0, i1, M, sl);
    } else {
        int32_t *idx = (int32_t *)(sl + l->off_idx);
        wino_dy_index(s, l, idx);
        for (int i = i0; i < i1; i++)
            for (int k = 0; k < K; k++) {
                const size_t o = ((size_t)i * K + k) * ysz;
                sums[(size_t)i * K + k] = /* the plane's sum, for db */
                    cpu_act_grad_row(ag->kind, ag->alpha, ag->y + o, ag->dy + o, g, ysz);
                wino_dy(s, l, idx, g, M + (size_t)k * l->ldt + (size_t)(i - i0) * l->tpi, l->mxs,
                        sl + l->off_tmp);
            }
    }
    wino_in_chunk(s, l, x, i0, i1, V, sl);
    for (int e = 0; e < 16; e++)
        wino_du(s, l, T, M + e * l->mxs, V + e * l->vxs, beta != 0.0f, sl + l->off_vt,
                dU + (size_t)e * wino_es(s));
    if (!dx)
        return;
    for (int e = 0; e < 16; e++)
        cpu_gemm_small(false, C, T, K, U + (size_t)e * wino_es(s), K, M + e * l->mxs, ld,
                       V + e * l->vxs, ld);
    for (int i = i0; i < i1; i++)
        for (int c = 0; c < C; c++)
            wino_scatter(s, l, V + (size_t)c * ld + (size_t)(i - i0) * l->tpi, l->vxs,
                         dx + ((size_t)i * C + c) * xsz, sl + l->off_pad, sl + l->off_tmp);
}

/* The Winograd backward, conv2d_bwd_filter's or conv2d_bwd_act's: one pass
 * over the chunks for both gradients, dy transformed once and g never
 * written out. Groups of chunks (conv_groups of them, fixed by the thread
 * count) each sum into their own dU; the partials are added in group
 * order, db per channel in image order (act_bias_bwd's): the same bits as
 * act_bias_bwd, conv2d_bwd_filter and conv2d_bwd_data in turn. */
static void wino_bwd_act(int nt, const struct rt_conv_shape *s, const struct act_grad *ag,
                         const float *x, const float *w, float *dx, float *dw, float *db,
                         float *ws)
{
    const struct wino_layout l = wino_layout(s);
    float *U = ws, *slices = ws + cpu_align16(l.u);
    float *parts = slices + (size_t)nt * l.slice;
    const size_t pstride = cpu_align16(l.u), KC = (size_t)s->k * s->c;
    float *sums = parts + (size_t)conv_groups(nt, s) * pstride;
    const int chunks = l.chunks, K = s->k;
    int groups = conv_groups(nt, s);
    if (groups > chunks)
        groups = chunks;
    cpu_blas_before_parallel();
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        const int t = cpu_thread_num(), tn = cpu_num_threads();
        float *sl = slices + (size_t)t * l.slice;
        if (dx) {
            wino_filter(s, w, U, K * t / tn, K * (t + 1) / tn, true);
#ifdef _OPENMP
#pragma omp barrier
#endif
        }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int gi = 0; gi < groups; gi++) {
            const int lo = (int)((long)chunks * gi / groups),
                      hi = (int)((long)chunks * (gi + 1) / groups);
            for (int ch = lo; ch < hi; ch++) {
                int i0, i1;
                wino_chunk_images(s->n, &l, ch, &i0, &i1);
                wino_bwd_act_chunk(s, &l, ag, x, U, dx, parts + (size_t)gi * pstride,
                                   ch > lo ? 1.0f : 0.0f, i0, i1, sl, sums);
            }
        }
        wino_filter_grad(s, parts, pstride, groups, dw, KC * t / tn, KC * (t + 1) / tn);
        for (int j = K * t / tn; db && j < K * (t + 1) / tn; j++) { /* act_bias_bwd's order */
            double acc = 0.0;
            for (int i = 0; i < s->n; i++)
                acc += sums[(size_t)i * K + j];
            db[j] = (float)acc;
        }
    }
}

/* fwd_one or bwd_data_one: one image's in (x or dy) to out (y or dx). */
typedef void (*conv_one_fn)(int nt, const struct rt_conv_shape *s, const struct conv_layout *l,
                            const struct conv_epi *e, const float *in, const float *w,
                            const float *prep, float *out, float *sl);

/* Forward and backward-data share their driver: Winograd where it applies,
 * else im2col + GEMM an image at a time, over the batch or inside the BLAS. */
static int conv_data(rt_dev *d, const struct rt_conv_shape *s, bool bwd,
                     const struct conv_epi *e, rt_view inv, rt_view wv, rt_view outv, rt_view wsv)
{
    const struct conv_layout l = conv_layout(s);
    const float *in = cpu_f(inv), *w = cpu_f(wv);
    float *out = cpu_f(outv), *ws = cpu_f(wsv);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    const size_t is = bwd ? ys : xs, os = bwd ? xs : ys;
    const conv_one_fn one = bwd ? bwd_data_one : fwd_one;
    int nt = cpu_nt(d);
    if (wino_ok(nt, s)) {
        wino_data(nt, s, bwd, e, in, w, out, ws);
        return RT_OK;
    }
    float *prep = ws + (size_t)nt * l.slice + (size_t)conv_groups(nt, s) * cpu_align16(l.part);
    const bool dgrad = bwd && l.wide; /* its slice's zeros, once a call */
    if (!conv_batch_parallel(nt, s)) {
        conv_prep(s, &l, bwd, w, prep, 0, 1);
        if (dgrad)
            cpu_dgrad_begin(s, &l.dg, ws);
        for (int i = 0; i < s->n; i++)
            one(nt, s, &l, e, in + i * is, w, prep, out + i * os, ws);
        return RT_OK;
    }
    cpu_blas_before_parallel();
    /* each thread its own run of images first (cpu_runs): an image's
     * activations stay in the cache of the core that made them, as the
     * pooling and bias passes split the batch the same way */
    struct cpu_runs runs;
    cpu_runs_init(&runs, s->n, nt);
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        const int t = cpu_thread_num();
        float *sl = ws + (size_t)t * l.slice;
        conv_prep(s, &l, bwd, w, prep, t, cpu_num_threads());
        if (dgrad)
            cpu_dgrad_begin(s, &l.dg, sl);
#ifdef _OPENMP
#pragma omp barrier /* prep is whole */
#endif
        for (int i; (i = cpu_runs_next(&runs, t, nt)) >= 0;)
            one(1, s, &l, e, in + i * is, w, prep, out + i * os, sl);
    }
    return RT_OK;
}

int cpu_conv2d_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view xv, rt_view wv, rt_view yv,
                   rt_view wsv)
{
    return conv_data(d, s, false, NULL, xv, wv, yv, wsv);
}

/* conv2d_fwd with bias and activation applied per image, in cache: one
 * parallel region, one pass over y instead of three. */
int cpu_conv2d_fwd_bias_act(rt_dev *d, const struct rt_conv_shape *s, rt_view xv, rt_view wv,
                            rt_view bv, enum rt_act kind, float alpha, rt_view yv, rt_view wsv)
{
    RT_TRY(cpu_check_act(kind));
    const struct conv_epi e = {cpu_f(bv), kind, alpha};
    return conv_data(d, s, false, &e, xv, wv, yv, wsv);
}

int cpu_conv2d_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dyv, rt_view wv,
                        rt_view dxv, rt_view wsv)
{
    return conv_data(d, s, true, NULL, dyv, wv, dxv, wsv);
}

/* Winograd's shapes in one pass (wino_bwd_act), the others as the three
 * ops, with g in its scratch view. */
int cpu_conv2d_bwd_act(rt_dev *d, const struct rt_conv_shape *s, enum rt_act kind, float alpha,
                       rt_view xv, rt_view yv, rt_view dyv, rt_view wv, rt_view gv, rt_view dxv,
                       rt_view dwv, rt_view dbv, rt_view wsv)
{
    RT_TRY(cpu_check_act(kind));
    if (s->n == 0) { /* no samples, no gradient; the other views are unchecked */
        memset(cpu_f(dwv), 0, (size_t)s->k * conv_crs(s) * sizeof(float));
        if (dbv.buf)
            memset(cpu_f(dbv), 0, (size_t)s->k * sizeof(float));
        return RT_OK;
    }
    const bool act = kind != RT_ACT_IDENTITY || dbv.buf; /* else g is dy */
    if (wino_ok(cpu_nt(d), s)) {
        const struct act_grad ag = {act, kind, alpha, act ? cpu_f(yv) : NULL, cpu_f(dyv)};
        wino_bwd_act(cpu_nt(d), s, &ag, cpu_f(xv), cpu_f(wv), dxv.buf ? cpu_f(dxv) : NULL,
                     cpu_f(dwv), dbv.buf ? cpu_f(dbv) : NULL, cpu_f(wsv));
        return RT_OK;
    }
    const size_t hw = (size_t)s->oh * s->ow, yn = (size_t)s->n * s->k * hw;
    if (dbv.buf)
        RT_TRY(cpu_act_bias_bwd(d, kind, alpha, s->n, s->k, (int)hw, yv, dyv, gv, dbv));
    else if (act)
        RT_TRY(cpu_act_bwd(d, kind, alpha, yn, yv, yv, dyv, gv));
    const rt_view g = act ? gv : dyv;
    RT_TRY(cpu_conv2d_bwd_filter(d, s, xv, g, dwv, wsv));
    return dxv.buf ? cpu_conv2d_bwd_data(d, s, g, wv, dxv, wsv) : RT_OK;
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
    const float *x = cpu_f(xv), *dy = cpu_f(dyv);
    float *ws = cpu_f(wsv);
    if (wino_ok(cpu_nt(d), s)) {
        const struct act_grad ag = {.act = false, .dy = dy};
        wino_bwd_act(cpu_nt(d), s, &ag, x, NULL, NULL, dw, NULL, ws);
        return RT_OK;
    }
    const struct conv_layout l = conv_layout(s);
    const int nt = cpu_nt(d), groups = conv_groups(nt, s);
    const size_t pstride = cpu_align16(l.part);
    float *parts = ws + (size_t)nt * l.slice;
    if (!conv_batch_parallel(nt, s)) {
        bwd_filter_images(nt, s, &l, x, dy, 0, s->n, ws, parts);
        reduce_dw(s, parts, pstride, 1, dw, 0, wsz);
        return RT_OK;
    }
    cpu_blas_before_parallel();
    struct cpu_runs runs; /* each thread its own groups first: as conv_data */
    cpu_runs_init(&runs, groups, nt);
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        const int t = cpu_thread_num(), tn = cpu_num_threads();
        float *sl = ws + (size_t)t * l.slice;
        for (int g; (g = cpu_runs_next(&runs, t, nt)) >= 0;) {
            const int lo = (int)((long)s->n * g / groups), hi = (int)((long)s->n * (g + 1) / groups);
            float *acct = parts + (size_t)g * pstride;
            bwd_filter_images(1, s, &l, x, dy, lo, hi, sl, acct);
            if (lo == hi)
                memset(acct, 0, wsz * sizeof(float));
        }
#ifdef _OPENMP
#pragma omp barrier /* all partials are in */
#endif
        reduce_dw(s, parts, pstride, groups, dw, wsz * t / tn, wsz * (t + 1) / tn);
    }
    return RT_OK;
}
