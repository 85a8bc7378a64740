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
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "membership.h"
#include "outbox.h"
#include "status.h"
#include "transport.h"

#define COMM_TAG 0x434f4d4du /* "COMM" */
#define COMM_DEAD 0xdeadbeefu
#define OP_TIMEOUT_DEFAULT 600.0
#define SLICE_MS 100     /* how often a waiting side looks at the other's state */
#define REPLY_GRACE 5.0  /* the training thread's margin over the comm thread's deadline */
#define SELF_PAUSE 2.0   /* a gap between two looks at the coordinator this long: we were
                            stopped, not the coordinator silent */
#define STEP_HB 0.05     /* a heartbeat carries a new step mark at most this late: the
                            run-ahead bound waits on its acknowledgement */
#define UNACKED_HB 0.2   /* and again this often while it is not acknowledged: a
                            restarted coordinator hears the workers waiting for it soon */
#define MARK_STEPS 8     /* or at once when this many steps are not yet told: at a
                            thousand steps a second (gossip, tiny batches) the 50-step
                            bound must not wait on the 50 ms above */

enum { CMD_QUIT = 100, CMD_SEND = 101, CMD_MARK = 102 };

struct cmd {
    int kind;
    void *buf;
    size_t n;
    size_t lo, hi;   /* RT_COMM_ALLREDUCE_RANGE: the range of buf's n elements */
    int elem;        /* and their type (enum rt_elem) */
    uint32_t flags;
    int root;
    int nframes;     /* CMD_SEND: the frames that follow */
    int send_kind;   /* CMD_SEND: enum rt_comm_send_kind */
    long step;       /* CMD_MARK, CMD_SEND: the training thread's newest mark */
    double deadline; /* collectives: rt_now() by which the collective must end */
};

struct reply {
    int rc;
    uint32_t flags;
    int rank, world; /* RT_COMM_REGROUP: this worker's place in the new group */
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
    bool started;
    /* training side: a reply was given up on or a command half sent, so the
     * next reply could not be matched to its command: the pipe is unusable */
    bool out_of_step;
    /* training side: the collectives submitted and not yet waited for, oldest
     * at q[head]; the thread answers them in order */
    struct inflight {
        int kind;
        double deadline;
    } q[RT_COLLECTIVE_MAX_INFLIGHT];
    int head, inflight;
    int rank, world;
    char run[RT_RUN_ID_LEN + 1];
    double hb_interval, peer_timeout, op_timeout, coord_timeout;

    /* thread side */
    double last_hb_sent, last_seen, last_service;
    double deadline;     /* of the collective running; 0 between collectives */
    const char *op_name; /* its name, for the timeout's message */
    bool ctrl_broken;    /* a send to the coordinator failed: send nothing more */
    bool orphaned;       /* the coordinator is silent past peer_timeout: waiting for one */
    long marked, hb_mark; /* the newest step mark, and the one the last heartbeat carried */
    /* Step marks without a wake-up each (rt_comm_mark): the training thread
     * stores its newest in mark_now and wakes this thread only when it
     * sleeps past STEP_HB or MARK_STEPS marks went unseen; this thread
     * publishes the newest mark it took (mark_seen). */
    _Atomic long mark_now, mark_seen;
    _Atomic int sleeps_long;
    long train_marked; /* training side: the newest mark it gave */
    rt_outbox *outbox;   /* reports kept until the coordinator acknowledges them */
    rt_wire_writer w;
    rt_wire_msg msg;
    rt_zframes fr;
    rt_wire_droplog drops;
    char who[32];
    /* membership (thread side): the current ring's members, the ones the
     * coordinator announced, a buffer to check the next announcement in */
    char self_id[24];
    struct rt_membership *ms, *pending, *scratch;
    bool has_pending;
    _Atomic int changing;  /* has_pending, for the training thread (rt_comm_members_changing) */
    /* The training thread's liveness (rt_comm_alive): its last sign of
     * progress, its longest stretch between two, and whether it waits on
     * this thread now (which is not its stall). */
    _Atomic double alive_at, longest_busy;
    _Atomic int train_waiting;
    bool stall_said;
    void *spare_inbox;   /* the inbox, while no ring holds it (a failed set-up) */
    uint64_t go_gen;     /* the coordinator's "go" came for this generation */
    bool allow_shm;
    rt_curve *curve; /* the worker's (NULL: plain links) */
    size_t chunk;

    /* shared: the comm thread writes, any thread reads */
    _Atomic int expelled;
    _Atomic int finished; /* the run ended before this worker was admitted */
    _Atomic int stop;
    _Atomic int quit;        /* destroy asks the thread to end */
    _Atomic int thread_gone; /* the thread ended: nobody answers any more */
    _Atomic int abort_claimed;
    _Atomic long acked;      /* the newest step the coordinator acknowledged */
    _Atomic(const char *) abort_reason; /* NULL, then abort_buf, written once before */
    char abort_buf[400];
};

static void check(const rt_comm *c) { RT_ASSERT(c && c->tag == COMM_TAG); }

static const char *kind_name(int kind)
{
    switch (kind) {
    case RT_COMM_REDUCE_SCATTER:
        return "reduce-scatter";
    case RT_COMM_ALL_GATHER:
        return "all-gather";
    case RT_COMM_ALLREDUCE:
        return "allreduce";
    case RT_COMM_ALLREDUCE_F64:
        return "float64 allreduce";
    case RT_COMM_ALLREDUCE_RANGE:
        return "allreduce of a range";
    case RT_COMM_BROADCAST:
        return "broadcast";
    case RT_COMM_REGROUP:
        return "change of members";
    }
    return "unknown collective";
}

/* The first reason wins and is never rewritten: readers on other threads
 * may hold the pointer rt_comm_aborted gave them until the comm dies. */
static void publish_abort(rt_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void publish_abort(rt_comm *c, const char *fmt, ...)
{
    if (atomic_exchange(&c->abort_claimed, 1))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->abort_buf, sizeof c->abort_buf, fmt, ap);
    va_end(ap);
    atomic_store_explicit(&c->abort_reason, c->abort_buf, memory_order_release);
}

