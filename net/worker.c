/* worker.c — `ragtag worker --join tcp://HOST:PORT`.
 *
 * Life of a worker:
 *   1. bind its ring inbox on the advertised address, connect to the
 *      coordinator and say hello (again every second until it answers: a
 *      worker may start long before its coordinator);
 *   2. receive the job — run id, rank, member list, model text, options,
 *      the data spec or a manifest of files to fetch (cached by hash);
 *   3. build data and model, measure its speed, report "ready", wait for
 *      "start", form the ring and hand every socket to the comm thread;
 *   4. train (rt_train_run_dist), rank 0 reporting to the coordinator;
 *   5. send "done" with its parameter hash (or "error") and leave.
 * Every message from the coordinator is checked like any other: the
 * coordinator's address is not a credential. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "comm.h"
#include "dataguard.h"
#include "gossip.h"
#include "hostreduce.h"
#include "datashare.h"
#include "membership.h"
#include "memory.h"
#include "net.h"
#include "clock.h"
#include "partition.h"
#include "progress.h"
#include "ring.h"
#include "status.h"
#include "train-testing.h"
#include "transport.h"
#include "wire.h"
#include "worker_sec.h"
#include "yieldwait.h"

#define WORKER_MAX_FRAME ((int64_t)1 << 30) /* weights when resuming */
#define MAX_MODEL_TEXT (512u << 10)
#define SELF_PAUSE 2.0 /* seconds a loop that runs every 100 ms never misses unless stopped */
#define HELLO_RETRY_S 0.01 /* seconds until a hello the socket could not take is tried again */
/* The run-ahead bound: a worker starts no step more than this many steps
 * after the newest one the coordinator acknowledged (it has read every
 * report sent before it). Acknowledgements come back within a heartbeat
 * (50 ms, or 8 steps) and a round trip, so nobody waits while the
 * coordinator runs, even at a thousand steps a second; a paused or lost coordinator
 * holds the run within this many steps of what it has, and a restarted
 * one re-adopts workers holding at most this many steps it never saw. */
#define RUN_AHEAD 50
#define PACE_NOTE 1.0 /* seconds of waiting before the wait is logged */

static volatile sig_atomic_t worker_stop;

void rt_worker_request_stop(void)
{
    worker_stop = 1;
    rt_train_request_stop();
}

void rt_worker_options_defaults(struct rt_worker_options *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->backend, sizeof o->backend, "cpu");
    o->coord_timeout = 120.0; /* a restart by hand or by a supervisor takes a minute or two */
}

/* What "start" carried when the run resumes a checkpoint. */
struct resume_state {
    bool on, best;
    struct rt_train_pos pos;
    uint64_t np, ns, lo, hi, nopt;
    float *buf[7]; /* params, state, opt 0, opt 1, best params, best state */
};

/* The gradient's sums when every member shares this host: ranges
 * submitted are queued here and summed in place at their wait, the ring's
 * ranges (compressed buckets) between them keep their order. */
struct host_range {
    bool in_place, summed; /* summed: by the wait of an older range, with status rc */
    int rc;
    size_t lo, hi;
};

struct host_sums {
    rt_hostreduce *hr; /* this worker's gradient segment (NULL: none) */
    bool private_grads; /* the replica's gradient is not in it */
    uint64_t gen;      /* the generation decided (0: none yet) */
    bool on;           /* every member of it sums in place */
    bool told, said;   /* the log said so, and what */
    bool told_replica; /* the log said how the host's replica is kept */
    double spin_s;     /* a wait for the others' marks spins this long, then sleeps */
    struct host_range q[RT_COLLECTIVE_MAX_INFLIGHT];
    int head, count;
};

struct worker {
    const struct rt_worker_options *o;
    void *zctx, *ctrl, *inbox;
    struct rt_worker_sec sec; /* credentials, keys, who may connect */
    char run[RT_RUN_ID_LEN + 1];
    struct rt_member me;
    rt_wire_writer w;
    rt_wire_msg msg;
    rt_zframes fr;
    rt_wire_droplog drops;
    char who[96];
    double last_seen, last_hb;
    /* the job */
    int rank, world;
    struct rt_membership ms;
    char *model_text;
    struct rt_train_config c;
    struct rt_train_testing testing; /* --throttle */
    bool want_ckpt, want_final, allow_shm;
    bool token_links;  /* the job's --link-security token: the inbox re-made for it */
    bool finished;     /* the run ended before this worker was admitted */
    double setup_after; /* back from standby: seconds to wait before setting up */
    bool have_regroup; /* w->msg holds a "regroup" a ring set-up gave way to */
    int ended;         /* a ring set-up read the run's end for this worker (expelled, aborted,
                        * finished, coordinator lost): its status, end_why the reason */
    char end_why[700];
    size_t chunk;
    double hb, peer_timeout;
    struct rt_data_manifest man;
    bool served;
    rt_comm *comm;
    rt_gossip *gossip; /* --mode gossip: owned by the training thread */
    uint32_t votes_out, votes_in; /* control votes cast / seen since agreed() */
    struct host_sums hs;          /* the gradient summed in place (hostreduce.h) */
    struct resume_state resume;
    double paced; /* seconds the run-ahead bound held this worker */
};

