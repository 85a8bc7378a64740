/* test_backend_ops.c — every op of the kernel table, on every backend and
 * device present, against the cpu backend (ggml's test-backend-ops).
 *
 * Columns are found at run time (rt_backend_count), so a new backend module
 * is tested as soon as it loads; a backend that is absent is reported as
 * SKIPPED with the reason. The cpu backend is a column too: one thread
 * against the reference's team, which catches results that depend on the
 * thread count. Each op runs on random shapes, odd and non-multiple-of-tile
 * sizes and zero-size edges, on both devices, from the same inputs; then:
 *  - every output agrees with the reference within the op's error bound;
 *  - every view sits at a random offset between guard words that must
 *    survive, so out-of-bounds writes (and offset bugs) are caught;
 *  - inputs are unchanged, bit for bit;
 *  - outputs start as NaN, so an element left unwritten shows;
 *  - both devices return the same status.
 * Every op of ops.def needs a test_NAME here, or this file does not build.
 *
 *   RAGTAG_TEST_SEED=N    another random draw of shapes and values */
#include "config.h"

#include "testutil.h"

#include "backend.h"
#include "optim.h"
#include "status.h"

#define SENTINEL 0x7fa5a5a5u /* a NaN no op produces: the guard word */
#define MAX_ARGS 12

/* One device column under test. */
struct column {
    char label[200];
    const char *backend;
    int device, threads;
    const char *vector; /* RAGTAG_OPENCL_VECTOR while it opens (NULL: the device's own) */
    rt_dev *d;
};

static rt_dev *ref; /* cpu, all threads: the reference */
static rt_rng rng;

/* ---- random draws ----------------------------------------------------------------- */

static int irand(int lo, int hi) /* in [lo, hi] */
{
    return lo + (int)rt_rng_below(&rng, (uint64_t)(hi - lo + 1));
}

static float frand(float lo, float hi) { return lo + (hi - lo) * (float)rt_rng_uniform(&rng); }

/* ---- arguments: one view, on both devices --------------------------------------------- */

enum role {
    IN,    /* read only: must come back unchanged */
    OUT,   /* written: starts as NaN, compared */
    INOUT, /* read and written: starts random, compared */
    SCRATCH, /* a workspace: anything may be written, but only inside */
};

struct arg {
    const char *name;
    enum role role;
    size_t n, g0, g1; /* view length, guard words before and after */
    uint32_t *init;   /* the view's words before the op */
    rt_buf *buf[2];   /* [0] reference, [1] device under test */
    double tol, floor_;
};

struct trial {
    const char *op;
    struct column *col;
    rt_dev *d[2];
    char shape[256];
    struct arg a[MAX_ARGS];
    int na;
    int rc[2];
    double tol, floor_; /* defaults for outputs added after they are set */
};

static void trial_begin(struct trial *t, struct column *col, const char *op, double tol,
                        double floor_)
{
    memset(t, 0, sizeof *t);
    t->op = op;
    t->col = col;
    t->d[0] = ref;
    t->d[1] = col->d;
    t->tol = tol;
    t->floor_ = floor_;
}

static void trial_shape(struct trial *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void trial_shape(struct trial *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->shape, sizeof t->shape, fmt, ap);
    va_end(ap);
}

/* Add a view of n words, filled by `fill` (NULL: NaN), at a random offset
 * between random-sized guards. */
static struct arg *arg_add(struct trial *t, const char *name, enum role role, size_t n,
                           void (*fill)(uint32_t *w, size_t n, const void *ctx), const void *ctx)
{
    assert_true(t->na < MAX_ARGS);
    struct arg *a = &t->a[t->na++];
    a->name = name;
    a->role = role;
    a->n = n;
    a->g0 = (size_t)irand(1, 19);
    a->g1 = (size_t)irand(1, 19);
    a->tol = t->tol;
    a->floor_ = t->floor_;
    a->init = malloc((n ? n : 1) * sizeof *a->init);
    assert_non_null(a->init);
    if (fill) {
        fill(a->init, n, ctx);
    } else {
        for (size_t i = 0; i < n; i++)
            a->init[i] = 0x7fc00000u; /* quiet NaN */
    }
    size_t words = a->g0 + n + a->g1;
    uint32_t *all = malloc(words * sizeof *all);
    assert_non_null(all);
    for (size_t i = 0; i < words; i++)
        all[i] = SENTINEL;
    if (n)
        memcpy(all + a->g0, a->init, n * sizeof *all);
    for (int s = 0; s < 2; s++) {
        a->buf[s] = rt_buf_new(t->d[s], words * sizeof *all);
        if (!a->buf[s])
            fail_msg("%s: %s: allocating %zu words: %s", t->col->label, t->op, words,
                     rt_error_detail());
        assert_int_equal(rt_upload(t->d[s], rt_buf_view(a->buf[s]), all, words * sizeof *all), 0);
    }
    free(all);
    return a;
}

struct range {
    float lo, hi;
};

static void fill_uniform(uint32_t *w, size_t n, const void *ctx)
{
    const struct range *r = ctx;
    for (size_t i = 0; i < n; i++) {
        float f = frand(r->lo, r->hi);
        memcpy(&w[i], &f, sizeof f);
    }
}

/* Small integers as floats: many ties, for max pooling's tie rule. */
static void fill_ties(uint32_t *w, size_t n, const void *ctx)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        float f = (float)irand(-2, 2);
        memcpy(&w[i], &f, sizeof f);
    }
}

/* int32 labels in [0, *ctx). */
static void fill_labels(uint32_t *w, size_t n, const void *ctx)
{
    const int c = *(const int *)ctx;
    for (size_t i = 0; i < n; i++) {
        int32_t v = irand(0, c - 1);
        memcpy(&w[i], &v, sizeof v);
    }
}

static struct arg *arg_rand(struct trial *t, const char *name, enum role role, size_t n, float lo,
                            float hi)
{
    struct range r = {lo, hi};
    return arg_add(t, name, role, n, fill_uniform, &r);
}

static struct arg *arg_out(struct trial *t, const char *name, size_t n)
{
    return arg_add(t, name, OUT, n, NULL, NULL);
}

static rt_view view(const struct arg *a, int side)
{
    return rt_view_at(rt_buf_view(a->buf[side]), a->g0);
}

/* Run `expr` on the reference (S = 0) and on the device under test (S = 1);
 * V(a) is arg a's view on that side, D the device. */
#define V(a) view((a), S)
#define RUN(t, expr)                                                                         \
    do {                                                                                     \
        for (int S = 0; S < 2; S++) {                                                        \
            rt_dev *D = (t)->d[S];                                                           \
            (void)D;                                                                         \
            (t)->rc[S] = (expr);                                                             \
        }                                                                                    \
    } while (0)

static float word_f(uint32_t w)
{
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

/* The worst |x - r| / max(|r|, floor) of a view; equal bits (NaN too) are 0. */
static double view_err(const uint32_t *x, const uint32_t *r, size_t n, double floor_, size_t *at)
{
    double worst = 0.0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] == r[i])
            continue;
        double a = word_f(x[i]), b = word_f(r[i]);
        double den = fabs(b) > floor_ ? fabs(b) : floor_;
        double e = fabs(a - b) / den;
        if (isnan(e))
            e = INFINITY;
        if (e > worst) {
            worst = e;
            *at = i;
        }
    }
    return worst;
}

/* Compare everything, then free the trial's buffers. */
static void trial_check(struct trial *t)
{
    const char *who = t->col->label;
    if (t->rc[0] != t->rc[1])
        fail_msg("%s: %s [%s]: status %d (%s) on the reference, %d (%s) here", who, t->op,
                 t->shape, t->rc[0], rt_strerror(t->rc[0]), t->rc[1], rt_strerror(t->rc[1]));
    for (int s = 0; s < 2; s++)
        if (rt_sync(t->d[s]) < 0)
            fail_msg("%s: %s [%s]: sync: %s", s ? who : "reference", t->op, t->shape,
                     rt_error_detail());
    for (int i = 0; i < t->na; i++) {
        struct arg *a = &t->a[i];
        size_t words = a->g0 + a->n + a->g1;
        uint32_t *all[2];
        for (int s = 0; s < 2; s++) {
            all[s] = malloc(words * sizeof(uint32_t));
            assert_non_null(all[s]);
            if (rt_download(t->d[s], all[s], rt_buf_view(a->buf[s]), words * 4) < 0)
                fail_msg("%s: %s: download: %s", who, t->op, rt_error_detail());
            for (size_t j = 0; j < words; j++) {
                if (j >= a->g0 && j < a->g0 + a->n)
                    continue;
                if (all[s][j] != SENTINEL)
                    fail_msg("%s: %s [%s]: %s wrote outside view '%s' (%zu words): guard word "
                             "%s%zu changed",
                             who, t->op, t->shape, s ? "the device" : "the cpu reference",
                             a->name, a->n, j < a->g0 ? "-" : "+",
                             j < a->g0 ? a->g0 - j : j - a->g0 - a->n + 1);
            }
        }
        const uint32_t *x = all[1] + a->g0, *r = all[0] + a->g0;
        size_t at;
        if (a->role == IN) {
            for (int s = 0; s < 2; s++)
                if (a->n && memcmp(all[s] + a->g0, a->init, a->n * 4) != 0)
                    fail_msg("%s: %s [%s]: input '%s' was modified by %s", who, t->op, t->shape,
                             a->name, s ? "the device" : "the cpu reference");
        } else if (a->role != SCRATCH && t->rc[0] == RT_OK) {
            double e = view_err(x, r, a->n, a->floor_, &at);
            if (e > a->tol)
                fail_msg("%s: %s [%s]: output '%s': error %.3g > %.3g at [%zu]: %.9g, reference "
                         "%.9g",
                         who, t->op, t->shape, a->name, e, a->tol, at, word_f(x[at]),
                         word_f(r[at]));
        }
        free(all[0]);
        free(all[1]);
    }
    for (int i = 0; i < t->na; i++) {
        rt_buf_destroy(&t->a[i].buf[0]);
        rt_buf_destroy(&t->a[i].buf[1]);
        free(t->a[i].init);
    }
    t->na = 0;
}

