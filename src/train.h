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
    long stop_at_step;    /* testing aid: behave as if interrupted (Ctrl-C) right
                             after this step; 0: never. Not a user option. */
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

#endif
