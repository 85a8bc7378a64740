/* coord_socket.c — the coordinator's one ROUTER socket: every message in
 * is checked here (envelope, run id, known sender) before any action sees
 * it; every message out goes to one worker's route. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "coord-impl.h"
#include "status.h"

static int set_option(struct coord *k, int option, const char *name, int value)
{
    if (zmq_setsockopt(k->router, option, &value, sizeof value) != 0)
        return rt_error(RT_ERR_NET, "coordinator socket: cannot set %s: %s", name,
                        zmq_strerror(errno));
    return RT_OK;
}

/* A worker killed or cut off closes its TCP connection at once, long
 * before --worker-timeout of silence: the router's monitor reports the
 * closed connection's descriptor, matched to the worker whose messages
 * came on it. */
static int open_monitor(struct coord *k)
{
    char ep[80];
    snprintf(ep, sizeof ep, "inproc://ragtag-coord-monitor-%p", (void *)k);
    int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(k->router, ep, events) != 0 ||
        !(k->monitor = zmq_socket(k->zctx, ZMQ_PAIR)) || zmq_connect(k->monitor, ep) != 0)
        return rt_error(RT_ERR_NET, "coordinator socket: cannot watch its connections: %s",
                        zmq_strerror(errno));
    int zero = 0;
    if (zmq_setsockopt(k->monitor, ZMQ_LINGER, &zero, sizeof zero) != 0)
        return rt_error(RT_ERR_NET, "coordinator socket: cannot set the monitor's linger: %s",
                        zmq_strerror(errno));
    return RT_OK;
}

/* A handshake that failed before the ZAP handler saw it: a client without
 * CurveZMQ, or one that does not hold this coordinator's public key. The
 * event names the listening endpoint, not the client: logged under it, at
 * most once a minute. */
static void refused_handshake(struct coord *k, uint16_t event, uint32_t value, zmq_msg_t *addr)
{
    char ep[RT_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, "%.*s", (int)zmq_msg_size(addr), (const char *)zmq_msg_data(addr));
    const char *why =
        event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
            ? "a client without CurveZMQ (no credentials, or --insecure)"
        : event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
            ? "a CurveZMQ handshake that does not decrypt (a wrong coordinator key)"
            : "a handshake that ended early";
    char who[RT_ENDPOINT_MAX + 32];
    snprintf(who, sizeof who, "a client of %s", ep);
    rt_curve_log_refusal(k->curve, who, why);
}

/* Take the monitor's events: note when a worker's connection closed, log
 * handshakes refused. */
static void take_events(struct coord *k)
{
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        zmq_msg_init(&addr);
        bool got = zmq_msg_recv(&ev, k->monitor, ZMQ_DONTWAIT) >= 0 &&
                   zmq_msg_more(&ev) && zmq_msg_recv(&addr, k->monitor, ZMQ_DONTWAIT) >= 0;
        if (got && zmq_msg_size(&ev) >= 6) {
            uint16_t event;
            uint32_t value;
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (const char *)zmq_msg_data(&ev) + 2, 4);
            for (int i = 0; event == ZMQ_EVENT_DISCONNECTED && i < k->nw; i++)
                if (k->w[i].fd == (int)value && !k->w[i].closed_at)
                    k->w[i].closed_at = rt_now();
            if (event != ZMQ_EVENT_DISCONNECTED && k->curve)
                refused_handshake(k, event, value, &addr);
        }
        zmq_msg_close(&ev);
        zmq_msg_close(&addr);
        if (!got)
            return;
    }
}

