/* comm.c — the communication thread (see comm.h).
 *
 * Commands travel over the inproc pipe as one fixed-size frame (a struct:
 * both ends are this file, in one process), followed, for "send", by the
 * frames to forward. Replies carry the status and the error detail, which
 * is thread-local and must be re-set on the training thread. */
#include "config.h"

#include "comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "status.h"
#include "transport.h"

#define COMM_TAG 0x434f4d4du /* "COMM" */
#define COMM_DEAD 0xdeadbeefu

enum { CMD_QUIT = 100, CMD_SEND = 101 };

struct cmd {
    int kind;
    void *buf;
    size_t n;
    uint32_t flags;
    int root;
    int nframes; /* CMD_SEND */
};

struct reply {
    int rc;
    uint32_t flags;
    char detail[480];
};

struct rt_comm {
    uint32_t tag;
    void *zctx;
    rt_ring *ring;
    bool borrowed;
    void *ctrl;
    void *pipe_main, *pipe_thread;
    pthread_t thread;
    bool started, busy;
    int rank, world;
    char run[RT_RUN_ID_LEN + 1];
    double hb_interval, peer_timeout;

    /* thread side */
    double last_hb_sent, last_seen;
    bool aborted;
    char abort_reason[400];
    rt_wire_writer w;
    rt_wire_msg msg;
    rt_zframes fr;
    rt_wire_droplog drops;
    char who[32];

    _Atomic int stop;
    _Atomic int aborted_seen; /* set after abort_reason is written: for other threads */
};

static void check(const rt_comm *c) { RT_ASSERT(c && c->tag == COMM_TAG); }

/* ---- thread side ---------------------------------------------------------------- */

static void send_hb(rt_comm *c)
{
    rt_wire_begin(&c->w, c->run, "hb", 1);
    rt_wire_put_uint(&c->w, "rank", (uint64_t)c->rank);
    if (rt_wire_end(&c->w) == RT_OK)
        zmq_send(c->ctrl, c->w.data, c->w.len, ZMQ_DONTWAIT);
    c->last_hb_sent = rt_now();
}

static void handle_ctrl_msg(rt_comm *c)
{
    char peer[64] = "the coordinator";
    if (c->fr.n != 1 || c->fr.truncated) {
        rt_wire_drop(&c->drops, peer, "a control message of several frames");
        return;
    }
    if (rt_wire_parse(&c->msg, rt_zframe_data(&c->fr, 0), rt_zframe_size(&c->fr, 0), c->run,
                      false) < 0) {
        rt_wire_drop(&c->drops, peer, rt_error_detail());
        return;
    }
    c->last_seen = rt_now();
    const char *t = c->msg.type;
    if (!strcmp(t, "hb"))
        return;
    if (!strcmp(t, "stop")) {
        atomic_store(&c->stop, 1);
        return;
    }
    if (!strcmp(t, "abort")) {
        char why[300];
        if (rt_wire_get_str(rt_wire_root(&c->msg), "reason", 0, why, sizeof why) < 0)
            snprintf(why, sizeof why, "(no reason given)");
        c->aborted = true;
        snprintf(c->abort_reason, sizeof c->abort_reason, "the coordinator aborted the run: %s",
                 why);
        atomic_store(&c->aborted_seen, 1);
        return;
    }
    char why[80];
    snprintf(why, sizeof why, "an unexpected '%s' message during training", t);
    rt_wire_drop(&c->drops, peer, why);
}

/* Drain the control socket, keep heartbeats going, watch the coordinator.
 * Also the ring's idle callback: < 0 once the run is aborted. */
static int service_ctrl(void *arg)
{
    rt_comm *c = arg;
    if (c->ctrl) {
        for (int k = 0; k < 256; k++) {
            int rc = rt_zframes_recv(c->ctrl, &c->fr, ZMQ_DONTWAIT);
            if (rc <= 0)
                break;
            handle_ctrl_msg(c);
        }
        double now = rt_now();
        if (now - c->last_hb_sent >= c->hb_interval)
            send_hb(c);
        if (!c->aborted && now - c->last_seen > c->peer_timeout) {
            c->aborted = true;
            snprintf(c->abort_reason, sizeof c->abort_reason,
                     "lost the coordinator: nothing heard from it for %.0f s", now - c->last_seen);
            atomic_store(&c->aborted_seen, 1);
        }
    }
    if (c->aborted)
        return rt_error(RT_ERR_NET, "%s", c->abort_reason);
    return RT_OK;
}

static int run_collective(rt_comm *c, const struct cmd *k, uint32_t *flags)
{
    RT_TRY(service_ctrl(c));
    *flags = k->flags;
    switch (k->kind) {
    case RT_COMM_REDUCE_SCATTER:
        return rt_ring_reduce_scatter(c->ring, k->buf, k->n, flags);
    case RT_COMM_ALL_GATHER:
        return rt_ring_all_gather(c->ring, k->buf, k->n, flags);
    case RT_COMM_ALLREDUCE:
        return rt_ring_allreduce(c->ring, k->buf, k->n, flags);
    case RT_COMM_ALLREDUCE_F64:
        return rt_ring_allreduce_f64(c->ring, k->buf, k->n);
    case RT_COMM_BROADCAST:
        return rt_ring_broadcast(c->ring, k->buf, k->n, k->root);
    }
    return rt_error(RT_ERR_ARG, "unknown collective %d", k->kind);
}

