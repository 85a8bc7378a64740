/* coord_members.c — who takes part: hellos (and whom to turn away), the
 * ranks, "ready", and what to say when someone is missing or silent.
 * A member is known by its route (the ZeroMQ routing id of its
 * connection) and by its id (a per-process nonce it says hello with). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord-impl.h"
#include "status.h"

static struct coord_worker *find_id(struct coord *k, const char *id)
{
    for (int i = 0; i < k->nw; i++)
        if (!strcmp(k->w[i].m.id, id))
            return &k->w[i];
    return NULL;
}

static bool name_taken(struct coord *k, const char *name)
{
    for (int i = 0; i < k->nw; i++)
        if (!strcmp(k->w[i].m.name, name))
            return true;
    return false;
}

/* A reject for the hello in k->msg, and a log line ("turned away worker
 * NAME from ..." or, when the name is the problem, "a worker"). */
static int turn_away(struct coord *k, const struct rt_member *m, const char *from, bool named,
                     const char *why)
{
    (void)coord_send_reject(k, rt_zframe_data(&k->fr, 0), rt_zframe_size(&k->fr, 0), m->name,
                            why);
    if (named)
        coord_note("turned away worker %s from %s: %s", m->name, from, why);
    else
        coord_note("turned away a worker from %s: %s", from, why);
    return RT_OK;
}

struct coord_worker *coord_add_member(struct coord *k, const struct rt_member *m,
                                      const char *peer)
{
    struct coord_worker *n = &k->w[k->nw++];
    memset(n, 0, sizeof *n);
    n->rid_len = rt_zframe_size(&k->fr, 0);
    memcpy(n->rid, rt_zframe_data(&k->fr, 0), n->rid_len);
    n->m = *m;
    snprintf(n->peer, sizeof n->peer, "%s", peer);
    n->last_seen = rt_now();
    n->fd = zmq_msg_get(&k->fr.f[1], ZMQ_SRCFD);
    n->rank = -1;
    n->acked = -1;
    return n;
}

static void add_member(struct coord *k, const struct rt_member *m, const char *peer)
{
    coord_add_member(k, m, peer);
    k->last_join = rt_now();
    coord_note("worker %s joined from %s (%s, %s) [%d/%d]", m->name, peer[0] ? peer : m->host,
               m->host, m->endpoint, k->nw, k->o->workers);
    coord_status_event(k, "join", "worker %s joined from %s (%s, %s %s) [%d/%d]", m->name,
                       peer[0] ? peer : m->host, m->host, m->backend, m->device, k->nw,
                       k->o->workers);
}

/* A hello that comes while the run sets up (or as its join phase fills)
 * from a worker it has room for once training begins (--max-workers, or
 * one lost in the set-up): no answer, so that it says hello again every
 * second and is admitted then (coord_admit), as the adopt phase holds
 * hellos for the next one. Noted once per worker. */
static bool hold(struct coord *k, const struct rt_member *m, const char *from)
{
    int cap = coord_max_members(k), here = 0;
    for (int i = 0; i < k->nw; i++)
        here += !k->w[i].gone;
    if (!coord_elastic(k) || here >= cap)
        return false;
    int n = k->nheld < 8 ? k->nheld : 8;
    for (int i = 0; i < n; i++)
        if (!strcmp(k->held[i], m->id))
            return true;
    snprintf(k->held[k->nheld++ % 8], sizeof k->held[0], "%s", m->id);
    coord_note("worker %s from %s waits: the run sets up with its %d workers; it joins once "
               "training begins (room for %d more)", m->name, from, here,
               cap - here);
    return true;
}

/* A hello from w (NULL: a new route). A worker says hello every second
 * until its job comes: the same member on the same route is no news. The
 * same member id on another route is someone else (or a stale copy):
 * refused, and the member keeps its route. open: the join phase. */