static const char *abort_reason(rt_comm *c)
{
    return atomic_load_explicit(&c->abort_reason, memory_order_acquire);
}

/* ---- thread side ---------------------------------------------------------------- */

/* A part to the coordinator; a failure stops every later send, since the
 * control socket may now hold half a message. */
/* A send to the coordinator waits at most until the coordinator counts as
 * lost (its silence watch), and not at all once the run is aborted: a
 * blocked send must not hold the watch off, nor delay a worker's exit. */
static void ctrl_send(rt_comm *c, zmq_msg_t *m, int flags)
{
    if (!c->ctrl || c->ctrl_broken)
        return;
    double left = c->last_seen + c->peer_timeout + c->coord_timeout - rt_now();
    int ms = abort_reason(c) || left <= 0.0 ? 0 : (int)(left * 1000.0) + 1;
    if (zmq_setsockopt(c->ctrl, ZMQ_SNDTIMEO, &ms, sizeof ms) != 0) {
        c->ctrl_broken = true;
        publish_abort(c, "cannot set the control socket's send timeout: %s",
                      zmq_strerror(errno));
        return;
    }
    while (zmq_msg_send(m, c->ctrl, flags) < 0) {
        if (errno == EINTR)
            continue;
        int e = errno;
        c->ctrl_broken = true;
        if (e == EAGAIN)
            publish_abort(c, "lost the coordinator: nothing heard from it for %.0f s, and a "
                             "report to it could not leave",
                          rt_now() - c->last_seen);
        else
            publish_abort(c, "cannot send to the coordinator: %s", zmq_strerror(e));
        return;
    }
}

/* Seconds between heartbeats: a new step mark goes out soon, an
 * unacknowledged one again and again, otherwise the run's interval. */
static double hb_every(rt_comm *c)
{
    double every = c->hb_interval;
    if (c->marked >= c->hb_mark + MARK_STEPS)
        every = 0.0;
    else if (c->marked > c->hb_mark)
        every = STEP_HB;
    else if (c->marked > atomic_load(&c->acked) && UNACKED_HB < every)
        every = UNACKED_HB;
    return every;
}

/* The training thread's newest step mark, taken. */
static void take_mark(rt_comm *c)
{
    long m = atomic_load(&c->mark_now);
    if (m > c->marked)
        c->marked = m;
    atomic_store(&c->mark_seen, c->marked);
}

/* A heartbeat that finds the queue full (EAGAIN) is skipped: the
 * coordinator is not reading, and its own silence watch tells. */
/* A sign of progress; `count`: the stretch since the last one was the
 * training thread's own work (not a wait on this thread). */
static void stamp(rt_comm *c, bool count)
{
    double now = rt_now(), busy = now - atomic_load(&c->alive_at);
    if (count && busy > atomic_load(&c->longest_busy))
        atomic_store(&c->longest_busy, busy);
    atomic_store(&c->alive_at, now);
}

/* The training thread has shown no progress (a step, an evaluation batch)
 * for longer than the worker timeout plus ten of its longest stretches:
 * stuck (a hung driver call, a deadlock). The heartbeats then stop, so the
 * coordinator counts this worker lost and the others go on. */
static bool training_stalled(rt_comm *c)
{
    if (atomic_load(&c->train_waiting))
        return false;
    double busy = rt_now() - atomic_load(&c->alive_at);
    double limit = c->peer_timeout + 10.0 * atomic_load(&c->longest_busy);
    if (busy <= limit)
        return false;
    if (!c->stall_said)
        fprintf(stderr, "ragtag: [%s] the training thread made no progress for %.0f s (its "
                        "longest stretch so far: %.1f s): heartbeats stop, so that the run goes "
                        "on without this worker\n", c->who, busy, atomic_load(&c->longest_busy));
    c->stall_said = true;
    if (busy > limit + 10.0 * c->peer_timeout) {
        /* Still stuck long after the run went on: no process hangs for good. */
        fprintf(stderr, "ragtag: [%s] the training thread is still stuck after %.0f s: this "
                        "worker exits\n", c->who, busy);
        _Exit(EXIT_FAILURE);
    }
    return true;
}

static void send_hb(rt_comm *c)
{
    c->last_hb_sent = rt_now();
    if (c->ctrl_broken || training_stalled(c))
        return;
    rt_wire_begin(&c->w, c->run, "hb", c->marked >= 0 ? 2 : 1);
    rt_wire_put_uint(&c->w, "rank", (uint64_t)c->rank);
    if (c->marked >= 0)
        rt_wire_put_uint(&c->w, "step", (uint64_t)c->marked);
    c->hb_mark = c->marked;
    if (rt_wire_end(&c->w) < 0) {
        publish_abort(c, "cannot encode a heartbeat: %s", rt_error_detail());
        return;
    }
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, c->w.len) != 0) {
        publish_abort(c, "no memory for a heartbeat");
        return;
    }
    memcpy(zmq_msg_data(&m), c->w.data, c->w.len);
    if (zmq_msg_send(&m, c->ctrl, ZMQ_DONTWAIT) < 0 && errno != EAGAIN && errno != EINTR) {
        int e = errno;
        c->ctrl_broken = true;
        publish_abort(c, "cannot send heartbeats to the coordinator: %s", zmq_strerror(e));
    }
    zmq_msg_close(&m);
}

static int member_rank(const struct rt_membership *ms, const char *id)
{
    for (int r = 0; r < ms->n; r++)
        if (!strcmp(ms->m[r].id, id))
            return r;
    return -1;
}

/* "regroup": the members of a new generation, checked like any message;
 * kept until the training thread asks to form its ring. A generation
 * without this worker means the run goes on without it. */
