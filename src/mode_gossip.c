/* mode_gossip.c — --mode gossip: asynchronous, decentralized pairwise
 * averaging (AD-PSGD style). Each worker walks a run of local batches sized
 * by its speed at its own pace and averages with a random peer at step
 * boundaries, never waiting; at each epoch's end the replicas become their
 * mean. Nobody waits for the slowest node. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dist.h"
#include "status.h"

struct gossip {
    struct rt_dist d; /* first: the shared methods see a struct rt_dist */
    float *mean;      /* np floats: the mean of the replicas */
    long epoch;
    long first, count, done; /* this worker's run of the epoch's local batches */
    struct rt_commit agreed; /* the state at the epoch's start, where all replicas
                              * are one (dist_commit.c), and at its close */
    bool linked;             /* the pairwise links are up */
};

/* The local batch: the same on every worker for the whole run (the
 * coordinator fixes it), whoever joins or leaves. */
static int gossip_rows(const struct rt_trainer *t)
{
    return t->c.local_batch > 0 ? t->c.local_batch : rt_dist_even_rows(t);
}

static int gossip_init(struct rt_trainer *t)
{
    if (!t->pairwise)
        return rt_error(RT_ERR_CONFIG, "--mode gossip needs a transport for pairwise averaging");
    /* A pair averages whole replicas that have no agreed state in common to
     * send changes from, and values rounded to 16 bits would lose the small
     * updates for good (docs/cluster.md). */
    if (t->c.compress != RT_COMPRESS_NONE)
        return rt_error(RT_ERR_CONFIG, "--compress works with --mode sync and average, not "
                        "with gossip (pairs exchange whole parameters, not changes)");
    struct gossip *g = calloc(1, sizeof *g);
    if (!g)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    RT_TRY(rt_dist_init(t, &g->d, false, false, gossip_rows(t)));
    g->d.pl.whole_epochs = true;
    if (!(g->mean = malloc((g->d.r.np ? g->d.r.np : 1) * sizeof(float))))
        return rt_error(RT_ERR_NOMEM, "out of memory");
    return RT_OK;
}

static int gossip_begin(struct rt_trainer *t)
{
    struct rt_train_pos *pos = &t->pos;
    RT_TRY(rt_dist_begin(t, ", mode gossip"));
    struct gossip *g = t->ms;
    if (!g->linked) /* a joiner's recovery linked it already */
        RT_TRY(t->pairwise->ops->begin(t->pairwise->ctx, rt_model_param_count(t->m), pos->epoch));
    g->linked = true;
    /* (a joiner may take the state of members closing the epoch: at its
     * last step, not inside it) */
    if (pos->step > pos->epoch * t->spe && pos->step < (pos->epoch + 1) * t->spe) {
        RT_TRY(rt_trainer_say(t, "ragtag: [plan] gossip: the checkpoint stopped inside epoch "
                                 "%ld; that epoch starts over",
                              pos->epoch + 1));
        pos->step = pos->epoch * t->spe;
        rt_optim_set_steps(t->opt, pos->step);
    }
    return RT_OK;
}

/* This worker's run of local batches, sized by the speeds measured so far. */
static int gossip_epoch_begin(struct rt_trainer *t, struct rt_epoch *e)
{
    struct gossip *g = t->ms;
    struct rt_planner *pl = &g->d.pl;
    /* the epoch's start is the agreement a change of members goes back
     * to, from here on: the re-plan below may meet one (the close before
     * it is not done again) */
    if (!rt_commit_here(&g->agreed, t))
        RT_TRY(rt_commit_take(&g->agreed, t));
    RT_TRY(rt_planner_replan(pl, t->pos.step, rt_planner_rate(pl), "epoch start"));
    long nb = rt_loader_batches(t->loader);
    rt_plan_shares(nb, t->world, pl->speed, NULL, pl->nshare);
    rt_plan_offsets(t->world, pl->nshare, pl->noff);
    g->epoch = e->epoch;
    g->first = pl->noff[t->rank];
    g->count = pl->nshare[t->rank];
    g->done = 0;
    if (t->rank == 0) {
        char buf[1024], ips[1024];
        int len = 0, il = 0;
        for (int r = 0; r < t->world && len < (int)sizeof buf - 24 && il < (int)sizeof ips - 24;
             r++) {
            len += snprintf(buf + len, sizeof buf - len, "%s%ld", r ? " " : "", pl->nshare[r]);
            il += snprintf(ips + il, sizeof ips - il, "%s%.0f", r ? " " : "", pl->speed[r]);
        }
        RT_TRY(rt_trainer_say(t, "ragtag: [plan] gossip epoch %ld: local batches of %d by rank: %s "
                                 "at img/s %s (%s)",
                              e->epoch + 1, gossip_rows(t), buf, ips,
                              pl->wall_rate > 0.0 ? "each over its last epoch's loop"
                                                  : "the speed probes"));
    }
    e->first = g->first;
    e->count = g->count;
    e->whole = true; /* an epoch a checkpoint stopped inside starts over */
    return RT_OK;
}

