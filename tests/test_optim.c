/* test_optim.c — learning-rate schedules against hand-computed values, and
 * every optimiser through rt_optim_step on the cpu backend against a
 * reference written here, in double precision, straight from the formulas
 * (PyTorch's SGD / Adam / AdamW / NAdam as specified in backend.h). */
#include "config.h"

#include "testutil.h"

#include "backend.h"
#include "optim.h"
#include "status.h"

#define N 37     /* odd, so no backend gets by on a vector-width assumption */
#define STEPS 3

static rt_dev *dev;

static int open_dev(void **state)
{
    (void)state;
    dev = rt_dev_open("cpu", 0, 1);
    if (!dev) {
        fprintf(stderr, "cannot open the cpu backend: %s\n", rt_error_detail());
        return -1;
    }
    return 0;
}

static int close_dev(void **state)
{
    (void)state;
    rt_dev_close(&dev);
    return 0;
}

/* ---- schedules ------------------------------------------------------------------- */

static struct rt_optim_config cfg_lr(float lr)
{
    struct rt_optim_config c;
    rt_optim_config_defaults(&c);
    c.lr = lr;
    return c;
}

#define ASSERT_LR(c, step, want) \
    assert_float_equal(rt_schedule_lr(&(c), (step)), (float)(want), 1e-7)

static void test_schedule_constant(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    ASSERT_LR(c, 0, 0.1);
    ASSERT_LR(c, 1, 0.1);
    ASSERT_LR(c, 100000, 0.1);
}

static void test_schedule_step(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    c.schedule = RT_SCHED_STEP;
    c.step_size = 10;
    c.gamma = 0.5f;
    ASSERT_LR(c, 0, 0.1);
    ASSERT_LR(c, 9, 0.1);
    ASSERT_LR(c, 10, 0.05);
    ASSERT_LR(c, 19, 0.05);
    ASSERT_LR(c, 25, 0.025);
    ASSERT_LR(c, 30, 0.0125);
}

static void test_schedule_cosine(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(1.0f);
    c.schedule = RT_SCHED_COSINE;
    c.total_steps = 100;
    c.min_lr = 0.1f;
    ASSERT_LR(c, 0, 1.0);
    ASSERT_LR(c, 50, 0.55);                          /* midpoint: halfway between */
    ASSERT_LR(c, 25, 0.1 + 0.45 * (1.0 + sqrt(0.5))); /* cos(pi/4) */
    ASSERT_LR(c, 75, 0.1 + 0.45 * (1.0 - sqrt(0.5)));
    ASSERT_LR(c, 100, 0.1);
    ASSERT_LR(c, 1000, 0.1); /* stays at the floor after the end */
}

static void test_schedule_warmup(void **state)
{
    (void)state;
    /* warm-up alone, then constant */
    struct rt_optim_config c = cfg_lr(0.1f);
    c.warmup_steps = 5;
    ASSERT_LR(c, 0, 0.02);
    ASSERT_LR(c, 1, 0.04);
    ASSERT_LR(c, 2, 0.06);
    ASSERT_LR(c, 4, 0.1);
    ASSERT_LR(c, 5, 0.1);
    ASSERT_LR(c, 500, 0.1);

    /* warm-up, then step decay counting from the end of warm-up */
    c.schedule = RT_SCHED_STEP;
    c.step_size = 10;
    c.gamma = 0.5f;
    ASSERT_LR(c, 4, 0.1);
    ASSERT_LR(c, 14, 0.1);
    ASSERT_LR(c, 15, 0.05);

    /* warm-up, then cosine over the rest of the run */
    struct rt_optim_config k = cfg_lr(1.0f);
    k.schedule = RT_SCHED_COSINE;
    k.warmup_steps = 10;
    k.total_steps = 110;
    k.min_lr = 0.0f;
    ASSERT_LR(k, 0, 0.1);
    ASSERT_LR(k, 9, 1.0);
    ASSERT_LR(k, 10, 1.0);
    ASSERT_LR(k, 60, 0.5);
    ASSERT_LR(k, 110, 0.0);
}

