/* test_modes.c — the training modes through the interfaces the core
 * declares (collective.h, reporter.h), with no network: an in-process
 * collective of one rank that counts what the trainer asks of it, and a
 * reporter that records what it is told.
 *
 *   - sync on one rank computes exactly what one process computes, bit for
 *     bit, and a step goes to the network once: one allreduce of the
 *     gradient with the step's counts in its tail (no reduction for the
 *     norm, the --log-every windows or the epoch's sums);
 *   - when the members change under a collective (RT_ERR_REGROUP), the
 *     step is redone, or the epoch's close, and the run ends with the same
 *     weights and counts as without the change;
 *   - a stop voted at step k stops every mode at step k with that step's
 *     checkpoint, and the vote never travels inside a gradient;
 *   - average mode talks to the others only every --sync-every steps.
 * Uses a slice of Fashion-MNIST (skipped when the Debian package is absent). */
#include "testutil.h"
#include "tu_weights.h"

#include <sys/stat.h>

#include "checkpoint.h"
#include "status.h"
#include "train.h"

/* ---- an in-process collective of one rank ---------------------------------------- */

struct mock {
    long rs, ag, ar, ar64, bcast, ar64_elems;
    size_t ar_elems;     /* of the last float allreduce */
    long regroup_at_ar;  /* this float allreduce answers RT_ERR_REGROUP (0: none) */
    long regroup_at_ar64;/* ... this f64 allreduce */
    size_t ar64_sizes[64];  /* the element counts of the first 64 f64 allreduces */
    long regroups;
    long changing_after_ar; /* changing() says so once this many float allreduces ran,
                               until the regroup (0: never) */
    uint32_t votes;
    long stop_at_rs; /* agreed() says stop once this many reduce-scatters ran (0: never) */
    long stop_at_ar; /* ... once this many float allreduces ran (0: never) */
    /* the reporter's side */
    long lines, metrics, ckpts;
    char last_ckpt[16];
    long last_ckpt_step;
    bool ready;
    char summary[2048];  /* what ready said */
    double last_lr;      /* the lr of the last metrics line */
    long redone;         /* the metrics lines' steps_redone, summed */
    size_t opt_floats;   /* the optimiser state a checkpoint holds (0: all parameters) */
};

static int m_rs(void *ctx, float *buf, size_t n)
{
    ((struct mock *)ctx)->rs++;
    return RT_OK;
}
static int m_ag(void *ctx, float *buf, size_t n)
{
    ((struct mock *)ctx)->ag++;
    return RT_OK;
}
static int m_ar(void *ctx, float *buf, size_t n)
{
    struct mock *m = ctx;
    m->ar++;
    m->ar_elems = n;
    return m->ar == m->regroup_at_ar ? RT_ERR_REGROUP : RT_OK;
}
static int m_ar64(void *ctx, double *buf, size_t n)
{
    struct mock *m = ctx;
    m->ar64++;
    if (m->ar64 <= 64)
        m->ar64_sizes[m->ar64 - 1] = n;
    if (m->ar64 == m->regroup_at_ar64)
        return RT_ERR_REGROUP;
    m->ar64_elems += (long)n;
    return RT_OK;
}
static int m_bcast(void *ctx, void *buf, size_t bytes, int root)
{
    ((struct mock *)ctx)->bcast++;
    return RT_OK;
}
static void m_vote(void *ctx, uint32_t votes) { ((struct mock *)ctx)->votes |= votes; }
static uint32_t m_agreed(void *ctx)
{
    struct mock *m = ctx;
    uint32_t v = m->votes;
    m->votes = 0;
    if ((m->stop_at_rs && m->rs >= m->stop_at_rs) || (m->stop_at_ar && m->ar >= m->stop_at_ar))
        v |= RT_VOTE_STOP;
    return v;
}

static int m_regroup(void *ctx, int *rank, int *world)
{
    ((struct mock *)ctx)->regroups++;
    *rank = 0;
    *world = 1;
    return RT_OK;
}

static bool m_changing(void *ctx)
{
    struct mock *m = ctx;
    return m->changing_after_ar && m->ar == m->changing_after_ar && m->regroups == 0;
}

