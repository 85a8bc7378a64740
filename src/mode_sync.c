/* mode_sync.c — --mode sync (the default): one global batch per step, cut by
 * the plan; the gradient is summed over the workers with one allreduce and
 * every worker runs the same update on the host, on all the parameters.
 * The maths of one machine with the whole batch, and replicas bitwise
 * identical (every rank applies the same code to the same bits).
 *
 * Every worker holds the whole optimiser state, so a lost worker takes none
 * with it, and a step is all or nothing on each worker: its replica moves
 * only once its allreduce completed. The step's counts (loss, correct,
 * samples, which samples: src/tally.h) ride in the gradient's spare tail,
 * so every worker knows the batch's, and the epoch's, counts at once. A
 * step goes to the network once.
 *
 * Measured before: each rank updating its slice only, between a
 * reduce-scatter and an all-gather of the parameters (the same bytes on
 * the wire), left the optimiser state of a lost worker's slice nowhere.
 * The replicated update costs each worker the whole update instead of a
 * 1/N slice (bench/README.md has the figures). Where the workers of one
 * host sum in place they share one copy of the weights and optimiser
 * state instead and each updates its slice of it, in the pass that sums
 * that slice (host_replica.h: written back to every worker's own replica
 * every few steps, which a change of members goes back to).
 *
 * With --overlap (the default) the gradient goes to the network in buckets
 * as backward finishes them (buckets.h), the last layers' first, while the
 * earlier layers still compute; the sums are the bits of the one allreduce
 * (the ring cuts every bucket by the whole buffer's segments). --compress
 * sends them as 16 bits with error feedback (compress.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "buckets.h"
#include "compress.h"
#include "dist.h"
#include "host_replica.h"
#include "tally.h"
#include "status.h"
#include "train-testing.h"

struct sync {
    struct rt_dist d; /* first: the shared methods see a struct rt_dist */
    size_t lo;        /* the first trainable parameter: the exchange starts there */
    bool buckets;     /* the gradient travels in buckets (else one allreduce) */
    struct rt_host_replica hr; /* one copy of the weights for the workers of a host */
    struct rt_buckets bk;
    struct rt_compress z; /* --compress: the wire buffer and the carried error */
};

/* Any share up to the whole batch: the members, and so the shares, change. */
/* The whole batch: a balanced share may grow to it. A worker whose memory
 * holds less (mem_rows) builds its buffers for that, and the planner never
 * gives it more. */
static int sync_rows(const struct rt_trainer *t)
{
    long cap = t->c.mem_rows;
    bool capped = cap > 0 && cap < t->c.batch && t->c.partition == RT_PARTITION_BALANCED;
    return capped ? (int)cap : t->c.batch;
}

static int sync_init(struct rt_trainer *t)
{
    struct sync *s = calloc(1, sizeof *s);
    if (!s)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    s->lo = rt_model_trainable_from(t->m);
    RT_TRY(rt_dist_init(t, &s->d, t->c.partition == RT_PARTITION_BALANCED, true,
                        t->c.batch));
    const rt_collective *c = t->coll;
    bool ranges = c->ops->submit && c->ops->wait;
    bool compress = t->c.compress != RT_COMPRESS_NONE;
    if (compress && !ranges)
        return rt_error(RT_ERR_CONFIG, "--compress %s: these workers' collectives cannot "
                        "reduce 16-bit ranges", rt_compress_name(t->c.compress));
    s->buckets = ranges && (t->c.overlap || compress);
    if (!s->buckets)
        return RT_OK;
    struct rt_replica *r = &s->d.r;
    if (compress)
        RT_TRY(rt_compress_init(&s->z, t->c.compress, r->np + RT_TALLY_FLOATS, r->np));
    RT_TRY(rt_buckets_init(&s->bk, c, r, t->m, s->lo, (size_t)t->c.bucket_kb << 10,
                           compress ? &s->z : NULL));
    if (t->c.overlap)
        rt_model_set_backward_hook(t->m, rt_buckets_hook, &s->bk);
    return RT_OK;
}