int coord_hello(struct coord *k, struct coord_worker *w, bool open)
{
    struct rt_member m;
    rt_wire_map mm;
    char peer[64], why[700];
    rt_zframes_peer(&k->fr, 1, peer, sizeof peer);
    if (rt_wire_get_map(rt_wire_root(&k->msg), "member", &mm) < 0 || rt_member_get(mm, &m) < 0) {
        rt_wire_drop(&k->drops, peer, rt_error_detail());
        return RT_OK;
    }
    if (rt_zframe_size(&k->fr, 0) > sizeof k->w[0].rid) {
        rt_wire_drop(&k->drops, peer, "a routing id longer than 256 bytes");
        return RT_OK;
    }
    const char *from = peer[0] ? peer : m.host;
    struct coord_worker *same = find_id(k, m.id);
    if (w) {
        if (w != same)
            rt_wire_drop(&k->drops, w->m.name, "a hello with another worker id");
        return RT_OK;
    }
    if (same) {
        snprintf(why, sizeof why, "worker id %s already joined as %s", m.id, same->m.name);
        return turn_away(k, &m, from, true, why);
    }
    if (!open && coord_elastic(k) && k->training)
        return coord_admit(k, &m, from);
    if (!open || k->nw >= k->o->workers) {
        if (hold(k, &m, from))
            return RT_OK;
        snprintf(why, sizeof why, "the run already has its %d workers", k->nw);
        return turn_away(k, &m, from, true, why);
    }
    if (name_taken(k, m.name)) {
        snprintf(why, sizeof why, "a worker named %s already joined (give --name)", m.name);
        return turn_away(k, &m, from, false, why);
    }
    if (!coord_memory_fits(k, &m, why, sizeof why))
        return turn_away(k, &m, from, true, why);
    add_member(k, &m, peer);
    return RT_OK;
}

static int cmp_workers(const void *a, const void *b)
{
    const struct coord_worker *x = *(const struct coord_worker *const *)a;
    const struct coord_worker *y = *(const struct coord_worker *const *)b;
    int c = strcmp(x->m.name, y->m.name);
    return c ? c : strcmp(x->m.id, y->m.id);
}

void coord_sort_by_name(struct coord_worker **order, int n)
{
    qsort(order, (size_t)n, sizeof order[0], cmp_workers);
}

/* The members by name (start order never matters). */
static void sort_members(struct coord *k, struct coord_worker **order)
{
    for (int i = 0; i < k->nw; i++)
        order[i] = &k->w[i];
    coord_sort_by_name(order, k->nw);
}

void coord_assign_ranks(struct coord *k)
{
    struct coord_worker *order[RT_MAX_WORKERS];
    sort_members(k, order);
    k->ms.gen = 1;
    k->ms.n = k->nw;
    for (int r = 0; r < k->nw; r++) {
        order[r]->rank = r;
        k->by_rank[r] = (int)(order[r] - k->w);
        k->ms.m[r] = order[r]->m;
    }
}

static void append(char *list, size_t cap, size_t *used, const char *fmt, const char *a,
                   const char *b) __attribute__((format(printf, 4, 0)));
static void append(char *list, size_t cap, size_t *used, const char *fmt, const char *a,
                   const char *b)
{
    int n = snprintf(list + *used, cap - *used, fmt, *used ? ", " : "", a, b);
    if (n > 0 && (size_t)n < cap - *used)
        *used += (size_t)n;
}

int coord_join_timeout(struct coord *k)
{
    const struct rt_coord_options *o = k->o;
    if (o->min_workers > 0 && k->nw >= o->min_workers) {
        coord_note("--join-timeout %.0f s: starting with the %d of %d workers that joined "
                   "(--min-workers %d)", o->join_timeout, k->nw, o->workers, o->min_workers);
        return 1;
    }
    char list[2048] = "", missing[1024] = "";
    size_t used = 0;
    struct coord_worker *sorted[RT_MAX_WORKERS];
    sort_members(k, sorted);
    for (int i = 0; i < k->nw; i++)
        append(list, sizeof list, &used, "%s%s (%s)", sorted[i]->m.name,
               sorted[i]->peer[0] ? sorted[i]->peer : sorted[i]->m.host);
    if (o->spawn_local)
        coord_local_missing(k, missing, sizeof missing);
    else
        snprintf(missing, sizeof missing, "%d more", o->workers - k->nw);
    char whole[1300] = "";
    if (k->restarted && coord_ckpt_written(k)) /* its state is there alone */
        snprintf(whole, sizeof whole, "; the run's last checkpoint, %s, is whole: run the "
                 "coordinator again with --resume when workers can join", k->ck.last_path);
    return rt_error(RT_ERR_TIMEOUT,
                    "only %d of %d workers joined within --join-timeout %.0f s; "
                    "joined: %s; missing: %s%s",
                    k->nw, o->workers, o->join_timeout, k->nw ? list : "none", missing, whole);
}

int coord_setup_timeout(struct coord *k)
{
    char list[1024] = "";
    size_t used = 0;
    for (int i = 0; i < k->nw; i++)
        if (!k->w[i].ready)
            append(list, sizeof list, &used, "%s%s%s", k->w[i].m.name, "");
    return rt_error(RT_ERR_TIMEOUT, "workers not ready after %.0f s: %s", k->o->setup_timeout,
                    list);
}

#define CLOSED_GRACE 0.5 /* seconds */

void coord_members_resumed(struct coord *k, double paused)
{
    double now = rt_now();
    for (int i = 0; i < k->nw; i++)
        k->w[i].last_seen = now;
    coord_note("this coordinator did not run for %.1f s (paused?): the workers' silence "
               "clocks start again", paused);
}