static void take_regroup(rt_comm *c)
{
    const char *peer = "the coordinator";
    if (!c->ms) {
        rt_wire_drop(&c->drops, peer, "a change of members for a ring that cannot change");
        return;
    }
    uint64_t newest = c->has_pending ? c->pending->gen : c->ms->gen;
    if (rt_membership_get(rt_wire_root(&c->msg), c->scratch) < 0) {
        rt_wire_drop(&c->drops, peer, rt_error_detail());
        return;
    }
    if (c->scratch->gen <= newest) {
        rt_wire_drop(&c->drops, peer, "members of an old generation");
        return;
    }
    if (member_rank(c->scratch, c->self_id) < 0) {
        atomic_store(&c->expelled, 1);
        publish_abort(c, "the run goes on without this worker: generation %llu has no place "
                         "for it", (unsigned long long)c->scratch->gen);
        return;
    }
    /* the new generation's members alone may connect to this worker now */
    rt_membership_admit(c->scratch, c->curve);
    struct rt_membership *x = c->pending;
    c->pending = c->scratch;
    c->scratch = x;
    c->has_pending = true;
    atomic_store(&c->changing, 1);
    /* A restarted coordinator that re-adopts this worker says which step
     * its files hold: what rank 0 reported after that goes again. */
    uint64_t have;
    if (rt_wire_has(rt_wire_root(&c->msg), "have") &&
        rt_wire_get_uint(rt_wire_root(&c->msg), "have", 0, (uint64_t)1 << 50, &have) == 0) {
        rt_outbox_resend_after(c->outbox, (long)have);
        rt_outbox_flush(c->outbox, c->ctrl);
    }
}

/* The coordinator's heartbeat: the newest step it read from this worker. */
static void take_ack(rt_comm *c)
{
    uint64_t ack;
    rt_wire_map r = rt_wire_root(&c->msg);
    if (!rt_wire_has(r, "ack"))
        return;
    if (rt_wire_get_uint(r, "ack", 0, (uint64_t)1 << 50, &ack) < 0) {
        rt_wire_drop(&c->drops, "the coordinator", rt_error_detail());
        return;
    }
    if ((long)ack > atomic_load(&c->acked))
        atomic_store(&c->acked, (long)ack);
    rt_outbox_ack(c->outbox, (long)ack);
}

/* "who": a coordinator that does not know this connection (one restarted
 * with --resume on the run's address) asks who it is. The answer says
 * which run, generation and step this worker holds. */
static void send_rejoin(rt_comm *c)
{
    if (!c->ms || c->ctrl_broken)
        return;
    rt_wire_begin(&c->w, c->run, "rejoin", 5);
    rt_wire_put_uint(&c->w, "gen", c->ms->gen);
    rt_wire_put_uint(&c->w, "rank", (uint64_t)c->rank);
    rt_wire_put_uint(&c->w, "world", (uint64_t)c->world);
    rt_wire_put_uint(&c->w, "step", (uint64_t)(c->marked > 0 ? c->marked : 0));
    rt_wire_put_key(&c->w, "member");
    rt_member_put(&c->w, &c->ms->m[c->rank]);
    if (rt_wire_end(&c->w) == RT_OK)
        zmq_send(c->ctrl, c->w.data, c->w.len, ZMQ_DONTWAIT); /* "who" comes again */
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
    if (c->orphaned)
        fprintf(stderr, "ragtag: [%s] a coordinator answers again after %.0f s of silence\n",
                c->who, rt_now() - c->last_seen);
    c->orphaned = false;
    c->last_seen = rt_now();
    const char *t = c->msg.type;
    if (!strcmp(t, "hb")) {
        take_ack(c);
        return;
    }
    if (!strcmp(t, "who")) {
        send_rejoin(c);
        return;
    }
    if (!strcmp(t, "stop")) {
        atomic_store(&c->stop, 1);
        return;
    }
    if (!strcmp(t, "abort") || !strcmp(t, "expelled")) {
        char why[300];
        if (rt_wire_get_str(rt_wire_root(&c->msg), "reason", 0, why, sizeof why) < 0)
            snprintf(why, sizeof why, "(no reason given)");
        bool out = !strcmp(t, "expelled");
        if (out)
            atomic_store(&c->expelled, 1);
        publish_abort(c, "%s: %s", out ? "the run goes on without this worker" :
                                         "the coordinator aborted the run", why);
        return;
    }
    if (!strcmp(t, "finished")) { /* to a joiner still setting up when the run ended */
        atomic_store(&c->finished, 1);
        rt_wire_begin(&c->w, c->run, "bye", 0); /* read: the coordinator may close */
        if (!c->ctrl_broken && rt_wire_end(&c->w) == RT_OK)
            zmq_send(c->ctrl, c->w.data, c->w.len, ZMQ_DONTWAIT);
        publish_abort(c, "the run ended before this worker was admitted");
        return;
    }
    if (!strcmp(t, "regroup")) {
        take_regroup(c);
        return;
    }
    if (!strcmp(t, "go")) {
        uint64_t g;
        if (rt_wire_get_uint(rt_wire_root(&c->msg), "gen", 1, UINT32_MAX, &g) < 0)
            rt_wire_drop(&c->drops, peer, rt_error_detail());
        else if (g > c->go_gen)
            c->go_gen = g;
        return;
    }
    char why[80];
    snprintf(why, sizeof why, "an unexpected '%s' message during training", t);
    rt_wire_drop(&c->drops, peer, why);
}

/* A coordinator silent past peer_timeout: with a coord_timeout, this
 * worker keeps its state and waits that much longer for one (the same,
 * resumed, or a new one on the same address: the DEALER reconnects by
 * itself); then, or at once without one, the run is over for it. */
static void watch_coordinator(rt_comm *c, double now)
{
    double silent = now - c->last_seen;
    if (silent <= c->peer_timeout)
        return;
    if (c->coord_timeout <= 0) {
        publish_abort(c, "lost the coordinator: nothing heard from it for %.0f s", silent);
        return;
    }
    if (!c->orphaned && !abort_reason(c))
        fprintf(stderr, "ragtag: [%s] lost the coordinator: nothing heard from it for %.0f s; "
                        "keeping this worker's state, waiting up to %.0f s (--coord-timeout) "
                        "for a coordinator to take it back\n", c->who, silent,
                c->coord_timeout);
    c->orphaned = true;
    if (silent > c->peer_timeout + c->coord_timeout)
        publish_abort(c, "lost the coordinator: nothing heard from it for %.0f s, and none came "
                         "back within --coord-timeout %.0f s", silent, c->coord_timeout);
}

