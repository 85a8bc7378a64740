/* buckets.c — a sync step's gradient reduced in buckets (see buckets.h). */
#include "config.h"

#include "buckets.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "status.h"
#include "tally.h"

int rt_buckets_init(struct rt_buckets *bk, const rt_collective *c, struct rt_replica *r,
                    const rt_model *m, size_t from, size_t bucket_bytes,
                    struct rt_compress *z)
{
    memset(bk, 0, sizeof *bk);
    RT_ASSERT(c->ops->submit && c->ops->wait);
    bk->coll = c;
    bk->r = r;
    bk->z = z;
    bk->n = r->np + RT_TALLY_FLOATS;
    int nt = rt_model_tensor_count(m);
    if (!(bk->cut = malloc(((size_t)nt + 2) * sizeof *bk->cut)))
        return rt_error(RT_ERR_NOMEM, "out of memory for the gradient's buckets");
    /* From the top: tensors start at ascending offsets (layer order). */
    size_t hi = r->np;
    bk->cut[0] = hi;
    bk->nb = 0;
    for (int i = nt - 1; i >= 0; i--) {
        struct rt_tensor_info ti;
        RT_TRY(rt_model_tensor_info(m, i, &ti));
        if (ti.state || ti.offset < from)
            continue;
        RT_ASSERT(ti.offset + ti.count <= hi || hi == r->np);
        if (ti.offset > from && (hi - ti.offset) * sizeof(float) >= bucket_bytes) {
            bk->cut[++bk->nb] = ti.offset;
            hi = ti.offset;
        }
    }
    if (hi > from || bk->nb == 0)
        bk->cut[++bk->nb] = from;
    return RT_OK;
}

void rt_buckets_free(struct rt_buckets *bk)
{
    free(bk->cut);
    bk->cut = NULL;
}

void rt_buckets_arm(struct rt_buckets *bk)
{
    rt_buckets_abandon(bk);
    bk->err = RT_OK;
    bk->armed = true;
}

void rt_buckets_disarm(struct rt_buckets *bk) { bk->armed = false; }

/* Bucket b (the tally when b == nb) to the network. A float gradient in
 * one bucket that has not left yet goes with the tally, as one range (the
 * two are contiguous): one collective a step, as without buckets. */
static int submit_one(struct rt_buckets *bk)
{
    const rt_collective *c = bk->coll;
    struct rt_replica *r = bk->r;
    int b = bk->submitted;
    void *buf = r->g;
    enum rt_elem elem = RT_ELEM_F32;
    size_t lo = r->np, hi = bk->n;
    bool with_tally = b == 0 && bk->nb == 1 && !bk->z && !bk->armed;
    if (b < bk->nb) {
        lo = bk->cut[b + 1];
        hi = with_tally ? bk->n : bk->cut[b];
        RT_TRY(rt_replica_pull_grads_range(r, lo, bk->cut[b]));
        if (bk->z) {
            rt_compress_put(bk->z, r->g + lo, lo, hi - lo);
            buf = bk->z->wire;
            elem = bk->z->elem;
        }
    }
    RT_TRY(c->ops->submit(c->ctx, buf, elem, bk->n, lo, hi));
    bk->submitted += with_tally ? 2 : 1;
    return RT_OK;
}

/* The oldest range back: widened into the gradient when compressed. */
static int wait_one(struct rt_buckets *bk)
{
    const rt_collective *c = bk->coll;
    int b = bk->waited++;
    if (b == 0 && bk->nb == 1 && bk->submitted == 2 && !bk->z)
        bk->waited++; /* the gradient and the tally went as one range */
    int rc = c->ops->wait(c->ctx);
    if (rc >= 0 && bk->z && b < bk->nb)
        rt_compress_get(bk->z, bk->r->g + bk->cut[b + 1], bk->cut[b + 1],
                        bk->cut[b] - bk->cut[b + 1]);
    return rc;
}

void rt_buckets_abandon(struct rt_buckets *bk)
{
    bk->armed = false;
    while (bk->waited < bk->submitted)
        if (wait_one(bk) < 0)
            rt_error_clear();
    bk->submitted = bk->waited = 0;
}

int rt_buckets_hook(void *arg, size_t lo, size_t hi)
{
    struct rt_buckets *bk = arg;
    (void)hi;
    /* a float gradient in one bucket is final only at the end of backward:
     * it leaves then, with the tally (submit_one) */
    if (!bk->armed || bk->err < 0 || (bk->nb == 1 && !bk->z))
        return RT_OK;
    /* every bucket at or above lo is final. A failure (the members changed)
     * is the step's, handled after backward: backward goes on. */
    while (bk->submitted < bk->nb && bk->cut[bk->submitted + 1] >= lo) {
        int rc = RT_OK;
        if (bk->submitted - bk->waited == RT_COLLECTIVE_MAX_INFLIGHT)
            rc = wait_one(bk); /* as many in flight as the collective takes */
        if (rc >= 0)
            rc = submit_one(bk);
        if (rc < 0) {
            bk->err = rc;
            break;
        }
    }
    return RT_OK;
}

int rt_buckets_finish(struct rt_buckets *bk)
{
    bk->armed = false;
    int rc = bk->err;
    while (rc >= 0 && bk->submitted <= bk->nb) {
        if (bk->submitted - bk->waited == RT_COLLECTIVE_MAX_INFLIGHT && (rc = wait_one(bk)) < 0)
            break;
        rc = submit_one(bk);
    }
    while (bk->waited < bk->submitted) {
        int w = wait_one(bk);
        rc = rc < 0 ? rc : w;
    }
    if (rc >= 0 && bk->z)
        rt_compress_commit(bk->z);
    bk->submitted = bk->waited = 0;
    return rc;
}
