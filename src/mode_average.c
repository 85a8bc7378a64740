/* mode_average.c — --mode average: local SGD. Every worker steps on its own
 * part of each batch with the whole optimiser state; every --sync-every H
 * steps the parameters and the optimiser state are averaged (CaffeOnSpark's
 * model averaging, for slow networks).
 *
 * With --compress fp16|bf16 what travels is each worker's change since the
 * last averaging (parameters and optimiser state, weighted), rounded to 16
 * bits with the worker's rounding error carried to the next averaging
 * (compress.h); every rank adds the same widened sum to the same agreed
 * state, so the replicas stay bitwise identical. Changes, not values: a
 * weight rounded to 16 bits would lose its small updates for good, while a
 * change is small and its rounding error is sent later. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "compress.h"
#include "dist.h"
#include "status.h"
#include "train-testing.h"

struct average {
    struct rt_dist d;       /* first: the shared methods see a struct rt_dist */
    struct rt_tally since;  /* this worker's counts since the last averaging */
    struct rt_commit agreed; /* the state at the last averaging (dist_commit.c) */
    bool commit_due;        /* an averaging completed: keep its state at the next step */
    bool exchanged;         /* the last step averaged */
    struct rt_compress z;   /* --compress: the changes in 16 bits, the carried errors */
    float *delta;           /* one buffer's weighted change, then the widened sum */
};

/* Any share of the batch: the plan gives a worker more when others leave. */
static int average_rows(const struct rt_trainer *t) { return t->c.batch; }

static int average_init(struct rt_trainer *t)
{
    struct average *a = calloc(1, sizeof *a);
    if (!a)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    RT_TRY(rt_dist_init(t, &a->d, t->c.partition == RT_PARTITION_BALANCED, true,
                        t->c.batch));
    if (t->c.compress == RT_COMPRESS_NONE)
        return RT_OK;
    const rt_collective *c = t->coll;
    if (!c->ops->submit || !c->ops->wait)
        return rt_error(RT_ERR_CONFIG, "--compress %s: these workers' collectives cannot "
                        "reduce 16-bit ranges", rt_compress_name(t->c.compress));
    size_t np = a->d.r.np, n = np * (size_t)(1 + rt_optim_state_count(t->opt));
    RT_TRY(rt_compress_init(&a->z, t->c.compress, n, n));
    if (!(a->delta = malloc((np ? np : 1) * sizeof(float))))
        return rt_error(RT_ERR_NOMEM, "no memory for the parameters' change");
    return RT_OK;
}

/* Buffer k of the averaged state: the parameters, then each optimiser
 * buffer (the layout of the agreed copy, dist_commit.c). */
static float *state_buf(struct rt_trainer *t, struct average *a, int k)
{
    return k == 0 ? a->d.r.p : rt_view_host(rt_optim_state(t->opt, k - 1));
}

/* X = agreed + sum over workers of round16(w (X - agreed) + carried), for
 * the parameters and each optimiser buffer: the weighted average of
 * average_params, with 16-bit changes on the wire (sum of w is 1). All
 * buffers travel at once as ranges of one collective. */
static int average_compressed(struct rt_trainer *t, struct average *a, float w)
{
    const rt_collective *c = t->coll;
    size_t np = a->d.r.np;
    int nb = 1 + rt_optim_state_count(t->opt), submitted = 0, rc = RT_OK;
    if (!a->agreed.valid)
        return rt_error(RT_ERR_ARG, "compressed averaging without an agreed state");
    for (int k = 0; k < nb && rc >= 0; k++) {
        const float *x = state_buf(t, a, k), *ref = a->agreed.buf + (size_t)k * np;
        for (size_t i = 0; i < np; i++)
            a->delta[i] = w * (x[i] - ref[i]);
        rt_compress_put(&a->z, a->delta, (size_t)k * np, np);
        rc = c->ops->submit(c->ctx, a->z.wire, a->z.elem, a->z.n, (size_t)k * np,
                            (size_t)(k + 1) * np);
        submitted += rc >= 0;
    }
    while (submitted-- > 0) {
        int rw = c->ops->wait(c->ctx);
        rc = rc < 0 ? rc : rw;
    }
    RT_TRY(rc);
    for (int k = 0; k < nb; k++) {
        float *x = state_buf(t, a, k);
        const float *ref = a->agreed.buf + (size_t)k * np;
        rt_compress_get(&a->z, a->delta, (size_t)k * np, np);
        for (size_t i = 0; i < np; i++)
            x[i] = ref[i] + a->delta[i];
    }
    rt_compress_commit(&a->z);
    return RT_OK;
}

