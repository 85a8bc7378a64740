/* coord.c — the coordinator: `ragtag coord` and the heart of
 * `ragtag train --workers N`.
 *
 * One ROUTER socket, one thread, four phases:
 *   join    wait for N hellos (or --min-workers when --join-timeout ends),
 *           failing with the list of who joined and who did not;
 *   job     rank the workers (by name, so start order never matters), send
 *           each the member list (generation 1), model, options and data;
 *           serve data files; wait for every "ready"; log the cluster table;
 *   train   "start"; then take rank 0's progress, lines and metrics, every
 *           rank's part of each checkpoint, heartbeats; Ctrl-C sends "stop";
 *           a silent, dead or failing worker aborts the run for everybody;
 *   end     check that every replica reports the same parameter hash.
 * The coordinator never takes part in the ring: its work is small and
 * it may live on a machine that is not in the cluster at all. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "partition.h"
#include "checkpoint.h"
#include "datashare.h"
#include "membership.h"
#include "metrics.h"
#include "model.h"
#include "net.h"
#include "optim.h"
#include "clock.h"
#include "progress.h"
#include "ring.h"
#include "status.h"
#include "transport.h"
#include "wire.h"

#define MAX_MODEL_TEXT (512u << 10)

static volatile sig_atomic_t coord_stop;

void rt_coord_request_stop(void) { coord_stop = 1; }

void rt_coord_options_defaults(struct rt_coord_options *o)
{
    memset(o, 0, sizeof *o);
    o->workers = 1;
    o->join_timeout = 60.0;
    o->setup_timeout = 300.0;
    o->worker_timeout = 30.0;
    o->allow_shm = true;
    o->chunk_bytes = RT_RING_DEFAULT_CHUNK;
    snprintf(o->local_backend, sizeof o->local_backend, "cpu");
}

struct wk {
    struct rt_member m;
    unsigned char rid[256];
    size_t rid_len;
    char peer[64];
    int rank;
    bool ready, done;
    double last_seen, ips;
    int status;
    char message[600];
    uint64_t hash;
    struct rt_train_result res;
};

struct coord {
    const struct rt_coord_options *o;
    const struct rt_train_config *c;
    char run[RT_RUN_ID_LEN + 1];
    void *zctx, *router;
    char endpoint[RT_ENDPOINT_MAX];
    struct wk w[RT_MAX_WORKERS];
    int nw;
    int by_rank[RT_MAX_WORKERS];
    struct rt_membership ms;
    rt_wire_writer wr;
    rt_wire_msg msg;
    rt_zframes fr;
    rt_wire_droplog drops;
    char *model_text;
    size_t model_len;
    struct rt_data_manifest man;
    pid_t pid[RT_MAX_WORKERS];
    int exit_status[RT_MAX_WORKERS];
    double exit_time[RT_MAX_WORKERS];
    int npid;
    double last_hb;
    bool stop_sent;
    char summary[1024];
    /* reports and files */
    rt_progress prog;
    rt_metrics *mf;
    rt_dev *cpu;
    rt_model *cm;
    rt_optim *copt;
    size_t np, ns;
    char last_path[1100], best_path[1100];
    float *last_params, *last_state;
    long last_step;
    unsigned char *last_got;
    int last_count;
    bool last_have_params;
    long interrupted_step;
    /* --resume: the checkpoint's position, its best weights */
    bool resuming, have_best;
    struct rt_train_pos rpos;
    float *best_params, *best_state;
};

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ragtag: [coord] ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- sending ------------------------------------------------------------------------ */

static int send_to(struct coord *k, struct wk *w, const void *const *frames, const size_t *sizes,
                   int n)
{
    if (zmq_send(k->router, w->rid, w->rid_len, ZMQ_SNDMORE) < 0 ||
        rt_zsend_msg(k->router, &k->wr, frames, sizes, n) < 0)
        return rt_error(RT_ERR_NET, "cannot reach worker %s: %s", w->m.name,
                        zmq_strerror(errno));
    return RT_OK;
}

/* Best effort (heartbeats, stop, abort): a worker that already left is no
 * error, and the error detail of the caller is kept. */
static void send_simple(struct coord *k, struct wk *w, const char *type, const char *reason)
{
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", rt_error_detail());
    rt_wire_begin(&k->wr, k->run, type, reason ? 1 : 0);
    if (reason)
        rt_wire_put_str(&k->wr, "reason", reason);
    if (rt_wire_end(&k->wr) == RT_OK && send_to(k, w, NULL, NULL, 0) < 0)
        rt_error(RT_ERR_NET, "%s", keep);
}

static void send_all(struct coord *k, const char *type, const char *reason)
{
    for (int i = 0; i < k->nw; i++)
        send_simple(k, &k->w[i], type, reason);
}

static void heartbeat(struct coord *k)
{
    double now = rt_now();
    if (now - k->last_hb < 1.0)
        return;
    k->last_hb = now;
    send_all(k, "hb", NULL);
}

/* ---- receiving ------------------------------------------------------------------------ */

static struct wk *find_rid(struct coord *k, const void *rid, size_t n)
{
    for (int i = 0; i < k->nw; i++)
        if (k->w[i].rid_len == n && !memcmp(k->w[i].rid, rid, n))
            return &k->w[i];
    return NULL;
}

/* One message: 1 with k->msg parsed and *from its sender (NULL for a
 * stranger, who may only say hello), 0 when nothing came in timeout_ms.
 * Bad messages are logged and dropped here. */
static int next_msg(struct coord *k, int timeout_ms, struct wk **from)
{
    zmq_pollitem_t it = {.socket = k->router, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, timeout_ms) <= 0 || !(it.revents & ZMQ_POLLIN))
        return 0;
    int rc = rt_zframes_recv(k->router, &k->fr, ZMQ_DONTWAIT);
    if (rc <= 0)
        return 0;
    char peer[64];
    rt_zframes_peer(&k->fr, 1, peer, sizeof peer);
    if (k->fr.n < 2 || k->fr.truncated) {
        rt_wire_drop(&k->drops, peer, "a message of the wrong number of frames");
        return 0;
    }
    size_t rn = rt_zframe_size(&k->fr, 0);
    struct wk *w = find_rid(k, rt_zframe_data(&k->fr, 0), rn);
    /* A hello may come without the run id (the worker does not know it yet);
     * everything else must carry ours. */
    if (rt_wire_parse(&k->msg, rt_zframe_data(&k->fr, 1), rt_zframe_size(&k->fr, 1), k->run,
                      true) < 0) {
        rt_wire_drop(&k->drops, peer, rt_error_detail());
        return 0;
    }
    if (!k->msg.run[0] && strcmp(k->msg.type, "hello") != 0) {
        rt_wire_drop(&k->drops, peer, "a message without a run id");
        return 0;
    }
    if (!w && strcmp(k->msg.type, "hello") != 0) {
        char why[96];
        snprintf(why, sizeof why, "a '%s' message from a worker that never said hello",
                 k->msg.type);
        rt_wire_drop(&k->drops, peer, why);
        return 0;
    }
    if (w)
        w->last_seen = rt_now();
    *from = w;
    return 1;
}