/* Forward the frames that follow a CMD_SEND, without copying them again. */
static void forward(rt_comm *c, int nframes)
{
    for (int i = 0; i < nframes; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->pipe_thread, 0) < 0) {
            zmq_msg_close(&m);
            return;
        }
        if (c->ctrl)
            zmq_msg_send(&m, c->ctrl, i + 1 < nframes ? ZMQ_SNDMORE : 0);
        zmq_msg_close(&m);
    }
}

static bool handle_pipe(rt_comm *c)
{
    struct cmd k;
    int n = zmq_recv(c->pipe_thread, &k, sizeof k, 0);
    if (n != (int)sizeof k)
        return n >= 0 || errno == EINTR || errno == EAGAIN;
    if (k.kind == CMD_QUIT)
        return false;
    if (k.kind == CMD_SEND) {
        forward(c, k.nframes);
        return true;
    }
    struct reply rep = {0};
    rt_error_clear();
    rep.rc = run_collective(c, &k, &rep.flags);
    if (rep.rc < 0)
        snprintf(rep.detail, sizeof rep.detail, "%s", rt_error_detail());
    zmq_send(c->pipe_thread, &rep, sizeof rep, 0);
    return true;
}

static void *comm_main(void *arg)
{
    rt_comm *c = arg;
    c->last_seen = c->last_hb_sent = rt_now();
    for (;;) {
        zmq_pollitem_t it[2] = {{.socket = c->pipe_thread, .events = ZMQ_POLLIN},
                                {.socket = c->ctrl, .events = ZMQ_POLLIN}};
        long timeout = -1;
        if (c->ctrl) {
            double left = c->hb_interval - (rt_now() - c->last_hb_sent);
            timeout = left < 0 ? 0 : (long)(left * 1000) + 1;
        }
        int rc = zmq_poll(it, c->ctrl ? 2 : 1, timeout);
        if (rc < 0 && errno == ETERM)
            break;
        if (rc > 0 && (it[0].revents & ZMQ_POLLIN) && !handle_pipe(c))
            break;
        service_ctrl(c);
    }
    return NULL;
}

/* ---- training-thread side ------------------------------------------------------- */

rt_comm *rt_comm_new(const struct rt_comm_config *cfg)
{
    RT_ASSERT(cfg && cfg->ring && *cfg->ring && cfg->zctx);
    rt_comm *c = calloc(1, sizeof *c);
    if (!c) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->tag = COMM_TAG;
    c->zctx = cfg->zctx;
    c->ring = *cfg->ring;
    c->borrowed = cfg->borrow_ring;
    if (!cfg->borrow_ring)
        *cfg->ring = NULL;
    if (cfg->ctrl) {
        c->ctrl = *cfg->ctrl;
        *cfg->ctrl = NULL;
    }
    c->rank = rt_ring_rank(c->ring);
    c->world = rt_ring_size(c->ring);
    snprintf(c->run, sizeof c->run, "%s", cfg->run ? cfg->run : "");
    c->hb_interval = cfg->hb_interval > 0 ? cfg->hb_interval : 1.0;
    c->peer_timeout = cfg->peer_timeout > 0 ? cfg->peer_timeout : 30.0;
    rt_wire_writer_init(&c->w);
    rt_wire_msg_init(&c->msg);
    rt_zframes_init(&c->fr);
    snprintf(c->who, sizeof c->who, "worker rank %d", c->rank);
    rt_wire_droplog_init(&c->drops, c->who);
    atomic_init(&c->stop, 0);

    char ep[64];
    snprintf(ep, sizeof ep, "inproc://ragtag-comm-%p", (void *)c);
    c->pipe_main = zmq_socket(c->zctx, ZMQ_PAIR);
    c->pipe_thread = zmq_socket(c->zctx, ZMQ_PAIR);
    int zero = 0;
    if (!c->pipe_main || !c->pipe_thread || zmq_bind(c->pipe_main, ep) != 0 ||
        zmq_connect(c->pipe_thread, ep) != 0) {
        rt_error(RT_ERR_NET, "cannot create the communication pipe: %s", zmq_strerror(errno));
        goto fail;
    }
    zmq_setsockopt(c->pipe_main, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c->pipe_thread, ZMQ_LINGER, &zero, sizeof zero);
    rt_ring_set_idle(c->ring, service_ctrl, c);
    if (pthread_create(&c->thread, NULL, comm_main, c) != 0) {
        rt_error(RT_ERR_NOMEM, "cannot start the communication thread");
        goto fail;
    }
    c->started = true;
    return c;

fail:
    rt_comm_destroy(&c);
    return NULL;
}