static void say(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What reading its shares from shards cost this worker (shards:DIR). */
static const char *shards_line(const struct rt_train_result *r)
{
    static _Thread_local char line[96];
    line[0] = '\0';
    if (r->records_read > 0)
        snprintf(line, sizeof line, "; %ld training records read from shards", r->records_read);
    return line;
}
static void say(struct worker *w, const char *fmt, ...)
{
    if (w->o->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ragtag: [%s] ", w->who);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- control messages before the comm thread exists ------------------------------- */

static int wait_for(struct worker *w, const char *const *want, int nframes, double limit);

/* A send that cannot leave (the coordinator is gone: the socket's send
 * timeout ran out) first reads what the coordinator said before it went:
 * a joiner still setting up when the run ended finds "finished" there
 * and ends 0 instead of failing on a bare "send failed". */
static int send_ctrl(struct worker *w, const void *const *frames, const size_t *sizes, int n)
{
    if (w->comm)
        return rt_comm_send(w->comm, &w->w, frames, sizes, n);
    if (rt_zsend_msg(w->ctrl, &w->w, frames, sizes, n) == RT_OK)
        return RT_OK;
    char why[128];
    snprintf(why, sizeof why, "%s", rt_error_detail());
    static const char *const nothing[] = {NULL};
    int rc = wait_for(w, nothing, 1, 0.5);
    if (rc != RT_ERR_TIMEOUT)
        return rc;
    return rt_error(RT_ERR_NET, "the coordinator at %s takes no message (%s): it is gone",
                    w->o->join, why);
}

/* A report during training: kept until acknowledged (lines, metrics,
 * checkpoints) or dropped when it cannot leave at once (progress). */
static int send_report(struct worker *w, enum rt_comm_send_kind kind, const void *const *frames,
                       const size_t *sizes, int n)
{
    if (w->comm)
        return rt_comm_send_as(w->comm, kind, &w->w, frames, sizes, n);
    return send_ctrl(w, frames, sizes, n);
}

static void send_hb(struct worker *w)
{
    rt_wire_begin(&w->w, w->run, "hb", 1);
    rt_wire_put_uint(&w->w, "rank", (uint64_t)(w->rank > 0 ? w->rank : 0));
    if (rt_wire_end(&w->w) == RT_OK)
        zmq_send(w->ctrl, w->w.data, w->w.len, ZMQ_DONTWAIT);
    w->last_hb = rt_now();
}

/* Wait for a message from the coordinator whose type is one of `want`
 * (NULL-terminated): 1 and w->msg / w->fr hold it; "abort" and "reject"
 * become errors; anything else is dropped. Heartbeats go out meanwhile;
 * the coordinator is lost after peer_timeout without a word (once the
 * job is known), and a worker gives up after `limit` seconds (0: never). */
static int wait_for(struct worker *w, const char *const *want, int nframes, double limit)
{
    double t0 = rt_now(), last_note = t0, last_loop = t0;
    for (;;) {
        if (worker_stop)
            return rt_error(RT_ERR_INTERRUPTED, "interrupted");
        zmq_pollitem_t it = {.socket = w->ctrl, .events = ZMQ_POLLIN};
        long ms = 100; /* or what is left of a shorter limit */
        if (limit > 0) {
            const double left_ms = (limit - (rt_now() - t0)) * 1e3;
            ms = left_ms < 1.0 ? 1 : left_ms < 100.0 ? (long)left_ms : 100;
        }
        zmq_poll(&it, 1, ms);
        double now = rt_now();
        if (now - last_loop > SELF_PAUSE)
            w->last_seen = now; /* this process was stopped: the coordinator gets a fresh clock */
        last_loop = now;
        if (w->run[0] && now - w->last_hb >= w->hb)
            send_hb(w);
        /* Silence counts only with nothing waiting to be read: a worker
         * busy setting up (data, model, speed) reads late, not nothing. */
        if (w->run[0] && now - w->last_seen > w->peer_timeout && !(it.revents & ZMQ_POLLIN))
            return rt_error(RT_ERR_NET, "lost the coordinator: nothing heard from it for %.0f s",
                            now - w->last_seen);
        if (limit > 0 && now - t0 > limit)
            return rt_error(RT_ERR_TIMEOUT, "no answer from the coordinator at %s within %.0f s",
                            w->o->join, limit);
        if (!w->run[0] && now - last_note > 10.0) {
            last_note = now;
            say(w, "still waiting for the coordinator at %s", w->o->join);
        }
        if (!(it.revents & ZMQ_POLLIN))
            continue;
        int rc = rt_zframes_recv(w->ctrl, &w->fr, ZMQ_DONTWAIT);
        if (rc <= 0)
            continue;
        if (w->fr.truncated || w->fr.n < 1) {
            rt_wire_drop(&w->drops, "the coordinator", "a message of too many frames");
            continue;
        }
        /* A refused hello's reject carries no run id (a stranger learns
         * none): before it joined, this worker reads one without. */
        if (rt_wire_parse(&w->msg, rt_zframe_data(&w->fr, 0), rt_zframe_size(&w->fr, 0),
                          w->run[0] ? w->run : NULL, !w->run[0]) < 0) {
            rt_wire_drop(&w->drops, "the coordinator", rt_error_detail());
            continue;
        }
        if (!w->msg.run[0] && strcmp(w->msg.type, "reject") != 0) {
            rt_wire_drop(&w->drops, "the coordinator", "a message without a run id");
            continue;
        }
        w->last_seen = now;
        const char *t = w->msg.type;
        if (!strcmp(t, "finished")) {
            w->finished = true;
            /* read: the coordinator may close (coord_elastic_end) */
            rt_wire_begin(&w->w, w->run, "bye", 0);
            if (rt_wire_end(&w->w) == RT_OK)
                zmq_send(w->ctrl, w->w.data, w->w.len, ZMQ_DONTWAIT);
            return rt_error(RT_ERR_INTERRUPTED, "the run ended before this worker was admitted");
        }
        if (!strcmp(t, "expelled")) { /* the run goes on without what this worker was in */
            char why[700];
            if (rt_wire_get_str(rt_wire_root(&w->msg), "reason", 0, why, sizeof why) < 0)
                snprintf(why, sizeof why, "(no reason given)");
            say(w, "the coordinator: %s", why);
            return rt_error(RT_ERR_EXPELLED, "%s", why);
        }
        if (!strcmp(t, "who")) {
            /* a restarted coordinator that does not know this worker: before
             * training it holds no state to be re-adopted with, so it joins
             * again as a new worker (else it waits for a start that never
             * comes and exits after --worker-timeout) */
            say(w, "the coordinator was restarted and does not know this worker, which had "
                   "not started training: joining again");
            return rt_error(RT_ERR_EXPELLED, "the coordinator was restarted before training began");
        }
        if (!strcmp(t, "abort") || !strcmp(t, "reject")) {
            char why[700];
            if (rt_wire_get_str(rt_wire_root(&w->msg), "reason", 0, why, sizeof why) < 0)
                snprintf(why, sizeof why, "(no reason given)");
            return rt_error(RT_ERR_NET, "the coordinator %s: %s",
                            !strcmp(t, "abort") ? "aborted the run" : "refused this worker", why);
        }
        for (int i = 0; want[i]; i++) {
            if (!strcmp(t, want[i])) {
                if (nframes >= 0 && w->fr.n != nframes) {
                    rt_wire_drop(&w->drops, "the coordinator", "wrong number of frames");
                    break;
                }
                return 1;
            }
        }
        if (strcmp(t, "hb") != 0) {
            char why[80];
            snprintf(why, sizeof why, "an unexpected '%s' message", t);
            rt_wire_drop(&w->drops, "the coordinator", why);
        }
    }
}

/* ---- joining ----------------------------------------------------------------------- */

/* The ring port the user gave is taken: say which and what to do (the
 * kernel hands ports of its ephemeral range to outgoing connections, so a
 * port there may be taken at any moment). */
static int ring_port_taken(int port)
{
    char why[512], eph[96] = "";
    snprintf(why, sizeof why, "%s", rt_error_detail());
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int lo = 0, hi = 0;
    if (f && fscanf(f, "%d %d", &lo, &hi) == 2 && port >= lo && port <= hi)
        snprintf(eph, sizeof eph, "; it lies in this host's ephemeral range (%d-%d), whose "
                 "ports outgoing connections take", lo, hi);
    if (f)
        fclose(f);
    return rt_error(RT_ERR_NET, "%s: --ring-port %d is taken on this host%s: give another "
                    "(below %d), or leave --ring-port out for a free one", why, port, eph,
                    lo > 1024 ? lo : 32768);
}

/* The ring inbox bound at ip (or, an address of a NAT or a name this host
 * cannot bind, on every interface, peers told ip), at --ring-port or a
 * free port. A --ring-port in use is tried again for RING_PORT_WAIT
 * seconds: its holder may be a worker of this host that is ending (a
 * Spark task torn down and retried at once on the same executor: its old
 * worker, killed with its task, lets go of the port when it has exited). */
#define RING_PORT_WAIT 10.0

static int bind_once(struct worker *w, const char *ip, const char *port, char *bound,
                     size_t cap)
{
    char ep[RT_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, strchr(ip, ':') ? "tcp://[%s]:%s" : "tcp://%s:%s", ip, port);
    if (rt_zsock_bind(w->inbox, ep, bound, cap) == 0)
        return RT_OK;
    snprintf(ep, sizeof ep, "tcp://*:%s", port);
    if (rt_zsock_bind(w->inbox, ep, bound, cap) < 0)
        return RT_ERR_NET;
    char got[16];
    snprintf(got, sizeof got, "%s", strrchr(bound, ':'));
    snprintf(bound, cap, strchr(ip, ':') ? "tcp://[%s]%s" : "tcp://%s%s", ip, got);
    return RT_OK;
}

static int bind_inbox(struct worker *w, const char *ip, char *bound, size_t cap)
{
    const int ring_port = w->o->ring_port;
    char port[16] = "*";
    if (ring_port > 0)
        snprintf(port, sizeof port, "%d", ring_port);
    double t0 = rt_now();
    bool said = false;
    for (;;) {
        if (bind_once(w, ip, port, bound, cap) == RT_OK)
            return RT_OK;
        if (errno != EADDRINUSE || ring_port <= 0)
            return RT_ERR_NET;
        if (rt_now() - t0 > RING_PORT_WAIT)
            return ring_port_taken(ring_port);
        if (!said)
            fprintf(stderr, "ragtag: --ring-port %d is in use; trying again for up to %.0f s "
                    "(a worker of this host that is ending may still hold it)\n", ring_port,
                    RING_PORT_WAIT);
        said = true;
        usleep(200000);
    }
}

static int open_sockets(struct worker *w)
{
    const struct rt_worker_options *o = w->o;
    w->zctx = zmq_ctx_new();
    if (!w->zctx)
        return rt_error(RT_ERR_NET, "cannot start ZeroMQ: %s", zmq_strerror(errno));
    char ip[128];
    if (o->advertise[0])
        snprintf(ip, sizeof ip, "%s", o->advertise);
    else
        RT_TRY(rt_net_route_addr(o->join, ip, sizeof ip));
    RT_TRY(rt_worker_sec_open(&w->sec, w->zctx, o, w->who));
    if (w->sec.curve)
        snprintf(w->me.key, sizeof w->me.key, "%s", rt_curve_public(w->sec.curve));
    w->inbox = rt_zsock_new(w->zctx, ZMQ_PULL, (int64_t)RT_RING_MAX_CHUNK, 4096);
    if (!w->inbox || rt_curve_server(w->sec.curve, w->inbox) < 0)
        return RT_ERR_NET;
    char bound[RT_ENDPOINT_MAX];
    RT_TRY(bind_inbox(w, ip, bound, sizeof bound));
    snprintf(w->me.endpoint, sizeof w->me.endpoint, "%s", bound);
    w->ctrl = rt_zsock_new(w->zctx, ZMQ_DEALER, WORKER_MAX_FRAME, 0);
    if (!w->ctrl)
        return RT_ERR_NET;
    int one = 1, ms = 30000;
    zmq_setsockopt(w->ctrl, ZMQ_IMMEDIATE, &one, sizeof one); /* no hellos pile up unsent */
    /* no send waits for ever on a coordinator that is gone (the job sets
     * the run's --worker-timeout) */
    zmq_setsockopt(w->ctrl, ZMQ_SNDTIMEO, &ms, sizeof ms);
    RT_TRY(rt_worker_sec_ctrl(&w->sec, w->zctx, w->ctrl));
    return rt_zsock_connect(w->ctrl, o->join);
}

static int describe(struct worker *w)
{
    const struct rt_worker_options *o = w->o;
    struct rt_member *me = &w->me;
    snprintf(me->id, sizeof me->id, "%016llx", (unsigned long long)rt_net_nonce());
    snprintf(me->shm, sizeof me->shm, "%016llx", (unsigned long long)rt_net_nonce());
    snprintf(me->link, sizeof me->link, "%016llx%016llx", (unsigned long long)rt_net_nonce(),
             (unsigned long long)rt_net_nonce());
    rt_net_host_name(me->host, sizeof me->host);
    if (o->name[0])
        snprintf(me->name, sizeof me->name, "%s", o->name);
    else
        snprintf(me->name, sizeof me->name, "%.40s-%d", me->host, (int)getpid());
    rt_net_host_id(me->host_id, sizeof me->host_id);
    snprintf(me->backend, sizeof me->backend, "%s", o->backend);
    struct rt_device_info info;
    if (rt_backend_device_info(o->backend, o->device, &info) < 0)
        return rt_error_wrap(RT_ERR_DEVICE, "backend %s, device %d", o->backend, o->device);
    snprintf(me->device, sizeof me->device, "%s", info.name);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    me->threads = o->threads > 0 ? o->threads : (int)(cores > 0 ? cores : 1);
    me->cpu_quota = fmax(0.0, rt_cpu_quota()); /* for the status page */
    me->mem_limit = rt_mem_limit();
    me->mem_rss = rt_mem_rss();
    snprintf(w->who, sizeof w->who, "worker %s", me->name);
    return RT_OK;
}

/* Token links (the job says so): the ring inbox, bound for CurveZMQ
 * before the job came, is made again on the same port for PLAIN (a
 * socket's mechanism is fixed when it binds). No peer connects before it
 * has the job's member list, and one that does retries. */
static int inbox_for_token_links(struct worker *w)
{
    if (!w->sec.curve)
        return rt_error(RT_ERR_CONFIG, "the run's links between workers are token links, but "
                                       "this worker runs --insecure");
    rt_curve_token_links(w->sec.curve, w->me.link);
    char ep[RT_ENDPOINT_MAX];
    size_t n = sizeof ep;
    if (zmq_getsockopt(w->inbox, ZMQ_LAST_ENDPOINT, ep, &n) != 0)
        return rt_error(RT_ERR_NET, "cannot read the ring inbox's endpoint");
    rt_zsock_close(&w->inbox);
    w->inbox = rt_zsock_new(w->zctx, ZMQ_PULL, (int64_t)RT_RING_MAX_CHUNK, 4096);
    if (!w->inbox || rt_link_server(w->sec.curve, w->inbox) < 0)
        return RT_ERR_NET;
    /* the old listener closes in ZeroMQ's I/O thread: the port frees soon */
    for (int i = 0; zmq_bind(w->inbox, ep) != 0; i++) {
        if (errno != EADDRINUSE || i >= 200)
            return rt_error(RT_ERR_NET, "cannot listen again on %s for token links: %s", ep,
                            zmq_strerror(errno));
        usleep(10000);
    }
    return RT_OK;
}

static int parse_job(struct worker *w)
{
    rt_wire_map j = rt_wire_root(&w->msg);
    uint64_t rank, world, chunk;
    char name[1024];
    const void *text;
    size_t tn;
    snprintf(w->run, sizeof w->run, "%s", w->msg.run);
    RT_TRY(rt_wire_get_uint(j, "rank", 0, RT_MAX_WORKERS - 1, &rank));
    RT_TRY(rt_membership_get(j, &w->ms));
    world = (uint64_t)w->ms.n;
    if (rank >= world)
        return rt_error(RT_ERR_FORMAT, "rank %llu of %llu workers", (unsigned long long)rank,
                        (unsigned long long)world);
    if (strcmp(w->ms.m[rank].id, w->me.id) != 0)
        return rt_error(RT_ERR_FORMAT, "the member list has someone else at rank %llu",
                        (unsigned long long)rank);
    RT_TRY(rt_wire_get_str(j, "model_name", 1, name, sizeof name));
    RT_TRY(rt_wire_get_bin(j, "model", MAX_MODEL_TEXT, &text, &tn));
    RT_TRY(rt_wire_get_bool(j, "checkpoints", &w->want_ckpt));
    RT_TRY(rt_wire_get_bool(j, "final", &w->want_final));
    RT_TRY(rt_wire_get_bool(j, "shm", &w->allow_shm));
    RT_TRY(rt_wire_get_uint(j, "chunk", 4096, RT_RING_MAX_CHUNK, &chunk));
    RT_TRY(rt_wire_get_f64(j, "hb", 0.05, 60.0, &w->hb));
    RT_TRY(rt_wire_get_f64(j, "timeout", 1.0, 1e6, &w->peer_timeout));
    RT_TRY(rt_wire_get_f64(j, "setup_after", 0.0, 1e6, &w->setup_after));
    bool token = false;
    RT_TRY(rt_wire_get_bool(j, "token_links", &token));
    if (token && !w->token_links)
        RT_TRY(inbox_for_token_links(w));
    w->token_links = token;
    if (memchr(text, '\0', tn))
        return rt_error(RT_ERR_FORMAT, "the model text holds a NUL byte");
    free(w->model_text);
    if (!(w->model_text = malloc(tn + 1)))
        return rt_error(RT_ERR_NOMEM, "out of memory");
    memcpy(w->model_text, text, tn);
    w->model_text[tn] = '\0';
    w->rank = (int)rank;
    w->world = (int)world;
    w->chunk = (size_t)chunk;
    if (w->chunk % 64)
        return rt_error(RT_ERR_FORMAT, "ring chunk of %zu bytes", w->chunk);

    /* Options: only training options, each validated like a flag. */
    struct rt_train_config *c = &w->c;
    rt_train_config_defaults(c);
    snprintf(c->model_path, sizeof c->model_path, "%s", name);
    const msgpack_object *items;
    size_t n;
    RT_TRY(rt_wire_get_array(j, "options", RT_TRAIN_OPTIONS_MAX, &items, &n));
    for (size_t i = 0; i < n; i++) {
        char k[64], v[1024];
        if (items[i].type != MSGPACK_OBJECT_ARRAY || items[i].via.array.size != 2)
            return rt_error(RT_ERR_FORMAT, "option %zu is not a [key, value] pair", i);
        RT_TRY(rt_wire_item_str(items[i].via.array.ptr, 0, "options", k, sizeof k));
        RT_TRY(rt_wire_item_str(items[i].via.array.ptr, 1, "options", v, sizeof v));
        if (!rt_train_config_is_sent(k))
            return rt_error(RT_ERR_FORMAT, "option '%s' is not one a coordinator sets", k);
        RT_TRY(rt_train_config_set(c, k, v, "the coordinator's job"));
    }
    snprintf(c->backend, sizeof c->backend, "%s", w->o->backend);
    c->device = w->o->device;
    c->threads = w->o->threads;
    c->progress = RT_PROGRESS_OFF;
    w->testing.throttle = w->o->throttle[0] ? strtof(w->o->throttle, NULL) : 0.0f;
    if (w->o->stall_at[0] && sscanf(w->o->stall_at, "%ld:%lf", &w->testing.stall_at_step,
                                    &w->testing.stall_seconds) != 2)
        return rt_error(RT_ERR_CONFIG, "--stall-at '%s': STEP:SECONDS", w->o->stall_at);
    c->testing = &w->testing;
    w->served = rt_wire_has(j, "data");
    if (w->served)
        RT_TRY(rt_manifest_get(j, &w->man));
    else
        RT_TRY(rt_data_guard(w->o, c->data_spec));
    return RT_OK;
}

/* Back from standby: idle (heartbeats only) until the coordinator's
 * back-off ends, then set up; "finished" ends the wait, and the run for
 * this worker, with status 0. */
static int wait_backoff(struct worker *w)
{
    static const char *const none[] = {NULL};
    if (!(w->setup_after > 0.0))
        return RT_OK;
    say(w, "back from standby: it sets up in %.0f s (the coordinator's back-off)",
        w->setup_after);
    int rc = wait_for(w, none, 1, w->setup_after);
    return rc == RT_ERR_TIMEOUT ? (rt_error_clear(), RT_OK) : rc;
}

/* Testing aids: S seconds of waiting, silent but for the line saying so.
 * --stall-setup S: a set-up that takes S seconds more, as a slow data read
 * would (tests pause or kill a worker in its set-up with it, however fast
 * the set-up itself is). --stall-end S: the end of training reported S
 * seconds late (tests admit a joiner in that window). */
static int stall(struct worker *w, double s, const char *what)
{
    if (!(s > 0.0))
        return RT_OK;
    say(w, "testing aid: %s", what);
    for (double t0 = rt_now(); rt_now() - t0 < s;) {
        if (worker_stop)
            return rt_error(RT_ERR_INTERRUPTED, "interrupted");
        usleep(50000);
    }
    return RT_OK;
}

static int stall_setup(struct worker *w)
{
    return stall(w, w->o->stall_setup, "the set-up hangs (--stall-setup)");
}

static int join(struct worker *w)
{
    static const char *const want[] = {"job", NULL};
    w->hb = 1.0;
    w->peer_timeout = 30.0;
    double t0 = rt_now(), last_hello = -1e9;
    bool hello_out = false; /* the last hello left (else: not connected yet) */
    say(w, "joining %s (ring inbox %s; links %s)", w->o->join, w->me.endpoint,
        w->sec.curve ? "CurveZMQ" : "INSECURE");
    for (;;) {
        double now = rt_now();
        /* one hello a second; one the socket could not take yet (EAGAIN:
         * ZMQ_IMMEDIATE, the connection and its handshake take a few ms)
         * is tried again in HELLO_RETRY_S, not a second later: every
         * worker's join waited that second */
        const double every = hello_out ? 1.0 : HELLO_RETRY_S;
        if (now - last_hello >= every) {
            rt_wire_begin(&w->w, "", "hello", 1);
            rt_wire_put_key(&w->w, "member");
            rt_member_put(&w->w, &w->me);
            RT_TRY(rt_wire_end(&w->w));
            hello_out = zmq_send(w->ctrl, w->w.data, w->w.len, ZMQ_DONTWAIT) >= 0;
            last_hello = now;
        }
        double limit = w->o->connect_timeout > 0 ? w->o->connect_timeout - (now - t0) : 0;
        if (w->o->connect_timeout > 0 && limit <= 0)
            return rt_error(RT_ERR_TIMEOUT, "no coordinator answered at %s within %.0f s%s",
                            w->o->join, w->o->connect_timeout,
                            w->o->rejoining ? " of this worker leaving the run (--coord-timeout): "
                                              "the run has ended, or its coordinator is gone"
                                            : "");
        RT_TRY(rt_worker_sec_check(&w->sec, w->o->join));
        const double wait = hello_out ? 1.0 : HELLO_RETRY_S;
        int rc = wait_for(w, want, 1, limit > 0 && limit < wait ? limit : wait);
        if (rc == RT_ERR_TIMEOUT)
            continue;
        if (rc < 0)
            return rc;
        if ((rc = parse_job(w)) < 0) {
            /* Only the coordinator can reach this socket: a job we cannot
             * read means another version of ragtag. Tell it, and stop. */
            char why[600];
            snprintf(why, sizeof why, "cannot use the job: %s", rt_error_detail());
            rt_wire_begin(&w->w, w->run, "error", 1);
            rt_wire_put_str(&w->w, "message", why);
            if (rt_wire_end(&w->w) == RT_OK)
                zmq_send(w->ctrl, w->w.data, w->w.len, ZMQ_DONTWAIT);
            return rt_error(RT_ERR_FORMAT, "%s", why);
        }
        rt_worker_sec_joined(&w->sec);
        rt_membership_admit(&w->ms, w->sec.curve); /* its ring and gossip peers */
        w->last_seen = w->last_hb = rt_now();
        int ms = (int)(w->peer_timeout * 1000.0);
        zmq_setsockopt(w->ctrl, ZMQ_SNDTIMEO, &ms, sizeof ms);
        say(w, "joined run %.8s as rank %d of %d", w->run, w->rank, w->world);
        return RT_OK;
    }
}

/* ---- data ---------------------------------------------------------------------------- */

static int fetch_file(struct worker *w, const char *cache, int i)
{
    static const char *const want[] = {"file", NULL};
    const struct rt_data_manifest *m = &w->man;
    rt_wire_begin(&w->w, w->run, "fetch", 1);
    rt_wire_put_uint(&w->w, "file", (uint64_t)i);
    RT_TRY(rt_wire_end(&w->w));
    RT_TRY(send_ctrl(w, NULL, NULL, 0));
    rt_cache_file *f = rt_cache_file_begin(cache, m->sha[i], m->size[i]);
    if (!f)
        return RT_ERR_IO;
    int rc = RT_OK;
    while (!rt_cache_file_complete(f)) {
        if ((rc = wait_for(w, want, 2, 120.0)) < 0)
            break;
        uint64_t file, off;
        rt_wire_map r = rt_wire_root(&w->msg);
        if (rt_wire_get_uint(r, "file", 0, RT_DATA_MAX_FILES - 1, &file) < 0 ||
            rt_wire_get_uint(r, "off", 0, RT_DATA_MAX_FILE_BYTES, &off) < 0 || file != (uint64_t)i ||
            rt_zframe_size(&w->fr, 1) > RT_DATA_CHUNK) {
            rt_wire_drop(&w->drops, "the coordinator", "a data chunk that was not asked for");
            continue;
        }
        if ((rc = rt_cache_file_write(f, off, rt_zframe_data(&w->fr, 1),
                                      rt_zframe_size(&w->fr, 1))) < 0)
            break;
    }
    if (rc < 0) {
        rt_cache_file_abort(&f);
        return rt_error_wrap(rc, "fetching %s", m->files.name[i]);
    }
    return rt_cache_file_finish(&f);
}

static int get_data(struct worker *w)
{
    if (!w->served)
        return RT_OK;
    char cache[1100];
    RT_TRY(rt_cache_dir(w->o->cache_dir, cache, sizeof cache));
    int fetched = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < w->man.files.n; i++) {
        if (rt_cache_has(cache, w->man.sha[i], w->man.size[i]))
            continue;
        RT_TRY(fetch_file(w, cache, i));
        fetched++;
        bytes += w->man.size[i];
    }
    RT_TRY(rt_cache_spec(cache, &w->man, w->c.data_spec, sizeof w->c.data_spec));
    say(w, "data: %d files, %d from the cache in %s, %d fetched (%.1f MB)", w->man.files.n,
        w->man.files.n - fetched, cache, fetched, (double)bytes / 1e6);
    return RT_OK;
}

/* Memory (issue 18): the run's need against this worker's limit, before
 * it reads its data. The coordinator turned away a worker that cannot fit
 * at all; this one may still hold less than the whole batch, and a
 * balanced sync share is then capped to what fits. */
static int check_memory(struct worker *w)
{
    struct rt_mem_need n;
    if (rt_mem_estimate(w->model_text, &w->c, w->world, &n) < 0) {
        say(w, "memory: no estimate of the run's need (%s)", rt_error_detail());
        return RT_OK;
    }
    long rows;
    uint64_t need, limit = w->me.mem_limit;
    RT_TRY(rt_mem_fit(&n, &w->c, w->world, limit, &rows, &need));
    w->me.mem_need = need;
    if (rows < rt_mem_rows(&w->c, w->world, false))
        w->c.mem_rows = rows;
    char d[400];
    rt_mem_describe(&n, rows, d, sizeof d);
    if (limit)
        say(w, "memory: needs %s; its limit is %.0f MB%s", d, (double)limit / RT_MB,
            w->c.mem_rows ? ": its shares are capped to what fits" : "");
    else
        say(w, "memory: needs %s; no memory limit", d);
    return RT_OK;
}

/* ---- the trainer's hooks (struct rt_train_comm) ----------------------------------------- */

/* "start" of a resumed run: the position and raw frames, checked against
 * the model in w_restore (the sizes are only known there). */
static int take_resume(struct worker *w)
{
    rt_wire_map m = rt_wire_root(&w->msg);
    bool on = false;
    if (rt_wire_has(m, "resume") && rt_wire_get_bool(m, "resume", &on) < 0)
        return rt_error_wrap(RT_ERR_FORMAT, "the coordinator's start");
    if (!on) {
        if (w->fr.n != 1)
            return rt_error(RT_ERR_FORMAT, "the coordinator's start has %d frames", w->fr.n);
        return RT_OK;
    }
    struct resume_state *r = &w->resume;
    uint64_t epoch, step, be, bad;
    double best;
    if (rt_wire_get_uint(m, "epoch", 0, 1000000, &epoch) < 0 ||
        rt_wire_get_uint(m, "step", 0, (uint64_t)1 << 50, &step) < 0 ||
        rt_wire_get_f64_or_nan(m, "best_metric", -1e30, 1e30, &best) < 0 ||
        rt_wire_get_uint(m, "best_epoch", 0, 1000000, &be) < 0 ||
        rt_wire_get_uint(m, "bad_epochs", 0, 1000000, &bad) < 0 ||
        rt_wire_get_uint(m, "np", 1, (uint64_t)1 << 40, &r->np) < 0 ||
        rt_wire_get_uint(m, "ns", 0, (uint64_t)1 << 40, &r->ns) < 0 ||
        rt_wire_get_uint(m, "lo", 0, r->np, &r->lo) < 0 ||
        rt_wire_get_uint(m, "hi", r->lo, r->np, &r->hi) < 0 ||
        rt_wire_get_uint(m, "nopt", 0, 2, &r->nopt) < 0 ||
        rt_wire_get_bool(m, "best", &r->best) < 0)
        return rt_error_wrap(RT_ERR_FORMAT, "the coordinator's start");
    size_t sizes[7];
    int k = 0;
    sizes[k++] = r->np;
    if (r->ns)
        sizes[k++] = r->ns;
    for (uint64_t i = 0; i < r->nopt; i++)
        sizes[k++] = r->hi - r->lo;
    if (r->best) {
        sizes[k++] = r->np;
        if (r->ns)
            sizes[k++] = r->ns;
    }
    if (w->fr.n != 1 + k)
        return rt_error(RT_ERR_FORMAT, "the coordinator's start has %d frames, not %d", w->fr.n,
                        1 + k);
    for (int i = 0; i < k; i++) {
        if (rt_zframe_size(&w->fr, 1 + i) != sizes[i] * sizeof(float))
            return rt_error(RT_ERR_FORMAT, "frame %d of the coordinator's start has %zu bytes, "
                                           "not %zu", 1 + i, rt_zframe_size(&w->fr, 1 + i),
                            sizes[i] * sizeof(float));
        if (!(r->buf[i] = malloc(sizes[i] ? sizes[i] * sizeof(float) : 1)))
            return rt_error(RT_ERR_NOMEM, "out of memory for the checkpoint");
        memcpy(r->buf[i], rt_zframe_data(&w->fr, 1 + i), sizes[i] * sizeof(float));
    }
    r->pos = (struct rt_train_pos){.epoch = (long)epoch, .step = (long)step,
                                   .best_metric = best, .best_epoch = (long)be,
                                   .bad_epochs = (long)bad};
    r->on = true;
    return RT_OK;
}

static int w_restore(void *ctx, struct rt_ckpt_restore *to)
{
    struct worker *w = ctx;
    struct resume_state *r = &w->resume;
    if (!r->on)
        return 0;
    struct rt_train_pos *pos = to->pos;
    float *params = to->params, *state = to->state, *best = to->best;
    float *const *opt = to->opt;
    size_t np = to->np, ns = to->ns, lo = to->lo, hi = to->hi;
    int nopt = to->nopt;
    if (r->np != np || r->ns != ns || r->lo != lo || r->hi != hi || r->nopt != (uint64_t)nopt)
        return rt_error(RT_ERR_FORMAT, "the checkpoint the coordinator sent does not fit this "
                                       "model (%llu parameters, %llu state, %llu optimiser "
                                       "buffers; here %zu, %zu, %d)",
                        (unsigned long long)r->np, (unsigned long long)r->ns,
                        (unsigned long long)r->nopt, np, ns, nopt);
    int k = 0;
    memcpy(params, r->buf[k++], np * sizeof(float));
    if (ns)
        memcpy(state, r->buf[k++], ns * sizeof(float));
    for (int i = 0; i < nopt; i++)
        memcpy(opt[i], r->buf[k++], (hi - lo) * sizeof(float));
    if (r->best && best) {
        memcpy(best, r->buf[k++], np * sizeof(float));
        if (ns)
            memcpy(best + np, r->buf[k++], ns * sizeof(float));
        to->have_best = true;
    }
    uint64_t seed = pos->seed;
    *pos = r->pos;
    pos->seed = seed;
    for (int i = 0; i < 7; i++) {
        free(r->buf[i]);
        r->buf[i] = NULL;
    }
    r->on = false;
    say(w, "resumed at epoch %ld, step %ld", pos->epoch, pos->step);
    return 1;
}

/* While a ring forms: the heartbeats go on (the coordinator would take a
 * long wait for a lost neighbour for this worker's silence), and a newer
 * generation announced meanwhile (a member was lost) gives the set-up up:
 * its "regroup" stays in w->msg. */
static int setup_heartbeats(void *arg)
{
    static const char *const next[] = {"regroup", NULL};
    struct worker *w = arg;
    if (rt_now() - w->last_hb >= w->hb)
        send_hb(w);
    if (worker_stop)
        return rt_error(RT_ERR_INTERRUPTED, "interrupted");
    zmq_pollitem_t it = {.socket = w->ctrl, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, 0) <= 0)
        return RT_OK;
    int rc = wait_for(w, next, 1, 0.01);
    if (rc == 1) {
        w->have_regroup = true;
        return rt_error(RT_ERR_REGROUP, "generation %llu is announced",
                        (unsigned long long)w->ms.gen + 1);
    }
    if (rc == RT_ERR_TIMEOUT) { /* a heartbeat, or nothing more */
        rt_error_clear();
        return RT_OK;
    }
    /* The run ended for this worker (it was told to join again, the run
     * was aborted or finished): the set-up gives up, and no next
     * generation is waited for (ended_setup). */
    w->ended = rc;
    snprintf(w->end_why, sizeof w->end_why, "%s", rt_error_detail());
    return rc;
}

/* After a ring set-up that failed: the run's end it read, or 0. */
static int ended_setup(struct worker *w)
{
    return w->ended ? rt_error(w->ended, "%s", w->end_why) : 0;
}

static int form_ring(struct worker *w, rt_ring **ring, double setup_timeout)
{
    struct rt_ring_config rc = {
        .setup_idle = setup_heartbeats,
        .idle_arg = w,
        .run = w->run,
        .members = &w->ms,
        .rank = w->rank,
        .zctx = w->zctx,
        .inbox = &w->inbox,
        .allow_shm = w->allow_shm,
        .chunk_bytes = w->chunk,
        .setup_timeout = setup_timeout,
        .curve = w->sec.curve,
    };
    *ring = rt_ring_new(&rc);
    return *ring ? RT_OK : RT_ERR_NET;
}

/* The members of a "regroup" in w->msg: a newer generation, with us. */
static int take_members(struct worker *w)
{
    uint64_t before = w->ms.gen;
    RT_TRY(rt_membership_get(rt_wire_root(&w->msg), &w->ms));
    if (w->ms.gen <= before)
        return rt_error(RT_ERR_FORMAT, "members of generation %llu after %llu",
                        (unsigned long long)w->ms.gen, (unsigned long long)before);
    rt_membership_admit(&w->ms, w->sec.curve);
    for (int r = 0; r < w->ms.n; r++)
        if (!strcmp(w->ms.m[r].id, w->me.id)) {
            w->rank = r;
            w->world = w->ms.n;
            return RT_OK;
        }
    return rt_error(RT_ERR_FORMAT, "generation %llu has no place for this worker",
                    (unsigned long long)w->ms.gen);
}

/* Take the newest of the "regroup"s already queued: the members of the
 * generations between are gone, and their rings could never form. */
static int skip_to_newest(struct worker *w)
{
    static const char *const want[] = {"regroup", NULL};
    for (;;) {
        zmq_pollitem_t it = {.socket = w->ctrl, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 0) <= 0 || !(it.revents & ZMQ_POLLIN))
            return RT_OK;
        int rc = wait_for(w, want, 1, 0.2);
        if (rc == RT_ERR_TIMEOUT) {
            rt_error_clear();
            return RT_OK; /* only a heartbeat or an older generation's "go" */
        }
        RT_TRY(rc); /* the run ended for this worker */
        RT_TRY(take_members(w));
    }
}

