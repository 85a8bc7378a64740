/* dist_recover.c — a data-parallel run after its members changed.
 *
 * A worker was lost or one joined; the collective that noticed did not
 * complete everywhere: some members may have finished the step (or the
 * epoch's close) and others not. Every member updates its replica only
 * after its collective completed, so each holds a whole state, at most
 * one step apart. The new group picks the most advanced member and every
 * other takes its state: position, weights, batch-norm state, the whole
 * optimiser state, the epoch's sums, the best weights. A joining worker
 * takes it the same way. Then the shares are planned for the new group. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "dist.h"
#include "status.h"

#define COLL(t) ((t)->coll->ops)
#define CTX(t) ((t)->coll->ctx)

/* What travels besides the buffers. */
struct recover_head {
    struct rt_train_pos pos;
    long ep_epoch, correct, seen;
    double loss_sum, used[3];
    unsigned char whole, sums_global, have_best, pad;
};

/* How far a member got: two per step, the epoch's close half a step; -1
 * for a member that joined and holds nothing yet. */
static double progress_key(const struct rt_trainer *t, bool fresh)
{
    if (fresh)
        return -1.0;
    return 2.0 * (double)t->pos.step + (t->pos.step <= t->pos.epoch * t->spe ? 1.0 : 0.0);
}

/* The member whose state everybody takes: the most advanced, the lowest
 * rank among equals (every member computes the same). */
static int find_source(struct rt_trainer *t, bool fresh, int *src)
{
    double keys[RT_MAX_WORKERS];
    for (int r = 0; r < t->world; r++)
        keys[r] = 0.0;
    keys[t->rank] = progress_key(t, fresh) + 2.0;
    RT_TRY(COLL(t)->allreduce_f64(CTX(t), keys, (size_t)t->world));
    int best = 0;
    for (int r = 1; r < t->world; r++)
        if (keys[r] > keys[best])
            best = r;
    if (keys[best] < 2.0)
        return rt_error(RT_ERR_NO_STATE, "no member of the new group holds the run's state (all "
                                         "%d just joined)", t->world);
    *src = best;
    return RT_OK;
}

static void head_fill(const struct rt_trainer *t, struct recover_head *h)
{
    const struct rt_epoch *e = t->ep;
    *h = (struct recover_head){.pos = t->pos, .ep_epoch = e->epoch, .correct = e->correct,
                               .seen = e->seen, .loss_sum = e->loss_sum, .whole = e->whole,
                               .sums_global = e->sums_global, .have_best = t->have_best};
    memcpy(h->used, e->used, sizeof h->used);
}

static void head_take(struct rt_trainer *t, const struct recover_head *h)
{
    struct rt_epoch *e = t->ep;
    uint64_t seed = t->pos.seed;
    if (e->epoch != h->ep_epoch) { /* the source is in the next epoch already */
        *e = (struct rt_epoch){.epoch = h->ep_epoch, .t_epoch = rt_now(), .t0 = rt_now()};
    }
    t->pos = h->pos;
    t->pos.seed = seed;
    e->correct = h->correct;
    e->seen = h->seen;
    e->loss_sum = h->loss_sum;
    memcpy(e->used, h->used, sizeof e->used);
    e->whole = h->whole;
    e->sums_global = h->sums_global;
    t->have_best = h->have_best;
}

/* The source's buffers to everybody. */
static int share_state(struct rt_trainer *t, struct rt_dist *d, int src, bool best)
{
    struct rt_replica *r = &d->r;
    if (t->rank == src) {
        RT_TRY(rt_replica_pull(r));
        RT_TRY(rt_replica_pull_state(r));
    }
    RT_TRY(COLL(t)->broadcast(CTX(t), r->p, r->np * sizeof(float), src));
    if (r->ns)
        RT_TRY(COLL(t)->broadcast(CTX(t), r->hstate, r->ns * sizeof(float), src));
    for (int i = 0; i < rt_optim_state_count(t->opt); i++)
        RT_TRY(COLL(t)->broadcast(CTX(t), rt_view_host(rt_optim_state(t->opt, i)),
                                  rt_optim_size(t->opt) * sizeof(float), src));
    if (best && t->best_host)
        RT_TRY(COLL(t)->broadcast(CTX(t), t->best_host, (r->np + r->ns) * sizeof(float), src));
    if (t->rank != src) {
        RT_TRY(rt_replica_push(r));
        RT_TRY(rt_replica_push_state(r));
    }
    return RT_OK;
}

int rt_dist_recover(struct rt_trainer *t, bool fresh)
{
    struct rt_dist *d = t->ms;
    int src;
    RT_TRY(find_source(t, fresh || d->no_state, &src));
    struct recover_head h;
    head_fill(t, &h);
    RT_TRY(COLL(t)->broadcast(CTX(t), &h, sizeof h, src));
    /* A receiver cut off in the middle holds half of two states: none it
     * may give (its progress key says so) until a recovery completes. */
    if (t->rank != src)
        d->no_state = true;
    RT_TRY(share_state(t, d, src, h.have_best));
    if (t->rank != src)
        head_take(t, &h);
    rt_optim_set_steps(t->opt, t->pos.step);
    d->no_state = false;
    RT_TRY(rt_planner_regroup(&d->pl));
    if (t->rank == 0)
        RT_TRY(rt_trainer_say(t, "ragtag: [members] %d %s on from step %ld (epoch %ld) "
                                 "with the state of rank %d", t->world,
                              t->world == 1 ? "worker goes" : "workers go",
                              t->pos.step, t->pos.epoch + 1, src));
    return RT_OK;
}