/* ---- names, parsing, validation ----------------------------------------------------- */

static void test_names(void **state)
{
    (void)state;
    const char *opts[] = {"sgd", "adam", "adamw", "nadam"};
    for (int i = 0; i < 4; i++) {
        enum rt_optim_kind k;
        assert_int_equal(rt_optim_kind_parse(opts[i], &k), RT_OK);
        assert_int_equal((int)k, i);
        assert_string_equal(rt_optim_kind_name(k), opts[i]);
    }
    const char *scheds[] = {"constant", "step", "cosine"};
    for (int i = 0; i < 3; i++) {
        enum rt_sched_kind k;
        assert_int_equal(rt_sched_kind_parse(scheds[i], &k), RT_OK);
        assert_int_equal((int)k, i);
        assert_string_equal(rt_sched_kind_name(k), scheds[i]);
    }
    enum rt_optim_kind k;
    assert_int_equal(rt_optim_kind_parse("adagrad", &k), RT_ERR_CONFIG);
    assert_non_null(strstr(rt_error_detail(), "adagrad"));
    assert_non_null(strstr(rt_error_detail(), "sgd, adam, adamw, nadam"));
    enum rt_sched_kind s;
    assert_int_equal(rt_sched_kind_parse("exp", &s), RT_ERR_CONFIG);
    assert_non_null(strstr(rt_error_detail(), "constant, step, cosine"));
}

static void test_config_errors(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    c.schedule = RT_SCHED_COSINE; /* no total_steps */
    assert_null(rt_optim_new(dev, &c, N));
    assert_non_null(strstr(rt_error_detail(), "total steps"));

    c = cfg_lr(-1.0f);
    assert_null(rt_optim_new(dev, &c, N));
    assert_non_null(strstr(rt_error_detail(), "learning rate"));

    c = cfg_lr(0.1f);
    c.momentum = 0.0f;
    c.nesterov = true;
    assert_null(rt_optim_new(dev, &c, N));
    assert_non_null(strstr(rt_error_detail(), "Nesterov"));

    c = cfg_lr(0.1f);
    c.kind = RT_OPT_ADAM;
    c.beta2 = 1.0f;
    assert_null(rt_optim_new(dev, &c, N));
    assert_non_null(strstr(rt_error_detail(), "beta2"));
}

static void test_state_names(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    c.momentum = 0.0f;
    rt_optim *o = rt_optim_new(dev, &c, N);
    assert_non_null(o);
    assert_int_equal(rt_optim_state_count(o), 0);
    assert_int_equal(rt_optim_size(o), N);
    rt_optim_destroy(&o);
    assert_null(o);

    c.momentum = 0.9f;
    o = rt_optim_new(dev, &c, N);
    assert_int_equal(rt_optim_state_count(o), 1);
    assert_string_equal(rt_optim_state_name(o, 0), "momentum");
    rt_optim_destroy(&o);

    for (int k = RT_OPT_ADAM; k <= RT_OPT_NADAM; k++) {
        c.kind = (enum rt_optim_kind)k;
        o = rt_optim_new(dev, &c, N);
        assert_non_null(o);
        assert_int_equal(rt_optim_state_count(o), 2);
        assert_string_equal(rt_optim_state_name(o, 0), "adam_m");
        assert_string_equal(rt_optim_state_name(o, 1), "adam_v");
        /* state starts at zero */
        float host[N];
        for (int i = 0; i < 2; i++) {
            assert_int_equal(rt_download(dev, host, rt_optim_state(o, i), sizeof host), RT_OK);
            for (int j = 0; j < N; j++)
                assert_true(host[j] == 0.0f);
        }
        assert_int_equal(rt_optim_steps(o), 0);
        rt_optim_set_steps(o, 42);
        assert_int_equal(rt_optim_steps(o), 42);
        rt_optim_destroy(&o);
    }
}

/* ---- the update rules ----------------------------------------------------------------- */

/* The reference: one element's whole history, in double, from the formulas
 * in backend.h's contract (which are PyTorch's). */
struct ref {
    double w, m, v;
};

