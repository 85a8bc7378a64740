/* test_cpu_ops.c — every op of the cpu backend against a naive,
 * obviously-correct loop written here (in double), on odd shapes, strides,
 * padding, n = 1 and zero-size edges, at 1, 2 and 3 threads.
 *
 * Every output view sits between guard values that must survive the op, and
 * outputs and workspaces start as NaN, so an op that writes out of range,
 * leaves part of an output unwritten or reads scratch it did not write
 * fails here. Optimiser steps are checked against values worked out by hand
 * (python, from the formulas in backend.h) for two steps. */
#include "config.h"

#include "testutil.h"

#include <strings.h>

#include "backend.h"
#include "cpu/cpu-impl.h" /* cpu_gemm_small */
#include "optim.h"
#include "status.h"

#define GUARD 16 /* floats of guard on each side of a view */
static const float guard_value = -7777.25f;

static const int thread_counts[] = {1, 2, 3};
#define N_THREADS (int)(sizeof thread_counts / sizeof thread_counts[0])

/* ---- guarded device tensors ---------------------------------------------------- */

typedef struct tb {
    rt_dev *d;
    rt_buf *buf;
    rt_view v; /* the tensor, GUARD floats into buf */
    size_t n;
} tb;

static tb tb_new(rt_dev *d, size_t n)
{
    tb t = {d, NULL, {NULL, 0}, n};
    t.buf = rt_buf_new(d, (n + 2 * GUARD) * sizeof(float));
    assert_non_null(t.buf);
    assert_int_equal((uintptr_t)rt_view_host(rt_buf_view(t.buf)) % 64, 0);
    float *all = malloc((n + 2 * GUARD) * sizeof(float));
    assert_non_null(all);
    for (size_t i = 0; i < n + 2 * GUARD; i++)
        all[i] = i < GUARD || i >= GUARD + n ? guard_value : NAN;
    assert_int_equal(rt_upload(d, rt_buf_view(t.buf), all, (n + 2 * GUARD) * sizeof(float)), 0);
    free(all);
    t.v = rt_view_at(rt_buf_view(t.buf), GUARD);
    return t;
}

static void tb_set(tb *t, const float *src)
{
    assert_int_equal(rt_upload(t->d, t->v, src, t->n * sizeof(float)), 0);
}

static void tb_get(tb *t, float *dst)
{
    assert_int_equal(rt_download(t->d, dst, t->v, t->n * sizeof(float)), 0);
}

/* The guards on both sides of the view are intact. */
static void tb_check_guard(tb *t)
{
    float g[GUARD];
    assert_int_equal(rt_download(t->d, g, rt_buf_view(t->buf), sizeof g), 0);
    for (int i = 0; i < GUARD; i++)
        assert_true(g[i] == guard_value);
    assert_int_equal(rt_download(t->d, g, rt_view_at(t->v, t->n), sizeof g), 0);
    for (int i = 0; i < GUARD; i++)
        assert_true(g[i] == guard_value);
}

static void tb_free(tb *t)
{
    tb_check_guard(t);
    rt_buf_destroy(&t->buf);
    assert_null(t->buf);
}

static float *fvec(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

static float *frand(size_t n, float lo, float hi, uint64_t seed)
{
    float *p = fvec(n);
    tu_fill_uniform(p, n, lo, hi, seed);
    return p;
}

/* Download t and compare with the reference; `what` names the failure. */
static void expect_close(tb *t, const float *ref, double tol, double floor_, const char *what)
{
    float *got = fvec(t->n);
    tb_get(t, got);
    double e = tu_max_rel_err(got, ref, t->n, floor_);
    if (!(e <= tol)) {
        for (size_t i = 0; i < t->n; i++)
            if (!(fabs((double)got[i] - ref[i]) / fmax(fabs((double)ref[i]), floor_) <= tol)) {
                print_error("%s: element %zu: got %.9g want %.9g\n", what, i, got[i], ref[i]);
                break;
            }
        free(got);
        fail_msg("%s: max rel err %g > %g", what, e, tol);
    }
    free(got);
    tb_check_guard(t);
}

static rt_dev *open_dev(int threads)
{
    rt_dev *d = rt_dev_open("cpu", 0, threads);
    assert_non_null(d);
    return d;
}

/* ---- devices and memory ------------------------------------------------------ */

static void test_device(void **state)
{
    (void)state;
    assert_true(rt_backend_count() >= 1);
    assert_string_equal(rt_backend_name(0), "cpu");
    assert_int_equal(rt_backend_device_count("cpu"), 1);
    struct rt_device_info info;
    assert_int_equal(rt_backend_device_info("cpu", 0, &info), 0);
    assert_true(strlen(info.name) > 0);
    assert_true(info.mem_bytes > 0);
    assert_true(info.compute_units >= 1);
    assert_true(rt_backend_device_info("cpu", 1, &info) < 0);
    assert_null(rt_dev_open("cpu", 1, 1));

    rt_dev *d = open_dev(2);
    assert_string_equal(rt_dev_backend(d), "cpu");
#ifdef _OPENMP
    assert_int_equal(rt_dev_threads(d), 2);
#else
    assert_int_equal(rt_dev_threads(d), 1); /* no OpenMP: one thread, said so */
#endif
    rt_dev *all = open_dev(0); /* 0: every thread OpenMP offers, resolved */
    assert_true(rt_dev_threads(all) >= 1);
    rt_dev_close(&all);
    /* upload / copy / download, overlapping copy, sync; long enough for
     * the copy's blocks over threads (CPU_PAR_MIN), with a part block */
    enum { NC = 100003 };
    tb a = tb_new(d, NC), b = tb_new(d, NC);
    float *x = frand(NC, -1, 1, 1), *y = fvec(NC);
    tb_set(&a, x);
    assert_int_equal(rt_copy(d, b.v, a.v, NC), 0);
    assert_int_equal(rt_sync(d), 0);
    expect_close(&b, x, 0, 1, "copy");
    assert_int_equal(rt_copy(d, rt_view_at(a.v, 1), a.v, NC - 1), 0);
    tb_get(&a, y);
    assert_true(y[0] == x[0]);
    for (int i = 1; i < NC; i++)
        assert_true(y[i] == x[i - 1]);
    assert_int_equal(rt_copy(d, b.v, a.v, 0), 0);
    tb_free(&a);
    tb_free(&b);
    rt_buf *z = rt_buf_new(d, 0);
    assert_non_null(z);
    rt_buf_destroy(&z);
    free(x);
    free(y);
    rt_dev_close(&d);
    assert_null(d);
}

/* ---- gemm ------------------------------------------------------------------------ */

static void gemm_ref(int ta, int tb_, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                     (tb_ ? b[j * ldb + p] : b[p * ldb + j]);
            double old = beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j];
            c[i * ldc + j] = (float)(alpha * s + old);
        }
}

static void gemm_case(rt_dev *d, int ta, int tb_, int m, int n, int k, float alpha, float beta,
                      int pad, uint64_t seed)
{
    int lda = (ta ? m : k) + pad, ldb = (tb_ ? k : n) + pad, ldc = n + pad;
    size_t asz = (size_t)(ta ? k : m) * lda, bsz = (size_t)(tb_ ? n : k) * ldb,
           csz = (size_t)m * ldc;
    float *a = frand(asz, -1, 1, seed), *b = frand(bsz, -1, 1, seed + 1);
    float *c = frand(csz, -1, 1, seed + 2), *ref = fvec(csz);
    if (beta == 0.0f)
        for (size_t i = 0; i < csz; i += 3)
            c[i] = NAN; /* beta == 0: C is not read */
    memcpy(ref, c, csz * sizeof(float));
    gemm_ref(ta, tb_, m, n, k, alpha, a, lda, b, ldb, beta, ref, ldc);
    /* padding columns of C are not part of the result: keep them as they were */
    for (int i = 0; i < m; i++)
        for (int j = n; j < ldc; j++)
            ref[i * ldc + j] = c[i * ldc + j];
    tb A = tb_new(d, asz), B = tb_new(d, bsz), C = tb_new(d, csz);
    tb_set(&A, a);
    tb_set(&B, b);
    tb_set(&C, c);
    assert_int_equal(rt_op_gemm(d, ta, tb_, m, n, k, alpha, A.v, lda, B.v, ldb, beta, C.v, ldc), 0);
    float *got = fvec(csz);
    tb_get(&C, got);
    for (size_t i = 0; i < csz; i++) {
        bool pad_col = (int)(i % ldc) >= n;
        if (pad_col && isnan(ref[i]))
            assert_true(isnan(got[i]));
        else if (!(fabs(got[i] - ref[i]) <= 1e-5 * fmax(1.0, fabs(ref[i]))))
            fail_msg("gemm ta=%d tb=%d m=%d n=%d k=%d beta=%g: C[%zu] = %g, want %g", ta, tb_,
                     m, n, k, beta, i, got[i], ref[i]);
    }
    tb_free(&A);
    tb_free(&B);
    tb_free(&C);
    free(a);
    free(b);
    free(c);
    free(ref);
    free(got);
}

static void test_gemm(void **state)
{
    (void)state;
    /* the last ones are big enough to be split over threads, by rows of C
     * (m >= n) or by columns; the very last has B over the small-GEMM
     * kernel's 65,536 floats (the BLAS's) */
    static const int sizes[][3] = {{1, 1, 1},      {7, 5, 3},     {13, 17, 19}, {3, 200, 9},
                                   {120, 1, 37},   {64, 33, 100}, {20, 300, 50},
                                   {201, 40, 30},  {33, 129, 64}, {40, 400, 170}};
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        uint64_t seed = 100;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb_ = 0; tb_ < 2; tb_++) {
                    gemm_case(d, ta, tb_, sizes[s][0], sizes[s][1], sizes[s][2], 1.0f, 0.0f, 0,
                              seed += 3);
                    gemm_case(d, ta, tb_, sizes[s][0], sizes[s][1], sizes[s][2], -0.5f, 1.0f, 3,
                              seed += 3);
                    gemm_case(d, ta, tb_, sizes[s][0], sizes[s][1], sizes[s][2], 2.0f, 0.25f, 1,
                              seed += 3);
                    /* C added to: the small-GEMM kernel's accumulating form */
                    gemm_case(d, ta, tb_, sizes[s][0], sizes[s][1], sizes[s][2], 1.0f, 1.0f, 2,
                              seed += 3);
                }
        /* k == 0: C = beta*C, and a/b are not looked at */
        gemm_case(d, 0, 0, 4, 5, 0, 1.0f, 0.5f, 0, 7);
        gemm_case(d, 0, 0, 4, 5, 0, 1.0f, 0.0f, 0, 8);
        /* m == 0 or n == 0: nothing */
        rt_view none = {NULL, 0};
        assert_int_equal(rt_op_gemm(d, 0, 0, 0, 5, 3, 1, none, 3, none, 5, 0, none, 5), 0);
        rt_dev_close(&d);
    }
}

/* ---- convolution ----------------------------------------------------------------- */

static struct rt_conv_shape conv_make(int n, int c, int h, int w, int k, int r, int s, int sh,
                                      int sw, int ph, int pw)
{
    struct rt_conv_shape cs = {n, c, h, w, k, r, s, sh, sw, ph, pw, 0, 0};
    cs.oh = (h + 2 * ph - r) / sh + 1;
    cs.ow = (w + 2 * pw - s) / sw + 1;
    return cs;
}

/* The definition itself, one output at a time; bwd by scattering the same
 * products, in double. */
static void conv_ref(const struct rt_conv_shape *s, const float *x, const float *w,
                     const float *dy, float *y, float *dx, float *dw)
{
    size_t xs = (size_t)s->n * s->c * s->h * s->w, wsz = (size_t)s->k * s->c * s->r * s->s;
    double *ddx = calloc(xs ? xs : 1, sizeof(double)), *ddw = calloc(wsz, sizeof(double));
    assert_non_null(ddx);
    assert_non_null(ddw);
    for (int n = 0; n < s->n; n++)
        for (int k = 0; k < s->k; k++)
            for (int oh = 0; oh < s->oh; oh++)
                for (int ow = 0; ow < s->ow; ow++) {
                    size_t yi = (((size_t)n * s->k + k) * s->oh + oh) * s->ow + ow;
                    double acc = 0;
                    for (int c = 0; c < s->c; c++)
                        for (int r = 0; r < s->r; r++)
                            for (int q = 0; q < s->s; q++) {
                                int ih = oh * s->stride_h - s->pad_h + r;
                                int iw = ow * s->stride_w - s->pad_w + q;
                                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                                    continue;
                                size_t xi = (((size_t)n * s->c + c) * s->h + ih) * s->w + iw;
                                size_t wi = (((size_t)k * s->c + c) * s->r + r) * s->s + q;
                                acc += (double)x[xi] * w[wi];
                                ddx[xi] += (double)dy[yi] * w[wi];
                                ddw[wi] += (double)dy[yi] * x[xi];
                            }
                    y[yi] = (float)acc;
                }
    for (size_t i = 0; i < xs; i++)
        dx[i] = (float)ddx[i];
    for (size_t i = 0; i < wsz; i++)
        dw[i] = (float)ddw[i];
    free(ddx);
    free(ddw);
}

static void conv_case(rt_dev *d, const struct rt_conv_shape *s, uint64_t seed)
{
    size_t xs = (size_t)s->n * s->c * s->h * s->w, wsz = (size_t)s->k * s->c * s->r * s->s;
    size_t ys = (size_t)s->n * s->k * s->oh * s->ow;
    size_t wss = rt_conv2d_workspace(d, s);
    float *x = frand(xs, -1, 1, seed), *w = frand(wsz, -1, 1, seed + 1);
    float *dy = frand(ys, -1, 1, seed + 2);
    float *y = fvec(ys), *dx = fvec(xs), *dw = fvec(wsz);
    conv_ref(s, x, w, dy, y, dx, dw);
    tb X = tb_new(d, xs), W = tb_new(d, wsz), DY = tb_new(d, ys);
    tb Y = tb_new(d, ys), DX = tb_new(d, xs), DW = tb_new(d, wsz), WS = tb_new(d, wss);
    tb_set(&X, x);
    tb_set(&W, w);
    tb_set(&DY, dy);
    char what[160];
    snprintf(what, sizeof what, "conv n%d c%d %dx%d k%d %dx%d s%d,%d p%d,%d threads %d", s->n,
             s->c, s->h, s->w, s->k, s->r, s->s, s->stride_h, s->stride_w, s->pad_h, s->pad_w,
             rt_dev_threads(d));
    /* the sums have up to c*r*s (fwd), k*r*s (data) or n*oh*ow (filter) terms */
    assert_int_equal(rt_op_conv2d_fwd(d, s, X.v, W.v, Y.v, WS.v), 0);
    expect_close(&Y, y, 1e-5, 1.0, what);
    assert_int_equal(rt_op_conv2d_bwd_data(d, s, DY.v, W.v, DX.v, WS.v), 0);
    expect_close(&DX, dx, 1e-5, 1.0, what);
    assert_int_equal(rt_op_conv2d_bwd_filter(d, s, X.v, DY.v, DW.v, WS.v), 0);
    /* relative to the typical size of a sum of that many products of
     * uniform [-1, 1) values, sqrt(terms) / 3: a weight of 4.1 summed from
     * 8,085 products (7 images of 35 x 33) was off by 4.6e-5 with OpenBLAS
     * 0.3.21's Zen kernels on an AMD EPYC, 1.1e-5 of itself and 1.5e-6 of
     * this; the other sums stay within 1e-5 of max(|value|, 1) */
    const double terms = (double)s->n * s->oh * s->ow;
    expect_close(&DW, dw, 1e-5, fmax(4.0, sqrt(terms) / 3.0), what);
    /* the same sum again, bit for bit, whichever thread took which images */
    float *dw1 = fvec(wsz), *dw2 = fvec(wsz);
    tb_get(&DW, dw1);
    assert_int_equal(rt_op_conv2d_bwd_filter(d, s, X.v, DY.v, DW.v, WS.v), 0);
    tb_get(&DW, dw2);
    assert_memory_equal(dw1, dw2, wsz * sizeof(float));
    free(dw1);
    free(dw2);
    /* WS started as NaN: an op that read scratch it had not written fails */
    tb_free(&X);
    tb_free(&W);
    tb_free(&DY);
    tb_free(&Y);
    tb_free(&DX);
    tb_free(&DW);
    tb_free(&WS);
    free(x);
    free(w);
    free(dy);
    free(y);
    free(dx);
    free(dw);
}