static int average_begin(struct rt_trainer *t)
{
    char words[64];
    snprintf(words, sizeof words, ", mode average every %d steps", t->c.sync_every);
    return rt_dist_begin(t, words);
}

/* The epoch's sums are over all workers: counts travel with the averaging. */
static int average_epoch_begin(struct rt_trainer *t, struct rt_epoch *e)
{
    struct average *a = t->ms;
    e->sums_global = true;
    return rt_commit_here(&a->agreed, t) ? RT_OK : rt_commit_take(&a->agreed, t);
}

/* The state of an averaging, kept once its step's counts are in the
 * epoch's sums (the loop adds them after the step). */
static int keep_agreed(struct rt_trainer *t, struct average *a)
{
    if (!a->commit_due)
        return RT_OK;
    a->commit_due = false;
    return rt_commit_take(&a->agreed, t);
}

static int average_part(struct rt_trainer *t, struct rt_step *s)
{
    struct rt_dist *d = t->ms;
    RT_TRY(keep_agreed(t, t->ms));
    RT_TRY(rt_planner_replan_if_due(&d->pl, t->pos.step));
    RT_TRY(rt_planner_check_leave(&d->pl));
    rt_planner_part(&d->pl, s->n, &s->a, &s->b);
    long nl = s->b - s->a;
    s->gscale = 1.0f / (float)(nl > 0 ? nl : 1); /* the mean over this worker's samples */
    rt_planner_step_begin(&d->pl, s);
    return RT_OK;
}

/* The parameters and the optimiser state (momentum, Adam moments), weighted
 * by the samples each worker processed since the last averaging (a standby
 * worker weighs nothing). With SGD and H = 1 this is exactly sync's maths;
 * averaging the state too keeps the workers' momenta from pulling apart
 * between averagings (measured: +0.4 points after one lenet epoch with
 * Adam). Every rank ends with the same bits: one ring sum, one scale. The
 * counts since the last averaging ride in the first sum: *all gets them
 * over all workers. */
static int average_params(struct rt_trainer *t, struct average *a, struct rt_tally *all)
{
    const rt_collective *c = t->coll;
    struct rt_replica *r = &a->d.r;
    double sums[RT_TALLY_FLOATS];
    rt_tally_to_f64(&a->since, sums);
    RT_TRY(c->ops->allreduce_f64(c->ctx, sums, RT_TALLY_FLOATS));
    rt_tally_from_f64(sums, all);
    if (all->seen > 0 && a->delta) {
        RT_TRY(average_compressed(t, a, (float)((double)a->since.seen / (double)all->seen)));
    } else if (all->seen > 0) {
        float w = (float)((double)a->since.seen / (double)all->seen);
        /* frozen parameters below `lo` are the same bits everywhere */
        size_t lo = rt_model_trainable_from(t->m), no = rt_optim_size(t->opt);
        RT_TRY(rt_op_scale(r->odev, r->np - lo, w, rt_view_at(r->pv, lo)));
        RT_TRY(c->ops->allreduce(c->ctx, r->p + lo, r->np - lo));
        for (int i = 0; i < rt_optim_state_count(t->opt); i++) {
            rt_view v = rt_optim_state(t->opt, i);
            RT_TRY(rt_op_scale(r->odev, no, w, v));
            RT_TRY(c->ops->allreduce(c->ctx, rt_view_host(v), no));
        }
    }
    a->since = (struct rt_tally){0};
    a->commit_due = true;
    return rt_replica_push(r);
}

/* A step counts nothing until its averaging, which counts the steps since
 * on every worker: the epoch's sums and the --log-every windows are the
 * cluster's, and a worker lost between two averagings takes no counts. */