#define COL(state) ((struct column *)*(state))
#define TRIALS 12

/* ---- GEMM ------------------------------------------------------------------------------ */

static void gemm_case(struct column *col, int ta, int tb, int m, int n, int k, float alpha,
                      float beta)
{
    struct trial t;
    trial_begin(&t, col, "gemm", 1e-4, 1.0);
    int lda = (ta ? m : k) + irand(0, 3), ldb = (tb ? k : n) + irand(0, 3), ldc = n + irand(0, 3);
    size_t arows = (size_t)(ta ? k : m), brows = (size_t)(tb ? n : k);
    trial_shape(&t, "ta %d tb %d m %d n %d k %d lda %d ldb %d ldc %d alpha %g beta %g", ta, tb, m,
                n, k, lda, ldb, ldc, alpha, beta);
    struct arg *a = arg_rand(&t, "A", IN, k ? arows * lda : 0, -1, 1);
    struct arg *b = arg_rand(&t, "B", IN, k ? brows * ldb : 0, -1, 1);
    /* beta == 0: C must not be read, so it starts as NaN. */
    size_t cn = m && n ? (size_t)(m - 1) * ldc + n : 0;
    struct arg *c = beta == 0.0f ? arg_out(&t, "C", cn) : arg_rand(&t, "C", INOUT, cn, -1, 1);
    c->floor_ = k > 1 ? sqrt((double)k) / 2 : 1.0;
    RUN(&t, rt_op_gemm(D, ta, tb, m, n, k, alpha, V(a), lda, V(b), ldb, beta, V(c), ldc));
    trial_check(&t);
}

static void test_gemm(void **state)
{
    struct column *col = COL(state);
    static const float betas[] = {0.0f, 1.0f, 0.5f};
    for (int i = 0; i < 3 * TRIALS; i++)
        gemm_case(col, irand(0, 1), irand(0, 1), irand(1, 70), irand(1, 70), irand(1, 90),
                  frand(-2, 2), betas[irand(0, 2)]);
    /* odd sizes past the usual 64/128 tiles, skinny conv-like shapes */
    gemm_case(col, 0, 0, 129, 131, 127, 1.0f, 0.0f);
    gemm_case(col, 1, 1, 257, 65, 33, 0.5f, 1.0f);
    gemm_case(col, 0, 1, 6, 25, 3000, 1.0f, 0.0f);
    gemm_case(col, 0, 0, 6, 3000, 25, 1.0f, 0.0f);
    gemm_case(col, 1, 0, 150, 700, 16, 1.0f, 0.0f);
    /* past 256^3: CLBlast's indirect kernel on PoCL with ragtag's tuning */
    gemm_case(col, 0, 0, 300, 270, 260, 1.0f, 0.0f);
    gemm_case(col, 1, 1, 263, 301, 290, -0.5f, 1.0f);
    /* edges: k = 0 scales C by beta (0: zeros), m or n = 0 does nothing */
    gemm_case(col, 0, 0, 5, 7, 0, 1.0f, 0.0f);
    gemm_case(col, 1, 0, 5, 7, 0, 1.0f, 0.75f);
    gemm_case(col, 0, 0, 4, 6, 9, 0.0f, 0.5f);
    gemm_case(col, 0, 0, 0, 6, 9, 1.0f, 0.0f);
    gemm_case(col, 0, 1, 6, 0, 9, 1.0f, 1.0f);
}

/* ---- convolution ---------------------------------------------------------------------- */

static struct rt_conv_shape conv_shape(int n, int c, int h, int w, int k, int r, int s, int sh,
                                       int sw, int ph, int pw)
{
    struct rt_conv_shape cs = {n, c, h, w, k, r, s, sh, sw, ph, pw, 0, 0};
    cs.oh = (h + 2 * ph - r) / sh + 1;
    cs.ow = (w + 2 * pw - s) / sw + 1;
    return cs;
}

static struct rt_conv_shape conv_random(void)
{
    for (;;) {
        int h = irand(1, 13), w = irand(1, 13), r = irand(1, 5), s = irand(1, 5);
        int ph = irand(0, 2), pw = irand(0, 2);
        if (h + 2 * ph < r || w + 2 * pw < s)
            continue;
        return conv_shape(irand(0, 5), irand(1, 5), h, w, irand(1, 7), r, s, irand(1, 3),
                          irand(1, 3), ph, pw);
    }
}

/* The shapes every conv test runs besides the random ones. */
static struct rt_conv_shape conv_fixed(int i)
{
    switch (i) {
    case 0: return conv_shape(3, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2);   /* lenet conv1 */
    case 1: return conv_shape(2, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0);  /* lenet conv2 */
    case 2: return conv_shape(2, 5, 7, 9, 3, 1, 1, 1, 1, 0, 0);     /* pointwise */
    case 3: return conv_shape(1, 3, 11, 10, 4, 3, 3, 2, 2, 1, 1);   /* strided */
    case 4: return conv_shape(0, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1);     /* no images */
    case 5: return conv_shape(65, 2, 5, 4, 3, 3, 2, 1, 1, 1, 0);    /* a large batch */
    /* rows so wide that the opencl forward's loads past the last image
     * would leave its buffer's spare bytes: that image is packed */
    default: return conv_shape(2, 1, 3, 1100, 2, 3, 3, 1, 1, 0, 0);
    }
}
#define CONV_FIXED 7

enum conv_op { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER, CONV_FWD_BIAS_ACT };

static const char *const act_names[] = {"identity", "relu", "leaky", "sigmoid", "tanh"};

/* n floats at got and at want on d have the same bits, or the test fails
 * naming the first that differs: "WHO: OP [SHAPE]: NAME[i] = a, but HOW
 * gave b" (a fused op against the ops it fuses, on the same device). */
static void expect_same_bits(rt_dev *d, rt_view got, rt_view want, size_t n, const char *who,
                             const struct trial *t, const char *name, const char *how)
{
    float *h[2] = {malloc((n ? n : 1) * sizeof(float)), malloc((n ? n : 1) * sizeof(float))};
    assert_non_null(h[0]);
    assert_non_null(h[1]);
    assert_int_equal(rt_download(d, h[0], got, n * sizeof(float)), 0);
    assert_int_equal(rt_download(d, h[1], want, n * sizeof(float)), 0);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&h[0][i], &h[1][i], sizeof(float)) != 0)
            fail_msg("%s: %s [%s]: %s[%zu] = %.9g, but %s gave %.9g", who, t->op, t->shape, name,
                     i, h[0][i], how, h[1][i]);
    free(h[0]);
    free(h[1]);
}

/* The device's conv2d_fwd_bias_act has the bits of its conv2d_fwd, then
 * bias_act_fwd (backend.h: "the same values"), whichever way it fuses them. */
static void same_as_unfused(struct trial *t, const struct rt_conv_shape *s, enum rt_act act,
                            struct arg *x, struct arg *w, struct arg *b, struct arg *y,
                            struct arg *ws)
{
    rt_dev *d = t->col->d;
    const size_t yn = (size_t)s->n * s->k * s->oh * s->ow;
    rt_buf *y2 = rt_buf_new(d, (yn ? yn : 1) * sizeof(float));
    assert_non_null(y2);
    assert_int_equal(rt_op_conv2d_fwd(d, s, view(x, 1), view(w, 1), rt_buf_view(y2), view(ws, 1)),
                     0);
    assert_int_equal(rt_op_bias_act_fwd(d, act, 0.1f, s->n, s->k, s->oh * s->ow, view(b, 1),
                                        rt_buf_view(y2)),
                     0);
    expect_same_bits(d, view(y, 1), rt_buf_view(y2), yn, t->col->label, t, "y",
                     "conv2d_fwd then bias_act_fwd");
    rt_buf_destroy(&y2);
}

