/* status_prom.c — /metrics: the snapshot in the Prometheus text exposition
 * format (version 0.0.4): per-worker gauges labelled by rank, name and
 * host; the run's counters and gauges (docs/status.md lists them). */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"

struct buf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->failed)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (n > 0 ? (size_t)n : 0);
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* A label value: backslash, double quote and newline escaped. */
static void label(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"')
            out[o++] = '\\', out[o++] = *s;
        else if (*s == '\n')
            out[o++] = '\\', out[o++] = 'n';
        else
            out[o++] = *s;
    }
    out[o] = 0;
}

/* Prometheus spells non-finite values NaN, +Inf, -Inf. */
static void value(char *out, size_t cap, double v)
{
    if (isnan(v))
        snprintf(out, cap, "NaN");
    else if (isinf(v))
        snprintf(out, cap, "%sInf", v > 0 ? "+" : "-");
    else
        snprintf(out, cap, "%.10g", v);
}

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void run_metric(struct buf *b, const char *name, const char *type, const char *help,
                       double v)
{
    char s[40];
    value(s, sizeof s, v);
    family(b, name, type, help);
    put(b, "%s %s\n", name, s);
}

struct worker_metric {
    const char *name, *help;
    double (*get)(const struct rt_snap_worker *w);
};
static double w_ips(const struct rt_snap_worker *w) { return w->images_per_s; }
static double w_share(const struct rt_snap_worker *w) { return (double)w->share; }
static double w_standby(const struct rt_snap_worker *w) { return w->standby ? 1.0 : 0.0; }
static double w_steps(const struct rt_snap_worker *w) { return (double)w->steps; }
static double w_age(const struct rt_snap_worker *w) { return w->heartbeat_age; }
static double w_threads(const struct rt_snap_worker *w) { return w->threads; }
static double w_up(const struct rt_snap_worker *w)
{
    return strcmp(w->state, "lost") && strcmp(w->state, "stalled") ? 1.0 : 0.0;
}
static const struct worker_metric worker_metrics[] = {
    {"ragtag_worker_images_per_second", "measured images/s of the worker (newest plan)", w_ips},
    {"ragtag_worker_share", "samples of each global batch the worker computes", w_share},
    {"ragtag_worker_standby", "1 when the worker is on standby (no share)", w_standby},
    {"ragtag_worker_steps", "the newest step the worker reported", w_steps},
    {"ragtag_worker_heartbeat_age_seconds", "seconds since the worker's last message", w_age},
    {"ragtag_worker_threads", "compute threads of the worker", w_threads},
    {"ragtag_worker_up", "0 when the worker is lost or stalled, else 1", w_up},
    {NULL, NULL, NULL},
};

static void workers(struct buf *b, const struct rt_snap_copy *c)
{
    for (const struct worker_metric *m = worker_metrics; m->name; m++) {
        family(b, m->name, "gauge", m->help);
        for (int i = 0; i < c->nw; i++) {
            char name[2 * RT_NAME_MAX], host[2 * RT_NAME_MAX], v[40];
            label(name, sizeof name, c->w[i].name);
            label(host, sizeof host, c->w[i].host);
            value(v, sizeof v, m->get(&c->w[i]));
            put(b, "%s{rank=\"%d\",name=\"%s\",host=\"%s\"} %s\n", m->name, c->w[i].rank, name,
                host, v);
        }
    }
}

char *rt_snap_prometheus(const struct rt_snap_copy *c, double now)
{
    const struct rt_snap_run *r = &c->run;
    struct buf b = {.p = malloc(8192), .cap = 8192};
    if (!b.p)
        return NULL;
    b.p[0] = 0;
    char run[80], model[512], mode[40];
    label(run, sizeof run, r->run);
    label(model, sizeof model, r->model);
    label(mode, sizeof mode, r->mode);
    family(&b, "ragtag_run_info", "gauge", "the run: id, model and mode (value 1)");
    put(&b, "ragtag_run_info{run=\"%s\",model=\"%s\",mode=\"%s\"} 1\n", run, model, mode);
    run_metric(&b, "ragtag_steps_total", "counter", "optimiser steps of the run", (double)r->step);
    run_metric(&b, "ragtag_samples_total", "counter", "samples trained", (double)r->samples);
    run_metric(&b, "ragtag_epoch", "gauge", "the epoch under way", r->epoch);
    run_metric(&b, "ragtag_epochs", "gauge", "epochs of the run", r->epochs);
    run_metric(&b, "ragtag_loss", "gauge", "running training loss of the epoch", r->loss);
    run_metric(&b, "ragtag_accuracy", "gauge", "running training accuracy of the epoch", r->acc);
    run_metric(&b, "ragtag_images_per_second", "gauge", "the cluster's images/s", r->images_per_s);
    run_metric(&b, "ragtag_eta_seconds", "gauge", "seconds left in the epoch", r->eta_s);
    run_metric(&b, "ragtag_generation", "gauge", "generation of the members", (double)r->generation);
    run_metric(&b, "ragtag_workers", "gauge", "members of the current generation", r->workers);
    run_metric(&b, "ragtag_workers_lost_total", "counter", "members lost", (double)r->lost);
    run_metric(&b, "ragtag_workers_joined_total", "counter", "workers admitted during training",
               (double)r->joined);
    run_metric(&b, "ragtag_workers_standby_total", "counter", "members gone on standby",
               (double)r->standby);
    run_metric(&b, "ragtag_plans_total", "counter", "plans of shares announced", (double)r->plans);
    run_metric(&b, "ragtag_checkpoints_total", "counter", "checkpoint files written",
               (double)r->checkpoints);
    run_metric(&b, "ragtag_uptime_seconds", "gauge", "seconds since the coordinator started",
               r->started > 0 ? now - r->started : 0.0);
    workers(&b, c);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