static void drop_unexpected(struct coord *k, struct wk *w)
{
    char why[96];
    snprintf(why, sizeof why, "an unexpected '%s' message", k->msg.type);
    rt_wire_drop(&k->drops, w ? w->m.name : "a stranger", why);
}

/* ---- local workers (train --workers N) -------------------------------------------------- */

/* Item i of a comma list, cycling ("cpu,opencl": cpu, opencl, cpu, ...). */
static void list_item(const char *list, int i, char *out, size_t cap)
{
    int n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    i %= n;
    const char *p = list;
    while (i-- > 0)
        p = strchr(p, ',') + 1;
    snprintf(out, cap, "%.*s", (int)strcspn(p, ","), p);
}

static int spawn_local(struct coord *k)
{
    const struct rt_coord_options *o = k->o;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = o->local_threads > 0 ? o->local_threads
                                       : (int)((cores > 0 ? cores : 1) / o->workers);
    if (threads < 1)
        threads = 1;
    char th[16], dv[16];
    snprintf(th, sizeof th, "%d", threads);
    snprintf(dv, sizeof dv, "%d", o->local_device);
    fflush(NULL);
    for (int i = 0; i < o->workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "local-%d", i);
        pid_t p = fork();
        if (p < 0)
            return rt_error(RT_ERR_IO, "cannot start worker %d: %s", i, strerror(errno));
        char be[32], tr[32];
        list_item(o->local_backend, i, be, sizeof be);
        list_item(o->local_throttle, i, tr, sizeof tr);
        if (p == 0) {
            char *argv[] = {"ragtag", "worker", "--join", k->endpoint, "--name", name,
                            "--threads", th, "--backend", be, "--device", dv, "--quiet",
                            "--connect-timeout", "60", tr[0] ? "--throttle" : NULL, tr, NULL};
            execv("/proc/self/exe", argv);
            fprintf(stderr, "ragtag: cannot start a local worker: %s\n", strerror(errno));
            _exit(127);
        }
        k->pid[k->npid++] = p;
    }
    return RT_OK;
}

/* A local worker that exited without saying "done" ends the run. Its
 * last messages may still wait in the socket when its exit is seen, so
 * the verdict waits a moment. */