static void conv_case(struct column *col, enum conv_op op, const struct rt_conv_shape *s)
{
    static const char *const names[] = {"conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_filter",
                                        "conv2d_fwd_bias_act"};
    const enum rt_act act = (enum rt_act)irand(RT_ACT_IDENTITY, RT_ACT_TANH);
    struct trial t;
    trial_begin(&t, col, names[op], 1e-4, 1.0);
    trial_shape(&t, "n %d c %d %dx%d k %d %dx%d stride %d,%d pad %d,%d -> %dx%d%s%s", s->n, s->c,
                s->h, s->w, s->k, s->r, s->s, s->stride_h, s->stride_w, s->pad_h, s->pad_w, s->oh,
                s->ow, op == CONV_FWD_BIAS_ACT ? ", then bias and " : "",
                op == CONV_FWD_BIAS_ACT ? act_names[act] : "");
    size_t xn = (size_t)s->n * s->c * s->h * s->w, yn = (size_t)s->n * s->k * s->oh * s->ow;
    size_t wn = (size_t)s->k * s->c * s->r * s->s;
    /* The workspace's size depends on the backend: one per side. */
    size_t wsn[2] = {rt_conv2d_workspace(ref, s), rt_conv2d_workspace(col->d, s)};
    struct arg *ws[2];
    struct arg *x, *w, *y, *b = NULL;
    if (op == CONV_FWD || op == CONV_FWD_BIAS_ACT) {
        x = arg_rand(&t, "x", IN, xn, -1, 1);
        w = arg_rand(&t, "w", IN, wn, -1, 1);
        y = arg_out(&t, "y", yn);
        if (op == CONV_FWD_BIAS_ACT)
            b = arg_rand(&t, "b", IN, (size_t)s->k, -1, 1);
    } else if (op == CONV_BWD_DATA) {
        x = arg_out(&t, "dx", xn);
        w = arg_rand(&t, "w", IN, wn, -1, 1);
        y = arg_rand(&t, "dy", IN, yn, -1, 1);
    } else {
        x = arg_rand(&t, "x", IN, xn, -1, 1);
        w = arg_out(&t, "dw", wn);
        y = arg_rand(&t, "dy", IN, yn, -1, 1);
        w->floor_ = s->n > 1 ? sqrt((double)s->n) : 1.0;
    }
    /* Each side uses the workspace sized for it, ws[S]. */
    for (int i = 0; i < 2; i++) {
        ws[i] = arg_out(&t, i ? "workspace (device)" : "workspace (reference)", wsn[i]);
        ws[i]->role = SCRATCH;
    }
    switch (op) {
    case CONV_FWD: RUN(&t, rt_op_conv2d_fwd(D, s, V(x), V(w), V(y), V(ws[S]))); break;
    case CONV_BWD_DATA: RUN(&t, rt_op_conv2d_bwd_data(D, s, V(y), V(w), V(x), V(ws[S]))); break;
    case CONV_BWD_FILTER: RUN(&t, rt_op_conv2d_bwd_filter(D, s, V(x), V(y), V(w), V(ws[S]))); break;
    case CONV_FWD_BIAS_ACT:
        RUN(&t, rt_op_conv2d_fwd_bias_act(D, s, V(x), V(w), V(b), act, 0.1f, V(y), V(ws[S])));
        break;
    }
    if (op == CONV_FWD_BIAS_ACT && t.rc[1] == RT_OK)
        same_as_unfused(&t, s, act, x, w, b, y, ws[1]);
    trial_check(&t);
}

/* OpenCL's convolutions in chunks of 2 images (its knob; the other
 * backends ignore it): the chunked paths, at the fixed shapes. */
#define CHUNKED_BEGIN() setenv("RAGTAG_OPENCL_CONV_CHUNK", "2", 1)
#define CHUNKED_END() unsetenv("RAGTAG_OPENCL_CONV_CHUNK")

static void conv_test(struct column *col, enum conv_op op)
{
    for (int i = 0; i < 2 * CONV_FIXED; i++) {
        struct rt_conv_shape s = conv_fixed(i % CONV_FIXED);
        if (i == CONV_FIXED)
            CHUNKED_BEGIN();
        conv_case(col, op, &s);
    }
    CHUNKED_END();
    for (int i = 0; i < TRIALS; i++) {
        struct rt_conv_shape s = conv_random();
        conv_case(col, op, &s);
    }
}

static void test_conv2d_fwd(void **state) { conv_test(COL(state), CONV_FWD); }
static void test_conv2d_bwd_data(void **state) { conv_test(COL(state), CONV_BWD_DATA); }
static void test_conv2d_bwd_filter(void **state) { conv_test(COL(state), CONV_BWD_FILTER); }
static void test_conv2d_fwd_bias_act(void **state) { conv_test(COL(state), CONV_FWD_BIAS_ACT); }

/* conv2d_bwd_act: dx, dw and db of act(conv(x, w) + b) from y and dy; every
 * third case without dx, every fourth without db; g is scratch, and in
 * every third case dy's own memory (the layers pass it so: dy is dead
 * after, and whatever lands there is not compared). */
static void bwd_act_case(struct column *col, const struct rt_conv_shape *s, int i)
{
    const enum rt_act k = (enum rt_act)(i % 5);
    const bool with_dx = i % 3 != 2, with_db = i % 4 != 3, g_in_dy = i % 3 == 1;
    struct trial t;
    trial_begin(&t, col, "conv2d_bwd_act", 1e-4, 1.0);
    trial_shape(&t, "%s n %d c %d %dx%d k %d %dx%d stride %d,%d pad %d,%d -> %dx%d%s%s%s",
                act_names[k], s->n, s->c, s->h, s->w, s->k, s->r, s->s, s->stride_h,
                s->stride_w, s->pad_h, s->pad_w, s->oh, s->ow, with_dx ? "" : ", no dx",
                with_db ? "" : ", no db", g_in_dy ? ", g in dy" : "");
    const size_t xn = (size_t)s->n * s->c * s->h * s->w, yn = (size_t)s->n * s->k * s->oh * s->ow;
    const size_t wn = (size_t)s->k * s->c * s->r * s->s;
    size_t wsn[2] = {rt_conv2d_workspace(ref, s), rt_conv2d_workspace(col->d, s)};
    struct arg *x = arg_rand(&t, "x", IN, xn, -1, 1), *w = arg_rand(&t, "w", IN, wn, -1, 1);
    struct arg *y = k == RT_ACT_RELU ? arg_add(&t, "y", IN, yn, fill_ties, NULL)
                    : k == RT_ACT_SIGMOID ? arg_rand(&t, "y", IN, yn, 0, 1)
                                          : arg_rand(&t, "y", IN, yn, -1, 1);
    struct arg *dy = arg_rand(&t, "dy", IN, yn, -1, 1), *g = g_in_dy ? dy : arg_out(&t, "g", yn);
    g->role = SCRATCH;
    struct arg *dx = with_dx ? arg_out(&t, "dx", xn) : NULL;
    struct arg *dw = arg_out(&t, "dw", wn), *db = with_db ? arg_out(&t, "db", (size_t)s->k) : NULL;
    dw->floor_ = s->n > 1 ? sqrt((double)s->n) : 1.0;
    if (db)
        db->floor_ = dw->floor_;
    struct arg *ws[2];
    for (int j = 0; j < 2; j++) {
        ws[j] = arg_out(&t, j ? "workspace (device)" : "workspace (reference)", wsn[j]);
        ws[j]->role = SCRATCH;
    }
    RUN(&t, rt_op_conv2d_bwd_act(D, s, k, 0.1f, V(x), V(y), V(dy), V(w), V(g),
                                 dx ? V(dx) : (rt_view){0}, V(dw), db ? V(db) : (rt_view){0},
                                 V(ws[S])));
    trial_check(&t);
}

static void test_conv2d_bwd_act(void **state)
{
    int i = 0;
    for (int f = 0; f < 2 * CONV_FIXED; f++) {
        struct rt_conv_shape s = conv_fixed(f % CONV_FIXED);
        if (f == CONV_FIXED)
            CHUNKED_BEGIN();
        bwd_act_case(COL(state), &s, i++);
    }
    CHUNKED_END();
    /* the cpu backend's Winograd shapes (3x3, stride 1, 8+ channels) */
    const struct rt_conv_shape wino[] = {conv_shape(3, 16, 10, 10, 16, 3, 3, 1, 1, 1, 1),
                                         conv_shape(2, 8, 9, 7, 12, 3, 3, 1, 1, 0, 0),
                                         conv_shape(5, 9, 6, 6, 8, 3, 3, 1, 1, 1, 1)};
    for (int j = 0; j < 3 * 3; j++)
        bwd_act_case(COL(state), &wino[j % 3], i++);
    for (int r = 0; r < TRIALS; r++) {
        struct rt_conv_shape s = conv_random();
        bwd_act_case(COL(state), &s, i++);
    }
}

/* ---- bias ---------------------------------------------------------------------------- */

static void bias_dims(int i, int *n, int *c, int *hw)
{
    static const int fixed[][3] = {{0, 3, 5}, {4, 0, 5}, {3, 4, 0}, {64, 120, 1}, {3, 6, 784}};
    if (i < 5) {
        *n = fixed[i][0], *c = fixed[i][1], *hw = fixed[i][2];
        return;
    }
    *n = irand(1, 9), *c = irand(1, 17), *hw = irand(1, 3) == 1 ? 1 : irand(1, 300);
}

