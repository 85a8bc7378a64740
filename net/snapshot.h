/* snapshot.h — what the coordinator shows while it runs: a snapshot of the
 * run, one row per worker, the events and the curves so far.
 *
 * The coordinator's thread writes it (net/coord_status.c), the HTTP
 * thread reads it (net/coord_http.c); one mutex guards it, held only to
 * copy fields in or to render them out, so the HTTP side never touches
 * the coordinator's own state and a reader can delay the coordinator by
 * one render at most (status_json.c keeps the rendered text a while).
 * Everything is bounded: rows by RT_MAX_WORKERS, events by a ring of
 * RT_SNAP_EVENTS, each curve by RT_SNAP_POINTS (the older half is
 * thinned when full, so a long run keeps its whole shape). */
#ifndef RT_SNAPSHOT_H
#define RT_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"
#include "membership.h"

#define RT_SNAP_EVENTS 256
#define RT_SNAP_POINTS 1024
#define RT_SNAP_TEXT 240

typedef struct rt_snap rt_snap;

struct rt_snap_run {
    char run[40];          /* run id */
    char model[256], data[256], mode[16], links[128];
    char phase[16];        /* join, setup, train, done, failed */
    int batch;
    int epoch, epochs;     /* the epoch under way (1-based), of */
    long done, total;      /* its batches done, of */
    long step;             /* rank 0's newest step (heartbeats) */
    double loss, acc;      /* running, in the epoch (NaN: none yet) */
    double images_per_s, eta_s;
    long samples;          /* samples trained so far (epochs closed + the epoch's batches) */
    uint64_t generation;
    int workers, workers_wanted;
    long lost, joined, standby; /* members lost, admitted during training, gone on standby */
    long plans;            /* re-plans rank 0 announced */
    long checkpoints;      /* checkpoint files written */
    double started;        /* Unix time the coordinator started */
    double last_loss;      /* the newest metrics loss (log window or epoch) */
};

/* One worker: a member, a joiner held on standby, or a lost one. */
struct rt_snap_worker {
    int rank;              /* -1: not a member now */
    char name[RT_NAME_MAX], host[RT_NAME_MAX], backend[32], device[128];
    int threads;
    double cpu_quota;      /* cores its cgroup allows (0: no quota) */
    double images_per_s;   /* measured: the newest plan's, else at join */
    long share;            /* samples of each batch (newest plan) */
    bool standby;
    char link[8];          /* to its right neighbour: shm, tcp, - */
    double heartbeat_age;  /* seconds since its last message */
    long steps;            /* the newest step it reported */
    char state[16];        /* training, standby, stalled, lost, joining, done */
};

/* A curve point: step, epoch and up to RT_SNAP_VALUES values (NaN: none),
 * in the order of the series' keys. */
#define RT_SNAP_VALUES 10
struct rt_snap_point {
    long step;
    double epoch;
    double t;              /* seconds since the coordinator started */
    double v[RT_SNAP_VALUES];
};

/* The curves. */
enum rt_snap_series {
    RT_SNAP_EPOCH, /* per epoch: train/val/test loss and acc, images/s, consensus */
    RT_SNAP_LOG,   /* per --log-every window: loss, acc, images/s */
    RT_SNAP_N,
};
/* The values of each series, in order (the JSON keys), NULL-terminated. */
extern const char *const rt_snap_epoch_keys[];
extern const char *const rt_snap_log_keys[];

/* A plan: each worker's share of the batch from `step` on; share[i] is the
 * worker named names[i] of the copy (-1: not in this plan). */
#define RT_SNAP_PLANS 256
#define RT_SNAP_NAMES RT_MAX_WORKERS
struct rt_snap_plan {
    long step;
    double epoch, t;
    int32_t share[RT_SNAP_NAMES];
};

/* Unix time, seconds (events and "started" are in it). */
double rt_snap_now(void);

rt_snap *rt_snap_new(void);
void rt_snap_destroy(rt_snap **st);

/* The coordinator's side: each call copies under the lock. */
void rt_snap_set_run(rt_snap *st, const struct rt_snap_run *run);
void rt_snap_set_workers(rt_snap *st, const struct rt_snap_worker *w, int n);
/* kind: join, lost, standby, plan, checkpoint, ... (a short word) */
void rt_snap_event(rt_snap *st, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void rt_snap_point(rt_snap *st, enum rt_snap_series s, const struct rt_snap_point *p);
/* A plan: each named worker's share of the batch at `step`. */
void rt_snap_plan(rt_snap *st, long step, double epoch, const char *const *names,
                  const long *shares, int n);

/* The reader's side (status_json.c): a consistent copy, under the lock. */
struct rt_snap_event {
    double t;              /* Unix time */
    char kind[16];
    char text[RT_SNAP_TEXT];
};
struct rt_snap_copy {
    struct rt_snap_run run;
    struct rt_snap_worker w[RT_MAX_WORKERS];
    int nw;
    struct rt_snap_event ev[RT_SNAP_EVENTS];
    int nev;               /* oldest first */
    long events_total;
    struct rt_snap_point pt[RT_SNAP_N][RT_SNAP_POINTS];
    int npt[RT_SNAP_N];
    struct rt_snap_plan plan[RT_SNAP_PLANS];
    int nplan;
    char names[RT_SNAP_NAMES][RT_NAME_MAX]; /* the workers named in plans */
    int nnames;
};
/* Fill *out (a large struct: allocate it) under the lock. */
void rt_snap_copy(rt_snap *st, struct rt_snap_copy *out);

/* Rendering (status_json.c): /api/status and /metrics, from a copy.
 * A malloc'ed NUL-terminated text, or NULL (no memory). */
char *rt_snap_json(const struct rt_snap_copy *c, double now);
char *rt_snap_prometheus(const struct rt_snap_copy *c, double now);

#endif
