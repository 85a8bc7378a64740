/* train.c — the training driver.
 *
 * One place decides everything about a run: options (from the model file's
 * [train] section, then flags, validated by one table), the epoch loop,
 * evaluation, early stopping, checkpoints, metrics. The step itself is
 * forward -> loss -> backward -> optimiser, all through the kernel table;
 * the only host<->device traffic per step is the batch upload and the
 * per-sample losses the model downloads for the running metrics. */
#include "config.h"

#include "train.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "checkpoint.h"
#include "data.h"
#include "metrics.h"
#include "model.h"
#include "progress.h"
#include "status.h"

static volatile sig_atomic_t stop_requested;

void rt_train_request_stop(void) { stop_requested = 1; }

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
    "min_delta", "checkpoint", "resume", "metrics", "log_every", "progress", "save", NULL,
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

/* ---- helpers ---------------------------------------------------------------- */

/* A different, reproducible dropout seed for every step. */
static uint64_t step_seed(uint64_t seed, long step)
{
    uint64_t z = seed ^ ((uint64_t)step * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static int ensure_dir(const char *dir)
{
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
            return RT_OK;
        return rt_error(RT_ERR_IO, "checkpoint directory %s exists and is not a directory", dir);
    }
    return rt_error(RT_ERR_IO, "cannot create checkpoint directory %s: %s", dir, strerror(errno));
}

/* The sample shape of the model must be the data's, and the data's labels
 * must fit the model's classes: say which numbers disagree. */
static int check_model_fits(const rt_model *m, const rt_dataset *ds, const char *model_path)
{
    struct rt_shape s = rt_model_input_shape(m);
    if (s.c != ds->c || s.h != ds->h || s.w != ds->w)
        return rt_error(RT_ERR_SHAPE,
                        "%s takes %dx%dx%d inputs (WxHxC) but data set %s has %dx%dx%d images",
                        model_path, s.w, s.h, s.c, ds->name, ds->w, ds->h, ds->c);
    if (rt_model_classes(m) < ds->classes)
        return rt_error(RT_ERR_SHAPE, "%s has %d classes but data set %s has labels up to %d",
                        model_path, rt_model_classes(m), ds->name, ds->classes - 1);
    return RT_OK;
}

/* Everything one evaluation pass needs, reused across epochs. */
struct evaluator {
    rt_model *m;
    rt_dev *dev;
    rt_buf *x, *y;
    float *probs;
};

/* Loss and accuracy of `ds` in inference mode; fills `confusion` (classes^2)
 * when given. */
static int evaluate(struct evaluator *ev, const rt_dataset *ds, int batch, double *loss,
                    double *acc, long *confusion)
{
    rt_loader *l = rt_loader_new(ds, batch, false, 0);
    if (!l)
        return rt_error_wrap(RT_ERR_NOMEM, "evaluating on %s", ds->name);
    int rc = rt_loader_start(l, 0, 0);
    double loss_sum = 0.0;
    long correct = 0, seen = 0;
    int classes = rt_model_classes(ev->m);
    const float *x;
    const int32_t *y;
    int n;
    size_t chw = (size_t)ds->c * ds->h * ds->w;
    while (rc >= 0 && (rc = rt_loader_next(l, &x, &y, &n)) > 0) {
        rc = rt_upload(ev->dev, rt_buf_view(ev->x), x, (size_t)n * chw * sizeof(float));
        if (rc >= 0)
            rc = rt_upload(ev->dev, rt_buf_view(ev->y), y, (size_t)n * sizeof(int32_t));
        if (rc >= 0)
            rc = rt_model_forward(ev->m, rt_buf_view(ev->x), n, false, 0);
        if (rc >= 0)
            rc = rt_model_loss(ev->m, rt_buf_view(ev->y), n, &loss_sum, &correct,
                               confusion ? ev->probs : NULL);
        if (rc >= 0 && confusion) {
            for (int i = 0; i < n; i++) {
                const float *p = ev->probs + (size_t)i * classes;
                int best = 0;
                for (int k = 1; k < classes; k++)
                    if (p[k] > p[best])
                        best = k;
                confusion[(size_t)y[i] * classes + best]++;
            }
        }
        seen += n;
    }
    rt_loader_destroy(&l);
    if (rc < 0)
        return rc;
    *loss = seen ? loss_sum / (double)seen : NAN;
    *acc = seen ? (double)correct / (double)seen : NAN;
    return RT_OK;
}

static int evaluator_init(struct evaluator *ev, rt_model *m, rt_dev *dev, int batch,
                          const rt_dataset *shape_of)
{
    memset(ev, 0, sizeof *ev);
    ev->m = m;
    ev->dev = dev;
    size_t chw = (size_t)shape_of->c * shape_of->h * shape_of->w;
    ev->x = rt_buf_new(dev, (size_t)batch * chw * sizeof(float));
    ev->y = rt_buf_new(dev, (size_t)batch * sizeof(int32_t));
    ev->probs = malloc((size_t)batch * rt_model_classes(m) * sizeof(float));
    if (!ev->x || !ev->y || !ev->probs)
        return rt_error(RT_ERR_NOMEM, "cannot allocate batch buffers of %d images", batch);
    return RT_OK;
}

static void evaluator_free(struct evaluator *ev)
{
    rt_buf_destroy(&ev->x);
    rt_buf_destroy(&ev->y);
    free(ev->probs);
    ev->probs = NULL;
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

static bool improved(const struct rt_train_config *c, double value, double best, bool have_best)
{
    if (!have_best)
        return isfinite(value);
    if (c->monitor == RT_MONITOR_VAL_ACC)
        return value > best + c->min_delta;
    return value < best - c->min_delta;
}

/* ---- the run -------------------------------------------------------------------- */

int rt_train_run(const struct rt_train_config *cin, struct rt_train_result *res)
{
    struct rt_train_config c = *cin;
    struct rt_data data = {0};
    rt_dev *dev = NULL;
    rt_model *m = NULL;
    rt_optim *opt = NULL;
    rt_loader *loader = NULL;
    rt_metrics *mf = NULL;
    rt_buf *xb = NULL, *yb = NULL;
    struct evaluator ev = {0};
    char last_path[1100] = "", best_path[1100] = "";
    float *best_host = NULL;
    int rc;
    double t_run = rt_now();
    rt_progress prog;
    char line[1024];

    memset(res, 0, sizeof *res);
    res->test_loss = res->test_acc = -1.0;
    stop_requested = 0;
    rt_progress_init(&prog, stderr, c.progress);

    if (c.patience > 0 && c.val_frac <= 0.0f)
        return rt_error(RT_ERR_CONFIG, "--patience needs a validation split: give --val F > 0");
    if (c.resume && !c.checkpoint_dir[0])
        return rt_error(RT_ERR_CONFIG, "--resume needs --checkpoint DIR to resume from");

    rc = rt_data_open(c.data_spec, c.val_frac, c.limit, c.seed, &data);
    if (rc < 0)
        goto out;
    dev = rt_dev_open(c.backend, c.device, c.threads);
    if (!dev) {
        rc = RT_ERR_DEVICE;
        goto out;
    }
    m = rt_model_load(c.model_path, dev, c.batch);
    if (!m) {
        rc = RT_ERR_CONFIG;
        goto out;
    }
    if ((rc = check_model_fits(m, data.train, c.model_path)) < 0)
        goto out;
    if ((rc = rt_model_init(m, c.seed)) < 0)
        goto out;

    long ntrain = data.train->n;
    long spe = (ntrain + c.batch - 1) / c.batch; /* steps per epoch */
    if (spe == 0) {
        rc = rt_error(RT_ERR_CONFIG, "data set %s has no training images", data.train->name);
        goto out;
    }
    c.optim.total_steps = (long)c.epochs * spe;
    c.optim.warmup_steps = (long)lround(c.warmup_epochs * (double)spe);
    if (c.optim.schedule == RT_SCHED_STEP) {
        if (c.lr_step_epochs <= 0.0f) {
            rc = rt_error(RT_ERR_CONFIG, "--schedule step needs --lr-step E (epochs between decays)");
            goto out;
        }
        c.optim.step_size = (long)fmax(1.0, lround(c.lr_step_epochs * (double)spe));
    }
    opt = rt_optim_new(dev, &c.optim, rt_model_param_count(m));
    if (!opt) {
        rc = RT_ERR_CONFIG; /* rt_optim_new left the reason in the detail */
        goto out;
    }
    size_t chw = (size_t)data.train->c * data.train->h * data.train->w;
    xb = rt_buf_new(dev, (size_t)c.batch * chw * sizeof(float));
    yb = rt_buf_new(dev, (size_t)c.batch * sizeof(int32_t));
    if (!xb || !yb) {
        rc = rt_error(RT_ERR_NOMEM, "cannot allocate a batch of %d images on %s", c.batch,
                      c.backend);
        goto out;
    }
    if ((rc = evaluator_init(&ev, m, dev, c.batch, data.train)) < 0)
        goto out;

    struct rt_train_pos pos = {.epoch = 0, .step = 0, .seed = c.seed, .best_metric = NAN};
    bool have_best = false;
    if (c.checkpoint_dir[0]) {
        if ((rc = ensure_dir(c.checkpoint_dir)) < 0)
            goto out;
        snprintf(last_path, sizeof last_path, "%s/last.safetensors", c.checkpoint_dir);
        snprintf(best_path, sizeof best_path, "%s/best.safetensors", c.checkpoint_dir);
    }
    if (c.resume) {
        if (!file_exists(last_path)) {
            fprintf(stderr, "ragtag: no checkpoint at %s yet: starting from scratch\n", last_path);
        } else {
            rc = rt_checkpoint_load(last_path, m, opt, &pos);
            if (rc < 0)
                goto out;
            if (pos.seed != c.seed) {
                rc = rt_error(RT_ERR_CONFIG,
                              "%s was trained with --seed %llu, not %llu: resume with the same "
                              "seed (the data order and split depend on it)",
                              last_path, (unsigned long long)pos.seed,
                              (unsigned long long)c.seed);
                goto out;
            }
            if (pos.step > pos.epoch * spe + spe || pos.step < pos.epoch * spe) {
                rc = rt_error(RT_ERR_CONFIG,
                              "%s stopped at step %ld of epoch %ld, which does not fit %ld steps "
                              "per epoch: resume with the same data, --limit, --val and --batch",
                              last_path, pos.step, pos.epoch + 1, spe);
                goto out;
            }
            rt_optim_set_steps(opt, pos.step);
            have_best = isfinite(pos.best_metric);
            fprintf(stderr, "ragtag: resumed from %s at epoch %ld, step %ld\n", last_path,
                    pos.epoch, pos.step);
        }
    }
    if (c.patience > 0 && !c.checkpoint_dir[0]) {
        best_host = malloc((rt_model_param_count(m) + rt_model_state_count(m)) * sizeof(float));
        if (!best_host) {
            rc = rt_error(RT_ERR_NOMEM, "no memory for a copy of the best weights");
            goto out;
        }
    }
    if (c.metrics_path[0] && !(mf = rt_metrics_open(c.metrics_path))) {
        rc = RT_ERR_IO;
        goto out;
    }
    loader = rt_loader_new(data.train, c.batch, true, c.seed);
    if (!loader) {
        rc = RT_ERR_NOMEM;
        goto out;
    }

    if (c.progress != RT_PROGRESS_OFF)
        rt_model_summary(m, stderr);
    fprintf(stderr, "ragtag: training %s on %s (%ld train, %d val, %d test images), %s backend, "
                    "%zu parameters, %s lr %g, batch %d, %d epochs\n",
            c.model_path, data.train->name, ntrain, data.val ? data.val->n : 0,
            data.test ? data.test->n : 0, c.backend, rt_model_param_count(m),
            rt_optim_kind_name(c.optim.kind), c.optim.lr, c.batch, c.epochs);

    bool stop_early = false;
    for (long epoch = pos.epoch; epoch < c.epochs && !stop_early; epoch++) {
        double t_epoch = rt_now(), t_train = 0.0;
        double loss_sum = 0.0;
        long correct = 0, seen = 0;
        long first = pos.step - epoch * spe;
        if ((rc = rt_loader_start(loader, epoch, first)) < 0)
            goto out;
        const float *x;
        const int32_t *y;
        int n;
        double t0 = rt_now();
        double win_loss = 0.0;
        long win_correct = 0, win_seen = 0;
        while ((rc = rt_loader_next(loader, &x, &y, &n)) > 0) {
            if ((rc = rt_upload(dev, rt_buf_view(xb), x, (size_t)n * chw * sizeof(float))) < 0 ||
                (rc = rt_upload(dev, rt_buf_view(yb), y, (size_t)n * sizeof(int32_t))) < 0 ||
                (rc = rt_model_forward(m, rt_buf_view(xb), n, true, step_seed(c.seed, pos.step))) < 0)
                goto out;
            double bl = 0.0;
            long bc = 0;
            if ((rc = rt_model_loss(m, rt_buf_view(yb), n, &bl, &bc, NULL)) < 0 ||
                (rc = rt_model_backward(m, rt_buf_view(xb), rt_buf_view(yb), n, 1.0f / (float)n)) < 0 ||
                (rc = rt_optim_step(opt, rt_model_params(m), rt_model_grads(m))) < 0)
                goto out;
            pos.step++;
            loss_sum += bl;
            correct += bc;
            seen += n;
            win_loss += bl;
            win_correct += bc;
            win_seen += n;
            double now = rt_now();
            t_train = now - t0;
            if (!isfinite(bl)) {
                rc = rt_error(RT_ERR_CONFIG,
                              "training diverged at step %ld (epoch %ld): the loss is %g; try a "
                              "smaller --lr or --clip-norm",
                              pos.step, epoch + 1, bl);
                goto out;
            }
            long done = pos.step - epoch * spe;
            double ips = seen / fmax(t_train, 1e-9);
            rt_progress_step(&prog, (int)epoch + 1, c.epochs, done, spe, loss_sum / seen,
                             (double)correct / seen, ips, (double)(spe - done) * c.batch / ips);
            if (mf && c.log_every > 0 && pos.step % c.log_every == 0) {
                rt_metrics_begin(mf);
                rt_metrics_int(mf, "step", pos.step);
                rt_metrics_num(mf, "epoch", (double)epoch + (double)done / (double)spe);
                rt_metrics_num(mf, "loss", win_loss / win_seen);
                rt_metrics_num(mf, "acc", (double)win_correct / win_seen);
                rt_metrics_num(mf, "lr", rt_optim_last_lr(opt));
                rt_metrics_num(mf, "grad_norm", rt_optim_last_grad_norm(opt));
                rt_metrics_num(mf, "images_per_s", ips);
                if ((rc = rt_metrics_end(mf)) < 0)
                    goto out;
                win_loss = 0.0;
                win_correct = win_seen = 0;
            }
            if (stop_requested || (c.stop_at_step > 0 && pos.step == c.stop_at_step)) {
                if (last_path[0]) {
                    if ((rc = rt_checkpoint_save(last_path, m, opt, &pos)) < 0)
                        goto out;
                    fprintf(stderr, "\nragtag: interrupted at step %ld; saved %s (continue with "
                                    "--resume)\n", pos.step, last_path);
                } else {
                    fprintf(stderr, "\nragtag: interrupted at step %ld (no --checkpoint: "
                                    "nothing saved)\n", pos.step);
                }
                rc = rt_error(RT_ERR_INTERRUPTED, "training interrupted at step %ld", pos.step);
                goto out;
            }
        }
        if (rc < 0)
            goto out;
        pos.epoch = epoch + 1;

        double val_loss = NAN, val_acc = NAN, test_loss = NAN, test_acc = NAN;
        if (data.val && (rc = evaluate(&ev, data.val, c.batch, &val_loss, &val_acc, NULL)) < 0)
            goto out;
        if (data.test && (rc = evaluate(&ev, data.test, c.batch, &test_loss, &test_acc, NULL)) < 0)
            goto out;
        double secs = rt_now() - t_epoch;
        double ips = seen / fmax(t_train, 1e-9);
        res->epochs_run = (int)pos.epoch;
        res->steps = pos.step;
        res->train_loss = seen ? loss_sum / seen : NAN;
        res->train_acc = seen ? (double)correct / seen : NAN;
        res->val_loss = val_loss;
        res->val_acc = val_acc;
        if (data.test) {
            res->test_loss = test_loss;
            res->test_acc = test_acc;
        }
        res->images_per_s = ips;

        int len = snprintf(line, sizeof line, "epoch %ld/%d: loss %.4f acc %.2f%%", pos.epoch,
                           c.epochs, res->train_loss, 100 * res->train_acc);
        if (data.val)
            len += snprintf(line + len, sizeof line - len, " | val_loss %.4f val_acc %.2f%%",
                            val_loss, 100 * val_acc);
        if (data.test)
            len += snprintf(line + len, sizeof line - len, " | test_loss %.4f test_acc %.2f%%",
                            test_loss, 100 * test_acc);
        snprintf(line + len, sizeof line - len, " | %.0f img/s, %.1f s", ips, secs);
        rt_progress_epoch(&prog, line);

        if (mf) {
            rt_metrics_begin(mf);
            rt_metrics_int(mf, "epoch", pos.epoch);
            rt_metrics_int(mf, "step", pos.step);
            rt_metrics_num(mf, "train_loss", res->train_loss);
            rt_metrics_num(mf, "train_acc", res->train_acc);
            rt_metrics_num(mf, "val_loss", val_loss);
            rt_metrics_num(mf, "val_acc", val_acc);
            if (data.test) {
                rt_metrics_num(mf, "test_loss", test_loss);
                rt_metrics_num(mf, "test_acc", test_acc);
            }
            rt_metrics_num(mf, "lr", rt_optim_last_lr(opt));
            rt_metrics_num(mf, "images_per_s", ips);
            rt_metrics_num(mf, "seconds", secs);
            if ((rc = rt_metrics_end(mf)) < 0)
                goto out;
        }

        if (data.val) {
            double v = c.monitor == RT_MONITOR_VAL_ACC ? val_acc : val_loss;
            if (improved(&c, v, pos.best_metric, have_best)) {
                have_best = true;
                pos.best_metric = v;
                pos.best_epoch = pos.epoch;
                pos.bad_epochs = 0;
                if (best_path[0]) {
                    if ((rc = rt_checkpoint_save(best_path, m, NULL, &pos)) < 0)
                        goto out;
                } else if (best_host) {
                    size_t np = rt_model_param_count(m), ns = rt_model_state_count(m);
                    if ((rc = rt_download(dev, best_host, rt_model_params(m), np * 4)) < 0 ||
                        (rc = rt_download(dev, best_host + np, rt_model_state(m), ns * 4)) < 0)
                        goto out;
                }
            } else {
                pos.bad_epochs++;
            }
            if (c.patience > 0 && pos.bad_epochs >= c.patience && pos.epoch < c.epochs) {
                stop_early = true;
                res->stopped_early = true;
            }
        }
        if (last_path[0] && (rc = rt_checkpoint_save(last_path, m, opt, &pos)) < 0)
            goto out;
    }

    if (c.patience > 0 && have_best) {
        res->best_epoch = (int)pos.best_epoch;
        if (best_path[0] && file_exists(best_path)) {
            if ((rc = rt_checkpoint_load(best_path, m, NULL, NULL)) < 0)
                goto out;
        } else if (best_host) {
            size_t np = rt_model_param_count(m), ns = rt_model_state_count(m);
            if ((rc = rt_upload(dev, rt_model_params(m), best_host, np * 4)) < 0 ||
                (rc = rt_upload(dev, rt_model_state(m), best_host + np, ns * 4)) < 0)
                goto out;
        }
        double vl = NAN, va = NAN, tl = NAN, ta = NAN;
        if ((rc = evaluate(&ev, data.val, c.batch, &vl, &va, NULL)) < 0)
            goto out;
        if (data.test && (rc = evaluate(&ev, data.test, c.batch, &tl, &ta, NULL)) < 0)
            goto out;
        res->val_loss = vl;
        res->val_acc = va;
        if (data.test) {
            res->test_loss = tl;
            res->test_acc = ta;
        }
        snprintf(line, sizeof line, "%srestored the best weights (epoch %ld, %s %.4f): val_acc "
                                    "%.2f%%%s",
                 res->stopped_early ? "early stop: " : "", pos.best_epoch,
                 c.monitor == RT_MONITOR_VAL_ACC ? "val_acc" : "val_loss", pos.best_metric,
                 100 * va, "");
        if (data.test)
            snprintf(line + strlen(line), sizeof line - strlen(line), ", test_acc %.2f%%",
                     100 * ta);
        rt_progress_epoch(&prog, line);
    }
    if (c.save_path[0] && (rc = rt_checkpoint_save(c.save_path, m, NULL, &pos)) < 0)
        goto out;
    res->seconds = rt_now() - t_run;
    rc = RT_OK;

out:
    free(best_host);
    evaluator_free(&ev);
    rt_buf_destroy(&xb);
    rt_buf_destroy(&yb);
    rt_loader_destroy(&loader);
    rt_metrics_close(&mf);
    rt_optim_destroy(&opt);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    rt_data_close(&data);
    return rc;
}

int rt_eval_run(const char *model_path, const char *weights_path, const char *data_spec,
                const char *backend, int device, int threads, int batch, long limit,
                struct rt_eval_result *res)
{
    struct rt_data data = {0};
    rt_dev *dev = NULL;
    rt_model *m = NULL;
    struct evaluator ev = {0};
    int rc;
    memset(res, 0, sizeof *res);

    rc = rt_data_open(data_spec, 0.0f, limit, 1, &data);
    if (rc < 0)
        goto out;
    const rt_dataset *set = data.test ? data.test : data.train;
    snprintf(res->set_name, sizeof res->set_name, "%s", data.test ? "test" : "train");
    if (!(dev = rt_dev_open(backend, device, threads))) {
        rc = RT_ERR_DEVICE;
        goto out;
    }
    if (!(m = rt_model_load(model_path, dev, batch))) {
        rc = RT_ERR_CONFIG;
        goto out;
    }
    if ((rc = check_model_fits(m, set, model_path)) < 0)
        goto out;
    if ((rc = rt_checkpoint_load(weights_path, m, NULL, NULL)) < 0)
        goto out;
    if ((rc = evaluator_init(&ev, m, dev, batch, set)) < 0)
        goto out;
    res->classes = rt_model_classes(m);
    res->confusion = calloc((size_t)res->classes * res->classes, sizeof(long));
    if (!res->confusion) {
        rc = rt_error(RT_ERR_NOMEM, "no memory for the confusion matrix");
        goto out;
    }
    rc = evaluate(&ev, set, batch, &res->loss, &res->acc, res->confusion);
    res->n = set->n;
out:
    evaluator_free(&ev);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    rt_data_close(&data);
    return rc;
}