static void test_bias_add(void **state)
{
    for (int i = 0; i < 5 + TRIALS; i++) {
        int n, c, hw;
        bias_dims(i, &n, &c, &hw);
        struct trial t;
        trial_begin(&t, COL(state), "bias_add", 1e-6, 1e-3);
        trial_shape(&t, "n %d c %d hw %d", n, c, hw);
        struct arg *b = arg_rand(&t, "b", IN, (size_t)c, -1, 1);
        struct arg *y = arg_rand(&t, "y", INOUT, (size_t)n * c * hw, -1, 1);
        RUN(&t, rt_op_bias_add(D, n, c, hw, V(b), V(y)));
        trial_check(&t);
    }
}

static void test_bias_grad(void **state)
{
    for (int i = 0; i < 5 + TRIALS; i++) {
        int n, c, hw;
        bias_dims(i, &n, &c, &hw);
        struct trial t;
        trial_begin(&t, COL(state), "bias_grad", 1e-5, 1.0);
        trial_shape(&t, "n %d c %d hw %d", n, c, hw);
        struct arg *dy = arg_rand(&t, "dy", IN, (size_t)n * c * hw, -1, 1);
        struct arg *db = arg_out(&t, "db", (size_t)c);
        /* a sum of n*hw values in [-1, 1]: its rounding grows with the
         * partial sums, about sqrt(n*hw), not with the (cancelled) result */
        db->floor_ = n * hw > 4 ? sqrt((double)n * hw) / 2 : 1.0;
        RUN(&t, rt_op_bias_grad(D, n, c, hw, V(dy), V(db)));
        trial_check(&t);
    }
}

/* bias_act_fwd: y = act(y + b), in place. */
static void test_bias_act_fwd(void **state)
{
    for (int i = 0; i < 5 + TRIALS; i++) {
        int n, c, hw;
        bias_dims(i, &n, &c, &hw);
        const enum rt_act k = (enum rt_act)(i % 5);
        struct trial t;
        trial_begin(&t, COL(state), "bias_act_fwd", k >= RT_ACT_SIGMOID ? 2e-6 : 1e-6, 1e-3);
        trial_shape(&t, "%s n %d c %d hw %d", act_names[k], n, c, hw);
        struct arg *b = arg_rand(&t, "b", IN, (size_t)c, -1, 1);
        struct arg *y = arg_rand(&t, "y", INOUT, (size_t)n * c * hw, -3, 3);
        RUN(&t, rt_op_bias_act_fwd(D, k, 0.1f, n, c, hw, V(b), V(y)));
        trial_check(&t);
    }
}

/* The device's dense_fwd has the bits of its own gemm then bias_act_fwd
 * (backend.h: "the same values"), whichever way it fuses them. */
static void dense_same_as_unfused(struct trial *t, int n, int in, int units, enum rt_act k,
                                  struct arg *x, struct arg *w, struct arg *b, struct arg *y)
{
    rt_dev *d = t->col->d;
    const size_t yn = (size_t)n * units;
    rt_buf *y2 = rt_buf_new(d, (yn ? yn : 1) * sizeof(float));
    assert_non_null(y2);
    assert_int_equal(rt_op_gemm(d, 0, 1, n, units, in, 1.0f, view(x, 1), in, view(w, 1), in,
                                0.0f, rt_buf_view(y2), units),
                     0);
    assert_int_equal(rt_op_bias_act_fwd(d, k, 0.1f, n, units, 1, view(b, 1), rt_buf_view(y2)), 0);
    expect_same_bits(d, view(y, 1), rt_buf_view(y2), yn, t->col->label, t, "y",
                     "gemm then bias_act_fwd");
    rt_buf_destroy(&y2);
}

/* dense_fwd: y = act(x w^T + b), against the reference and against the
 * device's own gemm then bias_act_fwd; the lenet layers' shapes, no inputs
 * (y = act(b)), no images, and random ones. */
static void test_dense_fwd(void **state)
{
    static const int fixed[][3] = {{64, 400, 120}, {64, 84, 10}, {5, 0, 7}, {0, 9, 4}};
    for (int i = 0; i < 5 + 2 * TRIALS; i++) {
        const int n = i < 4 ? fixed[i][0] : irand(1, 70);
        const int in = i < 4 ? fixed[i][1] : irand(1, 90);
        const int units = i < 4 ? fixed[i][2] : irand(1, 70);
        const enum rt_act k = (enum rt_act)(i % 5);
        struct trial t;
        trial_begin(&t, COL(state), "dense_fwd", 1e-4, in > 1 ? sqrt((double)in) / 2 : 1.0);
        trial_shape(&t, "%s n %d in %d units %d", act_names[k], n, in, units);
        struct arg *x = arg_rand(&t, "x", IN, (size_t)n * in, -1, 1);
        struct arg *w = arg_rand(&t, "w", IN, (size_t)units * in, -1, 1);
        struct arg *b = arg_rand(&t, "b", IN, (size_t)units, -1, 1);
        struct arg *y = arg_out(&t, "y", (size_t)n * units);
        RUN(&t, rt_op_dense_fwd(D, n, in, units, V(x), V(w), V(b), k, 0.1f, V(y)));
        if (t.rc[1] == RT_OK)
            dense_same_as_unfused(&t, n, in, units, k, x, w, b, y);
        trial_check(&t);
    }
}

/* The device's dense_bwd has the bits of its own gemm (1, 0) and gemm
 * (0, 0) (backend.h: "the same values"), whichever way it runs them; the
 * reference too (all threads: the cpu backend runs the two side by side). */
static void dense_bwd_same_as_gemms(struct trial *t, int n, int in, int units, struct arg *g,
                                    struct arg *x, struct arg *w, struct arg *dw, struct arg *dx)
{
    const struct {
        struct arg *out;
        int ta, m, k;
        struct arg *b;
    } gemm[2] = {{dw, 1, units, n, x}, {dx, 0, n, units, w}};
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < 2; i++) {
            if (!gemm[i].out)
                continue;
            rt_dev *d = t->d[side];
            const size_t cn = (size_t)gemm[i].m * in;
            rt_buf *c = rt_buf_new(d, (cn ? cn : 1) * sizeof(float));
            assert_non_null(c);
            assert_int_equal(rt_op_gemm(d, gemm[i].ta, 0, gemm[i].m, in, gemm[i].k, 1.0f,
                                        view(g, side), units, view(gemm[i].b, side), in, 0.0f,
                                        rt_buf_view(c), in),
                             0);
            expect_same_bits(d, view(gemm[i].out, side), rt_buf_view(c), cn,
                             side ? t->col->label : "reference", t, gemm[i].out->name,
                             gemm[i].ta ? "gemm (1, 0)" : "gemm (0, 0)");
            rt_buf_destroy(&c);
        }
}

/* dense_bwd: dw = g^T x and dx = g w, both or either, against the reference
 * and against the device's own two GEMMs; lenet's layers (64 x 400 -> 120,
 * 64 x 120 -> 84), no images (dw = 0), no units (dx = 0), random shapes. */
static void test_dense_bwd(void **state)
{
    static const int fixed[][3] = {{64, 400, 120}, {64, 120, 84}, {0, 9, 4}, {5, 7, 0}};
    for (int i = 0; i < 6 + 2 * TRIALS; i++) {
        const int n = i < 4 ? fixed[i][0] : irand(1, 70);
        const int in = i < 4 ? fixed[i][1] : irand(1, 90);
        const int units = i < 4 ? fixed[i][2] : irand(1, 70);
        /* the fixed shapes both (no images: dw zeros; no units: dx
         * zeros), random ones both or either */
        const bool want_dw = i < 4 || i % 3 != 2, want_dx = i < 4 || i % 3 != 1;
        const int k = n > units ? n : units;
        struct trial t;
        trial_begin(&t, COL(state), "dense_bwd", 1e-4, k > 1 ? sqrt((double)k) / 2 : 1.0);
        trial_shape(&t, "n %d in %d units %d%s%s", n, in, units, want_dw ? " dw" : "",
                    want_dx ? " dx" : "");
        struct arg *g = arg_rand(&t, "g", IN, (size_t)n * units, -1, 1);
        struct arg *x = arg_rand(&t, "x", IN, (size_t)n * in, -1, 1);
        struct arg *w = arg_rand(&t, "w", IN, (size_t)units * in, -1, 1);
        struct arg *dw = want_dw ? arg_out(&t, "dw", (size_t)units * in) : NULL;
        struct arg *dx = want_dx ? arg_out(&t, "dx", (size_t)n * in) : NULL;
        RUN(&t, rt_op_dense_bwd(D, n, in, units, V(g), V(x), V(w), dw ? V(dw) : (rt_view){0},
                                dx ? V(dx) : (rt_view){0}));
        if (t.rc[1] == RT_OK)
            dense_bwd_same_as_gemms(&t, n, in, units, g, x, w, dw, dx);
        trial_check(&t);
    }
}

/* act_bias_bwd: dx from y alone, db = sum dx; also with dx aliasing dy. y is
 * an activation's output: relu's has zeros, sigmoid's lies in (0, 1). */