static void test_conv(void **state)
{
    (void)state;
    const struct rt_conv_shape shapes[] = {
        conv_make(2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1),
        conv_make(3, 2, 8, 8, 5, 3, 3, 2, 2, 1, 1),   /* stride 2 */
        conv_make(1, 1, 5, 5, 1, 5, 5, 1, 1, 2, 2),   /* n = 1, one channel */
        conv_make(4, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2), /* LeNet conv1 */
        conv_make(3, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0), /* LeNet conv2 */
        conv_make(5, 1, 28, 28, 8, 3, 3, 1, 1, 0, 0),  /* seedcnn conv1 */
        conv_make(2, 4, 6, 5, 3, 1, 1, 1, 1, 0, 0),    /* pointwise: no im2col */
        conv_make(3, 2, 5, 5, 2, 1, 1, 2, 2, 0, 0),    /* 1x1, stride 2 */
        conv_make(2, 3, 9, 7, 2, 2, 3, 2, 1, 0, 2),    /* asymmetric */
        conv_make(5, 3, 6, 6, 4, 3, 3, 3, 2, 2, 1),
        conv_make(1, 2, 4, 4, 3, 2, 2, 1, 1, 2, 2),    /* outputs entirely in padding */
        conv_make(3, 2, 3, 3, 2, 3, 3, 1, 1, 0, 0),    /* 1x1 output */
        conv_make(3, 2, 6, 9, 3, 3, 3, 1, 1, 0, 2),    /* stride 1, pad in w only */
        conv_make(2, 3, 8, 7, 2, 3, 2, 1, 1, 2, 0),    /* stride 1, pad in h only */
        conv_make(2, 2, 5, 12, 3, 2, 4, 1, 1, 1, 3),   /* pad_w = s - 1 */
        conv_make(2, 2, 5, 5, 2, 2, 2, 1, 1, 3, 3),    /* pad > kernel */
        conv_make(2, 32, 12, 12, 8, 3, 3, 1, 1, 1, 1), /* many channels */
        /* 3x3 stride 1 with c, k >= 8: the Winograd F(2x2,3x3) path */
        conv_make(3, 32, 26, 26, 32, 3, 3, 1, 1, 0, 0), /* seedcnn conv2 */
        conv_make(1, 8, 7, 9, 8, 3, 3, 1, 1, 1, 1),     /* n = 1, odd oh and ow */
        conv_make(4, 9, 5, 6, 11, 3, 3, 1, 1, 0, 0),    /* odd oh, even ow, odd c, k */
        conv_make(2, 16, 8, 8, 8, 3, 3, 1, 1, 2, 2),    /* pad 2: outputs at the rim */
        conv_make(3, 8, 10, 7, 16, 3, 3, 1, 1, 0, 1),   /* pad in w only */
        conv_make(5, 12, 4, 11, 9, 3, 3, 1, 1, 1, 0),   /* pad in h only */
        conv_make(2, 8, 4, 4, 8, 3, 3, 1, 1, 0, 0),     /* 2x2 output: one tile */
        conv_make(7, 10, 35, 33, 12, 3, 3, 1, 1, 1, 1), /* rows of more than 16 tiles */
        conv_make(2, 8, 5, 5, 8, 3, 3, 1, 1, 4, 3),     /* pad > kernel */
        conv_make(7, 8, 20, 20, 8, 3, 3, 1, 1, 0, 0),   /* 3-image chunks, last one short */
        conv_make(13, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1), /* 4 chunks of 3-4 images */
        conv_make(9, 16, 7, 7, 16, 3, 3, 1, 1, 1, 1),   /* resnet8's last stage, odd n */
        /* strided, wide: the padded image split into phase planes */
        conv_make(3, 16, 28, 28, 32, 3, 3, 2, 2, 1, 1), /* resnet8's 28 -> 14 conv */
        conv_make(2, 3, 33, 31, 4, 3, 3, 2, 2, 0, 1),   /* odd sizes, odd pad_w */
        conv_make(2, 3, 34, 34, 5, 3, 3, 2, 2, 0, 0),   /* no padding */
        conv_make(2, 2, 40, 40, 3, 3, 3, 3, 3, 1, 1),   /* stride 3 */
        conv_make(2, 3, 30, 20, 4, 3, 3, 2, 1, 1, 1),   /* stride 2 in h only */
        conv_make(2, 3, 21, 36, 4, 3, 3, 1, 2, 2, 3),   /* stride 2 in w only, pad > stride */
        conv_make(2, 4, 9, 9, 3, 2, 2, 3, 3, 0, 0),     /* stride > filter: phases without taps */
        conv_make(2, 3, 17, 17, 4, 5, 5, 4, 4, 2, 2),   /* stride 4: 16 phases */
        conv_make(2, 3, 17, 17, 4, 5, 5, 5, 5, 0, 0),   /* stride 5: past the phases' limit */
        /* the filters' gradient read in place (wgrad.c): by positions in
         * images one at a time, 25 column rows (pairs and one); by
         * positions with filters in blocks of 6 and 5; by filters, 16 and
         * a masked 4, 2-image batches; by filters, padded (staged), 7
         * filters masked, column rows in blocks of 6 and 3; on x itself
         * (not wide: more filters than column rows) by positions and by
         * filters */
        conv_make(11, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2),
        conv_make(3, 2, 24, 24, 11, 3, 3, 1, 1, 0, 0),
        conv_make(19, 6, 14, 14, 20, 5, 5, 1, 1, 0, 0),
        conv_make(9, 3, 12, 12, 7, 3, 3, 1, 1, 1, 1),
        conv_make(3, 1, 10, 10, 16, 3, 3, 1, 1, 0, 0),
        conv_make(2, 1, 12, 12, 16, 3, 3, 1, 1, 0, 0),
        /* by filters in AVX-512 (wgrad512.c): 12 filters (one masked
         * vector), 24 and 32 (two vectors), column rows in blocks of 12 and
         * 6 with tails */
        conv_make(5, 6, 14, 14, 12, 5, 5, 1, 1, 0, 0),
        conv_make(3, 3, 9, 9, 24, 3, 3, 1, 1, 1, 1),
        conv_make(4, 5, 11, 11, 32, 3, 3, 2, 2, 1, 1),
    };
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        uint64_t seed = 1000;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            conv_case(d, &shapes[i], seed += 7);
        /* the wide layouts without the AVX-512 rows kernel: the AVX2 one
         * (OPENBLAS_CORETYPE=Haswell, test_blas_core.sh), or, where the
         * BLAS has AVX-512 kernels, the runs copied out for a GEMM: the
         * forward's and the data gradient's phases (conv_dgrad.c) */
        const struct rt_conv_shape wide[] = {
            conv_make(3, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0),  /* lenet conv2 */
            conv_make(3, 16, 28, 28, 32, 3, 3, 2, 2, 1, 1), /* resnet8's 28 -> 14 */
            conv_make(2, 3, 33, 31, 4, 3, 3, 2, 2, 0, 1),
            conv_make(2, 2, 40, 40, 3, 3, 3, 3, 3, 1, 1),
            conv_make(2, 3, 21, 36, 4, 3, 3, 1, 2, 2, 3),
            conv_make(2, 4, 9, 9, 3, 2, 2, 3, 3, 0, 0),
            conv_make(2, 3, 17, 17, 4, 5, 5, 4, 4, 2, 2),
        };
        cpu_gemm_small512_set(false);
        for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
            conv_case(d, &wide[i], seed += 7);
        cpu_gemm_small512_set(true);
        /* random shapes */
        rt_rng rng;
        rt_rng_seed(&rng, 42, 1);
        for (int i = 0; i < 24; i++) {
            int r = 1 + (int)rt_rng_below(&rng, 4), s = 1 + (int)rt_rng_below(&rng, 4);
            /* half of them stride 1, the common case with its own path */
            int sh = i % 2 ? 1 : 1 + (int)rt_rng_below(&rng, 3);
            int sw = i % 2 ? 1 : 1 + (int)rt_rng_below(&rng, 3);
            int ph = (int)rt_rng_below(&rng, (uint64_t)r), pw = (int)rt_rng_below(&rng, (uint64_t)s);
            int h = r + (int)rt_rng_below(&rng, 9), w = s + (int)rt_rng_below(&rng, 9);
            struct rt_conv_shape cs =
                conv_make(1 + (int)rt_rng_below(&rng, 6), 1 + (int)rt_rng_below(&rng, 5), h, w,
                          1 + (int)rt_rng_below(&rng, 7), r, s, sh, sw, ph, pw);
            conv_case(d, &cs, seed += 7);
        }
        /* n = 0: forward and bwd-data do nothing, bwd-filter gives dw = 0 */
        struct rt_conv_shape z = conv_make(0, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1);
        tb W = tb_new(d, 54), DW = tb_new(d, 54);
        rt_view none = {NULL, 0};
        assert_int_equal(rt_op_conv2d_fwd(d, &z, none, W.v, none, none), 0);
        assert_int_equal(rt_op_conv2d_bwd_data(d, &z, none, W.v, none, none), 0);
        assert_int_equal(rt_op_conv2d_bwd_filter(d, &z, none, none, DW.v, none), 0);
        float zero[54] = {0};
        expect_close(&DW, zero, 0, 1, "conv bwd-filter n=0");
        tb_free(&W);
        tb_free(&DW);
        rt_dev_close(&d);
    }
}

/* A model sizes each conv layer's workspace for the larger of 1 image and
 * its batch (src/layers/conv.c): every smaller batch (the epoch's last)
 * must fit in that. */
static void test_conv_workspace_grows(void **state)
{
    (void)state;
    const struct rt_conv_shape shapes[] = {
        conv_make(64, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1), /* resnet8's three stages */
        conv_make(64, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1),
        conv_make(64, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1),
        conv_make(64, 1, 28, 28, 32, 3, 3, 1, 1, 0, 0),  /* seedcnn */
        conv_make(64, 32, 26, 26, 32, 3, 3, 1, 1, 0, 0),
        conv_make(64, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0),  /* lenet */
        conv_make(64, 8, 12, 12, 8, 3, 3, 2, 2, 1, 1),   /* strided */
    };
    enum { MAXN = 64 };
    for (int ti = 0; ti < N_THREADS; ti++) {
        const int t = thread_counts[ti];
        rt_dev *d = open_dev(t);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            struct rt_conv_shape s = shapes[i];
            size_t ws[MAXN + 1];
            for (int n = 1; n <= MAXN; n++) {
                s.n = n;
                ws[n] = rt_conv2d_workspace(d, &s);
            }
            for (int batch = 1; batch <= MAXN; batch++) {
                size_t room = ws[1] > ws[batch] ? ws[1] : ws[batch];
                for (int n = 1; n <= batch; n++)
                    if (ws[n] > room)
                        fail_msg("conv c%d %dx%d k%d at %d threads: %d images need %zu floats, "
                                 "a batch of %d sizes %zu", s.c, s.h, s.w, s.k, t, n, ws[n],
                                 batch, room);
            }
        }
        rt_dev_close(&d);
    }
}

/* Forward and bwd-data of one image do not depend on which thread took it
 * nor on how many there are: the same bits at 1, 2 and 3 threads (the
 * Winograd path's chunks are cut by the shape alone, wino_balance). */
static void test_conv_thread_bits(void **state)
{
    (void)state;
    const struct rt_conv_shape shapes[] = {
        conv_make(64, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1), /* resnet8's three stages */
        conv_make(64, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1),
        conv_make(64, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1),
        conv_make(11, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1), /* uneven chunks */
        conv_make(6, 4, 12, 12, 8, 3, 3, 1, 1, 1, 1),    /* im2col, wide */
        conv_make(6, 8, 12, 12, 8, 3, 3, 2, 2, 1, 1),    /* im2col, strided, wide */
        conv_make(6, 1, 12, 12, 16, 3, 3, 2, 2, 1, 1),   /* im2col, strided, exact (k > crs) */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const struct rt_conv_shape *s = &shapes[i];
        size_t xs = (size_t)s->n * s->c * s->h * s->w, wsz = (size_t)s->k * s->c * s->r * s->s;
        size_t ys = (size_t)s->n * s->k * s->oh * s->ow;
        float *x = frand(xs, -1, 1, 70 + i), *w = frand(wsz, -1, 1, 80 + i);
        float *dy = frand(ys, -1, 1, 90 + i);
        float *y[N_THREADS], *dx[N_THREADS];
        for (int t = 0; t < N_THREADS; t++) {
            rt_dev *d = open_dev(thread_counts[t]);
            tb X = tb_new(d, xs), W = tb_new(d, wsz), DY = tb_new(d, ys), Y = tb_new(d, ys);
            tb DX = tb_new(d, xs), WS = tb_new(d, rt_conv2d_workspace(d, s));
            tb_set(&X, x);
            tb_set(&W, w);
            tb_set(&DY, dy);
            assert_int_equal(rt_op_conv2d_fwd(d, s, X.v, W.v, Y.v, WS.v), 0);
            assert_int_equal(rt_op_conv2d_bwd_data(d, s, DY.v, W.v, DX.v, WS.v), 0);
            y[t] = fvec(ys);
            dx[t] = fvec(xs);
            tb_get(&Y, y[t]);
            tb_get(&DX, dx[t]);
            tb *all[] = {&X, &W, &DY, &Y, &DX, &WS};
            for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
                tb_free(all[j]);
            rt_dev_close(&d);
        }
        for (int t = 1; t < N_THREADS; t++) {
            if (memcmp(y[0], y[t], ys * sizeof(float)))
                fail_msg("conv shape %zu: forward at %d threads differs from 1 thread", i,
                         thread_counts[t]);
            if (memcmp(dx[0], dx[t], xs * sizeof(float)))
                fail_msg("conv shape %zu: bwd-data at %d threads differs from 1 thread", i,
                         thread_counts[t]);
        }
        for (int t = 0; t < N_THREADS; t++) {
            free(y[t]);
            free(dx[t]);
        }
        free(x);
        free(w);
        free(dy);
    }
}

/* The AVX-512 transforms (wino512.c, planes up to 32 wide) give the bits
 * of conv.c's loops: forward, bwd-data, and the backward with the
 * activation's gradient (bwd-filter and db through the same transforms),
 * on shapes at and around their limits. */