/* A worker that joins a run under way: the coordinator's "regroup" is its
 * start. Form the ring of that generation, say so, and wait for "go" (every
 * member formed it), or for a newer generation, and form that one. A ring
 * that cannot form (a member was lost meanwhile) waits for the next one. */
static int join_running(struct worker *w, rt_ring **ring)
{
    static const char *const want[] = {"go", "regroup", NULL};
    static const char *const next[] = {"regroup", NULL};
    for (;;) {
        RT_TRY(take_members(w));
        RT_TRY(skip_to_newest(w));
        if (*ring) {
            w->inbox = rt_ring_release_inbox(*ring);
            rt_ring_destroy(ring);
        }
        w->have_regroup = false;
        if (form_ring(w, ring, RT_RING_SETUP_TIMEOUT) < 0) {
            RT_TRY(ended_setup(w));
            say(w, "%s; waiting for the next generation", rt_error_detail());
            if (!w->have_regroup)
                RT_TRY(wait_for(w, next, 1, w->peer_timeout));
            continue;
        }
        rt_wire_begin(&w->w, w->run, "regrouped", 2);
        rt_wire_put_uint(&w->w, "gen", w->ms.gen);
        rt_wire_put_uint(&w->w, "rank", (uint64_t)w->rank);
        RT_TRY(rt_wire_end(&w->w));
        RT_TRY(send_ctrl(w, NULL, NULL, 0));
        for (;;) {
            RT_TRY(wait_for(w, want, 1, 0));
            if (!strcmp(w->msg.type, "regroup"))
                break;
            uint64_t g;
            if (rt_wire_get_uint(rt_wire_root(&w->msg), "gen", 1, UINT32_MAX, &g) == 0 &&
                g == w->ms.gen)
                return RT_OK;
        }
    }
}