static void ref_sgd(struct ref *r, double g, double lr, const struct rt_optim_config *c)
{
    double mu = c->momentum, wd = c->weight_decay;
    g += wd * r->w;
    if (mu != 0.0) {
        r->m = mu * r->m + g;
        g = c->nesterov ? g + mu * r->m : r->m;
    }
    r->w -= lr * g;
}

static void ref_adam(struct ref *r, double g, double lr, long t, const struct rt_optim_config *c)
{
    double b1 = c->beta1, b2 = c->beta2, eps = c->eps, wd = c->weight_decay;
    double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    if (c->kind == RT_OPT_ADAMW)
        r->w -= lr * wd * r->w;
    else
        g += wd * r->w;
    r->m = b1 * r->m + (1.0 - b1) * g;
    r->v = b2 * r->v + (1.0 - b2) * g * g;
    double denom = sqrt(r->v / bc2) + eps;
    if (c->kind == RT_OPT_NADAM) {
        double m_hat = b1 * r->m / (1.0 - pow(b1, (double)(t + 1))) + (1.0 - b1) * g / bc1;
        r->w -= lr * m_hat / denom;
    } else {
        r->w -= lr * (r->m / bc1) / denom;
    }
}

/* Runs STEPS updates through rt_optim_step and the reference side by side,
 * with a fresh gradient each step, and compares weights and state. */
static void run_against_reference(const struct rt_optim_config *c)
{
    float w0[N], g[STEPS][N];
    tu_fill_uniform(w0, N, -1.0f, 1.0f, 11);
    for (int s = 0; s < STEPS; s++)
        tu_fill_uniform(g[s], N, -0.5f, 0.5f, 100 + (uint64_t)s);

    rt_buf *wb = rt_buf_new(dev, sizeof w0), *gb = rt_buf_new(dev, sizeof w0);
    assert_non_null(wb);
    assert_non_null(gb);
    assert_int_equal(rt_upload(dev, rt_buf_view(wb), w0, sizeof w0), RT_OK);
    rt_optim *o = rt_optim_new(dev, c, N);
    assert_non_null(o);

    struct ref r[N];
    for (int i = 0; i < N; i++)
        r[i] = (struct ref){.w = w0[i]};
    for (int s = 0; s < STEPS; s++) {
        assert_int_equal(rt_upload(dev, rt_buf_view(gb), g[s], sizeof g[s]), RT_OK);
        assert_int_equal(rt_optim_step(o, rt_buf_view(wb), rt_buf_view(gb), true), RT_OK);
        double lr = rt_schedule_lr(c, s);
        assert_float_equal(rt_optim_last_lr(o), (float)lr, 0.0);
        for (int i = 0; i < N; i++) {
            if (c->kind == RT_OPT_SGD)
                ref_sgd(&r[i], g[s][i], lr, c);
            else
                ref_adam(&r[i], g[s][i], lr, s + 1, c);
        }
    }
    assert_int_equal(rt_optim_steps(o), STEPS);

    float w[N], want[N];
    assert_int_equal(rt_download(dev, w, rt_buf_view(wb), sizeof w), RT_OK);
    for (int i = 0; i < N; i++)
        want[i] = (float)r[i].w;
    double err = tu_max_rel_err(w, want, N, 1e-3);
    if (err > 2e-6)
        fail_msg("%s: weights differ from the reference by %g (relative)",
                 rt_optim_kind_name(c->kind), err);
    /* and the weights did move */
    assert_true(tu_max_rel_err(w, w0, N, 1e-3) > 1e-4);

    for (int k = 0; k < rt_optim_state_count(o); k++) {
        float st[N], ref_st[N];
        assert_int_equal(rt_download(dev, st, rt_optim_state(o, k), sizeof st), RT_OK);
        for (int i = 0; i < N; i++)
            ref_st[i] = (float)(k == 0 ? r[i].m : r[i].v);
        /* state entries can cancel towards zero (g + wd*w, momentum of
         * opposite-signed gradients): judge them against their O(0.1) scale */
        err = tu_max_rel_err(st, ref_st, N, 1e-2);
        if (err > 2e-5)
            fail_msg("%s: state '%s' differs from the reference by %g",
                     rt_optim_kind_name(c->kind), rt_optim_state_name(o, k), err);
    }

    rt_optim_destroy(&o);
    rt_buf_destroy(&gb);
    rt_buf_destroy(&wb);
}

