/* nn.c — the cpu backend's layer ops: bias, pooling, activations,
 * softmax + cross-entropy, batch norm and dropout (maths in backend.h).
 *
 * Loops are split over (image, channel) planes or channels, which are
 * independent, so results never depend on the thread count except where a
 * comment says so. Small problems stay on one thread (CPU_PAR_MIN). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "cpu-impl.h"
#include "status.h"


/* ---- bias ------------------------------------------------------------------------- */

/* y += b: the fused op with no activation (one loop for both). */
int cpu_bias_add(rt_dev *d, int n, int c, int hw, rt_view bv, rt_view yv)
{
    return cpu_bias_act_fwd(d, RT_ACT_IDENTITY, 0.0f, n, c, hw, bv, yv);
}

/* db[c] = sum over images and positions. Each channel is summed by one
 * thread in a fixed order: float within a plane, double across planes. */
int cpu_bias_grad(rt_dev *d, int n, int c, int hw, rt_view dyv, rt_view dbv)
{
    const float *dy = cpu_f(dyv);
    float *db = cpu_f(dbv);
    const size_t total = (size_t)n * c * hw;
    int nt = cpu_nt(d);
    (void)nt;
    (void)total;
    if (hw == 1) {
        memset(db, 0, (size_t)c * sizeof(float));
        for (int i = 0; i < n; i++) {
            const float *r = dy + (size_t)i * c;
            CPU_SIMD
            for (int j = 0; j < c; j++)
                db[j] += r[j];
        }
        return RT_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (total > CPU_PAR_MIN)
#endif
    for (int j = 0; j < c; j++) {
        double acc = 0.0;
        for (int i = 0; i < n; i++) {
            const float *p = dy + ((size_t)i * c + j) * hw;
            float s = 0.0f;
#ifdef _OPENMP
#pragma omp simd reduction(+ : s)
#endif
            for (int k = 0; k < hw; k++)
                s += p[k];
            acc += s;
        }
        db[j] = (float)acc;
    }
    return RT_OK;
}

/* ---- bias + activation, fused ------------------------------------------------------ */

int cpu_check_act(enum rt_act kind)
{
    if ((unsigned)kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cpu: unknown activation %d", (int)kind);
    return RT_OK;
}

/* OpenBLAS's GEMM, then the bias and activation on its rows. */
int cpu_dense_fwd(rt_dev *d, int n, int in, int units, rt_view x, rt_view w, rt_view b,
                  enum rt_act kind, float alpha, rt_view y)
{
    RT_TRY(cpu_check_act(kind));
    RT_TRY(cpu_gemm(d, 0, 1, n, units, in, 1.0f, x, in, w, in, 0.0f, y, units));
    return cpu_bias_act_fwd(d, kind, alpha, n, units, 1, b, y);
}

/* The weight and data gradients side by side (cpu_sgemm_pair). */
int cpu_dense_bwd(rt_dev *d, int n, int in, int units, rt_view g, rt_view x, rt_view w,
                  rt_view dw, rt_view dx)
{
    /* with n or units 0 the wrapper has not checked g, x and w */
    const bool any = n > 0 && units > 0;
    const float *gp = any ? cpu_f(g) : NULL;
    const struct cpu_sgemm_call wg = {true,  false, units, in, n, 1.0f, gp,
                                      units, any && dw.buf ? cpu_f(x) : NULL, in,
                                      0.0f,  cpu_f_or_null(dw), in};
    const struct cpu_sgemm_call dg = {false, false, n, in, units, 1.0f, gp,
                                      units, any && dx.buf ? cpu_f(w) : NULL, in,
                                      0.0f,  cpu_f_or_null(dx), in};
    if (dw.buf && dx.buf)
        cpu_sgemm_pair(cpu_nt(d), &wg, &dg);
    else
        cpu_sgemm_call(cpu_nt(d), dw.buf ? &wg : &dg);
    return RT_OK;
}

/* One dense row (a bias per element) or one plane (one bias), in place,
 * at this CPU's vector width. */
CPU_CLONES
static void bias_act_row(enum rt_act kind, float alpha, const float *b, float *y, size_t c)
{
    cpu_bias_act(kind, alpha, b, 1, y, y, c);
}

CPU_CLONES
static void bias_act_plane(enum rt_act kind, float alpha, const float *b, float *y, size_t hw)
{
    cpu_bias_act(kind, alpha, b, 0, y, y, hw);
}

int cpu_bias_act_fwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw,
                     rt_view bv, rt_view yv)
{
    RT_TRY(cpu_check_act(kind));
    const float *b = cpu_f(bv);
    float *y = cpu_f(yv);
    const size_t total = (size_t)n * c * hw;
    int nt = cpu_nt(d);
    (void)nt;
    (void)total;
    if (hw == 1) { /* dense layer: rows of c */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (total > CPU_PAR_MIN)
#endif
        for (int i = 0; i < n; i++)
            bias_act_row(kind, alpha, b, y + (size_t)i * c, (size_t)c);
        return RT_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (total > CPU_PAR_MIN)
#endif
    for (long p = 0; p < (long)n * c; p++)
        bias_act_plane(kind, alpha, b + p % c, y + (size_t)p * hw, (size_t)hw);
    return RT_OK;
}

/* dx = dy * f'(.) over n floats, one thread: relu and leaky by the sign of
 * ref (the input x, or the output y: the same sign), sigmoid and tanh from
 * their output y. kind must be valid; dx may be dy. Elementwise: every
 * CPU_CLONES clone gives the same bits. Inline, for act_grad_span and
 * batch norm's plane loops, each in its own clone. */
static inline void act_grad_body(enum rt_act kind, float alpha, const float *ref, const float *y,
                                 const float *dy, float *dx, size_t n)
{
    switch (kind) {
    case RT_ACT_IDENTITY:
        if (dx != dy)
            memmove(dx, dy, n * sizeof(float));
        break;
    case RT_ACT_RELU:
        CPU_SIMD
        for (size_t i = 0; i < n; i++) {
            const float g = dy[i]; /* loaded either way: a select, not a branch */
            dx[i] = ref[i] > 0.0f ? g : 0.0f;
        }
        break;
    case RT_ACT_LEAKY:
        CPU_SIMD
        for (size_t i = 0; i < n; i++) {
            const float g = dy[i];
            dx[i] = ref[i] > 0.0f ? g : alpha * g;
        }
        break;
    case RT_ACT_SIGMOID:
        CPU_SIMD
        for (size_t i = 0; i < n; i++)
            dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    case RT_ACT_TANH: /* (1-y)(1+y), not 1-y*y: no cancellation near |y| = 1 */
        CPU_SIMD
        for (size_t i = 0; i < n; i++)
            dx[i] = dy[i] * ((1.0f - y[i]) * (1.0f + y[i]));
        break;
    }
}

CPU_CLONES
static void act_grad_span(enum rt_act kind, float alpha, const float *ref, const float *y,
                          const float *dy, float *dx, size_t n)
{
    act_grad_body(kind, alpha, ref, y, dy, dx, n);
}

/* dx = dy * f'(y) over n floats, returning their sum (float, in the order
 * bias_grad sums a plane). */
float cpu_act_grad_row(enum rt_act kind, float alpha, const float *y, const float *dy, float *dx,
                       size_t n)
{
    act_grad_span(kind, alpha, y, y, dy, dx, n);
    float s = 0.0f;
#ifdef _OPENMP
#pragma omp simd reduction(+ : s)
#endif
    for (size_t i = 0; i < n; i++) /* dx is in L1 still */
        s += dx[i];
    return s;
}

/* Rows of c (a dense layer): db summed over the rows in float, in row order,
 * as bias_grad does. */
static void act_bias_bwd_rows(enum rt_act kind, float alpha, int n, int c, const float *y,
                              const float *dy, float *dx, float *db)
{
    memset(db, 0, (size_t)c * sizeof(float));
    for (int i = 0; i < n; i++) {
        const size_t o = (size_t)i * c;
        (void)cpu_act_grad_row(kind, alpha, y + o, dy + o, dx + o, (size_t)c);
        const float *r = dx + o;
        CPU_SIMD
        for (int j = 0; j < c; j++)
            db[j] += r[j];
    }
}

/* The planes' sums of act_bias_bwd_images wait on the stack (32 KiB). */
#define ACT_PLANES 8192

/* Split by images, the way the ops around it split (pooling, the
 * convolutions): each thread walks its images' memory in order, often
 * still in its cache. Split by channels, two threads read planes that lie
 * c*hw floats apart: lenet's 2-thread backward spent 60% more CPU here
 * than its 1-thread one. Each plane's sum is kept, then the channels'
 * are added in image order in double: bias_grad's order, the same bits. */
static void act_bias_bwd_images(int nt, enum rt_act kind, float alpha, int n, int c, int hw,
                                const float *y, const float *dy, float *dx, float *db)
{
    float psum[ACT_PLANES];
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if ((size_t)n * c * hw > CPU_PAR_MIN)
#endif
    {
        CPU_FOR_STATIC
        for (long p = 0; p < (long)n * c; p++) {
            const size_t o = (size_t)p * hw;
            psum[p] = cpu_act_grad_row(kind, alpha, y + o, dy + o, dx + o, (size_t)hw);
        }
        CPU_FOR_STATIC
        for (int j = 0; j < c; j++) {
            double acc = 0.0;
            for (int i = 0; i < n; i++)
                acc += psum[(size_t)i * c + j];
            db[j] = (float)acc;
        }
    }
}

/* Each channel by one thread, its planes in image order: bias_grad's order. */
int cpu_act_bias_bwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw,
                     rt_view yv, rt_view dyv, rt_view dxv, rt_view dbv)
{
    RT_TRY(cpu_check_act(kind));
    float *db = cpu_f(dbv);
    if (n == 0 || hw == 0) {
        memset(db, 0, (size_t)c * sizeof(float));
        return RT_OK;
    }
    const float *y = cpu_f(yv), *dy = cpu_f(dyv);
    float *dx = cpu_f(dxv);
    if (hw == 1) {
        act_bias_bwd_rows(kind, alpha, n, c, y, dy, dx, db);
        return RT_OK;
    }
    const size_t total = (size_t)n * c * hw;
    int nt = cpu_nt(d);
    (void)nt;
    (void)total;
    if ((size_t)n * c <= ACT_PLANES && n >= nt) {
        act_bias_bwd_images(nt, kind, alpha, n, c, hw, y, dy, dx, db);
        return RT_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (total > CPU_PAR_MIN)
#endif
    for (int j = 0; j < c; j++) {
        double acc = 0.0;
        for (int i = 0; i < n; i++) {
            const size_t o = ((size_t)i * c + j) * hw;
            acc += cpu_act_grad_row(kind, alpha, y + o, dy + o, dx + o, (size_t)hw);
        }
        db[j] = (float)acc;
    }
    return RT_OK;
}

/* ---- pooling -------------------------------------------------------------------------- */

/* Window bounds of output (oh, ow) clipped to the input. */
struct pool_win {
    int h0, h1, w0, w1;
};

static struct pool_win pool_window(const struct rt_pool_shape *s, int oh, int ow)
{
    struct pool_win b;
    int hs = oh * s->stride_h - s->pad_h, ws = ow * s->stride_w - s->pad_w;
    b.h0 = hs < 0 ? 0 : hs;
    b.h1 = hs + s->r < s->h ? hs + s->r : s->h;
    b.w0 = ws < 0 ? 0 : ws;
    b.w1 = ws + s->s < s->w ? ws + s->s : s->w;
    return b;
}

/* Index in the plane of the first maximal element of the window, row-major,
 * with a strict '>' (the tie rule every backend shares). */
static int pool_argmax(const struct rt_pool_shape *s, const float *x, struct pool_win b)
{
    int best = b.h0 * s->w + b.w0;
    float bv = x[best];
    for (int ih = b.h0; ih < b.h1; ih++)
        for (int iw = b.w0; iw < b.w1; iw++) {
            float v = x[ih * s->w + iw];
            if (v > bv) {
                bv = v;
                best = ih * s->w + iw;
            }
        }
    return best;
}

static bool pool_is_max2x2(const struct rt_pool_shape *s)
{
    return s->mode == RT_POOL_MAX && s->r == 2 && s->s == 2 && s->stride_h == 2 &&
           s->stride_w == 2 && s->pad_h == 0 && s->pad_w == 0;
}

int cpu_pool_fwd(rt_dev *d, const struct rt_pool_shape *s, rt_view xv, rt_view yv)
{
    const float *x = cpu_f(xv);
    float *y = cpu_f(yv);
    const long planes = (long)s->n * s->c;
    const size_t xs = (size_t)s->h * s->w, ys = (size_t)s->oh * s->ow;
    const float inv_area = 1.0f / (float)(s->r * s->s);
    const bool max2 = pool_is_max2x2(s), wide = max2 && cpu_maxpool2_512();
    int nt = cpu_nt(d);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (planes * xs > CPU_PAR_MIN)
#endif
    for (long p = 0; p < planes; p++) {
        const float *xp = x + (size_t)p * xs;
        float *yp = y + (size_t)p * ys;
        if (wide) { /* AVX-512: 16 windows a step (pool512.c) */
            for (int oh = 0; oh < s->oh; oh++)
                cpu_maxpool2_row512(xp + (size_t)(2 * oh) * s->w, xp + (size_t)(2 * oh + 1) * s->w,
                                    s->ow, yp + (size_t)oh * s->ow);
            continue;
        }
        if (max2) { /* the common case, without the window bookkeeping */
            for (int oh = 0; oh < s->oh; oh++) {
                const float *r0 = xp + (size_t)(2 * oh) * s->w, *r1 = r0 + s->w;
                float *yr = yp + (size_t)oh * s->ow;
                CPU_SIMD
                for (int ow = 0; ow < s->ow; ow++) {
                    float m = r0[2 * ow];
                    m = r0[2 * ow + 1] > m ? r0[2 * ow + 1] : m;
                    m = r1[2 * ow] > m ? r1[2 * ow] : m;
                    m = r1[2 * ow + 1] > m ? r1[2 * ow + 1] : m;
                    yr[ow] = m;
                }
            }
            continue;
        }
        for (int oh = 0; oh < s->oh; oh++)
            for (int ow = 0; ow < s->ow; ow++) {
                struct pool_win b = pool_window(s, oh, ow);
                float v;
                if (s->mode == RT_POOL_MAX) {
                    v = xp[pool_argmax(s, xp, b)];
                } else {
                    float sum = 0.0f;
                    for (int ih = b.h0; ih < b.h1; ih++)
                        for (int iw = b.w0; iw < b.w1; iw++)
                            sum += xp[ih * s->w + iw];
                    v = sum * inv_area;
                }
                yp[(size_t)oh * s->ow + ow] = v;
            }
    }
    return RT_OK;
}

/* The arg-max is found again from x rather than from y, so that ties go to
 * the first element of the window whatever y holds. */
int cpu_pool_bwd(rt_dev *d, const struct rt_pool_shape *s, rt_view xv, rt_view yv, rt_view dyv,
                 rt_view dxv)
{
    const float *x = cpu_f(xv), *dy = cpu_f(dyv);
    float *dx = cpu_f(dxv);
    const long planes = (long)s->n * s->c;
    const size_t xs = (size_t)s->h * s->w, ys = (size_t)s->oh * s->ow;
    const float inv_area = 1.0f / (float)(s->r * s->s);
    const bool max2 = pool_is_max2x2(s);
    const bool tiled = max2 && s->h == 2 * s->oh && s->w == 2 * s->ow;
    const bool wide = tiled && cpu_maxpool2_512();
    int nt = cpu_nt(d);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (planes * xs > CPU_PAR_MIN)
#endif
    for (long p = 0; p < planes; p++) {
        const float *xp = x + (size_t)p * xs, *dyp = dy + (size_t)p * ys;
        float *dxp = dx + (size_t)p * xs;
        if (wide) { /* AVX-512: 16 windows a step (pool512.c) */
            const size_t W = (size_t)s->w;
            for (int oh = 0; oh < s->oh; oh++)
                cpu_maxpool2_bwd_row512(xp + 2 * oh * W, xp + (2 * oh + 1) * W,
                                        dyp + (size_t)oh * s->ow, s->ow, dxp + 2 * oh * W,
                                        dxp + (2 * oh + 1) * W);
            continue;
        }
        if (tiled) {
            /* The windows tile the plane: each writes all four of its
             * elements, so no zeroing pass (these planes outgrow the cache).
             * The same comparisons as below, as selects, in a vector loop. */
            const int W = s->w;
            for (int oh = 0; oh < s->oh; oh++) {
                const float *r0 = xp + (size_t)(2 * oh) * W, *r1 = r0 + W;
                float *d0 = dxp + (size_t)(2 * oh) * W, *d1 = d0 + W;
                const float *g = dyp + (size_t)oh * s->ow;
                CPU_SIMD
                for (int ow = 0; ow < s->ow; ow++) {
                    const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow],
                                e = r1[2 * ow + 1], gg = g[ow];
                    const float mab = b > a ? b : a;
                    const float mc = c > mab ? c : mab;
                    const float ge = e > mc ? gg : 0.0f, r_e = e > mc ? 0.0f : gg;
                    const float gc = c > mab ? r_e : 0.0f, r_c = c > mab ? 0.0f : r_e;
                    const float gb = b > a ? r_c : 0.0f, ga = b > a ? 0.0f : r_c;
                    d0[2 * ow] = ga;
                    d0[2 * ow + 1] = gb;
                    d1[2 * ow] = gc;
                    d1[2 * ow + 1] = ge;
                }
            }
            continue;
        }
        memset(dxp, 0, xs * sizeof(float));
        if (max2) {
            /* Branch-free: the arg-max of random data is unpredictable, and a
             * mispredicted branch per window costs more than all the maths.
             * The winner's offset in the window is built with arithmetic. */
            const int W = s->w;
            for (int oh = 0; oh < s->oh; oh++) {
                const float *r0 = xp + (size_t)(2 * oh) * W, *r1 = r0 + W;
                float *d0 = dxp + (size_t)(2 * oh) * W;
                const float *g = dyp + (size_t)oh * s->ow;
                for (int ow = 0; ow < s->ow; ow++) {
                    const int i = 2 * ow;
                    const float a = r0[i], b = r0[i + 1], c = r1[i], e = r1[i + 1];
                    const int pb = b > a;
                    const float mab = pb ? b : a;
                    const int pc = c > mab;
                    const float mc = pc ? c : mab;
                    const int pe = e > mc;
                    int off = pb;            /* a: 0, b: 1 */
                    off += pc * (W - off);   /* c: W */
                    off += pe * (W + 1 - off); /* e: W + 1 */
                    d0[i + off] = g[ow];
                }
            }
            continue;
        }
        for (int oh = 0; oh < s->oh; oh++)
            for (int ow = 0; ow < s->ow; ow++) {
                struct pool_win b = pool_window(s, oh, ow);
                float g = dyp[(size_t)oh * s->ow + ow];
                if (s->mode == RT_POOL_MAX) {
                    dxp[pool_argmax(s, xp, b)] += g;
                } else {
                    g *= inv_area;
                    for (int ih = b.h0; ih < b.h1; ih++)
                        for (int iw = b.w0; iw < b.w1; iw++)
                            dxp[ih * s->w + iw] += g;
                }
            }
    }
    return RT_OK;
}

/* ---- activations ------------------------------------------------------------------------- */

#ifdef _OPENMP
#define CPU_PAR _Pragma("omp parallel for num_threads(nt) schedule(static) if (n > CPU_PAR_MIN / 8)")
#else
#define CPU_PAR
#endif

/* relu (y = x > 0 ? x : 0) or leaky (x > 0 ? x : alpha x) over n floats;
 * inline, for act_fwd_span and batch norm's plane loop, each in its clone */
static inline void act_fwd_body(bool leaky, float alpha, const float *x, float *y, size_t n)
{
    if (!leaky) {
        CPU_SIMD
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    }
    CPU_SIMD
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : alpha * x[i];
}

CPU_CLONES
static void act_fwd_span(bool leaky, float alpha, const float *x, float *y, size_t n)
{
    act_fwd_body(leaky, alpha, x, y, n);
}

/* y = act(a + b) over n floats, one thread (y may be a or b) */
CPU_CLONES
static void add_act_span(enum rt_act kind, float alpha, const float *a, const float *b, float *y,
                         size_t n)
{
    switch (kind) {
    case RT_ACT_RELU:
        CPU_SIMD
        for (size_t i = 0; i < n; i++) {
            const float t = a[i] + b[i];
            y[i] = t > 0.0f ? t : 0.0f;
        }
        break;
    case RT_ACT_LEAKY:
        CPU_SIMD
        for (size_t i = 0; i < n; i++) {
            const float t = a[i] + b[i];
            y[i] = t > 0.0f ? t : alpha * t;
        }
        break;
    default: /* identity; sigmoid and tanh after it, scalar as act_fwd */
        CPU_SIMD
        for (size_t i = 0; i < n; i++)
            y[i] = a[i] + b[i];
        if (kind == RT_ACT_SIGMOID)
            for (size_t i = 0; i < n; i++)
                y[i] = 1.0f / (1.0f + expf(-y[i]));
        else if (kind == RT_ACT_TANH)
            for (size_t i = 0; i < n; i++)
                y[i] = tanhf(y[i]);
    }
}

/* A [shortcut]'s add and activation in one pass: blocks of whole cache
 * lines, each on one thread, as act_fwd. */
int cpu_add_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view av, rt_view bv,
                    rt_view yv)
{
    RT_TRY(cpu_check_act(kind));
    const float *a = cpu_f(av), *b = cpu_f(bv);
    float *y = cpu_f(yv);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_FOR_BLOCKS(k) {
        size_t lo = cpu_block_lo(k), m = cpu_block_len(n, lo);
        add_act_span(kind, alpha, a + lo, b + lo, y + lo, m);
    }
    return RT_OK;
}