static int reap_children(struct coord *k)
{
    double now = rt_now();
    for (int i = 0; i < k->npid; i++) {
        if (k->pid[i] > 0) {
            int st;
            if (waitpid(k->pid[i], &st, WNOHANG) != k->pid[i])
                continue;
            k->pid[i] = 0;
            k->exit_status[i] = st;
            k->exit_time[i] = now;
        }
        if (k->pid[i] != 0 || k->exit_time[i] == 0.0 || now - k->exit_time[i] < 2.0)
            continue;
        int st = k->exit_status[i];
        char name[32];
        snprintf(name, sizeof name, "local-%d", i);
        bool done = false;
        for (int j = 0; j < k->nw; j++)
            done |= !strcmp(k->w[j].m.name, name) && k->w[j].done;
        if (!done)
            return rt_error(RT_ERR_NET, "local worker %d %s %d", i,
                            WIFEXITED(st) ? "exited with status" : "was killed by signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    return RT_OK;
}

static void wait_children(struct coord *k, double limit)
{
    double t0 = rt_now();
    for (;;) {
        bool left = false;
        for (int i = 0; i < k->npid; i++) {
            if (k->pid[i] <= 0)
                continue;
            int st;
            if (waitpid(k->pid[i], &st, WNOHANG) == k->pid[i])
                k->pid[i] = 0;
            else
                left = true;
        }
        if (!left)
            return;
        if (rt_now() - t0 > limit) {
            for (int i = 0; i < k->npid; i++)
                if (k->pid[i] > 0) {
                    kill(k->pid[i], SIGKILL);
                    waitpid(k->pid[i], NULL, 0);
                    k->pid[i] = 0;
                }
            return;
        }
        usleep(20000);
    }
}

/* ---- join ------------------------------------------------------------------------------ */

static void handle_hello(struct coord *k, struct wk *w, bool open)
{
    struct rt_member m;
    rt_wire_map mm;
    char peer[64];
    rt_zframes_peer(&k->fr, 1, peer, sizeof peer);
    if (rt_wire_get_map(rt_wire_root(&k->msg), "member", &mm) < 0 || rt_member_get(mm, &m) < 0) {
        rt_wire_drop(&k->drops, peer, rt_error_detail());
        return;
    }
    size_t rn = rt_zframe_size(&k->fr, 0);
    if (rn > sizeof w->rid) {
        rt_wire_drop(&k->drops, peer, "a routing id longer than 256 bytes");
        return;
    }
    for (int i = 0; i < k->nw; i++) {
        if (!strcmp(k->w[i].m.id, m.id)) { /* said hello again, maybe reconnected */
            memcpy(k->w[i].rid, rt_zframe_data(&k->fr, 0), rn);
            k->w[i].rid_len = rn;
            return;
        }
    }
    struct wk tmp = {0};
    memcpy(tmp.rid, rt_zframe_data(&k->fr, 0), rn);
    tmp.rid_len = rn;
    snprintf(tmp.m.name, sizeof tmp.m.name, "%s", m.name);
    if (!open || k->nw >= k->o->workers) {
        struct wk *t = &tmp;
        snprintf(t->peer, sizeof t->peer, "%s", peer);
        char why[128];
        snprintf(why, sizeof why, "run %.8s already has its %d workers", k->run, k->nw);
        rt_wire_begin(&k->wr, "", "reject", 1);
        rt_wire_put_str(&k->wr, "reason", why);
        if (rt_wire_end(&k->wr) == RT_OK)
            send_to(k, t, NULL, NULL, 0);
        note("turned away worker %s from %s: %s", m.name, peer[0] ? peer : m.host, why);
        return;
    }
    for (int i = 0; i < k->nw; i++) {
        if (!strcmp(k->w[i].m.name, m.name)) {
            char why[128];
            snprintf(why, sizeof why, "a worker named %s already joined (give --name)", m.name);
            rt_wire_begin(&k->wr, "", "reject", 1);
            rt_wire_put_str(&k->wr, "reason", why);
            if (rt_wire_end(&k->wr) == RT_OK)
                send_to(k, &tmp, NULL, NULL, 0);
            note("turned away a worker from %s: %s", peer[0] ? peer : m.host, why);
            return;
        }
    }
    struct wk *n = &k->w[k->nw++];
    *n = tmp;
    n->m = m;
    snprintf(n->peer, sizeof n->peer, "%s", peer);
    n->last_seen = rt_now();
    n->rank = -1;
    note("worker %s joined from %s (%s, %s) [%d/%d]", m.name, peer[0] ? peer : m.host, m.host,
         m.endpoint, k->nw, k->o->workers);
    (void)w;
}

static int cmp_workers(const void *a, const void *b)
{
    const struct wk *x = *(const struct wk *const *)a, *y = *(const struct wk *const *)b;
    int c = strcmp(x->m.name, y->m.name);
    return c ? c : strcmp(x->m.id, y->m.id);
}

static int join_phase(struct coord *k)
{
    const struct rt_coord_options *o = k->o;
    double t0 = rt_now();
    note("run %s: waiting up to %.0f s for %d worker%s on %s", k->run, o->join_timeout,
         o->workers, o->workers == 1 ? "" : "s", k->endpoint);
    while (k->nw < o->workers) {
        if (coord_stop)
            return rt_error(RT_ERR_INTERRUPTED, "interrupted while waiting for workers");
        RT_TRY(reap_children(k));
        if (rt_now() - t0 > o->join_timeout) {
            if (o->min_workers > 0 && k->nw >= o->min_workers) {
                note("--join-timeout %.0f s: starting with the %d of %d workers that joined "
                     "(--min-workers %d)", o->join_timeout, k->nw, o->workers, o->min_workers);
                break;
            }
            char list[2048] = "";
            size_t used = 0;
            struct wk *sorted[RT_MAX_WORKERS];
            for (int i = 0; i < k->nw; i++)
                sorted[i] = &k->w[i];
            qsort(sorted, (size_t)k->nw, sizeof sorted[0], cmp_workers);
            for (int i = 0; i < k->nw; i++) {
                const struct wk *w = sorted[i];
                int n = snprintf(list + used, sizeof list - used, "%s%s (%s)", i ? ", " : "",
                                 w->m.name, w->peer[0] ? w->peer : w->m.host);
                if (n > 0 && (size_t)n < sizeof list - used)
                    used += (size_t)n;
            }
            char missing[1024] = "";
            if (o->spawn_local) {
                size_t mu = 0;
                for (int i = 0; i < o->workers; i++) {
                    char name[32];
                    snprintf(name, sizeof name, "local-%d", i);
                    bool in = false;
                    for (int j = 0; j < k->nw; j++)
                        in |= !strcmp(k->w[j].m.name, name);
                    if (in)
                        continue;
                    int n = snprintf(missing + mu, sizeof missing - mu, "%s%s", mu ? ", " : "",
                                     name);
                    if (n > 0 && (size_t)n < sizeof missing - mu)
                        mu += (size_t)n;
                }
            } else {
                snprintf(missing, sizeof missing, "%d more", o->workers - k->nw);
            }
            return rt_error(RT_ERR_TIMEOUT,
                            "only %d of %d workers joined within --join-timeout %.0f s; "
                            "joined: %s; missing: %s",
                            k->nw, o->workers, o->join_timeout, k->nw ? list : "none", missing);
        }
        struct wk *w = NULL;
        if (next_msg(k, 100, &w) <= 0)
            continue;
        if (!strcmp(k->msg.type, "hello"))
            handle_hello(k, w, true);
        else if (strcmp(k->msg.type, "hb") != 0)
            drop_unexpected(k, w);
    }
    return RT_OK;
}

/* ---- job ------------------------------------------------------------------------------- */

static void assign_ranks(struct coord *k)
{
    struct wk *order[RT_MAX_WORKERS];
    for (int i = 0; i < k->nw; i++)
        order[i] = &k->w[i];
    qsort(order, (size_t)k->nw, sizeof order[0], cmp_workers);
    k->ms.gen = 1;
    k->ms.n = k->nw;
    for (int r = 0; r < k->nw; r++) {
        order[r]->rank = r;
        k->by_rank[r] = (int)(order[r] - k->w);
        k->ms.m[r] = order[r]->m;
    }
}

struct opt_list {
    char k[RT_TRAIN_OPTIONS_MAX][32];
    char v[RT_TRAIN_OPTIONS_MAX][1100];
    int n;
    bool skip_data;
};

static int collect_option(void *arg, const char *key, const char *value)
{
    struct opt_list *l = arg;
    if (l->skip_data && !strcmp(key, "data"))
        return RT_OK;
    RT_ASSERT(l->n < RT_TRAIN_OPTIONS_MAX);
    snprintf(l->k[l->n], sizeof l->k[0], "%s", key);
    snprintf(l->v[l->n], sizeof l->v[0], "%s", value);
    l->n++;
    return RT_OK;
}

static int send_jobs(struct coord *k)
{
    static struct opt_list opts;
    memset(&opts, 0, sizeof opts);
    opts.skip_data = k->o->serve_data;
    RT_TRY(rt_train_config_each(k->c, collect_option, &opts));
    bool ckpt = k->c->checkpoint_dir[0] != '\0';
    for (int r = 0; r < k->nw; r++) {
        struct wk *w = &k->w[k->by_rank[r]];
        rt_wire_begin(&k->wr, k->run, "job", 12 + (k->o->serve_data ? 1 : 0));
        rt_wire_put_uint(&k->wr, "rank", (uint64_t)r);
        rt_membership_put(&k->wr, &k->ms);
        rt_wire_put_str(&k->wr, "model_name", k->c->model_path);
        rt_wire_put_bin(&k->wr, "model", k->model_text, k->model_len);
        rt_wire_put_bool(&k->wr, "checkpoints", ckpt);
        rt_wire_put_bool(&k->wr, "final", k->c->save_path[0] != '\0');
        rt_wire_put_bool(&k->wr, "shm", k->o->allow_shm);
        rt_wire_put_uint(&k->wr, "chunk", k->o->chunk_bytes);
        rt_wire_put_f64(&k->wr, "hb", 1.0);
        rt_wire_put_f64(&k->wr, "timeout", k->o->worker_timeout);
        rt_wire_put_array(&k->wr, "options", opts.n);
        for (int i = 0; i < opts.n; i++) {
            rt_wire_raw_array(&k->wr, 2);
            rt_wire_raw_str(&k->wr, opts.k[i]);
            rt_wire_raw_str(&k->wr, opts.v[i]);
        }
        if (k->o->serve_data)
            rt_manifest_put(&k->wr, &k->man);
        RT_TRY(rt_wire_end(&k->wr));
        RT_TRY(send_to(k, w, NULL, NULL, 0));
    }
    return RT_OK;
}

/* Stream file i to a worker in RT_DATA_CHUNK pieces; libzmq queues them. */
static int serve_file(struct coord *k, struct wk *w)
{
    uint64_t i;
    if (!k->o->serve_data ||
        rt_wire_get_uint(rt_wire_root(&k->msg), "file", 0, (uint64_t)k->man.files.n - 1, &i) < 0) {
        rt_wire_drop(&k->drops, w->m.name, "a request for a data file that is not served");
        return RT_OK;
    }
    FILE *f = fopen(k->man.files.path[i], "rb");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot read %s: %s", k->man.files.path[i], strerror(errno));
    static char buf[RT_DATA_CHUNK];
    uint64_t off = 0;
    int rc = RT_OK;
    while (off < k->man.size[i]) {
        size_t n = fread(buf, 1, sizeof buf, f);
        if (n == 0) {
            rc = rt_error(RT_ERR_IO, "%s changed while being served", k->man.files.path[i]);
            break;
        }
        rt_wire_begin(&k->wr, k->run, "file", 2);
        rt_wire_put_uint(&k->wr, "file", i);
        rt_wire_put_uint(&k->wr, "off", off);
        if ((rc = rt_wire_end(&k->wr)) < 0)
            break;
        const void *fr[1] = {buf};
        size_t sz[1] = {n};
        if ((rc = send_to(k, w, fr, sz, 1)) < 0)
            break;
        off += n;
    }
    fclose(f);
    if (rc == RT_OK)
        note("sent %s (%.1f MB) to %s", k->man.files.name[i], (double)k->man.size[i] / 1e6,
             w->m.name);
    return rc;
}

/* Text from a worker goes to a terminal: no control characters. */
static void sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

/* A worker's "done" with an error, or "error": the run cannot go on. */
static int worker_failed(struct coord *k, struct wk *w)
{
    char msg[600] = "";
    rt_wire_get_str(rt_wire_root(&k->msg), "message", 0, msg, sizeof msg);
    sanitize(msg);
    return rt_error(RT_ERR_NET, "worker %s (rank %d, %s) failed: %s", w->m.name, w->rank,
                    w->m.host, msg[0] ? msg : "(no message)");
}


static void print_table(struct coord *k)
{
    /* balanced sync/average: the workers plan their first shares from the
     * speeds they reported at join, the same way (partition.h) */
    double speed[RT_MAX_WORKERS];
    long sh[RT_MAX_WORKERS], *share = NULL;
    bool act[RT_MAX_WORKERS];
    bool plan = k->c->partition == RT_PARTITION_BALANCED && k->c->mode != RT_MODE_GOSSIP;
    for (int r = 0; plan && r < k->nw; r++) {
        speed[r] = k->w[k->by_rank[r]].ips;
        act[r] = true;
    }
    if (plan) {
        rt_plan_standby(k->nw, speed, k->c->min_share, act);
        rt_plan_shares(k->c->batch, k->nw, speed, act, sh);
        share = sh;
    }
    note("cluster of %d worker%s, run %.8s, generation %llu:", k->nw, k->nw == 1 ? "" : "s",
         k->run, (unsigned long long)k->ms.gen);
    fprintf(stderr, "  %4s  %-14s %-14s %-8s %-30s %7s %9s %6s  %s\n", "rank", "name", "host",
            "backend", "device", "threads", "img/s", "share", "ring");
    for (int r = 0; r < k->nw; r++) {
        struct wk *w = &k->w[k->by_rank[r]];
        long lo, hi;
        rt_train_share(k->c->batch, k->nw, r, &lo, &hi);
        if (share) /* what the workers' first plan will say */
            lo = 0, hi = share[r];
        char ring[64];
        if (k->nw == 1)
            snprintf(ring, sizeof ring, "-");
        else
            snprintf(ring, sizeof ring, "%s -> %d",
                     rt_membership_link_kind(&k->ms, r, k->o->allow_shm), (r + 1) % k->nw);
        fprintf(stderr, "  %4d  %-14.14s %-14.14s %-8s %-30.30s %7d %9.0f %6ld  %s\n", r,
                w->m.name, w->m.host, w->m.backend, w->m.device, w->m.threads, w->ips, hi - lo,
                ring);
    }
}

/* "start" of a resumed run: position, weights, this rank's optimiser
 * slice, and the best weights when early stopping needs them. */
static int send_resume(struct coord *k, struct wk *w)
{
    long lo, hi;
    rt_train_share((long)k->np, k->nw, w->rank, &lo, &hi);
    int nopt = rt_optim_state_count(k->copt);
    const struct rt_train_pos *p = &k->rpos;
    rt_wire_begin(&k->wr, k->run, "start", 12);
    rt_wire_put_bool(&k->wr, "resume", true);
    rt_wire_put_uint(&k->wr, "epoch", (uint64_t)p->epoch);
    rt_wire_put_uint(&k->wr, "step", (uint64_t)p->step);
    rt_wire_put_f64(&k->wr, "best_metric", p->best_metric);
    rt_wire_put_uint(&k->wr, "best_epoch", (uint64_t)p->best_epoch);
    rt_wire_put_uint(&k->wr, "bad_epochs", (uint64_t)p->bad_epochs);
    rt_wire_put_uint(&k->wr, "np", k->np);
    rt_wire_put_uint(&k->wr, "ns", k->ns);
    rt_wire_put_uint(&k->wr, "lo", (uint64_t)lo);
    rt_wire_put_uint(&k->wr, "hi", (uint64_t)hi);
    rt_wire_put_uint(&k->wr, "nopt", (uint64_t)nopt);
    rt_wire_put_bool(&k->wr, "best", k->have_best);
    RT_TRY(rt_wire_end(&k->wr));
    const void *fr[7];
    size_t sz[7];
    int n = 0;
    fr[n] = rt_view_host(rt_model_params(k->cm));
    sz[n++] = k->np * sizeof(float);
    if (k->ns) {
        fr[n] = rt_view_host(rt_model_state(k->cm));
        sz[n++] = k->ns * sizeof(float);
    }
    for (int i = 0; i < nopt; i++) {
        fr[n] = (const float *)rt_view_host(rt_optim_state(k->copt, i)) + lo;
        sz[n++] = (size_t)(hi - lo) * sizeof(float);
    }
    if (k->have_best) {
        fr[n] = k->best_params;
        sz[n++] = k->np * sizeof(float);
        if (k->ns) {
            fr[n] = k->best_state;
            sz[n++] = k->ns * sizeof(float);
        }
    }
    return send_to(k, w, fr, sz, n);
}

/* --resume: read DIR/best (for early stopping) and DIR/last, like one
 * process would; the workers get them with "start". */
static int load_resume(struct coord *k)
{
    const struct rt_train_config *c = k->c;
    struct stat st;
    if (stat(k->last_path, &st) != 0) {
        note("no checkpoint at %s yet: starting from scratch", k->last_path);
        return RT_OK;
    }
    if (c->patience > 0 && stat(k->best_path, &st) == 0) {
        RT_TRY(rt_checkpoint_load(k->best_path, k->cm, NULL, NULL));
        k->best_params = malloc(k->np * sizeof(float));
        k->best_state = malloc((k->ns ? k->ns : 1) * sizeof(float));
        if (!k->best_params || !k->best_state)
            return rt_error(RT_ERR_NOMEM, "no memory for the best weights");
        memcpy(k->best_params, rt_view_host(rt_model_params(k->cm)), k->np * sizeof(float));
        if (k->ns)
            memcpy(k->best_state, rt_view_host(rt_model_state(k->cm)), k->ns * sizeof(float));
        k->have_best = true;
    }
    RT_TRY(rt_checkpoint_load(k->last_path, k->cm, k->copt, &k->rpos));
    if (k->rpos.seed != c->seed)
        return rt_error(RT_ERR_CONFIG, "%s was trained with --seed %llu, not %llu: resume with "
                                       "the same seed (the data order and split depend on it)",
                        k->last_path, (unsigned long long)k->rpos.seed,
                        (unsigned long long)c->seed);
    k->resuming = true;
    k->last_step = k->rpos.step;
    note("resuming from %s at epoch %ld, step %ld", k->last_path, k->rpos.epoch, k->rpos.step);
    return RT_OK;
}

static int setup_phase(struct coord *k)
{
    double t0 = rt_now();
    int ready = 0;
    while (ready < k->nw) {
        if (coord_stop)
            return rt_error(RT_ERR_INTERRUPTED, "interrupted while the workers set up");
        RT_TRY(reap_children(k));
        heartbeat(k);
        if (rt_now() - t0 > k->o->setup_timeout) {
            char list[1024] = "";
            size_t used = 0;
            for (int i = 0; i < k->nw; i++)
                if (!k->w[i].ready) {
                    int n = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                                     k->w[i].m.name);
                    if (n > 0 && (size_t)n < sizeof list - used)
                        used += (size_t)n;
                }
            return rt_error(RT_ERR_TIMEOUT, "workers not ready after %.0f s: %s",
                            k->o->setup_timeout, list);
        }
        struct wk *w = NULL;
        if (next_msg(k, 100, &w) <= 0)
            continue;
        const char *t = k->msg.type;
        if (!strcmp(t, "hello")) {
            handle_hello(k, w, false);
        } else if (!w) {
            drop_unexpected(k, w);
        } else if (!strcmp(t, "fetch")) {
            RT_TRY(serve_file(k, w));
        } else if (!strcmp(t, "ready")) {
            uint64_t rank;
            double ips;
            rt_wire_map r = rt_wire_root(&k->msg);
            if (rt_wire_get_uint(r, "rank", 0, RT_MAX_WORKERS, &rank) < 0 ||
                rt_wire_get_f64(r, "ips", 0, 1e12, &ips) < 0 || (int)rank != w->rank) {
                rt_wire_drop(&k->drops, w->m.name, "a bad 'ready'");
                continue;
            }
            if (!w->ready)
                ready++;
            w->ready = true;
            w->ips = ips;
            k->ms.m[w->rank].images_per_s = ips;
            if (w->rank == 0 && rt_wire_get_str(r, "summary", 0, k->summary, sizeof k->summary) == 0)
                sanitize(k->summary);
        } else if (!strcmp(t, "done") || !strcmp(t, "error")) {
            return worker_failed(k, w);
        } else if (strcmp(t, "hb") != 0) {
            drop_unexpected(k, w);
        }
    }
    if (k->summary[0])
        note("%s", k->summary);
    print_table(k);
    if (!k->resuming) {
        send_all(k, "start", NULL);
        return RT_OK;
    }
    for (int r = 0; r < k->nw; r++)
        RT_TRY(send_resume(k, &k->w[k->by_rank[r]]));
    return RT_OK;
}

/* ---- train: reports and checkpoints ------------------------------------------------------ */

static void handle_progress(struct coord *k, struct wk *w)
{
    uint64_t epoch, epochs, done, total;
    double loss, acc, ips, eta;
    rt_wire_map m = rt_wire_root(&k->msg);
    if (w->rank != 0 || rt_wire_get_uint(m, "epochs", 1, 1000000, &epochs) < 0 ||
        rt_wire_get_uint(m, "epoch", 1, epochs, &epoch) < 0 ||
        rt_wire_get_uint(m, "total", 1, UINT32_MAX, &total) < 0 ||
        rt_wire_get_uint(m, "done", 0, total, &done) < 0 ||
        rt_wire_get_f64_or_nan(m, "loss", 0, 1e30, &loss) < 0 ||
        rt_wire_get_f64_or_nan(m, "acc", 0, 1, &acc) < 0 ||
        rt_wire_get_f64(m, "ips", 0, 1e12, &ips) < 0 ||
        rt_wire_get_f64(m, "eta", 0, 1e12, &eta) < 0) {
        rt_wire_drop(&k->drops, w->m.name, "a bad 'progress'");
        return;
    }
    rt_progress_step(&k->prog, (int)epoch, (int)epochs, (long)done, (long)total, loss, acc, ips,
                     eta);
}

static bool printable_text(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

static void handle_line(struct coord *k, struct wk *w)
{
    char text[1024];
    if (w->rank != 0 || rt_wire_get_str(rt_wire_root(&k->msg), "text", 1, text, sizeof text) < 0 ||
        !printable_text(text)) {
        rt_wire_drop(&k->drops, w->m.name, "a bad 'line'");
        return;
    }
    /* The plan's lines (shares, standby) are log lines, shown even with
     * --progress off; epoch lines follow the progress mode. */
    if (k->prog.quiet && !strncmp(text, "ragtag: [plan]", 14))
        fprintf(stderr, "%s\n", text);
    else
        rt_progress_epoch(&k->prog, text);
}

static const char *const metric_keys[] = {
    "epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc",
    "lr", "images_per_s", "seconds", "loss", "acc", "grad_norm", "samples",
    "consensus_distance", "consensus_relative", NULL,
};

static int handle_metrics(struct coord *k, struct wk *w)
{
    rt_wire_map f;
    if (w->rank != 0 || rt_wire_get_map(rt_wire_root(&k->msg), "fields", &f) < 0 ||
        f->via.map.size > 16) {
        rt_wire_drop(&k->drops, w->m.name, "a bad 'metrics'");
        return RT_OK;
    }
    /* Check every field before writing any. */
    for (uint32_t i = 0; i < f->via.map.size; i++) {
        const msgpack_object *kk = &f->via.map.ptr[i].key, *v = &f->via.map.ptr[i].val;
        bool known = false;
        for (int j = 0; metric_keys[j]; j++)
            known |= kk->via.str.size == strlen(metric_keys[j]) &&
                     !memcmp(kk->via.str.ptr, metric_keys[j], kk->via.str.size);
        if (!known || (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
                       v->type != MSGPACK_OBJECT_NEGATIVE_INTEGER &&
                       v->type != MSGPACK_OBJECT_FLOAT64 && v->type != MSGPACK_OBJECT_FLOAT32)) {
            rt_wire_drop(&k->drops, w->m.name, "a 'metrics' field that is not a known number");
            return RT_OK;
        }
    }
    if (!k->mf)
        return RT_OK;
    rt_metrics_begin(k->mf);
    for (uint32_t i = 0; i < f->via.map.size; i++) {
        const msgpack_object *kk = &f->via.map.ptr[i].key, *v = &f->via.map.ptr[i].val;
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)kk->via.str.size, kk->via.str.ptr);
        if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            rt_metrics_int(k->mf, key, (long)v->via.u64);
        else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            rt_metrics_int(k->mf, key, (long)v->via.i64);
        else
            rt_metrics_num(k->mf, key, v->via.f64);
    }
    return rt_metrics_end(k->mf);
}

