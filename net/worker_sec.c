/* worker_sec.c — a worker's credentials and handshakes (see worker_sec.h). */
#include "config.h"

#include "worker_sec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "clock.h"
#include "status.h"

#define RING_DEFER 10.0 /* s a neighbour's key may wait for this worker to learn its generation */
#define CLOSED_MAX 3    /* handshakes closed by the coordinator before giving up */

/* A coordinator on this machine's loopback made its credentials in this
 * user's file when it started: wait for them like for the coordinator. */
static int local_creds(struct rt_worker_sec *s, const struct rt_worker_options *o,
                       const char *who)
{
    double t0 = rt_now(), note = t0;
    for (;;) {
        int rc = rt_creds_local(o->join, false, &s->creds);
        if (rc == RT_OK)
            return RT_OK;
        if (rc != RT_ERR_NOTFOUND && rc != RT_ERR_FORMAT)
            return rc; /* a file open to others is refused, not waited for */
        double now = rt_now();
        if (o->connect_timeout > 0 && now - t0 > o->connect_timeout)
            return rt_error(RT_ERR_TIMEOUT, "no coordinator made loopback credentials for %s "
                                            "within %.0f s (%s)", o->join, o->connect_timeout,
                            rt_error_detail());
        if (now - note > 10.0 && !o->quiet) {
            note = now;
            fprintf(stderr, "ragtag: [%s] still waiting for the loopback credentials of %s "
                            "(a coordinator of this user makes them when it starts)\n", who,
                    o->join);
        }
        usleep(200000);
    }
}

static int get_creds(struct rt_worker_sec *s, const struct rt_worker_options *o,
                     const char *who)
{
    const char *env = getenv("RAGTAG_JOIN");
    if (o->join_file[0])
        return rt_creds_read_join_file(o->join_file, &s->creds);
    if (env && env[0]) {
        int rc = rt_creds_from_join(env, &s->creds);
        return rc < 0 ? rt_error_wrap(rc, "$RAGTAG_JOIN") : RT_OK;
    }
    if (rt_endpoint_is_loopback(o->join))
        return local_creds(s, o, who);
    return rt_error(RT_ERR_CONFIG, "no credentials to join %s: give the join string the "
                                   "coordinator printed (RAGTAG_JOIN=... in the environment, "
                                   "or --join-file FILE), or --insecure if the coordinator "
                                   "runs --insecure", o->join);
}

int rt_worker_sec_open(struct rt_worker_sec *s, void *zctx, const struct rt_worker_options *o,
                       const char *who)
{
    memset(s, 0, sizeof *s);
    if (o->insecure) {
        fprintf(stderr, "ragtag: [%s] WARNING: --insecure: this worker's links are neither "
                        "authenticated nor encrypted\n", who);
        return RT_OK;
    }
    RT_TRY(get_creds(s, o, who));
    if (o->keys_dir[0]) {
        char path[1100];
        snprintf(path, sizeof path, "%s/secret.key", o->keys_dir);
        RT_TRY(rt_keypair_load(path, &s->self));
        s->own_key = true;
    } else {
        RT_TRY(rt_keypair_new(&s->self));
    }
    struct rt_curve_config cc = {
        .zctx = zctx,
        .self = s->self,
        .who = who,
        .unknown = "not a member of this run's current generation",
        .defer_s = RING_DEFER,
        .quiet = o->quiet,
    };
    s->curve = rt_curve_new(&cc);
    return s->curve ? RT_OK : RT_ERR_NET;
}

int rt_worker_sec_ctrl(struct rt_worker_sec *s, void *zctx, void *ctrl)
{
    if (s->curve)
        RT_TRY(rt_curve_client(s->curve, ctrl, s->creds.coord.pub,
                               s->own_key ? &s->self : &s->creds.invite));
    char ep[80];
    snprintf(ep, sizeof ep, "inproc://ragtag-worker-handshakes-%p", (void *)s);
    int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    int zero = 0;
    if (zmq_socket_monitor(ctrl, ep, events) != 0 || !(s->mon = zmq_socket(zctx, ZMQ_PAIR)) ||
        zmq_setsockopt(s->mon, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(s->mon, ep) != 0)
        return rt_error(RT_ERR_NET, "cannot watch the handshakes with the coordinator: %s",
                        zmq_strerror(errno));
    s->ctrl = ctrl;
    return RT_OK;
}

/* One event: 1 read into *event / *value, 0 none. */
static int next_event(void *mon, uint16_t *event, uint32_t *value)
{
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    zmq_msg_init(&addr);
    int got = zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&ev) &&
              zmq_msg_recv(&addr, mon, ZMQ_DONTWAIT) >= 0 && zmq_msg_size(&ev) >= 6;
    if (got) {
        memcpy(event, zmq_msg_data(&ev), 2);
        memcpy(value, (const char *)zmq_msg_data(&ev) + 2, 4);
    }
    zmq_msg_close(&ev);
    zmq_msg_close(&addr);
    return got;
}

int rt_worker_sec_check(struct rt_worker_sec *s, const char *join)
{
    uint16_t event;
    uint32_t value;
    while (s->mon && next_event(s->mon, &event, &value)) {
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
            s->closed = 0;
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
            return rt_error(RT_ERR_NET, "the coordinator at %s refused this worker (status %u): "
                                        "its join token is not this run's, or this worker's "
                                        "key is not in the coordinator's --authorized-keys",
                            join, value);
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                 value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH && s->curve)
            return rt_error(RT_ERR_NET, "the coordinator at %s does not speak CurveZMQ: it runs "
                                        "--insecure (give this worker --insecure too, on a "
                                        "network you trust)", join);
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                 value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
            return rt_error(RT_ERR_NET, "the coordinator at %s speaks CurveZMQ and this worker "
                                        "runs --insecure: give it the join string the "
                                        "coordinator printed instead", join);
        else if (++s->closed >= CLOSED_MAX && !s->curve)
            return rt_error(RT_ERR_NET, "the coordinator at %s ended the handshake %d times: it "
                                        "speaks CurveZMQ and this worker runs --insecure: give "
                                        "it the join string the coordinator printed instead",
                            join, s->closed);
        else if (s->closed >= CLOSED_MAX)
            return rt_error(RT_ERR_NET, "the coordinator at %s ended the CurveZMQ handshake %d "
                                        "times: the coordinator key in the join string is not "
                                        "this coordinator's (an old join string?)", join,
                            s->closed);
    }
    return RT_OK;
}

void rt_worker_sec_joined(struct rt_worker_sec *s)
{
    if (s->ctrl)
        zmq_socket_monitor(s->ctrl, NULL, 0); /* before the comm thread takes the socket */
    s->ctrl = NULL;
    if (s->mon)
        zmq_close(s->mon);
    s->mon = NULL;
}

void rt_worker_sec_close(struct rt_worker_sec *s)
{
    rt_worker_sec_joined(s);
    rt_curve_destroy(&s->curve);
    memset(&s->creds, 0, sizeof s->creds);
    memset(&s->self, 0, sizeof s->self);
}
