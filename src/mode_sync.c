/* mode_sync.c — --mode sync (the default): one global batch per step, cut by
 * the plan; the gradient is reduce-scattered, each rank updates its slice
 * of the parameters on the host, the parameters are all-gathered. The maths
 * of one machine with the whole batch, and replicas bitwise identical.
 *
 * A step goes to the network twice (reduce-scatter, all-gather), three
 * times when clipping needs the gradient's global norm before the update.
 * The norm is computed once, on the reduced slices; a --log-every step that
 * does not clip sends its slice's sum of squares with the window's sums.
 *
 * Measured and not kept: pipelining the optimiser into the collective
 * (each part of the slice updated as soon as it is summed, sent on at
 * once). On 2 cores with 2 workers the update ran on the thread that moves
 * the data, nothing overlapped, and seedcnn steps got slower (2.7-3.1 ms
 * of communication per step against 2.0-2.5 ms this way). */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "dist.h"
#include "status.h"
#include "train-testing.h"

struct sync {
    struct rt_dist d; /* first: the shared methods see a struct rt_dist */
    double slice_ss;  /* this slice's sum of squares for the log line, or NaN */
};

static int sync_rows(const struct rt_trainer *t)
{
    return t->c.partition == RT_PARTITION_BALANCED ? t->c.batch : rt_dist_even_rows(t);
}

static int sync_init(struct rt_trainer *t)
{
    struct sync *s = calloc(1, sizeof *s);
    if (!s)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    s->slice_ss = NAN;
    return rt_dist_init(t, &s->d, t->c.partition == RT_PARTITION_BALANCED, true, true,
                        t->c.batch);
}

static int sync_begin(struct rt_trainer *t) { return rt_dist_begin(t, ""); }

static int sync_epoch_begin(struct rt_trainer *t, struct rt_epoch *e) { return RT_OK; }

static int sync_part(struct rt_trainer *t, struct rt_step *s)
{
    struct rt_dist *d = t->ms;
    /* re-planned on every worker at once: the votes that asked for it
     * reached everybody */
    RT_TRY(rt_planner_replan_if_due(&d->pl, t->pos.step));
    rt_planner_part(&d->pl, s->n, &s->a, &s->b);
    rt_planner_step_begin(&d->pl, s);
    return RT_OK;
}

/* Reduce-scatter, the norm once, this rank's update, all-gather. */
static int sync_update(struct rt_trainer *t, struct sync *sy, const struct rt_step *s)
{
    const rt_collective *c = t->coll;
    struct rt_replica *r = &sy->d.r;
    RT_TRY(rt_replica_pull_grads(r));
    RT_TRY(c->ops->reduce_scatter(c->ctx, r->g, r->np));
    size_t n = r->hi - r->lo;
    rt_view gs = rt_view_at(r->gv, r->lo), ps = rt_view_at(r->pv, r->lo);
    double norm = NAN;
    sy->slice_ss = NAN;
    if (t->c.optim.clip_norm > 0.0f) {
        double ss = 0.0;
        RT_TRY(rt_op_sumsq(r->odev, n, gs, &ss));
        RT_TRY(c->ops->allreduce_f64(c->ctx, &ss, 1));
        norm = sqrt(ss);
    } else if (s->log_now) {
        RT_TRY(rt_op_sumsq(r->odev, n, gs, &sy->slice_ss));
    }
    sy->d.last_norm = norm;
    RT_TRY(rt_optim_update(t->opt, ps, gs, norm));
    RT_TRY(c->ops->all_gather(c->ctx, r->p, r->np));
    return rt_replica_push(r);
}

static int sync_after_backward(struct rt_trainer *t, struct rt_step *s)
{
    struct sync *sy = t->ms;
    const rt_collective *c = t->coll;
    RT_TRY(rt_planner_step_end(&sy->d.pl, t, s));
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

static int sync_log_window(struct rt_trainer *t, const struct rt_step *s, double w[3],
                           bool *emit, double *grad_norm)
{
    struct sync *sy = t->ms;
    if (isnan(sy->slice_ss))
        return rt_dist_log_window(t, s, w, emit, grad_norm);
    double v[4] = {w[0], w[1], w[2], sy->slice_ss};
    RT_TRY(t->coll->ops->allreduce_f64(t->coll->ctx, v, 4));
    for (int i = 0; i < 3; i++)
        w[i] = v[i];
    *emit = true;
    *grad_norm = sy->d.last_norm = sqrt(v[3]);
    return RT_OK;
}

static int sync_epoch_end(struct rt_trainer *t, struct rt_epoch *e)
{
    return rt_dist_epoch_sums(t, e);
}

static void sync_destroy(struct rt_trainer *t)
{
    struct sync *sy = t->ms;
    if (!t->ms)
        return;
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
    .end = rt_dist_end,
    .destroy = sync_destroy,
};