static int upload_model(struct coord *k, const float *params, const float *state)
{
    RT_TRY(rt_upload(k->cpu, rt_model_params(k->cm), params, k->np * sizeof(float)));
    if (k->ns)
        RT_TRY(rt_upload(k->cpu, rt_model_state(k->cm), state, k->ns * sizeof(float)));
    return RT_OK;
}

/* Every rank's optimiser slice and rank 0's weights make one checkpoint. */
static int handle_ckpt(struct coord *k, struct wk *w)
{
    rt_wire_map m = rt_wire_root(&k->msg);
    char which[8];
    uint64_t epoch, step, best_epoch, bad, lo, hi, np, ns;
    double best;
    const msgpack_object *names;
    size_t nopt;
    if (rt_wire_get_str(m, "which", 1, which, sizeof which) < 0 ||
        rt_wire_get_uint(m, "epoch", 0, 1000000, &epoch) < 0 ||
        rt_wire_get_uint(m, "step", 0, (uint64_t)1 << 50, &step) < 0 ||
        rt_wire_get_f64_or_nan(m, "best_metric", -1e30, 1e30, &best) < 0 ||
        rt_wire_get_uint(m, "best_epoch", 0, 1000000, &best_epoch) < 0 ||
        rt_wire_get_uint(m, "bad_epochs", 0, 1000000, &bad) < 0 ||
        rt_wire_get_uint(m, "lo", 0, k->np, &lo) < 0 ||
        rt_wire_get_uint(m, "hi", lo, k->np, &hi) < 0 ||
        rt_wire_get_uint(m, "np", 0, k->np, &np) < 0 ||
        rt_wire_get_uint(m, "ns", 0, k->ns, &ns) < 0 ||
        rt_wire_get_array(m, "opt", 2, &names, &nopt) < 0) {
        rt_wire_drop(&k->drops, w->m.name, rt_error_detail());
        return RT_OK;
    }
    long elo, ehi;
    rt_train_share((long)k->np, k->nw, w->rank, &elo, &ehi);
    bool last = !strcmp(which, "last");
    bool want_params = w->rank == 0;
    int expect_opt = last ? rt_optim_state_count(k->copt) : 0;
    const char *bad_why = NULL;
    if (!last && strcmp(which, "best") && strcmp(which, "final"))
        bad_why = "an unknown checkpoint kind";
    else if (!last && w->rank != 0)
        bad_why = "best/final weights from a rank other than 0";
    else if ((long)lo != elo || (long)hi != ehi)
        bad_why = "an optimiser slice that is not this rank's";
    else if ((np != 0) != want_params || (np && np != k->np) || (want_params && ns != k->ns) ||
             (!want_params && ns))
        bad_why = "weights from the wrong rank or of the wrong size";
    else if ((int)nopt != expect_opt)
        bad_why = "the wrong number of optimiser buffers";
    else if (k->fr.n != 2 + (int)nopt + (np ? 1 : 0) + (ns ? 1 : 0))
        bad_why = "the wrong number of frames";
    for (size_t i = 0; !bad_why && i < nopt; i++) {
        char nm[32];
        if (rt_wire_item_str(names, i, "opt", nm, sizeof nm) < 0 ||
            strcmp(nm, rt_optim_state_name(k->copt, (int)i)) != 0 ||
            rt_zframe_size(&k->fr, 2 + (int)i) != (hi - lo) * sizeof(float))
            bad_why = "optimiser state of another kind or size";
    }
    int f = 2 + (int)nopt;
    if (!bad_why && np && rt_zframe_size(&k->fr, f) != np * sizeof(float))
        bad_why = "a parameter frame of the wrong size";
    if (!bad_why && ns && rt_zframe_size(&k->fr, f + (np ? 1 : 0)) != ns * sizeof(float))
        bad_why = "a state frame of the wrong size";
    if (bad_why) {
        rt_wire_drop(&k->drops, w->m.name, bad_why);
        return RT_OK;
    }
    const float *params = np ? rt_zframe_data(&k->fr, f) : NULL;
    const float *state = ns ? rt_zframe_data(&k->fr, f + 1) : NULL;
    struct rt_train_pos pos = {.epoch = (long)epoch, .step = (long)step, .seed = k->c->seed,
                               .best_metric = best, .best_epoch = (long)best_epoch,
                               .bad_epochs = (long)bad};
    if (!last) {
        const char *path = !strcmp(which, "best") ? k->best_path : k->c->save_path;
        if (!path[0])
            return RT_OK;
        RT_TRY(upload_model(k, params, state));
        return rt_checkpoint_save(path, k->cm, NULL, &pos);
    }
    if (!k->last_path[0])
        return RT_OK;
    if ((long)step != k->last_step) {
        if (k->last_count)
            note("checkpoint of step %ld incomplete (%d of %d parts) when step %llu began: "
                 "skipped", k->last_step, k->last_count, k->nw, (unsigned long long)step);
        k->last_step = (long)step;
        k->last_count = 0;
        k->last_have_params = false;
        memset(k->last_got, 0, (size_t)k->nw);
    }
    if (k->last_got[w->rank])
        return RT_OK;
    k->last_got[w->rank] = 1;
    k->last_count++;
    for (size_t i = 0; i < nopt; i++)
        memcpy((float *)rt_view_host(rt_optim_state(k->copt, (int)i)) + lo,
               rt_zframe_data(&k->fr, 2 + (int)i), (hi - lo) * sizeof(float));
    if (params) {
        memcpy(k->last_params, params, k->np * sizeof(float));
        if (k->ns)
            memcpy(k->last_state, state, k->ns * sizeof(float));
        k->last_have_params = true;
    }
    if (k->last_count < k->nw || !k->last_have_params)
        return RT_OK;
    RT_TRY(upload_model(k, k->last_params, k->last_state));
    rt_optim_set_steps(k->copt, (long)step);
    k->last_count = 0;
    memset(k->last_got, 0, (size_t)k->nw);
    return rt_checkpoint_save(k->last_path, k->cm, k->copt, &pos);
}