static const struct rt_collective_ops mock_coll = {
    .reduce_scatter = m_rs, .all_gather = m_ag, .allreduce = m_ar, .allreduce_f64 = m_ar64,
    .broadcast = m_bcast, .vote = m_vote, .agreed = m_agreed, .regroup = m_regroup,
    .changing = m_changing,
};

/* gossip's links, for one rank: nobody to average with */
static int p_begin(void *ctx, size_t n, long first_epoch) { return RT_OK; }
static int p_step(void *ctx, float *params, size_t n, bool initiate) { return 0; }
static int p_drain(void *ctx, float *params, size_t n, long epoch) { return RT_OK; }
static const struct rt_pairwise_ops mock_pairwise = {
    .begin = p_begin, .step = p_step, .drain = p_drain,
};

static int r_ready(void *ctx, double ips, const char *summary)
{
    struct mock *m = ctx;
    assert_true(ips > 0.0);
    assert_non_null(strstr(summary, "training "));
    snprintf(m->summary, sizeof m->summary, "%s", summary);
    m->ready = true;
    return RT_OK;
}
static void r_progress(void *ctx, int epoch, int epochs, long done, long total, double loss,
                       double acc, double img_s, double eta_s)
{
    assert_true(done >= 0 && done <= total);
}
static int r_line(void *ctx, const char *text)
{
    ((struct mock *)ctx)->lines++;
    return RT_OK;
}
static int r_metrics(void *ctx, const struct rt_train_field *f, int n)
{
    struct mock *m = ctx;
    m->metrics++;
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].key, "lr"))
            m->last_lr = f[i].num;
        else if (!strcmp(f[i].key, "steps_redone"))
            m->redone += f[i].integer;
    return RT_OK;
}
static int r_checkpoint(void *ctx, const char *which, const struct rt_ckpt_part *p)
{
    struct mock *m = ctx;
    m->ckpts++;
    snprintf(m->last_ckpt, sizeof m->last_ckpt, "%s", which);
    m->last_ckpt_step = p->pos->step;
    /* one rank holds the whole model and the whole optimiser state (of
     * the trainable parameters) */
    assert_int_equal(p->lo, 0);
    assert_int_equal(p->hi, m->opt_floats ? m->opt_floats : p->np);
    return RT_OK;
}

static const struct rt_reporter_ops mock_rep = {
    .ready = r_ready, .progress = r_progress, .line = r_line, .metrics = r_metrics,
    .checkpoint = r_checkpoint,
};

static struct rt_train_net mock_net(struct mock *m)
{
    return (struct rt_train_net){
        .coll = {.ops = &mock_coll, .ctx = m, .rank = 0, .world = 1},
        .report = {.ops = &mock_rep, .ctx = m, .want_checkpoints = true},
        .pairwise = {.ops = &mock_pairwise, .ctx = m},
    };
}

/* ---- the runs --------------------------------------------------------------------- */

static void base_config(struct rt_train_config *c, const char *save)
{
    rt_train_config_defaults(c);
    snprintf(c->model_path, sizeof c->model_path, "%s/examples/lenet.cfg", TOP_SRCDIR);
    c->limit = 1200; /* 1080 train, 120 val: 34 steps of 32 */
    c->val_frac = 0.1f;
    c->epochs = 1;
    c->batch = 32;
    c->threads = 1;
    c->seed = 11;
    c->optim.kind = RT_OPT_ADAM;
    c->optim.lr = 0.002f;
    c->progress = RT_PROGRESS_OFF;
    c->partition = RT_PARTITION_STATIC;
    c->log_every = 10;
    snprintf(c->save_path, sizeof c->save_path, "%s", save);
}

