/* mode_average.c — --mode average: local SGD. Every worker steps on its own
 * part of each batch with the whole optimiser state; every --sync-every H
 * steps the parameters and the optimiser state are averaged (CaffeOnSpark's
 * model averaging, for slow networks). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "dist.h"
#include "status.h"
#include "train-testing.h"

struct average {
    struct rt_dist d; /* first: the shared methods see a struct rt_dist */
    double since;     /* samples since the last averaging */
    bool exchanged;   /* the last step averaged */
};

static int average_rows(const struct rt_trainer *t)
{
    return t->c.partition == RT_PARTITION_BALANCED ? t->c.batch : rt_dist_even_rows(t);
}

static int average_init(struct rt_trainer *t)
{
    struct average *a = calloc(1, sizeof *a);
    if (!a)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    return rt_dist_init(t, &a->d, t->c.partition == RT_PARTITION_BALANCED, true,
                        t->c.batch);
}

static int average_begin(struct rt_trainer *t)
{
    char words[64];
    snprintf(words, sizeof words, ", mode average every %d steps", t->c.sync_every);
    return rt_dist_begin(t, words);
}

static int average_epoch_begin(struct rt_trainer *t, struct rt_epoch *e) { return RT_OK; }

static int average_part(struct rt_trainer *t, struct rt_step *s)
{
    struct rt_dist *d = t->ms;
    RT_TRY(rt_planner_replan_if_due(&d->pl, t->pos.step));
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
 * Adam). Every rank ends with the same bits: one ring sum, one scale. */
static int average_params(struct rt_trainer *t, struct average *a)
{
    const rt_collective *c = t->coll;
    struct rt_replica *r = &a->d.r;
    double tot = a->since;
    RT_TRY(c->ops->allreduce_f64(c->ctx, &tot, 1));
    if (tot > 0.0) {
        float w = (float)(a->since / tot);
        RT_TRY(rt_op_scale(r->odev, r->np, w, r->pv));
        RT_TRY(c->ops->allreduce(c->ctx, r->p, r->np));
        for (int i = 0; i < rt_optim_state_count(t->opt); i++) {
            rt_view v = rt_optim_state(t->opt, i);
            RT_TRY(rt_op_scale(r->odev, r->np, w, v));
            RT_TRY(c->ops->allreduce(c->ctx, rt_view_host(v), r->np));
        }
    }
    a->since = 0.0;
    return rt_replica_push(r);
}

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
        RT_TRY(rt_dist_local_step(t, &a->d));
        a->since += nl;
        a->d.local_steps++;
    }
    uint32_t agreed = 0;
    if (exchange) {
        RT_TRY(average_params(t, a));
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

static int average_epoch_end(struct rt_trainer *t, struct rt_epoch *e)
{
    struct average *a = t->ms;
    a->d.local_train += e->t_train;
    if (t->pos.step % t->c.sync_every != 0)
        RT_TRY(average_params(t, a));
    return rt_dist_epoch_sums(t, e);
}

static int average_checkpoint(struct rt_trainer *t, enum rt_ckpt_which which)
{
    struct average *a = t->ms;
    if (which == RT_CKPT_STOP && !a->exchanged)
        RT_TRY(average_params(t, a)); /* the checkpoint holds one model */
    return rt_dist_checkpoint(t, which);
}

static void average_destroy(struct rt_trainer *t)
{
    struct average *a = t->ms;
    if (!t->ms)
        return;
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
    .log_window = rt_dist_log_window,
    .progress = rt_mode_progress_global,
    .epoch_end = average_epoch_end,
    .evaluate = rt_dist_evaluate,
    .agree = rt_dist_agree,
    .checkpoint = average_checkpoint,
    .end = rt_dist_end,
    .destroy = average_destroy,
};
