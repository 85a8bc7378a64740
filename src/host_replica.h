/* host_replica.h — one replica for the workers of one host (mode sync).
 *
 * Why: two workers of one host each stream their own weights and
 * optimiser state through the cache they share; for seedcnn, whose dense
 * layer holds 4 MB of weights, two such replicas side by side ran 20-30%
 * slower each than one alone (bench/README.md, twenty-third pass). Here
 * the workers of a host keep ONE copy of the weights and of the optimiser
 * state, in rank 0's shared memory (net/hostreduce.h); each updates its
 * own range of it (the bits of one whole update: the maths is
 * elementwise), in the same pass as its slice of the gradient's sum
 * (rt_host_replica_sum_update) or, when clipping needs the whole norm
 * first, after the sum (rt_host_replica_update); then waits for the others.
 *
 * Faults: the shared copy is a cache of each worker's own replica: while
 * shared, that is only the state of the last write-back (an rt_commit:
 * weights, optimiser state, position, the epoch's sums), taken every
 * RT_HOST_REPLICA_WRITE_BACK steps; the buffers the model and optimiser
 * had are freed, and made again when the worker leaves the shared copy.
 * A change of members once every worker began the step's sum throws the
 * shared copy away (a worker may have died halfway through its range, or
 * before it, the others having updated theirs) and every
 * worker goes back to its write-back, then to the most advanced member's
 * state as usual (dist_recover.c): the steps since are done again by the
 * new group, their samples counted once, as mode average does. A change
 * seen between two steps (an admission), or in a step whose one-pass sum
 * some worker had not begun (collective.h: apply_undone; a worker lost in
 * its forward or backward), keeps the shared copy, which is whole then:
 * only the step in flight is redone. At each
 * epoch's end the workers copy the shared state back to their own (the
 * evaluation, checkpoints and the best weights see private memory) and
 * share again at the next step. Not installed. */
#ifndef RT_HOST_REPLICA_H
#define RT_HOST_REPLICA_H

#include <stdbool.h>

#include "dist.h"

/* Steps between write-backs: what a change of members may redo. */
#define RT_HOST_REPLICA_WRITE_BACK 32

struct rt_host_replica {
    bool on;               /* the model and optimiser use the shared copy */
    bool asked;            /* the collective was asked in this group (NULL: none) */
    float *mem;            /* shared: the weights, then each optimiser buffer */
    rt_buf *own_p, *own_s[2]; /* while buffers change places (NULL between) */
    struct rt_commit back; /* the state at the last write-back */
    long since;            /* steps since it */
    bool due;              /* a write-back at the next step's start */
    bool whole;            /* no range of the shared copy is being written: the
                              last barrier passed and no step began since */
};

/* The update of a sync step after its sum (norm: the summed gradient's,
 * or NaN): this worker's range of the shared copy when the collective
 * offers one (asked once a group; the first call shares), else all of its
 * own replica. */
int rt_host_replica_update(struct rt_host_replica *h, struct rt_trainer *t, double norm);
/* Whether this step's sum and update go in one pass (shared now, and no
 * clipping, which needs the whole norm before any update): then
 * rt_host_replica_sum_update instead of the sum and rt_host_replica_update.
 * Each worker sums its slice of the gradient in place and updates the
 * shared weights of each chunk as soon as it is summed, while it is in
 * cache: no copy of the others' sums, no second pass over the gradient, no
 * barrier but the sum's own (the "the optimiser step for a bucket
 * as soon as it is reduced", where a worker's slice is the bucket). */
bool rt_host_replica_one_pass(const struct rt_host_replica *h, const struct rt_trainer *t);
/* r->g[from, np) summed and applied; r->g[np, np + tail) (the tally)
 * summed on every worker. *norm: the summed gradient's when want_norm, else
 * NaN. */
int rt_host_replica_sum_update(struct rt_host_replica *h, struct rt_trainer *t, size_t from,
                               size_t tail, bool want_norm, double *norm);
/* At a step's start (after a change of members was looked for): the
 * write-back due, if any. */
int rt_host_replica_step_begin(struct rt_host_replica *h, struct rt_trainer *t);
/* The shared state back to this worker's own replica (epoch end, the
 * run's end); nothing when not shared. */
int rt_host_replica_leave(struct rt_host_replica *h, struct rt_trainer *t);
/* The members changed: back to this worker's own replica at the last
 * write-back (nothing when not shared); the group is asked again. */
int rt_host_replica_abandon(struct rt_host_replica *h, struct rt_trainer *t);
void rt_host_replica_free(struct rt_host_replica *h);

#endif
