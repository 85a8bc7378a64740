/* train.h — the training driver: data, model, optimiser, epochs, early
 * stopping, checkpoints, metrics. `ragtag train` and `ragtag eval` are thin
 * wrappers around it. */
#ifndef RT_TRAIN_H
#define RT_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "optim.h"

enum rt_monitor { RT_MONITOR_VAL_ACC, RT_MONITOR_VAL_LOSS };
enum rt_progress_mode { RT_PROGRESS_AUTO, RT_PROGRESS_BAR, RT_PROGRESS_LINES, RT_PROGRESS_OFF };
/* How several workers train one model (docs/heterogeneous.md). */
enum rt_dist_mode {
    RT_MODE_SYNC,    /* one global batch per step, gradients summed: one machine's maths */
    RT_MODE_AVERAGE, /* local steps, parameters averaged every sync_every steps */
    RT_MODE_GOSSIP,  /* local steps at each worker's pace, pairwise averaging, no barrier */
};
enum rt_partition { RT_PARTITION_BALANCED, RT_PARTITION_STATIC };

struct rt_train_testing;

/* The options of a run. Those a user sets are listed, with their ranges,
 * defaults and help, in src/options.def. */
struct rt_train_config {
    char model_path[1024];
    char data_spec[1024];
    float val_frac;       /* validation split of the train set */
    long limit;           /* > 0: use only the first `limit` training images */
    int epochs;
    int batch;
    uint64_t seed;
    int threads;          /* 0: all cores */
    char backend[32];
    int device;
    struct rt_optim_config optim;
    float warmup_epochs;  /* converted to optim.warmup_steps */
    float lr_step_epochs; /* step schedule period, converted to optim.step_size */
    int patience;         /* 0: no early stopping */
    enum rt_monitor monitor;
    float min_delta;      /* improvement smaller than this does not count */
    char checkpoint_dir[1024];
    bool resume;
    char metrics_path[1024];
    long log_every;       /* > 0: a metrics line every N steps */
    enum rt_progress_mode progress;
    char save_path[1024]; /* final weights (safetensors), optional */
    /* Several workers (ignored by a single process). */
    enum rt_dist_mode mode;
    enum rt_partition partition;
    int sync_every;       /* average mode: steps between averagings (default 8) */
    long replan_every;    /* balanced: re-plan the shares every K steps (default 200) */
    float replan_change;  /* ... and when a speed moved by more than this fraction (0.2) */
    float min_share;      /* standby below this fraction of an equal share (0.1; 0: never) */
    /* NULL. Testing aids (throttling, a simulated interrupt) that tests and
     * `ragtag worker --throttle` set: src/train-testing.h, not installed. */
    const struct rt_train_testing *testing;
};

void rt_train_config_defaults(struct rt_train_config *c);

/* Set one option by name ("lr", "optimizer", "weight_decay"/"weight-decay",
 * ...) from its text. `where` names its origin for messages: "--lr" or
 * "examples/lenet.cfg:12". RT_ERR_CONFIG saying what is accepted. */
int rt_train_config_set(struct rt_train_config *c, const char *key, const char *value,
                        const char *where);
/* Start from the model file's [train] section (errors name file:line). */
int rt_train_config_from_model(struct rt_train_config *c, const char *model_path);

/* Whether `key` names an option (so the CLI can tell flags from typos). */
bool rt_train_config_known(const char *key);
/* Whether option `key` is a bool, so that its flag takes no value. */
bool rt_train_config_is_bool(const char *key);
/* Whether option `key` is one that workers receive (rt_train_config_each). */
bool rt_train_config_is_sent(const char *key);
/* rt_train_config_each gives at most this many options. */
#define RT_TRAIN_OPTIONS_MAX 64
/* The option names and one-line help, NULL-terminated pairs, for --help. */
extern const char *const rt_train_option_help[];

struct rt_train_result {
    int epochs_run;
    long steps;
    double train_loss, train_acc;
    double val_loss, val_acc;
    double test_loss, test_acc; /* -1 when there is no test set */
    double images_per_s;        /* last epoch, training steps only */
    double seconds;             /* whole run */
    bool stopped_early;
    int best_epoch;             /* 1-based; 0 when not monitored */
    uint64_t params_hash;       /* data-parallel runs: FNV-1a of the final parameters
                                   and state, equal on every replica */
    /* data-parallel runs, this worker: */
    long local_steps;           /* local optimiser steps (average, gossip) */
    double train_seconds;       /* in its epochs' step loops, with the wait for the others
                                   at each epoch's end (gossip) */
    long gossip_averagings;     /* pairwise averagings applied (gossip) */
    long plans;                 /* share plans made (balanced) */
};

/* Run a whole training as configured. Prints progress to stderr. */
int rt_train_run(const struct rt_train_config *c, struct rt_train_result *res);

/* Evaluate weights (a ragtag checkpoint or safetensors file) on the test set
 * (or the validation split when there is none); fills the loss, accuracy and
 * a classes x classes confusion matrix (rows: true, columns: predicted)
 * allocated with malloc. */