static void sync_like_one_process(float clip)
{
    char one[512], dist[512];
    snprintf(one, sizeof one, "%s/one.safetensors", tu_tmpdir());
    snprintf(dist, sizeof dist, "%s/dist.safetensors", tu_tmpdir());
    struct rt_train_config c;
    struct rt_train_result r1, r2;
    base_config(&c, one);
    c.optim.clip_norm = clip;
    assert_int_equal(rt_train_run(&c, &r1), 0);
    snprintf(c.save_path, sizeof c.save_path, "%s", dist);
    struct mock m = {0};
    struct rt_train_net net = mock_net(&m);
    assert_int_equal(rt_train_run_dist(&c, &net, &r2), 0);
    tu_assert_same_weights(one, dist);
    assert_true(m.ready);
    assert_int_equal(r2.steps, 34);
    /* the network, per step: one allreduce of the gradient and the counts */
    assert_int_equal(m.ar, 34);
    assert_int_equal(m.rs + m.ag, 0);
    assert_int_equal(m.ar_elems, 61706 + 27); /* lenet's parameters, the counts */
    /* f64 reductions: only the evaluations of val and test at the end */
    assert_int_equal(m.ar64, 2);
    assert_int_equal(m.ar64_elems, 3 + 3);
    assert_int_equal(m.metrics, 3 + 1);
    assert_string_equal(m.last_ckpt, "last");
    assert_int_equal(m.last_ckpt_step, 34);
    assert_true(r1.test_acc == r2.test_acc);
}

static void test_sync_one_rank_is_one_process(void **state)
{
    (void)state;
    sync_like_one_process(0.0f);
}

static void test_sync_clipping_needs_one_more_reduction(void **state)
{
    (void)state;
    sync_like_one_process(0.5f);
}

/* A stop voted on the 7th exchange stops the run at step 7, after that
 * step's update, with a checkpoint of step 7. */
static void test_stop_vote_stops_at_that_step(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/stop.safetensors", tu_tmpdir());
    struct rt_train_config c;
    struct rt_train_result r;
    base_config(&c, path);
    struct mock m = {.stop_at_ar = 7};
    struct rt_train_net net = mock_net(&m);
    assert_int_equal(rt_train_run_dist(&c, &net, &r), RT_ERR_INTERRUPTED);
    assert_int_equal(r.steps, 7);
    assert_int_equal(m.ar, 7);
    assert_string_equal(m.last_ckpt, "last");
    assert_int_equal(m.last_ckpt_step, 7);
}

/* One process, then the same run through the mock collective m (files
 * named by tag): both must end with the same weights. */
static void one_then_dist(const char *tag, struct mock *m, struct rt_train_result *r1,
                          struct rt_train_result *r2)
{
    char one[512], dist[512];
    snprintf(one, sizeof one, "%s/one-%s.safetensors", tu_tmpdir(), tag);
    snprintf(dist, sizeof dist, "%s/dist-%s.safetensors", tu_tmpdir(), tag);
    struct rt_train_config c;
    base_config(&c, one);
    assert_int_equal(rt_train_run(&c, r1), 0);
    snprintf(c.save_path, sizeof c.save_path, "%s", dist);
    struct rt_train_net net = mock_net(m);
    assert_int_equal(rt_train_run_dist(&c, &net, r2), 0);
    tu_assert_same_weights(one, dist);
}

/* The members change under the 12th step's allreduce, then under the
 * epoch's close (the validation's reduction): the step and the close are
 * redone, and the run ends with one process's weights and counts. */
static void test_regroup_redoes_the_step(void **state)
{
    (void)state;
    struct rt_train_result r1, r2;
    struct mock m = {.regroup_at_ar = 12, .regroup_at_ar64 = 2}; /* 1: the recovery's */
    one_then_dist("rg", &m, &r1, &r2);
    assert_int_equal(m.regroups, 2);
    assert_int_equal(r2.steps, 34);
    assert_int_equal(m.ar, 35); /* one step twice */
    assert_int_equal(m.redone, 1);
    assert_int_equal(m.ar64, 1 + 1 + 1 + 2); /* recovery, val (cut), recovery, val, test */
    assert_true(r1.test_acc == r2.test_acc);
    assert_true(r1.train_loss == r2.train_loss || fabs(r1.train_loss - r2.train_loss) < 1e-5);
}

/* A new generation announced between two steps: the worker regroups
 * before the 12th step begins, computes every step once, counts nothing
 * redone, and ends with one process's weights. */
static void test_regroup_at_a_step_start_redoes_nothing(void **state)
{
    (void)state;
    struct rt_train_result r1, r2;
    struct mock m = {.changing_after_ar = 11};
    one_then_dist("rb", &m, &r1, &r2);
    assert_int_equal(m.regroups, 1);
    assert_int_equal(r2.steps, 34);
    assert_int_equal(m.ar, 34); /* no step twice */
    assert_int_equal(m.redone, 0);
}

