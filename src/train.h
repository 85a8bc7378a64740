/* train.h — the training driver: data, model, optimiser, epochs, early
 * stopping, checkpoints, metrics. `ragtag train` and `ragtag eval` are thin
 * wrappers around it. */
#ifndef RT_TRAIN_H
#define RT_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "collective.h"
#include "optim.h"
#include "progress.h"
#include "reporter.h"

enum rt_monitor { RT_MONITOR_VAL_ACC, RT_MONITOR_VAL_LOSS };
/* How several workers train one model (docs/heterogeneous.md). */
enum rt_dist_mode {
    RT_MODE_SYNC,    /* one global batch per step, gradients summed: one machine's maths */
    RT_MODE_AVERAGE, /* local steps, parameters averaged every sync_every steps */
    RT_MODE_GOSSIP,  /* local steps at each worker's pace, pairwise averaging, no barrier */
};
enum rt_partition { RT_PARTITION_BALANCED, RT_PARTITION_STATIC };
/* How gradients (sync) or parameter changes (average) travel between
 * workers: float32, or rounded to 16 bits with error feedback. */
enum rt_compress_kind { RT_COMPRESS_NONE, RT_COMPRESS_FP16, RT_COMPRESS_BF16 };

struct rt_train_testing;

/* The options of a run. Those a user sets are listed, with their ranges,
 * defaults and help, in src/options.def. */
struct rt_train_config {
    char model_path[1024];
    char data_spec[1024];
    float val_frac;       /* validation split of the train set */
    long limit;           /* > 0: use only the first `limit` training images */
    char classes[256];    /* "": all labels; else the labels kept, renumbered (data.h) */
    int epochs;
    int batch;
    uint64_t seed;
    int threads;          /* 0: all cores */
    char backend[32];
    int device;
    struct rt_optim_config optim;
    enum rt_lr_scale lr_scale; /* optim.lr scaled by batch / base_batch (rt_lr_scale_factor) */
    int base_batch;       /* 0: the batch of the model file's [train] section */
    char init_path[1024]; /* --init: tensors to start from (docs/transfer.md) */
    char freeze[256];     /* --freeze: layers kept fixed */
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
    int local_batch;      /* gossip: images per local batch (0: batch / starting workers) */
    long mem_rows;        /* sync, balanced: the most images of a share this worker's memory
                             holds (0: no cap); set by the worker, never sent */
    long replan_every;    /* balanced: re-plan the shares every K steps (default 200) */
    float replan_change;  /* ... and when a speed moved by more than this fraction (0.2) */
    float min_share;      /* standby below this fraction of an equal share (0.1; 0: never) */
    bool overlap;         /* sync: reduce the gradient in buckets while backward runs */
    bool host_replica;    /* sync, one host: one copy of the weights for all its workers */
    int bucket_kb;        /* sync: the least KiB of gradient in one bucket (default 1024) */
    enum rt_compress_kind compress; /* sync, average: 16-bit exchanges (default none) */
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
    uint64_t max_rss;           /* peak resident memory in bytes (getrusage): this
                                   process's; a coordinator's, its largest worker's */
    long records_read;          /* shards:DIR: training and validation records this
                                   process read from disk (a worker: its shares) */
};

/* Run a whole training as configured. Prints progress to stderr. */
int rt_train_run(const struct rt_train_config *c, struct rt_train_result *res);

/* Evaluate weights (a ragtag checkpoint or safetensors file) on the test set
 * (or the validation split when there is none), of the labels `classes`
 * lists (NULL or "": all; renumbered as --classes does); fills the loss, accuracy and
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
                const char *classes, const char *logits_path, struct rt_eval_result *res);

/* Ask a running training to stop at the next step and checkpoint (SIGINT). */
void rt_train_request_stop(void);

/* ---- data-parallel training ----------------------------------------------------
 * A worker (net/worker.c) runs the same trainer with the other workers
 * behind a table of collectives (collective.h), the pairwise links of gossip
 * mode, and a reporter to the coordinator (reporter.h). How a step uses them
 * is the training mode's business (--mode sync|average|gossip; docs/
 * architecture.md): the trainer's loop is the same for all. */
struct rt_train_net {
    rt_collective coll;   /* rank, world and the collectives */
    rt_pairwise pairwise; /* gossip mode (ops NULL: not offered) */
    rt_reporter report;   /* to the coordinator */
    const char *model_text; /* the model file as text (workers have no file) */
};

int rt_train_run_dist(const struct rt_train_config *c, const struct rt_train_net *net,
                      struct rt_train_result *res);

/* The options a worker needs (everything but files, devices and display),
 * as "key", "value" text that rt_train_config_set reads back exactly. */
int rt_train_config_each(const struct rt_train_config *c,
                         int (*fn)(void *arg, const char *key, const char *value), void *arg);

const char *rt_train_mode_name(enum rt_dist_mode m);

#endif