static void test_conv_wino512_bits(void **state)
{
    (void)state;
    if (!cpu_wino512_fits(28, 28)) {
        print_message("skipped: this CPU has no AVX-512 (the transforms run conv.c's loops)\n");
        skip();
    }
    const struct rt_conv_shape shapes[] = {
        conv_make(5, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1), /* resnet8's stages */
        conv_make(5, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1), /* (rows of tiles in pairs) */
        conv_make(5, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1),   /* (the plane a vector) */
        conv_make(3, 32, 26, 26, 32, 3, 3, 1, 1, 0, 0), /* seedcnn conv2 */
        conv_make(2, 8, 32, 32, 8, 3, 3, 1, 1, 0, 0),   /* w = 32, ow = 30: the limits */
        conv_make(2, 8, 30, 31, 9, 3, 3, 1, 1, 1, 1),   /* odd w, ow = 31: loops */
        conv_make(2, 9, 29, 27, 8, 3, 3, 1, 1, 0, 2),   /* ow = 29, odd; pad in w only */
        conv_make(3, 8, 9, 5, 11, 3, 3, 1, 1, 2, 0),    /* odd oh, pad in h only */
        conv_make(2, 8, 4, 4, 8, 3, 3, 1, 1, 0, 0),     /* one tile */
        conv_make(2, 8, 8, 8, 9, 3, 3, 1, 1, 1, 1),     /* whole plane a vector: 64, 16 tiles */
        conv_make(2, 8, 9, 5, 8, 3, 3, 1, 1, 2, 0),     /* the same, 12 tiles, padded rows */
        conv_make(2, 8, 16, 16, 8, 3, 3, 1, 1, 1, 1),   /* rows of tiles in pairs: 16 lanes */
        conv_make(3, 8, 13, 16, 9, 3, 3, 1, 1, 1, 0),   /* pairs, odd rows of tiles, pad_h */
        conv_make(2, 8, 5, 5, 8, 3, 3, 1, 1, 4, 3),     /* pad > kernel */
        conv_make(1, 8, 7, 9, 8, 3, 3, 1, 1, 1, 1),     /* odd oh and ow */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const struct rt_conv_shape *s = &shapes[i];
        const size_t xs = (size_t)s->n * s->c * s->h * s->w, wsz = (size_t)s->k * s->c * 9;
        const size_t ys = (size_t)s->n * s->k * s->oh * s->ow;
        float *x = frand(xs, -1, 1, 170 + i), *w = frand(wsz, -1, 1, 180 + i);
        float *dy = frand(ys, -1, 1, 190 + i), *yr = frand(ys, -1, 1, 200 + i);
        for (size_t j = 0; j < ys; j += 7) /* zeros of both signs, as relu's give */
            dy[j] = j % 2 ? 0.0f : -0.0f;
        float *out[2][5];
        size_t len[5] = {ys, xs, wsz, xs, wsz};
        for (int on = 0; on < 2; on++) {
            cpu_wino512_set(on);
            rt_dev *d = open_dev(2);
            tb X = tb_new(d, xs), W = tb_new(d, wsz), DY = tb_new(d, ys), Y = tb_new(d, ys);
            tb YR = tb_new(d, ys), DX = tb_new(d, xs), DW = tb_new(d, wsz);
            tb DB = tb_new(d, (size_t)s->k), G = tb_new(d, ys);
            tb WS = tb_new(d, rt_conv2d_workspace(d, s));
            tb_set(&X, x);
            tb_set(&W, w);
            tb_set(&DY, dy);
            tb_set(&YR, yr);
            assert_int_equal(rt_op_conv2d_fwd(d, s, X.v, W.v, Y.v, WS.v), 0);
            assert_int_equal(rt_op_conv2d_bwd_data(d, s, DY.v, W.v, DX.v, WS.v), 0);
            assert_int_equal(rt_op_conv2d_bwd_filter(d, s, X.v, DY.v, DW.v, WS.v), 0);
            tb *got[5] = {&Y, &DX, &DW, NULL, NULL};
            for (int k = 0; k < 3; k++) {
                out[on][k] = fvec(len[k]);
                tb_get(got[k], out[on][k]);
            }
            /* relu's gradient through the fused backward: dx and dw again */
            assert_int_equal(rt_op_conv2d_bwd_act(d, s, RT_ACT_RELU, 0.0f, X.v, YR.v, DY.v, W.v,
                                                  G.v, DX.v, DW.v, DB.v, WS.v),
                             0);
            out[on][3] = fvec(xs);
            out[on][4] = fvec(wsz);
            tb_get(&DX, out[on][3]);
            tb_get(&DW, out[on][4]);
            tb *all[] = {&X, &W, &DY, &Y, &YR, &DX, &DW, &DB, &G, &WS};
            for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
                tb_free(all[j]);
            rt_dev_close(&d);
        }
        cpu_wino512_set(true);
        static const char *what[5] = {"forward", "bwd-data", "bwd-filter", "bwd-act dx",
                                      "bwd-act dw"};
        for (int k = 0; k < 5; k++) {
            if (memcmp(out[0][k], out[1][k], len[k] * sizeof(float)))
                fail_msg("conv shape %zu (%dx%d pad %d,%d): %s with the AVX-512 transforms "
                         "differs from conv.c's loops", i, s->h, s->w, s->pad_h, s->pad_w,
                         what[k]);
            free(out[0][k]);
            free(out[1][k]);
        }
        free(x);
        free(w);
        free(dy);
        free(yr);
    }
}

/* ---- bias ------------------------------------------------------------------------ */

static void test_bias(void **state)
{
    (void)state;
    static const int shapes[][3] = {{2, 3, 5}, {1, 1, 1}, {64, 120, 1}, {7, 6, 784}, {3, 33, 17}};
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int n = shapes[i][0], c = shapes[i][1], hw = shapes[i][2];
            size_t total = (size_t)n * c * hw;
            float *b = frand(c, -1, 1, 5 + i), *y = frand(total, -1, 1, 6 + i), *ref = fvec(total);
            float *db = fvec(c);
            for (size_t j = 0; j < total; j++)
                ref[j] = y[j] + b[(j / hw) % c];
            for (int k = 0; k < c; k++) {
                double s = 0;
                for (int m = 0; m < n; m++)
                    for (int p = 0; p < hw; p++)
                        s += y[((size_t)m * c + k) * hw + p];
                db[k] = (float)s;
            }
            tb B = tb_new(d, c), Y = tb_new(d, total), DB = tb_new(d, c);
            tb_set(&B, b);
            tb_set(&Y, y);
            assert_int_equal(rt_op_bias_grad(d, n, c, hw, Y.v, DB.v), 0);
            expect_close(&DB, db, 1e-5, 1.0, "bias_grad");
            assert_int_equal(rt_op_bias_add(d, n, c, hw, B.v, Y.v), 0);
            expect_close(&Y, ref, 1e-6, 1.0, "bias_add");
            /* n = 0: bias_grad gives zeros, bias_add nothing */
            assert_int_equal(rt_op_bias_grad(d, 0, c, hw, Y.v, DB.v), 0);
            memset(db, 0, c * sizeof(float));
            expect_close(&DB, db, 0, 1.0, "bias_grad n=0");
            assert_int_equal(rt_op_bias_add(d, 0, c, hw, B.v, Y.v), 0);
            expect_close(&Y, ref, 1e-6, 1.0, "bias_add n=0");
            tb_free(&B);
            tb_free(&Y);
            tb_free(&DB);
            free(b);
            free(y);
            free(ref);
            free(db);
        }
        rt_dev_close(&d);
    }
}

/* ---- fused ops: the same bits as the ops they fuse --------------------------- */

/* Equal as bit patterns (NaN included). */
static void expect_same_bits(tb *a, tb *b, const char *what, int act, int shape, int threads)
{
    float *x = fvec(a->n), *y = fvec(a->n);
    tb_get(a, x);
    tb_get(b, y);
    for (size_t i = 0; i < a->n; i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0)
            fail_msg("%s (activation %d, shape %d, %d threads): element %zu: fused %.9g, "
                     "separate ops %.9g", what, act, shape, threads, i, x[i], y[i]);
    free(x);
    free(y);
    tb_check_guard(a);
    tb_check_guard(b);
}

/* conv2d_fwd_bias_act against conv2d_fwd, bias_add, act_fwd on every path
 * of the cpu convolution (wide im2col, exact im2col, Winograd, strided,
 * pointwise, a batch smaller than the thread count); act_bias_bwd against
 * act_bwd(y, y) and bias_grad, on conv planes and dense rows. */
static void test_fused(void **state)
{
    (void)state;
    const struct rt_conv_shape shapes[] = {
        conv_make(5, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2),   /* lenet conv1: wide */
        conv_make(4, 1, 28, 28, 32, 3, 3, 1, 1, 0, 0),  /* seedcnn conv1: exact im2col */
        conv_make(3, 16, 12, 12, 16, 3, 3, 1, 1, 1, 1), /* Winograd */
        conv_make(3, 8, 9, 9, 16, 3, 3, 2, 2, 1, 1),    /* strided */
        conv_make(2, 5, 7, 9, 3, 1, 1, 1, 1, 0, 0),     /* pointwise */
        conv_make(1, 16, 10, 10, 8, 3, 3, 1, 1, 1, 1),  /* one image */
    };
    const int ns = (int)(sizeof shapes / sizeof shapes[0]);
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        for (int i = 0; i < ns; i++) {
            const struct rt_conv_shape *cs = &shapes[i];
            const size_t xn = (size_t)cs->n * cs->c * cs->h * cs->w,
                         hw = (size_t)cs->oh * cs->ow, yn = (size_t)cs->n * cs->k * hw,
                         wn = (size_t)cs->k * cs->c * cs->r * cs->s;
            float *x = frand(xn, -1, 1, 40 + i), *w = frand(wn, -1, 1, 50 + i),
                  *b = frand(cs->k, -1, 1, 60 + i), *g = frand(yn, -1, 1, 70 + i);
            tb X = tb_new(d, xn), W = tb_new(d, wn), B = tb_new(d, cs->k),
               WS = tb_new(d, rt_conv2d_workspace(d, cs)), Y1 = tb_new(d, yn), Y2 = tb_new(d, yn),
               G = tb_new(d, yn), DX1 = tb_new(d, yn), DX2 = tb_new(d, yn), DB1 = tb_new(d, cs->k),
               DB2 = tb_new(d, cs->k);
            tb_set(&X, x);
            tb_set(&W, w);
            tb_set(&B, b);
            tb_set(&G, g);
            for (int k = RT_ACT_IDENTITY; k <= RT_ACT_TANH; k++) {
                assert_int_equal(rt_op_conv2d_fwd_bias_act(d, cs, X.v, W.v, B.v, (enum rt_act)k,
                                                           0.1f, Y1.v, WS.v), 0);
                assert_int_equal(rt_op_conv2d_fwd(d, cs, X.v, W.v, Y2.v, WS.v), 0);
                assert_int_equal(rt_op_bias_add(d, cs->n, cs->k, (int)hw, B.v, Y2.v), 0);
                assert_int_equal(rt_op_act_fwd(d, (enum rt_act)k, 0.1f, yn, Y2.v, Y2.v), 0);
                expect_same_bits(&Y1, &Y2, "conv2d_fwd_bias_act", k, i, thread_counts[t]);
                /* backward from y; the dense-row form (hw 1) on the same numbers */
                for (int rows = 0; rows < 2; rows++) {
                    const int n = rows ? (int)(yn / cs->k) : cs->n, c = cs->k,
                              h = rows ? 1 : (int)hw;
                    assert_int_equal(rt_op_act_bias_bwd(d, (enum rt_act)k, 0.1f, n, c, h, Y1.v,
                                                        G.v, DX1.v, DB1.v), 0);
                    assert_int_equal(rt_op_act_bwd(d, (enum rt_act)k, 0.1f, yn, Y1.v, Y1.v, G.v,
                                                   DX2.v), 0);
                    assert_int_equal(rt_op_bias_grad(d, n, c, h, DX2.v, DB2.v), 0);
                    expect_same_bits(&DX1, &DX2, "act_bias_bwd dx", k, i, thread_counts[t]);
                    expect_same_bits(&DB1, &DB2, "act_bias_bwd db", k, i, thread_counts[t]);
                }
            }
            tb *all[] = {&X, &W, &B, &WS, &Y1, &Y2, &G, &DX1, &DX2, &DB1, &DB2};
            for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
                tb_free(all[j]);
            free(x);
            free(w);
            free(b);
            free(g);
        }
        rt_dev_close(&d);
    }
}

/* conv2d_bwd_act against act_bias_bwd, conv2d_bwd_filter and
 * conv2d_bwd_data, bit for bit, with and without dx, and without db (the
 * identity: dy itself, as before batch norm): on Winograd's shapes
 * (one pass, g never formed: its chunks of odd sizes, padding, odd planes,
 * a batch of one) and on the others (the three ops). */
static void test_fused_bwd(void **state)
{
    (void)state;
    const struct rt_conv_shape shapes[] = {
        conv_make(3, 32, 26, 26, 32, 3, 3, 1, 1, 0, 0), /* seedcnn conv2: Winograd */
        conv_make(7, 8, 20, 20, 8, 3, 3, 1, 1, 0, 0),   /* 3-image chunks, last one short */
        conv_make(9, 16, 7, 7, 16, 3, 3, 1, 1, 1, 1),   /* resnet8's last stage, odd n */
        conv_make(1, 8, 7, 9, 8, 3, 3, 1, 1, 1, 1),     /* one image, odd oh and ow */
        conv_make(4, 9, 5, 6, 11, 3, 3, 1, 1, 0, 0),    /* odd c, k */
        conv_make(4, 1, 28, 28, 32, 3, 3, 1, 1, 0, 0),  /* seedcnn conv1: im2col */
        conv_make(3, 8, 9, 9, 16, 3, 3, 2, 2, 1, 1),    /* strided */
        conv_make(2, 5, 7, 9, 3, 1, 1, 1, 1, 0, 0),     /* pointwise */
    };
    const int ns = (int)(sizeof shapes / sizeof shapes[0]);
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        for (int i = 0; i < ns; i++) {
            const struct rt_conv_shape *cs = &shapes[i];
            const size_t xn = (size_t)cs->n * cs->c * cs->h * cs->w,
                         hw = (size_t)cs->oh * cs->ow, yn = (size_t)cs->n * cs->k * hw,
                         wn = (size_t)cs->k * cs->c * cs->r * cs->s;
            float *x = frand(xn, -1, 1, 80 + i), *w = frand(wn, -1, 1, 90 + i),
                  *y = frand(yn, -1, 1, 100 + i), *dy = frand(yn, -1, 1, 110 + i);
            for (size_t j = 0; j < yn; j += 5)
                y[j] = 0.0f; /* relu's zeros */
            tb X = tb_new(d, xn), W = tb_new(d, wn), Y = tb_new(d, yn), DY = tb_new(d, yn),
               WS = tb_new(d, rt_conv2d_workspace(d, cs)), G = tb_new(d, yn), DX1 = tb_new(d, xn),
               DX2 = tb_new(d, xn), DW1 = tb_new(d, wn), DW2 = tb_new(d, wn),
               DB1 = tb_new(d, cs->k), DB2 = tb_new(d, cs->k);
            tb_set(&X, x);
            tb_set(&W, w);
            tb_set(&Y, y);
            tb_set(&DY, dy);
            for (int k = RT_ACT_IDENTITY; k <= RT_ACT_TANH; k++) {
                const enum rt_act a = (enum rt_act)k;
                const bool with_dx = k != RT_ACT_LEAKY;
                assert_int_equal(rt_op_conv2d_bwd_act(d, cs, a, 0.1f, X.v, Y.v, DY.v, W.v, G.v,
                                                      with_dx ? DX1.v : (rt_view){0}, DW1.v,
                                                      DB1.v, WS.v), 0);
                assert_int_equal(rt_op_act_bias_bwd(d, a, 0.1f, cs->n, cs->k, (int)hw, Y.v, DY.v,
                                                    G.v, DB2.v), 0);
                assert_int_equal(rt_op_conv2d_bwd_filter(d, cs, X.v, G.v, DW2.v, WS.v), 0);
                expect_same_bits(&DW1, &DW2, "conv2d_bwd_act dw", k, i, thread_counts[t]);
                expect_same_bits(&DB1, &DB2, "conv2d_bwd_act db", k, i, thread_counts[t]);
                if (with_dx) {
                    assert_int_equal(rt_op_conv2d_bwd_data(d, cs, G.v, W.v, DX2.v, WS.v), 0);
                    expect_same_bits(&DX1, &DX2, "conv2d_bwd_act dx", k, i, thread_counts[t]);
                }
                /* no db: relu's g, or dy itself (y and g unused then) */
                const bool ident = k == RT_ACT_IDENTITY;
                if (k != RT_ACT_RELU && !ident)
                    continue;
                tb_set(&G, y);
                assert_int_equal(rt_op_conv2d_bwd_act(d, cs, a, 0.1f, X.v, ident ? G.v : Y.v, DY.v,
                                                      W.v, ident ? (rt_view){0} : G.v, DX1.v,
                                                      DW1.v, (rt_view){0}, WS.v), 0);
                if (ident) {
                    assert_int_equal(rt_op_conv2d_bwd_filter(d, cs, X.v, DY.v, DW2.v, WS.v), 0);
                    assert_int_equal(rt_op_conv2d_bwd_data(d, cs, DY.v, W.v, DX2.v, WS.v), 0);
                } else {
                    assert_int_equal(rt_op_act_bwd(d, a, 0.1f, yn, Y.v, Y.v, DY.v, G.v), 0);
                    assert_int_equal(rt_op_conv2d_bwd_filter(d, cs, X.v, G.v, DW2.v, WS.v), 0);
                    assert_int_equal(rt_op_conv2d_bwd_data(d, cs, G.v, W.v, DX2.v, WS.v), 0);
                }
                expect_same_bits(&DW1, &DW2, "conv2d_bwd_act without db: dw", k, i,
                                 thread_counts[t]);
                expect_same_bits(&DX1, &DX2, "conv2d_bwd_act without db: dx", k, i,
                                 thread_counts[t]);
            }
            tb *all[] = {&X, &W, &Y, &DY, &WS, &G, &DX1, &DX2, &DW1, &DW2, &DB1, &DB2};
            for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
                tb_free(all[j]);
            free(x);
            free(w);
            free(y);
            free(dy);
        }
        rt_dev_close(&d);
    }
}