int cpu_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view xv, rt_view yv)
{
    const float *x = cpu_f(xv);
    float *y = cpu_f(yv);
    int nt = cpu_nt(d);
    (void)nt;
    switch (kind) {
    case RT_ACT_IDENTITY:
        if (x != y)
            memmove(y, x, n * sizeof(float));
        break;
    case RT_ACT_RELU:
    case RT_ACT_LEAKY: {
        CPU_FOR_BLOCKS(k) {
            size_t lo = cpu_block_lo(k), m = cpu_block_len(n, lo);
            act_fwd_span(kind == RT_ACT_LEAKY, alpha, x + lo, y + lo, m);
        }
        break;
    }
    case RT_ACT_SIGMOID: /* expf is not vectorised here: more threads sooner */
        CPU_PAR
        for (size_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case RT_ACT_TANH:
        CPU_PAR
        for (size_t i = 0; i < n; i++)
            y[i] = tanhf(x[i]);
        break;
    default:
        return rt_error(RT_ERR_UNSUPPORTED, "cpu: unknown activation %d", (int)kind);
    }
    return RT_OK;
}

int cpu_act_bwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view xv, rt_view yv,
                rt_view dyv, rt_view dxv)
{
    RT_TRY(cpu_check_act(kind));
    const float *x = cpu_f(xv), *y = cpu_f(yv), *dy = cpu_f(dyv);
    float *dx = cpu_f(dxv);
    if (kind == RT_ACT_IDENTITY) { /* one memmove: dx and dy may overlap */
        act_grad_span(kind, alpha, x, y, dy, dx, n);
        return RT_OK;
    }
    int nt = cpu_nt(d);
    (void)nt;
    CPU_FOR_BLOCKS(k) {
        size_t lo = cpu_block_lo(k), m = cpu_block_len(n, lo);
        act_grad_span(kind, alpha, x + lo, y + lo, dy + lo, dx + lo, m);
    }
    return RT_OK;
}