static void test_act_bias_bwd(void **state)
{
    for (int i = 0; i < 5 + TRIALS; i++) {
        int n, c, hw;
        bias_dims(i, &n, &c, &hw);
        const enum rt_act k = (enum rt_act)(i % 5);
        const bool alias = i % 3 == 1;
        const size_t cnt = (size_t)n * c * hw;
        struct trial t;
        trial_begin(&t, COL(state), "act_bias_bwd", 1e-5, 1.0);
        trial_shape(&t, "%s n %d c %d hw %d%s", act_names[k], n, c, hw, alias ? " in place" : "");
        struct arg *y = k == RT_ACT_RELU ? arg_add(&t, "y", IN, cnt, fill_ties, NULL)
                        : k == RT_ACT_SIGMOID ? arg_rand(&t, "y", IN, cnt, 0, 1)
                                              : arg_rand(&t, "y", IN, cnt, -1, 1);
        struct arg *dy = arg_rand(&t, "dy", alias ? INOUT : IN, cnt, -1, 1);
        struct arg *dx = alias ? dy : arg_out(&t, "dx", cnt);
        struct arg *db = arg_out(&t, "db", (size_t)c);
        RUN(&t, rt_op_act_bias_bwd(D, k, 0.1f, n, c, hw, V(y), V(dy), V(dx), V(db)));
        trial_check(&t);
    }
}

/* ---- pooling ------------------------------------------------------------------------ */

static struct rt_pool_shape pool_shape(enum rt_pool_mode mode, int n, int c, int h, int w, int r,
                                       int s, int sh, int sw, int ph, int pw)
{
    struct rt_pool_shape p = {mode, n, c, h, w, r, s, sh, sw, ph, pw, 0, 0};
    p.oh = (h + 2 * ph - r) / sh + 1;
    p.ow = (w + 2 * pw - s) / sw + 1;
    return p;
}

static struct rt_pool_shape pool_pick(int i)
{
    enum rt_pool_mode mode = i % 2 ? RT_POOL_AVG : RT_POOL_MAX;
    switch (i / 2) {
    case 0: return pool_shape(mode, 3, 6, 28, 28, 2, 2, 2, 2, 0, 0); /* lenet */
    case 1: return pool_shape(mode, 2, 3, 7, 9, 3, 3, 2, 2, 1, 1);   /* overlapping, padded */
    case 2: return pool_shape(mode, 0, 3, 6, 6, 2, 2, 2, 2, 0, 0);   /* no images */
    case 3: return pool_shape(mode, 2, 2, 8, 10, 3, 3, 3, 3, 0, 0);  /* tiles, leftovers */
    /* 2x2 windows tiling narrow planes: the vector loads that run past a
     * row's end (opencl's maxpool2) and the buffer's last rows */
    case 4: return pool_shape(mode, 3, 5, 2, 2, 2, 2, 2, 2, 0, 0);   /* 1 window a row */
    case 5: return pool_shape(mode, 3, 16, 10, 10, 2, 2, 2, 2, 0, 0); /* lenet's second */
    case 6: return pool_shape(mode, 2, 3, 6, 18, 2, 2, 2, 2, 0, 0);  /* 9 windows a row */
    default:
        for (;;) {
            int h = irand(1, 12), w = irand(1, 12), r = irand(1, 4), s = irand(1, 4);
            int ph = irand(0, r - 1), pw = irand(0, s - 1);
            if (h + 2 * ph < r || w + 2 * pw < s)
                continue;
            return pool_shape(mode, irand(1, 4), irand(1, 4), h, w, r, s, irand(1, 3),
                              irand(1, 3), ph, pw);
        }
    }
}

static void pool_case(struct column *col, bool bwd, const struct rt_pool_shape *s)
{
    struct trial t;
    trial_begin(&t, col, bwd ? "pool_bwd" : "pool_fwd", s->mode == RT_POOL_MAX ? 0.0 : 1e-6, 1e-3);
    trial_shape(&t, "%s n %d c %d %dx%d window %dx%d stride %d,%d pad %d,%d",
                s->mode == RT_POOL_MAX ? "max" : "avg", s->n, s->c, s->h, s->w, s->r, s->s,
                s->stride_h, s->stride_w, s->pad_h, s->pad_w);
    size_t xn = (size_t)s->n * s->c * s->h * s->w, yn = (size_t)s->n * s->c * s->oh * s->ow;
    struct arg *x = arg_add(&t, "x", IN, xn, fill_ties, NULL); /* ties: the tie rule */
    if (!bwd) {
        struct arg *y = arg_out(&t, "y", yn);
        RUN(&t, rt_op_pool_fwd(D, s, V(x), V(y)));
        trial_check(&t);
        return;
    }
    /* y as the forward computes it, on the reference */
    struct arg *y = arg_out(&t, "y", yn);
    struct arg *dy = arg_rand(&t, "dy", IN, yn, -1, 1);
    struct arg *dx = arg_out(&t, "dx", xn);
    if (yn) {
        float *yh = malloc(yn * sizeof *yh);
        assert_non_null(yh);
        assert_int_equal(rt_op_pool_fwd(ref, s, view(x, 0), view(y, 0)), 0);
        assert_int_equal(rt_download(ref, yh, view(y, 0), yn * 4), 0);
        memcpy(y->init, yh, yn * 4);
        assert_int_equal(rt_upload(col->d, view(y, 1), yh, yn * 4), 0);
        free(yh);
        y->role = IN;
    }
    RUN(&t, rt_op_pool_bwd(D, s, V(x), V(y), V(dy), V(dx)));
    trial_check(&t);
}

static void test_pool_fwd(void **state)
{
    for (int i = 0; i < 14 + TRIALS; i++) {
        struct rt_pool_shape s = pool_pick(i);
        pool_case(COL(state), false, &s);
    }
}

static void test_pool_bwd(void **state)
{
    for (int i = 0; i < 14 + TRIALS; i++) {
        struct rt_pool_shape s = pool_pick(i);
        pool_case(COL(state), true, &s);
    }
}

/* ---- activations ----------------------------------------------------------------------- */

static size_t elem_count(int i)
{
    static const size_t fixed[] = {0, 1, 7, 1023, 1025, 70001};
    return i < 6 ? fixed[i] : (size_t)irand(1, 5000);
}

/* Exact where the maths is one IEEE operation; a few ulps for exp/tanh. */
static double act_tol(enum rt_act k) { return k == RT_ACT_SIGMOID || k == RT_ACT_TANH ? 2e-6 : 0; }

static void test_act_fwd(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        for (int k = RT_ACT_IDENTITY; k <= RT_ACT_TANH; k++) {
            size_t n = elem_count(i);
            bool alias = i % 3 == 2; /* y may alias x */
            struct trial t;
            trial_begin(&t, COL(state), "act_fwd", act_tol(k), 1e-3);
            trial_shape(&t, "%s n %zu%s", act_names[k], n, alias ? " in place" : "");
            struct arg *x = arg_rand(&t, "x", alias ? INOUT : IN, n, -6, 6);
            struct arg *y = alias ? x : arg_out(&t, "y", n);
            RUN(&t, rt_op_act_fwd(D, (enum rt_act)k, 0.1f, n, V(x), V(y)));
            trial_check(&t);
        }
    }
}

/* y = act(a + b), also in place on a and on b (a [shortcut]'s forward) */
static void test_add_act_fwd(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        for (int k = RT_ACT_IDENTITY; k <= RT_ACT_TANH; k++) {
            size_t n = elem_count(i);
            const int alias = i % 3; /* 0: y apart, 1: y is a, 2: y is b */
            struct trial t;
            trial_begin(&t, COL(state), "add_act_fwd", act_tol(k), 1e-3);
            trial_shape(&t, "%s n %zu%s", act_names[k], n,
                        alias == 1 ? " on a" : alias == 2 ? " on b" : "");
            struct arg *a = arg_rand(&t, "a", alias == 1 ? INOUT : IN, n, -3, 3);
            struct arg *b = arg_rand(&t, "b", alias == 2 ? INOUT : IN, n, -3, 3);
            struct arg *y = alias == 1 ? a : alias == 2 ? b : arg_out(&t, "y", n);
            RUN(&t, rt_op_add_act_fwd(D, (enum rt_act)k, 0.1f, n, V(a), V(b), V(y)));
            trial_check(&t);
        }
    }
}

static void test_act_bwd(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        for (int k = RT_ACT_IDENTITY; k <= RT_ACT_TANH; k++) {
            size_t n = elem_count(i);
            struct trial t;
            trial_begin(&t, COL(state), "act_bwd", k == RT_ACT_IDENTITY ? 0 : 1e-6, 1e-3);
            trial_shape(&t, "%s n %zu", act_names[k], n);
            struct arg *x = arg_rand(&t, "x", IN, n, -3, 3);
            struct arg *y = arg_rand(&t, "y", IN, n, -1, 1);
            struct arg *dy = arg_rand(&t, "dy", IN, n, -1, 1);
            struct arg *dx = arg_out(&t, "dx", n);
            RUN(&t, rt_op_act_bwd(D, (enum rt_act)k, 0.1f, n, V(x), V(y), V(dy), V(dx)));
            trial_check(&t);
        }
    }
}

/* ---- softmax + cross-entropy -------------------------------------------------------------- */

static void softmax_dims(int i, int *n, int *c)
{
    static const int fixed[][2] = {{0, 10}, {1, 1}, {64, 10}, {3, 1000}};
    if (i < 4) {
        *n = fixed[i][0], *c = fixed[i][1];
        return;
    }
    *n = irand(1, 70), *c = irand(1, 40);
}