/* The summary line says what a step sends when layers are frozen. */
static int sync_begin(struct rt_trainer *t)
{
    struct sync *sy = t->ms;
    size_t np = rt_model_param_count(t->m);
    char words[160];
    int n = snprintf(words, sizeof words, "; gradient exchange: %zu of %zu parameters (%zu "
                                          "bytes a step", np - sy->lo, np,
                     (np - sy->lo + RT_TALLY_FLOATS) * sizeof(float));
    snprintf(words + n, sizeof words - (size_t)n, sy->lo ? "; frozen below parameter %zu)" : ")",
             sy->lo);
    return rt_dist_begin(t, words);
}

static int sync_epoch_begin(struct rt_trainer *t, struct rt_epoch *e)
{
    e->sums_global = true; /* every step's counts are the batch's */
    return RT_OK;
}

/* The host's one replica sums and updates in one pass: no buckets (a
 * range summed in place waits for the end of backward anyway). */
static bool one_pass(const struct rt_trainer *t, const struct sync *sy)
{
    return t->c.compress == RT_COMPRESS_NONE && rt_host_replica_one_pass(&sy->hr, t);
}

static int sync_part(struct rt_trainer *t, struct rt_step *s)
{
    struct rt_dist *d = t->ms;
    const rt_collective *c = t->coll;
    if (c->ops->changing && c->ops->changing(c->ctx)) {
        s->not_begun = true; /* the members change: regroup at this step's start */
        return rt_error(RT_ERR_REGROUP, "the members change before step %ld", t->pos.step);
    }
    /* re-planned on every worker at once: the votes that asked for it
     * reached everybody */
    struct sync *sy = t->ms;
    RT_TRY(rt_host_replica_step_begin(&sy->hr, t));
    RT_TRY(rt_planner_replan_if_due(&d->pl, t->pos.step));
    RT_TRY(rt_planner_check_leave(&d->pl));
    rt_planner_part(&d->pl, s->n, &s->a, &s->b);
    rt_planner_step_begin(&d->pl, s);
    bool early = sy->buckets && !one_pass(t, sy);
    if (early)
        rt_buckets_arm(&sy->bk);
    /* gradients sent while backward runs want the large ones first; a sum
     * after backward reads them best last (model.h) */
    rt_model_defer_weight_grads(t->m, !early);
    return RT_OK;
}

/* The gradient and the step's counts summed, the norm when it is needed,
 * the update of all the parameters. */
static int sync_update(struct rt_trainer *t, struct sync *sy, struct rt_step *s)
{
    const rt_collective *c = t->coll;
    struct rt_replica *r = &sy->d.r;
    /* frozen layers below lo: their gradients never travel */
    size_t lo = sy->lo;
    if (one_pass(t, sy)) {
        rt_tally_encode(&s->tally, r->g + r->np);
        RT_TRY(rt_host_replica_sum_update(&sy->hr, t, lo, RT_TALLY_FLOATS, s->log_now,
                                          &sy->d.last_norm));
        rt_tally_decode(r->g + r->np, &s->tally);
        return rt_replica_push(r);
    }
    if (sy->buckets) {
        rt_tally_encode(&s->tally, r->g + r->np);
        RT_TRY(rt_buckets_finish(&sy->bk));
    } else {
        RT_TRY(rt_replica_pull_grads(r));
        rt_tally_encode(&s->tally, r->g + r->np);
        RT_TRY(c->ops->allreduce(c->ctx, r->g + lo, r->np - lo + RT_TALLY_FLOATS));
    }
    rt_tally_decode(r->g + r->np, &s->tally);
    double norm = NAN;
    if (t->c.optim.clip_norm > 0.0f || s->log_now) {
        double ss = 0.0;
        RT_TRY(rt_op_sumsq(r->odev, r->np - lo, rt_view_at(r->gv, lo), &ss));
        norm = sqrt(ss);
    }
    sy->d.last_norm = norm;
    RT_TRY(rt_host_replica_update(&sy->hr, t, norm));
    return rt_replica_push(r);
}