/* ---- softmax + cross-entropy ------------------------------------------------------------- */

static int check_labels(const int *labels, int n, int c)
{
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= c)
            return rt_error(RT_ERR_ARG, "softmax: label %d of sample %d is outside [0, %d)",
                            labels[i], i, c);
    return RT_OK;
}

int cpu_softmax_xent_fwd(rt_dev *d, int n, int c, rt_view lv, rt_view labv, rt_view pv,
                         rt_view lossv)
{
    const float *logits = cpu_f(lv);
    const int *labels = cpu_i(labv);
    float *probs = cpu_f(pv), *losses = cpu_f(lossv);
    RT_TRY(check_labels(labels, n, c));
    for (int i = 0; i < n; i++) {
        const float *l = logits + (size_t)i * c;
        float *p = probs + (size_t)i * c;
        float m = l[0];
        for (int j = 1; j < c; j++)
            m = l[j] > m ? l[j] : m;
        float sum = 0.0f;
        for (int j = 0; j < c; j++) {
            p[j] = expf(l[j] - m);
            sum += p[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < c; j++)
            p[j] *= inv;
        float pl = p[labels[i]];
        losses[i] = -logf(pl > 1e-30f ? pl : 1e-30f);
    }
    return RT_OK;
}

int cpu_softmax_xent_bwd(rt_dev *d, int n, int c, rt_view pv, rt_view labv, float scale,
                         rt_view dv)
{
    const float *probs = cpu_f(pv);
    const int *labels = cpu_i(labv);
    float *dl = cpu_f(dv);
    RT_TRY(check_labels(labels, n, c));
    for (int i = 0; i < n; i++) {
        const float *p = probs + (size_t)i * c;
        float *g = dl + (size_t)i * c;
        for (int j = 0; j < c; j++)
            g[j] = scale * (p[j] - (j == labels[i] ? 1.0f : 0.0f));
    }
    return RT_OK;
}

/* ---- batch norm ----------------------------------------------------------------------------- */

/* One plane's loops, in CPU_CLONES (AVX-512 where there is one; the SSE2
 * default did 2 doubles a vector). Sums go into 8 double lanes, element k
 * into lane k % 8, and the lanes are added in a fixed tree: the same bits
 * on every ISA, where an `omp simd reduction` would take the ISA's width. */
#define BN_LANES 8

static double bn_lanes_sum(const double *l)
{
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* sum of p[k]; the tail past the last 8 added last */
CPU_CLONES
static double bn_plane_sum(const float *p, int n)
{
    double l[BN_LANES] = {0}, t = 0.0;
    int k = 0;
    for (; k + BN_LANES <= n; k += BN_LANES) {
        CPU_SIMD
        for (int j = 0; j < BN_LANES; j++)
            l[j] += p[k + j];
    }
    for (; k < n; k++)
        t += p[k];
    return bn_lanes_sum(l) + t;
}

/* sum of (p[k] - mean)^2, in the same order */
CPU_CLONES
static double bn_plane_sqdev(const float *p, int n, double mean)
{
    double l[BN_LANES] = {0}, t = 0.0;
    int k = 0;
    for (; k + BN_LANES <= n; k += BN_LANES) {
        CPU_SIMD
        for (int j = 0; j < BN_LANES; j++) {
            const double e = p[k + j] - mean;
            l[j] += e * e;
        }
    }
    for (; k < n; k++) {
        const double e = p[k] - mean;
        t += e * e;
    }
    return bn_lanes_sum(l) + t;
}

/* The shape's activation on one plane of bn's output, in place, while it
 * is in L1: the same float operations as act_fwd. Inline: a call per plane
 * of 49 floats cost more than the loop. */
static inline void bn_plane_act(enum rt_act kind, float alpha, float *y, int n)
{
    switch (kind) {
    case RT_ACT_IDENTITY:
        break;
    case RT_ACT_RELU:
    case RT_ACT_LEAKY:
        act_fwd_body(kind == RT_ACT_LEAKY, alpha, y, y, (size_t)n);
        break;
    case RT_ACT_SIGMOID:
        for (int k = 0; k < n; k++)
            y[k] = 1.0f / (1.0f + expf(-y[k]));
        break;
    case RT_ACT_TANH:
        for (int k = 0; k < n; k++)
            y[k] = tanhf(y[k]);
        break;
    }
}

/* q = act(a * (p - m) + b): relu and leaky in the same loop (planes of 49
 * floats: a second loop costs as much as the maths), sigmoid and tanh on
 * the plane while it is in L1. The same float operations as act_fwd. */
CPU_CLONES
static void bn_plane_affine(enum rt_act kind, float alpha, const float *p, float *q, int n,
                            float a, float m, float b)
{
    if (kind == RT_ACT_RELU) {
        CPU_SIMD
        for (int k = 0; k < n; k++) {
            const float t = a * (p[k] - m) + b;
            q[k] = t > 0.0f ? t : 0.0f;
        }
        return;
    }
    if (kind == RT_ACT_LEAKY) {
        CPU_SIMD
        for (int k = 0; k < n; k++) {
            const float t = a * (p[k] - m) + b;
            q[k] = t > 0.0f ? t : alpha * t;
        }
        return;
    }
    CPU_SIMD
    for (int k = 0; k < n; k++)
        q[k] = a * (p[k] - m) + b;
    bn_plane_act(kind, alpha, q, n);
}

/* *sdy += sum of g, *sdyx += sum of g * xhat over one plane, where g is
 * dy, or with an activation dy * f'(y), written to g first (in L1 for the
 * sums). */
CPU_CLONES
static void bn_plane_bwd_sums(enum rt_act kind, float alpha, const float *y,
                              const float *dy, float *g, const float *xp, int n, float mean,
                              float invstd, double *sdy, double *sdyx)
{
    const float *gp = dy;
    if (kind != RT_ACT_IDENTITY) {
        act_grad_body(kind, alpha, y, y, dy, g, (size_t)n);
        gp = g;
    }
    double ly[BN_LANES] = {0}, lx[BN_LANES] = {0}, ty = 0.0, tx = 0.0;
    int k = 0;
    for (; k + BN_LANES <= n; k += BN_LANES) {
        CPU_SIMD
        for (int j = 0; j < BN_LANES; j++) {
            ly[j] += gp[k + j];
            lx[j] += (double)gp[k + j] * ((xp[k + j] - mean) * invstd);
        }
    }
    for (; k < n; k++) {
        ty += gp[k];
        tx += (double)gp[k] * ((xp[k] - mean) * invstd);
    }
    *sdy += bn_lanes_sum(ly) + ty;
    *sdyx += bn_lanes_sum(lx) + tx;
}

/* dx = k1 * (dy - mdb - xhat * mdg) over one plane */
CPU_CLONES
static void bn_plane_bwd_dx(const float *xp, const float *gp, float *dp, int n, float mean,
                            float invstd, float k1, float mdb, float mdg)
{
    CPU_SIMD
    for (int k = 0; k < n; k++) {
        const float xhat = (xp[k] - mean) * invstd;
        dp[k] = k1 * (gp[k] - mdb - xhat * mdg);
    }
}

/* Batch norm walks the planes in memory order, image after image, and on
 * several threads splits the images, as the convolutions around it do.
 * Channel after channel, it read planes of 49 floats 12 KiB apart
 * (resnet8's last stage), and on 2 threads each core read planes the
 * other had written (resnet8 trained 6-12% faster at 2 threads by images).
 * The per-plane sums wait on the stack, 2 x 64 KiB at most, and are added
 * per channel in image order: the same bits as summing plane after plane.
 * More planes, or fewer images than threads: channel after channel. */
#define BN_PLANES 8192

static bool bn_by_images(int nt, const struct rt_bn_shape *s)
{
    return (size_t)s->n * s->c <= BN_PLANES && s->n >= nt;
}

/* The channel's statistics from its planes' sums: save_mean, save_invstd
 * and the running ones (the same operations as on one thread). */
static void bn_channel_stats(const struct rt_bn_shape *s, int c, double mean, double sq,
                             float *save_mean, float *save_invstd, float *run_mean,
                             float *run_var)
{
    const double cnt = (double)s->n * s->hw;
    const double var = sq / cnt;
    /* One value per channel has no unbiased variance; use the biased one. */
    const double uvar = cnt > 1.0 ? sq / (cnt - 1.0) : var;
    const float invstd = (float)(1.0 / sqrt(var + (double)s->eps));
    const float fm = (float)mean;
    save_mean[c] = fm;
    save_invstd[c] = invstd;
    run_mean[c] = (1.0f - s->momentum) * run_mean[c] + s->momentum * fm;
    run_var[c] = (1.0f - s->momentum) * run_var[c] + s->momentum * (float)uvar;
}

static void bn_fwd_train_images(int nt, const struct rt_bn_shape *s, const float *x,
                                const float *gamma, const float *beta, float *y,
                                float *save_mean, float *save_invstd, float *run_mean,
                                float *run_var)
{
    const int N = s->n, C = s->c, HW = s->hw;
    const double cnt = (double)N * HW;
    double psum[BN_PLANES], psq[BN_PLANES];
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if ((size_t)N * C * HW > CPU_PAR_MIN)
#endif
    {
        CPU_FOR_STATIC
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++)
                psum[i * C + c] = bn_plane_sum(x + ((size_t)i * C + c) * HW, HW);
        CPU_FOR_STATIC
        for (int c = 0; c < C; c++) { /* the mean, kept in image 0's slot */
            double sum = 0.0;
            for (int i = 0; i < N; i++)
                sum += psum[i * C + c];
            psum[c] = sum / cnt;
        }
        CPU_FOR_STATIC
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++)
                psq[i * C + c] = bn_plane_sqdev(x + ((size_t)i * C + c) * HW, HW, psum[c]);
        CPU_FOR_STATIC
        for (int c = 0; c < C; c++) {
            double sq = 0.0;
            for (int i = 0; i < N; i++)
                sq += psq[i * C + c];
            bn_channel_stats(s, c, psum[c], sq, save_mean, save_invstd, run_mean, run_var);
        }
        CPU_FOR_STATIC
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++) {
                const size_t o = ((size_t)i * C + c) * HW;
                bn_plane_affine(s->act, s->alpha, x + o, y + o, HW, gamma[c] * save_invstd[c],
                                save_mean[c], beta[c]);
            }
    }
}