/* Drain the control socket, keep heartbeats going, watch the coordinator.
 * Also the ring's idle callback: < 0 once the run is aborted, the comm is
 * being destroyed or the collective's deadline has passed. */
static int service_ctrl(void *arg)
{
    rt_comm *c = arg;
    double now0 = rt_now();
    if (now0 - c->last_service > SELF_PAUSE)
        c->last_seen = now0; /* this process was stopped (SIGSTOP, a frozen VM): what the
                              * coordinator sent meanwhile is still to be read */
    c->last_service = now0;
    take_mark(c);
    if (c->ctrl) {
        for (int k = 0; k < 256; k++) {
            int rc = rt_zframes_recv(c->ctrl, &c->fr, ZMQ_DONTWAIT);
            if (rc <= 0)
                break;
            handle_ctrl_msg(c);
        }
        double now = rt_now();
        if (now - c->last_hb_sent >= hb_every(c))
            send_hb(c);
        if (!c->ctrl_broken)
            rt_outbox_flush(c->outbox, c->ctrl);
        if (now - c->last_seen > c->peer_timeout && c->stall_said) {
            atomic_store(&c->expelled, 1); /* it stopped its own heartbeats: dropped */
            publish_abort(c, "the run goes on without this worker: its training thread "
                             "stalled");
        } else {
            watch_coordinator(c, now);
        }
    }
    const char *why = abort_reason(c);
    if (why)
        return rt_error(RT_ERR_NET, "%s", why);
    if (atomic_load(&c->quit))
        return rt_error(RT_ERR_NET, "the communication thread is shutting down");
    if (c->deadline > 0 && c->has_pending)
        return rt_error(RT_ERR_REGROUP, "the members changed (generation %llu)",
                        (unsigned long long)c->pending->gen);
    if (c->deadline > 0 && rt_now() > c->deadline)
        return rt_error(RT_ERR_TIMEOUT, "the %s did not finish within %g s (the collective "
                        "timeout): a rank never took part in it", c->op_name, c->op_timeout);
    return RT_OK;
}

static int dispatch(rt_comm *c, const struct cmd *k, uint32_t *flags)
{
    *flags = k->flags;
    if (!c->ring)
        return rt_error(RT_ERR_NET, "no ring: forming the last one failed");
    switch (k->kind) {
    case RT_COMM_REDUCE_SCATTER:
        return rt_ring_reduce_scatter(c->ring, k->buf, k->n, flags);
    case RT_COMM_ALL_GATHER:
        return rt_ring_all_gather(c->ring, k->buf, k->n, flags);
    case RT_COMM_ALLREDUCE:
        return rt_ring_allreduce(c->ring, k->buf, k->n, flags);
    case RT_COMM_ALLREDUCE_F64:
        return rt_ring_allreduce_f64(c->ring, k->buf, k->n);
    case RT_COMM_ALLREDUCE_RANGE:
        return rt_ring_allreduce_range(c->ring, k->buf, (enum rt_elem)k->elem, k->n, k->lo,
                                       k->hi, flags);
    case RT_COMM_BROADCAST:
        return rt_ring_broadcast(c->ring, k->buf, k->n, k->root);
    }
    return rt_error(RT_ERR_ARG, "unknown collective %d", k->kind);
}

static int run_collective(rt_comm *c, const struct cmd *k, uint32_t *flags)
{
    c->deadline = k->deadline;
    c->op_name = kind_name(k->kind);
    int rc = service_ctrl(c);
    if (rc >= 0)
        rc = dispatch(c, k, flags);
    c->deadline = 0;
    return rc;
}

/* ---- a change of members ------------------------------------------------------------ */

/* While a new ring forms: heartbeats only (no message is read: the
 * members being formed must not change under the set-up). */
static int setup_hb(void *arg)
{
    rt_comm *c = arg;
    if (rt_now() - c->last_hb_sent >= c->hb_interval)
        send_hb(c);
    return atomic_load(&c->quit) ? rt_error(RT_ERR_NET, "the communication thread is shutting "
                                                        "down")
                                 : RT_OK;
}

/* The ring of the pending generation, on the same inbox (peers keep
 * sending to the same address; older generations' chunks are dropped). */
static int form_ring(rt_comm *c)
{
    struct rt_membership *ms = c->pending;
    int rank = member_rank(ms, c->self_id);
    RT_ASSERT(rank >= 0); /* take_regroup's check */
    void *inbox = c->ring ? rt_ring_release_inbox(c->ring) : c->spare_inbox;
    c->spare_inbox = NULL;
    rt_ring_destroy(&c->ring);
    RT_ASSERT(inbox); /* a ring's, or kept from a failed attempt */
    struct rt_ring_config rc = {.run = c->run, .members = ms, .rank = rank, .zctx = c->zctx,
                                .inbox = &inbox, .allow_shm = c->allow_shm, .curve = c->curve,
                                .chunk_bytes = c->chunk, .setup_timeout = RT_RING_SETUP_TIMEOUT,
                                .idle = service_ctrl, .idle_arg = c, .setup_idle = setup_hb};
    c->ring = rt_ring_new(&rc);
    if (!c->ring) {
        c->spare_inbox = inbox; /* for the next generation's ring */
        return rt_error_wrap(RT_ERR_NET, "forming the ring of generation %llu",
                             (unsigned long long)ms->gen);
    }
    c->pending = c->ms;
    c->ms = ms;
    c->has_pending = false;
    atomic_store(&c->changing, 0);
    c->rank = rank;
    c->world = ms->n;
    snprintf(c->who, sizeof c->who, "worker rank %d", c->rank);
    return RT_OK;
}

