/* host_replica.c — one replica for the workers of one host (host_replica.h
 * says why and what a change of members does). */
#include "config.h"

#include "host_replica.h"

#include <math.h>
#include <string.h>

#include "status.h"

/* Floats from one region of the shared copy to the next: 64-byte aligned,
 * as rt_buf_wrap_host wants. */
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static size_t shared_floats(const struct rt_trainer *t, const struct rt_replica *r)
{
    return round16(r->np) +
           (size_t)rt_optim_state_count(t->opt) * round16(rt_optim_size(t->opt));
}

static float *state_at(struct rt_host_replica *h, const struct rt_replica *r, size_t no, int i)
{
    return h->mem + round16(r->np) + (size_t)i * round16(no);
}

/* The model's weights and the optimiser's buffers and the shared copy's
 * change places (the contents stay where they are); twice puts them back. */
static void swap_all(struct rt_host_replica *h, struct rt_trainer *t)
{
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    rt_model_swap_params(r->m, &h->own_p);
    for (int i = 0; i < rt_optim_state_count(t->opt); i++)
        rt_optim_swap_state(t->opt, i, &h->own_s[i]);
    r->pv = rt_model_params(r->m);
    r->p = rt_view_host(r->pv);
    h->on = !h->on;
}

static void drop_wraps(struct rt_host_replica *h)
{
    rt_buf_destroy(&h->own_p);
    for (int i = 0; i < 2; i++)
        rt_buf_destroy(&h->own_s[i]);
}

/* The weights and optimiser buffers the model and optimiser use now, to
 * the shared copy or from it. */
static void copy_state(struct rt_host_replica *h, struct rt_trainer *t, bool to_shared)
{
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    size_t no = rt_optim_size(t->opt);
    float *sh = h->mem, *own = r->p;
    memcpy(to_shared ? sh : own, to_shared ? own : sh, r->np * sizeof(float));
    for (int i = 0; i < rt_optim_state_count(t->opt); i++) {
        sh = state_at(h, r, no, i);
        own = rt_view_host(rt_optim_state(t->opt, i));
        memcpy(to_shared ? sh : own, to_shared ? own : sh, no * sizeof(float));
    }
}

/* Rank 0 fills the shared copy from its replica (all hold the same), the
 * others wait for it, and all train on it from now on. */
static int share(struct rt_host_replica *h, struct rt_trainer *t)
{
    const rt_collective *c = t->coll;
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    size_t no = rt_optim_size(t->opt);
    int ns = rt_optim_state_count(t->opt);
    if (t->rank == 0)
        copy_state(h, t, true);
    RT_TRY(c->ops->host_barrier(c->ctx));
    rt_dev *dev = r->odev;
    h->own_p = rt_buf_wrap_host(dev, h->mem, r->np * sizeof(float));
    for (int i = 0; i < ns; i++)
        h->own_s[i] = rt_buf_wrap_host(dev, state_at(h, r, no, i), no * sizeof(float));
    if (!h->own_p || (ns > 0 && !h->own_s[0]) || (ns > 1 && !h->own_s[1])) {
        drop_wraps(h);
        return rt_error(RT_ERR_NOMEM, "out of memory for the host's replica");
    }
    swap_all(h, t);
    drop_wraps(h); /* this worker's own buffers: the write-back holds a copy */
    h->since = 0;
    h->whole = false; /* (inside a step: its update follows) */
    return rt_commit_take(&h->back, t);
}

/* This worker's own buffers again, filled from the shared copy (from_shared)
 * or left for the caller to fill; the model and optimiser use them. */
static int own_again(struct rt_host_replica *h, struct rt_trainer *t, bool from_shared)
{
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    size_t no = rt_optim_size(t->opt);
    int ns = rt_optim_state_count(t->opt);
    h->own_p = rt_buf_new(rt_model_dev(r->m), (r->np ? r->np : 1) * sizeof(float));
    for (int i = 0; i < ns; i++)
        h->own_s[i] = rt_buf_new(r->odev, (no ? no : 1) * sizeof(float));
    if (!h->own_p || (ns > 0 && !h->own_s[0]) || (ns > 1 && !h->own_s[1])) {
        drop_wraps(h);
        return rt_error(RT_ERR_NOMEM, "out of memory for this worker's own replica (%zu "
                        "parameters)", r->np);
    }
    swap_all(h, t);
    if (from_shared)
        copy_state(h, t, false);
    drop_wraps(h); /* the wraps of the shared copy */
    h->mem = NULL; /* (the group's: it may go with the next change of members) */
    h->due = false;
    return RT_OK;
}