/* The first ring; when a member is lost while it forms, the ring of the
 * generation the coordinator announces instead (then 1). */
static int start_ring(struct worker *w, rt_ring **ring)
{
    static const char *const next[] = {"regroup", NULL};
    w->have_regroup = false;
    if (form_ring(w, ring, RT_RING_SETUP_TIMEOUT) == RT_OK)
        return RT_OK;
    RT_TRY(ended_setup(w));
    say(w, "%s; waiting for the next generation", rt_error_detail());
    if (!w->have_regroup)
        RT_TRY(wait_for(w, next, 1, w->peer_timeout));
    RT_TRY(join_running(w, ring));
    return 1;
}

/* Ready: wait for "start" (or, joining a run under way, "regroup": then
 * 1), form the ring and hand every socket to the comm thread. */
static int w_ready(void *ctx, double ips, const char *summary)
{
    struct worker *w = ctx;
    static const char *const want[] = {"start", "regroup", "probe", NULL};
    rt_wire_begin(&w->w, w->run, "ready", 5);
    rt_wire_put_uint(&w->w, "rank", (uint64_t)w->rank);
    rt_wire_put_f64(&w->w, "ips", ips);
    rt_wire_put_str(&w->w, "summary", summary);
    rt_wire_put_uint(&w->w, "mem_need", w->me.mem_need);
    rt_wire_put_uint(&w->w, "rows", (uint64_t)(w->c.mem_rows > 0 ? w->c.mem_rows : 0));
    RT_TRY(rt_wire_end(&w->w));
    RT_TRY(send_ctrl(w, NULL, NULL, 0));
    RT_TRY(wait_for(w, want, -1, 0));
    if (!strcmp(w->msg.type, "probe"))
        return 2;
    int late = !strcmp(w->msg.type, "regroup");
    rt_ring *ring = NULL;
    int rc = late ? join_running(w, &ring) : take_resume(w);
    if (rc == RT_OK && !late && (rc = start_ring(w, &ring)) > 0)
        late = 3; /* a member was lost while the first ring formed */
    if (rc < 0) {
        rt_ring_destroy(&ring);
        return rc;
    }
    struct rt_comm_config cc = {
        .ring = &ring,
        .zctx = w->zctx,
        .ctrl = &w->ctrl,
        .run = w->run,
        .hb_interval = w->hb,
        .peer_timeout = w->peer_timeout,
        .coord_timeout = w->o->coord_timeout,
        .self_id = w->me.id,
        .members = &w->ms,
        .allow_shm = w->allow_shm,
        .chunk_bytes = w->chunk,
        .curve = w->sec.curve,
    };
    w->comm = rt_comm_new(&cc);
    if (!w->comm) {
        rt_ring_destroy(&ring);
        return RT_ERR_NET;
    }
    say(w, "%s: rank %d of %d, generation %llu, links %s (left) / %s (right)",
        late == 1 ? "joined the run under way" : "ring formed", w->rank, w->world,
        (unsigned long long)w->ms.gen, rt_comm_link(w->comm, false), rt_comm_link(w->comm, true));
    return late;
}