/* Channel statistics in double, two passes (mean, then squared deviations),
 * so large means do not eat the variance; the planes in image order. */
int cpu_bn_fwd_train(rt_dev *d, const struct rt_bn_shape *s, rt_view xv, rt_view gv, rt_view bv,
                     rt_view yv, rt_view smv, rt_view siv, rt_view rmv, rt_view rvv)
{
    RT_TRY(cpu_check_act(s->act));
    const float *x = cpu_f(xv), *gamma = cpu_f(gv), *beta = cpu_f(bv);
    float *y = cpu_f(yv), *save_mean = cpu_f(smv), *save_invstd = cpu_f(siv);
    float *run_mean = cpu_f(rmv), *run_var = cpu_f(rvv);
    const int N = s->n, C = s->c, HW = s->hw;
    const double cnt = (double)N * HW;
    const size_t total = (size_t)N * C * HW;
    int nt = cpu_nt(d);
    (void)nt;
    (void)total;
    if (bn_by_images(nt, s)) {
        bn_fwd_train_images(nt, s, x, gamma, beta, y, save_mean, save_invstd, run_mean, run_var);
        return RT_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (total > CPU_PAR_MIN)
#endif
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (int i = 0; i < N; i++)
            sum += bn_plane_sum(x + ((size_t)i * C + c) * HW, HW);
        const double mean = sum / cnt;
        double sq = 0.0;
        for (int i = 0; i < N; i++)
            sq += bn_plane_sqdev(x + ((size_t)i * C + c) * HW, HW, mean);
        bn_channel_stats(s, c, mean, sq, save_mean, save_invstd, run_mean, run_var);
        const float a = gamma[c] * save_invstd[c], fm = save_mean[c], b = beta[c];
        for (int i = 0; i < N; i++) {
            const size_t o = ((size_t)i * C + c) * HW;
            bn_plane_affine(s->act, s->alpha, x + o, y + o, HW, a, fm, b);
        }
    }
    return RT_OK;
}