/* The first update of a group asks for the shared copy (every rank
 * together: the collective's answer is the same on all). */
static int try_share(struct rt_host_replica *h, struct rt_trainer *t)
{
    const rt_collective *c = t->coll;
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    h->asked = true;
    /* the same on every rank (the run's options, one binary) */
    if (!t->c.host_replica || !c || !c->ops->host_replica || !c->ops->host_barrier ||
        t->world < 2)
        return RT_OK;
    float *mem = NULL;
    RT_TRY(c->ops->host_replica(c->ctx, shared_floats(t, r), r->alias, &mem));
    if (!mem)
        return RT_OK;
    h->mem = mem;
    return share(h, t);
}

int rt_host_replica_update(struct rt_host_replica *h, struct rt_trainer *t, double norm)
{
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    if (!h->asked)
        RT_TRY(try_share(h, t));
    if (!h->on)
        return rt_optim_update(t->opt, r->pv, r->gv, norm);
    size_t lo, hi;
    rt_slice(r->np, t->world, t->rank, &lo, &hi);
    RT_TRY(rt_optim_update_range(t->opt, r->pv, r->gv, norm, lo, hi));
    /* nobody reads the weights (the next forward) before all are written */
    RT_TRY(t->coll->ops->host_barrier(t->coll->ctx));
    h->whole = true;
    h->due = ++h->since >= RT_HOST_REPLICA_WRITE_BACK;
    return RT_OK;
}

bool rt_host_replica_one_pass(const struct rt_host_replica *h, const struct rt_trainer *t)
{
    return h->on && t->coll->ops->sum_apply && !rt_optim_clips(t->opt);
}

static int apply_range(void *arg, size_t lo, size_t hi)
{
    struct rt_trainer *t = arg;
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    return rt_optim_update_part(t->opt, r->pv, r->gv, lo, hi);
}

int rt_host_replica_sum_update(struct rt_host_replica *h, struct rt_trainer *t, size_t from,
                               size_t tail, bool want_norm, double *norm)
{
    RT_ASSERT(rt_host_replica_one_pass(h, t));
    const rt_collective *c = t->coll;
    struct rt_replica *r = &((struct rt_dist *)t->ms)->r;
    double ss = 0.0;
    RT_TRY(c->ops->sum_apply(c->ctx, r->g, from, r->np + tail, tail, apply_range, t,
                             want_norm ? &ss : NULL));
    *norm = want_norm ? sqrt(ss) : NAN;
    rt_optim_update_done(t->opt, *norm);
    h->whole = true;
    h->due = ++h->since >= RT_HOST_REPLICA_WRITE_BACK;
    return RT_OK;
}

/* From a step's first collective on, another rank may be updating its
 * range (its sum completed with this rank's marks) until the barrier. The
 * write-back due is taken before: the step's counts are in the epoch's
 * sums by now, as its position wants. */
int rt_host_replica_step_begin(struct rt_host_replica *h, struct rt_trainer *t)
{
    if (!h->on)
        return RT_OK;
    h->whole = false;
    if (!h->due)
        return RT_OK;
    h->due = false;
    h->since = 0;
    return rt_commit_take(&h->back, t);
}

int rt_host_replica_leave(struct rt_host_replica *h, struct rt_trainer *t)
{
    h->asked = false; /* share again at the next step */
    if (!h->on)
        return RT_OK;
    rt_commit_free(&h->back); /* (first: the worker's own buffers come back) */
    return own_again(h, t, true);
}

/* Whole: every rank passed the last update's barrier and no step began
 * since (a change of members seen at a step's start, an admission), or
 * the step's one-pass sum was given up before any rank applied it: the
 * shared copy is copied back as it is, the step is done again. Else some
 * range may be half written: back to the write-back. */
int rt_host_replica_abandon(struct rt_host_replica *h, struct rt_trainer *t)
{
    const rt_collective *c = t->coll;
    /* (also whole: a step whose one-pass sum no rank had begun to apply,
     * the common case of a worker lost in its forward or backward) */
    if (h->whole || (h->on && c && c->ops->apply_undone && c->ops->apply_undone(c->ctx)))
        return rt_host_replica_leave(h, t);
    h->asked = false;
    if (!h->on)
        return RT_OK;
    RT_TRY(own_again(h, t, false));
    return rt_commit_restore(&h->back, t);
}

/* (while shared, the model and the optimiser hold wraps of the shared
 * copy, which they destroy without freeing it) */
void rt_host_replica_free(struct rt_host_replica *h)
{
    drop_wraps(h);
    rt_commit_free(&h->back);
}
