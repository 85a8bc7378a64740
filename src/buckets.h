/* buckets.h — a sync step's gradient reduced in buckets while backward runs.
 *
 * The gradient buffer is one contiguous array and parameters lie in layer
 * order, so backward finishes the gradient from the top of the buffer down.
 * It is cut, once, into buckets of whole tensors of at least --bucket-kb
 * (the last layers' bucket first). The model's backward hook tells how far
 * down the gradient is final; each bucket that is then complete is handed
 * to the collective's asynchronous range allreduce (collective.h: submit),
 * which the worker's communication thread runs while the training thread
 * goes on with the earlier layers. After backward the rest, and the step's
 * counts (the tally, always float32, after the gradient), are submitted and
 * every range waited for, in order.
 *
 * The ring cuts every range by the segments of the whole buffer, so each
 * element is summed in the same order of ranks as one allreduce of it all:
 * with or without buckets, and whatever their size, the same bits.
 *
 * With --compress the buckets travel as 16 bits (compress.h): rounded with
 * the worker's carried error when submitted, widened when waited for. */
#ifndef RT_BUCKETS_H
#define RT_BUCKETS_H

#include <stdbool.h>
#include <stddef.h>

#include "collective.h"
#include "compress.h"
#include "replica.h"

struct rt_buckets {
    const rt_collective *coll;
    struct rt_replica *r;
    struct rt_compress *z; /* NULL: float32 */
    size_t n;              /* the collective's length: the gradient and the tally */
    size_t *cut;           /* bucket b is [cut[b + 1], cut[b]); cut[0] = np, cut[nb] = from */
    int nb;
    int submitted, waited; /* buckets; the tally is bucket nb */
    bool armed;            /* a step's backward runs: the hook submits */
    int err;               /* the first failure of a submit from the hook */
};

/* Cut r's gradient from parameter `from` on (below it the layers are
 * frozen: their gradients never travel) into buckets of whole tensors of m
 * of at least bucket_bytes. z: compressed exchanges (NULL: float32). */
int rt_buckets_init(struct rt_buckets *bk, const rt_collective *c, struct rt_replica *r,
                    const rt_model *m, size_t from, size_t bucket_bytes,
                    struct rt_compress *z);
void rt_buckets_free(struct rt_buckets *bk);
/* A step starts: the backward hook (rt_buckets_hook, installed on the
 * model with bk) submits what is final from now on. Ranges a failed step
 * left in flight are waited for first. */
void rt_buckets_arm(struct rt_buckets *bk);
/* Backward is over (or the step computed nothing): no more from the hook. */
void rt_buckets_disarm(struct rt_buckets *bk);
/* The step failed before rt_buckets_finish: wait for whatever is in
 * flight (the collective needs it back before anything else), drop it. */
void rt_buckets_abandon(struct rt_buckets *bk);
int rt_buckets_hook(void *arg, size_t lo, size_t hi);
/* The tally is in r->g[np ...]: submit what is left, then wait for every
 * range; r->g holds the sum over the workers. On a failure every range
 * submitted is still waited for, and the first failure returned. */
int rt_buckets_finish(struct rt_buckets *bk);

#endif