/* "regrouped": this worker's ring of generation gen is formed. */
static void send_regrouped(rt_comm *c)
{
    rt_wire_begin(&c->w, c->run, "regrouped", 2);
    rt_wire_put_uint(&c->w, "gen", c->ms->gen);
    rt_wire_put_uint(&c->w, "rank", (uint64_t)c->rank);
    zmq_msg_t m;
    if (rt_wire_end(&c->w) < 0 || zmq_msg_init_size(&m, c->w.len) != 0) {
        publish_abort(c, "cannot tell the coordinator the new ring is formed");
        return;
    }
    memcpy(zmq_msg_data(&m), c->w.data, c->w.len);
    ctrl_send(c, &m, 0);
    zmq_msg_close(&m);
}

/* After a ring of generation gen could not be formed (a neighbour was lost
 * meanwhile): whether the coordinator announces a newer one within the
 * worker timeout. */
static bool newer_generation(rt_comm *c, uint64_t gen)
{
    double until = rt_now() + c->peer_timeout;
    while (rt_now() < until) {
        if (service_ctrl(c) < 0)
            return false;
        if (c->has_pending && c->pending->gen > gen)
            return true;
        zmq_pollitem_t it = {.socket = c->ctrl, .events = ZMQ_POLLIN};
        zmq_poll(&it, 1, 50);
    }
    return false;
}

/* Form the rings of the announced generations until the coordinator says
 * "go" for the newest: every member has formed it, so no chunk of it can
 * reach a member still in the last one. */
static int do_regroup(rt_comm *c, const struct cmd *k, struct reply *rep)
{
    for (;;) {
        if (c->has_pending) {
            uint64_t gen = c->pending->gen;
            int rc = form_ring(c);
            if (rc < 0 && !newer_generation(c, gen))
                return rc;
            if (rc < 0)
                continue; /* a neighbour was lost meanwhile: the next generation */
            send_regrouped(c);
        }
        while (c->go_gen < c->ms->gen && !c->has_pending) {
            RT_TRY(service_ctrl(c));
            if (rt_now() > k->deadline)
                return rt_error(RT_ERR_TIMEOUT, "no 'go' from the coordinator for generation "
                                                "%llu within %g s",
                                (unsigned long long)c->ms->gen, c->op_timeout);
            zmq_pollitem_t it = {.socket = c->ctrl, .events = ZMQ_POLLIN};
            zmq_poll(&it, 1, 50);
        }
        if (!c->has_pending)
            break;
    }
    rep->rank = c->rank;
    rep->world = c->world;
    return RT_OK;
}

/* Take the parts of one message from the pipe, up to its last (never
 * into the next command). */
static bool take_parts(rt_comm *c, zmq_msg_t *m, int nframes)
{
    int parts = 0;
    bool more = true;
    while (more) {
        RT_ASSERT(parts < nframes); /* rt_comm_send sends whole messages or none */
        zmq_msg_init(&m[parts]);
        if (zmq_msg_recv(&m[parts], c->pipe_thread, 0) < 0) {
            int e = errno;
            zmq_msg_close(&m[parts]);
            if (e == EINTR)
                continue;
            for (int i = 0; i < parts; i++)
                zmq_msg_close(&m[i]);
            publish_abort(c, "the communication pipe failed: %s", zmq_strerror(e));
            return false;
        }
        more = zmq_msg_more(&m[parts++]);
    }
    RT_ASSERT(parts == nframes);
    return true;
}

/* Without waiting: the whole message, or none of it. */
static void send_or_drop(rt_comm *c, zmq_msg_t *m, int n)
{
    for (int i = 0; i < n && c->ctrl && !c->ctrl_broken; i++)
        if (zmq_msg_send(&m[i], c->ctrl, ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
            break;
}

/* Forward the frames that follow a CMD_SEND as their kind says. Kept
 * reports belong to the step after the training thread's newest mark when
 * it sent them (`mark`: the step running, or the close of the one just
 * done). */
static bool forward(rt_comm *c, int nframes, int kind, long mark)
{
    zmq_msg_t m[RT_MAX_FRAMES + 1];
    if (!take_parts(c, m, nframes))
        return false;
    if (kind == RT_SEND_KEEP) {
        if (rt_outbox_add(c->outbox, mark + 1, m, nframes) < 0)
            publish_abort(c, "%s", rt_error_detail());
        else if (c->ctrl && !c->ctrl_broken)
            rt_outbox_flush(c->outbox, c->ctrl);
    } else if (kind == RT_SEND_DROP) {
        send_or_drop(c, m, nframes);
    } else {
        if (c->ctrl && !c->ctrl_broken)
            rt_outbox_flush(c->outbox, c->ctrl); /* what was kept goes first */
        for (int i = 0; i < nframes; i++)
            ctrl_send(c, &m[i], i + 1 < nframes ? ZMQ_SNDMORE : 0);
    }
    for (int i = 0; i < nframes; i++)
        zmq_msg_close(&m[i]);
    return true;
}

/* A reply that cannot leave would keep the training thread waiting for
 * it: make it an abort, with the reason, and end the thread. */
static bool send_reply(rt_comm *c, const struct reply *rep)
{
    while (zmq_send(c->pipe_thread, rep, sizeof *rep, 0) != (int)sizeof *rep) {
        if (errno == EINTR)
            continue;
        publish_abort(c, "the communication thread cannot answer the training thread: %s",
                      zmq_strerror(errno));
        return false;
    }
    return true;
}

static bool handle_pipe(rt_comm *c)
{
    struct cmd k;
    int n = zmq_recv(c->pipe_thread, &k, sizeof k, 0);
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN)
            return true;
        publish_abort(c, "the communication pipe failed: %s", zmq_strerror(errno));
        return false;
    }
    RT_ASSERT(n == (int)sizeof k); /* both ends are this file */
    if (k.kind == CMD_QUIT)
        return false;
    if (k.kind == CMD_SEND || k.kind == CMD_MARK)
        c->marked = k.step > c->marked ? k.step : c->marked;
    if (k.kind == CMD_SEND)
        return forward(c, k.nframes, k.send_kind, k.step);
    if (k.kind == CMD_MARK)
        return true;
    struct reply rep = {0};
    rt_error_clear();
    if (k.kind == RT_COMM_REGROUP)
        rep.rc = c->ms ? do_regroup(c, &k, &rep)
                       : rt_error(RT_ERR_ARG, "this ring cannot change members");
    else
        rep.rc = run_collective(c, &k, &rep.flags);
    if (rep.rc < 0)
        snprintf(rep.detail, sizeof rep.detail, "%s", rt_error_detail());
    return send_reply(c, &rep);
}