static void test_sgd_plain(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    c.momentum = 0.0f;
    run_against_reference(&c);
}

static void test_sgd_momentum(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    c.momentum = 0.9f;
    run_against_reference(&c);
}

static void test_sgd_nesterov(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    c.momentum = 0.9f;
    c.nesterov = true;
    run_against_reference(&c);
}

static void test_sgd_weight_decay(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.1f);
    c.momentum = 0.9f;
    c.weight_decay = 0.01f;
    run_against_reference(&c);
    c.momentum = 0.0f; /* decay without momentum takes the other branch */
    run_against_reference(&c);
}

static void test_sgd_with_schedule(void **state)
{
    (void)state;
    /* the schedule's rate is the one each step uses */
    struct rt_optim_config c = cfg_lr(0.2f);
    c.momentum = 0.5f;
    c.schedule = RT_SCHED_STEP;
    c.step_size = 1;
    c.gamma = 0.5f;
    c.warmup_steps = 1;
    run_against_reference(&c);
}

static void test_adam(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.01f);
    c.kind = RT_OPT_ADAM;
    run_against_reference(&c);
    c.weight_decay = 0.1f; /* L2 */
    run_against_reference(&c);
}

static void test_adamw(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.01f);
    c.kind = RT_OPT_ADAMW;
    c.weight_decay = 0.1f; /* decoupled */
    run_against_reference(&c);
}

static void test_nadam(void **state)
{
    (void)state;
    struct rt_optim_config c = cfg_lr(0.01f);
    c.kind = RT_OPT_NADAM;
    c.beta1 = 0.8f;
    c.beta2 = 0.99f;
    run_against_reference(&c);
    c.weight_decay = 0.05f;
    run_against_reference(&c);
}

/* ---- clipping ---------------------------------------------------------------------------- */

/* A gradient of norm 5 (3-4-0 and a zero tail) through plain SGD with lr 1:
 * the update equals the gradient as the optimiser saw it. */
static void clip_case_norm(float clip, bool want_norm, float *g_after, float *w_after,
                           double *norm)
{
    struct rt_optim_config c = cfg_lr(1.0f);
    c.momentum = 0.0f;
    c.clip_norm = clip;
    float g[N] = {3.0f, 4.0f}, w[N] = {0};
    rt_buf *wb = rt_buf_new(dev, sizeof w), *gb = rt_buf_new(dev, sizeof g);
    assert_int_equal(rt_upload(dev, rt_buf_view(wb), w, sizeof w), RT_OK);
    assert_int_equal(rt_upload(dev, rt_buf_view(gb), g, sizeof g), RT_OK);
    rt_optim *o = rt_optim_new(dev, &c, N);
    assert_non_null(o);
    assert_true(isnan(rt_optim_last_grad_norm(o)));
    assert_int_equal(rt_optim_step(o, rt_buf_view(wb), rt_buf_view(gb), want_norm), RT_OK);
    *norm = rt_optim_last_grad_norm(o);
    assert_int_equal(rt_download(dev, g_after, rt_buf_view(gb), sizeof g), RT_OK);
    assert_int_equal(rt_download(dev, w_after, rt_buf_view(wb), sizeof w), RT_OK);
    rt_optim_destroy(&o);
    rt_buf_destroy(&gb);
    rt_buf_destroy(&wb);
}

static void clip_case(float clip, float *g_after, float *w_after, double *norm)
{
    clip_case_norm(clip, true, g_after, w_after, norm);
}

