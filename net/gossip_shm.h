/* gossip_shm.h — gossip's links between ranks of one host, through shared
 * memory.
 *
 * Why: over ZeroMQ every exchange of two parameter vectors is copied into
 * a message, through the kernel's loopback both ways, by each side's I/O
 * thread, and with CurveZMQ (the default) encrypted and decrypted too, for
 * traffic that never leaves the machine. On the 3-worker lenet of
 * bench_hetero.sh that cost the workers 7% of their images/s (17% of the
 * 0.2-core one's), against training with no exchange at all. Workers of
 * one host already send ring data through /dev/shm (shm.h); gossip does
 * the same.
 *
 * One single-producer single-consumer queue (shm.h) per ordered pair of
 * same-host ranks: rank j owns, in a segment of its own, the queue that
 * rank i fills for it, named by j's shared-memory secret (membership.h:
 * only members learn it), the generation and i, mode 600. All messages
 * from i to j (requests, replies, "drained") go in that one queue, in
 * order, as on the ZeroMQ link. A slot is a fixed header (below) and, for
 * requests and replies, the n floats. Each side checks every field of what
 * the other wrote (gossip.c) before using it.
 *
 * The owner removes a segment's name once its producer mapped it
 * (rt_gshm_unlink_attached, called at every step until then): after the
 * start of an epoch nothing is left in /dev/shm, even if a process is
 * killed. */
#ifndef RT_GOSSIP_SHM_H
#define RT_GOSSIP_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm.h"

/* Slots per queue: a request, a reply, a "drained" and one request
 * abandoned to a slow peer fit. A full queue is a send that would block
 * (gossip.h says what that means). */
#define RT_GSHM_SLOTS 4
/* Above this many bytes of parameters (4 M floats) the pair stays on
 * ZeroMQ: four slots per direction of each pair of the host's workers
 * would take gigabytes of /dev/shm, which is memory. */
#define RT_GSHM_MAX_BYTES ((size_t)16 << 20)
#define RT_GSHM_HEADER 64 /* bytes before the payload in a slot */
#define RT_SHM_SECRET_MAX 32 /* room for a member's secret (membership.h) */

/* The first bytes of a slot, written by the producer. kind: 0 request,
 * 1 reply, 2 "drained" (gossip.c's order). */
struct rt_gshm_msg {
    uint32_t kind, from;
    uint64_t gen, seq, epoch, n;
};

struct rt_gshm {
    int rank, world;
    size_t bytes; /* payload of a request or reply */
    rt_shm **in;  /* [world]: the queue peer i fills for this rank; NULL: not linked */
    rt_shm **out; /* [world]: this rank's queue in peer j's segment */
    int pending;  /* own segments whose names are still in /dev/shm */
};

/* Whether ranks with these secrets (NULL: not on this host, or shm not
 * allowed) link through shared memory for n-byte payloads; both sides of a
 * pair decide the same. */
bool rt_gshm_wanted(const char *mine, const char *theirs, size_t bytes);

/* Create this rank's inbound queues, one for each peer j with
 * rt_gshm_wanted(secrets[rank], secrets[j], bytes). secrets: world entries. */
int rt_gshm_create(struct rt_gshm *l, const char *run, uint64_t gen, int rank, int world,
                   size_t bytes, const char *const *secrets);
/* Map the queue of this rank in each linked peer's segment, waiting up to
 * timeout_s for it (the peers create theirs before they learn anybody's
 * address). */
int rt_gshm_open(struct rt_gshm *l, const char *run, uint64_t gen, const char *const *secrets,
                 double timeout_s);
/* Remove the names of this rank's segments that their producers mapped;
 * never waits. */
void rt_gshm_unlink_attached(struct rt_gshm *l);
/* The peer could not make its queues: the pair goes over ZeroMQ. */
void rt_gshm_drop(struct rt_gshm *l, int peer);
void rt_gshm_close(struct rt_gshm *l);

static inline bool rt_gshm_linked(const struct rt_gshm *l, int peer)
{
    return l->in && l->in[peer];
}

/* Queue a message to a linked peer, and its payload unless NULL (bytes):
 * 1 queued, 0 the queue is full (nothing queued). */
int rt_gshm_send(struct rt_gshm *l, int peer, const struct rt_gshm_msg *m, const float *payload);
/* The next message from a linked peer: 1 with its header copied out and
 * its payload borrowed (*payload_bytes of them; NULL when none) until
 * rt_gshm_consume; 2 a slot that is no gossip message (why says what; to
 * be consumed and dropped); 0 none; < 0 the queue is broken (named). */
int rt_gshm_peek(struct rt_gshm *l, int peer, struct rt_gshm_msg *m, const float **payload,
                 size_t *payload_bytes, char *why, size_t cap);
void rt_gshm_consume(struct rt_gshm *l, int peer);

#endif