int cpu_bn_fwd_infer(rt_dev *d, const struct rt_bn_shape *s, rt_view xv, rt_view gv, rt_view bv,
                     rt_view rmv, rt_view rvv, rt_view yv)
{
    RT_TRY(cpu_check_act(s->act));
    const float *x = cpu_f(xv), *gamma = cpu_f(gv), *beta = cpu_f(bv);
    const float *run_mean = cpu_f(rmv), *run_var = cpu_f(rvv);
    float *y = cpu_f(yv);
    const long planes = (long)s->n * s->c;
    const int C = s->c, HW = s->hw;
    const size_t total = (size_t)planes * HW;
    int nt = cpu_nt(d);
    (void)nt;
    (void)total;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (total > CPU_PAR_MIN)
#endif
    for (long p = 0; p < planes; p++) {
        const int c = (int)(p % C);
        const float invstd = 1.0f / sqrtf(run_var[c] + s->eps);
        const float a = gamma[c] * invstd;
        bn_plane_affine(s->act, s->alpha, x + (size_t)p * HW, y + (size_t)p * HW, HW, a,
                        run_mean[c], beta[c]);
    }
    return RT_OK;
}

/* bn_bwd split by images (bn_by_images): the planes' sums, then the
 * channels' (in image order), then dx. */