/* The members changed: the comm thread forms the new ring. */
static int w_regroup(void *ctx, int *rank, int *world)
{
    struct worker *w = ctx;
    uint64_t gen = w->ms.gen;
    RT_TRY(rt_comm_regroup(w->comm, rank, world));
    w->votes_in = 0; /* of the step that did not complete; our own votes stand */
    if (rt_comm_members(w->comm)->gen == gen)
        return RT_OK;
    w->ms = *rt_comm_members(w->comm);
    w->rank = *rank;
    w->world = *world;
    say(w, "generation %llu: rank %d of %d, links %s (left) / %s (right)",
        (unsigned long long)w->ms.gen, w->rank, w->world, rt_comm_link(w->comm, false),
        rt_comm_link(w->comm, true));
    return RT_OK;
}

/* The trainer's collectives (collective.h) over the comm thread's ring.
 * Control votes ride in the chunk headers' flag bits of the float
 * collectives: cast votes go out with every one until agreed() is asked,
 * and what comes back is ORed in. */
static int w_flagged(struct worker *w, int (*op)(rt_comm *, float *, size_t, uint32_t *),
                     float *buf, size_t n)
{
    uint32_t fl = w->votes_out | w->votes_in;
    int rc = op(w->comm, buf, n, &fl);
    w->votes_in |= fl;
    return rc;
}

static int w_rs(void *ctx, float *buf, size_t n)
{
    return w_flagged(ctx, rt_comm_reduce_scatter, buf, n);
}

static int w_ag(void *ctx, float *buf, size_t n)
{
    return w_flagged(ctx, rt_comm_all_gather, buf, n);
}

/* ---- sums in place when every member shares this host (hostreduce.h) ---- */

/* a sum's last resort, as a collective's on the comm thread: a lost peer
 * ends it long before, through the coordinator's regroup */
#define HOST_SUM_TIMEOUT 600.0

static float *w_shared_floats(void *ctx, size_t n)
{
    struct worker *w = ctx;
    struct host_sums *hs = &w->hs;
    size_t got;
    if (hs->hr) { /* a later replica of this process: the same memory */
        float *f = rt_hostreduce_floats(hs->hr, &got);
        hs->private_grads = got != n; /* another model: its gradient is not there */
        return hs->private_grads ? NULL : f;
    }
    if (!w->allow_shm)
        return NULL;
    if (!(hs->hr = rt_hostreduce_new(w->me.shm, n))) {
        say(w, "%s: the gradient is summed through the ring", rt_error_detail());
        rt_error_clear();
        return NULL;
    }
    return rt_hostreduce_floats(hs->hr, &got);
}

/* Whether every member shares this host and mapped every other's
 * gradient: decided at a generation's first float sum, by all together
 * (one sum of "no"s), so that all or none sum in place. */