static void handle_done(struct coord *k, struct wk *w)
{
    rt_wire_map m = rt_wire_root(&k->msg);
    int64_t status;
    uint64_t hash, epochs, steps, best_epoch, lsteps = 0, avgs = 0, plans = 0;
    struct rt_train_result *r = &w->res;
    if (rt_wire_get_int(m, "status", -100, 0, &status) < 0 ||
        rt_wire_get_str(m, "message", 0, w->message, sizeof w->message) < 0 ||
        rt_wire_get_uint(m, "hash", 0, UINT64_MAX, &hash) < 0 ||
        rt_wire_get_uint(m, "epochs_run", 0, 1000000, &epochs) < 0 ||
        rt_wire_get_uint(m, "steps", 0, (uint64_t)1 << 50, &steps) < 0 ||
        rt_wire_get_f64_or_nan(m, "train_loss", 0, 1e30, &r->train_loss) < 0 ||
        rt_wire_get_f64_or_nan(m, "train_acc", 0, 1, &r->train_acc) < 0 ||
        rt_wire_get_f64_or_nan(m, "val_loss", 0, 1e30, &r->val_loss) < 0 ||
        rt_wire_get_f64_or_nan(m, "val_acc", 0, 1, &r->val_acc) < 0 ||
        rt_wire_get_f64_or_nan(m, "test_loss", -1, 1e30, &r->test_loss) < 0 ||
        rt_wire_get_f64_or_nan(m, "test_acc", -1, 1, &r->test_acc) < 0 ||
        rt_wire_get_f64(m, "images_per_s", 0, 1e12, &r->images_per_s) < 0 ||
        rt_wire_get_bool(m, "stopped_early", &r->stopped_early) < 0 ||
        rt_wire_get_uint(m, "best_epoch", 0, 1000000, &best_epoch) < 0 ||
        (rt_wire_has(m, "local_steps") &&
         (rt_wire_get_uint(m, "local_steps", 0, (uint64_t)1 << 50, &lsteps) < 0 ||
          rt_wire_get_f64(m, "train_s", 0, 1e12, &r->train_seconds) < 0 ||
          rt_wire_get_uint(m, "averagings", 0, (uint64_t)1 << 50, &avgs) < 0 ||
          rt_wire_get_uint(m, "plans", 0, (uint64_t)1 << 50, &plans) < 0))) {
        rt_wire_drop(&k->drops, w->m.name, rt_error_detail());
        return;
    }
    sanitize(w->message);
    w->done = true;
    w->status = (int)status;
    w->hash = hash;
    r->epochs_run = (int)epochs;
    r->steps = (long)steps;
    r->best_epoch = (int)best_epoch;
    r->params_hash = hash;
    r->local_steps = (long)lsteps;
    r->gossip_averagings = (long)avgs;
    r->plans = (long)plans;
    /* local modes: how each worker fared at its own pace */
    if (w->status == 0 && k->c->mode != RT_MODE_SYNC) {
        char avg[64] = "";
        if (k->c->mode == RT_MODE_GOSSIP)
            snprintf(avg, sizeof avg, ", %ld pairwise averagings", r->gossip_averagings);
        note("worker %s (rank %d): %ld local steps in %.1f s of training (%.0f steps/s)%s",
             w->m.name, w->rank, r->local_steps, r->train_seconds,
             r->train_seconds > 0 ? r->local_steps / r->train_seconds : 0.0, avg);
    }
}

