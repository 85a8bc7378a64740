/* mode_local.c — training in one process: the whole batch, the optimiser on
 * the model's own device, checkpoints as files in --checkpoint DIR. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "status.h"
#include "train-testing.h"
#include "trainer.h"
#include "transfer.h"

static int local_rows(const struct rt_trainer *t) { return t->c.batch; }

static int local_init(struct rt_trainer *t)
{
    const struct rt_train_config *c = &t->c;
    if (rt_train_testing_throttle(c) > 0.0f)
        return rt_error(RT_ERR_CONFIG, "--throttle is a testing aid for workers (ragtag worker, "
                                       "or train --workers N)");
    if (!(t->opt = rt_optim_new_trainable(t->dev, &c->optim, t->m)))
        return RT_ERR_CONFIG; /* rt_optim_new left the reason in the detail */
    if (c->checkpoint_dir[0]) {
        int stale = 0;
        RT_TRY(rt_checkpoint_dir_open(c->checkpoint_dir, &stale));
        if (stale)
            fprintf(stderr, "ragtag: removed %d temporary file%s that interrupted checkpoint "
                            "writes left in %s\n",
                    stale, stale == 1 ? "" : "s", c->checkpoint_dir);
        snprintf(t->last_path, sizeof t->last_path, "%s/last.safetensors", c->checkpoint_dir);
        snprintf(t->best_path, sizeof t->best_path, "%s/best.safetensors", c->checkpoint_dir);
    }
    /* at the start, not after the training (it may go into the checkpoint
     * directory just made) */
    if (c->save_path[0])
        RT_TRY(rt_safetensors_can_write(c->save_path));
    if (!(t->loader = rt_loader_new(t->data.train, c->batch, true, c->seed)))
        return RT_ERR_NOMEM;
    return RT_OK;
}

/* --resume: the last checkpoint, if there is one, with what it must match. */
static int local_resume(struct rt_trainer *t)
{
    struct rt_train_pos *pos = &t->pos;
    struct stat st;
    if (stat(t->last_path, &st) != 0) {
        fprintf(stderr, "ragtag: no checkpoint at %s yet: starting from scratch\n", t->last_path);
        return RT_OK;
    }
    RT_TRY(rt_checkpoint_load(t->last_path, t->m, t->opt, pos));
    if (pos->seed != t->c.seed)
        return rt_error(RT_ERR_CONFIG,
                        "%s was trained with --seed %llu, not %llu: resume with the same seed "
                        "(the data order and split depend on it)",
                        t->last_path, (unsigned long long)pos->seed,
                        (unsigned long long)t->c.seed);
    if (pos->step > pos->epoch * t->spe + t->spe || pos->step < pos->epoch * t->spe)
        return rt_error(RT_ERR_CONFIG,
                        "%s stopped at step %ld of epoch %ld, which does not fit %ld steps per "
                        "epoch: resume with the same data, --limit, --val and --batch",
                        t->last_path, pos->step, pos->epoch + 1, t->spe);
    rt_optim_set_steps(t->opt, pos->step);
    t->have_best = isfinite(pos->best_metric);
    fprintf(stderr, "ragtag: resumed from %s at epoch %ld, step %ld\n", t->last_path, pos->epoch,
            pos->step);
    return RT_OK;
}

static int local_begin(struct rt_trainer *t)
{
    const struct rt_train_config *c = &t->c;
    if (c->resume)
        RT_TRY(local_resume(t));
    if (c->progress != RT_PROGRESS_OFF)
        rt_model_summary(t->m, stderr);
    fprintf(stderr, "ragtag: training %s on %s (%ld train, %d val, %d test images), %s "
                    "backend, %zu parameters, %s lr %g, batch %d, %d epochs\n",
            c->model_path, t->data.train->name, t->ntrain, t->data.val ? t->data.val->n : 0,
            t->data.test ? t->data.test->n : 0, c->backend, rt_model_param_count(t->m),
            rt_optim_kind_name(c->optim.kind), c->optim.lr, c->batch, c->epochs);
    return RT_OK;
}

static int local_epoch_begin(struct rt_trainer *t, struct rt_epoch *e) { return RT_OK; }

static int local_part(struct rt_trainer *t, struct rt_step *s) { return RT_OK; }

static int local_after_backward(struct rt_trainer *t, struct rt_step *s)
{
    RT_TRY(rt_optim_step(t->opt, rt_model_params(t->m), rt_model_grads(t->m), s->log_now));
    t->pos.step++;
    s->stop = rt_trainer_stop_asked(t) ||
              rt_train_testing_stop_at(&t->c, t->pos.step);
    return RT_OK;
}

static int local_log_window(struct rt_trainer *t, const struct rt_step *s, double w[3],
                            bool *emit, double *grad_norm)
{
    *emit = true;
    *grad_norm = rt_optim_last_grad_norm(t->opt);
    return RT_OK;
}

static int local_epoch_end(struct rt_trainer *t, struct rt_epoch *e) { return RT_OK; }

static int local_evaluate(struct rt_trainer *t, const rt_dataset *ds, double *loss, double *acc)
{
    double sums[3];
    RT_TRY(rt_evaluator_sums(t->ev, ds, 0, ds->n, sums, NULL));
    rt_evaluator_metrics(sums, loss, acc);
    return RT_OK;
}

static int local_agree(struct rt_trainer *t, void *buf, size_t bytes) { return RT_OK; }

static int local_checkpoint(struct rt_trainer *t, enum rt_ckpt_which which)
{
    switch (which) {
    case RT_CKPT_LAST:
        return t->last_path[0] ? rt_checkpoint_save(t->last_path, t->m, t->opt, &t->pos) : RT_OK;
    case RT_CKPT_BEST:
        return t->best_path[0] ? rt_checkpoint_save(t->best_path, t->m, NULL, &t->pos) : RT_OK;
    case RT_CKPT_STOP:
        if (!t->last_path[0]) {
            fprintf(stderr, "\nragtag: interrupted at step %ld (no --checkpoint: nothing saved)\n",
                    t->pos.step);
            return RT_OK;
        }
        RT_TRY(rt_checkpoint_save(t->last_path, t->m, t->opt, &t->pos));
        fprintf(stderr, "\nragtag: interrupted at step %ld; saved %s (continue with --resume)\n",
                t->pos.step, t->last_path);
        return RT_OK;
    case RT_CKPT_FINAL:
        return RT_OK; /* --save is written by the loop, for every mode */
    }
    return RT_OK;
}

static int local_end(struct rt_trainer *t) { return RT_OK; }

static void local_destroy(struct rt_trainer *t) {}

const struct rt_mode_ops rt_mode_local = {
    .name = "local",
    .rows = local_rows,
    .init = local_init,
    .begin = local_begin,
    .epoch_begin = local_epoch_begin,
    .part = local_part,
    .after_backward = local_after_backward,
    .log_window = local_log_window,
    .progress = rt_mode_progress_global,
    .epoch_end = local_epoch_end,
    .evaluate = local_evaluate,
    .agree = local_agree,
    .checkpoint = local_checkpoint,
    .end = local_end,
    .destroy = local_destroy,
};
