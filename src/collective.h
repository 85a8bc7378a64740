/* collective.h — what the trainer needs from the other workers of a run.
 *
 * The core declares these interfaces and net/ implements them (a ring over
 * shared memory and ZeroMQ, driven by a worker's communication thread), so
 * the trainer never sees a socket: it is handed a table and a context. */
#ifndef RT_COLLECTIVE_H
#define RT_COLLECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Workers one run can hold: the membership, the plans of shares and the
 * wire format all take this bound. */
#define RT_MAX_WORKERS 256

/* Control votes: something every worker must act on at the same step. */
enum rt_vote {
    RT_VOTE_STOP = 1u << 0,   /* stop at this step (Ctrl-C, the coordinator) */
    RT_VOTE_REPLAN = 1u << 1, /* a worker's speed moved: re-plan the shares */
};

/* Element types a range reduction carries (submit below): float32, or 16
 * bits (base/half.h) when gradients travel compressed. */
enum rt_elem { RT_ELEM_F32, RT_ELEM_F16, RT_ELEM_BF16 };

/* Ranges reduced at once, submitted and not yet waited for. */
#define RT_COLLECTIVE_MAX_INFLIGHT 32

struct rt_collective_ops {
    /* The sum over ranks of buf (n floats); afterwards each rank holds its
     * own slice (rt_slice) of the sum, the rest of buf is scratch. */
    int (*reduce_scatter)(void *ctx, float *buf, size_t n);
    /* Each rank's slice of buf to every rank. */
    int (*all_gather)(void *ctx, float *buf, size_t n);
    /* The sum over ranks, on every rank (floats: the same bits everywhere). */
    int (*allreduce)(void *ctx, float *buf, size_t n);
    int (*allreduce_f64)(void *ctx, double *buf, size_t n);
    /* root's bytes to every rank. */
    int (*broadcast)(void *ctx, void *buf, size_t bytes, int root);
    /* Asynchronous allreduce of a range, so that communication overlaps
     * compute: start the sum over ranks of elements [lo, hi) of buf (n
     * elements of type elem) and return; wait() completes the oldest range
     * submitted and not yet waited for (at most RT_COLLECTIVE_MAX_INFLIGHT
     * are). The range's segments are those of the whole n cut to [lo, hi),
     * so each element is summed in one order of ranks whatever the ranges:
     * float32 ranges give the bits of one allreduce of all of buf. The
     * caller leaves [lo, hi) alone until its wait; votes ride along. After
     * a failure (RT_ERR_REGROUP included) the caller still waits for every
     * range submitted, then handles the first error. NULL (both): not
     * offered; the caller uses allreduce. */
    int (*submit)(void *ctx, void *buf, enum rt_elem elem, size_t n, size_t lo, size_t hi);
    int (*wait)(void *ctx);
    /* Control travels beside the data, never in it: votes cast here ride on
     * the next float collectives at no extra message. agreed() returns the
     * OR of every rank's votes that reached this rank since the last call,
     * and starts afresh; after a reduce-scatter + all-gather, or an
     * allreduce, it is the same on every rank. */
    void (*vote)(void *ctx, uint32_t votes);
    uint32_t (*agreed)(void *ctx);
    /* Membership. Any collective may answer RT_ERR_REGROUP: a worker was
     * lost or one joins, the collective did not complete (on this rank) and
     * its buffer is undefined. regroup() then forms the new group and gives
     * this worker's rank and world in it; it may itself answer
     * RT_ERR_REGROUP when the members change again meanwhile. Without a
     * change pending it returns the current group at once. NULL: the
     * members never change. */
    int (*regroup)(void *ctx, int *rank, int *world);
    /* Host memory for n floats that the other workers of this host can
     * read where it lies: the replica keeps its gradient there, so that a
     * sum over workers who all share the host copies nothing (the worker's
     * allreduce and submit then read it in place: net/hostreduce.h). NULL,
     * or NULL returned: an ordinary buffer. The same memory on every call
     * of a process (one replica at a time); NULL for another n. */
    float *(*shared_floats)(void *ctx, size_t n);
    /* The host's one replica (src/host_replica.c): *out gets n floats that
     * every worker of this group shares, when all share one host, sum in
     * place and are able (their weights in host memory; n the same on all),
     * rank 0's to fill, the same memory on every call until the members
     * change; or NULL: each keeps its own. All ranks call it together,
     * between steps. host_barrier: every rank of the group reached this
     * point. NULL (both): not offered. */
    int (*host_replica)(void *ctx, size_t n, bool able, float **out);
    int (*host_barrier)(void *ctx);
    /* With the host's one replica: the sum of buf[from, n) (buf from
     * shared_floats) and the update of the shared weights in one pass.
     * Each rank sums its slice of [from, n - tail) chunk by chunk and
     * calls apply(arg, lo, hi) on each summed chunk at once, while it is
     * in cache (the optimiser's update of that range); the tail (the
     * step's counts) is summed on every rank. Returns once every rank
     * applied its slice: the shared weights are whole. Outside its slice
     * and the tail this rank's buf keeps its own contribution. sumsq (NULL:
     * not wanted): the summed gradient's sum of squares, the same on every
     * rank. NULL: not offered. */
    int (*sum_apply)(void *ctx, float *buf, size_t from, size_t n, size_t tail,
                     int (*apply)(void *arg, size_t lo, size_t hi), void *arg, double *sumsq);
    /* After a sum_apply failed (the members change), before the regroup:
     * whether no rank applied any of it, nor ever will (the shared weights
     * are as before that step). NULL, or false: unknown. */
    bool (*apply_undone)(void *ctx);
    /* A new generation is announced and not formed yet: a step that has
     * not begun regroups first, so the change redoes nothing. NULL: the
     * collectives alone say so. */
    bool (*changing)(void *ctx);
};

typedef struct rt_collective {
    const struct rt_collective_ops *ops;
    void *ctx;
    int rank, world;
} rt_collective;

/* THE rule of who owns what: of n items cut into `world` parts, rank r owns
 * [n*r/world, n*(r+1)/world). Reduce-scatter, all-gather, the optimiser's
 * slice of a sync run and the evaluation split all use it. */
void rt_slice(size_t n, int world, int rank, size_t *lo, size_t *hi);

/* Pairwise exchange (gossip mode only): asynchronous averaging with one peer
 * at a time, nobody waits for the slowest. */
struct rt_pairwise_ops {
    /* Once, on every rank together, before the first epoch: links for n
     * floats, epochs numbered from first_epoch. */
    int (*begin)(void *ctx, size_t n, long first_epoch);
    /* At a step boundary, never waiting: answer peers' requests, apply
     * replies, start an exchange with a random peer when `initiate`;
     * returns the averagings applied to params (host, n floats) or < 0. */
    int (*step)(void *ctx, float *params, size_t n, bool initiate);
    /* Before the epoch's end collectives: finish this rank's exchanges and
     * wait until no peer has one in flight (epoch numbers the round). */
    int (*drain)(void *ctx, float *params, size_t n, long epoch);
};

typedef struct rt_pairwise {
    const struct rt_pairwise_ops *ops;
    void *ctx;
} rt_pairwise;

#endif
