/* gossip.h — asynchronous pairwise parameter averaging for `--mode gossip`
 * (AD-PSGD, Lian et al. 2018): nobody waits for the slowest worker.
 *
 * Every rank has a PULL inbox and a PUSH socket to each other rank. At a
 * step boundary the training thread calls rt_gossip_step, which never
 * blocks:
 *   - a request from rank i carries a copy s of i's parameters; the
 *     receiver j sets x_j := (x_j + s) / 2 and replies with that average a;
 *   - when the reply comes back, i applies it as a delta, x_i += a - s, s
 *     being the copy it sent: i's half of the exchange is (x_j - s) / 2 and
 *     j's is (s - x_j) / 2, so the sum of the parameters over all ranks is
 *     unchanged however long i kept training between request and reply,
 *     and whatever requests i answered meanwhile;
 *   - a rank has at most one request of its own outstanding; it starts the
 *     next one with a peer drawn uniformly from the others.
 *
 * Before a collective on the ring (the epoch-end barrier, evaluation), the
 * ranks quiesce with rt_gossip_drain: stop initiating, wait for the own
 * reply while answering requests, tell every peer "drained epoch E", and
 * answer requests until every peer said the same. Requests and "drained"
 * from i to j travel on one link (PUSH socket or queue), in order, and i says "drained"
 * only once its reply is back; so when j has heard "drained" from every
 * peer, every request to j was answered and every reply of j was received.
 * Nothing of epoch E is then in flight to or from j (the "drained" of the
 * others may still be on their way to ranks that are still draining).
 *
 * Wire: one MessagePack control map (wire.h) {v, run, type "gossip", gen,
 * kind "req"|"rep"|"drained", from, seq, epoch, n} and, for req and rep,
 * one raw frame of n little-endian floats. Everything is checked (version,
 * run, generation, rank range, n, frame count and size, sequence number);
 * anything else is dropped, logged (rate-limited) and counted.
 * Between ranks of one host the same messages go through a shared memory
 * queue per direction instead (gossip_shm.h), checked the same way.
 *
 * Threads: a gossip object and all its sockets belong to the thread that
 * calls rt_gossip_new (the training thread); only the ZeroMQ context is
 * shared with the rest of the worker. */
#ifndef RT_GOSSIP_H
#define RT_GOSSIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "curve.h"

typedef struct rt_gossip rt_gossip;

struct rt_gossip_config {
    void *zctx;           /* ZeroMQ context (shared with the rest of the worker) */
    const char *run;      /* run id, 32 hex digits (envelope of every message) */
    uint64_t gen;         /* membership generation, carried and checked */
    int rank, world;
    const char *bind_ip;  /* IP to bind the inbox on; the OS picks the port. NULL:
                             127.0.0.1. When it cannot be bound here (NAT), the inbox
                             listens on every interface and the endpoint names bind_ip */
    size_t n;             /* floats per parameter vector */
    uint64_t seed;        /* peer choice: deterministic per (seed, rank) */
    double reply_timeout; /* seconds an exchange may stay unanswered before it is
                             abandoned (0: 30) */
    uint64_t epoch;       /* the epoch the first steps belong to (0 for a fresh run) */
    rt_curve *curve;      /* CurveZMQ links (curve.h); NULL: plain (--insecure) */
    /* NULL, or world entries: the shared memory secret (membership.h) of
     * each rank whose memory this rank shares (its own included), NULL for
     * the others. Pairs that both name link through shared memory
     * (gossip_shm.h) instead of ZeroMQ. */
    const char *const *shm_secrets;
};

/* Binds the PULL inbox. NULL with a detail on error. world == 1 is valid
 * (every call then does nothing). */
rt_gossip *rt_gossip_new(const struct rt_gossip_config *c);
void rt_gossip_destroy(rt_gossip **g);

/* "tcp://IP:PORT" of this rank's inbox (borrowed). */
const char *rt_gossip_endpoint(const rt_gossip *g);

/* Whether this rank's shared memory queues could be made (or none were
 * wanted). When not, it said why, and its peers must hear it: they pass
 * it to rt_gossip_connect, and the pair goes over ZeroMQ. */
bool rt_gossip_shm_ready(const rt_gossip *g);

/* world entries, one per rank (this rank's own is ignored, may be NULL):
 * one PUSH socket per peer. Once, before the first step. keys: each rank's
 * public key (the membership's), required with a curve, else NULL.
 * shm_ready: each rank's rt_gossip_shm_ready (NULL: all ready). */
int rt_gossip_connect(rt_gossip *g, const char *const *endpoints, const char *const *keys,
                      const bool *shm_ready);
/* How many peers this rank reaches through shared memory. */
int rt_gossip_shm_links(const rt_gossip *g);

/* At a step boundary, never blocking: (1) answer every waiting request
 * (params := (params + theirs) / 2, reply with that); (2) apply the reply
 * to this rank's outstanding request as a delta, params += avg - sent_copy;
 * (3) abandon the outstanding request once it is older than reply_timeout;
 * (4) if `initiate` and nothing is outstanding, send a request with a copy
 * of params to a random other rank (a send that would block is not
 * started: next step tries again). Returns the number of averagings
 * applied to params (>= 0), or a negative status. */
int rt_gossip_step(rt_gossip *g, float *params, bool initiate);

/* Quiesce before a collective that ends epoch `epoch` (see above). Every
 * rank must call it with the same epoch, in increasing order; ranks may
 * arrive at very different times while others still step (requests keep
 * being answered into params meanwhile). After `timeout` seconds (<= 0: no
 * limit) RT_ERR_TIMEOUT names the ranks not heard from. RT_OK or a
 * negative status. The next steps belong to epoch + 1. */
int rt_gossip_drain(rt_gossip *g, float *params, uint64_t epoch, double timeout);

struct rt_gossip_stats {
    long sent;      /* own requests sent */
    long answered;  /* requests of others averaged and answered */
    long applied;   /* replies applied to params (late ones included) */
    long abandoned; /* own requests given up after reply_timeout */
    long dropped;   /* malformed, foreign, stale or unexpected messages */
    long late;      /* replies applied after their exchange was abandoned */
    long refused;   /* requests not answered because the reply could not be
                       queued (the requester's queue was full) */
};

void rt_gossip_stats(const rt_gossip *g, struct rt_gossip_stats *s);

/* True while a request of this rank waits for its reply. */
bool rt_gossip_outstanding(const rt_gossip *g);

#endif