static int sync_after_backward(struct rt_trainer *t, struct rt_step *s)
{
    struct sync *sy = t->ms;
    const rt_collective *c = t->coll;
    if (sy->buckets) {
        /* backward is over (a standby worker's speed probe runs one more,
         * whose gradient is not the step's) */
        rt_buckets_disarm(&sy->bk);
        int rc = rt_planner_step_end(&sy->d.pl, t, s);
        if (rc < 0)
            rt_buckets_abandon(&sy->bk);
        RT_TRY(rc);
    } else {
        RT_TRY(rt_planner_step_end(&sy->d.pl, t, s));
    }
    c->ops->vote(c->ctx, (rt_trainer_stop_asked(t) ? RT_VOTE_STOP : 0u) |
                             rt_planner_vote(&sy->d.pl));
    RT_TRY(sync_update(t, sy, s));
    uint32_t agreed = c->ops->agreed(c->ctx);
    rt_planner_agreed(&sy->d.pl, agreed, t->pos.step);
    t->pos.step++;
    s->exchanged = true;
    s->stop = (agreed & RT_VOTE_STOP) ||
              rt_train_testing_stop_at(&t->c, t->pos.step);
    return RT_OK;
}

/* The window's sums are the batches' already (the counts travel with the
 * gradient), and so is the norm. */
static int sync_log_window(struct rt_trainer *t, const struct rt_step *s, double w[3],
                           bool *emit, double *grad_norm)
{
    struct sync *sy = t->ms;
    *emit = true;
    *grad_norm = sy->d.last_norm;
    return RT_OK;
}

/* The evaluation, checkpoints and best weights read each worker's own
 * replica. */
static int sync_epoch_end(struct rt_trainer *t, struct rt_epoch *e)
{
    RT_TRY(rt_host_replica_leave(&((struct sync *)t->ms)->hr, t));
    return rt_dist_epoch_sums(t, e);
}

/* A shared copy may be half written by a worker that died: each goes back
 * to its own replica's last write-back, then to the most advanced. */
static int sync_recover(struct rt_trainer *t, bool fresh)
{
    RT_TRY(rt_host_replica_abandon(&((struct sync *)t->ms)->hr, t));
    return rt_dist_recover(t, fresh);
}

static int sync_end(struct rt_trainer *t)
{
    RT_TRY(rt_host_replica_leave(&((struct sync *)t->ms)->hr, t));
    return rt_dist_end(t);
}

static void sync_destroy(struct rt_trainer *t)
{
    struct sync *sy = t->ms;
    if (!t->ms)
        return;
    if (sy->buckets) {
        rt_buckets_abandon(&sy->bk);
        if (t->m)
            rt_model_set_backward_hook(t->m, NULL, NULL);
    }
    rt_buckets_free(&sy->bk);
    rt_compress_free(&sy->z);
    rt_host_replica_free(&sy->hr);
    rt_dist_free(&sy->d);
    free(sy);
    t->ms = NULL;
}

const struct rt_mode_ops rt_mode_sync = {
    .name = "sync",
    .rows = sync_rows,
    .init = sync_init,
    .begin = sync_begin,
    .epoch_begin = sync_epoch_begin,
    .part = sync_part,
    .after_backward = sync_after_backward,
    .log_window = sync_log_window,
    .progress = rt_mode_progress_global,
    .epoch_end = sync_epoch_end,
    .evaluate = rt_dist_evaluate,
    .agree = rt_dist_agree,
    .checkpoint = rt_dist_checkpoint,
    .recover = sync_recover,
    .end = sync_end,
    .destroy = sync_destroy,
};
