/* dist.c — the methods the data-parallel modes share (dist.h). */
#include "config.h"

#include "dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "status.h"
#include "transfer.h"

#define COLL(t) ((t)->coll->ops)
#define CTX(t) ((t)->coll->ctx)

int rt_dist_even_rows(const struct rt_trainer *t)
{
    return (t->c.batch + t->world - 1) / t->world;
}

int rt_dist_init(struct rt_trainer *t, struct rt_dist *d, bool balanced, bool roles,
                 int loader_batch)
{
    t->ms = d;
    d->last_norm = NAN;
    RT_TRY(rt_replica_init(&d->r, t->coll, t->m, t->c.threads));
    RT_TRY(rt_planner_init(&d->pl, t, balanced, roles));
    t->opt = rt_optim_new_trainable(d->r.odev, &t->c.optim, t->m);
    if (!t->opt)
        return RT_ERR_CONFIG; /* rt_optim_new left the reason in the detail */
    if (!(t->loader = rt_loader_new(t->data.train, loader_batch, true, t->c.seed)))
        return RT_ERR_NOMEM;
    rt_loader_set_partial(t->loader); /* each worker reads its share of a batch */
    return RT_OK;
}

void rt_dist_free(struct rt_dist *d)
{
    rt_planner_free(&d->pl);
    rt_replica_free(&d->r);
}

/* images/s of fwd + bwd at an even share of the batch, measured on the
 * first images of the set; the state buffer is put back afterwards so that
 * measuring changes nothing. One warm-up, then the best of three: a busy
 * neighbour should not make a worker look slow for good. */
static int measure_throughput(struct rt_trainer *t, struct rt_dist *d, double *ips)
{
    const rt_dataset *ds = t->data.train;
    int n = rt_dist_even_rows(t);
    n = n > ds->n ? ds->n : n;
    n = n > t->rows ? t->rows : n; /* a memory cap may hold less */
    *ips = 0.0;
    if (n <= 0)
        return RT_OK;
    RT_TRY(rt_replica_pull_state(&d->r));
    rt_view x = rt_buf_view(t->xb), y = rt_buf_view(t->yb);
    /* The set may hold bytes: the model takes the floats a batch has. */
    float *host = malloc((size_t)n * t->chw * sizeof(float));
    int32_t *labels = malloc((size_t)n * sizeof(int32_t));
    int rc = host && labels ? RT_OK
                            : rt_error(RT_ERR_NOMEM, "out of memory for %d images to measure "
                                                     "speed on", n);
    if (rc == RT_OK)
        rc = rt_dataset_rows(ds, 0, n, host, labels);
    if (rc == RT_OK)
        rc = rt_upload(t->dev, x, host, (size_t)n * t->chw * sizeof(float));
    if (rc == RT_OK)
        rc = rt_upload(t->dev, y, labels, (size_t)n * sizeof(int32_t));
    free(labels);
    free(host);
    RT_TRY(rc);
    double best = INFINITY;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = rt_now(), l = 0.0;
        long k = 0;
        RT_TRY(rt_model_forward(t->m, x, n, true, 1));
        RT_TRY(rt_model_loss(t->m, y, n, &l, &k, NULL));
        RT_TRY(rt_model_backward(t->m, x, y, n, 1.0f / (float)n));
        RT_TRY(rt_sync(t->dev));
        if (rep > 0)
            best = fmin(best, rt_now() - t0);
    }
    *ips = n / fmax(best, 1e-9) * (double)d->pl.throttle; /* --throttle sleeps the rest */
    return rt_replica_push_state(&d->r);
}

/* Resuming: the coordinator read its checkpoint and sends every worker the
 * weights, the optimiser state and the position. */
static int dist_restore(struct rt_trainer *t, struct rt_dist *d)
{
    const struct rt_reporter_ops *rep = t->rep.ops;
    if (!rep->restore)
        return RT_OK;
    float *os[2];
    int nopt = 0;
    for (int i = 0; i < rt_optim_state_count(t->opt) && i < 2; i++)
        os[nopt++] = rt_view_host(rt_optim_state(t->opt, i));
    struct rt_ckpt_restore r = {.pos = &t->pos, .params = d->r.p, .np = d->r.np,
                                .state = d->r.hstate, .ns = d->r.ns, .opt = os, .nopt = nopt,
                                .lo = 0, .hi = rt_optim_size(t->opt),
                                .best = t->best_host};
    int rc = rep->restore(t->rep.ctx, &r);
    if (rc <= 0)
        return rc;
    struct rt_train_pos *pos = &t->pos;
    if (pos->step > pos->epoch * t->spe + t->spe || pos->step < pos->epoch * t->spe)
        return rt_error(RT_ERR_CONFIG,
                        "the checkpoint stopped at step %ld of epoch %ld, which does not fit %ld "
                        "steps per epoch: resume with the same data, --limit, --val and --batch",
                        pos->step, pos->epoch + 1, t->spe);
    RT_TRY(rt_replica_push(&d->r));
    RT_TRY(rt_replica_push_state(&d->r));
    rt_optim_set_steps(t->opt, pos->step);
    t->have_best = r.have_best && isfinite(pos->best_metric);
    return RT_OK;
}