static struct arg *labels_arg(struct trial *t, int n, int c, bool bad)
{
    struct arg *lab = arg_add(t, "labels", IN, (size_t)n, fill_labels, &c);
    if (bad && n > 0) { /* one label out of range, in the middle */
        int32_t v = irand(0, 1) ? c : -1;
        size_t at = (size_t)n / 2;
        memcpy(&lab->init[at], &v, sizeof v);
        for (int s = 0; s < 2; s++)
            assert_int_equal(rt_upload(t->d[s], rt_view_at(view(lab, s), at), &v, 4), 0);
    }
    return lab;
}

static void test_softmax_xent_fwd(void **state)
{
    for (int i = 0; i < 4 + TRIALS; i++) {
        int n, c;
        softmax_dims(i, &n, &c);
        bool bad = i == 6; /* a label out of range: both fail alike */
        struct trial t;
        trial_begin(&t, COL(state), "softmax_xent_fwd", 1e-5, 1e-7);
        trial_shape(&t, "n %d c %d%s", n, c, bad ? " bad label" : "");
        struct arg *logits = arg_rand(&t, "logits", IN, (size_t)n * c, -10, 10);
        struct arg *lab = labels_arg(&t, n, c, bad);
        struct arg *probs = arg_out(&t, "probs", (size_t)n * c);
        struct arg *losses = arg_out(&t, "losses", (size_t)n);
        losses->floor_ = 1e-3;
        RUN(&t, rt_op_softmax_xent_fwd(D, n, c, V(logits), V(lab), V(probs), V(losses)));
        if (bad && t.rc[1] == RT_OK) /* reported at the next sync (backend.h) */
            t.rc[1] = rt_sync(t.d[1]);
        if (bad)
            assert_int_equal(t.rc[1], RT_ERR_ARG);
        trial_check(&t);
    }
}

static void test_softmax_xent_bwd(void **state)
{
    for (int i = 0; i < 4 + TRIALS; i++) {
        int n, c;
        softmax_dims(i, &n, &c);
        bool bad = i == 6;
        struct trial t;
        trial_begin(&t, COL(state), "softmax_xent_bwd", 1e-6, 1e-3);
        trial_shape(&t, "n %d c %d%s", n, c, bad ? " bad label" : "");
        struct arg *probs = arg_rand(&t, "probs", IN, (size_t)n * c, 0, 1);
        struct arg *lab = labels_arg(&t, n, c, bad);
        struct arg *dl = arg_out(&t, "dlogits", (size_t)n * c);
        float scale = 1.0f / (float)(n ? n : 1);
        RUN(&t, rt_op_softmax_xent_bwd(D, n, c, V(probs), V(lab), scale, V(dl)));
        if (bad && t.rc[1] == RT_OK) /* reported at the next sync (backend.h) */
            t.rc[1] = rt_sync(t.d[1]);
        if (bad)
            assert_int_equal(t.rc[1], RT_ERR_ARG);
        trial_check(&t);
    }
}

/* A training step's softmax pair, forward then backward, queued with no
 * wait between (a device backend may report a bad label late): a bad
 * label seen by either is reported by the next sync, and the next good
 * pair is clean again. */
static void test_softmax_late_labels(void **state)
{
    rt_dev *d = COL(state)->d;
    enum { N = 64, C = 10 };
    int32_t good[N], bad[N];
    float logits[N * C];
    for (int i = 0; i < N; i++)
        good[i] = bad[i] = i % C;
    bad[N / 2] = C;
    for (int i = 0; i < N * C; i++)
        logits[i] = frand(-3, 3);
    rt_buf *b = rt_buf_new(d, (3 * N * C + 3 * N) * sizeof(float));
    assert_non_null(b);
    rt_view lg = rt_buf_view(b), probs = rt_view_at(lg, N * C), dl = rt_view_at(probs, N * C);
    rt_view losses = rt_view_at(dl, N * C), lgood = rt_view_at(losses, N);
    rt_view lbad = rt_view_at(lgood, N);
    assert_int_equal(rt_upload(d, lg, logits, sizeof logits), RT_OK);
    assert_int_equal(rt_upload(d, lgood, good, sizeof good), RT_OK);
    assert_int_equal(rt_upload(d, lbad, bad, sizeof bad), RT_OK);
    for (int which = 0; which < 3; which++) { /* the bad labels: fwd's, bwd's, none */
        int rc = rt_op_softmax_xent_fwd(d, N, C, lg, which == 0 ? lbad : lgood, probs, losses);
        if (rc == RT_OK)
            rc = rt_op_softmax_xent_bwd(d, N, C, probs, which == 1 ? lbad : lgood, 0.5f, dl);
        if (rc == RT_OK)
            rc = rt_sync(d);
        if (rc != (which == 2 ? RT_OK : RT_ERR_ARG))
            fail_msg("the bad label in the %s: the pair and a sync gave %d",
                     which == 0 ? "forward" : which == 1 ? "backward" : "neither", rc);
    }
    rt_buf_destroy(&b);
}

/* ---- batch norm ---------------------------------------------------------------------------- */

/* Shapes, and the activation a [conv] fuses into batch norm: each of them
 * in turn (relu on the resnet8-like fixed shape). */
static struct rt_bn_shape bn_pick(int i)
{
    static const int fixed[][3] = {{1, 1, 1}, {64, 120, 1}, {3, 6, 784}, {2, 3, 300}};
    struct rt_bn_shape s = {0, 0, 0, 1e-5f, 0.1f, (enum rt_act)((i + 4) % 5), 0.1f};
    if (i < 4) {
        s.n = fixed[i][0], s.c = fixed[i][1], s.hw = fixed[i][2];
    } else {
        s.n = irand(1, 6), s.c = irand(1, 7), s.hw = irand(1, 60);
        s.eps = irand(0, 1) ? 1e-5f : 1e-3f;
        s.momentum = frand(0.01f, 0.5f);
    }
    return s;
}

static void test_bn_fwd_train(void **state)
{
    for (int i = 0; i < 4 + TRIALS; i++) {
        struct rt_bn_shape s = bn_pick(i);
        size_t total = (size_t)s.n * s.c * s.hw, c = (size_t)s.c;
        struct trial t;
        trial_begin(&t, COL(state), "bn_fwd_train", 1e-4, 1e-2);
        trial_shape(&t, "n %d c %d hw %d eps %g momentum %g, %s", s.n, s.c, s.hw, s.eps,
                    s.momentum, act_names[s.act]);
        /* an offset mean: a one-pass variance would lose digits */
        struct arg *x = arg_rand(&t, "x", IN, total, 2, 4);
        struct arg *g = arg_rand(&t, "gamma", IN, c, 0.5, 1.5);
        struct arg *b = arg_rand(&t, "beta", IN, c, -1, 1);
        struct arg *y = arg_out(&t, "y", total);
        struct arg *sm = arg_out(&t, "save_mean", c);
        struct arg *si = arg_out(&t, "save_invstd", c);
        struct arg *rm = arg_rand(&t, "run_mean", INOUT, c, -1, 1);
        struct arg *rv = arg_rand(&t, "run_var", INOUT, c, 0.5, 2);
        si->floor_ = 1.0;
        RUN(&t, rt_op_bn_fwd_train(D, &s, V(x), V(g), V(b), V(y), V(sm), V(si), V(rm), V(rv)));
        trial_check(&t);
    }
}

static void test_bn_fwd_infer(void **state)
{
    for (int i = 0; i < 4 + TRIALS; i++) {
        struct rt_bn_shape s = bn_pick(i);
        if (i == 0)
            s.n = 0; /* no images */
        size_t total = (size_t)s.n * s.c * s.hw, c = (size_t)s.c;
        struct trial t;
        trial_begin(&t, COL(state), "bn_fwd_infer", 1e-5, 1e-2);
        trial_shape(&t, "n %d c %d hw %d, %s", s.n, s.c, s.hw, act_names[s.act]);
        struct arg *x = arg_rand(&t, "x", IN, total, -2, 2);
        struct arg *g = arg_rand(&t, "gamma", IN, c, 0.5, 1.5);
        struct arg *b = arg_rand(&t, "beta", IN, c, -1, 1);
        struct arg *rm = arg_rand(&t, "run_mean", IN, c, -1, 1);
        struct arg *rv = arg_rand(&t, "run_var", IN, c, 0.5, 2);
        struct arg *y = arg_out(&t, "y", total);
        RUN(&t, rt_op_bn_fwd_infer(D, &s, V(x), V(g), V(b), V(rm), V(rv), V(y)));
        trial_check(&t);
    }
}

