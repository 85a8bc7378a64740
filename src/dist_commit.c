/* dist_commit.c — the last state every member agreed on, for the modes
 * whose replicas part between agreements (average, gossip).
 *
 * In sync mode every member holds a whole state at most one step from the
 * others', so a change of members redoes the step in flight. Between two
 * averagings (average) or within an epoch (gossip) each replica has moved
 * on its own, and a lost member's moves since the last agreement leave
 * with it: its samples were seen by no one that remains. So each member
 * keeps a copy of the state at the last agreement (weights, batch-norm
 * state, optimiser state, position, the epoch's sums over all members) and
 * the new group goes on from there: the samples since are used once more,
 * by the members that are left, and counted once. The cost is one copy of
 * the weights and the optimiser state per member, taken at each agreement
 * (memcpy time, no traffic). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "status.h"

int rt_commit_take(struct rt_commit *k, struct rt_trainer *t)
{
    struct rt_dist *d = t->ms;
    struct rt_replica *r = &d->r;
    int nopt = rt_optim_state_count(t->opt);
    if (!k->buf) {
        k->floats = r->np + rt_optim_size(t->opt) * (size_t)nopt + r->ns;
        if (!(k->buf = malloc((k->floats ? k->floats : 1) * sizeof(float))))
            return rt_error(RT_ERR_NOMEM, "out of memory for the copy of the agreed state "
                                          "(%zu floats)", k->floats);
    }
    /* r->p is current: average and gossip update the host replica and push
     * it (no download); the batch-norm state lives on the device. */
    RT_TRY(rt_replica_pull_state(r));
    float *p = k->buf;
    memcpy(p, r->p, r->np * sizeof(float));
    p += r->np;
    size_t no = rt_optim_size(t->opt); /* the trainable parameters' */
    for (int i = 0; i < nopt; i++, p += no)
        memcpy(p, rt_view_host(rt_optim_state(t->opt, i)), no * sizeof(float));
    if (r->ns)
        memcpy(p, r->hstate, r->ns * sizeof(float));
    k->pos = t->pos;
    k->ep = *t->ep;
    k->valid = true;
    return RT_OK;
}

/* The agreed epoch sums and position back in e; the clocks go on. */
static void restore_epoch(const struct rt_commit *k, struct rt_epoch *e)
{
    double t_epoch = e->t_epoch, t0 = e->t0, t_train = e->t_train;
    long redone = e->epoch == k->ep.epoch ? e->redone : 0;
    *e = k->ep;
    e->t_epoch = k->ep.epoch == e->epoch ? t_epoch : e->t_epoch;
    e->t0 = t0;
    e->t_train = t_train;
    e->redone = redone;
}

int rt_commit_restore(const struct rt_commit *k, struct rt_trainer *t)
{
    struct rt_dist *d = t->ms;
    struct rt_replica *r = &d->r;
    if (!k->valid)
        return rt_error(RT_ERR_NET, "no agreed state to go back to");
    const float *p = k->buf;
    memcpy(r->p, p, r->np * sizeof(float));
    p += r->np;
    size_t no = rt_optim_size(t->opt);
    for (int i = 0; i < rt_optim_state_count(t->opt); i++, p += no)
        memcpy(rt_view_host(rt_optim_state(t->opt, i)), p, no * sizeof(float));
    if (r->ns)
        memcpy(r->hstate, p, r->ns * sizeof(float));
    RT_TRY(rt_replica_push(r));
    RT_TRY(rt_replica_push_state(r));
    uint64_t seed = t->pos.seed;
    t->pos = k->pos;
    t->pos.seed = seed;
    restore_epoch(k, t->ep);
    rt_optim_set_steps(t->opt, t->pos.step);
    d->no_state = false; /* whole again, if older than what a recovery was bringing */
    return RT_OK;
}

bool rt_commit_here(const struct rt_commit *k, const struct rt_trainer *t)
{
    return k->valid && k->pos.step == t->pos.step && k->ep.epoch == t->ep->epoch;
}

void rt_commit_free(struct rt_commit *k)
{
    free(k->buf);
    *k = (struct rt_commit){0};
}