/* How long the loop may sleep: until the next heartbeat is due, SLICE_MS at
 * most. A sleep past STEP_HB says so first, then looks at the marks again
 * (seq_cst, as rt_comm_mark's store then look): a mark given meanwhile
 * either is seen here or wakes the thread. */
static long poll_timeout(rt_comm *c)
{
    for (int again = 0; again < 2; again++) {
        take_mark(c);
        long timeout = SLICE_MS;
        if (c->ctrl) {
            double left = hb_every(c) - (rt_now() - c->last_hb_sent);
            long hb = left < 0 ? 0 : (long)(left * 1000) + 1;
            timeout = hb < timeout ? hb : timeout;
        }
        if (timeout <= (long)(STEP_HB * 1000) || again)
            return timeout;
        atomic_store(&c->sleeps_long, 1);
        if (atomic_load(&c->mark_now) <= c->marked)
            return timeout;
        atomic_store(&c->sleeps_long, 0); /* a mark came: plan with it */
    }
    return 0;
}

static void *comm_main(void *arg)
{
    rt_comm *c = arg;
    c->last_seen = c->last_hb_sent = c->last_service = rt_now();
    while (!atomic_load(&c->quit)) {
        zmq_pollitem_t it[2] = {{.socket = c->pipe_thread, .events = ZMQ_POLLIN},
                                {.socket = c->ctrl, .events = ZMQ_POLLIN}};
        long timeout = poll_timeout(c);
        int rc = zmq_poll(it, c->ctrl ? 2 : 1, timeout);
        atomic_store(&c->sleeps_long, 0);
        if (rc < 0 && errno != EINTR) {
            publish_abort(c, "the communication thread stopped: %s", zmq_strerror(errno));
            break;
        }
        if (rc > 0 && (it[0].revents & ZMQ_POLLIN) && !handle_pipe(c))
            break;
        service_ctrl(c);
    }
    atomic_store(&c->thread_gone, 1);
    return NULL;
}

/* ---- training-thread side ------------------------------------------------------- */

static int set_opt(void *sock, int opt, int value, const char *what)
{
    if (zmq_setsockopt(sock, opt, &value, sizeof value) == 0)
        return RT_OK;
    return rt_error(RT_ERR_NET, "cannot set %s: %s", what, zmq_strerror(errno));
}

/* The pipe, and the limits that keep either side from waiting forever:
 * the training thread's receive wakes up every SLICE_MS to look at the
 * thread and the deadline; a forward to a coordinator that takes nothing
 * gives up after the peer timeout. */
static int open_pipe(rt_comm *c)
{
    /* A closed socket's inproc name is freed later, by libzmq's reaper:
     * a new comm at the freed one's address needs a name of its own. */
    static _Atomic unsigned long pipes;
    char ep[80];
    snprintf(ep, sizeof ep, "inproc://ragtag-comm-%p-%lu", (void *)c, atomic_fetch_add(&pipes, 1));
    c->pipe_main = zmq_socket(c->zctx, ZMQ_PAIR);
    c->pipe_thread = zmq_socket(c->zctx, ZMQ_PAIR);
    if (!c->pipe_main || !c->pipe_thread || zmq_bind(c->pipe_main, ep) != 0 ||
        zmq_connect(c->pipe_thread, ep) != 0)
        return rt_error(RT_ERR_NET, "cannot create the communication pipe: %s",
                        zmq_strerror(errno));
    RT_TRY(set_opt(c->pipe_main, ZMQ_LINGER, 0, "the pipe's linger"));
    RT_TRY(set_opt(c->pipe_thread, ZMQ_LINGER, 0, "the pipe's linger"));
    RT_TRY(set_opt(c->pipe_main, ZMQ_RCVTIMEO, SLICE_MS, "the pipe's receive timeout"));
    if (c->ctrl)
        RT_TRY(set_opt(c->ctrl, ZMQ_SNDTIMEO, (int)(c->peer_timeout * 1000),
                       "the control socket's send timeout"));
    return RT_OK;
}

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
    atomic_init(&c->expelled, 0);
    if (cfg->self_id && cfg->members) {
        c->ms = malloc(sizeof *c->ms);
        c->pending = malloc(sizeof *c->pending);
        c->scratch = malloc(sizeof *c->scratch);
        if (!c->ms || !c->pending || !c->scratch) {
            rt_error(RT_ERR_NOMEM, "no memory for the member lists");
            goto fail;
        }
        *c->ms = *cfg->members;
        c->go_gen = c->ms->gen;
        snprintf(c->self_id, sizeof c->self_id, "%s", cfg->self_id);
        c->allow_shm = cfg->allow_shm;
        c->curve = cfg->curve;
        c->chunk = cfg->chunk_bytes;
    }
    snprintf(c->run, sizeof c->run, "%s", cfg->run ? cfg->run : "");
    c->hb_interval = cfg->hb_interval > 0 ? cfg->hb_interval : 1.0;
    c->peer_timeout = cfg->peer_timeout > 0 ? cfg->peer_timeout : 30.0;
    c->coord_timeout = cfg->coord_timeout > 0 ? cfg->coord_timeout : 0.0;
    c->marked = c->hb_mark = c->train_marked = -1;
    atomic_init(&c->mark_now, -1);
    atomic_init(&c->mark_seen, -1);
    atomic_init(&c->sleeps_long, 0);
    atomic_init(&c->acked, -1);
    if (!(c->outbox = rt_outbox_new()))
        goto fail;
    c->op_timeout = cfg->op_timeout > 0 ? cfg->op_timeout : OP_TIMEOUT_DEFAULT;
    rt_wire_writer_init(&c->w);
    rt_wire_msg_init(&c->msg);
    rt_zframes_init(&c->fr);
    snprintf(c->who, sizeof c->who, "worker rank %d", c->rank);
    rt_wire_droplog_init(&c->drops, c->who);
    atomic_init(&c->stop, 0);
    atomic_init(&c->quit, 0);
    atomic_init(&c->thread_gone, 0);
    atomic_init(&c->abort_claimed, 0);
    atomic_init(&c->changing, 0);
    atomic_init(&c->alive_at, rt_now());
    atomic_init(&c->longest_busy, 0.0);
    atomic_init(&c->train_waiting, 0);
    atomic_init(&c->abort_reason, NULL);
    if (open_pipe(c) < 0)
        goto fail;
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