static int train_phase(struct coord *k)
{
    int done = 0;
    while (done < k->nw) {
        if (coord_stop && !k->stop_sent) {
            k->stop_sent = true;
            send_all(k, "stop", NULL);
            note("stopping every worker at the next step%s", k->last_path[0]
                                                                 ? " (checkpointing)" : "");
        }
        RT_TRY(reap_children(k));
        heartbeat(k);
        double now = rt_now();
        for (int i = 0; i < k->nw; i++)
            if (!k->w[i].done && now - k->w[i].last_seen > k->o->worker_timeout)
                return rt_error(RT_ERR_NET, "lost worker %s (rank %d, %s): nothing heard from it "
                                            "for %.0f s", k->w[i].m.name, k->w[i].rank,
                                k->w[i].m.host, now - k->w[i].last_seen);
        struct wk *w = NULL;
        if (next_msg(k, 100, &w) <= 0)
            continue;
        const char *t = k->msg.type;
        if (!strcmp(t, "hello")) {
            handle_hello(k, w, false);
        } else if (!w) {
            drop_unexpected(k, w);
        } else if (!strcmp(t, "hb")) {
        } else if (!strcmp(t, "progress")) {
            handle_progress(k, w);
        } else if (!strcmp(t, "line")) {
            handle_line(k, w);
        } else if (!strcmp(t, "metrics")) {
            RT_TRY(handle_metrics(k, w));
        } else if (!strcmp(t, "ckpt")) {
            RT_TRY(handle_ckpt(k, w));
        } else if (!strcmp(t, "done")) {
            bool was = w->done;
            handle_done(k, w);
            if (!was && w->done) {
                done++;
                if (w->status < 0 && w->status != RT_ERR_INTERRUPTED)
                    return rt_error(RT_ERR_NET, "worker %s (rank %d, %s) failed: %s", w->m.name,
                                    w->rank, w->m.host, w->message);
                if (w->status == RT_ERR_INTERRUPTED)
                    k->interrupted_step = w->res.steps;
            }
        } else if (!strcmp(t, "error")) {
            return worker_failed(k, w);
        } else {
            drop_unexpected(k, w);
        }
    }
    return RT_OK;
}