/* ---- pooling ------------------------------------------------------------------------ */

static struct rt_pool_shape pool_make(enum rt_pool_mode mode, int n, int c, int h, int w, int r,
                                      int s, int sh, int sw, int ph, int pw)
{
    struct rt_pool_shape p = {mode, n, c, h, w, r, s, sh, sw, ph, pw, 0, 0};
    p.oh = (h + 2 * ph - r) / sh + 1;
    p.ow = (w + 2 * pw - s) / sw + 1;
    return p;
}

static void pool_ref(const struct rt_pool_shape *s, const float *x, const float *dy, float *y,
                     float *dx)
{
    size_t xs = (size_t)s->n * s->c * s->h * s->w;
    double *ddx = calloc(xs, sizeof(double));
    assert_non_null(ddx);
    for (int p = 0; p < s->n * s->c; p++)
        for (int oh = 0; oh < s->oh; oh++)
            for (int ow = 0; ow < s->ow; ow++) {
                size_t yi = ((size_t)p * s->oh + oh) * s->ow + ow;
                double acc = 0;
                long best = -1;
                float bv = 0;
                for (int r = 0; r < s->r; r++)
                    for (int q = 0; q < s->s; q++) {
                        int ih = oh * s->stride_h - s->pad_h + r, iw = ow * s->stride_w - s->pad_w + q;
                        if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                            continue; /* padding: a zero for avg, nothing for max */
                        size_t xi = ((size_t)p * s->h + ih) * s->w + iw;
                        acc += x[xi];
                        if (best < 0 || x[xi] > bv) { /* first maximum wins */
                            best = (long)xi;
                            bv = x[xi];
                        }
                        if (s->mode == RT_POOL_AVG)
                            ddx[xi] += dy[yi] / (double)(s->r * s->s);
                    }
                if (s->mode == RT_POOL_MAX) {
                    y[yi] = bv;
                    ddx[best] += dy[yi];
                } else {
                    y[yi] = (float)(acc / (s->r * s->s));
                }
            }
    for (size_t i = 0; i < xs; i++)
        dx[i] = (float)ddx[i];
    free(ddx);
}

/* Every shape with and without pool512.c's AVX-512 rows (where the CPU
 * has AVX-512), so the portable loops stay tested there. */
static void test_pool(void **state)
{
    (void)state;
    for (int t = 0; t < 2 * N_THREADS; t++) {
        cpu_maxpool2_512_set(t < N_THREADS);
        rt_dev *d = open_dev(thread_counts[t % N_THREADS]);
        for (int mode = 0; mode < 2; mode++) {
            enum rt_pool_mode m = mode ? RT_POOL_AVG : RT_POOL_MAX;
            const struct rt_pool_shape shapes[] = {
                pool_make(m, 2, 3, 8, 8, 2, 2, 2, 2, 0, 0),    /* the 2x2 fast path */
                pool_make(m, 64, 6, 28, 28, 2, 2, 2, 2, 0, 0), /* LeNet, parallel */
                pool_make(m, 2, 2, 7, 9, 2, 2, 2, 2, 0, 0),    /* odd sizes drop a row */
                pool_make(m, 2, 3, 70, 66, 2, 2, 2, 2, 0, 0),  /* rows of 16 + 16 + 1 windows */
                pool_make(m, 2, 3, 9, 67, 2, 2, 2, 2, 0, 0),   /* the same, a column dropped */
                pool_make(m, 1, 1, 5, 5, 3, 3, 1, 1, 1, 1),    /* overlapping, padded */
                pool_make(m, 3, 2, 7, 6, 3, 2, 2, 3, 1, 1),
                pool_make(m, 2, 3, 4, 4, 4, 4, 1, 1, 0, 0),    /* global */
                pool_make(m, 1, 2, 6, 5, 3, 3, 2, 2, 2, 2),
            };
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                const struct rt_pool_shape *s = &shapes[i];
                size_t xs = (size_t)s->n * s->c * s->h * s->w, ys = (size_t)s->n * s->c * s->oh * s->ow;
                /* few distinct values: many ties, and all-negative windows */
                float *x = fvec(xs), *dy = frand(ys, -1, 1, 30 + i), *y = fvec(ys), *dx = fvec(xs);
                rt_rng rng;
                rt_rng_seed(&rng, 77 + i, 2);
                for (size_t j = 0; j < xs; j++)
                    x[j] = (float)rt_rng_below(&rng, 3) - 3.0f;
                pool_ref(s, x, dy, y, dx);
                tb X = tb_new(d, xs), Y = tb_new(d, ys), DY = tb_new(d, ys), DX = tb_new(d, xs);
                tb_set(&X, x);
                tb_set(&DY, dy);
                assert_int_equal(rt_op_pool_fwd(d, s, X.v, Y.v), 0);
                expect_close(&Y, y, 1e-6, 1.0, mode ? "avgpool fwd" : "maxpool fwd");
                assert_int_equal(rt_op_pool_bwd(d, s, X.v, Y.v, DY.v, DX.v), 0);
                expect_close(&DX, dx, 1e-6, 1.0, mode ? "avgpool bwd" : "maxpool bwd");
                tb_free(&X);
                tb_free(&Y);
                tb_free(&DY);
                tb_free(&DX);
                free(x);
                free(dy);
                free(y);
                free(dx);
            }
        }
        rt_dev_close(&d);
    }
    cpu_maxpool2_512_set(true);
}

/* The tie rule spelled out: a 2x2 window of equal values sends dy to its
 * top-left element, and [1 3; 3 2] to the top-right. */
static void test_pool_ties(void **state)
{
    (void)state;
    rt_dev *d = open_dev(1);
    for (int fast = 0; fast < 3; fast++) {
        /* the same windows through the 2x2 fast path (in AVX-512 where the
         * CPU has it, then its portable loops) and the general path */
        cpu_maxpool2_512_set(fast != 2);
        struct rt_pool_shape s = fast ? pool_make(RT_POOL_MAX, 1, 1, 2, 4, 2, 2, 2, 2, 0, 0)
                                      : pool_make(RT_POOL_MAX, 1, 1, 2, 4, 2, 2, 2, 3, 0, 1);
        /* fast: windows are columns 0-1 and 2-3; general: -1..0 (padding
         * and column 0, so 5 over 5) and 2-3 */
        float x[8] = {5, 5, 1, 3, 5, 5, 3, 2};
        float dy[2] = {10, 20}, dx[8];
        tb X = tb_new(d, 8), Y = tb_new(d, 2), DY = tb_new(d, 2), DX = tb_new(d, 8);
        tb_set(&X, x);
        tb_set(&DY, dy);
        assert_int_equal(rt_op_pool_fwd(d, &s, X.v, Y.v), 0);
        assert_int_equal(rt_op_pool_bwd(d, &s, X.v, Y.v, DY.v, DX.v), 0);
        tb_get(&DX, dx);
        const float want[8] = {10, 0, 0, 20, 0, 0, 0, 0};
        for (int i = 0; i < 8; i++)
            assert_true(dx[i] == want[i]);
        tb_free(&X);
        tb_free(&Y);
        tb_free(&DY);
        tb_free(&DX);
    }
    cpu_maxpool2_512_set(true);
    rt_dev_close(&d);
}

/* ---- activations ------------------------------------------------------------------- */

static double act_ref(enum rt_act k, float a, double x)
{
    switch (k) {
    case RT_ACT_RELU:
        return x > 0 ? x : 0;
    case RT_ACT_LEAKY:
        return x > 0 ? x : a * x;
    case RT_ACT_SIGMOID:
        return 1 / (1 + exp(-x));
    case RT_ACT_TANH:
        return tanh(x);
    default:
        return x;
    }
}

static void test_act(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 37, 100003};
    const enum rt_act kinds[] = {RT_ACT_IDENTITY, RT_ACT_RELU, RT_ACT_LEAKY, RT_ACT_SIGMOID,
                                 RT_ACT_TANH};
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        for (size_t si = 0; si < 3; si++)
            for (size_t ki = 0; ki < 5; ki++) {
                size_t n = sizes[si];
                enum rt_act k = kinds[ki];
                const float a = 0.1f;
                float *x = frand(n, -6, 6, 50 + si), *dy = frand(n, -1, 1, 60 + si);
                float *y = fvec(n), *dx = fvec(n);
                x[0] = -0.0f;
                if (n > 2)
                    x[1] = 0.0f; /* relu'(0) = 0 */
                for (size_t i = 0; i < n; i++)
                    y[i] = (float)act_ref(k, a, x[i]);
                tb X = tb_new(d, n), Y = tb_new(d, n), DY = tb_new(d, n), DX = tb_new(d, n);
                tb_set(&X, x);
                tb_set(&DY, dy);
                assert_int_equal(rt_op_act_fwd(d, k, a, n, X.v, Y.v), 0);
                expect_close(&Y, y, 2e-6, 1e-3, "act fwd");
                /* f'(x) from the y the backend gave: 1 - y^2 near |y| = 1
                 * magnifies an ulp of y, which is not what is tested here */
                tb_get(&Y, y);
                for (size_t i = 0; i < n; i++) {
                    double f;
                    switch (k) {
                    case RT_ACT_RELU:
                        f = x[i] > 0 ? 1 : 0;
                        break;
                    case RT_ACT_LEAKY:
                        f = x[i] > 0 ? 1 : a;
                        break;
                    case RT_ACT_SIGMOID:
                        f = (double)y[i] * (1 - (double)y[i]);
                        break;
                    case RT_ACT_TANH:
                        f = 1 - (double)y[i] * y[i];
                        break;
                    default:
                        f = 1;
                    }
                    dx[i] = (float)(dy[i] * f);
                }
                assert_int_equal(rt_op_act_bwd(d, k, a, n, X.v, Y.v, DY.v, DX.v), 0);
                expect_close(&DX, dx, 2e-6, 1e-3, "act bwd");
                /* in place: y aliases x, same values as before */
                assert_int_equal(rt_op_act_fwd(d, k, a, n, X.v, X.v), 0);
                expect_close(&X, y, 0, 1e-3, "act fwd in place");
                tb_free(&X);
                tb_free(&Y);
                tb_free(&DY);
                tb_free(&DX);
                free(x);
                free(dy);
                free(y);
                free(dx);
            }
        rt_dev_close(&d);
    }
}

/* ---- softmax + cross-entropy ------------------------------------------------------------ */

static void test_softmax_xent(void **state)
{
    (void)state;
    static const int shapes[][2] = {{1, 1}, {3, 10}, {64, 10}, {5, 1000}};
    rt_dev *d = open_dev(2);
    for (size_t si = 0; si < 4; si++) {
        int n = shapes[si][0], c = shapes[si][1];
        size_t nc = (size_t)n * c;
        float *l = frand(nc, -20, 20, 70 + si), *p = fvec(nc), *loss = fvec(n), *g = fvec(nc);
        int32_t *lab = malloc(n * sizeof *lab);
        rt_rng rng;
        rt_rng_seed(&rng, 9, si);
        for (int i = 0; i < n; i++)
            lab[i] = (int32_t)rt_rng_below(&rng, (uint64_t)c);
        if (c > 1)
            l[0] = 500.0f; /* huge logit: max-subtraction keeps it finite */
        const float scale = 1.0f / 64;
        for (int i = 0; i < n; i++) {
            double m = -INFINITY, s = 0;
            for (int j = 0; j < c; j++)
                m = fmax(m, l[i * c + j]);
            for (int j = 0; j < c; j++)
                s += exp(l[i * c + j] - m);
            for (int j = 0; j < c; j++) {
                p[i * c + j] = (float)(exp(l[i * c + j] - m) / s);
                g[i * c + j] = (float)(scale * ((double)p[i * c + j] - (j == lab[i])));
            }
            loss[i] = (float)-log(fmax(p[i * c + lab[i]], 1e-30));
        }
        tb L = tb_new(d, nc), LAB = tb_new(d, n), P = tb_new(d, nc), LOSS = tb_new(d, n),
           G = tb_new(d, nc);
        tb_set(&L, l);
        assert_int_equal(rt_upload(d, LAB.v, lab, n * sizeof *lab), 0);
        assert_int_equal(rt_op_softmax_xent_fwd(d, n, c, L.v, LAB.v, P.v, LOSS.v), 0);
        expect_close(&P, p, 1e-5, 1e-6, "softmax probs");
        expect_close(&LOSS, loss, 1e-5, 1.0, "xent losses");
        assert_int_equal(rt_op_softmax_xent_bwd(d, n, c, P.v, LAB.v, scale, G.v), 0);
        expect_close(&G, g, 1e-5, 1e-3, "softmax_xent bwd");
        /* a label outside [0, c) is an error, not a crash */
        int32_t bad = c;
        assert_int_equal(rt_upload(d, LAB.v, &bad, sizeof bad), 0);
        assert_int_equal(rt_op_softmax_xent_fwd(d, n, c, L.v, LAB.v, P.v, LOSS.v), RT_ERR_ARG);
        tb_free(&L);
        tb_free(&LAB);
        tb_free(&P);
        tb_free(&LOSS);
        tb_free(&G);
        free(l);
        free(p);
        free(loss);
        free(g);
        free(lab);
    }
    rt_dev_close(&d);
}