/* Gossip re-plans each epoch's local batches at its start, with one sum
 * of the speeds (3 numbers a rank): the members change under epoch 2's.
 * The worker regroups there and walks epoch 2 from its start, redoing
 * nothing, and ends where the same run without the change ends. */
static void test_gossip_regroup_at_an_epoch_start(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/gossip.safetensors", tu_tmpdir());
    struct rt_train_config c;
    struct rt_train_result r1, r2;
    base_config(&c, path);
    c.mode = RT_MODE_GOSSIP;
    c.epochs = 2;
    struct mock m1 = {0};
    struct rt_train_net net = mock_net(&m1);
    assert_int_equal(rt_train_run_dist(&c, &net, &r1), 0);
    /* epoch 2's re-plan: the sum right before its close's first (the
     * consensus distance, 2 numbers; epoch 1's close: 2, 6, then the
     * validation's and the test's 3 each) */
    long at = 0, converges = 0;
    for (long i = 0; i < m1.ar64 && i < 64 && !at; i++)
        at = m1.ar64_sizes[i] == 2 && ++converges == 2 ? i : 0;
    assert_true(at > 1 && m1.ar64_sizes[at - 1] == 3);
    assert_true(at > 0);
    struct mock m2 = {.regroup_at_ar64 = at};
    net = mock_net(&m2);
    assert_int_equal(rt_train_run_dist(&c, &net, &r2), 0);
    assert_int_equal(m2.regroups, 1);
    assert_int_equal(r2.steps, r1.steps);
    assert_int_equal(m2.redone, 0);
    /* the one that failed, the recovery's (who holds the state); the
     * epoch before is not closed again, nor reported twice */
    assert_int_equal(m2.ar64, m1.ar64 + 1 + 1);
    assert_int_equal(m2.metrics, m1.metrics);
    assert_true(r1.test_acc == r2.test_acc);
    assert_true(r1.params_hash == r2.params_hash);
}

/* Early stopping's best weights are evaluated again after the last
 * epoch; the members change under that evaluation: the worker regroups,
 * evaluates them again and ends as the run without the change. */
static void test_regroup_in_the_final_evaluation(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/best.safetensors", tu_tmpdir());
    struct rt_train_config c;
    struct rt_train_result r1, r2;
    base_config(&c, path);
    c.epochs = 2;
    c.patience = 2;
    struct mock m1 = {0};
    struct rt_train_net net = mock_net(&m1);
    assert_int_equal(rt_train_run_dist(&c, &net, &r1), 0);
    /* the run ends with the best weights' validation and test: 3 each */
    assert_true(m1.ar64 > 2 && m1.ar64_sizes[m1.ar64 - 2] == 3);
    struct mock m2 = {.regroup_at_ar64 = m1.ar64 - 1};
    net = mock_net(&m2);
    assert_int_equal(rt_train_run_dist(&c, &net, &r2), 0);
    assert_int_equal(m2.regroups, 1);
    assert_int_equal(m2.ar64, m1.ar64 + 1 + 1); /* the one that failed, the recovery's */
    assert_int_equal(r2.best_epoch, r1.best_epoch);
    assert_true(r1.val_acc == r2.val_acc && r1.test_acc == r2.test_acc);
    assert_true(r1.params_hash == r2.params_hash);
}

/* Average mode talks to the others every --sync-every steps only (and at
 * the epoch's end); a stop voted then stops it there. */
static void test_average_exchanges_every_h_steps(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/avg.safetensors", tu_tmpdir());
    struct rt_train_config c;
    struct rt_train_result r;
    base_config(&c, path);
    c.mode = RT_MODE_AVERAGE;
    c.sync_every = 4;
    c.log_every = 0;
    struct mock m = {0};
    struct rt_train_net net = mock_net(&m);
    assert_int_equal(rt_train_run_dist(&c, &net, &r), 0);
    assert_int_equal(m.rs + m.ag, 0);
    /* 8 averagings in 34 steps and one at the epoch's end (34 % 4 != 0),
     * each of the parameters and Adam's two moments */
    assert_int_equal(m.ar, 9 * 3);
    assert_int_equal(r.local_steps, 34);

    struct mock s = {.stop_at_ar = 3 * 3}; /* at the third averaging: step 12 */
    net = mock_net(&s);
    assert_int_equal(rt_train_run_dist(&c, &net, &r), RT_ERR_INTERRUPTED);
    assert_int_equal(r.steps, 12);
    assert_int_equal(s.last_ckpt_step, 12);
}