static void stop_thread(rt_comm *c)
{
    while (c->inflight > 0 && !c->out_of_step) {
        uint32_t fl;
        rt_comm_wait(c, &fl);
    }
    /* The command comes after whatever is still in the pipe (the last
     * report must leave). A pipe that cannot carry it: the flag ends the
     * thread within SLICE_MS (a collective at its next idle call). */
    struct cmd k = {.kind = CMD_QUIT};
    if (c->out_of_step || rt_zsend(c->pipe_main, &k, sizeof k, false) < 0)
        atomic_store(&c->quit, 1);
    pthread_join(c->thread, NULL);
}

void rt_comm_destroy(rt_comm **cp)
{
    if (!cp || !*cp)
        return;
    rt_comm *c = *cp;
    check(c);
    if (c->started)
        stop_thread(c);
    if (c->pipe_main)
        zmq_close(c->pipe_main);
    if (c->pipe_thread)
        zmq_close(c->pipe_thread);
    if (c->ctrl) {
        /* Let the last messages (the result, a checkpoint) leave. */
        if (set_opt(c->ctrl, ZMQ_LINGER, 5000, "the control socket's linger") < 0)
            fprintf(stderr, "ragtag: [%s] %s: the last messages may be lost\n", c->who,
                    rt_error_detail());
        zmq_close(c->ctrl);
    }
    if (c->borrowed)
        rt_ring_set_idle(c->ring, NULL, NULL);
    else
        rt_ring_destroy(&c->ring);
    rt_wire_droplog_flush(&c->drops);
    rt_zsock_close(&c->spare_inbox);
    free(c->ms);
    free(c->pending);
    free(c->scratch);
    rt_outbox_destroy(&c->outbox);
    rt_wire_writer_free(&c->w);
    rt_wire_msg_free(&c->msg);
    rt_zframes_close(&c->fr);
    c->tag = COMM_DEAD;
    free(c);
    *cp = NULL;
}

/* Commands go only through a pipe in step with the thread, to a thread
 * that is still there. */
static int usable(rt_comm *c)
{
    if (c->out_of_step)
        return rt_error(RT_ERR_NET, "the communication thread is out of step after an earlier "
                                    "failure");
    if (atomic_load(&c->thread_gone)) {
        const char *why = abort_reason(c);
        return rt_error(RT_ERR_NET, "the communication thread has ended: %s",
                        why ? why : "(no reason)");
    }
    return RT_OK;
}

static int submit_cmd(rt_comm *c, struct cmd *k)
{
    check(c);
    RT_ASSERT(c->inflight < RT_COLLECTIVE_MAX_INFLIGHT);
    RT_TRY(usable(c));
    k->deadline = rt_now() + c->op_timeout;
    if (rt_zsend(c->pipe_main, k, sizeof *k, false) < 0)
        return rt_error_wrap(RT_ERR_NET, "communication thread unreachable");
    stamp(c, true);
    struct inflight *f = &c->q[(c->head + c->inflight) % RT_COLLECTIVE_MAX_INFLIGHT];
    f->kind = k->kind;
    f->deadline = k->deadline;
    c->inflight++;
    return RT_OK;
}

int rt_comm_submit(rt_comm *c, enum rt_comm_kind kind, void *buf, size_t n, uint32_t flags,
                   int root)
{
    struct cmd k = {.kind = (int)kind, .buf = buf, .n = n, .flags = flags, .root = root};
    return submit_cmd(c, &k);
}

int rt_comm_submit_range(rt_comm *c, void *buf, enum rt_elem elem, size_t n, size_t lo,
                         size_t hi, uint32_t flags)
{
    RT_ASSERT(lo <= hi && hi <= n);
    struct cmd k = {.kind = RT_COMM_ALLREDUCE_RANGE, .buf = buf, .n = n, .lo = lo, .hi = hi,
                    .elem = (int)elem, .flags = flags};
    return submit_cmd(c, &k);
}

int rt_comm_inflight(const rt_comm *c)
{
    check(c);
    return c->inflight;
}

/* The thread answers every collective by its deadline (the ring asks it
 * while waiting). This side allows a forward to the coordinator (up to the
 * peer timeout) and a grace period more; past that, or once the thread is
 * gone, no later reply could be matched to its command: out of step. */
static int recv_reply(rt_comm *c, struct reply *rep)
{
    const struct inflight *f = &c->q[c->head];
    const char *what = kind_name(f->kind);
    double limit = f->deadline + c->peer_timeout + REPLY_GRACE;
    for (;;) {
        bool gone = atomic_load(&c->thread_gone);
        int n = zmq_recv(c->pipe_main, rep, sizeof *rep, gone ? ZMQ_DONTWAIT : 0);
        if (n >= 0) {
            RT_ASSERT(n == (int)sizeof *rep); /* both ends are this file */
            return RT_OK;
        }
        int e = errno;
        if (e == EINTR)
            continue;
        c->out_of_step = e != EAGAIN || gone || rt_now() > limit;
        if (!c->out_of_step)
            continue;
        const char *why = abort_reason(c);
        if (e != EAGAIN)
            return rt_error(RT_ERR_NET, "communication thread lost during the %s: %s", what,
                            zmq_strerror(e));
        if (gone)
            return rt_error(RT_ERR_NET, "no answer to the %s: %s", what,
                            why ? why : "the communication thread has ended");
        return rt_error(RT_ERR_TIMEOUT, "the communication thread did not answer the %s within "
                        "%.0f s", what, c->op_timeout + c->peer_timeout + REPLY_GRACE);
    }
}