int coord_socket_open(struct coord *k)
{
    if (!(k->zctx = zmq_ctx_new()))
        return rt_error(RT_ERR_NET, "cannot start ZeroMQ: %s", zmq_strerror(errno));
    /* Workers send checkpoints: the largest frame is the parameters. */
    int64_t max = (int64_t)(k->ck.np + 1024) * (int64_t)sizeof(float) + ((int64_t)1 << 20);
    const char *ep = k->o->listen[0] ? k->o->listen : "tcp://127.0.0.1:*";
    RT_TRY(coord_security_open(k, ep));
    if (!(k->router = rt_zsock_new(k->zctx, ZMQ_ROUTER, max, 0)))
        return RT_ERR_NET;
    RT_TRY(set_option(k, ZMQ_ROUTER_MANDATORY, "ZMQ_ROUTER_MANDATORY", 1));
    /* No handover: a connection that claims a member's routing id is
     * ignored by libzmq instead of taking that member's link over. */
    RT_TRY(set_option(k, ZMQ_ROUTER_HANDOVER, "ZMQ_ROUTER_HANDOVER", 0));
    RT_TRY(rt_curve_server(k->curve, k->router));
    RT_TRY(open_monitor(k));
    /* started again from the checkpoint: the last run's listener may take
     * a moment to leave the port (coord_restart.c) */
    int rc;
    for (double t0 = rt_now();
         (rc = rt_zsock_bind(k->router, ep, k->endpoint, sizeof k->endpoint)) < 0 &&
         k->restarted && errno == EADDRINUSE && rt_now() - t0 < 10.0;)
        usleep(100000);
    RT_TRY(rc);
    coord_security_announce(k);
    return RT_OK;
}

void coord_socket_close(struct coord *k, int rc)
{
    if (k->router) {
        /* Keep the error detail: a failed option sets its own. */
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", rt_error_detail());
        /* a failed run's aborts, and the "finished" of joiners still
         * setting up, must reach them: without it they wait out the
         * worker timeout and fail */
        int linger = rc < 0 || k->told_finished ? 2000 : 0;
        if (set_option(k, ZMQ_LINGER, "ZMQ_LINGER", linger) < 0) {
            coord_note("%s", rt_error_detail());
            rt_error(rc < 0 ? rc : RT_ERR_NET, "%s", keep);
        }
    }
    rt_zsock_close(&k->router);
    rt_zsock_close(&k->monitor);
    coord_security_close(k);
    if (k->zctx)
        zmq_ctx_term(k->zctx);
    k->zctx = NULL;
}

static int send_rid(struct coord *k, const void *rid, size_t rid_len, const char *name,
                    const void *const *frames, const size_t *sizes, int n)
{
    if (zmq_send(k->router, rid, rid_len, ZMQ_SNDMORE) < 0 ||
        rt_zsend_msg(k->router, &k->wr, frames, sizes, n) < 0)
        return rt_error(RT_ERR_NET, "cannot reach worker %s: %s", name, zmq_strerror(errno));
    return RT_OK;
}

int coord_send(struct coord *k, struct coord_worker *w, const void *const *frames,
               const size_t *sizes, int n)
{
    return send_rid(k, w->rid, w->rid_len, w->m.name, frames, sizes, n);
}

void coord_send_simple(struct coord *k, struct coord_worker *w, const char *type,
                       const char *reason)
{
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", rt_error_detail());
    rt_wire_begin(&k->wr, k->run, type, reason ? 1 : 0);
    if (reason)
        rt_wire_put_str(&k->wr, "reason", reason);
    if (rt_wire_end(&k->wr) == RT_OK && coord_send(k, w, NULL, NULL, 0) < 0)
        rt_error(RT_ERR_NET, "%s", keep);
}

void coord_send_all(struct coord *k, const char *type, const char *reason)
{
    for (int i = 0; i < k->nw; i++)
        if (!k->w[i].gone)
            coord_send_simple(k, &k->w[i], type, reason);
}

void coord_heartbeat(struct coord *k)
{
    double now = rt_now();
    if (now - k->last_hb < 1.0)
        return;
    k->last_hb = now;
    for (int i = 0; i < k->nw; i++)
        if (!k->w[i].gone)
            coord_send_ack(k, &k->w[i]); /* a heartbeat with the newest step read */
}

static struct coord_worker *find_rid(struct coord *k, const void *rid, size_t n)
{
    for (int i = 0; i < k->nw; i++)
        if (k->w[i].rid_len == n && !memcmp(k->w[i].rid, rid, n))
            return &k->w[i];
    return NULL;
}

/* Why the message in k->msg from w (NULL: a stranger) is not taken, or
 * NULL when it is. */
static const char *refusal(struct coord *k, struct coord_worker *w, char *why, size_t cap)
{
    bool hello = !strcmp(k->msg.type, "hello");
    /* A hello may come without the run id (the worker does not know it
     * yet); everything else must carry ours. */
    if (!k->msg.run[0] && !hello)
        return "a message without a run id";
    if (!w && !hello && strcmp(k->msg.type, "rejoin") != 0) {
        snprintf(why, cap, "a '%s' message from a worker that never said hello", k->msg.type);
        return why;
    }
    return NULL;
}

