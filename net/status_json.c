/* status_json.c — /api/status: the snapshot as one JSON object, built with
 * json-c (docs/status.md describes every field). Non-finite numbers are
 * null; numbers keep 6 significant digits. */
#include "config.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"

static json_object *num(double v)
{
    if (!isfinite(v))
        return NULL; /* json-c writes NULL as null */
    char s[32];
    snprintf(s, sizeof s, "%.6g", v);
    return json_object_new_double_s(v, s);
}

static void put_num(json_object *o, const char *k, double v)
{
    json_object_object_add(o, k, num(v));
}
/* Unix times: to the millisecond. */
static void put_time(json_object *o, const char *k, double v)
{
    char s[32];
    snprintf(s, sizeof s, "%.3f", v);
    json_object_object_add(o, k, isfinite(v) ? json_object_new_double_s(v, s) : NULL);
}
static void put_int(json_object *o, const char *k, long v)
{
    json_object_object_add(o, k, json_object_new_int64(v));
}
static void put_str(json_object *o, const char *k, const char *v)
{
    json_object_object_add(o, k, json_object_new_string(v));
}

static json_object *run_json(const struct rt_snap_run *r, double now)
{
    json_object *o = json_object_new_object();
    put_str(o, "id", r->run);
    put_str(o, "model", r->model);
    put_str(o, "data", r->data);
    put_str(o, "mode", r->mode);
    put_str(o, "links", r->links);
    put_str(o, "phase", r->phase);
    put_int(o, "batch", r->batch);
    put_int(o, "epoch", r->epoch);
    put_int(o, "epochs", r->epochs);
    put_int(o, "batches_done", r->done);
    put_int(o, "batches_total", r->total);
    put_int(o, "step", r->step);
    put_int(o, "samples", r->samples);
    put_num(o, "loss", r->loss);
    put_num(o, "acc", r->acc);
    put_num(o, "images_per_s", r->images_per_s);
    put_num(o, "eta_s", r->eta_s);
    put_int(o, "generation", (long)r->generation);
    put_int(o, "workers", r->workers);
    put_int(o, "workers_wanted", r->workers_wanted);
    put_int(o, "lost", r->lost);
    put_int(o, "joined", r->joined);
    put_int(o, "standby", r->standby);
    put_int(o, "plans", r->plans);
    put_int(o, "checkpoints", r->checkpoints);
    put_time(o, "started", r->started);
    put_num(o, "elapsed_s", r->started > 0 ? now - r->started : 0.0);
    return o;
}

static json_object *worker_json(const struct rt_snap_worker *w)
{
    json_object *o = json_object_new_object();
    put_int(o, "rank", w->rank);
    put_str(o, "name", w->name);
    put_str(o, "host", w->host);
    put_str(o, "backend", w->backend);
    put_str(o, "device", w->device);
    put_int(o, "threads", w->threads);
    put_num(o, "cpu_quota", w->cpu_quota);
    put_num(o, "images_per_s", w->images_per_s);
    put_int(o, "share", w->share);
    json_object_object_add(o, "standby", json_object_new_boolean(w->standby));
    put_str(o, "link", w->link);
    put_num(o, "heartbeat_age_s", w->heartbeat_age);
    put_int(o, "steps", w->steps);
    put_str(o, "state", w->state);
    return o;
}

static json_object *series_json(const struct rt_snap_point *pt, int n, const char *const *keys)
{
    json_object *a = json_object_new_array_ext(n);
    for (int i = 0; i < n; i++) {
        json_object *o = json_object_new_object();
        put_int(o, "step", pt[i].step);
        put_num(o, "epoch", pt[i].epoch);
        put_num(o, "t", pt[i].t);
        for (int j = 0; keys[j] && j < RT_SNAP_VALUES; j++)
            put_num(o, keys[j], pt[i].v[j]);
        json_object_array_add(a, o);
    }
    return a;
}

static json_object *plans_json(const struct rt_snap_copy *c)
{
    json_object *a = json_object_new_array_ext(c->nplan);
    for (int i = 0; i < c->nplan; i++) {
        const struct rt_snap_plan *p = &c->plan[i];
        json_object *o = json_object_new_object(), *sh = json_object_new_object();
        put_int(o, "step", p->step);
        put_num(o, "epoch", p->epoch);
        put_num(o, "t", p->t);
        for (int j = 0; j < c->nnames; j++)
            if (p->share[j] >= 0)
                put_int(sh, c->names[j], p->share[j]);
        json_object_object_add(o, "shares", sh);
        json_object_array_add(a, o);
    }
    return a;
}

static json_object *events_json(const struct rt_snap_copy *c)
{
    json_object *a = json_object_new_array_ext(c->nev);
    for (int i = 0; i < c->nev; i++) {
        json_object *o = json_object_new_object();
        put_time(o, "time", c->ev[i].t);
        put_str(o, "kind", c->ev[i].kind);
        put_str(o, "text", c->ev[i].text);
        json_object_array_add(a, o);
    }
    return a;
}

char *rt_snap_json(const struct rt_snap_copy *c, double now)
{
    json_object *root = json_object_new_object();
    if (!root)
        return NULL;
    put_int(root, "version", 1);
    put_time(root, "time", now);
    json_object_object_add(root, "run", run_json(&c->run, now));
    json_object *ws = json_object_new_array_ext(c->nw);
    for (int i = 0; i < c->nw; i++)
        json_object_array_add(ws, worker_json(&c->w[i]));
    json_object_object_add(root, "workers", ws);
    json_object_object_add(root, "events", events_json(c));
    put_int(root, "events_total", c->events_total);
    json_object *cv = json_object_new_object();
    json_object_object_add(cv, "epochs",
                           series_json(c->pt[RT_SNAP_EPOCH], c->npt[RT_SNAP_EPOCH],
                                       rt_snap_epoch_keys));
    json_object_object_add(cv, "log",
                           series_json(c->pt[RT_SNAP_LOG], c->npt[RT_SNAP_LOG], rt_snap_log_keys));
    json_object_object_add(cv, "plans", plans_json(c));
    json_object_object_add(root, "curves", cv);
    const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    char *out = s ? strdup(s) : NULL;
    json_object_put(root);
    return out;
}