static int wait_reply(rt_comm *c, struct reply *rep)
{
    check(c);
    RT_ASSERT(c->inflight > 0);
    /* waiting on this thread, not stalled (its own work between a submit
     * and this wait counts as work) */
    stamp(c, true);
    atomic_store(&c->train_waiting, 1);
    int rrc = recv_reply(c, rep);
    c->head = (c->head + 1) % RT_COLLECTIVE_MAX_INFLIGHT;
    c->inflight--;
    stamp(c, false);
    atomic_store(&c->train_waiting, 0);
    RT_TRY(rrc);
    if (rep->rc < 0)
        return rt_error(rep->rc, "%s", rep->detail);
    return RT_OK;
}

int rt_comm_wait(rt_comm *c, uint32_t *flags)
{
    struct reply rep;
    int rc = wait_reply(c, &rep);
    if (rc >= 0 && flags)
        *flags = rep.flags;
    return rc;
}

int rt_comm_regroup(rt_comm *c, int *rank, int *world)
{
    struct reply rep;
    RT_ASSERT(c->inflight == 0); /* every range waited for: the pipe holds no reply */
    RT_TRY(rt_comm_submit(c, RT_COMM_REGROUP, NULL, 0, 0, 0));
    RT_TRY(wait_reply(c, &rep));
    *rank = rep.rank;
    *world = rep.world;
    return RT_OK;
}

const struct rt_membership *rt_comm_members(const rt_comm *c)
{
    check(c);
    return c->ms;
}

bool rt_comm_expelled(rt_comm *c)
{
    check(c);
    return atomic_load(&c->expelled) != 0;
}

bool rt_comm_finished(rt_comm *c)
{
    check(c);
    return atomic_load(&c->finished) != 0;
}

static int call(rt_comm *c, enum rt_comm_kind kind, void *buf, size_t n, uint32_t *flags, int root)
{
    RT_ASSERT(c->inflight == 0); /* its reply is the next one */
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

/* Every part is made before the first leaves: a part that cannot be made
 * fails the call with nothing sent, so the pipe never holds half a message
 * for the next command to join. (Once the first part is in, libzmq takes
 * the others; should one still fail, the pipe is out of step.) */
int rt_comm_send(rt_comm *c, const rt_wire_writer *w, const void *const *frames,
                 const size_t *sizes, int nframes)
{
    return rt_comm_send_as(c, RT_SEND_MUST, w, frames, sizes, nframes);
}

int rt_comm_send_as(rt_comm *c, enum rt_comm_send_kind kind, const rt_wire_writer *w,
                    const void *const *frames, const size_t *sizes, int nframes)
{
    check(c);
    RT_ASSERT(nframes >= 0 && 1 + nframes <= RT_MAX_FRAMES);
    RT_TRY(usable(c));
    struct cmd k = {.kind = CMD_SEND, .nframes = 1 + nframes, .send_kind = (int)kind,
                    .step = c->train_marked};
    const void *data[RT_MAX_FRAMES + 1] = {&k, w->data};
    size_t len[RT_MAX_FRAMES + 1] = {sizeof k, w->len};
    for (int i = 0; i < nframes; i++) {
        data[2 + i] = frames[i];
        len[2 + i] = sizes[i];
    }
    int total = 2 + nframes, made = 0, sent = 0, rc = RT_OK;
    zmq_msg_t m[RT_MAX_FRAMES + 1];
    for (; made < total; made++) {
        if (zmq_msg_init_size(&m[made], len[made]) != 0) {
            rc = rt_error(RT_ERR_NOMEM, "no memory for a message of %zu bytes to the "
                          "coordinator", len[made]);
            goto close;
        }
        if (len[made])
            memcpy(zmq_msg_data(&m[made]), data[made], len[made]);
    }
    for (; sent < total; sent++) {
        int rc_send;
        while ((rc_send = zmq_msg_send(&m[sent], c->pipe_main,
                                       sent + 1 < total ? ZMQ_SNDMORE : 0)) < 0 && errno == EINTR)
            ;
        if (rc_send < 0) {
            int e = errno;
            c->out_of_step = sent > 0;
            rc = rt_error(RT_ERR_NET, "communication thread unreachable: %s", zmq_strerror(e));
            goto close;
        }
    }
close:
    for (int i = 0; i < made; i++)
        zmq_msg_close(&m[i]);
    return rc;
}

void rt_comm_alive(rt_comm *c)
{
    check(c);
    stamp(c, true);
}

void rt_comm_waiting(rt_comm *c, bool on)
{
    check(c);
    stamp(c, !on);
    atomic_store(&c->train_waiting, on ? 1 : 0);
}

bool rt_comm_members_changing(rt_comm *c)
{
    check(c);
    return atomic_load(&c->changing) != 0;
}

const char *rt_comm_aborted(rt_comm *c)
{
    check(c);
    return abort_reason(c);
}

bool rt_comm_stop_requested(rt_comm *c)
{
    check(c);
    return atomic_load(&c->stop) != 0;
}

const char *rt_comm_link(const rt_comm *c, bool right)
{
    check(c);
    return c->ring ? rt_ring_link(c->ring, right) : "-";
}

void rt_comm_mark(rt_comm *c, long steps_done)
{
    check(c);
    if (usable(c) < 0)
        return; /* the thread is gone: the next collective says why */
    c->train_marked = steps_done;
    atomic_store(&c->mark_now, steps_done);
    /* a wake-up a step took a core from the training threads of a full
     * machine (lenet's 2 workers: one a step each); the thread sees the
     * mark anyway within STEP_HB unless it sleeps longer */
    if (steps_done < atomic_load(&c->mark_seen) + MARK_STEPS && !atomic_load(&c->sleeps_long))
        return;
    struct cmd k = {.kind = CMD_MARK, .step = steps_done};
    if (rt_zsend(c->pipe_main, &k, sizeof k, false) < 0)
        rt_error_clear();
}

long rt_comm_acked(rt_comm *c)
{
    check(c);
    return atomic_load(&c->acked);
}