/* Form the new group and take its state, again while the members change
 * meanwhile (fresh: this worker holds none yet). */
static int regroup_recover(struct rt_trainer *t, bool fresh)
{
    const rt_collective *c = t->coll;
    RT_ASSERT(c->ops->regroup && t->mode->recover);
    for (;;) {
        int rc = c->ops->regroup(c->ctx, &t->rank, &t->world);
        if (rc == RT_OK)
            rc = t->mode->recover(t, fresh);
        if (rc != RT_ERR_REGROUP)
            return rc;
    }
}

/* Every worker from the same state: the checkpoint the coordinator holds
 * (the same bits everywhere), rank 0's weights otherwise; then the first
 * plan. */
static int first_state(struct rt_trainer *t, struct rt_dist *d, double ips)
{
    RT_TRY(dist_restore(t, d));
    RT_TRY(rt_replica_broadcast(&d->r));
    if (d->pl.balanced)
        RT_TRY(rt_planner_replan(&d->pl, t->pos.step, ips, "speeds measured at start"));
    return RT_OK;
}

int rt_dist_begin(struct rt_trainer *t, const char *mode_words)
{
    struct rt_dist *d = t->ms;
    const struct rt_train_config *c = &t->c;
    double ips = 0.0;
    RT_TRY(measure_throughput(t, d, &ips));
    char line[1536], lr[256] = "";
    if (c->lr_scale != RT_LR_SCALE_NONE) {
        lr[0] = ';';
        lr[1] = ' ';
        rt_trainer_lr_text(t, lr + 2, sizeof lr - 2);
    }
    snprintf(line, sizeof line, "training %.400s on %.200s (%ld train, %d val, %d test images), "
                                "%zu parameters, %s lr %g, batch %d (%d workers), %d epochs%s%s",
             c->model_path, t->data.train->name, t->ntrain, t->data.val ? t->data.val->n : 0,
             t->data.test ? t->data.test->n : 0, rt_model_param_count(t->m),
             rt_optim_kind_name(c->optim.kind), c->optim.lr, c->batch, t->world, c->epochs,
             mode_words, lr);
    int joined;
    while ((joined = t->rep.ops->ready(t->rep.ctx, ips * d->pl.quota_scale, line)) == 2)
        RT_TRY(measure_throughput(t, d, &ips)); /* held back as too slow: again */
    RT_TRY(joined);
    d->pl.plan_speed = ips; /* gossip's first epoch is planned from it */
    if (joined == 1) {
        /* a run under way took this worker in: its group and its state */
        d->no_state = true;
        return regroup_recover(t, true);
    }
    if (joined == 3) {
        /* a member was lost while the first ring formed: the others may be
         * a step ahead (theirs formed), so all take one state */
        RT_TRY(dist_restore(t, d));
        return regroup_recover(t, false);
    }
    int rc = first_state(t, d, ips);
    if (rc == RT_ERR_REGROUP && t->coll->ops->regroup && t->mode->recover)
        return regroup_recover(t, false); /* a member lost at the start */
    return rc;
}

int rt_dist_epoch_sums(struct rt_trainer *t, struct rt_epoch *e)
{
    struct rt_dist *d = t->ms;
    double s[6] = {e->loss_sum, (double)e->correct, (double)e->seen,
                   e->used[0], e->used[1], e->used[2]};
    if (!e->sums_global)
        RT_TRY(COLL(t)->allreduce_f64(CTX(t), s, 6));
    RT_TRY(rt_replica_average_state(&d->r));
    e->loss_sum = s[0];
    e->correct = (long)s[1];
    e->seen = (long)s[2];
    for (int i = 0; i < 3; i++)
        e->used[i] = s[3 + i]; /* all of them: a close done again checks these */
    e->seen_all = e->seen;
    e->has_samples = true;
    e->sums_global = true; /* a close done again does not sum them again */
    double nn = (double)t->ntrain;
    if (e->whole &&
        (s[3] != nn || s[4] != nn * (nn - 1) / 2 || s[5] != (nn - 1) * nn * (2 * nn - 1) / 6))
        return rt_error(RT_ERR_ARG, "epoch %ld used %.0f samples (index sums %.0f, %.0f) where "
                                    "the set has %ld, each once: the workers' shares do not tile "
                                    "the epoch",
                        e->epoch + 1, s[3], s[4], s[5], t->ntrain);
    return RT_OK;
}