static void bn_bwd_images(int nt, const struct rt_bn_shape *s, const float *x, const float *y,
                          const float *dy, const float *gamma, const float *save_mean,
                          const float *save_invstd, float *dx, float *dgamma, float *dbeta)
{
    const bool act = s->act != RT_ACT_IDENTITY;
    const int N = s->n, C = s->c, HW = s->hw;
    const float cnt = (float)((double)N * HW);
    const float *g = act ? dx : dy;
    double pdy[BN_PLANES], pdyx[BN_PLANES];
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if ((size_t)N * C * HW > CPU_PAR_MIN)
#endif
    {
        CPU_FOR_STATIC
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++) {
                const size_t o = ((size_t)i * C + c) * HW, k = (size_t)i * C + c;
                pdy[k] = pdyx[k] = 0.0;
                bn_plane_bwd_sums(s->act, s->alpha, act ? y + o : NULL, dy + o, dx + o, x + o,
                                  HW, save_mean[c], save_invstd[c], &pdy[k], &pdyx[k]);
            }
        CPU_FOR_STATIC
        for (int c = 0; c < C; c++) {
            double sdy = 0.0, sdyx = 0.0;
            for (int i = 0; i < N; i++) {
                sdy += pdy[i * C + c];
                sdyx += pdyx[i * C + c];
            }
            dgamma[c] = (float)sdyx;
            dbeta[c] = (float)sdy;
        }
        CPU_FOR_STATIC
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++) {
                const size_t o = ((size_t)i * C + c) * HW;
                const float k1 = gamma[c] * save_invstd[c];
                bn_plane_bwd_dx(x + o, g + o, dx + o, HW, save_mean[c], save_invstd[c], k1,
                                dbeta[c] / cnt, dgamma[c] / cnt);
            }
    }
}