rt_comm *rt_comm_new_bare(rt_ring *ring)
{
    struct rt_comm_config cfg = {.ring = &ring, .borrow_ring = true, .zctx = rt_ring_zctx(ring)};
    return rt_comm_new(&cfg);
}

void rt_comm_destroy(rt_comm **cp)
{
    if (!cp || !*cp)
        return;
    rt_comm *c = *cp;
    check(c);
    if (c->started) {
        if (c->busy) {
            uint32_t fl;
            rt_comm_wait(c, &fl);
        }
        struct cmd k = {.kind = CMD_QUIT};
        zmq_send(c->pipe_main, &k, sizeof k, 0);
        pthread_join(c->thread, NULL);
    }
    if (c->pipe_main)
        zmq_close(c->pipe_main);
    if (c->pipe_thread)
        zmq_close(c->pipe_thread);
    if (c->ctrl) {
        /* Let the last messages (the result, a checkpoint) leave. */
        int linger = 5000;
        zmq_setsockopt(c->ctrl, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(c->ctrl);
    }
    if (c->borrowed)
        rt_ring_set_idle(c->ring, NULL, NULL);
    else
        rt_ring_destroy(&c->ring);
    rt_wire_droplog_flush(&c->drops);
    rt_wire_writer_free(&c->w);
    rt_wire_msg_free(&c->msg);
    rt_zframes_close(&c->fr);
    c->tag = COMM_DEAD;
    free(c);
    *cp = NULL;
}

int rt_comm_submit(rt_comm *c, enum rt_comm_kind kind, void *buf, size_t n, uint32_t flags,
                   int root)
{
    check(c);
    RT_ASSERT(!c->busy);
    struct cmd k = {.kind = (int)kind, .buf = buf, .n = n, .flags = flags, .root = root};
    if (zmq_send(c->pipe_main, &k, sizeof k, 0) != (int)sizeof k)
        return rt_error(RT_ERR_NET, "communication thread unreachable: %s", zmq_strerror(errno));
    c->busy = true;
    return RT_OK;
}

int rt_comm_wait(rt_comm *c, uint32_t *flags)
{
    check(c);
    RT_ASSERT(c->busy);
    struct reply rep;
    int n;
    do {
        n = zmq_recv(c->pipe_main, &rep, sizeof rep, 0);
    } while (n < 0 && errno == EINTR);
    c->busy = false;
    if (n != (int)sizeof rep)
        return rt_error(RT_ERR_NET, "communication thread lost: %s", zmq_strerror(errno));
    if (flags)
        *flags = rep.flags;
    if (rep.rc < 0)
        return rt_error(rep.rc, "%s", rep.detail);
    return RT_OK;
}

static int call(rt_comm *c, enum rt_comm_kind kind, void *buf, size_t n, uint32_t *flags, int root)
{
    RT_TRY(rt_comm_submit(c, kind, buf, n, flags ? *flags : 0, root));
    return rt_comm_wait(c, flags);
}

int rt_comm_reduce_scatter(rt_comm *c, float *buf, size_t n, uint32_t *flags)
{
    return call(c, RT_COMM_REDUCE_SCATTER, buf, n, flags, 0);
}

int rt_comm_all_gather(rt_comm *c, float *buf, size_t n, uint32_t *flags)
{
    return call(c, RT_COMM_ALL_GATHER, buf, n, flags, 0);
}

int rt_comm_allreduce(rt_comm *c, float *buf, size_t n, uint32_t *flags)
{
    return call(c, RT_COMM_ALLREDUCE, buf, n, flags, 0);
}

int rt_comm_allreduce_f64(rt_comm *c, double *buf, size_t n)
{
    return call(c, RT_COMM_ALLREDUCE_F64, buf, n, NULL, 0);
}

int rt_comm_broadcast(rt_comm *c, void *buf, size_t bytes, int root)
{
    return call(c, RT_COMM_BROADCAST, buf, bytes, NULL, root);
}

int rt_comm_send(rt_comm *c, const rt_wire_writer *w, const void *const *frames,
                 const size_t *sizes, int nframes)
{
    check(c);
    struct cmd k = {.kind = CMD_SEND, .nframes = 1 + nframes};
    if (zmq_send(c->pipe_main, &k, sizeof k, ZMQ_SNDMORE) != (int)sizeof k)
        return rt_error(RT_ERR_NET, "communication thread unreachable: %s", zmq_strerror(errno));
    RT_TRY(rt_zsend(c->pipe_main, w->data, w->len, nframes > 0));
    for (int i = 0; i < nframes; i++)
        RT_TRY(rt_zsend(c->pipe_main, frames[i], sizes[i], i + 1 < nframes));
    return RT_OK;
}

const char *rt_comm_aborted(rt_comm *c)
{
    check(c);
    return atomic_load(&c->aborted_seen) ? c->abort_reason : NULL;
}

bool rt_comm_stop_requested(rt_comm *c)
{
    check(c);
    return atomic_load(&c->stop) != 0;
}

const char *rt_comm_link(const rt_comm *c, bool right)
{
    check(c);
    return rt_ring_link(c->ring, right);
}
