/* transport.h — the ZeroMQ side of ragtag: sockets with limits, endpoints,
 * multipart messages, zero-copy tensor frames, addresses and host identity.
 *
 * Every socket that faces the network is made by rt_zsock_new, which sets
 * the limits once: ZMQ_MAXMSGSIZE (a larger frame makes libzmq drop the
 * connection before allocating), no linger, and the high-water marks. */
#ifndef RT_TRANSPORT_H
#define RT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zmq.h>

#include "wire.h"

#define RT_ENDPOINT_MAX 256
#define RT_HOST_ID_MAX 80
#define RT_MAX_FRAMES 8

/* A socket of `type` with ragtag's limits: frames up to max_frame bytes
 * (0: libzmq's default, no limit), unlimited HWM when hwm is 0. NULL on
 * error with a detail. */
void *rt_zsock_new(void *ctx, int type, int64_t max_frame, int hwm);
void rt_zsock_close(void **sock);

/* Bind; for "tcp://HOST:*" or "tcp://HOST:0" the port the OS picked is in
 * the endpoint written to `actual` (which may be the same buffer). */
int rt_zsock_bind(void *sock, const char *endpoint, char *actual, size_t cap);
int rt_zsock_connect(void *sock, const char *endpoint);

/* Received frames of one multipart message. */
typedef struct rt_zframes {
    zmq_msg_t f[RT_MAX_FRAMES];
    int n;
    bool truncated; /* the message had more frames than RT_MAX_FRAMES */
} rt_zframes;

void rt_zframes_init(rt_zframes *fr);
void rt_zframes_close(rt_zframes *fr);
/* Receive one whole message (all its frames; more than RT_MAX_FRAMES are
 * drained and marked truncated). 1 received, 0 nothing (ZMQ_DONTWAIT),
 * negative on error (RT_ERR_INTERRUPTED for EINTR). */
int rt_zframes_recv(void *sock, rt_zframes *fr, int flags);
static inline const void *rt_zframe_data(rt_zframes *fr, int i) { return zmq_msg_data(&fr->f[i]); }
static inline size_t rt_zframe_size(rt_zframes *fr, int i) { return zmq_msg_size(&fr->f[i]); }
/* The peer's IP address as libzmq saw it ("" when unknown). */
void rt_zframes_peer(rt_zframes *fr, int i, char *out, size_t cap);

/* Send a frame, copying (more: ZMQ_SNDMORE follows). */
int rt_zsend(void *sock, const void *data, size_t n, bool more);
/* Send a frame without copying; `done` (may be NULL) is called from a
 * libzmq thread once the bytes are no longer needed. */
int rt_zsend_zc(void *sock, const void *data, size_t n, bool more, zmq_free_fn *done, void *hint);
/* Send a control message (one frame) and then `nextra` raw frames, copied. */
int rt_zsend_msg(void *sock, const rt_wire_writer *w, const void *const *extra,
                 const size_t *extra_n, int nextra);

/* ---- addresses ------------------------------------------------------------------ */

/* The local IP address of the interface that routes to `endpoint`'s host
 * (a UDP connect: no packet is sent). For ipc:// endpoints "127.0.0.1". */
int rt_net_route_addr(const char *endpoint, char *ip, size_t cap);
/* Host part of "tcp://HOST:PORT" (brackets of IPv6 kept off). */
int rt_net_endpoint_host(const char *endpoint, char *host, size_t cap);
/* Identity of this host *and* of its /dev/shm: two workers that report the
 * same id can share memory (same kernel boot, same /dev/shm mount).
 * "BOOT_ID/...": the part before the '/' is the kernel's boot id, the same
 * in every container of one machine ("noboot" where it cannot be read). */
void rt_net_host_id(char *out, size_t cap);
/* Short host name for tables and messages. */
void rt_net_host_name(char *out, size_t cap);

/* A random 64-bit nonce (getrandom, or time and pid). */
uint64_t rt_net_nonce(void);

#endif
