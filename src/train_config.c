/* train_config.c — the options of a training run: defaults, parsing from
 * flags and from the model file's [train] section (one validation path for
 * both), the help table, and the form sent to workers. */
#include "config.h"

#include "train.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "status.h"

void rt_train_config_defaults(struct rt_train_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->data_spec, sizeof c->data_spec, "fashion-mnist");
    snprintf(c->backend, sizeof c->backend, "cpu");
    c->val_frac = 0.1f;
    c->epochs = 10;
    c->batch = 64;
    c->seed = 1;
    rt_optim_config_defaults(&c->optim);
    c->lr_step_epochs = 0.0f;
    c->optim.gamma = 0.1f;
    c->monitor = RT_MONITOR_VAL_ACC;
    c->progress = RT_PROGRESS_AUTO;
    c->mode = RT_MODE_SYNC;
    c->partition = RT_PARTITION_BALANCED;
    c->sync_every = 8;
    c->replan_every = 200;
    c->replan_change = 0.2f;
    c->min_share = 0.1f;
}

/* ---- option table --------------------------------------------------------- */

const char *const rt_train_option_help[] = {
    "--data SPEC", "fashion-mnist (default), mnist:DIR, idx:DIR, cifar10:DIR, csv:TRAIN[,TEST]",
    "--val F", "fraction of the training set held out for validation (default 0.1; 0: none)",
    "--limit N", "use only the first N training images (0: all)",
    "--epochs N", "epochs to train (default 10)",
    "--batch N", "batch size (default 64)",
    "--lr F", "learning rate (default 0.01)",
    "--optimizer NAME", "sgd (default), adam, adamw, nadam",
    "--momentum F", "SGD momentum (default 0.9)",
    "--nesterov", "Nesterov momentum for SGD",
    "--weight-decay F", "L2 penalty (decoupled for adamw; default 0)",
    "--beta1 F", "Adam beta1 (default 0.9)",
    "--beta2 F", "Adam beta2 (default 0.999)",
    "--eps F", "Adam epsilon (default 1e-8)",
    "--clip-norm F", "clip the gradient's global L2 norm to F (0: off)",
    "--schedule NAME", "constant (default), step, cosine",
    "--lr-step E", "step schedule: multiply the lr by --lr-gamma every E epochs",
    "--lr-gamma F", "step schedule factor (default 0.1)",
    "--min-lr F", "cosine schedule floor (default 0)",
    "--warmup E", "linear warm-up over E epochs (may be fractional)",
    "--seed N", "seed for init, shuffling, split and dropout (default 1)",
    "--threads N", "compute threads (default 0: all cores)",
    "--backend NAME", "compute backend (default cpu; see ragtag devices)",
    "--device N", "device index within the backend (default 0)",
    "--patience N", "early stopping: stop after N epochs without improvement, restore the best weights",
    "--monitor M", "val_acc (default) or val_loss",
    "--min-delta F", "smallest change of the monitored metric that counts as improvement",
    "--checkpoint DIR", "write DIR/last.safetensors every epoch (and DIR/best.safetensors)",
    "--resume", "continue from DIR/last.safetensors of --checkpoint",
    "--metrics FILE", "append one JSON object per epoch (and per --log-every steps)",
    "--log-every N", "also write a metrics line every N steps",
    "--progress MODE", "auto (default: bar on a terminal), bar, lines, off",
    "--save FILE", "write the final weights to FILE (safetensors)",
    "--mode M", "several workers: sync (default), average or gossip (docs/heterogeneous.md)",
    "--partition P", "sync/average: balanced (default: shares by measured speed) or static",
    "--sync-every H", "average mode: average the parameters every H steps (default 8)",
    "--replan-every K", "balanced: re-plan the shares every K steps (default 200; 0: only on change)",
    "--replan-change F", "balanced: and when a worker's speed moved by more than F (default 0.2)",
    "--min-share F", "standby for a worker slower than F x an equal share (default 0.1; 0: never)",
    NULL, NULL,
};