static int average_after_backward(struct rt_trainer *t, struct rt_step *s)
{
    struct average *a = t->ms;
    const rt_collective *c = t->coll;
    RT_TRY(rt_planner_step_end(&a->d.pl, t, s));
    bool exchange = (t->pos.step + 1) % t->c.sync_every == 0;
    if (exchange)
        c->ops->vote(c->ctx, (rt_trainer_stop_asked(t) ? RT_VOTE_STOP : 0u) |
                                 rt_planner_vote(&a->d.pl));
    long nl = s->b - s->a;
    if (nl > 0) {
        rt_optim_set_steps(t->opt, t->pos.step);
        RT_TRY(rt_dist_local_step(t, &a->d, s->log_now));
        a->d.local_steps++;
    }
    rt_tally_add(&a->since, &s->tally);
    s->tally = (struct rt_tally){0};
    uint32_t agreed = 0;
    if (exchange) {
        RT_TRY(average_params(t, a, &s->tally));
        agreed = c->ops->agreed(c->ctx);
        rt_planner_agreed(&a->d.pl, agreed, t->pos.step);
    } else {
        RT_TRY(rt_replica_push(&a->d.r));
    }
    t->pos.step++;
    a->exchanged = s->exchanged = exchange;
    s->stop = (agreed & RT_VOTE_STOP) ||
              rt_train_testing_stop_at(&t->c, t->pos.step);
    return RT_OK;
}

/* The windows are the cluster's already (the averaging's counts). */
static int average_log_window(struct rt_trainer *t, const struct rt_step *s, double w[3],
                              bool *emit, double *grad_norm)
{
    struct average *a = t->ms;
    *emit = s->exchanged && w[2] > 0.0;
    *grad_norm = a->d.last_norm;
    return RT_OK;
}

static int average_epoch_end(struct rt_trainer *t, struct rt_epoch *e)
{
    struct average *a = t->ms;
    a->d.local_train += e->t_train;
    RT_TRY(keep_agreed(t, a));
    if (t->pos.step % t->c.sync_every != 0) {
        struct rt_tally all = {0};
        RT_TRY(average_params(t, a, &all));
        rt_epoch_add(e, &all);
        RT_TRY(keep_agreed(t, a));
    }
    return rt_dist_epoch_sums(t, e);
}

/* The members changed: go back to the last averaging (the samples since
 * are walked again by the new group), then take the most advanced
 * member's state, which is one averaging later where its averaging
 * completed and this one's did not. */
static int average_recover(struct rt_trainer *t, bool fresh)
{
    struct average *a = t->ms;
    if (!fresh && a->agreed.valid) /* (none yet: lost at the start) */
        RT_TRY(rt_commit_restore(&a->agreed, t));
    a->since = (struct rt_tally){0};
    a->commit_due = false;
    RT_TRY(rt_dist_recover(t, fresh));
    return rt_commit_take(&a->agreed, t);
}

static int average_checkpoint(struct rt_trainer *t, enum rt_ckpt_which which)
{
    struct average *a = t->ms;
    struct rt_tally all;
    if (which == RT_CKPT_STOP && !a->exchanged)
        RT_TRY(average_params(t, a, &all)); /* the checkpoint holds one model */
    return rt_dist_checkpoint(t, which);
}

static void average_destroy(struct rt_trainer *t)
{
    struct average *a = t->ms;
    if (!t->ms)
        return;
    rt_commit_free(&a->agreed);
    rt_compress_free(&a->z);
    free(a->delta);
    rt_dist_free(&a->d);
    free(a);
    t->ms = NULL;
}

const struct rt_mode_ops rt_mode_average = {
    .name = "average",
    .rows = average_rows,
    .init = average_init,
    .begin = average_begin,
    .epoch_begin = average_epoch_begin,
    .part = average_part,
    .after_backward = average_after_backward,
    .log_window = average_log_window,
    .progress = rt_mode_progress_global,
    .epoch_end = average_epoch_end,
    .evaluate = rt_dist_evaluate,
    .agree = rt_dist_agree,
    .checkpoint = average_checkpoint,
    .recover = average_recover,
    .end = rt_dist_end,
    .destroy = average_destroy,
};