struct rt_eval_result {
    double loss, acc;
    long n;
    int classes;
    long *confusion;
    char set_name[32];
};
int rt_eval_run(const char *model_path, const char *weights_path, const char *data_spec,
                const char *backend, int device, int threads, int batch, long limit,
                struct rt_eval_result *res);

/* Ask a running training to stop at the next step and checkpoint (SIGINT). */
void rt_train_request_stop(void);

/* ---- data-parallel training ----------------------------------------------------
 * net/ (a worker) runs the same driver with a struct rt_train_comm: the
 * "gradients ready" hook of the design. Each step a worker computes the
 * gradient of its share of the global batch (scaled by 1/B of the WHOLE
 * batch), reduce-scatters it, applies the optimiser to its own slice of the
 * parameters on the host (the optimiser state is split N ways), and
 * all-gathers the parameters. Metrics are reduced; rank 0 decides early
 * stopping and reports to the coordinator, which writes files. */

/* One field of a metrics line, for rank 0 to send to the coordinator. */
struct rt_train_field {
    const char *key;
    char kind;    /* 'n': num (NaN is null), 'i': integer */
    double num;
    long integer;
};

struct rt_train_pos;

struct rt_train_comm {
    void *ctx;
    int rank, world;
    const char *model_text; /* the model file as text (workers have no file) */
    bool want_checkpoints;  /* the coordinator writes last/best checkpoints */
    bool want_final;        /* ... and the final weights (--save) */
    /* Model and data are ready: report the measured images/s of this worker
     * and a one-line summary of the run, and wait until every worker is
     * (the ring is formed here). */
    int (*ready)(void *ctx, double images_per_s, const char *summary);
    int (*reduce_scatter)(void *ctx, float *buf, size_t n, uint32_t *flags);
    int (*all_gather)(void *ctx, float *buf, size_t n, uint32_t *flags);
    int (*allreduce)(void *ctx, float *buf, size_t n, uint32_t *flags);
    int (*allreduce_f64)(void *ctx, double *buf, size_t n);
    int (*broadcast)(void *ctx, void *buf, size_t bytes, int root);
    bool (*stop_requested)(void *ctx);
    /* Gossip mode only (may be NULL otherwise). At a step boundary, never
     * waiting: answer peers' averaging requests, apply replies, start an
     * exchange with a random peer; returns the averagings applied to
     * params (host, n floats) or < 0. */
    int (*gossip_step)(void *ctx, float *params, size_t n, bool initiate);
    /* Once, on every rank together, before the first epoch: set up the
     * pairwise links for n floats, epochs numbered from first_epoch. */
    int (*gossip_begin)(void *ctx, size_t n, long first_epoch);
    /* Before the epoch's end collectives: finish this rank's exchanges and
     * wait until no peer has one in flight (epoch numbers the round). */
    int (*gossip_drain)(void *ctx, float *params, size_t n, long epoch);
    /* rank 0 only: progress, epoch lines and metrics lines */
    void (*progress)(void *ctx, int epoch, int epochs, long done, long total, double loss,
                     double acc, double img_s, double eta_s);
    int (*line)(void *ctx, const char *text);
    int (*metrics)(void *ctx, const struct rt_train_field *f, int n);
    /* Optional, after ready: when the run resumes a checkpoint, fill the
     * host copies — all parameters and state, this rank's optimiser slice
     * [lo, hi) of each of the nopt buffers, the position, and the best
     * weights (params then state) when the checkpoint had them (*have_best)
     * — and return 1; 0 when starting afresh. Sizes are checked inside. */
    int (*restore)(void *ctx, struct rt_train_pos *pos, float *params, size_t np, float *state,
                   size_t ns, float *const *opt, int nopt, size_t lo, size_t hi, float *best,
                   bool *have_best);
    /* Every rank's part of checkpoint `which` ("last", "best", "final"):
     * the optimiser state of its slice [lo, hi) (none for best/final);
     * rank 0 adds the parameters and the state buffer. */
    int (*checkpoint)(void *ctx, const char *which, const struct rt_train_pos *pos,
                      const float *params, size_t np, const float *state, size_t ns,
                      const float *const *opt, const char *const *opt_names, int nopt,
                      size_t lo, size_t hi);
};

int rt_train_run_dist(const struct rt_train_config *c, const struct rt_train_comm *comm,
                      struct rt_train_result *res);

/* The options a worker needs (everything but files, devices and display),
 * as "key", "value" text that rt_train_config_set reads back exactly. */
int rt_train_config_each(const struct rt_train_config *c,
                         int (*fn)(void *arg, const char *key, const char *value), void *arg);

const char *rt_train_mode_name(enum rt_dist_mode m);

/* This rank's share [*lo, *hi) of n items cut into `world` parts. */
void rt_train_share(long n, int world, int rank, long *lo, long *hi);

#endif
