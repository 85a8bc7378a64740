/* shm.h — same-host data links through shared memory.
 *
 * Why: over a Unix or TCP socket every byte a local neighbour sends is
 * copied twice by the kernel and once more by libzmq's receive path; on a
 * small box that caps a 2-process ring near 1.7 GB/s of bus bandwidth. A
 * shared segment needs one copy in (sender) and one read (the receiver's
 * reduction reads the slot directly). ZeroMQ still carries every control
 * message and the data of peers on other hosts.
 *
 * Each rank that has a same-host ring neighbour owns ONE segment in
 * /dev/shm holding
 *   - its doorbell: a futex word neighbours bump after they publish data
 *     for it or free a slot it is waiting for, so a rank sleeps on exactly
 *     one word whatever it waits for;
 *   - its inbound queue: a single-producer single-consumer ring of slots
 *     filled by its left neighbour (no slots when that neighbour is remote).
 * Names carry the owner's random secret and the generation; the owner
 * unlinks its segment as soon as its neighbours have mapped it, so a
 * crash leaves nothing behind in /dev/shm after start-up. A process killed
 * during the set-up (before its neighbours mapped its segment) leaves its
 * name: the next process of the user that creates a segment on this host
 * removes such names once they are older than RT_SHM_STALE_AGE
 * (rt_shm_sweep), so repeated crashes cannot fill a small /dev/shm (a
 * container's 64 MB).
 *
 * Slot descriptors are written by another process: the consumer checks
 * every field (see ring.c) before touching payload bytes. */
#ifndef RT_SHM_H
#define RT_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_shm rt_shm;

/* Seconds after which a segment's name is nobody's: a set-up waits for its
 * neighbours tens of seconds at most. */
#define RT_SHM_STALE_AGE 600.0
/* A worker's gradient (hostreduce.h) is kept while its owner lives: its
 * name goes this many seconds after its owner is gone. */
#define RT_SHM_GRADS_STALE_AGE 30.0

/* What a slot carries besides its payload (the ring's chunk header). */
struct rt_shm_desc {
    uint64_t op;
    uint32_t t, j;
    uint32_t flags;
    uint32_t sig;   /* the collective's signature (kind, length, root): ring.c */
    uint64_t bytes;
};

/* Create this rank's segment: doorbell plus `nslots` slots of slot_bytes.
 * `expect_attach` neighbours will map it (see rt_shm_unlink_when_attached). */
rt_shm *rt_shm_create(const char *name, const char *run, uint64_t gen, uint32_t nslots,
                      size_t slot_bytes, uint32_t expect_attach);
/* Map a neighbour's segment, waiting up to timeout_s for it to appear;
 * checks its header against run and gen. */
/* How long a set-up waits for a neighbour, and what it does meanwhile:
 * idle(arg) every 20 ms or so (a worker keeps its heartbeats going); < 0
 * gives the wait up, with the reason in the error detail. */
struct rt_shm_wait {
    double timeout_s;
    int (*idle)(void *arg);
    void *arg;
};

rt_shm *rt_shm_open(const char *name, const char *run, uint64_t gen, const struct rt_shm_wait *w);
void rt_shm_close(rt_shm **s);
/* Owner: wait (up to timeout_s) until every neighbour mapped the segment,
 * then remove its name. */
int rt_shm_unlink_when_attached(rt_shm *s, const struct rt_shm_wait *w);
/* The same without waiting: whether the name is gone (now or before). */
bool rt_shm_unlink_if_attached(rt_shm *s);

/* Remove from dir the segments this file names (ragtag-SECRET-gN and
 * gossip's ragtag-SECRET-gN-gossipR) that belong to this user and were
 * last changed at least max_age_s ago, and workers' gradients
 * (ragtag-SECRET-grads) whose owner is gone, changed at least
 * RT_SHM_GRADS_STALE_AGE ago (or max_age_s when less). Returns how many,
 * their bytes in *bytes (may be NULL). */
int rt_shm_sweep(const char *dir, double max_age_s, uint64_t *bytes);
/* rt_shm_sweep of /dev/shm with RT_SHM_STALE_AGE, once a process, saying
 * what it removed: before a process's first segment. */
void rt_shm_sweep_once(void);

uint32_t rt_shm_slots(const rt_shm *s);
size_t rt_shm_slot_bytes(const rt_shm *s);

/* Producer side, on the consumer's segment. */
bool rt_shm_can_put(rt_shm *s);
void *rt_shm_slot_to_fill(rt_shm *s);
void rt_shm_publish(rt_shm *s, const struct rt_shm_desc *d); /* and ring its bell */

/* Consumer side, on its own segment: 1 and the next slot (descriptor copied
 * out, payload borrowed until rt_shm_consume), 0 when empty, RT_ERR_NET if
 * the producer broke the queue's invariants. */
int rt_shm_peek(rt_shm *s, struct rt_shm_desc *d, const void **payload);
/* Free the peeked slot; `producer_bell` (the producer's segment, may be
 * NULL) is rung so a producer waiting for space wakes up. */
void rt_shm_consume(rt_shm *s, rt_shm *producer_bell);

/* Doorbell of a segment. */
uint32_t rt_shm_bell(rt_shm *s);
void rt_shm_ring(rt_shm *s);
/* Sleep until the bell differs from `seen` or timeout_s passes. */
void rt_shm_wait(rt_shm *s, uint32_t seen, double timeout_s);

#endif