static void test_clip_above(void **state)
{
    (void)state;
    float g[N], w[N];
    double norm;
    clip_case(1.0f, g, w, &norm);
    assert_float_equal(norm, 5.0, 1e-12); /* reported before clipping */
    double ss = 0.0;
    for (int i = 0; i < N; i++)
        ss += (double)g[i] * g[i];
    assert_float_equal(sqrt(ss), 1.0, 1e-6); /* scaled to exactly clip_norm */
    assert_float_equal(g[0], 0.6, 1e-7);
    assert_float_equal(g[1], 0.8, 1e-7);
    assert_float_equal(w[0], -0.6, 1e-7); /* the step used the clipped gradient */
    assert_float_equal(w[1], -0.8, 1e-7);
    for (int i = 2; i < N; i++)
        assert_true(g[i] == 0.0f && w[i] == 0.0f);
}

static void test_clip_below(void **state)
{
    (void)state;
    float g[N], w[N];
    double norm;
    clip_case(10.0f, g, w, &norm);
    assert_float_equal(norm, 5.0, 1e-12);
    assert_true(g[0] == 3.0f && g[1] == 4.0f); /* untouched, bit for bit */
    assert_true(w[0] == -3.0f && w[1] == -4.0f);

    clip_case(0.0f, g, w, &norm); /* clipping off: still measured, not applied */
    assert_float_equal(norm, 5.0, 1e-12);
    assert_true(g[0] == 3.0f && g[1] == 4.0f);

    /* a step that does not log it: no clipping, no norm, the same update */
    clip_case_norm(0.0f, false, g, w, &norm);
    assert_true(isnan(norm));
    assert_true(w[0] == -3.0f && w[1] == -4.0f);
    /* clipping measures it whether or not the step logs it */
    clip_case_norm(1.0f, false, g, w, &norm);
    assert_float_equal(norm, 5.0, 1e-12);
    assert_float_equal(w[0], -0.6, 1e-7);
}

/* rt_optim_update_range: the ranks of a host, each with its own optimiser
 * updating its own range of one shared buffer, give the bits of one whole
 * update, state included, with frozen gaps between spans, clipping and
 * over several steps (the schedule and Adam's bias correction count each
 * rank's steps). */
/* One rank's range [lo, hi) in pieces of 7 (rt_optim_update_part), then
 * rt_optim_update_done: the host replica's one-pass update. */
static void update_in_pieces(rt_optim *o, rt_buf *w, rt_buf *g, double norm, size_t lo, size_t hi)
{
    for (size_t a = lo; a < hi; a += 7)
        assert_int_equal(rt_optim_update_part(o, rt_buf_view(w), rt_buf_view(g), a,
                                              a + 7 < hi ? a + 7 : hi),
                         RT_OK);
    rt_optim_update_done(o, norm);
}

