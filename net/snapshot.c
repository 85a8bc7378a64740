/* snapshot.c — the coordinator's status, shared with the HTTP thread under
 * one mutex (snapshot.h). */
#include "config.h"

#include "snapshot.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

const char *const rt_snap_epoch_keys[] = {
    "train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc",
    "images_per_s", "consensus_distance", NULL,
};
const char *const rt_snap_log_keys[] = {"loss", "acc", "images_per_s", NULL};

double rt_snap_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct rt_snap {
    pthread_mutex_t mu;
    struct rt_snap_copy c; /* the state itself; events are a ring */
    int ev_head;           /* index of the oldest event */
};

rt_snap *rt_snap_new(void)
{
    rt_snap *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        return NULL;
    }
    st->c.run.loss = st->c.run.acc = NAN;
    return st;
}

void rt_snap_destroy(rt_snap **stp)
{
    if (!stp || !*stp)
        return;
    pthread_mutex_destroy(&(*stp)->mu);
    free(*stp);
    *stp = NULL;
}

void rt_snap_set_run(rt_snap *st, const struct rt_snap_run *run)
{
    pthread_mutex_lock(&st->mu);
    st->c.run = *run;
    pthread_mutex_unlock(&st->mu);
}

void rt_snap_set_workers(rt_snap *st, const struct rt_snap_worker *w, int n)
{
    if (n > RT_MAX_WORKERS)
        n = RT_MAX_WORKERS;
    pthread_mutex_lock(&st->mu);
    memcpy(st->c.w, w, (size_t)n * sizeof *w);
    st->c.nw = n;
    pthread_mutex_unlock(&st->mu);
}

void rt_snap_event(rt_snap *st, const char *kind, const char *fmt, ...)
{
    struct rt_snap_event e = {.t = rt_snap_now()};
    snprintf(e.kind, sizeof e.kind, "%s", kind);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.text, sizeof e.text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&st->mu);
    struct rt_snap_copy *c = &st->c;
    if (c->nev < RT_SNAP_EVENTS)
        c->ev[(st->ev_head + c->nev++) % RT_SNAP_EVENTS] = e;
    else {
        c->ev[st->ev_head] = e; /* the oldest goes */
        st->ev_head = (st->ev_head + 1) % RT_SNAP_EVENTS;
    }
    c->events_total++;
    pthread_mutex_unlock(&st->mu);
}

/* A full curve keeps every other point of its older half: the whole run's
 * shape stays, the newest points at full resolution. */
static int thin(void *items, int n, size_t size)
{
    char *p = items;
    int half = n / 2, o = 0;
    for (int i = 0; i < half; i += 2)
        memmove(p + (size_t)o++ * size, p + (size_t)i * size, size);
    memmove(p + (size_t)o * size, p + (size_t)half * size, (size_t)(n - half) * size);
    return o + (n - half);
}

void rt_snap_point(rt_snap *st, enum rt_snap_series s, const struct rt_snap_point *p)
{
    pthread_mutex_lock(&st->mu);
    struct rt_snap_copy *c = &st->c;
    if (c->npt[s] == RT_SNAP_POINTS)
        c->npt[s] = thin(c->pt[s], c->npt[s], sizeof c->pt[s][0]);
    c->pt[s][c->npt[s]++] = *p;
    pthread_mutex_unlock(&st->mu);
}

static int name_index(struct rt_snap_copy *c, const char *name)
{
    for (int i = 0; i < c->nnames; i++)
        if (!strcmp(c->names[i], name))
            return i;
    if (c->nnames == RT_SNAP_NAMES)
        return -1;
    snprintf(c->names[c->nnames], sizeof c->names[0], "%s", name);
    return c->nnames++;
}

void rt_snap_plan(rt_snap *st, long step, double epoch, const char *const *names,
                  const long *shares, int n)
{
    pthread_mutex_lock(&st->mu);
    struct rt_snap_copy *c = &st->c;
    if (c->nplan == RT_SNAP_PLANS)
        c->nplan = thin(c->plan, c->nplan, sizeof c->plan[0]);
    struct rt_snap_plan *p = &c->plan[c->nplan++];
    p->step = step;
    p->epoch = epoch;
    p->t = rt_snap_now() - c->run.started;
    for (int i = 0; i < RT_SNAP_NAMES; i++)
        p->share[i] = -1;
    for (int r = 0; r < n; r++) {
        int i = name_index(c, names[r]);
        if (i >= 0)
            p->share[i] = (int32_t)shares[r];
    }
    pthread_mutex_unlock(&st->mu);
}

void rt_snap_copy(rt_snap *st, struct rt_snap_copy *out)
{
    pthread_mutex_lock(&st->mu);
    const struct rt_snap_copy *c = &st->c;
    out->run = c->run;
    memcpy(out->w, c->w, (size_t)c->nw * sizeof c->w[0]);
    out->nw = c->nw;
    for (int i = 0; i < c->nev; i++)
        out->ev[i] = c->ev[(st->ev_head + i) % RT_SNAP_EVENTS];
    out->nev = c->nev;
    out->events_total = c->events_total;
    for (int s = 0; s < RT_SNAP_N; s++) {
        memcpy(out->pt[s], c->pt[s], (size_t)c->npt[s] * sizeof c->pt[s][0]);
        out->npt[s] = c->npt[s];
    }
    memcpy(out->plan, c->plan, (size_t)c->nplan * sizeof c->plan[0]);
    out->nplan = c->nplan;
    memcpy(out->names, c->names, (size_t)c->nnames * sizeof c->names[0]);
    out->nnames = c->nnames;
    pthread_mutex_unlock(&st->mu);
}