/* ---- batch norm -------------------------------------------------------------------------- */

/* Forward in double; y, mean, invstd, unbiased var. */
static void bn_ref(int n, int c, int hw, double eps, const double *x, const double *gamma,
                   const double *beta, double *y, double *mean, double *invstd, double *uvar)
{
    double m_ = (double)n * hw;
    for (int k = 0; k < c; k++) {
        double s = 0, sq = 0;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++)
                s += x[((size_t)i * c + k) * hw + p];
        double mu = s / m_;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) {
                double e = x[((size_t)i * c + k) * hw + p] - mu;
                sq += e * e;
            }
        double is = 1 / sqrt(sq / m_ + eps);
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) {
                size_t j = ((size_t)i * c + k) * hw + p;
                y[j] = gamma[k] * (x[j] - mu) * is + beta[k];
            }
        mean[k] = mu;
        invstd[k] = is;
        uvar[k] = m_ > 1 ? sq / (m_ - 1) : sq / m_;
    }
}

static void test_bn(void **state)
{
    (void)state;
    static const int shapes[][3] = {{4, 3, 5}, {64, 6, 49}, {2, 1, 1}, {1, 2, 7}, {64, 120, 1}};
    const float eps = 1e-5f, mom = 0.1f;
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        for (size_t si = 0; si < 5; si++) {
            int n = shapes[si][0], c = shapes[si][1], hw = shapes[si][2];
            const struct rt_bn_shape bs = {n, c, hw, eps, mom, RT_ACT_IDENTITY, 0.0f};
            size_t tot = (size_t)n * c * hw;
            float *x = frand(tot, -2, 3, 80 + si), *gm = frand(c, 0.5f, 1.5f, 81 + si);
            float *bt = frand(c, -1, 1, 82 + si), *dy = frand(tot, -1, 1, 83 + si);
            float *rm = frand(c, -1, 1, 84 + si), *rv = frand(c, 0.5f, 2, 85 + si);
            double *xd = malloc(tot * sizeof(double)), *yd = malloc(tot * sizeof(double));
            double *gd = malloc(c * sizeof(double)), *bd = malloc(c * sizeof(double));
            double *md = malloc(c * sizeof(double)), *isd = malloc(c * sizeof(double)),
                   *uvd = malloc(c * sizeof(double));
            for (size_t i = 0; i < tot; i++)
                xd[i] = x[i];
            for (int k = 0; k < c; k++) {
                gd[k] = gm[k];
                bd[k] = bt[k];
            }
            bn_ref(n, c, hw, eps, xd, gd, bd, yd, md, isd, uvd);
            float *y = fvec(tot), *m = fvec(c), *is = fvec(c), *rm2 = fvec(c), *rv2 = fvec(c);
            for (size_t i = 0; i < tot; i++)
                y[i] = (float)yd[i];
            for (int k = 0; k < c; k++) {
                m[k] = (float)md[k];
                is[k] = (float)isd[k];
                rm2[k] = (float)((1 - mom) * rm[k] + mom * md[k]);
                rv2[k] = (float)((1 - mom) * rv[k] + mom * uvd[k]);
            }
            /* gradients by central differences of L = sum(y * dy), in double:
             * independent of the closed form the backend uses */
            float *dx = fvec(tot), *dg = fvec(c), *db = fvec(c);
            double *xp = malloc(tot * sizeof(double));
            double *tmp1 = malloc(c * sizeof(double)), *tmp2 = malloc(c * sizeof(double)),
                   *tmp3 = malloc(c * sizeof(double));
            const double h = 1e-6;
            for (size_t i = 0; i < tot; i++) {
                double lp = 0, lm = 0;
                memcpy(xp, xd, tot * sizeof(double));
                xp[i] += h;
                bn_ref(n, c, hw, eps, xp, gd, bd, yd, tmp1, tmp2, tmp3);
                for (size_t j = 0; j < tot; j++)
                    lp += yd[j] * dy[j];
                xp[i] -= 2 * h;
                bn_ref(n, c, hw, eps, xp, gd, bd, yd, tmp1, tmp2, tmp3);
                for (size_t j = 0; j < tot; j++)
                    lm += yd[j] * dy[j];
                dx[i] = (float)((lp - lm) / (2 * h));
                if (tot > 2000 && i >= 64) { /* big shapes: spot-check the first rows only */
                    for (size_t j = i + 1; j < tot; j++)
                        dx[j] = NAN;
                    break;
                }
            }
            for (int k = 0; k < c; k++) {
                double sg = 0, sb = 0;
                for (int i = 0; i < n; i++)
                    for (int p = 0; p < hw; p++) {
                        size_t j = ((size_t)i * c + k) * hw + p;
                        sb += dy[j];
                        sg += dy[j] * (xd[j] - md[k]) * isd[k];
                    }
                dg[k] = (float)sg;
                db[k] = (float)sb;
            }
            tb X = tb_new(d, tot), G = tb_new(d, c), B = tb_new(d, c), Y = tb_new(d, tot),
               M = tb_new(d, c), IS = tb_new(d, c), RM = tb_new(d, c), RV = tb_new(d, c),
               DY = tb_new(d, tot), DX = tb_new(d, tot), DG = tb_new(d, c), DB = tb_new(d, c);
            tb_set(&X, x);
            tb_set(&G, gm);
            tb_set(&B, bt);
            tb_set(&RM, rm);
            tb_set(&RV, rv);
            tb_set(&DY, dy);
            assert_int_equal(
                rt_op_bn_fwd_train(d, &bs, X.v, G.v, B.v, Y.v, M.v, IS.v, RM.v, RV.v), 0);
            expect_close(&Y, y, 1e-4, 1.0, "bn fwd train y");
            expect_close(&M, m, 1e-5, 1.0, "bn save_mean");
            expect_close(&IS, is, 1e-5, 1.0, "bn save_invstd");
            expect_close(&RM, rm2, 1e-5, 1.0, "bn run_mean");
            expect_close(&RV, rv2, 1e-5, 1.0, "bn run_var");
            assert_int_equal(
                rt_op_bn_bwd(d, &bs, X.v, Y.v, DY.v, G.v, M.v, IS.v, DX.v, DG.v, DB.v), 0);
            float *got = fvec(tot);
            tb_get(&DX, got);
            for (size_t i = 0; i < tot && !isnan(dx[i]); i++)
                if (!(fabs(got[i] - dx[i]) <= 1e-3 * fmax(1.0, fabs(dx[i])))) /* FD noise */
                    fail_msg("bn bwd dx[%zu] = %g, finite difference %g", i, got[i], dx[i]);
            tb_check_guard(&DX);
            expect_close(&DG, dg, 1e-4, 1.0, "bn dgamma");
            expect_close(&DB, db, 1e-5, 1.0, "bn dbeta");
            /* inference with the updated running statistics */
            for (size_t i = 0; i < tot; i++) {
                int k = (int)((i / hw) % c);
                y[i] = (float)(gd[k] * (xd[i] - rm2[k]) / sqrt((double)rv2[k] + eps) + bd[k]);
            }
            assert_int_equal(rt_op_bn_fwd_infer(d, &bs, X.v, G.v, B.v, RM.v, RV.v, Y.v), 0);
            expect_close(&Y, y, 1e-5, 1.0, "bn fwd infer");
            tb *all[] = {&X, &G, &B, &Y, &M, &IS, &RM, &RV, &DY, &DX, &DG, &DB};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                tb_free(all[i]);
            void *mem[] = {x, gm, bt, dy, rm, rv, xd, yd, gd, bd, md, isd, uvd, y, m, is,
                           rm2, rv2, dx, dg, db, xp, tmp1, tmp2, tmp3, got};
            for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++)
                free(mem[i]);
        }
        rt_dev_close(&d);
    }
}

/* Batch norm with an activation (a [conv]'s, fused into its ops) gives the
 * bits of batch norm, then act_fwd; and in the backward, act_bwd from y,
 * then batch norm's of that, also with dx on dy. Every activation, shapes
 * with tails past the vector width, 1-3 threads. */
/* Batch norm on 2 and 3 threads splits the images (or, past 8192 planes
 * or with fewer images than threads, the channels): either way the same
 * bits as on one thread, forward (y, the statistics, the running ones)
 * and backward (dx, dgamma, dbeta). */
static void bn_run(rt_dev *d, const struct rt_bn_shape *bs, const float *x, const float *dy,
                   float *out)
{
    const size_t tot = (size_t)bs->n * bs->c * bs->hw, c = (size_t)bs->c;
    float *gm = frand(c, 0.5f, 1.5f, 95), *bt = frand(c, -1, 1, 96);
    float *run = frand(2 * c, 0.5f, 1.5f, 97);
    tb X = tb_new(d, tot), Y = tb_new(d, tot), DY = tb_new(d, tot), DX = tb_new(d, tot),
       G = tb_new(d, c), B = tb_new(d, c), ST = tb_new(d, 6 * c);
    tb_set(&X, x);
    tb_set(&DY, dy);
    tb_set(&G, gm);
    tb_set(&B, bt);
    float *st = fvec(6 * c);
    memcpy(st + 2 * c, run, 2 * c * sizeof(float));
    tb_set(&ST, st);
    rt_view v[6];
    for (size_t i = 0; i < 6; i++)
        v[i] = rt_view_at(ST.v, i * c);
    assert_int_equal(rt_op_bn_fwd_train(d, bs, X.v, G.v, B.v, Y.v, v[0], v[1], v[2], v[3]), 0);
    assert_int_equal(rt_op_bn_bwd(d, bs, X.v, Y.v, DY.v, G.v, v[0], v[1], DX.v, v[4], v[5]), 0);
    tb_get(&Y, out);
    tb_get(&DX, out + tot);
    tb_get(&ST, out + 2 * tot);
    tb *all[] = {&X, &Y, &DY, &DX, &G, &B, &ST};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tb_free(all[i]);
    free(gm);
    free(bt);
    free(run);
    free(st);
}

static void test_bn_threads_same_bits(void **state)
{
    (void)state;
    static const int shapes[][3] = {{64, 16, 49}, {5, 9, 1000}, {128, 80, 4}, {2, 20, 900}};
    rt_dev *one = open_dev(1);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int k = 0; k < 2; k++) {
            const struct rt_bn_shape bs = {shapes[si][0], shapes[si][1], shapes[si][2], 1e-5f,
                                           0.1f, k ? RT_ACT_RELU : RT_ACT_IDENTITY, 0.0f};
            const size_t tot = (size_t)bs.n * bs.c * bs.hw, len = 2 * tot + 6 * (size_t)bs.c;
            float *x = frand(tot, -2, 3, 98 + si), *dy = frand(tot, -1, 1, 99 + si);
            float *want = fvec(len), *got = fvec(len);
            bn_run(one, &bs, x, dy, want);
            for (int t = 1; t < N_THREADS; t++) {
                rt_dev *d = open_dev(thread_counts[t]);
                bn_run(d, &bs, x, dy, got);
                if (memcmp(want, got, len * sizeof(float)) != 0)
                    fail_msg("bn %d x %d x %d (act %d) on %d threads: not the bits of 1 thread",
                             bs.n, bs.c, bs.hw, k, thread_counts[t]);
                rt_dev_close(&d);
            }
            free(x);
            free(dy);
            free(want);
            free(got);
        }
    rt_dev_close(&one);
}

/* act_bias_bwd large enough to run on several threads, split by images
 * (lenet's conv planes, dense rows) and by channels (more planes than it
 * keeps sums for, fewer images than threads): on every thread count dx
 * and db are the bits of act_bwd then bias_grad on one thread. */
static void act_bias_run(rt_dev *d, const int *sh, enum rt_act k, bool fused, const float *y,
                         const float *dy, float *out)
{
    const size_t tot = (size_t)sh[0] * sh[1] * sh[2];
    tb Y = tb_new(d, tot), DY = tb_new(d, tot), DX = tb_new(d, tot), DB = tb_new(d, sh[1]);
    tb_set(&Y, y);
    tb_set(&DY, dy);
    if (fused) {
        assert_int_equal(rt_op_act_bias_bwd(d, k, 0.1f, sh[0], sh[1], sh[2], Y.v, DY.v, DX.v,
                                            DB.v), 0);
    } else {
        assert_int_equal(rt_op_act_bwd(d, k, 0.1f, tot, Y.v, Y.v, DY.v, DX.v), 0);
        assert_int_equal(rt_op_bias_grad(d, sh[0], sh[1], sh[2], DX.v, DB.v), 0);
    }
    tb_get(&DX, out);
    tb_get(&DB, out + tot);
    tb *all[] = {&Y, &DY, &DX, &DB};
    for (size_t j = 0; j < 4; j++)
        tb_free(all[j]);
}

static void test_act_bias_threads_same_bits(void **state)
{
    (void)state;
    static const int shapes[][3] = {{64, 6, 576}, {64, 16, 64}, {9000, 1, 40}, {2, 8, 4000}};
    rt_dev *one = open_dev(1);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int k = RT_ACT_RELU; k <= RT_ACT_TANH; k++) {
            const int *sh = shapes[si];
            const size_t tot = (size_t)sh[0] * sh[1] * sh[2], len = tot + (size_t)sh[1];
            float *y = frand(tot, -1, 1, 120 + si), *dy = frand(tot, -1, 1, 121 + si);
            float *want = fvec(len), *got = fvec(len);
            act_bias_run(one, sh, (enum rt_act)k, false, y, dy, want);
            for (int t = 0; t < N_THREADS; t++) {
                rt_dev *d = open_dev(thread_counts[t]);
                act_bias_run(d, sh, (enum rt_act)k, true, y, dy, got);
                if (memcmp(want, got, len * sizeof(float)) != 0)
                    fail_msg("act_bias_bwd %d x %d x %d (act %d) on %d threads: not the bits "
                             "of act_bwd and bias_grad", sh[0], sh[1], sh[2], k,
                             thread_counts[t]);
                rt_dev_close(&d);
            }
            free(y);
            free(dy);
            free(want);
            free(got);
        }
    rt_dev_close(&one);
}