/* How long a wait for the other workers' marks spins before it sleeps on
 * the futex: 200 us where every member's threads have a core of their own
 * (lenet's 2 workers on 2 vCPUs: a step of ~1.1 ms, whose waiter woke from
 * a halted vCPU after 20 us of spinning; 200 us: +2.7%, bench/README.md),
 * 20 us where the members' threads outnumber the cores or a CPU quota
 * holds this worker (a spin there takes a core another member computes
 * on, or burns the quota). */
#define HOST_SUM_SPIN_LONG 200e-6
#define HOST_SUM_SPIN_SHORT 20e-6
static double hs_spin(const struct worker *w)
{
    const int cores = rt_affinity_cores();
    long threads = 0;
    for (int r = 0; r < w->world; r++)
        threads += w->ms.m[r].threads > 0 ? w->ms.m[r].threads : 1;
    bool quota = w->me.cpu_quota > 0.0 && w->me.cpu_quota < (double)cores;
    return !quota && threads <= cores ? HOST_SUM_SPIN_LONG : HOST_SUM_SPIN_SHORT;
}

static int hs_decide(struct worker *w)
{
    struct host_sums *hs = &w->hs;
    if (hs->gen == w->ms.gen)
        return RT_OK;
    bool ok = hs->hr && !hs->private_grads && w->world > 1;
    const char *secrets[RT_MAX_WORKERS];
    for (int r = 0; ok && r < w->world; r++) {
        ok = rt_membership_same_host(&w->ms, w->rank, r);
        secrets[r] = w->ms.m[r].shm;
    }
    if (ok && rt_hostreduce_group(hs->hr, w->ms.gen, w->rank, w->world, secrets) < 0) {
        say(w, "%s: the gradient is summed through the ring", rt_error_detail());
        rt_error_clear();
        ok = false;
    }
    double no = ok ? 0.0 : 1.0;
    RT_TRY(rt_comm_allreduce_f64(w->comm, &no, 1));
    hs->gen = w->ms.gen;
    hs->on = no == 0.0;
    hs->spin_s = hs_spin(w);
    if (!hs->on)
        rt_hostreduce_ungroup(hs->hr);
    if (hs->hr && (!hs->told || hs->on != hs->said))
        say(w, hs->on ? "gradient sums: in place, in this host's shared memory, by all %d "
                        "workers" : "gradient sums: through the ring (%d workers)", w->world);
    hs->told = true;
    hs->said = hs->on;
    return RT_OK;
}

static bool hs_covers(struct worker *w, const void *buf, size_t hi)
{
    size_t n;
    return w->hs.on && buf == rt_hostreduce_floats(w->hs.hr, &n) && hi <= n;
}

/* Work that waits outside the comm thread's collectives (gossip's steps
 * and drain, sums in place) sees a change of members, or an abort of the
 * run, here. */
static int members_changing(struct worker *w)
{
    return rt_comm_members_changing(w->comm)
               ? rt_error(RT_ERR_REGROUP, "the members changed: a new generation forms")
               : RT_OK;
}

static int run_aborted(struct worker *w)
{
    const char *why = rt_comm_aborted(w->comm);
    return why ? rt_error(RT_ERR_NET, "%s", why) : RT_OK;
}

static int hs_check(void *arg)
{
    RT_TRY(run_aborted(arg));
    return members_changing(arg);
}

static void hs_waiting(void *arg, bool on) { rt_comm_waiting(((struct worker *)arg)->comm, on); }

static int hs_sum(struct worker *w, size_t lo, size_t hi)
{
    struct rt_hostreduce_wait hw = {HOST_SUM_TIMEOUT, hs_check, hs_waiting, w, w->hs.spin_s};
    uint32_t agreed = 0;
    int rc = rt_hostreduce_allreduce(w->hs.hr, lo, hi, w->votes_out | w->votes_in, &agreed, &hw);
    w->votes_in |= agreed;
    return rc;
}

static int w_ar(void *ctx, float *buf, size_t n)
{
    struct worker *w = ctx;
    RT_TRY(hs_decide(w));
    if (hs_covers(w, buf, n))
        return hs_sum(w, 0, n);
    return w_flagged(ctx, rt_comm_allreduce, buf, n);
}

static int w_ar64(void *ctx, double *buf, size_t n)
{
    return rt_comm_allreduce_f64(((struct worker *)ctx)->comm, buf, n);
}

static int w_bcast(void *ctx, void *buf, size_t bytes, int root)
{
    return rt_comm_broadcast(((struct worker *)ctx)->comm, buf, bytes, root);
}

/* A range summed in place waits in the queue until its wait (the peers
 * may still be in backward); the ring's go to the comm thread at once. */
static int w_submit(void *ctx, void *buf, enum rt_elem elem, size_t n, size_t lo, size_t hi)
{
    struct worker *w = ctx;
    struct host_sums *hs = &w->hs;
    RT_TRY(hs_decide(w));
    RT_ASSERT(hs->count < RT_COLLECTIVE_MAX_INFLIGHT);
    bool in_place = elem == RT_ELEM_F32 && hs_covers(w, buf, hi);
    if (!in_place)
        RT_TRY(rt_comm_submit_range(w->comm, buf, elem, n, lo, hi, w->votes_out | w->votes_in));
    hs->q[(hs->head + hs->count++) % RT_COLLECTIVE_MAX_INFLIGHT] =
        (struct host_range){.in_place = in_place, .lo = lo, .hi = hi};
    return RT_OK;
}

/* The oldest range in place, with the in-place ranges queued right after
 * it when together they are one interval (a step's buckets and its tally):
 * one sum, whose status each of their waits returns. */
static int hs_sum_queued(struct worker *w)
{
    struct host_sums *hs = &w->hs;
    size_t lo = SIZE_MAX, hi = 0, len = 0;
    int k = 0;
    for (; k < hs->count; k++) {
        struct host_range *q = &hs->q[(hs->head + k) % RT_COLLECTIVE_MAX_INFLIGHT];
        if (!q->in_place)
            break;
        lo = q->lo < lo ? q->lo : lo;
        hi = q->hi > hi ? q->hi : hi;
        len += q->hi - q->lo;
    }
    if (hi - lo != len) /* not one interval: the oldest alone */
        k = 1, lo = hs->q[hs->head].lo, hi = hs->q[hs->head].hi;
    int rc = hs_sum(w, lo, hi);
    for (int i = 0; i < k; i++)
        hs->q[(hs->head + i) % RT_COLLECTIVE_MAX_INFLIGHT] =
            (struct host_range){.in_place = true, .summed = true, .rc = rc};
    return rc;
}

static int w_wait(void *ctx)
{
    struct worker *w = ctx;
    struct host_sums *hs = &w->hs;
    RT_ASSERT(hs->count > 0);
    struct host_range *q = &hs->q[hs->head];
    int rc;
    if (!q->in_place) {
        uint32_t fl = 0;
        rc = rt_comm_wait(w->comm, &fl);
        if (rc >= 0)
            w->votes_in |= fl;
    } else {
        rc = q->summed ? q->rc : hs_sum_queued(w);
    }
    hs->head = (hs->head + 1) % RT_COLLECTIVE_MAX_INFLIGHT;
    hs->count--;
    return rc;
}

static void w_vote(void *ctx, uint32_t votes)
{
    ((struct worker *)ctx)->votes_out |= votes;
}

static uint32_t w_agreed(void *ctx)
{
    struct worker *w = ctx;
    uint32_t v = w->votes_out | w->votes_in;
    w->votes_out = w->votes_in = 0;
    return v;
}

static bool w_changing(void *ctx) { return rt_comm_members_changing(((struct worker *)ctx)->comm); }

/* The host's one replica: only where the gradient is summed in place (every
 * member on this host, each mapping the others' segments). */
static int w_host_replica(void *ctx, size_t n, bool able, float **out)
{
    struct worker *w = ctx;
    *out = NULL;
    RT_TRY(hs_decide(w));
    if (!w->hs.on)
        return RT_OK;
    struct rt_hostreduce_wait hw = {HOST_SUM_TIMEOUT, hs_check, hs_waiting, w, w->hs.spin_s};
    RT_TRY(rt_hostreduce_replica(w->hs.hr, n, able, &hw, out));
    if (!w->hs.told_replica && !*out) /* (asked again at every epoch: said once) */
        say(w, "%s: each worker keeps its own replica", rt_error_detail());
    else if (!w->hs.told_replica && w->rank == 0)
        say(w, "weights and optimiser state: one copy in this host's shared memory for all %d "
               "workers (%.1f MB)", w->world, (double)n * sizeof(float) / 1e6);
    rt_error_clear();
    w->hs.told_replica = true;
    return RT_OK;
}

static int w_host_barrier(void *ctx)
{
    struct worker *w = ctx;
    RT_ASSERT(w->hs.on);
    struct rt_hostreduce_wait hw = {HOST_SUM_TIMEOUT, hs_check, hs_waiting, w, w->hs.spin_s};
    uint32_t agreed = 0;
    int rc = rt_hostreduce_barrier(w->hs.hr, w->votes_out | w->votes_in, &agreed, &hw);
    w->votes_in |= agreed;
    return rc;
}

static int w_sum_apply(void *ctx, float *buf, size_t from, size_t n, size_t tail,
                       int (*apply)(void *arg, size_t lo, size_t hi), void *arg, double *sumsq)
{
    struct worker *w = ctx;
    RT_TRY(hs_decide(w));
    if (!hs_covers(w, buf, n))
        return rt_error(RT_ERR_CONFIG, "the gradient is not summed in place here: no shared "
                        "update");
    struct rt_hostreduce_wait hw = {HOST_SUM_TIMEOUT, hs_check, hs_waiting, w, w->hs.spin_s};
    struct rt_hostreduce_apply ap = {from, n, tail, apply, arg, sumsq};
    uint32_t agreed = 0;
    int rc = rt_hostreduce_sum_apply(w->hs.hr, &ap, w->votes_out | w->votes_in, &agreed, &hw);
    w->votes_in |= agreed;
    return rc;
}