/* Loss and accuracy over the whole of ds: each rank evaluates its share. */
int rt_dist_evaluate(struct rt_trainer *t, const rt_dataset *ds, double *loss, double *acc)
{
    struct rt_dist *d = t->ms;
    long lo, hi;
    rt_planner_eval_part(&d->pl, ds->n, &lo, &hi);
    double sums[3] = {0.0, 0.0, 0.0};
    const double w0 = rt_now(), c0 = rt_cpu_now();
    RT_TRY(rt_evaluator_sums(t->ev, ds, lo, hi, sums, NULL));
    RT_TRY(COLL(t)->allreduce_f64(CTX(t), sums, 3));
    rt_evaluator_metrics(sums, loss, acc);
    rt_planner_exclude(&d->pl, rt_cpu_now() - c0, rt_now() - w0);
    return RT_OK;
}

int rt_dist_agree(struct rt_trainer *t, void *buf, size_t bytes)
{
    return COLL(t)->broadcast(CTX(t), buf, bytes, 0);
}

/* A checkpoint, from rank 0 alone: every worker holds the whole optimiser
 * state (with_opt), the parameters and the state. */
static int send_part(struct rt_trainer *t, struct rt_dist *d, const char *which, bool with_opt)
{
    struct rt_ckpt_part part = {.pos = &t->pos, .lo = 0, .hi = rt_optim_size(t->opt)};
    RT_TRY(rt_replica_pull(&d->r));
    RT_TRY(rt_replica_pull_state(&d->r));
    part.params = d->r.p;
    part.np = d->r.np;
    part.state = d->r.ns ? d->r.hstate : NULL;
    part.ns = d->r.ns;
    const float *os[2];
    const char *names[2];
    for (int i = 0; with_opt && i < rt_optim_state_count(t->opt) && i < 2; i++) {
        os[i] = rt_view_host(rt_optim_state(t->opt, i));
        names[i] = rt_optim_state_name(t->opt, i);
        part.nopt++;
    }
    part.opt = os;
    part.opt_names = names;
    return t->rep.ops->checkpoint(t->rep.ctx, which, &part);
}

int rt_dist_checkpoint(struct rt_trainer *t, enum rt_ckpt_which which)
{
    struct rt_dist *d = t->ms;
    switch (which) {
    case RT_CKPT_LAST:
    case RT_CKPT_STOP:
        return t->rep.want_checkpoints && t->rank == 0 ? send_part(t, d, "last", true) : RT_OK;
    case RT_CKPT_BEST:
        return t->rep.want_checkpoints && t->rank == 0 ? send_part(t, d, "best", false) : RT_OK;
    case RT_CKPT_FINAL:
        return t->rep.want_final && t->rank == 0 ? send_part(t, d, "final", false) : RT_OK;
    }
    return RT_OK;
}

int rt_dist_end(struct rt_trainer *t)
{
    struct rt_dist *d = t->ms;
    struct rt_train_result *res = t->res;
    RT_TRY(rt_dist_checkpoint(t, RT_CKPT_FINAL));
    RT_TRY(rt_replica_hash(&d->r, &res->params_hash));
    res->local_steps = d->local_steps;
    res->train_seconds = d->local_train;
    res->gossip_averagings = d->averagings;
    res->plans = d->pl.plans;
    if (d->pl.balanced && t->rank == 0) {
        /* the plan the run ended with, and how often it moved */
        char why[96];
        snprintf(why, sizeof why, "end; %ld plans, %ld taken", d->pl.plans, d->pl.plans_changed);
        RT_TRY(rt_planner_say_plan(&d->pl, t->pos.step, why));
    }
    return RT_OK;
}

int rt_dist_local_step(struct rt_trainer *t, struct rt_dist *d, bool want_norm)
{
    RT_TRY(rt_replica_pull_grads(&d->r));
    RT_TRY(rt_optim_step(t->opt, d->r.pv, d->r.gv, want_norm));
    d->last_norm = rt_optim_last_grad_norm(t->opt);
    return RT_OK;
}