static void test_bn_act_fused(void **state)
{
    (void)state;
    static const int shapes[][3] = {{4, 3, 5}, {64, 16, 49}, {3, 5, 37}};
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        for (size_t si = 0; si < 3; si++)
            for (int k = RT_ACT_RELU; k <= RT_ACT_TANH; k++) {
                int n = shapes[si][0], c = shapes[si][1], hw = shapes[si][2];
                const struct rt_bn_shape plain = {n, c, hw, 1e-5f, 0.1f, RT_ACT_IDENTITY, 0.0f};
                struct rt_bn_shape fused = plain;
                fused.act = (enum rt_act)k;
                fused.alpha = 0.1f;
                size_t tot = (size_t)n * c * hw;
                float *x = frand(tot, -2, 3, 90 + si), *gm = frand(c, 0.5f, 1.5f, 91 + si);
                float *bt = frand(c, -1, 1, 92 + si), *dy = frand(tot, -1, 1, 93 + si);
                float *want = fvec(tot), *got = fvec(tot);
                tb X = tb_new(d, tot), G = tb_new(d, c), B = tb_new(d, c), Y1 = tb_new(d, tot),
                   Y2 = tb_new(d, tot), ST = tb_new(d, 4 * (size_t)c), DY = tb_new(d, tot),
                   G1 = tb_new(d, tot), DX1 = tb_new(d, tot), DX2 = tb_new(d, tot),
                   P1 = tb_new(d, 2 * (size_t)c), P2 = tb_new(d, 2 * (size_t)c);
                tb_set(&X, x);
                tb_set(&G, gm);
                tb_set(&B, bt);
                rt_view mean = ST.v, invstd = rt_view_at(ST.v, (size_t)c),
                        rm = rt_view_at(ST.v, 2 * (size_t)c), rv = rt_view_at(ST.v, 3 * (size_t)c);
                /* forward: composed, then fused (the statistics are the same bits) */
                assert_int_equal(rt_op_bn_fwd_train(d, &plain, X.v, G.v, B.v, Y1.v, mean, invstd,
                                                    rm, rv), 0);
                assert_int_equal(rt_op_act_fwd(d, fused.act, fused.alpha, tot, Y1.v, Y1.v), 0);
                assert_int_equal(rt_op_bn_fwd_train(d, &fused, X.v, G.v, B.v, Y2.v, mean, invstd,
                                                    rm, rv), 0);
                tb_get(&Y1, want);
                tb_get(&Y2, got);
                assert_memory_equal(want, got, tot * sizeof(float));
                /* backward: composed, fused, fused in place */
                for (int pass = 0; pass < 3; pass++) {
                    tb_set(&DY, dy);
                    rt_view dx = pass == 0 ? DX1.v : pass == 1 ? DX2.v : DY.v;
                    rt_view p = pass == 0 ? P1.v : P2.v;
                    if (pass == 0) {
                        assert_int_equal(rt_op_act_bwd(d, fused.act, fused.alpha, tot, Y1.v,
                                                       Y1.v, DY.v, G1.v), 0);
                        assert_int_equal(rt_op_bn_bwd(d, &plain, X.v, Y1.v, G1.v, G.v, mean,
                                                      invstd, dx, p, rt_view_at(p, (size_t)c)),
                                         0);
                    } else {
                        assert_int_equal(rt_op_bn_bwd(d, &fused, X.v, Y1.v, DY.v, G.v, mean,
                                                      invstd, dx, p, rt_view_at(p, (size_t)c)),
                                         0);
                    }
                    tb *out = pass == 0 ? &DX1 : pass == 1 ? &DX2 : &DY;
                    tb_get(out, pass == 0 ? want : got);
                    if (pass > 0) {
                        assert_memory_equal(want, got, tot * sizeof(float));
                        float a[64], b[64]; /* dgamma, dbeta: 2c <= 64 */
                        tb_get(&P1, a);
                        tb_get(&P2, b);
                        assert_memory_equal(a, b, 2 * (size_t)c * sizeof(float));
                    }
                }
                tb *all[] = {&X, &G, &B, &Y1, &Y2, &ST, &DY, &G1, &DX1, &DX2, &P1, &P2};
                for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                    tb_free(all[i]);
                void *mem[] = {x, gm, bt, dy, want, got};
                for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++)
                    free(mem[i]);
            }
        rt_dev_close(&d);
    }
}

/* ---- dropout -------------------------------------------------------------------------------- */

static void test_dropout(void **state)
{
    (void)state;
    const size_t n = 200003;
    const float rates[] = {0.0f, 0.25f, 0.5f, 0.9f};
    rt_dev *d = open_dev(2);
    float *x = frand(n, -1, 1, 90), *y = fvec(n), *mask = fvec(n);
    tb X = tb_new(d, n), Y = tb_new(d, n), M = tb_new(d, n);
    tb_set(&X, x);
    for (int ri = 0; ri < 4; ri++) {
        const float rate = rates[ri];
        const uint64_t seed = 0x1234 + ri;
        assert_int_equal(rt_op_dropout_fwd(d, n, rate, seed, X.v, Y.v, M.v), 0);
        tb_get(&M, mask);
        tb_get(&Y, y);
        size_t kept = 0;
        const float keep = 1.0f / (1.0f - rate);
        for (size_t i = 0; i < n; i++) {
            bool k = rt_dropout_keep(seed, i, rate);
            assert_true(mask[i] == (k ? keep : 0.0f));
            assert_true(y[i] == x[i] * mask[i]);
            kept += k;
        }
        /* kept ~ Binomial(n, 1-rate): 6 sigma */
        double mean = n * (1.0 - rate), sd = sqrt(n * rate * (1.0 - rate));
        assert_true(fabs((double)kept - mean) <= 6 * sd + 0.5);
        /* neighbours are not correlated: pairs kept together ~ (1-rate)^2 */
        size_t both = 0;
        for (size_t i = 0; i + 1 < n; i++)
            both += mask[i] != 0 && mask[i + 1] != 0;
        double pm = (n - 1) * (1.0 - rate) * (1.0 - rate);
        assert_true(fabs((double)both - pm) <= 6 * sqrt(pm) + 0.5);
        tb_check_guard(&M);
        tb_check_guard(&Y);
    }
    /* another seed gives another mask */
    assert_int_equal(rt_op_dropout_fwd(d, n, 0.5f, 1, X.v, Y.v, M.v), 0);
    float *m2 = fvec(n);
    tb_get(&M, m2);
    assert_int_equal(rt_op_dropout_fwd(d, n, 0.5f, 2, X.v, Y.v, M.v), 0);
    tb_get(&M, mask);
    assert_true(memcmp(mask, m2, n * sizeof(float)) != 0);
    /* in place: y aliases x */
    assert_int_equal(rt_op_dropout_fwd(d, n, 0.5f, 2, X.v, X.v, M.v), 0);
    tb_get(&X, y);
    for (size_t i = 0; i < n; i++)
        assert_true(y[i] == x[i] * mask[i]);
    tb_free(&X);
    tb_free(&Y);
    tb_free(&M);
    free(x);
    free(y);
    free(mask);
    free(m2);
    rt_dev_close(&d);
}

/* ---- elementwise and reductions ------------------------------------------------------------ */

static void test_elementwise(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 17, 100003};
    for (int t = 0; t < N_THREADS; t++) {
        rt_dev *d = open_dev(thread_counts[t]);
        for (int si = 0; si < 3; si++) {
            size_t n = sizes[si];
            float *a = frand(n, -2, 2, 110 + si), *b = frand(n, -2, 2, 120 + si), *r = fvec(n);
            tb A = tb_new(d, n), B = tb_new(d, n), Y = tb_new(d, n);
            tb_set(&A, a);
            tb_set(&B, b);
            for (size_t i = 0; i < n; i++)
                r[i] = a[i] * b[i];
            assert_int_equal(rt_op_mul(d, n, A.v, B.v, Y.v), 0);
            expect_close(&Y, r, 0, 1, "mul");
            assert_int_equal(rt_op_mul(d, n, A.v, B.v, A.v), 0); /* y aliases a */
            expect_close(&A, r, 0, 1, "mul in place");
            tb_set(&A, a);
            for (size_t i = 0; i < n; i++)
                r[i] = b[i] + -0.75f * a[i];
            assert_int_equal(rt_op_axpy(d, n, -0.75f, A.v, B.v), 0);
            expect_close(&B, r, 1e-6, 1, "axpy");
            for (size_t i = 0; i < n; i++)
                r[i] = a[i] * 3.5f;
            assert_int_equal(rt_op_scale(d, n, 3.5f, A.v), 0);
            expect_close(&A, r, 0, 1, "scale");
            for (size_t i = 0; i < n; i++)
                r[i] = 0.125f;
            assert_int_equal(rt_op_fill(d, n, 0.125f, Y.v), 0);
            expect_close(&Y, r, 0, 1, "fill");
            double want = 0, got = -1;
            for (size_t i = 0; i < n; i++)
                want += (double)b[i] * b[i];
            tb_set(&B, b);
            assert_int_equal(rt_op_sumsq(d, n, B.v, &got), 0);
            assert_true(fabs(got - want) <= 1e-12 * want);
            /* zero-size: nothing happens */
            assert_int_equal(rt_op_fill(d, 0, 9.0f, Y.v), 0);
            assert_int_equal(rt_op_sumsq(d, 0, B.v, &got), 0);
            assert_true(got == 0.0);
            expect_close(&Y, r, 0, 1, "fill n=0");
            tb_free(&A);
            tb_free(&B);
            tb_free(&Y);
            free(a);
            free(b);
            free(r);
        }
        rt_dev_close(&d);
    }
}

/* ---- optimiser steps -------------------------------------------------------------------------- */

static const float w0[3] = {1.0f, -2.0f, 0.5f};
static const float g1[3] = {0.1f, -0.3f, 0.02f}, g2[3] = {0.2f, 0.1f, -0.05f};

static void check3(tb *t, const double *want, double tol, const char *what)
{
    float got[3];
    tb_get(t, got);
    for (int i = 0; i < 3; i++)
        if (!(fabs(got[i] - want[i]) <= tol * fmax(fabs(want[i]), 1e-3)))
            fail_msg("%s[%d] = %.9g, want %.9g", what, i, got[i], want[i]);
    tb_check_guard(t);
}

/* C with guards: NaN in the m x n product, guard_value in the gaps
 * between rows (ldc > n) and after. */
static float *gemm_c(int m, int n, int ldc)
{
    const size_t cn = (size_t)m * ldc + GUARD;
    float *c = fvec(cn);
    for (size_t i = 0; i < cn; i++)
        c[i] = guard_value;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            c[(size_t)i * ldc + j] = NAN;
    return c;
}

/* got holds want's m x n bits, and C's guards (gemm_c) are kept. */
static void gemm_expect_bits(int m, int n, const float *got, const float *want, int ldc)
{
    for (int i = 0; i < m; i++) {
        assert_memory_equal(got + (size_t)i * ldc, want + (size_t)i * ldc,
                            sizeof(float) * (size_t)n);
        for (int j = n; j < ldc; j++)
            assert_true(got[(size_t)i * ldc + j] == guard_value);
    }
    for (int g = 0; g < GUARD; g++)
        assert_true(got[(size_t)m * ldc + g] == guard_value);
}

/* got is C as gemm_c made it: a kernel that declined wrote nothing. */
static void gemm_expect_untouched(int m, int n, const float *got, int ldc)
{
    float *fresh = gemm_c(m, n, ldc);
    assert_memory_equal(got, fresh, sizeof(float) * ((size_t)m * ldc + GUARD));
    free(fresh);
}

/* got against op(A) B in double, within 1e-6 of the sum of the products'
 * magnitudes; the guards kept. */
static void gemm_expect(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                        int ldb, const float *got, int ldc)
{
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double ref = 0.0, mag = 0.0;
            for (int p = 0; p < k; p++) {
                double t = (double)a[ta ? (size_t)p * lda + i : (size_t)i * lda + p] *
                           b[(size_t)p * ldb + j];
                ref += t;
                mag += fabs(t);
            }
            double v = got[(size_t)i * ldc + j];
            if (!(fabs(v - ref) <= 1e-6 * mag + 1e-30))
                fail_msg("gemm_small%s %dx%dx%d: C[%d][%d] = %.9g, want %.9g", ta ? " A^T" : "", m,
                         n, k, i, j, v, ref);
        }
        for (int j = n; j < ldc; j++)
            assert_true(got[(size_t)i * ldc + j] == guard_value);
    }
    for (int g = 0; g < GUARD; g++)
        assert_true(got[(size_t)m * ldc + g] == guard_value);
}

/* The convolutions' small-GEMM kernel (cpu_gemm_small: C = op(A) B)
 * against a loop in double on random shapes, A as it is and transposed,
 * every tail of its 4 x 24 tiles and inner indices long enough to be cut
 * in blocks, with strides wider than the rows: the gaps between C's rows
 * and the floats after it keep their guard (the masked stores). Each
 * element of C is one FMA chain in order: a block of rows and columns
 * computed alone (cut differently) gives the same bits as inside the whole
 * product. That is this kernel's: where it does not run (AVX-512, no AVX2)
 * the BLAS does the product, which promises no such thing (OpenBLAS's
 * AVX-512 kernels gave other bits for a block), and only the values are
 * checked. */
static void test_gemm_small(void **state)
{
    (void)state;
    for (uint64_t t = 0; t < 80; t++) {
        struct rt_rng r;
        rt_rng_seed(&r, 77 + t, 0);
        const bool ta = t % 2;
        const int m = 1 + (int)(rt_rng_uniform(&r) * 70), n = 1 + (int)(rt_rng_uniform(&r) * 110),
                  k = 1 + (int)(rt_rng_uniform(&r) * 300);
        /* A is m x k, or stored k x m when ta */
        const int lda = (ta ? m : k) + (int)(rt_rng_uniform(&r) * 5),
                  ldb = n + (int)(rt_rng_uniform(&r) * 9), ldc = n + (int)(rt_rng_uniform(&r) * 9);
        const int i0 = (int)(rt_rng_uniform(&r) * m), j0 = (int)(rt_rng_uniform(&r) * n);
        float *a = frand((size_t)(ta ? k : m) * lda, -1, 1, 2 * t + 1);
        float *b = frand((size_t)k * ldb, -1, 1, 2 * t + 2);
        float *c = gemm_c(m, n, ldc), *part = gemm_c(m, n, ldc);
        cpu_gemm_small(ta, m, n, k, a, lda, b, ldb, c, ldc);
        gemm_expect(ta, m, n, k, a, lda, b, ldb, c, ldc);
        cpu_gemm_small(ta, m - i0, n - j0, k, ta ? a + i0 : a + (size_t)i0 * lda, lda, b + j0,
                       ldb, part + (size_t)i0 * ldc + j0, ldc);
        for (int i = i0; i < m && cpu_avx2_kernels(); i++)
            assert_memory_equal(part + (size_t)i * ldc + j0, c + (size_t)i * ldc + j0,
                                sizeof(float) * (size_t)(n - j0));
        free(a);
        free(b);
        free(c);
        free(part);
    }
}

/* Whether rt_op_gemm(op(A) op(B)) gives the same bits at 1 and 2 threads
 * (C m x n; A m x k, or k x m when trans_a; B k x n, or n x k when
 * trans_b): the
 * kernels that promise bits at any blocking, through the op's split. */
static bool op_gemm_same_bits(bool trans_a, bool trans_b, int m, int n, int k, uint64_t seed)
{
    float *a = frand((size_t)m * k, -1, 1, seed), *b = frand((size_t)k * n, -1, 1, seed + 1);
    float *got[2];
    for (int t = 0; t < 2; t++) {
        rt_dev *d = open_dev(t + 1);
        tb A = tb_new(d, (size_t)m * k), B = tb_new(d, (size_t)k * n), C = tb_new(d, (size_t)m * n);
        tb_set(&A, a);
        tb_set(&B, b);
        assert_int_equal(rt_op_gemm(d, trans_a, trans_b, m, n, k, 1.0f, A.v, trans_a ? m : k, B.v,
                                    trans_b ? k : n, 0.0f, C.v, n),
                         0);
        got[t] = fvec((size_t)m * n);
        tb_get(&C, got[t]);
        tb_free(&A), tb_free(&B), tb_free(&C);
        rt_dev_close(&d);
    }
    bool same = !memcmp(got[0], got[1], sizeof(float) * (size_t)m * n);
    free(a), free(b), free(got[0]), free(got[1]);
    return same;
}