static bool w_apply_undone(void *ctx)
{
    struct worker *w = ctx;
    return w->hs.on && rt_hostreduce_grouped(w->hs.hr) && rt_hostreduce_apply_undone(w->hs.hr);
}

static const struct rt_collective_ops worker_collectives = {
    .reduce_scatter = w_rs,
    .all_gather = w_ag,
    .allreduce = w_ar,
    .allreduce_f64 = w_ar64,
    .broadcast = w_bcast,
    .submit = w_submit,
    .wait = w_wait,
    .vote = w_vote,
    .agreed = w_agreed,
    .regroup = w_regroup,
    .shared_floats = w_shared_floats,
    .host_replica = w_host_replica,
    .host_barrier = w_host_barrier,
    .sum_apply = w_sum_apply,
    .apply_undone = w_apply_undone,
    .changing = w_changing,
};

/* Gossip: every rank's inbox, passed round the ring, then a socket to each;
 * again, with new links, after the members changed. */
static int w_gossip_begin(void *ctx, size_t n, long first_epoch)
{
    struct worker *w = ctx;
    rt_gossip_destroy(&w->gossip);
    char ip[RT_ENDPOINT_MAX];
    RT_TRY(rt_net_endpoint_host(w->me.endpoint, ip, sizeof ip));
    /* the members of this host, as the ring's links (unless --no-shm) */
    const char **secrets = calloc((size_t)w->world, sizeof *secrets);
    if (!secrets)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    for (int r = 0; r < w->world; r++)
        if (w->allow_shm && rt_membership_same_host(&w->ms, w->rank, r))
            secrets[r] = w->ms.m[r].shm;
    struct rt_gossip_config gc = {
        .zctx = w->zctx,
        .run = w->run,
        .gen = w->ms.gen,
        .rank = w->rank,
        .world = w->world,
        .bind_ip = ip,
        .n = n,
        .seed = w->c.seed,
        .reply_timeout = w->peer_timeout,
        .epoch = (uint64_t)first_epoch,
        .curve = w->sec.curve,
        .shm_secrets = secrets,
    };
    w->gossip = rt_gossip_new(&gc);
    free(secrets);
    if (!w->gossip)
        return RT_ERR_NET;
    char(*eps)[RT_ENDPOINT_MAX] = calloc((size_t)w->world, RT_ENDPOINT_MAX);
    const char **ptr = calloc((size_t)w->world, sizeof *ptr);
    const char **keys = calloc((size_t)w->world, sizeof *keys);
    int rc = eps && ptr ? RT_OK : rt_error(RT_ERR_NOMEM, "out of memory");
    if (rc == RT_OK)
        snprintf(eps[w->rank], RT_ENDPOINT_MAX, "%s", rt_gossip_endpoint(w->gossip));
    for (int r = 0; rc == RT_OK && r < w->world; r++) {
        rc = rt_comm_broadcast(w->comm, eps[r], RT_ENDPOINT_MAX, r);
        if (rc == RT_OK && (eps[r][RT_ENDPOINT_MAX - 1] || strncmp(eps[r], "tcp://", 6)))
            rc = rt_error(RT_ERR_NET, "rank %d sent a malformed gossip address", r);
        ptr[r] = eps[r];
        if (keys)
            keys[r] = w->ms.m[r].key;
    }
    if (rc == RT_OK && !keys)
        rc = rt_error(RT_ERR_NOMEM, "out of memory");
    /* a rank whose shared memory queues could not be made reaches its
     * peers of this host over ZeroMQ: they must know */
    bool *ready = calloc((size_t)w->world, sizeof *ready);
    if (rc == RT_OK && !ready)
        rc = rt_error(RT_ERR_NOMEM, "out of memory");
    if (rc == RT_OK)
        ready[w->rank] = rt_gossip_shm_ready(w->gossip);
    for (int r = 0; rc == RT_OK && r < w->world; r++)
        rc = rt_comm_broadcast(w->comm, &ready[r], sizeof ready[r], r);
    if (rc == RT_OK)
        rc = rt_gossip_connect(w->gossip, ptr, w->sec.curve ? keys : NULL, ready);
    free(ready);
    if (rc == RT_OK && w->world > 1) {
        int shm = rt_gossip_shm_links(w->gossip);
        say(w, "gossip links: %d through shared memory, %d over ZeroMQ", shm,
            w->world - 1 - shm);
    }
    free(eps);
    free(ptr);
    free(keys);
    return rc;
}

static int w_gossip_step(void *ctx, float *params, size_t n, bool initiate)
{
    (void)n;
    RT_TRY(members_changing(ctx));
    return rt_gossip_step(((struct worker *)ctx)->gossip, params, initiate);
}

/* Waits as long as peers are training (a slow one may take a while to
 * finish its part of the epoch), but not past an abort of the run. */
static int drain_or_abort(struct worker *w, float *params, long epoch)
{
    for (;;) {
        RT_TRY(members_changing(w));
        int rc = rt_gossip_drain(w->gossip, params, (uint64_t)epoch, 1.0);
        if (rc != RT_ERR_TIMEOUT)
            return rc;
        RT_TRY(run_aborted(w));
    }
}

/* Waiting for the slowest peer to finish its part is no stall. */
static int w_gossip_drain(void *ctx, float *params, size_t n, long epoch)
{
    (void)n;
    struct worker *w = ctx;
    rt_comm_waiting(w->comm, true);
    int rc = drain_or_abort(w, params, epoch);
    rt_comm_waiting(w->comm, false);
    return rc;
}

static bool w_stop(void *ctx)
{
    struct worker *w = ctx;
    return worker_stop || rt_comm_stop_requested(w->comm);
}

static void w_progress(void *ctx, int epoch, int epochs, long done, long total, double loss,
                       double acc, double ips, double eta)
{
    struct worker *w = ctx;
    if (w->rank != 0)
        return; /* rank 0 speaks for the run */
    rt_wire_begin(&w->w, w->run, "progress", 8);
    rt_wire_put_uint(&w->w, "epoch", (uint64_t)epoch);
    rt_wire_put_uint(&w->w, "epochs", (uint64_t)epochs);
    rt_wire_put_uint(&w->w, "done", (uint64_t)done);
    rt_wire_put_uint(&w->w, "total", (uint64_t)total);
    rt_wire_put_f64(&w->w, "loss", loss);
    rt_wire_put_f64(&w->w, "acc", acc);
    rt_wire_put_f64(&w->w, "ips", ips);
    rt_wire_put_f64(&w->w, "eta", eta);
    if (rt_wire_end(&w->w) == RT_OK)
        send_report(w, RT_SEND_DROP, NULL, NULL, 0);
}

static int w_line(void *ctx, const char *text)
{
    struct worker *w = ctx;
    if (w->rank != 0)
        return RT_OK;
    rt_wire_begin(&w->w, w->run, "line", 1);
    rt_wire_put_str(&w->w, "text", text);
    RT_TRY(rt_wire_end(&w->w));
    return send_report(w, RT_SEND_KEEP, NULL, NULL, 0);
}

static int w_metrics(void *ctx, const struct rt_train_field *f, int n)
{
    struct worker *w = ctx;
    if (w->rank != 0)
        return RT_OK;
    rt_wire_begin(&w->w, w->run, "metrics", 1);
    rt_wire_put_map(&w->w, "fields", n);
    for (int i = 0; i < n; i++) {
        rt_wire_raw_str(&w->w, f[i].key);
        if (f[i].kind == 'i')
            rt_wire_raw_int(&w->w, f[i].integer);
        else
            rt_wire_raw_f64(&w->w, f[i].num);
    }
    RT_TRY(rt_wire_end(&w->w));
    return send_report(w, RT_SEND_KEEP, NULL, NULL, 0);
}

static int w_checkpoint(void *ctx, const char *which, const struct rt_ckpt_part *p)
{
    const struct rt_train_pos *pos = p->pos;
    const float *params = p->params, *state = p->state;
    const float *const *opt = p->opt;
    const char *const *opt_names = p->opt_names;
    size_t np = p->np, ns = p->ns, lo = p->lo, hi = p->hi;
    int nopt = p->nopt;
    struct worker *w = ctx;
    rt_wire_begin(&w->w, w->run, "ckpt", 12);
    rt_wire_put_str(&w->w, "which", which);
    rt_wire_put_uint(&w->w, "rank", (uint64_t)w->rank);
    rt_wire_put_uint(&w->w, "epoch", (uint64_t)pos->epoch);
    rt_wire_put_uint(&w->w, "step", (uint64_t)pos->step);
    rt_wire_put_f64(&w->w, "best_metric", pos->best_metric);
    rt_wire_put_uint(&w->w, "best_epoch", (uint64_t)pos->best_epoch);
    rt_wire_put_uint(&w->w, "bad_epochs", (uint64_t)pos->bad_epochs);
    rt_wire_put_uint(&w->w, "lo", lo);
    rt_wire_put_uint(&w->w, "hi", hi);
    rt_wire_put_uint(&w->w, "np", np);
    rt_wire_put_uint(&w->w, "ns", ns);
    rt_wire_put_array(&w->w, "opt", nopt);
    for (int i = 0; i < nopt; i++)
        rt_wire_raw_str(&w->w, opt_names[i]);
    RT_TRY(rt_wire_end(&w->w));
    const void *frames[4];
    size_t sizes[4];
    int k = 0;
    for (int i = 0; i < nopt; i++) {
        frames[k] = opt[i];
        sizes[k++] = (hi - lo) * sizeof(float);
    }
    if (np) {
        frames[k] = params;
        sizes[k++] = np * sizeof(float);
    }
    if (ns) {
        frames[k] = state;
        sizes[k++] = ns * sizeof(float);
    }
    return send_report(w, RT_SEND_KEEP, frames, sizes, k);
}

/* Wait until the coordinator acknowledged step `need`: it has read every
 * report sent before (a checkpoint, an epoch's metrics). Ends early when
 * the members change (the next collective answers RT_ERR_REGROUP: a
 * restarted coordinator re-adopts this worker that way) or a stop is
 * asked; fails when the run is aborted (no coordinator within
 * --coord-timeout). */
