/* ring.h — ring collectives over a membership: reduce-scatter, all-gather,
 * allreduce (float32, and float64 for small metric vectors) and broadcast.
 *
 * Algorithm (Patarasuk & Yuan's bandwidth-optimal ring, as in Horovod,
 * Gloo and NCCL): a buffer of n elements is cut into N segments,
 * segment q = [n*q/N, n*(q+1)/N) (any n, lengths differ by at most one),
 * and each segment into K sub-chunks of at most chunk_bytes (half of it in
 * a segment of more than 8 chunks: ring.c, subchunks). Step t of the
 * ring, t = 0 .. 2N-3, sends segment (r-1-t) mod N to the right neighbour
 * and receives segment (r-2-t) mod N from the left one: steps below N-1
 * add what they receive (reduce-scatter, after which rank r owns the sum of
 * segment r), the later ones copy it (all-gather). Sub-chunks make it a
 * pipeline: sub-chunk j of step t leaves as soon as sub-chunk j of step
 * t-1 arrived, while the rest of the step is still in flight.
 *
 * Every segment is summed once, on one path, in one order, and then copied
 * to everybody: the result is bitwise the same on every rank.
 *
 * Links: to a neighbour on the same host (same rt_net_host_id), a shared
 * memory queue (shm.h). To one on another host, where the run's links are
 * not encrypted (--insecure or token links), a raw TCP stream (tcplink.h:
 * a fixed 40-byte header and the payload per sub-chunk, written from and
 * read into the buffer by this thread); with CurveZMQ a ZeroMQ PUSH socket
 * to the neighbour's PULL inbox, two frames per sub-chunk: a MessagePack
 * header {gen, op, t, j, fl, n} and the raw little-endian bytes, sent
 * zero-copy from the caller's buffer (large frames) with a free callback
 * that tells the ring when libzmq is done with them. The inbox also
 * carries the raw links' set-up offers.
 *
 * `flags`: each rank may pass 32 bits; what comes back is the OR over all
 * ranks (carried in the chunk headers, no extra message). The trainer uses
 * it so that a stop asked on any node stops every node at the same step.
 *
 * A ring is used by one thread at a time (the comm thread in a worker). */
#ifndef RT_RING_H
#define RT_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"
#include "curve.h"
#include "membership.h"

#define RT_RING_MAX_CHUNK ((size_t)4 << 20)
#define RT_RING_DEFAULT_CHUNK ((size_t)512 << 10) /* ring.c: subchunks() */

typedef struct rt_ring rt_ring;

/* Called while a collective waits (about every 50 ms): return < 0 (with a
 * detail) to abandon the collective, e.g. when the coordinator aborts. */
/* How long a new generation's ring waits for its neighbours: they form it at
 * the same moment, so a missing one was lost meanwhile (the next generation
 * follows), not slow. */
#define RT_RING_SETUP_TIMEOUT 10.0

typedef int (*rt_ring_idle_fn)(void *arg);

struct rt_ring_config {
    const char *run;                     /* run id */
    const struct rt_membership *members; /* ranks in order; gen inside */
    int rank;
    void *zctx;                          /* the ZeroMQ context of `inbox` */
    void **inbox;                        /* this rank's bound PULL socket: taken (left
                                            to the caller when the set-up fails) */
    bool allow_shm;                      /* shared memory to same-host neighbours */
    size_t chunk_bytes;                  /* 0: RT_RING_DEFAULT_CHUNK */
    int shm_slots;                       /* 0: 8 */
    double setup_timeout;                /* seconds to find neighbours; 0: 30 */
    double stall_timeout;                /* a collective without progress fails
                                            after this many seconds; 0: never */
    rt_ring_idle_fn idle;
    void *idle_arg;
    /* Called while the set-up waits for a neighbour (with idle_arg): keep
     * heartbeats going; < 0 gives the set-up up. NULL: none. */
    rt_ring_idle_fn setup_idle;
    /* CurveZMQ (curve.h): the link to the right neighbour is encrypted and
     * checks its key (members->m[].key); chunks count only from the left
     * neighbour's key. NULL: plain links (--insecure). */
    rt_curve *curve;
    /* Keep the data on ZeroMQ even where raw TCP links are allowed (the
     * bench compares the two; every rank must agree). */
    bool zmq_data;
};

/* Connect to the neighbours (shared memory set up with them, so all ranks
 * of the ring call this at about the same time). */
rt_ring *rt_ring_new(const struct rt_ring_config *c);
void rt_ring_destroy(rt_ring **r);

/* Take the ring's inbox back (before rt_ring_destroy), for the ring of
 * the next generation: peers keep sending to the same address. */
void *rt_ring_release_inbox(rt_ring *r);

int rt_ring_rank(const rt_ring *r);
int rt_ring_size(const rt_ring *r);
/* The link to the left / right neighbour: "shm", "tcp" (a raw TCP link) or
 * "zmq" (ZeroMQ over TCP: CurveZMQ); "-" alone. */
const char *rt_ring_link(const rt_ring *r, bool right);

/* On return buf[rt_slice(rank)] holds the sum over all ranks; the rest of
 * buf is scratch. flags: in, this rank's; out, the OR over all ranks. */
int rt_ring_reduce_scatter(rt_ring *r, float *buf, size_t n, uint32_t *flags);
/* Each rank contributes buf[segment(rank)]; on return buf is complete. */
int rt_ring_all_gather(rt_ring *r, float *buf, size_t n, uint32_t *flags);
int rt_ring_allreduce(rt_ring *r, float *buf, size_t n, uint32_t *flags);
/* The sum over ranks of elements [lo, hi) of buf, an array of n elements of
 * type elem, on every rank; the rest of buf is untouched. The segments are
 * those of the whole buffer (rt_slice(n, ...)) cut to [lo, hi), so each
 * element is summed over the ranks in the same order whatever range it is
 * reduced in: reducing a float buffer range by range gives the bits of one
 * rt_ring_allreduce of all of it. fp16 and bf16 elements are added as
 * half.h says (widened, added, rounded back: the same bits on every rank).
 * A range inside one segment is a pipelined chain rather than a ring; over
 * all the ranges of a buffer every link carries the same bytes. */
int rt_ring_allreduce_range(rt_ring *r, void *buf, enum rt_elem elem, size_t n, size_t lo,
                            size_t hi, uint32_t *flags);
int rt_ring_allreduce_f64(rt_ring *r, double *buf, size_t n);
/* bytes of root's buf to every rank (pipelined along the ring). */
int rt_ring_broadcast(rt_ring *r, void *buf, size_t bytes, int root);

/* Replace the idle callback (the comm thread installs its own). */
void rt_ring_set_idle(rt_ring *r, rt_ring_idle_fn fn, void *arg);
/* The ZeroMQ context the ring's sockets live in. */
void *rt_ring_zctx(const rt_ring *r);

/* Bad messages dropped so far (for logs and tests). */
long rt_ring_dropped(const rt_ring *r);
/* Whether this machine runs more of the ring's ranks than this process may
 * use cores: its waits on raw TCP links then yield the core (ring.c). */
bool rt_ring_crowded(const rt_ring *r);

#endif