static void normalise_key(char *dst, size_t n, const char *key)
{
    size_t i = 0;
    for (; key[i] && i + 1 < n; i++)
        dst[i] = key[i] == '-' ? '_' : key[i];
    dst[i] = '\0';
}

static int bad_value(const char *where, const char *key, const char *value, const char *accepted)
{
    return rt_error(RT_ERR_CONFIG, "%s: %s: '%s' is not accepted (expected %s)", where, key,
                    value, accepted);
}

static int parse_double(const char *where, const char *key, const char *s, double lo, double hi,
                        bool lo_open, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
        char acc[128];
        if (hi >= 1e300)
            snprintf(acc, sizeof acc, "a number %s %g", lo_open ? ">" : ">=", lo);
        else
            snprintf(acc, sizeof acc, "a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
        return bad_value(where, key, s, acc);
    }
    *out = v;
    return RT_OK;
}

static int parse_long(const char *where, const char *key, const char *s, long lo, long hi,
                      long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) {
        char acc[96];
        snprintf(acc, sizeof acc, "an integer from %ld to %ld", lo, hi);
        return bad_value(where, key, s, acc);
    }
    *out = v;
    return RT_OK;
}

static int parse_bool(const char *where, const char *key, const char *s, bool *out)
{
    if (!strcmp(s, "1") || !strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
        *out = true;
    else if (!strcmp(s, "0") || !strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
        *out = false;
    else
        return bad_value(where, key, s, "1/0, true/false, yes/no or on/off");
    return RT_OK;
}

static int set_str(char *dst, size_t n, const char *where, const char *key, const char *v)
{
    if (!*v || strlen(v) >= n)
        return bad_value(where, key, v, "a non-empty value shorter than the limit");
    snprintf(dst, n, "%s", v);
    return RT_OK;
}

static const char *const known_keys[] = {
    "data", "val", "limit", "epochs", "batch", "lr", "optimizer", "momentum", "nesterov",
    "weight_decay", "beta1", "beta2", "eps", "clip_norm", "schedule", "lr_step", "lr_gamma",
    "min_lr", "warmup", "seed", "threads", "backend", "device", "patience", "monitor",
    "min_delta", "checkpoint", "resume", "metrics", "log_every", "progress", "save", "mode",
    "partition", "sync_every", "replan_every", "replan_change", "min_share", NULL,
};

bool rt_train_config_known(const char *key)
{
    char k[64];
    normalise_key(k, sizeof k, key);
    for (int i = 0; known_keys[i]; i++)
        if (!strcmp(k, known_keys[i]))
            return true;
    return false;
}

int rt_train_config_set(struct rt_train_config *c, const char *key_in, const char *v,
                        const char *where)
{
    char key[64];
    double d;
    long l;
    normalise_key(key, sizeof key, key_in);
    struct rt_optim_config *o = &c->optim;

#define DBL(name, lo, hi, open, dst)                                                   \
    if (!strcmp(key, name)) {                                                          \
        RT_TRY(parse_double(where, key, v, lo, hi, open, &d));                          \
        dst = (float)d;                                                                \
        return RT_OK;                                                                  \
    }
#define LNG(name, lo, hi, dst)                                                         \
    if (!strcmp(key, name)) {                                                          \
        RT_TRY(parse_long(where, key, v, lo, hi, &l));                                  \
        dst = l;                                                                       \
        return RT_OK;                                                                  \
    }
    DBL("val", 0.0, 0.9, false, c->val_frac)
    LNG("limit", 0, LONG_MAX, c->limit)
    LNG("epochs", 1, 1000000, c->epochs)
    LNG("batch", 1, 1 << 20, c->batch)
    DBL("lr", 0.0, 1e6, true, o->lr)
    DBL("momentum", 0.0, 0.999999, false, o->momentum)
    DBL("weight_decay", 0.0, 1e6, false, o->weight_decay)
    DBL("beta1", 0.0, 0.999999, false, o->beta1)
    DBL("beta2", 0.0, 0.999999999, false, o->beta2)
    DBL("eps", 0.0, 1.0, true, o->eps)
    DBL("clip_norm", 0.0, 1e30, false, o->clip_norm)
    DBL("lr_step", 0.0, 1e9, true, c->lr_step_epochs)
    DBL("lr_gamma", 0.0, 1e6, true, o->gamma)
    DBL("min_lr", 0.0, 1e6, false, o->min_lr)
    DBL("warmup", 0.0, 1e9, false, c->warmup_epochs)
    LNG("threads", 0, 4096, c->threads)
    LNG("device", 0, 1 << 16, c->device)
    LNG("patience", 0, 1000000, c->patience)
    DBL("min_delta", 0.0, 1e30, false, c->min_delta)
    LNG("log_every", 0, LONG_MAX, c->log_every)
    LNG("sync_every", 1, 1000000, c->sync_every)
    LNG("replan_every", 0, LONG_MAX, c->replan_every)
    DBL("replan_change", 0.0, 100.0, false, c->replan_change)
    DBL("min_share", 0.0, 1.0, false, c->min_share)
#undef DBL
#undef LNG
    if (!strcmp(key, "seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (end == v || *end || errno || v[0] == '-')
            return bad_value(where, key, v, "a non-negative integer");
        c->seed = s;
        return RT_OK;
    }
    if (!strcmp(key, "optimizer")) {
        if (rt_optim_kind_parse(v, &o->kind) < 0)
            return bad_value(where, key, v, "sgd, adam, adamw or nadam");
        return RT_OK;
    }
    if (!strcmp(key, "schedule")) {
        if (rt_sched_kind_parse(v, &o->schedule) < 0)
            return bad_value(where, key, v, "constant, step or cosine");
        return RT_OK;
    }
    if (!strcmp(key, "monitor")) {
        if (!strcmp(v, "val_acc"))
            c->monitor = RT_MONITOR_VAL_ACC;
        else if (!strcmp(v, "val_loss"))
            c->monitor = RT_MONITOR_VAL_LOSS;
        else
            return bad_value(where, key, v, "val_acc or val_loss");
        return RT_OK;
    }
    if (!strcmp(key, "progress")) {
        static const char *const modes[] = {"auto", "bar", "lines", "off"};
        for (int i = 0; i < 4; i++)
            if (!strcmp(v, modes[i])) {
                c->progress = (enum rt_progress_mode)i;
                return RT_OK;
            }
        return bad_value(where, key, v, "auto, bar, lines or off");
    }
    if (!strcmp(key, "mode")) {
        static const char *const modes[] = {"sync", "average", "gossip"};
        for (int i = 0; i < 3; i++)
            if (!strcmp(v, modes[i])) {
                c->mode = (enum rt_dist_mode)i;
                return RT_OK;
            }
        return bad_value(where, key, v, "sync, average or gossip");
    }
    if (!strcmp(key, "partition")) {
        if (!strcmp(v, "balanced"))
            c->partition = RT_PARTITION_BALANCED;
        else if (!strcmp(v, "static"))
            c->partition = RT_PARTITION_STATIC;
        else
            return bad_value(where, key, v, "balanced or static");
        return RT_OK;
    }
    if (!strcmp(key, "nesterov"))
        return parse_bool(where, key, v, &o->nesterov);
    if (!strcmp(key, "resume"))
        return parse_bool(where, key, v, &c->resume);
    if (!strcmp(key, "data"))
        return set_str(c->data_spec, sizeof c->data_spec, where, key, v);
    if (!strcmp(key, "backend"))
        return set_str(c->backend, sizeof c->backend, where, key, v);
    if (!strcmp(key, "checkpoint"))
        return set_str(c->checkpoint_dir, sizeof c->checkpoint_dir, where, key, v);
    if (!strcmp(key, "metrics"))
        return set_str(c->metrics_path, sizeof c->metrics_path, where, key, v);
    if (!strcmp(key, "save"))
        return set_str(c->save_path, sizeof c->save_path, where, key, v);
    return rt_error(RT_ERR_CONFIG, "%s: unknown training option '%s' (see ragtag train --help)",
                    where, key_in);
}


/* Merge the model file's [train] section into c. */
static int apply_model_options(struct rt_train_config *c, const rt_model *m)
{
    for (int i = 0; i < rt_model_train_option_count(m); i++) {
        struct rt_train_option o = rt_model_train_option(m, i);
        char where[1100];
        snprintf(where, sizeof where, "%s:%d", o.file, o.line);
        RT_TRY(rt_train_config_set(c, o.key, o.value, where));
    }
    return RT_OK;
}

int rt_train_config_from_model(struct rt_train_config *c, const char *model_path)
{
    rt_dev *dev = rt_dev_open("cpu", 0, 1);
    if (!dev)
        return RT_ERR_DEVICE;
    rt_model *m = rt_model_load(model_path, dev, 1);
    int rc = m ? apply_model_options(c, m) : RT_ERR_CONFIG;
    if (m)
        snprintf(c->model_path, sizeof c->model_path, "%s", model_path);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    return rc;
}

const char *rt_train_mode_name(enum rt_dist_mode m)
{
    return m == RT_MODE_AVERAGE ? "average" : m == RT_MODE_GOSSIP ? "gossip" : "sync";
}

int rt_train_config_each(const struct rt_train_config *c,
                         int (*fn)(void *arg, const char *key, const char *value), void *arg)
{
    char v[64];
    const struct rt_optim_config *o = &c->optim;
    /* %.9g prints every float so that strtod + (float) gives it back. */
#define EMIT(k, ...)                                                                   \
    do {                                                                               \
        snprintf(v, sizeof v, __VA_ARGS__);                                            \
        RT_TRY(fn(arg, k, v));                                                         \
    } while (0)
    RT_TRY(fn(arg, "data", c->data_spec));
    EMIT("val", "%.9g", (double)c->val_frac);
    EMIT("limit", "%ld", c->limit);
    EMIT("epochs", "%d", c->epochs);
    EMIT("batch", "%d", c->batch);
    EMIT("lr", "%.9g", (double)o->lr);
    RT_TRY(fn(arg, "optimizer", rt_optim_kind_name(o->kind)));
    EMIT("momentum", "%.9g", (double)o->momentum);
    EMIT("nesterov", "%d", o->nesterov ? 1 : 0);
    EMIT("weight_decay", "%.9g", (double)o->weight_decay);
    EMIT("beta1", "%.9g", (double)o->beta1);
    EMIT("beta2", "%.9g", (double)o->beta2);
    EMIT("eps", "%.9g", (double)o->eps);
    EMIT("clip_norm", "%.9g", (double)o->clip_norm);
    RT_TRY(fn(arg, "schedule", rt_sched_kind_name(o->schedule)));
    if (c->lr_step_epochs > 0.0f)
        EMIT("lr_step", "%.9g", (double)c->lr_step_epochs);
    EMIT("lr_gamma", "%.9g", (double)o->gamma);
    EMIT("min_lr", "%.9g", (double)o->min_lr);
    EMIT("warmup", "%.9g", (double)c->warmup_epochs);
    EMIT("seed", "%llu", (unsigned long long)c->seed);
    EMIT("patience", "%d", c->patience);
    RT_TRY(fn(arg, "monitor", c->monitor == RT_MONITOR_VAL_ACC ? "val_acc" : "val_loss"));
    EMIT("min_delta", "%.9g", (double)c->min_delta);
    EMIT("log_every", "%ld", c->log_every);
    RT_TRY(fn(arg, "mode", rt_train_mode_name(c->mode)));
    RT_TRY(fn(arg, "partition", c->partition == RT_PARTITION_STATIC ? "static" : "balanced"));
    EMIT("sync_every", "%d", c->sync_every);
    EMIT("replan_every", "%ld", c->replan_every);
    EMIT("replan_change", "%.9g", (double)c->replan_change);
    EMIT("min_share", "%.9g", (double)c->min_share);
#undef EMIT
    return RT_OK;
}