static int gossip_part(struct rt_trainer *t, struct rt_step *s)
{
    struct gossip *g = t->ms;
    s->seed = rt_step_seed(s->seed ^ ((uint64_t)(g->first + g->done) * 0x9E3779B97F4A7C15ull),
                           (long)t->rank);
    rt_planner_step_begin(&g->d.pl, s);
    return RT_OK;
}

static int gossip_after_backward(struct rt_trainer *t, struct rt_step *s)
{
    struct gossip *g = t->ms;
    RT_TRY(rt_planner_step_end(&g->d.pl, t, s));
    if (s->b > s->a) {
        rt_optim_set_steps(t->opt, g->epoch * t->spe + g->done * t->spe / (g->count ? g->count : 1));
        RT_TRY(rt_dist_local_step(t, &g->d, s->log_now));
        g->d.local_steps++;
    }
    int k = t->pairwise->ops->step(t->pairwise->ctx, g->d.r.p, g->d.r.np, true);
    if (k < 0)
        return k;
    g->d.averagings += k;
    RT_TRY(rt_replica_push(&g->d.r));
    g->done++;
    s->leave_epoch = rt_trainer_stop_asked(t); /* the epoch's end tells everybody */
    return RT_OK;
}

static int gossip_log_window(struct rt_trainer *t, const struct rt_step *s, double w[3],
                             bool *emit, double *grad_norm)
{
    struct gossip *g = t->ms;
    *emit = true; /* rank 0's own window: gossip never waits for a reduction */
    *grad_norm = g->d.last_norm;
    return RT_OK;
}

static void gossip_progress(const struct rt_trainer *t, const struct rt_epoch *e, long *done,
                            double *ips)
{
    /* this worker's part of the epoch, scaled to the epoch */
    *done = e->done * t->spe / (e->count ? e->count : 1);
    *ips = (double)*done * t->c.batch / fmax(e->t_train, 1e-9);
}

/* Every replica becomes the mean of all replicas. The consensus distance —
 * the RMS over workers of |p_i - mean|, and that relative to |mean| — says
 * how far apart they drifted. */
static int converge(struct rt_trainer *t, struct gossip *g, struct rt_epoch *e)
{
    const rt_collective *c = t->coll;
    struct rt_replica *r = &g->d.r;
    /* frozen layers below lo hold the same bits everywhere; a mean of
     * three equal floats need not give them back */
    size_t lo = rt_model_trainable_from(t->m);
    memcpy(g->mean + lo, r->p + lo, (r->np - lo) * sizeof(float));
    RT_TRY(c->ops->allreduce(c->ctx, g->mean + lo, r->np - lo));
    float inv = 1.0f / (float)t->world;
    double s[2] = {0.0, 0.0};
    for (size_t i = lo; i < r->np; i++) {
        float mean = g->mean[i] * inv;
        double d = (double)r->p[i] - (double)mean;
        s[0] += d * d;
        s[1] += (double)mean * (double)mean;
        r->p[i] = mean;
    }
    s[1] /= t->world; /* every rank adds the same |mean|^2 */
    RT_TRY(c->ops->allreduce_f64(c->ctx, s, 2));
    e->consensus = sqrt(s[0] / t->world);
    e->consensus_rel = s[1] > 0.0 ? e->consensus / sqrt(s[1]) : 0.0;
    e->has_consensus = true;
    return rt_replica_push(r);
}

