/* coord_status.c — the coordinator's side of the status page (--http):
 * what it learns (rank 0's progress, metrics and plan lines, heartbeats,
 * joins, losses, checkpoints) goes into the snapshot (snapshot.h), which
 * the HTTP thread (status_http.c) alone reads. Nothing here waits on a
 * client: each call copies a few fields under the snapshot's lock, and the
 * whole table is published at most every PUBLISH_EVERY seconds. Without
 * --http (k->snap NULL) every function returns at once. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord-impl.h"
#include "partition.h"
#include "status.h"
#include "status_http.h"

#define PUBLISH_EVERY 0.25 /* seconds */
/* Seconds without a message after which a worker shows as stalled: 5, or
 * half of --worker-timeout when that is shorter (so that it shows before
 * it is lost). */
#define STALLED_AFTER 5.0

static const char *mode_name(const struct coord *k)
{
    switch (k->c->mode) {
    case RT_MODE_SYNC: return "sync";
    case RT_MODE_AVERAGE: return "average";
    case RT_MODE_GOSSIP: return "gossip";
    }
    return "?";
}

/* What the page tells whoever starts the run: where it is and how it
 * asks for the token. */
static void announce(struct coord *k, const char *url, const char *token)
{
    const struct rt_coord_options *o = k->o;
    if (!token[0]) {
        coord_note("status page on %s (open: --insecure, anyone who can reach it reads the "
                   "run's progress)", url);
    } else if (o->keys_dir[0]) {
        coord_note("status page on %s (it asks for the join token: the content of %s/token)",
                   url, o->keys_dir);
    } else {
        /* loopback credentials, this user's alone: the token may show on
         * this user's terminal, like the worker line */
        coord_note("status page on %s?token=%s", url, token);
    }
    if (!rt_http_is_loopback(k->http))
        coord_note("the status page is plain HTTP: the token and the page cross the network "
                   "unencrypted; put it behind TLS or an SSH tunnel on a network you do not "
                   "trust");
}

int coord_status_open(struct coord *k)
{
    const struct rt_coord_options *o = k->o;
    if (!o->http[0])
        return RT_OK;
    if (!(k->snap = rt_snap_new()) ||
        !(k->snap_rows = calloc(RT_MAX_WORKERS, sizeof *k->snap_rows)))
        return rt_error(RT_ERR_NOMEM, "no memory for the status page");
    struct rt_snap_run *r = &k->srun;
    snprintf(r->run, sizeof r->run, "%s", k->run);
    snprintf(r->model, sizeof r->model, "%.255s", k->c->model_path);
    snprintf(r->data, sizeof r->data, "%.255s", k->c->data_spec);
    snprintf(r->mode, sizeof r->mode, "%s", mode_name(k));
    snprintf(r->links, sizeof r->links, "%s", coord_security_mode(k));
    snprintf(r->phase, sizeof r->phase, "join");
    r->batch = k->c->batch;
    r->epochs = k->c->epochs;
    r->workers_wanted = o->workers;
    r->loss = r->acc = r->images_per_s = r->eta_s = NAN;
    r->started = rt_snap_now();
    rt_snap_set_run(k->snap, r);
    const char *token = k->curve ? k->creds.token : "";
    char url[128] = "";
    if (!(k->http = rt_http_start(o->http, k->snap, token, url, sizeof url)))
        return RT_ERR_NET;
    announce(k, url, token);
    return RT_OK;
}

void coord_status_close(struct coord *k, int rc)
{
    if (!k->snap) {
        free(k->snap_rows);
        k->snap_rows = NULL;
        return;
    }
    snprintf(k->srun.phase, sizeof k->srun.phase, "%s", rc < 0 ? "failed" : "done");
    coord_status_publish(k, true);
    rt_http_stop(&k->http);
    rt_snap_destroy(&k->snap);
    free(k->snap_rows);
    k->snap_rows = NULL;
}

void coord_status_phase(struct coord *k, const char *phase)
{
    if (!k->snap)
        return;
    snprintf(k->srun.phase, sizeof k->srun.phase, "%s", phase);
    coord_status_publish(k, true);
}