/* One message: 1 with k->msg parsed and *from its sender (NULL for a
 * stranger, who may only say hello), 0 when nothing came in timeout_ms.
 * Bad messages are logged and dropped here. */
int coord_next_msg(struct coord *k, int timeout_ms, struct coord_worker **from)
{
    zmq_pollitem_t it[2] = {{.socket = k->router, .events = ZMQ_POLLIN},
                            {.socket = k->monitor, .events = ZMQ_POLLIN}};
    if (zmq_poll(it, k->monitor ? 2 : 1, timeout_ms) <= 0)
        return 0;
    if (it[1].revents & ZMQ_POLLIN)
        take_events(k);
    if (!(it[0].revents & ZMQ_POLLIN))
        return 0;
    if (rt_zframes_recv(k->router, &k->fr, ZMQ_DONTWAIT) <= 0)
        return 0;
    char peer[64], why[96];
    rt_zframes_peer(&k->fr, 1, peer, sizeof peer);
    if (k->fr.n < 2 || k->fr.truncated) {
        rt_wire_drop(&k->drops, peer, "a message of the wrong number of frames");
        return 0;
    }
    struct coord_worker *w = find_rid(k, rt_zframe_data(&k->fr, 0), rt_zframe_size(&k->fr, 0));
    if (rt_wire_parse(&k->msg, rt_zframe_data(&k->fr, 1), rt_zframe_size(&k->fr, 1), k->run,
                      true) < 0) {
        char keep[256];
        snprintf(keep, sizeof keep, "%s", rt_error_detail());
        if (!coord_restart_retell(k))
            rt_wire_drop(&k->drops, peer, keep);
        return 0;
    }
    /* Only a checkpoint part brings frames after its map (coord_ckpt_part
     * counts them); any other message is one map. */
    if (k->fr.n != 2 && strcmp(k->msg.type, "ckpt") != 0) {
        snprintf(why, sizeof why, "a '%.31s' message of %d frames (it has one)", k->msg.type,
                 k->fr.n - 1);
        rt_wire_drop(&k->drops, peer, why);
        return 0;
    }
    if (!w && !strcmp(k->msg.type, "hb") && k->msg.run[0] && (k->adopting || k->training)) {
        coord_ask_who(k); /* a worker of this run that a restarted coordinator does not know */
        return 0;
    }
    if (!w && k->adopting && k->msg.run[0] && strcmp(k->msg.type, "rejoin") != 0)
        return 0; /* a report of this run's worker not yet rejoined: it comes again */
    const char *no = refusal(k, w, why, sizeof why);
    if (no) {
        rt_wire_drop(&k->drops, peer, no);
        return 0;
    }
    if (w) {
        w->last_seen = rt_now();
        w->fd = zmq_msg_get(&k->fr.f[1], ZMQ_SRCFD);
        w->closed_at = 0.0; /* a worker that reconnected is back */
    }
    *from = w;
    return 1;
}

bool coord_has_input(struct coord *k)
{
    zmq_pollitem_t it = {.socket = k->router, .events = ZMQ_POLLIN};
    return zmq_poll(&it, 1, 0) > 0 && (it.revents & ZMQ_POLLIN);
}

void coord_drop_unexpected(struct coord *k, struct coord_worker *w)
{
    char why[96];
    snprintf(why, sizeof why, "an unexpected '%s' message", k->msg.type);
    rt_wire_drop(&k->drops, w ? w->m.name : "a stranger", why);
}

int coord_send_rid(struct coord *k, const void *rid, size_t rid_len, const char *name)
{
    return send_rid(k, rid, rid_len, name, NULL, NULL, 0);
}

int coord_send_reject(struct coord *k, const void *rid, size_t rid_len, const char *name,
                      const char *why)
{
    rt_wire_begin(&k->wr, "", "reject", 1);
    rt_wire_put_str(&k->wr, "reason", why);
    RT_TRY(rt_wire_end(&k->wr));
    return send_rid(k, rid, rid_len, name, NULL, NULL, 0);
}