static void test_bn_bwd(void **state)
{
    for (int i = 0; i < 4 + TRIALS; i++) {
        struct rt_bn_shape s = bn_pick(i);
        size_t total = (size_t)s.n * s.c * s.hw, c = (size_t)s.c;
        struct trial t;
        const bool alias = i % 3 == 1; /* dx may alias dy */
        trial_begin(&t, COL(state), "bn_bwd", 2e-4, 1e-2);
        trial_shape(&t, "n %d c %d hw %d, %s%s", s.n, s.c, s.hw, act_names[s.act],
                    alias ? ", in place" : "");
        struct arg *x = arg_rand(&t, "x", IN, total, -2, 2);
        /* the activation's output: relu's has zeros, sigmoid's lies in (0, 1) */
        struct arg *y = s.act == RT_ACT_RELU      ? arg_add(&t, "y", IN, total, fill_ties, NULL)
                        : s.act == RT_ACT_SIGMOID ? arg_rand(&t, "y", IN, total, 0, 1)
                                                  : arg_rand(&t, "y", IN, total, -1, 1);
        struct arg *dy = arg_rand(&t, "dy", alias ? INOUT : IN, total, -1, 1);
        struct arg *g = arg_rand(&t, "gamma", IN, c, 0.5, 1.5);
        struct arg *sm = arg_rand(&t, "save_mean", IN, c, -0.2f, 0.2f);
        struct arg *si = arg_rand(&t, "save_invstd", IN, c, 0.5, 1.5);
        struct arg *dx = alias ? dy : arg_out(&t, "dx", total);
        struct arg *dg = arg_out(&t, "dgamma", c);
        struct arg *db = arg_out(&t, "dbeta", c);
        dg->floor_ = db->floor_ = 1.0;
        RUN(&t, rt_op_bn_bwd(D, &s, V(x), V(y), V(dy), V(g), V(sm), V(si), V(dx), V(dg), V(db)));
        trial_check(&t);
    }
}

/* ---- dropout and elementwise -------------------------------------------------------------- */

static void test_dropout_fwd(void **state)
{
    static const float rates[] = {0.0f, 0.3f, 0.5f, 0.9f};
    for (int i = 0; i < 6 + TRIALS; i++) {
        size_t n = elem_count(i);
        float rate = rates[i % 4];
        uint64_t seed = rt_rng_next(&rng);
        struct trial t;
        trial_begin(&t, COL(state), "dropout_fwd", 0.0, 1e-3); /* the same mask, exactly */
        trial_shape(&t, "n %zu rate %g seed %llu", n, rate, (unsigned long long)seed);
        struct arg *x = arg_rand(&t, "x", IN, n, -1, 1);
        struct arg *y = arg_out(&t, "y", n);
        struct arg *m = arg_out(&t, "mask", n);
        RUN(&t, rt_op_dropout_fwd(D, n, rate, seed, V(x), V(y), V(m)));
        trial_check(&t);
    }
}

static void test_mul(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        size_t n = elem_count(i);
        int alias = i % 3; /* 0: y apart, 1: y is a, 2: y is b */
        struct trial t;
        trial_begin(&t, COL(state), "mul", 0.0, 1e-3);
        trial_shape(&t, "n %zu%s", n, alias == 1 ? " y=a" : alias == 2 ? " y=b" : "");
        struct arg *a = arg_rand(&t, "a", alias == 1 ? INOUT : IN, n, -2, 2);
        struct arg *b = arg_rand(&t, "b", alias == 2 ? INOUT : IN, n, -2, 2);
        struct arg *y = alias == 1 ? a : alias == 2 ? b : arg_out(&t, "y", n);
        RUN(&t, rt_op_mul(D, n, V(a), V(b), V(y)));
        trial_check(&t);
    }
}

static void test_axpy(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        size_t n = elem_count(i);
        float alpha = frand(-2, 2);
        struct trial t;
        trial_begin(&t, COL(state), "axpy", 1e-6, 1e-3);
        trial_shape(&t, "n %zu alpha %g", n, alpha);
        struct arg *x = arg_rand(&t, "x", IN, n, -1, 1);
        struct arg *y = arg_rand(&t, "y", INOUT, n, -1, 1);
        RUN(&t, rt_op_axpy(D, n, alpha, V(x), V(y)));
        trial_check(&t);
    }
}

static void test_scale(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        size_t n = elem_count(i);
        float alpha = i == 7 ? 0.0f : frand(-2, 2);
        struct trial t;
        trial_begin(&t, COL(state), "scale", 0.0, 1e-3);
        trial_shape(&t, "n %zu alpha %g", n, alpha);
        struct arg *x = arg_rand(&t, "x", INOUT, n, -1, 1);
        RUN(&t, rt_op_scale(D, n, alpha, V(x)));
        trial_check(&t);
    }
}

static void test_fill(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        size_t n = elem_count(i);
        float value = frand(-5, 5);
        struct trial t;
        trial_begin(&t, COL(state), "fill", 0.0, 1e-3);
        trial_shape(&t, "n %zu value %g", n, value);
        struct arg *x = arg_out(&t, "x", n);
        RUN(&t, rt_op_fill(D, n, value, V(x)));
        trial_check(&t);
    }
}

static void test_sumsq(void **state)
{
    struct column *col = COL(state);
    for (int i = 0; i < 7 + TRIALS; i++) {
        size_t n = i == 6 ? 3000001 : elem_count(i);
        struct trial t;
        trial_begin(&t, col, "sumsq", 0.0, 1e-3);
        trial_shape(&t, "n %zu", n);
        struct arg *x = arg_rand(&t, "x", IN, n, -1, 1);
        double out[2] = {-1, -1};
        RUN(&t, rt_op_sumsq(D, n, V(x), &out[S]));
        /* double sums on the cpu; a device without doubles sums floats */
        double err = fabs(out[1] - out[0]) / (out[0] > 1e-3 ? out[0] : 1e-3);
        if (!(err <= 1e-5))
            fail_msg("%s: sumsq [%s]: %.17g, reference %.17g (error %.3g)", col->label, t.shape,
                     out[1], out[0], err);
        trial_check(&t);
    }
}

/* ---- optimiser steps --------------------------------------------------------------------- */

static void test_sgd_step(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        size_t n = elem_count(i);
        struct rt_sgd_params p = {frand(0.001f, 0.1f), i % 3 == 0 ? 0.0f : frand(0.5f, 0.99f),
                                  irand(0, 1) ? 0.0f : frand(0, 0.01f), i % 3 == 2};
        struct trial t;
        trial_begin(&t, COL(state), "sgd_step", 1e-6, 1e-2);
        trial_shape(&t, "n %zu lr %g momentum %g wd %g%s", n, p.lr, p.momentum, p.weight_decay,
                    p.nesterov ? " nesterov" : "");
        struct arg *w = arg_rand(&t, "w", INOUT, n, -1, 1);
        struct arg *g = arg_rand(&t, "g", IN, n, -1, 1);
        if (p.momentum == 0.0f) { /* no velocity buffer at all */
            rt_view none = {NULL, 0};
            RUN(&t, rt_op_sgd_step(D, n, &p, V(w), V(g), none));
        } else {
            struct arg *v = arg_rand(&t, "v", INOUT, n, -0.1f, 0.1f);
            RUN(&t, rt_op_sgd_step(D, n, &p, V(w), V(g), V(v)));
        }
        trial_check(&t);
    }
}

static void test_adam_step(void **state)
{
    for (int i = 0; i < 6 + TRIALS; i++) {
        size_t n = elem_count(i);
        struct rt_optim_config c;
        rt_optim_config_defaults(&c);
        c.kind = i % 3 == 1 ? RT_OPT_ADAMW : i % 3 == 2 ? RT_OPT_NADAM : RT_OPT_ADAM;
        const float lr = frand(1e-4f, 1e-2f);
        c.weight_decay = irand(0, 1) ? 0.0f : 0.01f;
        const long step = irand(0, 1) ? 1 : irand(2, 2000);
        struct rt_adam_scalars p;
        rt_optim_adam_scalars(&c, lr, step, &p);
        struct trial t;
        trial_begin(&t, COL(state), "adam_step", 1e-5, 1e-2);
        trial_shape(&t, "n %zu lr %g wd %g step %ld %s", n, lr, c.weight_decay, step,
                    rt_optim_kind_name(c.kind));
        struct arg *w = arg_rand(&t, "w", INOUT, n, -1, 1);
        struct arg *g = arg_rand(&t, "g", IN, n, -1, 1);
        struct arg *m = arg_rand(&t, "m", INOUT, n, -0.1f, 0.1f);
        struct arg *v = arg_rand(&t, "v", INOUT, n, 0, 0.01f);
        RUN(&t, rt_op_adam_step(D, n, &p, V(w), V(g), V(m), V(v)));
        trial_check(&t);
    }
}

/* ---- columns ----------------------------------------------------------------------------- */

/* Every op has a test: ops.def declares them, so a missing one fails to link. */
#define RT_OP(name, params) static void test_##name(void **state);
#include "ops.def"
#undef RT_OP

/* cmocka gives a group's setup no state of its own: the column being run. */
static struct column *current;

static int column_setup(void **state)
{
    struct column *col = current;
    if (col->vector)
        setenv("RAGTAG_OPENCL_VECTOR", col->vector, 1);
    col->d = rt_dev_open(col->backend, col->device, col->threads);
    if (col->vector)
        unsetenv("RAGTAG_OPENCL_VECTOR");
    if (!col->d) {
        fprintf(stderr, "%s: cannot open: %s\n", col->label, rt_error_detail());
        return -1;
    }
    return 0;
}

static int column_teardown(void **state)
{
    struct column *col = current;
    rt_dev_close(&col->d);
    return 0;
}