/* The mean of every worker's optimiser state: so that a checkpoint, made of
 * every rank's slice, is one coherent state. */
static int average_opt(struct rt_trainer *t, struct gossip *g)
{
    float inv = 1.0f / (float)t->world;
    for (int i = 0; i < rt_optim_state_count(t->opt); i++) {
        rt_view v = rt_optim_state(t->opt, i);
        size_t no = rt_optim_size(t->opt);
        RT_TRY(t->coll->ops->allreduce(t->coll->ctx, rt_view_host(v), no));
        RT_TRY(rt_op_scale(g->d.r.odev, no, inv, v));
    }
    return RT_OK;
}

/* Nothing of this epoch may still be in flight when the ring meets; then
 * the replicas become their mean. A stop asked on any worker rides along. */
static int gossip_epoch_end(struct rt_trainer *t, struct rt_epoch *e)
{
    struct gossip *g = t->ms;
    const rt_collective *c = t->coll;
    c->ops->vote(c->ctx, rt_trainer_stop_asked(t) ? RT_VOTE_STOP : 0u);
    bool partial = e->done < e->count;
    if (e->done > 0 && e->t_train > 0.0)
        g->d.pl.wall_rate = (double)e->seen / e->t_train;
    int rc = t->pairwise->ops->drain(t->pairwise->ctx, g->d.r.p, g->d.r.np, e->epoch);
    /* the epoch's training ends when the last worker's part does */
    e->t_train = rt_now() - e->t0;
    g->d.local_train += e->t_train;
    if (rc < 0)
        return rc;
    RT_TRY(converge(t, g, e));
    RT_TRY(average_opt(t, g));
    if ((c->ops->agreed(c->ctx) & RT_VOTE_STOP) || partial) {
        t->res->steps = t->pos.step; /* the epoch starts over on --resume */
        RT_TRY(rt_dist_checkpoint(t, RT_CKPT_LAST));
        return rt_error(RT_ERR_INTERRUPTED, "training interrupted in epoch %ld", e->epoch + 1);
    }
    t->pos.step = (e->epoch + 1) * t->spe;
    rt_optim_set_steps(t->opt, t->pos.step);
    RT_TRY(rt_dist_epoch_sums(t, e));
    return rt_commit_take(&g->agreed, t); /* a change of members in the close redoes it */
}

/* The members changed: no step is global in gossip, so the epoch's walk
 * starts over from the state every replica shared at its start (or its
 * close, where the source had closed it), with new links and shares for
 * the new group. */
static int gossip_recover(struct rt_trainer *t, bool fresh)
{
    struct gossip *g = t->ms;
    if (!fresh && g->agreed.valid) /* (none yet: lost at the start) */
        RT_TRY(rt_commit_restore(&g->agreed, t));
    RT_TRY(rt_dist_recover(t, fresh));
    RT_TRY(t->pairwise->ops->begin(t->pairwise->ctx, rt_model_param_count(t->m), t->pos.epoch));
    g->linked = true;
    return rt_commit_take(&g->agreed, t);
}

static void gossip_destroy(struct rt_trainer *t)
{
    struct gossip *g = t->ms;
    if (!t->ms)
        return;
    free(g->mean);
    rt_commit_free(&g->agreed);
    rt_dist_free(&g->d);
    free(g);
    t->ms = NULL;
}

const struct rt_mode_ops rt_mode_gossip = {
    .name = "gossip",
    .rows = gossip_rows,
    .init = gossip_init,
    .begin = gossip_begin,
    .epoch_begin = gossip_epoch_begin,
    .part = gossip_part,
    .after_backward = gossip_after_backward,
    .log_window = gossip_log_window,
    .progress = gossip_progress,
    .epoch_end = gossip_epoch_end,
    .evaluate = rt_dist_evaluate,
    .agree = rt_dist_agree,
    .checkpoint = rt_dist_checkpoint,
    .recover = gossip_recover,
    .end = rt_dist_end,
    .destroy = gossip_destroy,
};
