/* replica.c — the host copy of a data-parallel worker's model. */
#include "config.h"

#include "replica.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

/* Where the host gradient lives: memory the other workers of this host
 * read in place, when the collective offers it (collective.h). */
static float *shared_grads(const rt_collective *coll, size_t floats)
{
    if (!coll || !coll->ops->shared_floats)
        return NULL;
    return coll->ops->shared_floats(coll->ctx, floats);
}

int rt_replica_init(struct rt_replica *r, const rt_collective *coll, rt_model *m, int threads)
{
    memset(r, 0, sizeof *r);
    r->coll = coll;
    r->m = m;
    r->np = rt_model_param_count(m);
    r->ns = rt_model_state_count(m);
    rt_dev *dev = rt_model_dev(m);
    size_t gfloats = r->np + RT_MODEL_GRAD_SPARE;
    float *shared = shared_grads(coll, gfloats);
    if (rt_view_host(rt_model_params(m)) && !strcmp(rt_dev_backend(dev), "cpu")) {
        if (shared)
            RT_TRY(rt_model_use_grad_memory(m, shared, gfloats));
        r->alias = true;
        r->odev = dev;
        r->pv = rt_model_params(m);
        r->gv = rt_model_grads(m);
    } else {
        if (!(r->hdev = rt_dev_open("cpu", 0, threads)))
            return RT_ERR_DEVICE;
        r->odev = r->hdev;
        r->hp = rt_buf_new(r->hdev, (r->np ? r->np : 1) * sizeof(float));
        r->hg = shared ? rt_buf_wrap_host(r->hdev, shared, gfloats * sizeof(float))
                       : rt_buf_new(r->hdev, gfloats * sizeof(float));
        if (!r->hp || !r->hg)
            return rt_error(RT_ERR_NOMEM, "no host memory for a copy of %zu parameters", r->np);
        r->pv = rt_buf_view(r->hp);
        r->gv = rt_buf_view(r->hg);
    }
    r->p = rt_view_host(r->pv);
    r->g = rt_view_host(r->gv);
    if (r->ns && !(r->hstate = malloc(r->ns * sizeof(float))))
        return rt_error(RT_ERR_NOMEM, "no host memory for the model state");
    return RT_OK;
}

void rt_replica_free(struct rt_replica *r)
{
    rt_buf_destroy(&r->hp);
    rt_buf_destroy(&r->hg);
    rt_dev_close(&r->hdev);
    free(r->hstate);
    r->hstate = NULL;
}

int rt_replica_pull(struct rt_replica *r)
{
    if (r->alias)
        return RT_OK;
    return rt_download(rt_model_dev(r->m), r->p, rt_model_params(r->m), r->np * sizeof(float));
}

int rt_replica_push(struct rt_replica *r)
{
    if (r->alias)
        return RT_OK;
    return rt_upload(rt_model_dev(r->m), rt_model_params(r->m), r->p, r->np * sizeof(float));
}

int rt_replica_pull_grads(struct rt_replica *r)
{
    if (r->alias)
        return RT_OK;
    return rt_download(rt_model_dev(r->m), r->g, rt_model_grads(r->m), r->np * sizeof(float));
}

int rt_replica_pull_grads_range(struct rt_replica *r, size_t lo, size_t hi)
{
    RT_ASSERT(lo <= hi && hi <= r->np);
    if (r->alias || lo == hi)
        return RT_OK;
    return rt_download(rt_model_dev(r->m), r->g + lo, rt_view_at(rt_model_grads(r->m), lo),
                       (hi - lo) * sizeof(float));
}

int rt_replica_pull_state(struct rt_replica *r)
{
    if (!r->ns)
        return RT_OK;
    return rt_download(rt_model_dev(r->m), r->hstate, rt_model_state(r->m), r->ns * sizeof(float));
}

int rt_replica_push_state(struct rt_replica *r)
{
    if (!r->ns)
        return RT_OK;
    return rt_upload(rt_model_dev(r->m), rt_model_state(r->m), r->hstate, r->ns * sizeof(float));
}

int rt_replica_broadcast(struct rt_replica *r)
{
    const rt_collective *c = r->coll;
    RT_TRY(rt_replica_pull(r));
    RT_TRY(c->ops->broadcast(c->ctx, r->p, r->np * sizeof(float), 0));
    RT_TRY(rt_replica_push(r));
    if (!r->ns)
        return RT_OK;
    RT_TRY(rt_replica_pull_state(r));
    RT_TRY(c->ops->broadcast(c->ctx, r->hstate, r->ns * sizeof(float), 0));
    return rt_replica_push_state(r);
}

/* Batch-norm running statistics follow each worker's own share during an
 * epoch; at its end they are averaged, so evaluation, checkpoints and the
 * next epoch start from one state on every replica. */
int rt_replica_average_state(struct rt_replica *r)
{
    const rt_collective *c = r->coll;
    if (!r->ns || c->world == 1)
        return RT_OK;
    RT_TRY(rt_replica_pull_state(r));
    RT_TRY(c->ops->allreduce(c->ctx, r->hstate, r->ns));
    float inv = 1.0f / (float)c->world;
    for (size_t i = 0; i < r->ns; i++)
        r->hstate[i] *= inv;
    return rt_replica_push_state(r);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

int rt_replica_hash(struct rt_replica *r, uint64_t *out)
{
    RT_TRY(rt_replica_pull(r));
    uint64_t h = fnv1a(0xcbf29ce484222325ull, r->p, r->np * sizeof(float));
    if (r->ns) {
        RT_TRY(rt_replica_pull_state(r));
        h = fnv1a(h, r->hstate, r->ns * sizeof(float));
    }
    *out = h;
    return RT_OK;
}