/* Frozen layers at the bottom: a step reduces only the gradient above
 * them (and the counts), and the weights are those of one process with
 * the same layers frozen. */
static void sync_with_freeze(const char *spec, size_t frozen)
{
    char one[512], dist[512];
    snprintf(one, sizeof one, "%s/one.safetensors", tu_tmpdir());
    snprintf(dist, sizeof dist, "%s/dist.safetensors", tu_tmpdir());
    struct rt_train_config c;
    struct rt_train_result r1, r2;
    base_config(&c, one);
    snprintf(c.freeze, sizeof c.freeze, "%s", spec);
    c.optim.weight_decay = 0.01f;
    assert_int_equal(rt_train_run(&c, &r1), 0);
    snprintf(c.save_path, sizeof c.save_path, "%s", dist);
    struct mock m = {.opt_floats = 61706 - frozen};
    struct rt_train_net net = mock_net(&m);
    assert_int_equal(rt_train_run_dist(&c, &net, &r2), 0);
    tu_assert_same_weights(one, dist);
    assert_int_equal(m.ar, 34);
    assert_int_equal(m.ar_elems, 61706 - frozen + 27);
    char words[160];
    snprintf(words, sizeof words, "gradient exchange: %zu of 61706 parameters (%zu bytes a step; "
                                  "frozen below parameter %zu)", 61706 - frozen,
             (61706 - frozen + 27) * 4, frozen);
    if (!strstr(m.summary, words))
        fail_msg("'%s' not in '%s'", words, m.summary);
}

static void test_sync_freeze_exchanges_the_trainable_part(void **state)
{
    (void)state;
    sync_with_freeze("conv1,conv3", 156 + 2416);
    sync_with_freeze("1-5", 156 + 2416 + 48120);
}

/* --lr-scale: the summary says the effective rate, and the steps use it. */
static void lr_scale(enum rt_lr_scale rule, float warmup, const char *want, double lr)
{
    char path[512];
    snprintf(path, sizeof path, "%s/lr.safetensors", tu_tmpdir());
    struct rt_train_config c;
    struct rt_train_result r;
    base_config(&c, path);
    c.lr_scale = rule;
    c.base_batch = 16;
    c.warmup_epochs = warmup;
    struct mock m = {0};
    struct rt_train_net net = mock_net(&m);
    assert_int_equal(rt_train_run_dist(&c, &net, &r), 0);
    if (!strstr(m.summary, want))
        fail_msg("'%s' not in '%s'", want, m.summary);
    if (m.last_lr != (double)(float)lr)
        fail_msg("the steps ran at lr %.9g, not %.9g", m.last_lr, (double)(float)lr);
}

static void test_lr_scale(void **state)
{
    (void)state;
    lr_scale(RT_LR_SCALE_LINEAR, 0.0f, "; effective learning rate 0.004 = --lr 0.002 x 2 "
             "(--lr-scale linear: batch 32, base batch 16)", 0.004);
    lr_scale(RT_LR_SCALE_SQRT, 0.5f, "; effective learning rate 0.00282843 = --lr 0.002 x "
             "1.41421 (--lr-scale sqrt: batch 32, base batch 16), reached after a linear "
             "warm-up of 17 steps", (double)0.002f * sqrt(2.0));
    lr_scale(RT_LR_SCALE_NONE, 0.0f, "adam lr 0.002, batch 32", 0.002);
}

int main(void)
{
    TU_NEED_FASHION_MNIST();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_one_rank_is_one_process),
        cmocka_unit_test(test_sync_clipping_needs_one_more_reduction),
        cmocka_unit_test(test_stop_vote_stops_at_that_step),
        cmocka_unit_test(test_regroup_redoes_the_step),
        cmocka_unit_test(test_regroup_at_a_step_start_redoes_nothing),
        cmocka_unit_test(test_gossip_regroup_at_an_epoch_start),
        cmocka_unit_test(test_regroup_in_the_final_evaluation),
        cmocka_unit_test(test_average_exchanges_every_h_steps),
        cmocka_unit_test(test_sync_freeze_exchanges_the_trainable_part),
        cmocka_unit_test(test_lr_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