static void range_case(enum rt_optim_kind kind, bool pieces)
{
    enum { M = 103, RANKS = 3, STEPS_R = 4 };
    const struct rt_span spans[] = {{3, 37}, {50, 53}}; /* 0-2 and 40-49 frozen */
    const size_t cut[RANKS + 1] = {0, 45, 71, M};        /* one cut inside a gap */
    struct rt_optim_config c = cfg_lr(0.05f);
    c.kind = kind;
    c.weight_decay = 0.01f;
    c.clip_norm = pieces ? 0.0f : 1.5f; /* pieces: no clipping (it needs the norm first) */
    c.schedule = RT_SCHED_STEP;
    c.step_size = 2;
    c.gamma = 0.5f;
    rt_optim *whole = rt_optim_new_spans(dev, &c, spans, 2), *part[RANKS];
    for (int r = 0; r < RANKS; r++)
        assert_non_null(part[r] = rt_optim_new_spans(dev, &c, spans, 2));
    float w0[M], g[M], wa[M], wb[M];
    for (int i = 0; i < M; i++)
        w0[i] = 0.01f * (float)(i % 17) - 0.05f;
    rt_buf *bw[2], *bg[2];
    for (int k = 0; k < 2; k++) {
        bw[k] = rt_buf_new(dev, sizeof w0);
        bg[k] = rt_buf_new(dev, sizeof g);
        assert_int_equal(rt_upload(dev, rt_buf_view(bw[k]), w0, sizeof w0), RT_OK);
    }
    for (int step = 0; step < STEPS_R; step++) {
        double ss = 0.0;
        for (int i = 0; i < M; i++) {
            g[i] = 0.3f * sinf(0.7f * (float)(i + 11 * step));
            ss += (double)g[i] * g[i];
        }
        double norm = sqrt(ss); /* above clip_norm: every step clips */
        for (int k = 0; k < 2; k++)
            assert_int_equal(rt_upload(dev, rt_buf_view(bg[k]), g, sizeof g), RT_OK);
        assert_int_equal(rt_optim_update(whole, rt_buf_view(bw[0]), rt_buf_view(bg[0]), norm),
                         RT_OK);
        for (int r = 0; r < RANKS; r++) {
            if (pieces) {
                update_in_pieces(part[r], bw[1], bg[1], norm, cut[r], cut[r + 1]);
                continue;
            }
            assert_int_equal(rt_optim_update_range(part[r], rt_buf_view(bw[1]),
                                                   rt_buf_view(bg[1]), norm, cut[r], cut[r + 1]),
                             RT_OK);
        }
        for (int r = 0; r < RANKS; r++) { /* the same schedule position and figures */
            assert_int_equal(rt_optim_steps(part[r]), rt_optim_steps(whole));
            assert_true(rt_optim_last_lr(part[r]) == rt_optim_last_lr(whole));
            assert_true(rt_optim_last_grad_norm(part[r]) == rt_optim_last_grad_norm(whole));
        }
    }
    assert_int_equal(rt_download(dev, wa, rt_buf_view(bw[0]), sizeof wa), RT_OK);
    assert_int_equal(rt_download(dev, wb, rt_buf_view(bw[1]), sizeof wb), RT_OK);
    assert_memory_equal(wa, wb, sizeof wa);
    assert_true(wa[0] == w0[0] && wa[45] == w0[45]); /* frozen: untouched */
    assert_true(wa[10] != w0[10]);
    /* each rank's state over its own range is the whole optimiser's */
    float sa[90], sb[90];
    for (int i = 0; i < rt_optim_state_count(whole); i++) {
        assert_int_equal(rt_download(dev, sa, rt_optim_state(whole, i), sizeof sa), RT_OK);
        for (int r = 0; r < RANKS; r++) {
            assert_int_equal(rt_download(dev, sb, rt_optim_state(part[r], i), sizeof sb), RT_OK);
            /* state index of parameter p: p - 3 in the first span, p - 13 in the second */
            for (size_t p = cut[r]; p < cut[r + 1]; p++) {
                long at = p >= 3 && p < 40 ? (long)p - 3 : p >= 50 ? (long)p - 13 : -1;
                if (at >= 0)
                    assert_true(sa[at] == sb[at]);
            }
        }
    }
    for (int r = 0; r < RANKS; r++)
        rt_optim_destroy(&part[r]);
    rt_optim_destroy(&whole);
    for (int k = 0; k < 2; k++) {
        rt_buf_destroy(&bw[k]);
        rt_buf_destroy(&bg[k]);
    }
}

static void test_update_range(void **state)
{
    (void)state;
    range_case(RT_OPT_SGD, false);
    range_case(RT_OPT_ADAMW, false);
}

static void test_update_parts(void **state)
{
    (void)state;
    range_case(RT_OPT_SGD, true);
    range_case(RT_OPT_ADAMW, true);
    struct rt_optim_config c = cfg_lr(0.1f);
    c.clip_norm = 1.0f;
    rt_optim *o = rt_optim_new(dev, &c, 4);
    assert_non_null(o);
    assert_true(rt_optim_clips(o));
    rt_optim_destroy(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule_constant),
        cmocka_unit_test(test_schedule_step),
        cmocka_unit_test(test_schedule_cosine),
        cmocka_unit_test(test_schedule_warmup),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_state_names),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_weight_decay),
        cmocka_unit_test(test_sgd_with_schedule),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_nadam),
        cmocka_unit_test(test_clip_above),
        cmocka_unit_test(test_clip_below),
        cmocka_unit_test(test_update_range),
        cmocka_unit_test(test_update_parts),
    };
    return cmocka_run_group_tests(tests, open_dev, close_dev);
}
