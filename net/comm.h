/* comm.h — a worker's communication thread, an actor in the CZMQ sense.
 *
 * The thread owns every network socket of a worker once training runs:
 * the ring (its inbox, its links) and the control connection to the
 * coordinator. The training thread talks to it over an inproc PAIR socket:
 * it submits a collective and later waits for it (so compute can overlap
 * communication), or hands it a control message to forward. Meanwhile the
 * thread sends heartbeats, watches the coordinator's, and takes "stop" and
 * "abort" orders — also in the middle of a collective, so a worker never
 * waits forever on a ring whose run was aborted. */
#ifndef RT_COMM_H
#define RT_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "wire.h"

typedef struct rt_comm rt_comm;

struct rt_comm_config {
    rt_ring **ring;      /* taken (or borrowed, see borrow_ring) */
    bool borrow_ring;    /* the caller keeps and destroys the ring */
    void *zctx;          /* the context of ctrl and of the ring */
    void **ctrl;         /* DEALER connected to the coordinator, taken; NULL: none */
    const char *run;
    double hb_interval;  /* seconds between heartbeats (0: 1 s) */
    double peer_timeout; /* the coordinator is lost after this silence (0: 30 s) */
    double coord_timeout; /* then keep this worker's state and wait this much longer
                             for a coordinator to come back (0: end at once) */
    double op_timeout;   /* a collective not done this many seconds after its
                            submission fails with RT_ERR_TIMEOUT (0: 600 s) */
    int rank;
    /* Membership changes ("regroup" from the coordinator): this worker's id,
     * and how to form the ring of a new generation. NULL id: never. */
    const char *self_id;
    const struct rt_membership *members; /* the current ring's (copied) */
    bool allow_shm;
    size_t chunk_bytes;
    rt_curve *curve;     /* the worker's link security; a new generation's keys are
                            admitted to it (NULL: plain links) */
};

rt_comm *rt_comm_new(const struct rt_comm_config *c);
/* A thread for a ring alone, without a coordinator (benchmarks, tests).
 * The ring is borrowed: destroy the comm before the ring. */
rt_comm *rt_comm_new_bare(rt_ring *ring);
void rt_comm_destroy(rt_comm **c);

enum rt_comm_kind {
    RT_COMM_REDUCE_SCATTER,
    RT_COMM_ALL_GATHER,
    RT_COMM_ALLREDUCE,
    RT_COMM_ALLREDUCE_F64,
    RT_COMM_BROADCAST,
    RT_COMM_REGROUP, /* form the ring of the pending generation (rt_comm_regroup) */
    RT_COMM_ALLREDUCE_RANGE, /* rt_comm_submit_range */
};

/* Start a collective on the thread; buf must stay untouched until
 * rt_comm_wait returns. Up to RT_COLLECTIVE_MAX_INFLIGHT may be submitted
 * before the first wait (the thread runs them one after the other, in
 * order); the blocking calls below and rt_comm_regroup need none in flight. */
int rt_comm_submit(rt_comm *c, enum rt_comm_kind kind, void *buf, size_t n, uint32_t flags,
                   int root);
/* An allreduce of elements [lo, hi) of buf (rt_ring_allreduce_range). */
int rt_comm_submit_range(rt_comm *c, void *buf, enum rt_elem elem, size_t n, size_t lo,
                         size_t hi, uint32_t flags);
/* Collectives submitted and not yet waited for. */
int rt_comm_inflight(const rt_comm *c);
/* Wait for the oldest: its status (with the thread's error detail) and flags.
 * Never longer than the collective's deadline (op_timeout) and a margin:
 * then RT_ERR_TIMEOUT, naming the collective. After a failure of the pipe
 * itself (a lost reply) every later call fails. */
int rt_comm_wait(rt_comm *c, uint32_t *flags);

/* Submit + wait. n counts elements (bytes for broadcast). */
int rt_comm_reduce_scatter(rt_comm *c, float *buf, size_t n, uint32_t *flags);
int rt_comm_all_gather(rt_comm *c, float *buf, size_t n, uint32_t *flags);
int rt_comm_allreduce(rt_comm *c, float *buf, size_t n, uint32_t *flags);
int rt_comm_allreduce_f64(rt_comm *c, double *buf, size_t n);
int rt_comm_broadcast(rt_comm *c, void *buf, size_t bytes, int root);

/* The coordinator announced new members (a worker lost or joining): any
 * collective running or submitted since answers RT_ERR_REGROUP. This forms
 * the ring of the new generation, tells the coordinator, and returns when
 * every member has (the coordinator's "go"), with this worker's rank and
 * world in it; RT_ERR_REGROUP again when the members changed meanwhile.
 * Nothing pending: the current rank and world at once. */
int rt_comm_regroup(rt_comm *c, int *rank, int *world);
/* The members of the current generation. */
const struct rt_membership *rt_comm_members(const rt_comm *c);
/* The coordinator dropped this worker from its run (it was silent too
 * long): the run goes on without it. */
bool rt_comm_expelled(rt_comm *c);
/* The coordinator said the run ended while this worker, a joiner, was
 * still setting up ("finished"): it ends with status 0. */
bool rt_comm_finished(rt_comm *c);

/* Forward a control message (and raw frames, copied) to the coordinator:
 * the whole message, or nothing when it cannot be built (RT_ERR_NOMEM). A
 * send the coordinator never takes aborts the run (see rt_comm_aborted). */
int rt_comm_send(rt_comm *c, const rt_wire_writer *w, const void *const *frames,
                 const size_t *sizes, int nframes);

/* How a message to the coordinator fares when the coordinator takes
 * nothing (paused, or gone until one re-adopts this worker). */
enum rt_comm_send_kind {
    RT_SEND_MUST,   /* waits up to the coordinator timeouts, then aborts the run */
    RT_SEND_DROP,   /* progress: dropped when it cannot leave at once */
    RT_SEND_KEEP,   /* epoch lines, metrics, checkpoints: kept until acknowledged,
                       sent again to a coordinator that re-adopts this worker */
};
int rt_comm_send_as(rt_comm *c, enum rt_comm_send_kind kind, const rt_wire_writer *w,
                    const void *const *frames, const size_t *sizes, int nframes);

/* Bounded run-ahead. The training thread marks each step boundary (the
 * steps done so far); heartbeats carry the newest mark, and the
 * coordinator answers with the newest it has read, every report sent
 * before it included. rt_comm_acked: that step, -1 before any. */
void rt_comm_mark(rt_comm *c, long steps_done);
long rt_comm_acked(rt_comm *c);

/* Why the run was aborted (the coordinator said so, or fell silent, or a
 * message could not leave), or NULL; any thread may ask. The first reason
 * is kept: the string never changes and lives as long as the comm. */
const char *rt_comm_aborted(rt_comm *c);
/* The coordinator announced a new generation that this worker has not
 * formed yet (for work that uses no collective: gossip's steps). */
bool rt_comm_members_changing(rt_comm *c);
/* The training thread made progress: heartbeats go on only while it does
 * (within the worker timeout plus ten of its longest stretches). */
void rt_comm_alive(rt_comm *c);
/* The training thread waits on the coordinator or the peers (not on a
 * collective), from on to off: not a stall. */
void rt_comm_waiting(rt_comm *c, bool on);

/* The coordinator asked the run to stop (Ctrl-C on it). */
bool rt_comm_stop_requested(rt_comm *c);

const char *rt_comm_link(const rt_comm *c, bool right);

#endif
