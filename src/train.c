/* train.c — the training loop, written once: fit -> epoch -> step.
 *
 * Everything that differs between one process and the data-parallel modes
 * is a method of the run's mode (trainer.h); this file never asks which
 * mode runs. A step is: the mode picks this worker's part of the batch,
 * upload, forward, loss, backward (gradient scale from the mode), then the
 * mode's after_backward exchanges and optimises. The loader's prefetch
 * thread gathers the next batch meanwhile. */
#include "config.h"

#include "train.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "memory.h"
#include "report_local.h"
#include "shards.h"
#include "status.h"
#include "trainer.h"
#include "transfer.h"

static volatile sig_atomic_t stop_requested;

void rt_train_request_stop(void) { stop_requested = 1; }

bool rt_trainer_stop_asked(const struct rt_trainer *t)
{
    const struct rt_reporter_ops *r = t->rep.ops;
    return stop_requested || (r->stop_requested && r->stop_requested(t->rep.ctx));
}

int rt_trainer_say(const struct rt_trainer *t, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return t->rep.ops->line(t->rep.ctx, line);
}

uint64_t rt_step_seed(uint64_t seed, long step)
{
    uint64_t z = seed ^ ((uint64_t)step * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The step's images [a, a + n) as the model's input. On a device that
 * computes in host memory (cpu) that is the loader's slot itself, wrapped
 * once: the slot keeps its batch through the step (the loader fills the
 * other one meanwhile), so the copy of the batch goes (200 KB a lenet
 * step, serial while the other threads wait). Elsewhere, or from a slot
 * that is not 64-byte aligned, the images are uploaded to xb. */
static int step_input(struct rt_trainer *t, const struct rt_step *s, long a, int n, rt_view *x)
{
    const size_t floats = ((size_t)a + (size_t)n) * t->chw;
    if (!rt_view_host(rt_buf_view(t->xb)) || ((uintptr_t)s->x & 63) != 0) {
        *x = rt_buf_view(t->xb);
        return rt_upload(t->dev, *x, s->x + (size_t)a * t->chw, (size_t)n * t->chw * sizeof(float));
    }
    int i = t->xwrap_at[0] == s->x ? 0 : t->xwrap_at[1] == s->x ? 1 : -1;
    if (i < 0 || t->xwrap[i]->bytes < floats * sizeof(float)) {
        i = i < 0 ? t->xwrap_next : i;
        t->xwrap_next = 1 - i;
        rt_buf_destroy(&t->xwrap[i]);
        t->xwrap_at[i] = NULL;
        /* (the wrap covers the slot's whole batch: later steps cut it otherwise) */
        size_t cap = (size_t)(s->n > a + n ? s->n : a + n) * t->chw * sizeof(float);
        if (!(t->xwrap[i] = rt_buf_wrap_host(t->dev, (void *)s->x, cap)))
            return RT_ERR_NOMEM;
        t->xwrap_at[i] = s->x;
    }
    *x = (rt_view){t->xwrap[i], (size_t)a * t->chw};
    return RT_OK;
}

int rt_trainer_compute(struct rt_trainer *t, struct rt_step *s, long a, int n, float gscale,
                       bool count)
{
    rt_view x, y = rt_buf_view(t->yb);
    RT_TRY(rt_loader_rows(t->loader, a, a + n));
    RT_TRY(step_input(t, s, a, n, &x));
    RT_TRY(rt_upload(t->dev, y, s->y + a, (size_t)n * sizeof(int32_t)));
    RT_TRY(rt_model_forward(t->m, x, n, true, s->seed));
    /* the loss is tallied once the backward is queued: the device goes on */
    RT_TRY(rt_model_loss_start(t->m, y, s->y + a, n));
    RT_TRY(rt_model_backward(t->m, x, y, n, gscale));
    return rt_model_loss_collect(t->m, count ? &s->tally.loss : NULL,
                                 count ? &s->tally.correct : NULL, NULL);
}

/* The epoch's images a second; 0 when this process trained for less than
 * a millisecond of it (a worker admitted at the run's last step: its
 * epoch's counts came with the state it was handed, its clock did not,
 * and a rate of 1e13 made the coordinator drop its final report). */
static double epoch_rate(const struct rt_epoch *e)
{
    return e->t_train >= 1e-3 ? (double)e->seen_all / e->t_train : 0.0;
}

void rt_mode_progress_global(const struct rt_trainer *t, const struct rt_epoch *e, long *done,
                             double *ips)
{
    *done = t->pos.step - e->epoch * t->spe;
    *ips = epoch_rate(e);
}

/* ---- setting up ------------------------------------------------------------------ */

/* --lr-scale: the schedule scaled by the rule, and the log line of the
 * learning rate the run reaches. */
static int scale_lr(struct rt_trainer *t)
{
    struct rt_train_config *c = &t->c;
    t->lr_given = c->optim.lr;
    if (c->lr_scale == RT_LR_SCALE_NONE)
        return RT_OK;
    double f = rt_lr_scale_factor(c->lr_scale, c->batch, c->base_batch > 0 ? c->base_batch
                                                                           : c->batch);
    c->optim.lr = (float)(t->lr_given * f);
    c->optim.min_lr = (float)(c->optim.min_lr * f);
    if (t->coll) /* a cluster's summary line says it (rt_dist_begin) */
        return RT_OK;
    char line[256];
    rt_trainer_lr_text(t, line, sizeof line);
    return rt_trainer_say(t, "%s", line);
}

void rt_trainer_lr_text(const struct rt_trainer *t, char *buf, size_t n)
{
    const struct rt_train_config *c = &t->c;
    static const char *const rule[] = {"none", "linear", "sqrt"};
    int base = c->base_batch > 0 ? c->base_batch : c->batch;
    double f = rt_lr_scale_factor(c->lr_scale, c->batch, base);
    int len = snprintf(buf, n, "effective learning rate %g = --lr %g x %.6g (--lr-scale %s: "
                               "batch %d, base batch %d)", (double)c->optim.lr,
                       (double)t->lr_given, f, rule[c->lr_scale], c->batch, base);
    if (c->optim.warmup_steps > 0 && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", reached after a linear warm-up of %ld steps",
                 c->optim.warmup_steps);
}

/* Lines of the core's helpers (transfer.c) to the reporter. */
static int trainer_note(void *arg, const char *line)
{
    const struct rt_trainer *t = arg;
    return t->rep.ops->line(t->rep.ctx, line);
}

/* Steps of the schedule from epochs, once the data's size is known. */
static int derive_steps(struct rt_trainer *t)
{
    struct rt_train_config *c = &t->c;
    t->ntrain = t->data.train->n;
    t->spe = (t->ntrain + c->batch - 1) / c->batch;
    if (t->spe == 0)
        return rt_error(RT_ERR_CONFIG, "data set %s has no training images", t->data.train->name);
    c->optim.total_steps = (long)c->epochs * t->spe;
    c->optim.warmup_steps = (long)lround(c->warmup_epochs * (double)t->spe);
    if (c->optim.schedule == RT_SCHED_STEP) {
        if (c->lr_step_epochs <= 0.0f)
            return rt_error(RT_ERR_CONFIG, "--schedule step needs --lr-step E (epochs between decays)");
        c->optim.step_size = (long)fmax(1.0, lround(c->lr_step_epochs * (double)t->spe));
    }
    return scale_lr(t);
}

static int trainer_open(struct rt_trainer *t, const char *model_text)
{
    struct rt_train_config *c = &t->c;
    t->rows = t->mode->rows(t);
    RT_TRY(rt_data_open_classes(c->data_spec, c->classes, c->val_frac, c->limit, c->seed,
                                &t->data));
    if (!(t->dev = rt_dev_open(c->backend, c->device, c->threads)))
        return RT_ERR_DEVICE;
    t->m = model_text ? rt_model_load_string(model_text, c->model_path, t->dev, t->rows)
                      : rt_model_load(c->model_path, t->dev, t->rows);
    if (!t->m)
        return RT_ERR_CONFIG;
    RT_TRY(rt_model_check_data(t->m, t->data.train, c->model_path));
    RT_TRY(rt_model_init(t->m, c->seed));
    /* a cluster's coordinator says what is frozen and loaded */
    RT_TRY(rt_transfer_prepare(t->m, c, t->coll ? NULL : trainer_note, t));
    RT_TRY(derive_steps(t));
    t->pos = (struct rt_train_pos){.epoch = 0, .step = 0, .seed = c->seed, .best_metric = NAN};
    RT_TRY(t->mode->init(t));
    RT_ASSERT(t->opt && t->loader);
    const rt_dataset *ds = t->data.train;
    t->chw = (size_t)ds->c * ds->h * ds->w;
    t->xb = rt_buf_new(t->dev, (size_t)t->rows * t->chw * sizeof(float));
    t->yb = rt_buf_new(t->dev, (size_t)t->rows * sizeof(int32_t));
    if (!t->xb || !t->yb)
        return rt_error(RT_ERR_NOMEM, "cannot allocate a batch of %d images on %s", t->rows,
                        c->backend);
    if (!(t->ev = rt_evaluator_new(t->m, t->dev, t->rows, ds)))
        return RT_ERR_NOMEM;
    if (t->rep.ops->alive)
        rt_evaluator_set_tick(t->ev, t->rep.ops->alive, t->rep.ctx);
    if (c->patience > 0 && !t->best_path[0]) {
        size_t n = rt_model_param_count(t->m) + rt_model_state_count(t->m);
        if (!(t->best_host = malloc(n * sizeof(float))))
            return rt_error(RT_ERR_NOMEM, "no memory for a copy of the best weights");
    }
    return t->mode->begin(t);
}

static void trainer_close(struct rt_trainer *t)
{
    if (t->data.train && t->data.train->shards)
        t->res->records_read = rt_shards_reads(t->data.train->shards);
    free(t->best_host);
    rt_evaluator_destroy(&t->ev);
    rt_buf_destroy(&t->xb);
    rt_buf_destroy(&t->yb);
    for (int i = 0; i < 2; i++)
        rt_buf_destroy(&t->xwrap[i]);
    rt_loader_destroy(&t->loader);
    rt_optim_destroy(&t->opt); /* before the mode's state: it may own the optimiser's device */
    t->mode->destroy(t);
    rt_model_destroy(&t->m);
    rt_dev_close(&t->dev);
    rt_data_close(&t->data);
}

/* ---- one step -------------------------------------------------------------------- */

/* The window of a --log-every line. */
struct window {
    double loss;
    long correct, seen;
};

static int step_compute(struct rt_trainer *t, struct rt_step *s)
{
    long nl = s->b - s->a;
    if (nl == 0) /* standby, or a batch smaller than the cluster */
        return rt_op_fill(t->dev, rt_model_param_count(t->m), 0.0f, rt_model_grads(t->m));
    RT_TRY(rt_trainer_compute(t, s, s->a, (int)nl, s->gscale, true));
    /* every sample once per epoch: count, and sums of the indices and of
     * their squares, checked over all workers at the epoch's end */
    const uint32_t *idx = rt_loader_indices(t->loader);
    s->tally.seen = nl;
    for (long i = s->a; i < s->b; i++)
        rt_tally_add_index(&s->tally, idx[i]);
    return RT_OK;
}

void rt_epoch_add(struct rt_epoch *e, const struct rt_tally *k)
{
    double used[3];
    rt_tally_used(k, used);
    e->loss_sum += k->loss;
    e->correct += k->correct;
    e->seen += k->seen;
    for (int i = 0; i < 3; i++)
        e->used[i] += used[i];
}

static int step_log(struct rt_trainer *t, const struct rt_epoch *e, const struct rt_step *s,
                    struct window *w, long done, double ips)
{
    double sums[3] = {w->loss, (double)w->correct, (double)w->seen}, norm = NAN;
    bool emit = true;
    RT_TRY(t->mode->log_window(t, s, sums, &emit, &norm));
    if (!emit)
        return RT_OK;
    struct rt_train_field f[] = {
        {"step", 'i', 0.0, e->epoch * t->spe + done},
        {"epoch", 'n', (double)e->epoch + (double)done / (double)t->spe, 0},
        {"loss", 'n', sums[0] / sums[2], 0},
        {"acc", 'n', sums[1] / sums[2], 0},
        {"lr", 'n', rt_optim_last_lr(t->opt), 0},
        {"grad_norm", 'n', norm, 0},
        {"images_per_s", 'n', ips, 0},
    };
    *w = (struct window){0};
    return t->rep.ops->metrics(t->rep.ctx, f, (int)(sizeof f / sizeof f[0]));
}

/* Progress, the log window, divergence: after the step's update, with the
 * step's counts (this worker's, or the batch's when the mode made them
 * global). */
static int step_report(struct rt_trainer *t, struct rt_epoch *e, const struct rt_step *s,
                       struct window *w, double *last_report)
{
    const struct rt_tally *k = &s->tally;
    if (t->rep.ops->alive)
        t->rep.ops->alive(t->rep.ctx);
    e->done++;
    rt_epoch_add(e, k);
    e->seen_all += s->n; /* the step's batch: global (sync, average) or local (gossip) */
    w->loss += k->loss;
    w->correct += k->correct;
    w->seen += k->seen;
    double now = rt_now();
    e->t_train = now - e->t0;
    if (!isfinite(k->loss))
        return rt_error(RT_ERR_CONFIG,
                        "training diverged at step %ld (epoch %ld): the loss is %g; try a "
                        "smaller --lr or --clip-norm",
                        t->pos.step, e->epoch + 1, k->loss);
    long done;
    double ips;
    t->mode->progress(t, e, &done, &ips);
    if (now - *last_report >= 0.1 || done == t->spe) {
        *last_report = now;
        t->rep.ops->progress(t->rep.ctx, (int)e->epoch + 1, t->c.epochs, done, t->spe,
                             e->seen ? e->loss_sum / e->seen : NAN,
                             e->seen ? (double)e->correct / e->seen : NAN, ips,
                             ips > 0.0 ? (double)(t->spe - done) * t->c.batch / ips : 0.0);
    }
    return s->log_now ? step_log(t, e, s, w, done, ips) : RT_OK;
}

static int train_step(struct rt_trainer *t, struct rt_step *s)
{
    s->a = 0;
    s->b = s->n;
    s->gscale = 1.0f / (float)s->n;
    s->seed = rt_step_seed(t->c.seed, t->pos.step);
    RT_TRY(t->mode->part(t, s));
    if (s->a > 0) /* each part of a batch draws its own dropout masks */
        s->seed = rt_step_seed(s->seed ^ ((uint64_t)s->a * 0xA24BAED4963EE407ull), t->pos.step);
    RT_TRY(step_compute(t, s));
    s->log_now = t->c.log_every > 0 && (t->pos.step + 1) % t->c.log_every == 0;
    return t->mode->after_backward(t, s);
}

/* ---- one epoch ------------------------------------------------------------------- */

static int interrupted(struct rt_trainer *t)
{
    t->res->steps = t->pos.step;
    RT_TRY(t->mode->checkpoint(t, RT_CKPT_STOP));
    return rt_error(RT_ERR_INTERRUPTED, "training interrupted at step %ld", t->pos.step);
}

/* A collective answered RT_ERR_REGROUP: form the new group and take the
 * state of its most advanced member (which may be one step, or one epoch's
 * close, ahead of this one). */
static int regroup(struct rt_trainer *t)
{
    const rt_collective *c = t->coll;
    if (!c || !c->ops->regroup || !t->mode->recover)
        return rt_error(RT_ERR_NET, "the members of the run changed and --mode %s cannot go "
                        "on with other members", t->mode->name);
    for (;;) {
        int rc = c->ops->regroup(c->ctx, &t->rank, &t->world);
        if (rc == RT_OK)
            rc = t->mode->recover(t, false);
        if (rc != RT_ERR_REGROUP)
            return rc;
    }
}

/* The epoch's steps are all taken (this worker's walk of them is over). */
static bool steps_over(const struct rt_trainer *t, const struct rt_epoch *e)
{
    return t->pos.epoch > e->epoch || t->pos.step >= (e->epoch + 1) * t->spe;
}

/* Steps (or, where the position moves only at the epoch's end, batches)
 * taken again after a regroup moved this worker from (step, done). */
static void count_redone(struct rt_trainer *t, struct rt_epoch *e, long step, long done)
{
    long back = t->pos.step != step ? step - t->pos.step : done - e->done;
    e->redone += back >= 0 ? back + 1 : 0;
}

/* One step; when the members change under it, the new group's position
 * (which may be back at the last agreement, or past this epoch's steps):
 * *redo says the walk starts again from there. */
static int step_or_regroup(struct rt_trainer *t, struct rt_epoch *e, struct rt_step *s,
                           bool *redo)
{
    int rc = train_step(t, s);
    *redo = rc == RT_ERR_REGROUP;
    if (!*redo)
        return rc;
    long step = t->pos.step, done = e->done;
    RT_TRY(regroup(t));
    if (!s->not_begun || t->pos.step != step)
        count_redone(t, e, step, done);
    return RT_OK;
}

/* The mode's start of the epoch (gossip's re-plan is a collective); 1
 * when the members change under it: the walk starts again from the new
 * group's position, having taken no step (only steps the position went
 * back over are redone). */
static int begin_or_regroup(struct rt_trainer *t, struct rt_epoch *e)
{
    int rc = t->mode->epoch_begin(t, e);
    if (rc != RT_ERR_REGROUP)
        return rc;
    long step = t->pos.step;
    RT_TRY(regroup(t));
    e->redone += t->pos.step < step ? step - t->pos.step : 0;
    return 1;
}

/* This worker's walk of the epoch's batches from where the position is;
 * 1 when a change of members sends it back to start again. */
static int walk_epoch(struct rt_trainer *t, struct rt_epoch *e, double *last_report)
{
    e->first = t->pos.step - e->epoch * t->spe;
    e->count = -1;
    int rc = begin_or_regroup(t, e);
    if (rc != RT_OK)
        return rc;
    RT_TRY(rt_loader_start(t->loader, e->epoch, e->first));
    struct window w = {0};
    rc = 1;
    struct rt_step s;
    bool redo;
    while (!steps_over(t, e) && (e->count < 0 || e->done < e->count) &&
           (rc = rt_loader_next(t->loader, &s.x, &s.y, &s.n)) > 0) {
        s = (struct rt_step){.x = s.x, .y = s.y, .n = s.n};
        if (t->rep.ops->pace)
            RT_TRY(t->rep.ops->pace(t->rep.ctx, t->pos.step));
        RT_TRY(step_or_regroup(t, e, &s, &redo));
        if (redo)
            return 1;
        RT_TRY(step_report(t, e, &s, &w, last_report));
        if (s.leave_epoch)
            break; /* the epoch's end tells everybody */
        if (s.stop)
            return interrupted(t);
    }
    return steps_over(t, e) || rc >= 0 ? RT_OK : rc;
}

static int train_epoch(struct rt_trainer *t, struct rt_epoch *e, double *last_report)
{
    e->t0 = rt_now();
    /* A joiner that took the state of members closing the epoch closes it
     * with them: its epoch_begin (a re-plan, a collective) would meet
     * their close. */
    if (steps_over(t, e))
        return RT_OK;
    int rc;
    while ((rc = walk_epoch(t, e, last_report)) == 1)
        if (steps_over(t, e))
            return RT_OK;
    return rc;
}

/* ---- the epoch's report, early stopping --------------------------------------------- */

static int epoch_line(struct rt_trainer *t, const struct rt_epoch *e, double secs, double ips)
{
    const struct rt_train_result *r = t->res;
    char line[1024];
    int len = snprintf(line, sizeof line, "epoch %ld/%d: loss %.4f acc %.2f%%", t->pos.epoch,
                       t->c.epochs, r->train_loss, 100 * r->train_acc);
    if (t->data.val)
        len += snprintf(line + len, sizeof line - len, " | val_loss %.4f val_acc %.2f%%",
                        r->val_loss, 100 * r->val_acc);
    if (t->data.test)
        len += snprintf(line + len, sizeof line - len, " | test_loss %.4f test_acc %.2f%%",
                        r->test_loss, 100 * r->test_acc);
    if (e->has_consensus)
        len += snprintf(line + len, sizeof line - len, " | consensus distance %.3g (%.2g "
                                                       "relative)", e->consensus, e->consensus_rel);
    if (e->redone)
        len += snprintf(line + len, sizeof line - len, " | %ld step%s redone after the members "
                                                       "changed", e->redone,
                        e->redone == 1 ? "" : "s");
    snprintf(line + len, sizeof line - len, " | %.0f img/s, %.1f s", ips, secs);
    return t->rep.ops->line(t->rep.ctx, line);
}

static int epoch_metrics(struct rt_trainer *t, const struct rt_epoch *e, double val_loss,
                         double val_acc, double secs, double ips)
{
    const struct rt_train_result *r = t->res;
    struct rt_train_field f[18];
    int n = 0;
#define FI(k, v) f[n++] = (struct rt_train_field){.key = k, .kind = 'i', .integer = (v)}
#define FN(k, v) f[n++] = (struct rt_train_field){.key = k, .kind = 'n', .num = (v)}
    FI("epoch", t->pos.epoch);
    FI("step", t->pos.step);
    FN("train_loss", r->train_loss);
    FN("train_acc", r->train_acc);
    FN("val_loss", val_loss);
    FN("val_acc", val_acc);
    if (t->data.test) {
        FN("test_loss", r->test_loss);
        FN("test_acc", r->test_acc);
    }
    FN("lr", rt_optim_last_lr(t->opt));
    FN("images_per_s", ips);
    FN("seconds", secs);
    if (e->has_samples)
        FI("samples", e->seen);
    if (e->redone)
        FI("steps_redone", e->redone);
    if (e->has_consensus) {
        FN("consensus_distance", e->consensus);
        FN("consensus_relative", e->consensus_rel);
    }
    /* this process's peak so far: a cluster's epoch lines are rank 0's; the
     * coordinator writes every worker's at the end (event "memory") */
    FN("max_rss_mb", (double)rt_mem_peak() / RT_MB);
#undef FI
#undef FN
    return t->rep.ops->metrics(t->rep.ctx, f, n);
}

static int epoch_report(struct rt_trainer *t, const struct rt_epoch *e)
{
    struct rt_train_result *r = t->res;
    double val_loss = NAN, val_acc = NAN, test_loss = NAN, test_acc = NAN;
    if (t->data.val)
        RT_TRY(t->mode->evaluate(t, t->data.val, &val_loss, &val_acc));
    if (t->data.test)
        RT_TRY(t->mode->evaluate(t, t->data.test, &test_loss, &test_acc));
    double secs = rt_now() - e->t_epoch;
    double ips = epoch_rate(e);
    r->epochs_run = (int)t->pos.epoch;
    r->steps = t->pos.step;
    r->train_loss = e->seen ? e->loss_sum / e->seen : NAN;
    r->train_acc = e->seen ? (double)e->correct / e->seen : NAN;
    r->val_loss = val_loss;
    r->val_acc = val_acc;
    if (t->data.test) {
        r->test_loss = test_loss;
        r->test_acc = test_acc;
    }
    r->images_per_s = ips;
    RT_TRY(epoch_line(t, e, secs, ips));
    return epoch_metrics(t, e, val_loss, val_acc, secs, ips);
}

static bool improved(const struct rt_train_config *c, double value, double best, bool have_best)
{
    if (!have_best)
        return isfinite(value);
    if (c->monitor == RT_MONITOR_VAL_ACC)
        return value > best + c->min_delta;
    return value < best - c->min_delta;
}

/* The best weights so far, in memory when they are not kept in a file. */
static int keep_best(struct rt_trainer *t)
{
    if (!t->best_host)
        return RT_OK;
    size_t np = rt_model_param_count(t->m), ns = rt_model_state_count(t->m);
    RT_TRY(rt_download(t->dev, t->best_host, rt_model_params(t->m), np * 4));
    return rt_download(t->dev, t->best_host + np, rt_model_state(t->m), ns * 4);
}

/* Early stopping on the validation set, decided once, by rank 0, for all. */
static int early_stopping(struct rt_trainer *t, bool *stop)
{
    if (!t->data.val)
        return RT_OK;
    const struct rt_train_config *c = &t->c;
    struct rt_train_pos *pos = &t->pos;
    double v = c->monitor == RT_MONITOR_VAL_ACC ? t->res->val_acc : t->res->val_loss;
    unsigned char decide[2] = {0, 0};
    if (t->rank == 0) {
        decide[0] = improved(c, v, pos->best_metric, t->have_best);
        decide[1] = !decide[0] && c->patience > 0 && pos->bad_epochs + 1 >= c->patience &&
                    pos->epoch < c->epochs;
    }
    RT_TRY(t->mode->agree(t, decide, sizeof decide));
    if (decide[0]) {
        t->have_best = true;
        pos->best_metric = v;
        pos->best_epoch = pos->epoch;
        pos->bad_epochs = 0;
        RT_TRY(keep_best(t));
        RT_TRY(t->mode->checkpoint(t, RT_CKPT_BEST));
    } else {
        pos->bad_epochs++;
    }
    if (decide[1])
        *stop = t->res->stopped_early = true;
    return RT_OK;
}

/* ---- the run ----------------------------------------------------------------------- */

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Early stopping's end: the best weights back in the model, evaluated. */
static int restore_best(struct rt_trainer *t)
{
    struct rt_train_result *r = t->res;
    r->best_epoch = (int)t->pos.best_epoch;
    if (t->best_path[0] && file_exists(t->best_path)) {
        RT_TRY(rt_checkpoint_load(t->best_path, t->m, NULL, NULL));
    } else if (t->best_host) {
        size_t np = rt_model_param_count(t->m), ns = rt_model_state_count(t->m);
        RT_TRY(rt_upload(t->dev, rt_model_params(t->m), t->best_host, np * 4));
        RT_TRY(rt_upload(t->dev, rt_model_state(t->m), t->best_host + np, ns * 4));
    }
    double vl = NAN, va = NAN, tl = NAN, ta = NAN;
    RT_TRY(t->mode->evaluate(t, t->data.val, &vl, &va));
    if (t->data.test)
        RT_TRY(t->mode->evaluate(t, t->data.test, &tl, &ta));
    r->val_loss = vl;
    r->val_acc = va;
    if (t->data.test) {
        r->test_loss = tl;
        r->test_acc = ta;
    }
    char line[1024];
    int len = snprintf(line, sizeof line, "%srestored the best weights (epoch %ld, %s %.4f): "
                                          "val_acc %.2f%%",
                       r->stopped_early ? "early stop: " : "", t->pos.best_epoch,
                       t->c.monitor == RT_MONITOR_VAL_ACC ? "val_acc" : "val_loss",
                       t->pos.best_metric, 100 * va);
    if (t->data.test)
        snprintf(line + len, sizeof line - len, ", test_acc %.2f%%", 100 * ta);
    return t->rep.ops->line(t->rep.ctx, line);
}

/* Early stopping's verdict follows from the position: a worker that took
 * the state of a member that had closed the epoch stops with it. */
static bool stops_early(const struct rt_trainer *t)
{
    return t->c.patience > 0 && t->pos.bad_epochs >= t->c.patience && t->have_best;
}

/* The epoch's close: settle the replicas, report, early stopping,
 * checkpoint. Redone from its start when the members change under it
 * (a mode that offers recover keeps epoch_end safe to redo), unless the
 * member whose state this one took had closed it already. */
static int close_once(struct rt_trainer *t, struct rt_epoch *e, bool *stop_early)
{
    RT_TRY(t->mode->epoch_end(t, e));
    t->pos.epoch = e->epoch + 1;
    RT_TRY(epoch_report(t, e));
    RT_TRY(early_stopping(t, stop_early));
    return t->mode->checkpoint(t, RT_CKPT_LAST);
}

/* *again: the new group went back into the epoch's steps (to the last
 * state every member agreed on): walk them again, then close. */
static int close_epoch(struct rt_trainer *t, struct rt_epoch *e, bool *stop_early, bool *again)
{
    for (;;) {
        int rc = close_once(t, e, stop_early);
        if (rc != RT_ERR_REGROUP)
            return rc;
        t->pos.epoch = e->epoch; /* nothing else changed before the last collective */
        *stop_early = false;
        long step = t->pos.step, done = e->done;
        RT_TRY(regroup(t));
        if (t->pos.epoch > e->epoch) {
            *stop_early = t->res->stopped_early = stops_early(t);
            return RT_OK; /* closed by the member whose state this one took */
        }
        if (!steps_over(t, e) || (e->count >= 0 && e->done < e->count)) {
            count_redone(t, e, step, done);
            *again = true;
            return RT_OK;
        }
    }
}

/* The best weights back after the last epoch, again when the members
 * change under their evaluation (the new group holds the same best). */
static int restore_best_or_regroup(struct rt_trainer *t)
{
    for (;;) {
        int rc = restore_best(t);
        if (rc != RT_ERR_REGROUP)
            return rc;
        RT_TRY(regroup(t));
    }
}

static int fit(struct rt_trainer *t)
{
    bool stop_early = false, again = false;
    double last_report = 0.0;
    struct rt_epoch *e = t->ep;
    while (t->pos.epoch < t->c.epochs && !stop_early) {
        if (e->epoch != t->pos.epoch)
            *e = (struct rt_epoch){.epoch = t->pos.epoch,
                                   .whole = t->pos.step == t->pos.epoch * t->spe};
        if (!again)
            e->t_epoch = rt_now();
        again = false;
        RT_TRY(train_epoch(t, e, &last_report));
        if (t->pos.epoch == e->epoch)
            RT_TRY(close_epoch(t, e, &stop_early, &again));
        else /* a regroup took the state of a member past this epoch's close */
            stop_early = t->res->stopped_early = stops_early(t);
    }
    if (t->c.patience > 0 && t->have_best)
        RT_TRY(restore_best_or_regroup(t));
    if (t->c.save_path[0])
        RT_TRY(rt_checkpoint_save(t->c.save_path, t->m, NULL, &t->pos));
    return t->mode->end(t);
}

/* What no mode can work with, before anything is opened. */
static int check_config(const struct rt_train_config *c)
{
    if (c->patience > 0 && c->val_frac <= 0.0f)
        return rt_error(RT_ERR_CONFIG, "--patience needs a validation split: give --val F > 0");
    if (c->resume && !c->checkpoint_dir[0])
        return rt_error(RT_ERR_CONFIG, "--resume needs --checkpoint DIR to resume from");
    return RT_OK;
}

static int run(struct rt_trainer *t, const char *model_text)
{
    double t_run = rt_now();
    memset(t->res, 0, sizeof *t->res);
    t->res->test_loss = t->res->test_acc = -1.0;
    stop_requested = 0;
    struct rt_epoch e = {.epoch = -1};
    t->ep = &e; /* before begin: a worker that joins a run takes the epoch's sums */
    int rc = trainer_open(t, model_text);
    if (rc >= 0)
        rc = fit(t);
    if (rc >= 0)
        t->res->seconds = rt_now() - t_run;
    trainer_close(t);
    t->res->max_rss = rt_mem_peak();
    return rc < 0 ? rc : RT_OK;
}

int rt_train_run(const struct rt_train_config *c, struct rt_train_result *res)
{
    RT_TRY(check_config(c));
    rt_local_report *lr = rt_local_report_new(c->progress, c->metrics_path);
    if (!lr)
        return RT_ERR_IO;
    struct rt_trainer t = {.c = *c, .mode = &rt_mode_local, .rank = 0, .world = 1, .res = res};
    t.rep = rt_local_report_reporter(lr);
    int rc = run(&t, NULL);
    rt_local_report_destroy(&lr);
    return rc;
}

static const struct rt_mode_ops *mode_of(enum rt_dist_mode m)
{
    return m == RT_MODE_AVERAGE ? &rt_mode_average
         : m == RT_MODE_GOSSIP  ? &rt_mode_gossip
                                : &rt_mode_sync;
}

int rt_train_run_dist(const struct rt_train_config *c, const struct rt_train_net *net,
                      struct rt_train_result *res)
{
    const rt_collective *coll = &net->coll;
    const struct rt_reporter_ops *r = net->report.ops;
    RT_ASSERT(coll->ops && coll->ops->reduce_scatter && coll->ops->all_gather &&
              coll->ops->allreduce && coll->ops->allreduce_f64 && coll->ops->broadcast &&
              coll->ops->vote && coll->ops->agreed);
    RT_ASSERT(r && r->ready && r->progress && r->line && r->metrics && r->checkpoint);
    if (coll->world < 1 || coll->rank < 0 || coll->rank >= coll->world)
        return rt_error(RT_ERR_ARG, "rank %d of %d workers", coll->rank, coll->world);
    RT_TRY(check_config(c));
    struct rt_trainer t = {.c = *c, .mode = mode_of(c->mode), .coll = coll,
                           .pairwise = net->pairwise.ops ? &net->pairwise : NULL,
                           .rep = net->report, .rank = coll->rank, .world = coll->world,
                           .res = res};
    return run(&t, net->model_text);
}
