/* replica.h — a data-parallel worker's replica of the model, on the host.
 *
 * The collectives and the optimiser of a data-parallel run work on host
 * memory. With the cpu backend the model's own buffers ARE host memory and
 * the replica aliases them (no copy at all); other backends go through host
 * mirrors: one download of the gradient and one upload of the parameters
 * per step that exchanges. Not installed. */
#ifndef RT_REPLICA_H
#define RT_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "collective.h"
#include "model.h"

struct rt_replica {
    const rt_collective *coll;
    rt_model *m;
    size_t np, ns;   /* parameters, state (batch-norm statistics) */
    bool alias;      /* the model's buffers are host memory */
    rt_dev *hdev;    /* the mirrors' cpu device, when not aliased */
    rt_buf *hp, *hg;
    float *p, *g;    /* host: all parameters / gradients */
    rt_view pv, gv;  /* the same, as views on odev */
    rt_dev *odev;    /* the host optimiser's device */
    float *hstate;   /* host copy of the state buffer */
};

int rt_replica_init(struct rt_replica *r, const rt_collective *coll, rt_model *m, int threads);
void rt_replica_free(struct rt_replica *r);

/* The model's parameters to the host copy, and back; gradients to the host. */
int rt_replica_pull(struct rt_replica *r);
int rt_replica_push(struct rt_replica *r);
int rt_replica_pull_grads(struct rt_replica *r);
/* Only the gradients [lo, hi) (a bucket whose layers are done). */
int rt_replica_pull_grads_range(struct rt_replica *r, size_t lo, size_t hi);
/* The model's state to hstate, and back. */
int rt_replica_pull_state(struct rt_replica *r);
int rt_replica_push_state(struct rt_replica *r);
/* Every replica starts from rank 0's parameters and state, bit for bit. */
int rt_replica_broadcast(struct rt_replica *r);
/* Batch-norm statistics, averaged over the replicas. */
int rt_replica_average_state(struct rt_replica *r);
/* FNV-1a of the parameters and state: equal on every replica. */
int rt_replica_hash(struct rt_replica *r, uint64_t *out);

#endif