/* dbeta = sum g, dgamma = sum g*xhat,
 * dx = gamma*invstd/M * (M*g - dbeta - xhat*dgamma), M = n*hw, where g is
 * dy, or with an activation dy * f'(y), formed a plane at a time in dx
 * (in L1 for the sums; in L2 still, a channel's planes, for the pass that
 * overwrites it). dx may be dy. */
int cpu_bn_bwd(rt_dev *d, const struct rt_bn_shape *s, rt_view xv, rt_view yv, rt_view dyv,
               rt_view gv, rt_view smv, rt_view siv, rt_view dxv, rt_view dgv, rt_view dbv)
{
    RT_TRY(cpu_check_act(s->act));
    const bool act = s->act != RT_ACT_IDENTITY;
    const float *x = cpu_f(xv), *dy = cpu_f(dyv), *gamma = cpu_f(gv);
    const float *y = act ? cpu_f(yv) : NULL;
    const float *save_mean = cpu_f(smv), *save_invstd = cpu_f(siv);
    float *dx = cpu_f(dxv), *dgamma = cpu_f(dgv), *dbeta = cpu_f(dbv);
    const int N = s->n, C = s->c, HW = s->hw;
    const double cnt = (double)N * HW;
    const size_t total = (size_t)N * C * HW;
    int nt = cpu_nt(d);
    (void)nt;
    (void)total;
    if (bn_by_images(nt, s)) {
        bn_bwd_images(nt, s, x, y, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
        return RT_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (total > CPU_PAR_MIN)
#endif
    for (int c = 0; c < C; c++) {
        const float mean = save_mean[c], invstd = save_invstd[c];
        double sdy = 0.0, sdyx = 0.0;
        const float *g = act ? dx : dy;
        for (int i = 0; i < N; i++) {
            const size_t o = ((size_t)i * C + c) * HW;
            bn_plane_bwd_sums(s->act, s->alpha, act ? y + o : NULL, dy + o, dx + o, x + o, HW,
                              mean, invstd, &sdy, &sdyx);
        }
        const float db = (float)sdy, dg = (float)sdyx;
        const float k1 = gamma[c] * invstd, mdb = db / (float)cnt, mdg = dg / (float)cnt;
        for (int i = 0; i < N; i++) {
            const size_t o = ((size_t)i * C + c) * HW;
            bn_plane_bwd_dx(x + o, g + o, dx + o, HW, mean, invstd, k1, mdb, mdg);
        }
        dgamma[c] = dg;
        dbeta[c] = db;
    }
    return RT_OK;
}

/* ---- dropout ------------------------------------------------------------------------------- */

int cpu_dropout_fwd(rt_dev *d, size_t n, float rate, uint64_t seed, rt_view xv, rt_view yv,
                    rt_view mv)
{
    const float *x = cpu_f(xv);
    float *y = cpu_f(yv), *mask = cpu_f(mv);
    const float keep = 1.0f / (1.0f - rate);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_PAR
    for (size_t i = 0; i < n; i++) {
        float m = rt_dropout_keep(seed, i, rate) ? keep : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
    return RT_OK;
}