static int wait_acked(struct worker *w, long step, long need)
{
    double t0 = rt_now();
    bool noted = false;
    rt_comm_waiting(w->comm, true);
    while (rt_comm_acked(w->comm) < need) {
        const char *why = rt_comm_aborted(w->comm);
        if (why) {
            rt_comm_waiting(w->comm, false);
            return rt_error(RT_ERR_NET, "%s", why);
        }
        if (rt_comm_members_changing(w->comm) || worker_stop || rt_comm_stop_requested(w->comm))
            break;
        if (!noted && rt_now() - t0 > PACE_NOTE) {
            noted = true;
            say(w, "waiting at step %ld: the coordinator acknowledged step %ld (run-ahead "
                   "bound %d steps)", step, rt_comm_acked(w->comm), RUN_AHEAD);
        }
        usleep(5000);
    }
    rt_comm_waiting(w->comm, false);
    if (noted)
        say(w, "the coordinator acknowledged step %ld: going on after %.1f s",
            rt_comm_acked(w->comm), rt_now() - t0);
    w->paced += rt_now() - t0;
    return RT_OK;
}

static int w_pace(void *ctx, long steps_done)
{
    struct worker *w = ctx;
    rt_comm_mark(w->comm, steps_done);
    return wait_acked(w, steps_done, steps_done + 1 - RUN_AHEAD); /* the next step <= ack + bound */
}

static const struct rt_pairwise_ops worker_pairwise = {
    .begin = w_gossip_begin,
    .step = w_gossip_step,
    .drain = w_gossip_drain,
};

static void w_alive(void *ctx)
{
    struct worker *w = ctx;
    if (w->comm)
        rt_comm_alive(w->comm);
}

static const struct rt_reporter_ops worker_reporter = {
    .ready = w_ready,
    .alive = w_alive,
    .progress = w_progress,
    .line = w_line,
    .metrics = w_metrics,
    .stop_requested = w_stop,
    .checkpoint = w_checkpoint,
    .restore = w_restore,
    .pace = w_pace,
};

/* ---- the whole life ---------------------------------------------------------------------- */

/* This joiner found nobody holding the run's state: the coordinator
 * either stops the run ("abort") or starts it again from its checkpoint
 * and says so ("expelled": join again, coord_restart.c). */
static int await_verdict(struct worker *w)
{
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", rt_error_detail());
    for (double t0 = rt_now(); rt_now() - t0 < w->peer_timeout && !worker_stop;) {
        if (rt_comm_expelled(w->comm)) {
            say(w, "%s", rt_comm_aborted(w->comm));
            return rt_error(RT_ERR_EXPELLED, "%s", rt_comm_aborted(w->comm));
        }
        if (rt_comm_aborted(w->comm))
            break;
        usleep(20000);
    }
    return rt_error(RT_ERR_NO_STATE, "%s", keep);
}

static void report_end(struct worker *w, int status, const struct rt_train_result *r)
{
    char msg[600];
    snprintf(msg, sizeof msg, "%s", status < 0 ? rt_error_detail() : "");
    if (!msg[0] && status < 0)
        snprintf(msg, sizeof msg, "%s", rt_strerror(status));
    /* A reader's detail may quote the file (a CSV field): it stays here. */
    if (status < 0 && !w->served && rt_data_guard_mentions(w->c.data_spec, msg))
        snprintf(msg, sizeof msg, "cannot read its data %.200s: %s (the detail is in the "
                 "worker's log; no file content is sent)", w->c.data_spec, rt_strerror(status));
    rt_wire_begin(&w->w, w->run, "done", 20);
    rt_wire_put_uint(&w->w, "rank", (uint64_t)w->rank);
    rt_wire_put_int(&w->w, "status", status);
    rt_wire_put_str(&w->w, "message", msg);
    rt_wire_put_uint(&w->w, "hash", r->params_hash);
    rt_wire_put_uint(&w->w, "epochs_run", (uint64_t)(r->epochs_run > 0 ? r->epochs_run : 0));
    rt_wire_put_uint(&w->w, "steps", (uint64_t)(r->steps > 0 ? r->steps : 0));
    rt_wire_put_f64(&w->w, "train_loss", r->train_loss);
    rt_wire_put_f64(&w->w, "train_acc", r->train_acc);
    rt_wire_put_f64(&w->w, "val_loss", r->val_loss);
    rt_wire_put_f64(&w->w, "val_acc", r->val_acc);
    rt_wire_put_f64(&w->w, "test_loss", r->test_loss);
    rt_wire_put_f64(&w->w, "test_acc", r->test_acc);
    rt_wire_put_f64(&w->w, "images_per_s", r->images_per_s);
    rt_wire_put_bool(&w->w, "stopped_early", r->stopped_early);
    rt_wire_put_uint(&w->w, "best_epoch", (uint64_t)(r->best_epoch > 0 ? r->best_epoch : 0));
    rt_wire_put_uint(&w->w, "local_steps", (uint64_t)(r->local_steps > 0 ? r->local_steps : 0));
    rt_wire_put_f64(&w->w, "train_s", r->train_seconds >= 0 ? r->train_seconds : 0.0);
    rt_wire_put_uint(&w->w, "averagings",
                     (uint64_t)(r->gossip_averagings > 0 ? r->gossip_averagings : 0));
    rt_wire_put_uint(&w->w, "plans", (uint64_t)(r->plans > 0 ? r->plans : 0));
    rt_wire_put_uint(&w->w, "max_rss", rt_mem_peak());
    if (rt_wire_end(&w->w) == RT_OK)
        send_ctrl(w, NULL, NULL, 0);
}

/* A local worker of `train --workers N` must not outlive the process that
 * started it: the kernel kills it when that process dies (PR_SET_PDEATHSIG),
 * and a parent that died before the request is caught by getppid(). With
 * its coordinator gone nothing of the run is left to save. */
static int die_with_parent(long parent)
{
    if (parent <= 0)
        return RT_OK;
#ifdef __linux__
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        return rt_error(RT_ERR_IO, "cannot ask to die with process %ld: %s", parent,
                        strerror(errno));
#endif
    if ((long)getppid() != parent)
        return rt_error(RT_ERR_NET, "the process that started this worker (pid %ld) is gone",
                        parent);
    return RT_OK;
}

int rt_worker_run(const struct rt_worker_options *o)
{
    struct worker W;
    memset(&W, 0, sizeof W);
    struct worker *w = &W;
    w->o = o;
    w->rank = -1;
    rt_wire_writer_init(&w->w);
    rt_wire_msg_init(&w->msg);
    rt_zframes_init(&w->fr);
    snprintf(w->who, sizeof w->who, "worker");
    rt_wire_droplog_init(&w->drops, w->who);
    struct rt_train_result res;
    memset(&res, 0, sizeof res);
    int rc;
    bool joined = false;
    worker_stop = 0;

    if ((rc = die_with_parent(o->parent)) < 0 || (rc = describe(w)) < 0 ||
        (rc = open_sockets(w)) < 0)
        goto out;
    if ((rc = join(w)) < 0)
        goto out;
    joined = true;
    if ((rc = wait_backoff(w)) < 0 || (rc = stall_setup(w)) < 0 || (rc = get_data(w)) < 0 ||
        (rc = check_memory(w)) < 0)
        goto out;
    struct rt_train_net tn = {
        .coll = {.ops = &worker_collectives, .ctx = w, .rank = w->rank, .world = w->world},
        .pairwise = {.ops = &worker_pairwise, .ctx = w},
        .report = {.ops = &worker_reporter, .ctx = w, .want_checkpoints = w->want_ckpt,
                   .want_final = w->want_final},
        .model_text = w->model_text,
    };
    rc = rt_train_run_dist(&w->c, &tn, &res);
    if (rc == RT_OK && w->comm) {
        /* The result counts once the coordinator holds every report of the
         * run (a paused one is waited for): exit codes agree. */
        rt_comm_mark(w->comm, res.steps);
        rc = wait_acked(w, res.steps, res.steps);
    }
    if (rc == RT_OK)
        say(w, "done: %d epochs, %ld steps, parameters hash %016llx; %.2f s waiting for the "
               "coordinator's acknowledgements%s", res.epochs_run, res.steps,
            (unsigned long long)res.params_hash, w->paced, shards_line(&res));

out:
    if (rc < 0 && (w->finished || (w->comm && rt_comm_finished(w->comm)))) {
        say(w, "%s: done", rt_error_detail());
        rc = RT_OK;
        joined = false; /* nothing to report */
    }
    if (rc < 0 && w->comm && rt_comm_expelled(w->comm)) {
        say(w, "%s", rt_comm_aborted(w->comm));
        rc = rt_error(RT_ERR_EXPELLED, "%s", rt_comm_aborted(w->comm));
    }
    if (rc == RT_OK) /* testing aid (--stall-end): the end reported late */
        (void)stall(w, w->o->stall_end, "its end is reported late (--stall-end)");
    if (joined && (w->ctrl || w->comm) && rc != RT_ERR_EXPELLED)
        report_end(w, rc, &res);
    if (rc == RT_ERR_NO_STATE && joined && w->comm)
        rc = await_verdict(w);
    rt_gossip_destroy(&w->gossip);
    rt_hostreduce_destroy(&w->hs.hr); /* the model that used it is gone */
    rt_comm_destroy(&w->comm); /* lingers until the last report left */
    if (w->ctrl) {
        int linger = 3000;
        zmq_setsockopt(w->ctrl, ZMQ_LINGER, &linger, sizeof linger);
    }
    rt_wire_droplog_flush(&w->drops);
    rt_worker_sec_close(&w->sec); /* stops watching ctrl, ends the ZAP handler */
    rt_zsock_close(&w->ctrl);
    rt_zsock_close(&w->inbox);
    if (w->zctx)
        zmq_ctx_term(w->zctx);
    free(w->model_text);
    for (int i = 0; i < 7; i++)
        free(w->resume.buf[i]);
    rt_wire_writer_free(&w->w);
    rt_wire_msg_free(&w->msg);
    rt_zframes_close(&w->fr);
    return rc;
}
