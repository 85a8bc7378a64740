/* reporter.h — where a run's progress, lines, metrics and checkpoints go.
 *
 * In one process: the progress bar, stderr, the --metrics file and the
 * checkpoint directory (src/report_local.c). In a cluster: the worker's link
 * to the coordinator (net/worker.c), which drops what ranks other than 0
 * report, except their parts of a checkpoint. Declared by the core,
 * implemented below it or by net/. */
#ifndef RT_REPORTER_H
#define RT_REPORTER_H

#include <stdbool.h>
#include <stddef.h>

struct rt_train_pos;

/* One field of a metrics line. */
struct rt_train_field {
    const char *key;
    char kind;    /* 'n': num (NaN is null), 'i': integer */
    double num;
    long integer;
};

/* One rank's part of a checkpoint: the position; the parameters and the
 * model state (rank 0, or NULL); the optimiser state of the slice [lo, hi)
 * of the optimiser state (rt_optim_size floats: the trainable parameters,
 * frozen layers left out), nopt buffers of hi - lo floats named opt_names. */
struct rt_ckpt_part {
    const struct rt_train_pos *pos;
    const float *params;
    size_t np;
    const float *state;
    size_t ns;
    const float *const *opt;
    const char *const *opt_names;
    int nopt;
    size_t lo, hi;
};

/* What a resumed run gets back: the same layout, to fill. */
struct rt_ckpt_restore {
    struct rt_train_pos *pos;
    float *params;
    size_t np;
    float *state;
    size_t ns;
    float *const *opt;
    int nopt;
    size_t lo, hi;
    float *best;    /* the best weights (params then state), when kept */
    bool have_best; /* out: the checkpoint had them */
};

struct rt_reporter_ops {
    /* The model and data are ready: this worker's measured images/s and a
     * one-line summary of the run; returns when the run may start (every
     * worker is ready): 0, or 1 when a run under way took this worker in
     * (the members hand it their state), or 2 when it is asked to measure
     * its speed again (too slow yet to take a share), or 3 when a member was
     * lost while the first ring formed and this worker starts in a later
     * generation (the members agree on one state). NULL in one process. */
    int (*ready)(void *ctx, double images_per_s, const char *summary);
    /* The training thread made progress (a step, a batch of an
     * evaluation): a worker's heartbeats say it is alive only while it does
     * (net/comm.c). Optional. */
    void (*alive)(void *ctx);
    /* Within an epoch: batches done of total, running loss and accuracy,
     * images/s, seconds left. Called often; rate-limited by the caller. */
    void (*progress)(void *ctx, int epoch, int epochs, long done, long total, double loss,
                     double acc, double img_s, double eta_s);
    /* A line for the person watching (epoch summaries, plans). */
    int (*line)(void *ctx, const char *text);
    /* A line of the metrics file. */
    int (*metrics)(void *ctx, const struct rt_train_field *f, int n);
    /* Whoever watches asked the run to stop (Ctrl-C on the coordinator). */
    bool (*stop_requested)(void *ctx);
    /* Workers: this rank's part of checkpoint `which` ("last", "best",
     * "final"), assembled and written by the coordinator. */
    int (*checkpoint)(void *ctx, const char *which, const struct rt_ckpt_part *part);
    /* Workers, once after ready: fill `r` from the checkpoint the run
     * resumes and return 1; 0 when it starts afresh. Sizes are checked. */
    int (*restore)(void *ctx, struct rt_ckpt_restore *r);
    /* Workers, at each step boundary (steps done so far): returns when the
     * run may go on, i.e. when whoever keeps the run's files is not too far
     * behind (a bounded run-ahead). NULL: never waits. */
    int (*pace)(void *ctx, long steps_done);
};

typedef struct rt_reporter {
    const struct rt_reporter_ops *ops;
    void *ctx;
    bool want_checkpoints; /* workers: the coordinator keeps last/best checkpoints */
    bool want_final;       /* ... and the final weights (--save) */
} rt_reporter;

#endif