/* ---- the run ------------------------------------------------------------------------------ */

static int read_model(struct coord *k)
{
    FILE *f = fopen(k->c->model_path, "rb");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot read %s: %s", k->c->model_path, strerror(errno));
    k->model_text = malloc(MAX_MODEL_TEXT + 1);
    if (!k->model_text) {
        fclose(f);
        return rt_error(RT_ERR_NOMEM, "out of memory");
    }
    k->model_len = fread(k->model_text, 1, MAX_MODEL_TEXT + 1, f);
    fclose(f);
    if (k->model_len > MAX_MODEL_TEXT)
        return rt_error(RT_ERR_CONFIG, "%s is larger than %u KiB", k->c->model_path,
                        MAX_MODEL_TEXT >> 10);
    k->model_text[k->model_len] = '\0';
    return RT_OK;
}

/* The coordinator's own copy of the model (cpu, batch 1) and a full-size
 * optimiser: where checkpoints are assembled. */
static int prepare_files(struct coord *k)
{
    const struct rt_train_config *c = k->c;
    if (!(k->cpu = rt_dev_open("cpu", 0, 1)))
        return RT_ERR_DEVICE;
    if (!(k->cm = rt_model_load_string(k->model_text, c->model_path, k->cpu, 1)))
        return RT_ERR_CONFIG;
    k->np = rt_model_param_count(k->cm);
    k->ns = rt_model_state_count(k->cm);
    struct rt_optim_config oc = c->optim;
    oc.schedule = RT_SCHED_CONSTANT; /* only the state's shape matters here */
    oc.total_steps = oc.warmup_steps = 0;
    if (!(k->copt = rt_optim_new(k->cpu, &oc, k->np)))
        return RT_ERR_CONFIG;
    if (c->checkpoint_dir[0]) {
        if (mkdir(c->checkpoint_dir, 0777) != 0 && errno != EEXIST)
            return rt_error(RT_ERR_IO, "cannot create checkpoint directory %s: %s",
                            c->checkpoint_dir, strerror(errno));
        snprintf(k->last_path, sizeof k->last_path, "%s/last.safetensors", c->checkpoint_dir);
        snprintf(k->best_path, sizeof k->best_path, "%s/best.safetensors", c->checkpoint_dir);
        k->last_params = malloc((k->np ? k->np : 1) * sizeof(float));
        k->last_state = malloc((k->ns ? k->ns : 1) * sizeof(float));
        k->last_got = calloc(RT_MAX_WORKERS, 1);
        if (!k->last_params || !k->last_state || !k->last_got)
            return rt_error(RT_ERR_NOMEM, "no memory to assemble checkpoints");
        k->last_step = -1;
    }
    if (c->metrics_path[0] && !(k->mf = rt_metrics_open(c->metrics_path)))
        return RT_ERR_IO;
    return RT_OK;
}