/* Every worker still training was heard from within --worker-timeout,
 * and its connection is open. A closed one counts once the messages it
 * sent before closing are read (a finished worker says "done", then
 * leaves): after a moment, and when nothing waits in the socket. */
int coord_check_alive(struct coord *k)
{
    double now = rt_now();
    char why[200];
    for (int i = 0; i < k->nw; i++) {
        struct coord_worker *w = &k->w[i];
        if (w->done || w->gone)
            continue;
        if (w->closed_at > 0.0 && now - w->closed_at > CLOSED_GRACE && !coord_has_input(k)) {
            snprintf(why, sizeof why, "its connection closed %.1f s ago (the process died or "
                                      "its host cut it)", now - w->closed_at);
            RT_TRY(coord_lose(k, w, why));
        } else if (now - w->last_seen > k->o->worker_timeout) {
            snprintf(why, sizeof why, "nothing heard from it for %.0f s", now - w->last_seen);
            RT_TRY(coord_lose(k, w, why));
        }
    }
    return coord_elastic_clock(k);
}

/* w is gone before it is ready (how: what was seen): the run starts
 * without it, which the train phase then counts as a loss (the others
 * regroup; train_enter), or stops at once when fewer than --min-workers
 * are left (when none is, the run's state is in its checkpoint alone:
 * RT_ERR_NO_STATE, and it goes on from it, coord_restart.c). */
int coord_setup_lose(struct coord *k, struct coord_worker *w, const char *how)
{
    w->gone = w->lost_in_setup = true;
    int left = coord_alive(k), least = coord_min_members(k);
    char hint[1300] = "";
    if (left == 0)
        coord_resume_hint(k, hint, sizeof hint);
    if (left < least)
        return rt_error(left ? RT_ERR_NET : RT_ERR_NO_STATE,
                        "worker %s (rank %d, %s) was lost while setting up: %s; %d left, fewer "
                        "than --min-workers %d%s%s", w->m.name, w->rank, w->m.host, how, left,
                        least, hint[0] ? "; " : "", hint);
    fprintf(stderr, "ragtag: [members] worker %s (rank %d, %s) lost while setting up: %s; the "
                    "run starts with the %d other%s\n", w->m.name, w->rank, w->m.host, how,
            left, left == 1 ? "" : "s");
    return RT_OK;
}

/* While workers set up they are silent (reading their data, measuring
 * their speed), so only a closed connection says one is gone: the run
 * does not wait out --setup-timeout for a dead process. */
int coord_setup_check_alive(struct coord *k)
{
    double now = rt_now();
    for (int i = 0; i < k->nw; i++) {
        struct coord_worker *w = &k->w[i];
        if (w->gone || w->rank < 0 || !(w->closed_at > 0.0) ||
            now - w->closed_at <= CLOSED_GRACE || coord_has_input(k))
            continue;
        char how[160];
        snprintf(how, sizeof how, "its connection closed %.1f s ago (the process died or its "
                                  "host cut it)", now - w->closed_at);
        RT_TRY(coord_setup_lose(k, w, how));
    }
    return RT_OK;
}

/* "ready": the worker built its model and data and measured its speed;
 * rank 0 also says what it trains (the summary line). */
int coord_ready(struct coord *k, struct coord_worker *w)
{
    uint64_t rank;
    double ips;
    rt_wire_map r = rt_wire_root(&k->msg);
    if (rt_wire_get_uint(r, "rank", 0, RT_MAX_WORKERS, &rank) < 0 ||
        rt_wire_get_f64(r, "ips", 0, 1e12, &ips) < 0 || ((int)rank != w->rank && !w->pending)) {
        rt_wire_drop(&k->drops, w->m.name, "a bad 'ready'");
        return RT_OK;
    }
    w->ready = true;
    w->ips = ips;
    w->m.images_per_s = ips;
    if (w->rank >= 0)
        k->ms.m[w->rank].images_per_s = ips;
    if (w->rank == 0 && rt_wire_get_str(r, "summary", 0, k->summary, sizeof k->summary) == 0)
        coord_sanitize(k->summary);
    uint64_t need = 0, rows = 0;
    if (rt_wire_has(r, "mem_need") &&
        (rt_wire_get_uint(r, "mem_need", 0, (uint64_t)1 << 50, &need) < 0 ||
         rt_wire_get_uint(r, "rows", 0, 1u << 30, &rows) < 0))
        rt_wire_drop(&k->drops, w->m.name, "a bad memory need in 'ready'");
    w->m.mem_need = need;
    w->mem_rows = (long)rows;
    if (w->rank >= 0)
        k->ms.m[w->rank].mem_need = need;
    return RT_OK;
}
