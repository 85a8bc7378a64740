/* tcplink.h — raw TCP data links between ring neighbours on different
 * hosts: the bulk frames of the ring go over a plain TCP stream, one per
 * direction and generation, instead of ZeroMQ.
 *
 * Why: a ZeroMQ PUSH/PULL pair moves each sub-chunk through libzmq's I/O
 * thread, its message queues and a MessagePack header: on a 2-core box a
 * 2-process ring reached 1 GB/s of bus bandwidth and 120 µs for 4 KiB,
 * where a plain TCP stream moves 4 GB/s. Here the ring's own thread
 * writes a fixed 40-byte header and the payload straight from the
 * caller's buffer with one sendmsg, and reads header and payload with one
 * recvmsg straight into the destination (all-gather) or a scratch buffer
 * (reduce): no other thread, no allocation per message, no copy besides
 * the kernel's.
 *
 * Set-up (tcplink_setup.c): the sender listens on an ephemeral port and
 * offers it, with a 32-byte random cookie, over the ZeroMQ link to its
 * right neighbour (CurveZMQ, token or plain, whatever the run uses); the
 * neighbour connects and presents the cookie; the sender answers with an
 * ack and closes the listener. A connection that does not present the
 * cookie of this generation is refused with a log line. The ring uses
 * raw links only where the run's links are not encrypted (token links or
 * --insecure): the cookie gives a token link's guarantee (the peer is the
 * member the authenticated offer went to), not confidentiality.
 *
 * A link is used by one thread (the ring's). */
#ifndef RT_TCPLINK_H
#define RT_TCPLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"
#include "wire.h"

#define RT_TCPLINK_HDR 40    /* bytes of a chunk header on the wire */
#define RT_TCPLINK_COOKIE 32 /* bytes of the set-up cookie */
#define RT_TCPLINK_QUEUE 64  /* sends queued on one link at most */

typedef struct rt_tcplink rt_tcplink;

/* A chunk header (little-endian on the wire, after a magic word). */
struct rt_tcplink_hdr {
    uint64_t gen, op;
    uint32_t sig, t, j, fl, n;
};

/* One message being received: header bytes, then payload. Zeroed before
 * each message. */
struct rt_tcplink_rx {
    unsigned char raw[RT_TCPLINK_HDR];
    size_t got;               /* bytes of header and payload so far */
    bool hdr_ok;              /* h is decoded */
    struct rt_tcplink_hdr h;
};

static inline size_t rt_tcplink_rx_payload(const struct rt_tcplink_rx *x)
{
    return x->got > RT_TCPLINK_HDR ? x->got - RT_TCPLINK_HDR : 0;
}

/* ---- set-up (tcplink_setup.c) -------------------------------------------------- */

struct rt_tcplink_setup {
    const char *run;
    uint64_t gen;
    int rank, left, right;
    const char *self_endpoint; /* this rank's inbox endpoint: where it listens */
    const char *left_endpoint; /* the left neighbour's: where it connects */
    void *out;                 /* ZeroMQ socket to the right neighbour (NULL: no tx link) */
    void *inbox;               /* this rank's inbox (NULL: no rx link) */
    const char *left_key;      /* the offer counts only from this key ("": any) */
    double timeout_s;
    int (*idle)(void *arg);    /* every ~50 ms while waiting; < 0 gives up */
    void *arg;
    rt_wire_droplog *drops;    /* refused connections and dropped messages */
};

/* Form this rank's links: *tx to the right neighbour (when s->out), *rx
 * from the left one (when s->inbox). Both ends call it at about the same
 * time. A link left NULL on success stays on ZeroMQ (its port could not be
 * reached: see tcplink_setup.c). RT_ERR_TIMEOUT / RT_ERR_NET with a
 * detail. */
int rt_tcplink_setup(const struct rt_tcplink_setup *s, rt_tcplink **tx, rt_tcplink **rx);

/* Whether a message read from an inbox is a link offer (late duplicates
 * are dropped quietly). */
bool rt_tcplink_is_offer(rt_zframes *fr);

/* ---- a connected link (tcplink.c) ---------------------------------------------- */

/* Wrap a connected socket (takes fd). NULL with a detail on error. */
rt_tcplink *rt_tcplink_wrap(int fd, const char *peer);
void rt_tcplink_destroy(rt_tcplink **l);
int rt_tcplink_fd(const rt_tcplink *l);
const char *rt_tcplink_peer(const rt_tcplink *l);

/* Sending: queue a header and payload (borrowed until rt_tcplink_sent
 * counts it), then flush as much as the socket takes without blocking. */
bool rt_tcplink_can_put(const rt_tcplink *l);
void rt_tcplink_put(rt_tcplink *l, const struct rt_tcplink_hdr *h, const void *payload);
int rt_tcplink_flush(rt_tcplink *l);
/* Messages fully handed to the kernel so far, and queued so far. */
uint64_t rt_tcplink_sent(const rt_tcplink *l);
uint64_t rt_tcplink_queued(const rt_tcplink *l);

/* Receiving: read what is there (without blocking) of the next message,
 * its payload into dst (exactly `bytes` expected). 0 nothing came, 1 some
 * bytes came (x->hdr_ok once the header is in: the caller checks it
 * before using payload), 2 the message is complete, < 0 the link closed or
 * sent something that is not a chunk header (RT_ERR_NET, detail). */
int rt_tcplink_recv(rt_tcplink *l, struct rt_tcplink_rx *x, void *dst, size_t bytes);

#endif