/* The dense layers' weight gradient kernel (cpu_gemm_tn_smallk: C = A^T
 * B, inner index up to 64) against a loop in double on random shapes:
 * every tail of its 6 x 64 blocks and of a row's 16-float vectors, strides
 * wider than the rows (the guards between and after C's rows kept). Each
 * element is one FMA chain from zero in order: a block of C computed alone
 * gives the bits of the whole product there, and so does rt_op_gemm at 1
 * and 2 threads on a dense gradient's shape. Where AVX-512 is missing the
 * kernel declines, C untouched. */
static void test_gemm_tn_smallk(void **state)
{
    (void)state;
    for (uint64_t t = 0; t < 60; t++) {
        struct rt_rng r;
        rt_rng_seed(&r, 313 + t, 0);
        const int m = 1 + (int)(rt_rng_uniform(&r) * 40), n = 1 + (int)(rt_rng_uniform(&r) * 300),
                  k = 1 + (int)(rt_rng_uniform(&r) * CPU_SMALLK_MAX);
        const int lda = m + (int)(rt_rng_uniform(&r) * 5), ldb = n + (int)(rt_rng_uniform(&r) * 9),
                  ldc = n + (int)(rt_rng_uniform(&r) * 9);
        const int i0 = (int)(rt_rng_uniform(&r) * m), j0 = (int)(rt_rng_uniform(&r) * n);
        float *a = frand((size_t)k * lda, -1, 1, 3 * t + 1);
        float *b = frand((size_t)k * ldb, -1, 1, 3 * t + 2);
        float *c = gemm_c(m, n, ldc), *part = gemm_c(m, n, ldc);
        if (!cpu_gemm_tn_smallk(m, n, k, a, lda, b, ldb, c, ldc)) {
            assert_true(isnan(c[0]) && c[(size_t)m * ldc] == guard_value); /* untouched */
            free(a), free(b), free(c), free(part);
            continue;
        }
        gemm_expect(true, m, n, k, a, lda, b, ldb, c, ldc);
        assert_true(cpu_gemm_tn_smallk(m - i0, n - j0, k, a + i0, lda, b + j0, ldb,
                                       part + (size_t)i0 * ldc + j0, ldc));
        for (int i = i0; i < m; i++)
            assert_memory_equal(part + (size_t)i * ldc + j0, c + (size_t)i * ldc + j0,
                                sizeof(float) * (size_t)(n - j0));
        free(a), free(b), free(c), free(part);
    }
    assert_false(cpu_gemm_tn_smallk(4, 4, CPU_SMALLK_MAX + 1, NULL, 4, NULL, 4, NULL, 4));
    /* seedcnn's dense gradient for a worker of 2, through the op at 1 and 2 threads */
    float one, x = 1.0f;
    if (cpu_gemm_tn_smallk(1, 1, 1, &x, 1, &x, 1, &one, 1)) /* (runs here: bits at any count) */
        assert_true(op_gemm_same_bits(true, false, 225, 4608, 32, 5));
}

/* The filters' gradient by filters (cpu_wgrad_outer: AVX2, and AVX-512
 * where the BLAS runs AVX-512 kernels) against FMA chains over the images,
 * output rows and positions in order, bit for bit: random filter counts
 * (1 or 2 vectors of 16, masked tails), column-row counts cutting the
 * blocks of 12 and 6 anywhere, set and then added to. Both kernels give
 * these bits: a host with AVX-512 and one without agree. */
static void test_wgrad_outer(void **state)
{
    (void)state;
    if (!cpu_avx2_kernels() && !cpu_wgrad512()) {
        print_message("wgrad outer: no AVX2 kernel runs here, skipped\n");
        return;
    }
    for (uint64_t t = 0; t < 40; t++) {
        struct rt_rng r;
        rt_rng_seed(&r, 555 + t, 0);
        const int k = 1 + (int)(rt_rng_uniform(&r) * 32), crs = 1 + (int)(rt_rng_uniform(&r) * 30),
                  oh = 1 + (int)(rt_rng_uniform(&r) * 5), ow = 1 + (int)(rt_rng_uniform(&r) * 12),
                  n = 1 + (int)(rt_rng_uniform(&r) * 3);
        const size_t wq = (size_t)ow + (size_t)(rt_rng_uniform(&r) * 4);
        const size_t span = (size_t)oh * wq + 40, xs = span, dys = (size_t)oh * ow * k + 3;
        float *x = frand(xs * n, -1, 1, 4 * t + 1), *dt = frand(dys * n, -1, 1, 4 * t + 2);
        int32_t *at = malloc(sizeof(int32_t) * (size_t)crs);
        assert_non_null(at);
        for (int j = 0; j < crs; j++)
            at[j] = (int32_t)(rt_rng_uniform(&r) * 40);
        const struct rt_wgrad_images im = {.n = n, .oh = oh, .ow = ow, .wq = wq, .xs = xs,
                                           .dys = dys, .x = x, .dy = dt};
        float *want = fvec((size_t)crs * k);
        for (int round = 0; round < 2; round++) /* set, then added to */
            for (int j = 0; j < crs; j++)
                for (int q = 0; q < k; q++) {
                    float acc = round ? want[(size_t)j * k + q] : 0.0f;
                    for (int m = 0; m < n; m++)
                        for (int rr = 0; rr < oh; rr++)
                            for (int c = 0; c < ow; c++)
                                acc = fmaf(x[m * xs + (size_t)at[j] + rr * wq + c],
                                           dt[m * dys + ((size_t)rr * ow + c) * k + q], acc);
                    want[(size_t)j * k + q] = acc;
                }
        for (int wide = 1; wide >= 0; wide--) {
            cpu_wgrad512_set(wide);
            if (!cpu_avx2_kernels() && !cpu_wgrad512())
                continue; /* (an AVX-512 BLAS, the AVX-512 kernel turned off: the BLAS) */
            float *got = fvec((size_t)crs * k + GUARD);
            for (int g = 0; g < GUARD; g++)
                got[(size_t)crs * k + g] = guard_value;
            cpu_wgrad_outer(k, crs, &im, at, false, got);
            cpu_wgrad_outer(k, crs, &im, at, true, got);
            assert_memory_equal(got, want, sizeof(float) * (size_t)crs * k);
            for (int g = 0; g < GUARD; g++)
                assert_true(got[(size_t)crs * k + g] == guard_value);
            free(got);
        }
        cpu_wgrad512_set(true);
        free(x), free(dt), free(at), free(want);
    }
}

/* C = A B as the small-GEMM kernels define their bits: each element one
 * FMA chain over the inner index in order, from 0. */
static void gemm_fma_chain(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                           float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++)
                acc = fmaf(a[(size_t)i * lda + p], b[(size_t)p * ldb + j], acc);
            c[(size_t)i * ldc + j] = acc;
        }
}

/* The dense forward's kernel (cpu_gemm_nt_longk: C = A B^T, both read
 * along the inner index) against a loop in double on random shapes: every
 * tail of its 4 x 6 tiles, of a 16-float vector and of its 1,024-element
 * blocks, strides wider than the rows (C's guards kept). Which rows and
 * columns a call covers does not change the bits: a block of C computed
 * alone equals the whole product there, and rt_op_gemm gives the same bits
 * at 1 and 2 threads on seedcnn's 32 x 225 x 4608. Where AVX-512 is
 * missing the kernel declines, C untouched. */
static void test_gemm_nt_longk(void **state)
{
    (void)state;
    for (uint64_t t = 0; t < 40; t++) {
        struct rt_rng r;
        rt_rng_seed(&r, 777 + t, 0);
        const int m = 1 + (int)(rt_rng_uniform(&r) * 30), n = 1 + (int)(rt_rng_uniform(&r) * 40),
                  k = 1 + (int)(rt_rng_uniform(&r) * 3000);
        const int lda = k + (int)(rt_rng_uniform(&r) * 5), ldb = k + (int)(rt_rng_uniform(&r) * 5),
                  ldc = n + (int)(rt_rng_uniform(&r) * 9);
        const int i0 = (int)(rt_rng_uniform(&r) * m), j0 = (int)(rt_rng_uniform(&r) * n);
        float *a = frand((size_t)m * lda, -1, 1, 5 * t + 1), *b = frand((size_t)n * ldb, -1, 1, 5 * t + 2);
        float *bt = fvec((size_t)k * n); /* B^T, for gemm_expect */
        for (int j = 0; j < n; j++)
            for (int p = 0; p < k; p++)
                bt[(size_t)p * n + j] = b[(size_t)j * ldb + p];
        float *c = gemm_c(m, n, ldc), *part = gemm_c(m, n, ldc);
        if (!cpu_gemm_nt_longk(m, n, k, a, lda, b, ldb, c, ldc)) {
            assert_true(isnan(c[0]) && c[(size_t)m * ldc] == guard_value); /* untouched */
            free(a), free(b), free(bt), free(c), free(part);
            continue;
        }
        gemm_expect(false, m, n, k, a, lda, bt, n, c, ldc);
        assert_true(cpu_gemm_nt_longk(m - i0, n - j0, k, a + (size_t)i0 * lda, lda,
                                      b + (size_t)j0 * ldb, ldb, part + (size_t)i0 * ldc + j0, ldc));
        for (int i = i0; i < m; i++)
            assert_memory_equal(part + (size_t)i * ldc + j0, c + (size_t)i * ldc + j0,
                                sizeof(float) * (size_t)(n - j0));
        free(a), free(b), free(bt), free(c), free(part);
    }
    if (cpu_has_avx512f()) /* (the kernel runs here: the same bits at any count) */
        assert_true(op_gemm_same_bits(false, true, 32, 225, 4608, 7));
}

/* cpu_gemm_nn512 (C = A B, the dense layers' data gradient) against the
 * FMA chains bit for bit on random shapes, inner indices across its chunks
 * of 512 row starts and its L1 blocks, strides wider than the rows (C's
 * guards kept); rt_op_gemm gives the same bits at 1 and 2 threads on
 * seedcnn's 32 x 4608 x 225. Where it does not run it declines, C
 * untouched. */
static void test_gemm_nn512(void **state)
{
    (void)state;
    for (uint64_t t = 0; t < 30; t++) {
        struct rt_rng r;
        rt_rng_seed(&r, 919 + t, 0);
        const int m = 1 + (int)(rt_rng_uniform(&r) * 64), n = 1 + (int)(rt_rng_uniform(&r) * 200),
                  k = 1 + (int)(rt_rng_uniform(&r) * 1200);
        const int lda = k + (int)(rt_rng_uniform(&r) * 5), ldb = n + (int)(rt_rng_uniform(&r) * 9),
                  ldc = n + (int)(rt_rng_uniform(&r) * 9);
        float *a = frand((size_t)m * lda, -1, 1, 6 * t + 1), *b = frand((size_t)k * ldb, -1, 1, 6 * t + 2);
        float *want = gemm_c(m, n, ldc), *got = gemm_c(m, n, ldc);
        gemm_fma_chain(m, n, k, a, lda, b, ldb, want, ldc);
        if (!cpu_gemm_nn512(m, n, k, a, lda, b, ldb, got, ldc)) {
            assert_false(cpu_has_avx512f() && cpu_blas_avx512());
            gemm_expect_untouched(m, n, got, ldc);
        } else {
            gemm_expect_bits(m, n, got, want, ldc);
        }
        free(a), free(b), free(want), free(got);
    }
    float one, x = 1.0f;
    if (cpu_gemm_nn512(1, 1, 1, &x, 1, &x, 1, &one, 1)) /* (runs here: bits at any count) */
        assert_true(op_gemm_same_bits(false, false, 32, 4608, 225, 9));
}

/* cpu_gemm_small_rows (B's rows read where they lie, overlapping as the
 * wide im2col's do) against the FMA chains on those rows copied out, bit
 * for bit, on random shapes: every tail of the AVX2 kernel's 4 x 24 tiles
 * and the AVX-512 one's 6 x 64, inner indices long enough to be cut in
 * blocks, C's guards kept. Both kernels give these bits, so hosts with and
 * without AVX-512 agree. Where neither runs it declines, C untouched; with
 * the AVX-512 one turned off an AVX-512 host declines or runs the AVX2
 * one, with the same bits. */
static void test_gemm_small_rows(void **state)
{
    (void)state;
    for (uint64_t t = 0; t < 60; t++) {
        struct rt_rng r;
        rt_rng_seed(&r, 191 + t, 0);
        const int m = 1 + (int)(rt_rng_uniform(&r) * 40), n = 1 + (int)(rt_rng_uniform(&r) * 300),
                  k = 1 + (int)(rt_rng_uniform(&r) * 400), ldc = n + (int)(rt_rng_uniform(&r) * 5);
        const int lda = k + (int)(rt_rng_uniform(&r) * 3);
        const int span = n + 1 + (int)(rt_rng_uniform(&r) * 300); /* the image's floats */
        float *a = frand((size_t)m * lda, -1, 1, 3 * t + 1), *img = frand((size_t)span, -1, 1, 3 * t + 2);
        float *b = malloc(sizeof(float) * (size_t)k * n);
        int32_t *at = malloc(sizeof(int32_t) * (size_t)k);
        assert_non_null(b);
        assert_non_null(at);
        for (int p = 0; p < k; p++) {
            at[p] = (int32_t)(rt_rng_uniform(&r) * (span - n + 1));
            memcpy(b + (size_t)p * n, img + at[p], sizeof(float) * (size_t)n);
        }
        float *want = gemm_c(m, n, ldc);
        gemm_fma_chain(m, n, k, a, lda, b, n, want, ldc);
        for (int wide = 1; wide >= 0; wide--) {
            cpu_gemm_small512_set(wide);
            float *got = gemm_c(m, n, ldc);
            if (!cpu_gemm_small_rows(m, n, k, a, lda, img, at, got, ldc)) {
                assert_false(cpu_avx2_kernels());
                assert_false(wide && cpu_has_avx512f() && cpu_blas_avx512());
                gemm_expect_untouched(m, n, got, ldc);
            } else {
                gemm_expect_bits(m, n, got, want, ldc);
            }
            free(got);
        }
        cpu_gemm_small512_set(true);
        free(a);
        free(img);
        free(b);
        free(at);
        free(want);
    }
}

static void test_sgd(void **state)
{
    (void)state;
    rt_dev *d = open_dev(1);
    /* Worked by hand, element 0 of the momentum case (lr .1, mu .9, wd .01):
     *   step 1: g' = .1 + .01*1 = .11, v = .11, w = 1 - .011 = .989
     *   step 2: g' = .2 + .01*.989 = .20989, v = .9*.11 + .20989 = .30889,
     *           w = .989 - .030889 = .958111 */
    static const struct {
        struct rt_sgd_params p;
        double w[3], v[3];
    } cases[] = {
        {{0.1f, 0.0f, 0.0f, false}, {0.97, -1.98, 0.503}, {0, 0, 0}},
        {{0.1f, 0.9f, 0.01f, false}, {0.958111, -1.947232, 0.4997525},
         {0.30889, -0.20768, -0.022525}},
        {{0.1f, 0.9f, 0.01f, true}, {0.93032971, -1.92859552, 0.501784025},
         {0.308791, -0.207392, -0.0225475}},
    };
    for (size_t ci = 0; ci < 3; ci++) {
        tb W = tb_new(d, 3), G = tb_new(d, 3), V = tb_new(d, 3);
        tb_set(&W, w0);
        tb_set(&V, (float[]){0, 0, 0});
        rt_view v = cases[ci].p.momentum != 0.0f ? V.v : (rt_view){NULL, 0};
        tb_set(&G, g1);
        assert_int_equal(rt_op_sgd_step(d, 3, &cases[ci].p, W.v, G.v, v), 0);
        tb_set(&G, g2);
        assert_int_equal(rt_op_sgd_step(d, 3, &cases[ci].p, W.v, G.v, v), 0);
        check3(&W, cases[ci].w, 1e-6, "sgd w");
        check3(&V, cases[ci].v, 1e-5, "sgd v");
        tb_free(&W);
        tb_free(&G);
        tb_free(&V);
    }
    rt_dev_close(&d);
}