static void worker_row(struct coord *k, const struct coord_worker *w, double now,
                       struct rt_snap_worker *o)
{
    memset(o, 0, sizeof *o);
    o->rank = w->gone ? -1 : w->rank;
    snprintf(o->name, sizeof o->name, "%s", w->m.name);
    snprintf(o->host, sizeof o->host, "%s", w->m.host);
    snprintf(o->backend, sizeof o->backend, "%s", w->m.backend);
    snprintf(o->device, sizeof o->device, "%s", w->m.device);
    o->threads = w->m.threads;
    o->cpu_quota = w->m.cpu_quota;
    o->images_per_s = w->plan_ips > 0 ? w->plan_ips : w->ips;
    bool member = o->rank >= 0;
    o->share = member && w->plan_share > 0 ? w->plan_share : 0;
    bool held = w->probe_at > 0.0 || w->back_at > now; /* too slow, or backing off */
    o->standby = (member && w->plan_standby) || (!w->gone && w->pending && held);
    snprintf(o->link, sizeof o->link, "-");
    if (member && k->ms.n > 1 && o->rank < k->ms.n)
        snprintf(o->link, sizeof o->link, "%s",
                 rt_membership_link_kind(&k->ms, o->rank, k->o->allow_shm));
    o->heartbeat_age = now - w->last_seen;
    o->steps = w->acked;
    const char *state = "training";
    if (w->gone)
        state = w->left_standby ? "standby" : "lost";
    else if (w->done)
        state = "done";
    else if (w->pending)
        state = o->standby ? "standby" : "joining";
    else if (o->heartbeat_age > fmin(STALLED_AFTER, k->o->worker_timeout / 2) && k->training)
        state = "stalled";
    else if (o->standby)
        state = "standby";
    else if (!k->training)
        state = "setup";
    snprintf(o->state, sizeof o->state, "%s", state);
}

/* The table and the run's fields, at most every PUBLISH_EVERY s (now: at once). */
void coord_status_publish(struct coord *k, bool now)
{
    if (!k->snap)
        return;
    double t = rt_now();
    if (!now && t - k->snap_at < PUBLISH_EVERY)
        return;
    k->snap_at = t;
    struct rt_snap_worker *rows = k->snap_rows;
    int n = 0;
    /* members by rank first, then the others by arrival */
    for (int r = 0; r < k->ms.n; r++)
        worker_row(k, coord_rank(k, r), t, &rows[n++]);
    for (int i = 0; i < k->nw && n < RT_MAX_WORKERS; i++)
        if (k->w[i].rank < 0 || k->w[i].gone || k->w[i].rank >= k->ms.n ||
            k->by_rank[k->w[i].rank] != i)
            worker_row(k, &k->w[i], t, &rows[n++]);
    struct rt_snap_run *r = &k->srun;
    r->generation = k->ms.gen;
    r->workers = coord_alive(k);
    r->lost = k->lost;
    r->joined = k->joined;
    r->standby = k->standby;
    if (k->ms.n > 0) {
        long s0 = coord_rank(k, 0)->acked;
        r->step = s0 > r->step ? s0 : r->step;
    }
    r->samples = r->step * (long)k->c->batch;
    rt_snap_set_workers(k->snap, rows, n);
    rt_snap_set_run(k->snap, r);
}

void coord_status_event(struct coord *k, const char *kind, const char *fmt, ...)
{
    if (!k->snap)
        return;
    char text[RT_SNAP_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    rt_snap_event(k->snap, kind, "%s", text);
    if (!strcmp(kind, "checkpoint"))
        k->srun.checkpoints++;
    coord_status_publish(k, true);
}

void coord_status_progress(struct coord *k, int epoch, int epochs, long done, long total,
                           double loss, double acc, double ips, double eta)
{
    if (!k->snap)
        return;
    struct rt_snap_run *r = &k->srun;
    r->epoch = epoch;
    r->epochs = epochs;
    r->done = done;
    r->total = total;
    r->loss = loss;
    r->acc = acc;
    r->images_per_s = ips;
    r->eta_s = eta;
}

/* ---- metrics lines: the curves ------------------------------------------------------- */

static double field(rt_wire_map f, const char *key)
{
    for (uint32_t i = 0; i < f->via.map.size; i++) {
        const msgpack_object *kk = &f->via.map.ptr[i].key, *v = &f->via.map.ptr[i].val;
        if (kk->via.str.size != strlen(key) || memcmp(kk->via.str.ptr, key, kk->via.str.size))
            continue;
        if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            return (double)v->via.u64;
        if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            return (double)v->via.i64;
        return v->via.f64;
    }
    return NAN;
}

/* A checked "metrics" message of rank 0: an epoch line (it has
 * train_loss) or a --log-every window (loss). */
void coord_status_metrics(struct coord *k, rt_wire_map f)
{
    if (!k->snap)
        return;
    bool epoch = !isnan(field(f, "train_loss"));
    const char *const *keys = epoch ? rt_snap_epoch_keys : rt_snap_log_keys;
    struct rt_snap_point p = {.step = (long)field(f, "step"), .epoch = field(f, "epoch"),
                              .t = rt_snap_now() - k->srun.started};
    if (isnan(field(f, "step")) || (!epoch && isnan(field(f, "loss"))))
        return;
    for (int j = 0; keys[j] && j < RT_SNAP_VALUES; j++)
        p.v[j] = field(f, keys[j]);
    rt_snap_point(k->snap, epoch ? RT_SNAP_EPOCH : RT_SNAP_LOG, &p);
}
