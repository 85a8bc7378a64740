/* hostreduce.h — the sum of a gradient over the workers of one host, read
 * where it lies.
 *
 * Why: when every member of a run shares one host, the ring still copies
 * each rank's gradient into a neighbour's queue and out again (for 2 ranks
 * 2.5 reads and 2 writes of the buffer a rank), on the communication
 * thread, with a hand-off and a wake-up each way. Here each worker's
 * gradient lives in ONE segment of /dev/shm that its peers map: rank r
 * sums its slice of the range over every rank's buffer, in rank order,
 * into its own buffer, then copies the other slices' sums out of their
 * owners' buffers (1.5 reads and 1 write for 2 ranks), on the training
 * thread, with no thread between.
 *
 * Every element is summed by one rank, always in the order of ranks 0, 1,
 * ..., and copied as it is: the same bits on every rank, whatever the
 * ranges. Three marks a rank publishes per collective order it: its data
 * is final, its slice is summed, it has read the others' (a rank returns
 * only when all have read its buffer, so the next backward may write it).
 *
 * The segment lives as long as its worker, under the name
 * /ragtag-SECRET-grads (the worker's shm secret, which only members learn;
 * mode 600): the peers of a later generation open it by name. The owner
 * removes the name when it ends; rt_shm_sweep removes those of killed
 * owners. A peer's marks are read, never trusted for sizes: every range is
 * checked against what this side mapped. */
#ifndef RT_HOSTREDUCE_H
#define RT_HOSTREDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_hostreduce rt_hostreduce;

/* This worker's segment of n floats (name from secret, 16 hex digits);
 * NULL when it would leave less than 32 MB of /dev/shm free (for the
 * ring's own segments). */
rt_hostreduce *rt_hostreduce_new(const char *secret, size_t n);
/* Unmaps everything and removes the name. */
void rt_hostreduce_destroy(rt_hostreduce **h);
/* The segment's floats, and how many. */
float *rt_hostreduce_floats(rt_hostreduce *h, size_t *n);

/* The group of generation gen: `world` ranks, all on this host, this one
 * `rank`; secrets[r] names rank r's segment. Maps the others' segments,
 * which must hold as many floats as this one. On failure no group. */
int rt_hostreduce_group(rt_hostreduce *h, uint64_t gen, int rank, int world,
                        const char *const *secrets);
void rt_hostreduce_ungroup(rt_hostreduce *h);
bool rt_hostreduce_grouped(const rt_hostreduce *h);
/* Whether the group outnumbers the cores this process may use: its waits
 * yield the core before they sleep (base/yieldwait.h). */
bool rt_hostreduce_crowded(const rt_hostreduce *h);

/* How a collective waits for its peers: a spin of spin_s, then sleeps,
 * calling check(arg) every few milliseconds of waiting; < 0 gives the collective up with that
 * status (the members change, the run aborts). waiting(arg, on) brackets
 * the sleeps (a worker's heartbeats must go on). No peer mark after
 * timeout_s: RT_ERR_TIMEOUT naming the rank. */
struct rt_hostreduce_wait {
    double timeout_s;
    int (*check)(void *arg);
    void (*waiting)(void *arg, bool on);
    void *arg;
    double spin_s; /* spin this long before the first sleep (0: 20 us) */
};

/* The sum over the ranks of floats [lo, hi) of every rank's segment, into
 * [lo, hi) of each. votes: this rank's; *agreed gets the OR of every
 * rank's. Every rank of the group calls it with the same range. */
int rt_hostreduce_allreduce(rt_hostreduce *h, size_t lo, size_t hi, uint32_t votes,
                            uint32_t *agreed, const struct rt_hostreduce_wait *w);

/* The sum of a gradient and the update of one shared replica, in one
 * pass (the host's one replica, src/host_replica.c): each rank sums its
 * slice (rt_slice) of [from, n - tail) chunk by chunk and calls
 * apply(arg, lo, hi) on each summed chunk while it is still in cache;
 * every rank sums the tail [n - tail, n) (at most 64 floats: the step's
 * counts). Nothing is copied back: outside its slice and the tail, this
 * rank's floats keep its own contribution. Returns once every rank
 * applied its slice. sumsq (NULL: not wanted) gets the sum of squares of
 * the summed [from, n - tail), the same on every rank. */
struct rt_hostreduce_apply {
    size_t from, n, tail;
    int (*apply)(void *arg, size_t lo, size_t hi);
    void *arg;
    double *sumsq;
};
int rt_hostreduce_sum_apply(rt_hostreduce *h, const struct rt_hostreduce_apply *ap,
                            uint32_t votes, uint32_t *agreed, const struct rt_hostreduce_wait *w);

/* After a failed rt_hostreduce_sum_apply (the members change): true when
 * no rank of the group applied any of it and none ever will (a rank had
 * not even marked it begun; from this call on, a rank that gets there
 * gives up instead of applying): the shared replica is whole, as before
 * that step. False when some rank may have applied its slice, or the last
 * collective was not a sum_apply. This rank gives the step up either way. */
bool rt_hostreduce_apply_undone(rt_hostreduce *h);

/* Every rank of the group reached this point; *agreed gets the OR of the
 * votes (NULL: not wanted). */
int rt_hostreduce_barrier(rt_hostreduce *h, uint32_t votes, uint32_t *agreed,
                          const struct rt_hostreduce_wait *w);

/* The host's one replica (a sync run whose members all share this host
 * keeps one copy of its weights and optimiser state, src/host_replica.c):
 * n floats in rank 0's segment /ragtag-SECRET-replica, made by rank 0 and
 * mapped by the others, for this group, in *out. All ranks of the group
 * call it together; *out NULL on every rank (the reason in the error
 * detail) when any is not able to use it (its weights live on a GPU) or
 * could not make or map it. < 0: the group failed (the members change).
 * The contents are rank 0's to fill. */
int rt_hostreduce_replica(rt_hostreduce *h, size_t n, bool able,
                          const struct rt_hostreduce_wait *w, float **out);

/* For rt_shm_sweep: whether the process that made the segment open as fd
 * is gone (or never finished making it). */
bool rt_hostreduce_owner_gone(int fd);

#endif