static int open_router(struct coord *k)
{
    if (!(k->zctx = zmq_ctx_new()))
        return rt_error(RT_ERR_NET, "cannot start ZeroMQ: %s", zmq_strerror(errno));
    /* Workers send checkpoints: the largest frame is the parameters. */
    int64_t max = (int64_t)(k->np + 1024) * (int64_t)sizeof(float) + ((int64_t)1 << 20);
    if (!(k->router = rt_zsock_new(k->zctx, ZMQ_ROUTER, max, 0)))
        return RT_ERR_NET;
    int one = 1;
    zmq_setsockopt(k->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(k->router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    const char *ep = k->o->listen[0] ? k->o->listen : "tcp://127.0.0.1:*";
    return rt_zsock_bind(k->router, ep, k->endpoint, sizeof k->endpoint);
}

static int check_replicas(struct coord *k)
{
    struct wk *w0 = &k->w[k->by_rank[0]];
    for (int r = 1; r < k->nw; r++) {
        struct wk *w = &k->w[k->by_rank[r]];
        if (w->hash != w0->hash)
            return rt_error(RT_ERR_NET, "replicas diverged: rank %d (%s) ends with parameter "
                                        "hash %016llx, rank 0 with %016llx",
                            r, w->m.name, (unsigned long long)w->hash,
                            (unsigned long long)w0->hash);
    }
    note("replicas identical: parameter hash %016llx on all %d worker%s",
         (unsigned long long)w0->hash, k->nw, k->nw == 1 ? "" : "s");
    return RT_OK;
}

int rt_coord_run(const struct rt_coord_options *o, const struct rt_train_config *c,
                 struct rt_train_result *res)
{
    static struct coord K;
    struct coord *k = &K;
    memset(k, 0, sizeof *k);
    memset(res, 0, sizeof *res);
    res->test_loss = res->test_acc = -1.0;
    k->o = o;
    k->c = c;
    coord_stop = 0;
    rt_wire_writer_init(&k->wr);
    rt_wire_msg_init(&k->msg);
    rt_zframes_init(&k->fr);
    rt_wire_droplog_init(&k->drops, "coord");
    rt_progress_init(&k->prog, stderr, c->progress);
    rt_wire_new_run_id(k->run);
    double t_start = rt_now();
    int rc;

    if (o->workers < 1 || o->workers > RT_MAX_WORKERS) {
        rc = rt_error(RT_ERR_CONFIG, "--workers %d: from 1 to %d", o->workers, RT_MAX_WORKERS);
        goto out;
    }
    if (o->min_workers > o->workers) {
        rc = rt_error(RT_ERR_CONFIG, "--min-workers %d is more than --workers %d",
                      o->min_workers, o->workers);
        goto out;
    }
    if (c->resume && !c->checkpoint_dir[0]) {
        rc = rt_error(RT_ERR_CONFIG, "--resume needs --checkpoint DIR to resume from");
        goto out;
    }
    if (c->patience > 0 && c->val_frac <= 0.0f) {
        rc = rt_error(RT_ERR_CONFIG, "--patience needs a validation split: give --val F > 0");
        goto out;
    }
    if ((rc = read_model(k)) < 0 || (rc = prepare_files(k)) < 0 ||
        (c->resume && (rc = load_resume(k)) < 0))
        goto out;
    if (o->serve_data) {
        if ((rc = rt_manifest_build(c->data_spec, &k->man)) < 0)
            goto out;
        note("serving data %s: %d files", c->data_spec, k->man.files.n);
    }
    if ((rc = open_router(k)) < 0)
        goto out;
    if (o->spawn_local && (rc = spawn_local(k)) < 0)
        goto out;
    if ((rc = join_phase(k)) < 0)
        goto out;
    assign_ranks(k);
    if ((rc = send_jobs(k)) < 0 || (rc = setup_phase(k)) < 0 || (rc = train_phase(k)) < 0)
        goto out;
    struct wk *w0 = &k->w[k->by_rank[0]];
    *res = w0->res;
    res->seconds = rt_now() - t_start;
    if (k->interrupted_step > 0 || w0->status == RT_ERR_INTERRUPTED) {
        if (k->last_path[0])
            fprintf(stderr, "\nragtag: interrupted at step %ld; saved %s (continue with "
                            "--resume)\n", w0->res.steps, k->last_path);
        else
            fprintf(stderr, "\nragtag: interrupted at step %ld (no --checkpoint: nothing "
                            "saved)\n", w0->res.steps);
        rc = rt_error(RT_ERR_INTERRUPTED, "training interrupted at step %ld", w0->res.steps);
        goto out;
    }
    rc = check_replicas(k);

out:
    if (rc < 0 && rc != RT_ERR_INTERRUPTED && k->router) {
        char why[400];
        snprintf(why, sizeof why, "%s", rt_error_detail());
        send_all(k, "abort", why);
        /* Measured with libzmq 4.3.4: closing the ROUTER right after this
         * loses the abort to all but the first worker, ZMQ_LINGER or not;
         * half a second lets the I/O thread write every one. */
        usleep(500000);
    }
    if (k->npid) {
        /* Keep the error detail: waiting may set its own. */
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", rt_error_detail());
        wait_children(k, rc < 0 ? 5.0 : 30.0);
        if (rc < 0)
            rt_error(rc, "%s", keep);
    }
    if (k->router) {
        int linger = rc < 0 ? 2000 : 0;
        zmq_setsockopt(k->router, ZMQ_LINGER, &linger, sizeof linger);
    }
    rt_wire_droplog_flush(&k->drops);
    rt_zsock_close(&k->router);
    if (k->zctx)
        zmq_ctx_term(k->zctx);
    rt_metrics_close(&k->mf);
    rt_optim_destroy(&k->copt);
    rt_model_destroy(&k->cm);
    rt_dev_close(&k->cpu);
    free(k->model_text);
    free(k->last_params);
    free(k->last_state);
    free(k->last_got);
    free(k->best_params);
    free(k->best_state);
    rt_wire_writer_free(&k->wr);
    rt_wire_msg_free(&k->msg);
    rt_zframes_close(&k->fr);
    return rc;
}