static void test_adam(void **state)
{
    (void)state;
    rt_dev *d = open_dev(1);
    /* lr .01, b1 .9, b2 .999, eps 1e-8, wd .1. Element 0 of Adam (L2), by hand:
     *   step 1: g' = .1 + .1*1 = .2, m = .02, v = .00004,
     *           w = 1 - .01 * (.02/.1) / (sqrt(.00004/.001) + 1e-8) = .99
     *   step 2: g' = .2 + .099 = .299, m = .018 + .0299 = .0479, ... */
    static const struct {
        bool decoupled, nesterov;
        double w[3], m[3], v[3];
    } cases[] = {
        {false, false, {0.980089705, -1.98198112, 0.483406452},
         {0.0479, -0.0549, 0.00620000001}, {0.000129361, 0.000259551, 4.8961e-06}},
        {true, false, {0.978359181, -1.98200981, 0.493432656}, {0.029, -0.017, -0.0032},
         {4.999e-05, 9.991e-05, 2.8996e-06}},
        {false, true, {0.972825993, -1.97876736, 0.481291639},
         {0.0478526316, -0.0548526316, 0.0061526316},
         {0.000129077961, 0.000259457435, 4.89727174e-06}},
    };
    for (size_t ci = 0; ci < 3; ci++) {
        struct rt_optim_config c;
        rt_optim_config_defaults(&c);
        c.kind = cases[ci].decoupled ? RT_OPT_ADAMW : cases[ci].nesterov ? RT_OPT_NADAM
                                                                          : RT_OPT_ADAM;
        c.weight_decay = 0.1f;
        struct rt_adam_scalars p;
        rt_optim_adam_scalars(&c, 0.01f, 1, &p);
        tb W = tb_new(d, 3), G = tb_new(d, 3), M = tb_new(d, 3), V = tb_new(d, 3);
        tb_set(&W, w0);
        tb_set(&M, (float[]){0, 0, 0});
        tb_set(&V, (float[]){0, 0, 0});
        tb_set(&G, g1);
        assert_int_equal(rt_op_adam_step(d, 3, &p, W.v, G.v, M.v, V.v), 0);
        rt_optim_adam_scalars(&c, 0.01f, 2, &p);
        tb_set(&G, g2);
        assert_int_equal(rt_op_adam_step(d, 3, &p, W.v, G.v, M.v, V.v), 0);
        check3(&W, cases[ci].w, 1e-6, "adam w");
        check3(&M, cases[ci].m, 1e-5, "adam m");
        check3(&V, cases[ci].v, 1e-5, "adam v");
        tb_free(&W);
        tb_free(&G);
        tb_free(&M);
        tb_free(&V);
    }
    rt_dev_close(&d);
}

/* The threaded path of the optimiser steps matches the 1-thread path. */
static void test_optim_threads(void **state)
{
    (void)state;
    const size_t n = 100003;
    float *w = frand(n, -1, 1, 130), *g = frand(n, -1, 1, 131), *r1 = fvec(n), *r2 = fvec(n);
    for (int variant = 0; variant < 2; variant++) {
        for (int t = 0; t < 2; t++) {
            rt_dev *d = open_dev(t ? 2 : 1);
            tb W = tb_new(d, n), G = tb_new(d, n), M = tb_new(d, n), V = tb_new(d, n);
            tb_set(&W, w);
            tb_set(&G, g);
            assert_int_equal(rt_op_fill(d, n, 0.0f, M.v), 0);
            assert_int_equal(rt_op_fill(d, n, 0.0f, V.v), 0);
            for (long step = 1; step <= 3; step++) {
                if (variant == 0) {
                    struct rt_sgd_params p = {0.05f, 0.9f, 1e-4f, true};
                    assert_int_equal(rt_op_sgd_step(d, n, &p, W.v, G.v, V.v), 0);
                } else {
                    struct rt_optim_config c;
                    rt_optim_config_defaults(&c);
                    c.kind = RT_OPT_ADAMW;
                    c.weight_decay = 0.01f;
                    struct rt_adam_scalars p;
                    rt_optim_adam_scalars(&c, 1e-3f, step, &p);
                    assert_int_equal(rt_op_adam_step(d, n, &p, W.v, G.v, M.v, V.v), 0);
                }
            }
            tb_get(&W, t ? r2 : r1);
            tb_free(&W);
            tb_free(&G);
            tb_free(&M);
            tb_free(&V);
            rt_dev_close(&d);
        }
        assert_true(tu_max_rel_err(r2, r1, n, 1.0) <= 1e-6);
    }
    free(w);
    free(g);
    free(r1);
    free(r2);
}

/* The SGD step runs in the widest vectors the CPU has (a CPU_CLONES span,
 * as Adam's): its bits must be those of backend.h's loop one float at a
 * time, so replicas on different CPUs stay identical. Plain (no momentum
 * state), momentum and Nesterov, with weight decay, at 1 and 2 threads. */
static void test_sgd_bits(void **state)
{
    (void)state;
    const size_t n = 70001;
    float *w0 = frand(n, -1, 1, 150), *g = frand(n, -1, 1, 151), *v0 = frand(n, -1, 1, 152),
          *want = fvec(n), *wantv = fvec(n), *got = fvec(n);
    const struct rt_sgd_params cases[] = {
        {0.05f, 0.0f, 1e-3f, false}, {0.05f, 0.9f, 1e-3f, false}, {0.05f, 0.9f, 1e-3f, true}};
    for (int k = 0; k < 3; k++) {
        const struct rt_sgd_params *p = &cases[k];
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + p->weight_decay * w0[i], vi = p->momentum * v0[i] + gi;
            wantv[i] = p->momentum == 0.0f ? v0[i] : vi;
            if (p->momentum == 0.0f)
                want[i] = w0[i] - p->lr * gi;
            else
                want[i] = w0[i] - p->lr * (p->nesterov ? gi + p->momentum * vi : vi);
        }
        for (int t = 1; t <= 2; t++) {
            rt_dev *d = open_dev(t);
            tb W = tb_new(d, n), G = tb_new(d, n), V = tb_new(d, n);
            tb_set(&W, w0);
            tb_set(&G, g);
            tb_set(&V, v0);
            rt_view v = p->momentum == 0.0f ? (rt_view){0} : V.v;
            assert_int_equal(rt_op_sgd_step(d, n, p, W.v, G.v, v), 0);
            tb_get(&W, got);
            assert_memory_equal(got, want, n * sizeof *got);
            tb_get(&V, got);
            assert_memory_equal(got, wantv, n * sizeof *got);
            tb_free(&W);
            tb_free(&G);
            tb_free(&V);
            rt_dev_close(&d);
        }
    }
    free(w0);
    free(g);
    free(v0);
    free(want);
    free(wantv);
    free(got);
}

/* The Adam step runs in the widest vectors the CPU has (a CPU_CLONES
 * span): its bits must be those of the plain C loop of backend.h, one
 * float at a time, so that replicas on different CPUs stay identical.
 * Adam with L2, AdamW and Nadam, at 1 and 2 threads. */
static void test_adam_bits(void **state)
{
    (void)state;
    const size_t n = 70001;
    float *w0 = frand(n, -1, 1, 140), *g = frand(n, -1, 1, 141), *m0 = frand(n, -1, 1, 142),
          *v0 = frand(n, 0, 1, 143), *want = fvec(n), *got = fvec(n);
    const enum rt_optim_kind kinds[] = {RT_OPT_ADAM, RT_OPT_ADAMW, RT_OPT_NADAM};
    for (int k = 0; k < 3; k++) {
        struct rt_optim_config c;
        rt_optim_config_defaults(&c);
        c.kind = kinds[k];
        c.weight_decay = 0.01f;
        struct rt_adam_scalars p;
        rt_optim_adam_scalars(&c, 3e-3f, 7, &p);
        for (size_t i = 0; i < n; i++) {
            float wi = w0[i] - p.decay * w0[i];
            float gi = g[i] + p.l2 * wi;
            float mi = p.beta1 * m0[i] + (1.0f - p.beta1) * gi;
            float vi = p.beta2 * v0[i] + (1.0f - p.beta2) * gi * gi;
            float mhat = p.cm * mi + p.cg * gi;
            want[i] = wi - p.lr * mhat / (sqrtf(vi * p.inv_bc2) + p.eps);
        }
        for (int t = 1; t <= 2; t++) {
            rt_dev *d = open_dev(t);
            tb W = tb_new(d, n), G = tb_new(d, n), M = tb_new(d, n), V = tb_new(d, n);
            tb_set(&W, w0);
            tb_set(&G, g);
            tb_set(&M, m0);
            tb_set(&V, v0);
            assert_int_equal(rt_op_adam_step(d, n, &p, W.v, G.v, M.v, V.v), 0);
            tb_get(&W, got);
            assert_memory_equal(got, want, n * sizeof *got);
            tb_free(&W);
            tb_free(&G);
            tb_free(&M);
            tb_free(&V);
            rt_dev_close(&d);
        }
    }
    free(w0);
    free(g);
    free(m0);
    free(v0);
    free(want);
    free(got);
}

/* Which small-GEMM kernels run: ragtag's AVX2 ones unless the BLAS has
 * AVX-512 kernels. OPENBLAS_CORETYPE names the core OpenBLAS runs
 * (test_blas_core.sh runs this binary with Haswell and with the CPU's own). */
static void test_avx2_kernels_rule(void **state)
{
    (void)state;
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("OPENBLAS_CORETYPE %s; the BLAS has AVX-512 kernels: %s; ragtag's AVX2 kernels: %s\n",
           core ? core : "(unset)", cpu_blas_avx512() ? "yes" : "no",
           cpu_avx2_kernels() ? "on" : "off");
#if defined(__x86_64__) && defined(RT_HAVE_CBLAS) && !defined(RT_BLAS_BLIS)
    if (core && !strcasecmp(core, "haswell")) {
        assert_false(cpu_blas_avx512());
        assert_int_equal(cpu_avx2_kernels(), avx2);
    }
    if (core && !strcasecmp(core, "skylakex") && __builtin_cpu_supports("avx512f")) {
        assert_true(cpu_blas_avx512());
        assert_false(cpu_avx2_kernels());
    }
#else
    skip();
#endif
}

/* cpu_runs: every item handed out exactly once, each thread's own run first
 * and in order, also when fewer threads than planned take part (their runs
 * are taken over). */
static void test_runs_hand_out(void **state)
{
    (void)state;
    static const int ns[] = {0, 1, 5, 64, 65}, nts[] = {1, 2, 3, 7};
    static struct cpu_runs runs;
    int seen[80];
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof nts / sizeof nts[0]; b++) {
            const int n = ns[a], nt = nts[b];
            /* thread 1 (or 0) alone: its run in order, then the others' */
            const int t = nt > 1 ? 1 : 0;
            cpu_runs_init(&runs, n, nt);
            memset(seen, 0, sizeof seen);
            const int lo = (int)((long)n * t / nt), hi = (int)((long)n * (t + 1) / nt);
            for (int k = 0, i; (i = cpu_runs_next(&runs, t, nt)) >= 0; k++) {
                assert_in_range(i, 0, n - 1);
                if (k < hi - lo)
                    assert_int_equal(i, lo + k);
                seen[i]++;
            }
            for (int i = 0; i < n; i++)
                assert_int_equal(seen[i], 1);
            /* a real region of nt threads, then one of fewer */
            for (int team = nt; team >= (nt > 1 ? nt - 1 : nt); team--) {
                cpu_runs_init(&runs, n, nt);
                memset(seen, 0, sizeof seen);
#ifdef _OPENMP
#pragma omp parallel num_threads(team)
#endif
                {
                    const int me = cpu_thread_num();
                    for (int i; (i = cpu_runs_next(&runs, me, nt)) >= 0;)
                        __atomic_fetch_add(&seen[i], 1, __ATOMIC_RELAXED);
                }
                for (int i = 0; i < n; i++)
                    assert_int_equal(seen[i], 1);
            }
        }
}

/* Which OpenBLAS core the program names (blas_core.c): only a core known to
 * be narrower than the CPU is raised, to the one OpenBLAS gives a CPU of
 * that width; a core as wide, or a name not in the table, stays. */
static void test_blas_core_choice(void **state)
{
    (void)state;
    static const struct {
        const char *core;
        int cpu_width;
        const char *want;
    } cases[] = {
        {"Prescott", 3, "Cooperlake"}, {"Prescott", 2, "SkylakeX"}, {"PRESCOTT", 1, "Haswell"},
        {"Prescott", 0, NULL},         {"Sandybridge", 1, "Haswell"}, {"Nehalem", 2, "SkylakeX"},
        {"Haswell", 3, "Cooperlake"},  {"Zen", 2, "SkylakeX"},        {"Haswell", 1, NULL},
        {"SkylakeX", 2, NULL},         {"SkylakeX", 3, "Cooperlake"}, {"Cooperlake", 3, NULL},
        {"SapphireRapids", 3, NULL},   {"GraniteRapids", 3, NULL},    {NULL, 3, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = cpu_blas_core_raised(cases[i].core, cases[i].cpu_width);
        if (!cases[i].want)
            assert_null(got);
        else
            assert_string_equal(got, cases[i].want);
    }
    /* every raised core is one the table knows as that wide */
    for (int w = 1; w <= 3; w++)
        assert_int_equal(cpu_blas_core_width(cpu_blas_core_raised("Prescott", w)), w);
    assert_in_range(cpu_blas_cpu_width(), 0, 3);
#if defined(__x86_64__) && defined(RT_HAVE_CBLAS) && !defined(RT_BLAS_BLIS)
    /* OPENBLAS_CORETYPE set: the program names nothing */
    if (getenv("OPENBLAS_CORETYPE")) {
        const char *picked = NULL;
        assert_null(rt_cpu_blas_core_wanted(&picked));
    }
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avx2_kernels_rule), cmocka_unit_test(test_blas_core_choice),
        cmocka_unit_test(test_runs_hand_out),
        cmocka_unit_test(test_device),        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_conv),          cmocka_unit_test(test_conv_thread_bits),
        cmocka_unit_test(test_conv_workspace_grows),
        cmocka_unit_test(test_bias),          cmocka_unit_test(test_fused),
        cmocka_unit_test(test_fused_bwd),     cmocka_unit_test(test_adam_bits),
        cmocka_unit_test(test_pool),          cmocka_unit_test(test_pool_ties),
        cmocka_unit_test(test_act),           cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_bn),            cmocka_unit_test(test_bn_act_fused),
        cmocka_unit_test(test_bn_threads_same_bits),
        cmocka_unit_test(test_act_bias_threads_same_bits),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_elementwise),   cmocka_unit_test(test_gemm_small),
        cmocka_unit_test(test_gemm_small_rows), cmocka_unit_test(test_wgrad_outer),
        cmocka_unit_test(test_gemm_nt_longk), cmocka_unit_test(test_gemm_nn512),
        cmocka_unit_test(test_gemm_tn_smallk),
        cmocka_unit_test(test_conv_wino512_bits),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_sgd_bits),
        cmocka_unit_test(test_adam),          cmocka_unit_test(test_optim_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