/* Uploads: the caller may reuse its memory as soon as rt_upload returns
 * (opencl queues small ones from a copy of its own), many in a row (more
 * than that copy's room), large and small, and each lands where it was
 * sent; a download then sees them all. */
static void test_uploads(void **state)
{
    rt_dev *d = COL(state)->d;
    enum { SMALL = 250000, ROUNDS = 10, LARGE = 1 << 21 };
    float *host = malloc(LARGE * sizeof *host), *back = malloc(LARGE * sizeof *back);
    assert_true(host && back);
    rt_buf *b = rt_buf_new(d, (size_t)(ROUNDS * SMALL + LARGE) * sizeof(float));
    assert_non_null(b);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < SMALL; i++)
            host[i] = (float)(r * SMALL + i);
        assert_int_equal(rt_upload(d, rt_view_at(rt_buf_view(b), (size_t)r * SMALL), host,
                                   SMALL * sizeof *host), RT_OK);
        memset(host, 0xff, SMALL * sizeof *host); /* reused at once */
    }
    for (int i = 0; i < LARGE; i++)
        host[i] = -(float)i;
    assert_int_equal(rt_upload(d, rt_view_at(rt_buf_view(b), ROUNDS * SMALL), host,
                               LARGE * sizeof *host), RT_OK);
    for (int r = 0; r < ROUNDS; r++) {
        assert_int_equal(rt_download(d, back, rt_view_at(rt_buf_view(b), (size_t)r * SMALL),
                                     SMALL * sizeof *back), RT_OK);
        for (int i = 0; i < SMALL; i++)
            if (back[i] != (float)(r * SMALL + i))
                fail_msg("upload %d, float %d: %g, sent %d", r, i, back[i], r * SMALL + i);
    }
    assert_int_equal(rt_download(d, back, rt_view_at(rt_buf_view(b), ROUNDS * SMALL),
                                 LARGE * sizeof *back), RT_OK);
    assert_memory_equal(back, host, LARGE * sizeof *host);
    rt_buf_destroy(&b);
    free(host);
    free(back);
}

/* Started downloads (rt_download_start): dst gets src as the work queued
 * before the start left it, not as later work changes it, and is in by
 * the next wait, download or sync, or the next start. An upload queued
 * after a start, behind a long kernel, still lands whole after the wait
 * (opencl: the wait frees the upload stage only when nothing was staged
 * since the start). */
static void test_download_start(void **state)
{
    rt_dev *d = COL(state)->d;
    enum { N = 4096, G = 768 };
    float *host = malloc(N * sizeof *host), *back = malloc(3 * N * sizeof *back);
    rt_buf *b = rt_buf_new(d, 3 * N * sizeof(float));
    rt_buf *g = rt_buf_new(d, 3 * (size_t)G * G * sizeof(float));
    assert_true(host && back && b && g);
    rt_view v = rt_buf_view(b), v2 = rt_view_at(v, N), v3 = rt_view_at(v, 2 * N);
    for (int i = 0; i < N; i++)
        host[i] = (float)i + 0.5f;
    assert_int_equal(rt_upload(d, v, host, sizeof(float) * N), RT_OK);
    /* later work does not reach dst: each way of completing it */
    for (int way = 0; way < 4; way++) {
        memset(back, 0, N * sizeof *back);
        assert_int_equal(rt_download_start(d, back, v, sizeof(float) * N), RT_OK);
        assert_int_equal(rt_op_fill(d, N, -1.0f, v2), RT_OK);
        assert_int_equal(rt_op_axpy(d, N, 2.0f, v2, v), RT_OK); /* v -= 2 */
        float other = 0.0f;
        int rc = way == 0   ? rt_download_wait(d)
                 : way == 1 ? rt_download(d, &other, v2, sizeof other)
                 : way == 2 ? rt_sync(d)
                            : rt_download_start(d, &other, v2, sizeof other);
        assert_int_equal(rc, RT_OK);
        for (int i = 0; i < N; i++)
            if (back[i] != host[i])
                fail_msg("completed by way %d: float %d came back %g, was %g before the "
                         "later work", way, i, back[i], host[i]);
        assert_int_equal(rt_download_wait(d), RT_OK);
        if (way == 3)
            assert_true(other == -1.0f);
        for (int i = 0; i < N; i++)
            host[i] -= 2.0f;
    }
    /* an upload staged after a start, behind a long GEMM, then another */
    assert_int_equal(rt_sync(d), RT_OK);
    assert_int_equal(rt_download_start(d, back, v, sizeof(float) * N), RT_OK);
    rt_view ga = rt_buf_view(g), gb = rt_view_at(ga, (size_t)G * G);
    assert_int_equal(rt_op_fill(d, 2 * (size_t)G * G, 0.25f, ga), RT_OK);
    assert_int_equal(rt_op_gemm(d, 0, 0, G, G, G, 1.0f, ga, G, gb, G, 0.0f,
                                rt_view_at(gb, (size_t)G * G), G), RT_OK);
    for (int i = 0; i < N; i++)
        host[i] = 3.0f * (float)i;
    assert_int_equal(rt_upload(d, v2, host, sizeof(float) * N), RT_OK);
    assert_int_equal(rt_download_wait(d), RT_OK);
    for (int i = 0; i < N; i++)
        host[i] = -7.0f;
    assert_int_equal(rt_upload(d, v3, host, sizeof(float) * N), RT_OK);
    assert_int_equal(rt_download(d, back, v2, sizeof(float) * 2 * N), RT_OK);
    for (int i = 0; i < N; i++)
        if (back[i] != 3.0f * (float)i || back[N + i] != -7.0f)
            fail_msg("float %d: the upload after the start gave %g (sent %g), the one after "
                     "the wait %g (sent -7)", i, back[i], 3.0f * (float)i, back[N + i]);
    rt_buf_destroy(&g);
    rt_buf_destroy(&b);
    free(host);
    free(back);
}

static int run_column(struct column *col)
{
    struct CMUnitTest tests[RT_OPK_COUNT + 3] = {
#define RT_OP(name, params) cmocka_unit_test_prestate(test_##name, col),
#include "ops.def"
#undef RT_OP
        cmocka_unit_test_prestate(test_uploads, col),
        cmocka_unit_test_prestate(test_download_start, col),
        cmocka_unit_test_prestate(test_softmax_late_labels, col),
    };
    current = col;
    printf("=== %s against cpu:0 (all threads)\n", col->label);
    fflush(stdout);
    return cmocka_run_group_tests_name(col->label, tests, column_setup, column_teardown);
}

/* RAGTAG_TEST_BACKENDS=a,b: only those backends' columns (default: every
 * backend; "cpu" is the cpu backend on one thread). test_cuda_emu.sh runs
 * only its emulated cuda column: the others have their own run. */
static bool wanted(const char *backend)
{
    const char *list = getenv("RAGTAG_TEST_BACKENDS");
    if (!list || !*list)
        return true;
    size_t n = strlen(backend);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, backend, n))
            return true;
        p += len + (end != NULL);
    }
    return false;
}

int main(void)
{
    const char *seed_env = getenv("RAGTAG_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 20240601;
    rt_rng_seed(&rng, seed, 0xb0b5);
    printf("test_backend_ops: seed %llu (RAGTAG_TEST_SEED)\n", (unsigned long long)seed);

    ref = rt_dev_open("cpu", 0, 0);
    if (!ref) {
        fprintf(stderr, "cannot open the cpu reference: %s\n", rt_error_detail());
        return 1;
    }
    struct column cols[32];
    int ncols = 0, failed = 0;
    /* The cpu backend on one thread, against the reference's team. */
    if (wanted("cpu")) {
        cols[ncols++] = (struct column){.backend = "cpu", .device = 0, .threads = 1};
        snprintf(cols[0].label, sizeof cols[0].label, "cpu:0 (1 thread)");
    }
    for (int b = 0; b < rt_backend_count(); b++) {
        const char *name = rt_backend_name(b);
        if (!strcmp(name, "cpu") || !wanted(name))
            continue;
        int n = rt_backend_device_count(name);
        if (n <= 0) {
            printf("SKIPPED: backend %s: %s\n", name, n < 0 ? rt_error_detail() : "no device");
            continue;
        }
        /* opencl's direct convolutions come in vectors of 8 and of 16
         * floats; a device runs one of them, the tests check both */
        static const char *const vectors[] = {"8", "16"};
        const bool ocl = !strcmp(name, "opencl");
        for (int i = 0; i < n; i++)
            for (int v = 0; v < (ocl ? 2 : 1) && ncols < 32; v++) {
                struct column *c = &cols[ncols++];
                struct rt_device_info info;
                *c = (struct column){.backend = name, .device = i, .threads = 0,
                                     .vector = ocl ? vectors[v] : NULL};
                if (rt_backend_device_info(name, i, &info) < 0)
                    snprintf(info.name, sizeof info.name, "?");
                snprintf(c->label, sizeof c->label, "%s:%d (%.120s)%s%s%s", name, i, info.name,
                         ocl ? ", vectors of " : "", ocl ? vectors[v] : "", ocl ? " floats" : "");
            }
    }
    for (int i = 0; i < ncols; i++)
        failed += run_column(&cols[i]) != 0;
    rt_dev_close(&ref);
    return failed ? 1 : 0;
}
