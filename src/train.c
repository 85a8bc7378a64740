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
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "data.h"
#include "metrics.h"
#include "model.h"
#include "partition.h"
#include "progress.h"
#include "status.h"
#include "train-testing.h"

static volatile sig_atomic_t stop_requested;

#define RT_STANDBY_PROBE_EVERY 8 /* steps between a standby worker's probes */

void rt_train_request_stop(void) { stop_requested = 1; }

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

/* Summed loss, correct predictions and count of `ds` in inference mode;
 * fills `confusion` (classes^2) when given. */
static int evaluate_sums(struct evaluator *ev, const rt_dataset *ds, int batch, double *sums,
                         long *confusion)
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
    sums[0] = loss_sum;
    sums[1] = (double)correct;
    sums[2] = (double)seen;
    return RT_OK;
}

static void sums_to_metrics(const double *sums, double *loss, double *acc)
{
    *loss = sums[2] > 0 ? sums[0] / sums[2] : NAN;
    *acc = sums[2] > 0 ? sums[1] / sums[2] : NAN;
}

/* Loss and accuracy of `ds` in inference mode; fills `confusion` (classes^2)
 * when given. */
static int evaluate(struct evaluator *ev, const rt_dataset *ds, int batch, double *loss,
                    double *acc, long *confusion)
{
    double sums[3];
    RT_TRY(evaluate_sums(ev, ds, batch, sums, confusion));
    sums_to_metrics(sums, loss, acc);
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


static bool improved(const struct rt_train_config *c, double value, double best, bool have_best)
{
    if (!have_best)
        return isfinite(value);
    if (c->monitor == RT_MONITOR_VAL_ACC)
        return value > best + c->min_delta;
    return value < best - c->min_delta;
}

/* ---- data parallel: helpers ------------------------------------------------------- */


void rt_train_share(long n, int world, int rank, long *lo, long *hi)
{
    RT_ASSERT(world >= 1 && rank >= 0 && rank < world && n >= 0);
    *lo = (long)((__int128)n * rank / world);
    *hi = (long)((__int128)n * (rank + 1) / world);
}

/* A worker's side of the sync algorithm. The gradient is reduce-scattered
 * on the host, the optimiser updates this rank's slice [lo, hi) there, and
 * the parameters are all-gathered. On the cpu backend the model's buffers
 * ARE host memory: the collectives work on them in place and the optimiser
 * uses views into them. Other backends go through host mirrors, one
 * download of the gradient and one upload of the parameters per step. */
struct dist {
    const struct rt_train_comm *comm;
    int rank, world;
    enum rt_dist_mode mode;
    bool balanced;  /* shares by measured speed (sync, average) */
    size_t np, ns;
    size_t lo, hi;  /* this rank's slice: optimiser (sync) and checkpoints */
    size_t olo;     /* first parameter the optimiser covers: lo (sync), 0 (local modes) */
    bool alias;
    rt_dev *hdev;   /* cpu device of the mirrors (not aliased) */
    rt_buf *hp, *hg;
    float *p, *g;   /* host: all parameters / gradients */
    rt_view pv, gv; /* the same, as views on the optimiser's device */
    rt_dev *odev;   /* the optimiser's device: always host memory */
    float *hstate;  /* host copy of the state buffer */
    float *tmp;     /* np floats of scratch (gossip: the mean) */
    double last_norm;
    /* the plan (partition.h): speeds and roles as last exchanged, the
     * shares of a full batch and of a short one */
    double *speed;
    bool *active;
    long *share, *off, *nshare, *noff;
    struct rt_speedo speedo;
    double plan_speed;   /* this rank's speed when the plan was made */
    long plan_step;      /* step of the last plan */
    long plans, plans_changed;
    double since;        /* average mode: samples since the last averaging */
    float throttle;      /* testing aid: fraction of this worker's speed */
    double quota_scale;  /* CPU quota / threads, at most 1 (rt_cpu_quota) */
    double quota;        /* the quota in cores, 0: none */
    /* since the last plan, for a quota-limited worker: process CPU time at
     * its start, CPU spent computing, samples and steps */
    double qcpu0, qcompute;
    long qsamples, qsteps;
    double wall_rate;    /* gossip: samples / step-loop seconds of the last epoch */
};

static int dist_init(struct dist *d, const struct rt_train_comm *comm, rt_model *m, int threads,
                     const struct rt_train_config *c)
{
    memset(d, 0, sizeof *d);
    d->comm = comm;
    d->rank = comm->rank;
    d->world = comm->world;
    d->mode = c->mode;
    d->balanced = c->partition == RT_PARTITION_BALANCED && c->mode != RT_MODE_GOSSIP;
    d->np = rt_model_param_count(m);
    d->ns = rt_model_state_count(m);
    d->last_norm = NAN;
    d->throttle = 1.0f;
    long lo, hi;
    rt_train_share((long)d->np, d->world, d->rank, &lo, &hi);
    d->lo = (size_t)lo;
    d->hi = (size_t)hi;
    d->olo = c->mode == RT_MODE_SYNC ? d->lo : 0;
    rt_dev *dev = rt_model_dev(m);
    if (rt_view_host(rt_model_params(m)) && !strcmp(rt_dev_backend(dev), "cpu")) {
        d->alias = true;
        d->odev = dev;
        d->pv = rt_model_params(m);
        d->gv = rt_model_grads(m);
    } else {
        if (!(d->hdev = rt_dev_open("cpu", 0, threads)))
            return RT_ERR_DEVICE;
        d->odev = d->hdev;
        d->hp = rt_buf_new(d->hdev, (d->np ? d->np : 1) * sizeof(float));
        d->hg = rt_buf_new(d->hdev, (d->np ? d->np : 1) * sizeof(float));
        if (!d->hp || !d->hg)
            return rt_error(RT_ERR_NOMEM, "no host memory for a copy of %zu parameters", d->np);
        d->pv = rt_buf_view(d->hp);
        d->gv = rt_buf_view(d->hg);
    }
    d->p = rt_view_host(d->pv);
    d->g = rt_view_host(d->gv);
    if (d->ns && !(d->hstate = malloc(d->ns * sizeof(float))))
        return rt_error(RT_ERR_NOMEM, "no host memory for the model state");
    int W = d->world;
    if (W > RT_PLAN_MAX)
        return rt_error(RT_ERR_CONFIG, "%d workers: a run holds at most %d", W, RT_PLAN_MAX);
    d->speed = calloc((size_t)W, sizeof *d->speed);
    d->active = calloc((size_t)W, sizeof *d->active);
    d->share = calloc((size_t)W * 4, sizeof *d->share);
    d->tmp = c->mode == RT_MODE_GOSSIP ? malloc((d->np ? d->np : 1) * sizeof(float)) : NULL;
    if (!d->speed || !d->active || !d->share || (c->mode == RT_MODE_GOSSIP && !d->tmp))
        return rt_error(RT_ERR_NOMEM, "out of memory");
    d->off = d->share + W;
    d->nshare = d->share + 2 * W;
    d->noff = d->share + 3 * W;
    for (int r = 0; r < W; r++) {
        d->active[r] = true;
        d->speed[r] = 1.0;
    }
    /* A worker in a CPU-quota cgroup (docker --cpus) computes in bursts:
     * what it sustains is its burst speed x quota / threads. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double q = rt_cpu_quota(), th = c->threads > 0 ? c->threads : (cores > 0 ? (double)cores : 1.0);
    d->quota_scale = q > 0.0 && q < th ? q / th : 1.0;
    d->quota = d->quota_scale < 1.0 ? q : 0.0;
    if (d->quota_scale < 1.0)
        fprintf(stderr, "ragtag: [plan] rank %d: its cgroup allows %.2f cores for %.0f compute "
                        "threads: its speeds count x %.2f\n",
                d->rank, q, th, d->quota_scale);
    if (rt_train_testing_throttle(c) > 0.0f) {
        d->throttle = rt_train_testing_throttle(c);
        if (!(d->throttle <= 1.0f))
            return rt_error(RT_ERR_CONFIG, "--throttle %g: one worker takes one fraction in "
                                           "(0, 1]", (double)d->throttle);
    }
    return RT_OK;
}

static void dist_free(struct dist *d)
{
    free(d->speed);
    free(d->active);
    free(d->share);
    free(d->tmp);
    d->speed = NULL;
    d->active = NULL;
    d->share = NULL;
    d->tmp = NULL;
    rt_buf_destroy(&d->hp);
    rt_buf_destroy(&d->hg);
    rt_dev_close(&d->hdev);
    free(d->hstate);
    d->hstate = NULL;
}

static int dist_params_to_host(struct dist *d, rt_model *m)
{
    if (d->alias)
        return RT_OK;
    return rt_download(rt_model_dev(m), d->p, rt_model_params(m), d->np * sizeof(float));
}

static int dist_params_to_model(struct dist *d, rt_model *m)
{
    if (d->alias)
        return RT_OK;
    return rt_upload(rt_model_dev(m), rt_model_params(m), d->p, d->np * sizeof(float));
}

/* One synchronous step after backward. flags: in, this worker's (bit 0:
 * stop); out, the OR of every worker's.
 *
 * Measured and not kept: pipelining the optimiser into the collective
 * (each part of the slice updated as soon as it is summed, sent on at
 * once). On 2 cores with 2 workers the update ran on the thread that moves
 * the data, nothing overlapped, and seedcnn steps got slower (2.7-3.1 ms
 * of communication per step against 2.0-2.5 ms this way). */
static int dist_step(struct dist *d, rt_model *m, rt_optim *opt, float clip, bool need_norm,
                     uint32_t *flags)
{
    const struct rt_train_comm *cm = d->comm;
    if (!d->alias)
        RT_TRY(rt_download(rt_model_dev(m), d->g, rt_model_grads(m), d->np * sizeof(float)));
    RT_TRY(cm->reduce_scatter(cm->ctx, d->g, d->np, flags));
    size_t n = d->hi - d->lo;
    rt_view gs = rt_view_at(d->gv, d->lo), ps = rt_view_at(d->pv, d->lo);
    if (clip > 0.0f || need_norm) {
        double ss = 0.0;
        RT_TRY(rt_op_sumsq(d->odev, n, gs, &ss));
        RT_TRY(cm->allreduce_f64(cm->ctx, &ss, 1));
        d->last_norm = sqrt(ss);
        if (clip > 0.0f && isfinite(d->last_norm) && d->last_norm > (double)clip)
            RT_TRY(rt_op_scale(d->odev, n, (float)((double)clip / d->last_norm), gs));
    }
    RT_TRY(rt_optim_step(opt, ps, gs));
    RT_TRY(cm->all_gather(cm->ctx, d->p, d->np, flags));
    return dist_params_to_model(d, m);
}

/* Every replica starts from rank 0's parameters and state, bit for bit. */
static int dist_broadcast_model(struct dist *d, rt_model *m)
{
    const struct rt_train_comm *cm = d->comm;
    RT_TRY(dist_params_to_host(d, m));
    RT_TRY(cm->broadcast(cm->ctx, d->p, d->np * sizeof(float), 0));
    RT_TRY(dist_params_to_model(d, m));
    if (d->ns) {
        RT_TRY(rt_download(rt_model_dev(m), d->hstate, rt_model_state(m), d->ns * sizeof(float)));
        RT_TRY(cm->broadcast(cm->ctx, d->hstate, d->ns * sizeof(float), 0));
        RT_TRY(rt_upload(rt_model_dev(m), rt_model_state(m), d->hstate, d->ns * sizeof(float)));
    }
    return RT_OK;
}

/* Batch-norm running statistics follow each worker's own share during an
 * epoch; at its end they are averaged, so evaluation, checkpoints and the
 * next epoch start from one state on every replica. */
static int dist_average_state(struct dist *d, rt_model *m)
{
    if (!d->ns || d->world == 1)
        return RT_OK;
    RT_TRY(rt_download(rt_model_dev(m), d->hstate, rt_model_state(m), d->ns * sizeof(float)));
    RT_TRY(d->comm->allreduce(d->comm->ctx, d->hstate, d->ns, NULL));
    float inv = 1.0f / (float)d->world;
    for (size_t i = 0; i < d->ns; i++)
        d->hstate[i] *= inv;
    return rt_upload(rt_model_dev(m), rt_model_state(m), d->hstate, d->ns * sizeof(float));
}

/* Loss and accuracy over the whole of ds: each rank evaluates its share. */
static int dist_evaluate(struct dist *d, struct evaluator *ev, const rt_dataset *ds, int batch,
                         double *loss, double *acc)
{
    long lo, hi;
    rt_train_share(ds->n, d->world, d->rank, &lo, &hi);
    if (d->plans > 0) { /* by speed, like the training shares (standby: none) */
        rt_plan_shares(ds->n, d->world, d->speed, d->balanced ? d->active : NULL, d->nshare);
        rt_plan_offsets(d->world, d->nshare, d->noff);
        lo = d->noff[d->rank];
        hi = lo + d->nshare[d->rank];
    }
    size_t chw = (size_t)ds->c * ds->h * ds->w;
    rt_dataset part = *ds;
    part.n = (int)(hi - lo);
    part.x = ds->x + (size_t)lo * chw;
    part.y = ds->y + lo;
    double sums[3] = {0.0, 0.0, 0.0};
    if (part.n > 0)
        RT_TRY(evaluate_sums(ev, &part, batch, sums, NULL));
    RT_TRY(d->comm->allreduce_f64(d->comm->ctx, sums, 3));
    sums_to_metrics(sums, loss, acc);
    return RT_OK;
}

static int dist_checkpoint(struct dist *d, rt_model *m, rt_optim *opt, const char *which,
                           const struct rt_train_pos *pos, bool with_opt)
{
    const float *params = NULL, *state = NULL;
    if (d->rank == 0) {
        RT_TRY(dist_params_to_host(d, m));
        params = d->p;
        if (d->ns) {
            RT_TRY(rt_download(rt_model_dev(m), d->hstate, rt_model_state(m),
                               d->ns * sizeof(float)));
            state = d->hstate;
        }
    }
    const float *os[2];
    const char *names[2];
    int nopt = 0;
    for (int i = 0; with_opt && i < rt_optim_state_count(opt) && i < 2; i++) {
        os[i] = (const float *)rt_view_host(rt_optim_state(opt, i)) + (d->lo - d->olo);
        names[i] = rt_optim_state_name(opt, i);
        nopt++;
    }
    return d->comm->checkpoint(d->comm->ctx, which, pos, params, params ? d->np : 0, state,
                               state ? d->ns : 0, os, names, nopt, d->lo, d->hi);
}

/* Resuming: the coordinator read its checkpoint and sends each worker the
 * weights, its optimiser slice and the position. */
static int dist_restore(struct dist *d, rt_model *m, rt_optim *opt, struct rt_train_pos *pos,
                        long spe, float *best_host, bool *have_best)
{
    const struct rt_train_comm *cm = d->comm;
    if (!cm->restore)
        return RT_OK;
    float *os[2];
    int nopt = 0;
    for (int i = 0; i < rt_optim_state_count(opt) && i < 2; i++)
        os[nopt++] = (float *)rt_view_host(rt_optim_state(opt, i)) + (d->lo - d->olo);
    bool hb = false;
    int rc = cm->restore(cm->ctx, pos, d->p, d->np, d->hstate, d->ns, os, nopt, d->lo, d->hi,
                         best_host, &hb);
    if (rc <= 0)
        return rc;
    if (pos->step > pos->epoch * spe + spe || pos->step < pos->epoch * spe)
        return rt_error(RT_ERR_CONFIG,
                        "the checkpoint stopped at step %ld of epoch %ld, which does not fit %ld "
                        "steps per epoch: resume with the same data, --limit, --val and --batch",
                        pos->step, pos->epoch + 1, spe);
    /* Local modes keep the whole optimiser state on every worker: the
     * checkpoint gave each its slice, the ring completes them. */
    for (int i = 0; d->olo == 0 && d->world > 1 && d->mode != RT_MODE_SYNC && i < nopt; i++)
        RT_TRY(cm->all_gather(cm->ctx, os[i] - d->lo, d->np, NULL));
    RT_TRY(dist_params_to_model(d, m));
    if (d->ns)
        RT_TRY(rt_upload(rt_model_dev(m), rt_model_state(m), d->hstate, d->ns * sizeof(float)));
    rt_optim_set_steps(opt, pos->step);
    *have_best = hb && isfinite(pos->best_metric);
    return RT_OK;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

static int dist_hash(struct dist *d, rt_model *m, uint64_t *out)
{
    RT_TRY(dist_params_to_host(d, m));
    uint64_t h = fnv1a(0xcbf29ce484222325ull, d->p, d->np * sizeof(float));
    if (d->ns) {
        RT_TRY(rt_download(rt_model_dev(m), d->hstate, rt_model_state(m), d->ns * sizeof(float)));
        h = fnv1a(h, d->hstate, d->ns * sizeof(float));
    }
    *out = h;
    return RT_OK;
}


/* ---- the plan: shares by speed ------------------------------------------------------ */

static void dist_say(struct dist *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dist_say(struct dist *d, const char *fmt, ...)
{
    if (d->rank != 0)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    d->comm->line(d->comm->ctx, line);
}

/* "ragtag: [plan] step S (why): shares of batch B by rank: 29 28 7 at img/s ..." */
static void dist_say_plan(struct dist *d, const struct rt_train_config *c, long step,
                          const char *why)
{
    char buf[1600];
    int len = 0;
    for (int r = 0; r < d->world && len < (int)sizeof buf - 40; r++)
        len += snprintf(buf + len, sizeof buf - len, "%s%ld", r ? " " : "", d->share[r]);
    len += snprintf(buf + len, sizeof buf - len, " at img/s");
    for (int r = 0; r < d->world && len < (int)sizeof buf - 40; r++)
        len += snprintf(buf + len, sizeof buf - len, " %.0f", d->speed[r]);
    dist_say(d, "ragtag: [plan] step %ld (%s): shares of batch %d by rank: %s", step, why,
             c->batch, buf);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What a quota-limited worker can sustain: its quota, less the CPU it
 * spends outside computing (ring traffic, its optimiser slice, ...) at the
 * step rate the last plan aimed at, turned into samples at the CPU cost of
 * a sample. burst x quota / threads alone leaves no room for the ring
 * work, and a worker that runs out of quota freezes the ring. */
static double dist_quota_speed(struct dist *d, const struct rt_train_config *c, double rep)
{
    if (d->quota > 0.0 && d->qsteps >= 8 && d->qsamples > 0 && d->qcompute > 0.0) {
        double other = fmax(0.0, cpu_now() - d->qcpu0 - d->qcompute) / (double)d->qsteps;
        double per_sample = d->qcompute / (double)d->qsamples;
        double sum = 0.0;
        for (int r = 0; r < d->world; r++)
            sum += d->speed[r];
        double rate = sum > 0.0 ? sum / c->batch : 0.0; /* steps/s of the last plan */
        double avail = d->quota - rate * other;
        rep = fmin(rep, avail > 0.0 ? avail / per_sample : 1e-3);
    }
    d->qcpu0 = cpu_now();
    d->qcompute = 0.0;
    d->qsamples = d->qsteps = 0;
    return rep;
}

/* Everybody's current speed, the same bits on every rank. */
static int dist_exchange_speeds(struct dist *d, double mine)
{
    for (int r = 0; r < d->world; r++)
        d->speed[r] = 0.0;
    d->speed[d->rank] = mine;
    return d->comm->allreduce_f64(d->comm->ctx, d->speed, (size_t)d->world);
}

/* Shares of a full batch from the speeds just exchanged, logged by rank 0
 * when they change (and the roles, when a worker goes on or leaves standby). */
static int dist_replan(struct dist *d, const struct rt_train_config *c, long step, double mine,
                       const char *why)
{
    /* Gossip plans whole epochs: the rate over the last epoch's loop (wall
     * time, so it sees quota freezes and exchanges) is steadier than a
     * 16-step window. Otherwise the compute speed, for a quota-limited
     * worker what its quota sustains. */
    double rep = d->wall_rate > 0.0 ? d->wall_rate
                                    : dist_quota_speed(d, c, mine * d->quota_scale);
    double ospeed[RT_PLAN_MAX];
    memcpy(ospeed, d->speed, (size_t)d->world * sizeof *ospeed);
    RT_TRY(dist_exchange_speeds(d, rep));
    d->plan_speed = mine;
    d->plan_step = step;
    d->speedo.filled = 0; /* measure the new shares afresh */
    d->speedo.next = 0;
    int W = d->world;
    long old[RT_PLAN_MAX];
    bool was[RT_PLAN_MAX];
    for (int r = 0; r < W; r++) {
        old[r] = d->share[r];
        was[r] = d->active[r];
    }
    bool roles = false;
    if (d->mode != RT_MODE_GOSSIP)
        roles = rt_plan_standby(W, d->speed, c->min_share, d->active);
    rt_plan_shares(c->batch, W, d->speed, d->active, d->share);
    d->plans++;
    /* A move of a sample or two is noise (a smaller share runs at fewer
     * img/s, which asks for a smaller share...): keep the plan then, shares
     * and the speeds they came from together. */
    long moved = 0, slack = c->batch / 50 > 1 ? c->batch / 50 : 1;
    for (int r = 0; r < W; r++)
        moved = labs(old[r] - d->share[r]) > moved ? labs(old[r] - d->share[r]) : moved;
    bool changed = d->plans == 1 || roles || moved > slack;
    if (!changed)
        for (int r = 0; r < W; r++) {
            d->share[r] = old[r];
            d->speed[r] = ospeed[r];
        }
    rt_plan_offsets(W, d->share, d->off);
    if (d->rank == 0) {
        double mean = 0.0;
        int nact = 0;
        for (int r = 0; r < W; r++)
            if (was[r] || d->plans == 1)
                mean += d->speed[r], nact++;
        mean = nact ? mean / nact : 0.0;
        for (int r = 0; r < W; r++) {
            if (was[r] && !d->active[r])
                dist_say(d, "ragtag: [plan] rank %d on standby at step %ld: %.0f img/s is below --min-share "
                            "%g of the mean %.0f img/s; it keeps its replica and takes no "
                            "samples", r, step, d->speed[r], (double)c->min_share, mean);
            else if (!was[r] && d->active[r] && d->plans > 1)
                dist_say(d, "ragtag: [plan] rank %d back from standby at step %ld: %.0f img/s", r, step,
                         d->speed[r]);
        }
    }
    if (changed)
        d->plans_changed++;
    if (d->rank == 0 && d->mode != RT_MODE_GOSSIP && changed)
        dist_say_plan(d, c, step, why);
    return RT_OK;
}

/* This rank's part [a, b) of a global batch of n. */
static void dist_part(struct dist *d, long n, long full, long *a, long *b)
{
    if (!d->balanced) {
        rt_train_share(n, d->world, d->rank, a, b);
        return;
    }
    const long *sh = d->share, *of = d->off;
    if (n != full) {
        rt_plan_shares(n, d->world, d->speed, d->active, d->nshare);
        rt_plan_offsets(d->world, d->nshare, d->noff);
        sh = d->nshare;
        of = d->noff;
    }
    *a = of[d->rank];
    *b = *a + sh[d->rank];
}

/* ---- local modes (average, gossip) ----------------------------------------------------- */

/* One optimiser step of this worker alone on all of its parameters. */
static int dist_local_step(struct dist *d, rt_model *m, rt_optim *opt)
{
    if (!d->alias)
        RT_TRY(rt_download(rt_model_dev(m), d->g, rt_model_grads(m), d->np * sizeof(float)));
    RT_TRY(rt_optim_step(opt, d->pv, d->gv));
    d->last_norm = rt_optim_last_grad_norm(opt);
    return RT_OK;
}

/* Average mode: the parameters and the optimiser state (momentum, Adam
 * moments), weighted by the samples each worker processed since the last
 * averaging (a standby worker weighs nothing). With SGD and H = 1 this is
 * exactly sync's maths; averaging the state too keeps the workers'
 * momenta from pulling apart between averagings (measured: +0.4 points
 * after one lenet epoch with Adam). Every rank ends with the same bits:
 * one ring sum, one scale. */
static int dist_average_params(struct dist *d, rt_model *m, rt_optim *opt, uint32_t *flags)
{
    const struct rt_train_comm *cm = d->comm;
    double tot = d->since;
    RT_TRY(cm->allreduce_f64(cm->ctx, &tot, 1));
    if (tot > 0.0) {
        float w = (float)(d->since / tot);
        RT_TRY(rt_op_scale(d->odev, d->np, w, d->pv));
        RT_TRY(cm->allreduce(cm->ctx, d->p, d->np, flags));
        for (int i = 0; opt && i < rt_optim_state_count(opt); i++) {
            rt_view v = rt_optim_state(opt, i);
            RT_TRY(rt_op_scale(d->odev, d->np, w, v));
            RT_TRY(cm->allreduce(cm->ctx, rt_view_host(v), d->np, NULL));
        }
    }
    d->since = 0.0;
    return dist_params_to_model(d, m);
}

/* The mean of every worker's optimiser state (local modes, epoch end): so
 * that a checkpoint, made of every rank's slice, is one coherent state. */
static int dist_average_opt(struct dist *d, rt_optim *opt)
{
    float inv = 1.0f / (float)d->world;
    for (int i = 0; i < rt_optim_state_count(opt); i++) {
        rt_view v = rt_optim_state(opt, i);
        RT_TRY(d->comm->allreduce(d->comm->ctx, rt_view_host(v), d->np, NULL));
        RT_TRY(rt_op_scale(d->odev, d->np, inv, v));
    }
    return RT_OK;
}

/* Gossip, epoch end: every replica becomes the mean of all replicas. The
 * consensus distance — the RMS over workers of |p_i - mean|, and that
 * relative to |mean| — says how far apart they drifted. */
static int dist_gossip_converge(struct dist *d, rt_model *m, uint32_t *flags, double *dist_abs,
                                double *dist_rel)
{
    const struct rt_train_comm *cm = d->comm;
    memcpy(d->tmp, d->p, d->np * sizeof(float));
    RT_TRY(cm->allreduce(cm->ctx, d->tmp, d->np, flags));
    float inv = 1.0f / (float)d->world;
    double s[2] = {0.0, 0.0};
    for (size_t i = 0; i < d->np; i++) {
        float mean = d->tmp[i] * inv;
        double e = (double)d->p[i] - (double)mean;
        s[0] += e * e;
        s[1] += (double)mean * (double)mean;
        d->p[i] = mean;
    }
    s[1] /= d->world; /* every rank adds the same |mean|^2 */
    RT_TRY(cm->allreduce_f64(cm->ctx, s, 2));
    *dist_abs = sqrt(s[0] / d->world);
    *dist_rel = s[1] > 0.0 ? *dist_abs / sqrt(s[1]) : 0.0;
    return dist_params_to_model(d, m);
}

/* Testing aid (--throttle F): sleep so that this worker runs at fraction F
 * of its speed. */
static double throttle_sleep(float f, double busy)
{
    if (!(f < 1.0f) || busy <= 0.0)
        return 0.0;
    double t = busy * (1.0 / (double)f - 1.0);
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - floor(t)) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    return t;
}

/* images/s of fwd + bwd at this worker's share of the batch, measured on
 * the first images of the set; the state buffer is put back afterwards so
 * that measuring changes nothing. */
static int measure_throughput(rt_model *m, rt_dev *dev, rt_buf *xb, rt_buf *yb,
                              const rt_dataset *ds, int n, float throttle, float *state_tmp,
                              double *ips)
{
    size_t chw = (size_t)ds->c * ds->h * ds->w;
    size_t ns = rt_model_state_count(m);
    if (n > ds->n)
        n = ds->n;
    *ips = 0.0;
    if (n <= 0)
        return RT_OK;
    if (ns)
        RT_TRY(rt_download(dev, state_tmp, rt_model_state(m), ns * sizeof(float)));
    RT_TRY(rt_upload(dev, rt_buf_view(xb), ds->x, (size_t)n * chw * sizeof(float)));
    RT_TRY(rt_upload(dev, rt_buf_view(yb), ds->y, (size_t)n * sizeof(int32_t)));
    /* one warm-up, then the best of three: a busy neighbour should not
     * make a worker look slow for good */
    double best = INFINITY;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = rt_now(), l = 0.0;
        long k = 0;
        RT_TRY(rt_model_forward(m, rt_buf_view(xb), n, true, 1));
        RT_TRY(rt_model_loss(m, rt_buf_view(yb), n, &l, &k, NULL));
        RT_TRY(rt_model_backward(m, rt_buf_view(xb), rt_buf_view(yb), n, 1.0f / (float)n));
        RT_TRY(rt_sync(dev));
        if (rep > 0)
            best = fmin(best, rt_now() - t0);
    }
    *ips = n / fmax(best, 1e-9) * (double)throttle; /* --throttle sleeps the rest */
    if (ns)
        RT_TRY(rt_upload(dev, rt_model_state(m), state_tmp, ns * sizeof(float)));
    return RT_OK;
}

/* ---- reports: the metrics file and the screen (locally), rank 0 -> the
 * coordinator (data parallel) ------------------------------------------------------ */

struct fields {
    struct rt_train_field f[16];
    int n;
};

static void fnum(struct fields *fs, const char *key, double v)
{
    RT_ASSERT(fs->n < 16);
    fs->f[fs->n++] = (struct rt_train_field){.key = key, .kind = 'n', .num = v};
}

static void fint(struct fields *fs, const char *key, long v)
{
    RT_ASSERT(fs->n < 16);
    fs->f[fs->n++] = (struct rt_train_field){.key = key, .kind = 'i', .integer = v};
}

static int emit_fields(rt_metrics *mf, const struct rt_train_comm *comm, const struct fields *fs)
{
    if (comm)
        return comm->rank == 0 ? comm->metrics(comm->ctx, fs->f, fs->n) : RT_OK;
    if (!mf)
        return RT_OK;
    rt_metrics_begin(mf);
    for (int i = 0; i < fs->n; i++) {
        if (fs->f[i].kind == 'i')
            rt_metrics_int(mf, fs->f[i].key, fs->f[i].integer);
        else
            rt_metrics_num(mf, fs->f[i].key, fs->f[i].num);
    }
    return rt_metrics_end(mf);
}

static int emit_line(rt_progress *prog, const struct rt_train_comm *comm, const char *line)
{
    if (comm)
        return comm->rank == 0 ? comm->line(comm->ctx, line) : RT_OK;
    rt_progress_epoch(prog, line);
    return RT_OK;
}

/* ---- the run -------------------------------------------------------------------- */

static int train_main(const struct rt_train_config *cin, const struct rt_train_comm *comm,
                      struct rt_train_result *res)
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
    struct dist dist = {0};
    struct dist *D = comm ? &dist : NULL;
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
    if (comm && (comm->world < 1 || comm->rank < 0 || comm->rank >= comm->world))
        return rt_error(RT_ERR_ARG, "rank %d of %d workers", comm->rank, comm->world);

    /* A worker holds activations for its share of the batch only, and
     * evaluates in batches of that size. An even share is a 1/N of the
     * batch; a balanced one may be up to all of it. Gossip workers train
     * on local batches of B/N each. */
    int mb_static = comm ? (c.batch + comm->world - 1) / comm->world : c.batch;
    int mb = comm && c.partition == RT_PARTITION_BALANCED && c.mode != RT_MODE_GOSSIP ? c.batch
                                                                                     : mb_static;
    if (!comm && rt_train_testing_throttle(&c) > 0.0f) {
        rc = rt_error(RT_ERR_CONFIG, "--throttle is a testing aid for workers (ragtag worker, "
                                     "or train --workers N)");
        return rc;
    }

    rc = rt_data_open(c.data_spec, c.val_frac, c.limit, c.seed, &data);
    if (rc < 0)
        goto out;
    dev = rt_dev_open(c.backend, c.device, c.threads);
    if (!dev) {
        rc = RT_ERR_DEVICE;
        goto out;
    }
    m = comm && comm->model_text ? rt_model_load_string(comm->model_text, c.model_path, dev, mb)
                                 : rt_model_load(c.model_path, dev, mb);
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
    if (D) {
        /* The optimiser sees this rank's slice only; clipping needs the norm
         * of the whole gradient, so dist_step clips, not the optimiser. */
        struct rt_optim_config oc = c.optim;
        oc.clip_norm = 0.0f;
        if ((rc = dist_init(D, comm, m, c.threads, &c)) < 0)
            goto out;
        if (c.mode == RT_MODE_SYNC) {
            opt = rt_optim_new(D->odev, &oc, D->hi - D->lo);
        } else {
            /* Local modes: every worker optimises all of its own parameters. */
            opt = rt_optim_new(D->odev, &c.optim, D->np);
        }
    } else {
        opt = rt_optim_new(dev, &c.optim, rt_model_param_count(m));
    }
    if (!opt) {
        rc = RT_ERR_CONFIG; /* rt_optim_new left the reason in the detail */
        goto out;
    }
    size_t chw = (size_t)data.train->c * data.train->h * data.train->w;
    xb = rt_buf_new(dev, (size_t)mb * chw * sizeof(float));
    yb = rt_buf_new(dev, (size_t)mb * sizeof(int32_t));
    if (!xb || !yb) {
        rc = rt_error(RT_ERR_NOMEM, "cannot allocate a batch of %d images on %s", mb, c.backend);
        goto out;
    }
    if ((rc = evaluator_init(&ev, m, dev, mb, data.train)) < 0)
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
    if (c.patience > 0 && (!c.checkpoint_dir[0] || D)) {
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
    /* Gossip workers walk their part of the epoch in local batches. */
    loader = rt_loader_new(data.train, D && c.mode == RT_MODE_GOSSIP ? mb_static : c.batch, true,
                           c.seed);
    if (!loader) {
        rc = RT_ERR_NOMEM;
        goto out;
    }

    if (D) {
        /* Report this worker's speed, wait for the others, start from rank
         * 0's weights. The state buffer is scratch for the measurement. */
        double ips = 0.0;
        float *tmp = rt_model_state_count(m) ? malloc(rt_model_state_count(m) * sizeof(float))
                                             : NULL;
        if (rt_model_state_count(m) && !tmp) {
            rc = rt_error(RT_ERR_NOMEM, "out of memory");
            goto out;
        }
        rc = measure_throughput(m, dev, xb, yb, data.train, mb_static, D->throttle, tmp, &ips);
        free(tmp);
        snprintf(line, sizeof line, "training %.400s on %.200s (%ld train, %d val, %d test "
                                    "images), %zu parameters, %s lr %g, batch %d (%d workers), "
                                    "%d epochs",
                 c.model_path, data.train->name, ntrain, data.val ? data.val->n : 0,
                 data.test ? data.test->n : 0, rt_model_param_count(m),
                 rt_optim_kind_name(c.optim.kind), c.optim.lr, c.batch, comm->world, c.epochs);
        if (c.mode != RT_MODE_SYNC)
            snprintf(line + strlen(line), sizeof line - strlen(line), ", mode %s%s",
                     rt_train_mode_name(c.mode), c.mode == RT_MODE_AVERAGE ? " every " : "");
        if (c.mode == RT_MODE_AVERAGE)
            snprintf(line + strlen(line), sizeof line - strlen(line), "%d steps", c.sync_every);
        if (rc < 0 || (rc = comm->ready(comm->ctx, ips * D->quota_scale, line)) < 0 ||
            (rc = dist_broadcast_model(D, m)) < 0 || (rc = dist_restore(D, m, opt, &pos, spe,
                                                                      best_host, &have_best)) < 0)
            goto out;
        if (c.mode == RT_MODE_GOSSIP && (!comm->gossip_step || !comm->gossip_drain ||
                                         !comm->gossip_begin)) {
            rc = rt_error(RT_ERR_CONFIG, "--mode gossip needs a transport for pairwise averaging");
            goto out;
        }
        if (c.mode == RT_MODE_GOSSIP && (rc = comm->gossip_begin(comm->ctx, D->np, pos.epoch)) < 0)
            goto out;
        if (c.mode == RT_MODE_GOSSIP && pos.step > pos.epoch * spe) {
            dist_say(D, "ragtag: [plan] gossip: the checkpoint stopped inside epoch %ld; that epoch starts over",
                     pos.epoch + 1);
            pos.step = pos.epoch * spe;
            rt_optim_set_steps(opt, pos.step);
        }
        D->plan_speed = ips; /* gossip's first epoch is planned from it */
        if (D->balanced && (rc = dist_replan(D, &c, pos.step, ips, "speeds measured at start")) < 0)
            goto out;
    } else {
        if (c.progress != RT_PROGRESS_OFF)
            rt_model_summary(m, stderr);
        fprintf(stderr, "ragtag: training %s on %s (%ld train, %d val, %d test images), %s "
                        "backend, %zu parameters, %s lr %g, batch %d, %d epochs\n",
                c.model_path, data.train->name, ntrain, data.val ? data.val->n : 0,
                data.test ? data.test->n : 0, c.backend, rt_model_param_count(m),
                rt_optim_kind_name(c.optim.kind), c.optim.lr, c.batch, c.epochs);
    }

    bool stop_early = false;
    double last_report = 0.0;
    bool replan_due = false;
    const char *replan_why = "";
    bool gossip = D && c.mode == RT_MODE_GOSSIP;
    long gossip_applied = 0, local_steps = 0;
    double local_train = 0.0; /* seconds in step loops (+ gossip drains) */
    for (long epoch = pos.epoch; epoch < c.epochs && !stop_early; epoch++) {
        double t_epoch = rt_now(), t_train = 0.0;
        double loss_sum = 0.0;
        long correct = 0, seen = 0, seen_all = 0;
        /* every sample once per epoch: count, and sums of the indices and
         * of their squares, checked over all workers at the epoch's end */
        double used[3] = {0.0, 0.0, 0.0};
        long first = pos.step - epoch * spe;
        /* Gossip: this worker's run [g_first, g_first + g_count) of the
         * epoch's local batches, sized by the speeds measured so far. */
        long g_first = 0, g_count = 0, g_done = 0;
        if (gossip) {
            double mine = rt_speedo_rate(&D->speedo);
            if ((rc = dist_replan(D, &c, pos.step, mine > 0.0 ? mine : D->plan_speed,
                                  "epoch start")) < 0)
                goto out;
            long nb = rt_loader_batches(loader);
            rt_plan_shares(nb, D->world, D->speed, NULL, D->nshare);
            rt_plan_offsets(D->world, D->nshare, D->noff);
            g_first = D->noff[D->rank];
            g_count = D->nshare[D->rank];
            if (D->rank == 0) {
                char buf[1024];
                int len = 0;
                for (int r = 0; r < D->world && len < (int)sizeof buf - 24; r++)
                    len += snprintf(buf + len, sizeof buf - len, "%s%ld", r ? " " : "",
                                    D->nshare[r]);
                dist_say(D, "ragtag: [plan] gossip epoch %ld: local batches of %d by rank: %s", epoch + 1,
                         mb_static, buf);
            }
            first = g_first;
        }
        if ((rc = rt_loader_start(loader, epoch, first)) < 0)
            goto out;
        const float *x;
        const int32_t *y;
        int n;
        double t0 = rt_now();
        double win_loss = 0.0;
        long win_correct = 0, win_seen = 0;
        bool stop_now = false;
        while (!(gossip && g_done >= g_count) && (rc = rt_loader_next(loader, &x, &y, &n)) > 0) {
            /* The shares of this step: re-planned on every worker at once
             * (the flags that asked for it reached everybody). */
            if (replan_due) {
                double mine = rt_speedo_rate(&D->speedo);
                if ((rc = dist_replan(D, &c, pos.step, mine > 0.0 ? mine : D->plan_speed,
                                      replan_why)) < 0)
                    goto out;
                replan_due = false;
            }
            /* This worker's share [a, b) of the global batch of n; alone,
             * or gossiping, all of it. */
            long a = 0, b = n;
            if (D && !gossip)
                dist_part(D, n, c.batch, &a, &b);
            int nl = (int)(b - a);
            /* sync: the gradient of the whole batch, so 1/n; local modes: the
             * mean over this worker's samples */
            float gscale = D && c.mode != RT_MODE_SYNC ? 1.0f / (float)(nl > 0 ? nl : 1)
                                                       : 1.0f / (float)n;
            double bl = 0.0;
            long bc = 0;
            uint64_t seed = step_seed(c.seed, pos.step);
            if (D && a > 0)
                seed = step_seed(seed ^ ((uint64_t)a * 0xA24BAED4963EE407ull), pos.step);
            if (gossip)
                seed = step_seed(seed ^ ((uint64_t)(g_first + g_done) * 0x9E3779B97F4A7C15ull),
                                 (long)D->rank);
            double tc = rt_now();
            double cc = D && D->quota > 0.0 ? cpu_now() : 0.0;
            int probed = 0; /* samples of a standby probe */
            if (nl > 0) {
                if ((rc = rt_upload(dev, rt_buf_view(xb), x + (size_t)a * chw,
                                    (size_t)nl * chw * sizeof(float))) < 0 ||
                    (rc = rt_upload(dev, rt_buf_view(yb), y + a, (size_t)nl * sizeof(int32_t))) < 0 ||
                    (rc = rt_model_forward(m, rt_buf_view(xb), nl, true, seed)) < 0)
                    goto out;
                if ((rc = rt_model_loss(m, rt_buf_view(yb), nl, &bl, &bc, NULL)) < 0 ||
                    (rc = rt_model_backward(m, rt_buf_view(xb), rt_buf_view(yb), nl, gscale)) < 0)
                    goto out;
                if (D) {
                    const uint32_t *idx = rt_loader_indices(loader);
                    for (long i = a; i < b; i++) {
                        double v = (double)idx[i];
                        used[0] += 1.0;
                        used[1] += v;
                        used[2] += v * v;
                    }
                }
            } else if ((rc = rt_op_fill(dev, rt_model_param_count(m), 0.0f, rt_model_grads(m))) < 0) {
                goto out; /* standby, or a batch smaller than the cluster */
            } else if (D && D->balanced && !D->active[D->rank] && n > 0 &&
                       pos.step % RT_STANDBY_PROBE_EVERY == 0) {
                /* Standby: now and then a few samples, not counted, only
                 * to keep measuring this worker's speed so that it may come
                 * back. A quarter of an equal share, not one sample: one
                 * sample runs far slower per image and would keep it on
                 * standby for good. Not every step: a worker in a small CPU
                 * quota would spend its quota on probes and freeze the ring. */
                int nprobe = c.batch / (4 * D->world);
                nprobe = nprobe < 1 ? 1 : nprobe > n ? n : nprobe;
                double tp = rt_now();
                if ((rc = rt_upload(dev, rt_buf_view(xb), x, (size_t)nprobe * chw * sizeof(float))) < 0 ||
                    (rc = rt_upload(dev, rt_buf_view(yb), y, (size_t)nprobe * sizeof(int32_t))) < 0 ||
                    (rc = rt_model_forward(m, rt_buf_view(xb), nprobe, true, seed)) < 0 ||
                    (rc = rt_model_loss(m, rt_buf_view(yb), nprobe, NULL, NULL, NULL)) < 0 ||
                    (rc = rt_model_backward(m, rt_buf_view(xb), rt_buf_view(yb), nprobe, 0.0f)) < 0 ||
                    (rc = rt_sync(dev)) < 0 ||
                    (rc = rt_op_fill(dev, rt_model_param_count(m), 0.0f, rt_model_grads(m))) < 0)
                    goto out;
                double busy = rt_now() - tp;
                busy += throttle_sleep(D->throttle, busy);
                rt_speedo_add(&D->speedo, nprobe, busy);
                probed = nprobe;
            }
            if (D && D->quota > 0.0) {
                D->qcompute += cpu_now() - cc; /* shares and standby probes */
                D->qsamples += nl > 0 ? nl : probed;
                D->qsteps++;
            }
            if (D && nl > 0) {
                if (D->balanced && (rc = rt_sync(dev)) < 0)
                    goto out;
                double busy = rt_now() - tc;
                busy += throttle_sleep(D->throttle, busy);
                rt_speedo_add(&D->speedo, nl, busy);
            }
            bool log_now = c.log_every > 0 && (pos.step + 1) % c.log_every == 0;
            uint32_t flags = 0;
            /* Whether this step talks to the other workers (stop and re-plan
             * requests ride along): every sync step, every H-th in average
             * mode, never while gossiping (the epoch's end does). */
            bool exchange = D && (c.mode == RT_MODE_SYNC ||
                                  (c.mode == RT_MODE_AVERAGE && (pos.step + 1) % c.sync_every == 0));
            if (exchange) {
                if (stop_requested || (comm->stop_requested && comm->stop_requested(comm->ctx)))
                    flags |= 1u;
                double mine = rt_speedo_rate(&D->speedo);
                if (D->balanced && rt_speedo_full(&D->speedo) && D->plan_speed > 0.0 &&
                    fabs(mine - D->plan_speed) > (double)c.replan_change * D->plan_speed)
                    flags |= 2u;
            }
            if (!D) {
                rc = rt_optim_step(opt, rt_model_params(m), rt_model_grads(m));
            } else if (c.mode == RT_MODE_SYNC) {
                rc = dist_step(D, m, opt, c.optim.clip_norm, log_now, &flags);
            } else {
                if (nl > 0) {
                    rt_optim_set_steps(opt, gossip ? epoch * spe + g_done * spe / (g_count ? g_count : 1)
                                                   : pos.step);
                    rc = dist_local_step(D, m, opt);
                    D->since += nl;
                    local_steps++;
                }
                if (rc >= 0 && gossip) {
                    int k = comm->gossip_step(comm->ctx, D->p, D->np, true);
                    rc = k < 0 ? k : RT_OK;
                    gossip_applied += k > 0 ? k : 0;
                }
                if (rc >= 0 && exchange)
                    rc = dist_average_params(D, m, opt, &flags);
                else if (rc >= 0)
                    rc = dist_params_to_model(D, m);
            }
            if (rc < 0)
                goto out;
            if (exchange && D->balanced) {
                if (flags & 2u) {
                    replan_due = true;
                    replan_why = "a speed changed";
                } else if (c.replan_every > 0 && pos.step + 1 - D->plan_step >= c.replan_every) {
                    replan_due = true;
                    replan_why = "periodic";
                }
            }
            if (gossip)
                g_done++;
            else
                pos.step++;
            loss_sum += bl;
            correct += bc;
            seen += nl;
            seen_all += gossip ? nl : n;
            win_loss += bl;
            win_correct += bc;
            win_seen += nl;
            double now = rt_now();
            t_train = now - t0;
            if (!isfinite(bl)) {
                rc = rt_error(RT_ERR_CONFIG,
                              "training diverged at step %ld (epoch %ld): the loss is %g; try a "
                              "smaller --lr or --clip-norm",
                              pos.step, epoch + 1, bl);
                goto out;
            }
            /* progress: steps of the epoch done (gossip: this worker's part) */
            long done = gossip ? g_done * spe / (g_count ? g_count : 1) : pos.step - epoch * spe;
            double ips = seen_all / fmax(t_train, 1e-9);
            if (gossip)
                ips = (double)done * c.batch / fmax(t_train, 1e-9);
            if (!D) {
                rt_progress_step(&prog, (int)epoch + 1, c.epochs, done, spe, loss_sum / seen,
                                 (double)correct / seen, ips, (double)(spe - done) * c.batch / ips);
            } else if (D->rank == 0 && (now - last_report >= 0.1 || done == spe)) {
                last_report = now;
                comm->progress(comm->ctx, (int)epoch + 1, c.epochs, done, spe,
                               seen ? loss_sum / seen : NAN, seen ? (double)correct / seen : NAN,
                               ips, ips > 0.0 ? (double)(spe - done) * c.batch / ips : 0.0);
            }
            if ((mf || D) && log_now && (!D || exchange || (gossip && D->rank == 0))) {
                double w[3] = {win_loss, (double)win_correct, (double)win_seen};
                if (exchange && (rc = comm->allreduce_f64(comm->ctx, w, 3)) < 0)
                    goto out;
                struct fields fs = {.n = 0};
                fint(&fs, "step", gossip ? epoch * spe + done : pos.step);
                fnum(&fs, "epoch", (double)epoch + (double)done / (double)spe);
                fnum(&fs, "loss", w[0] / w[2]);
                fnum(&fs, "acc", w[1] / w[2]);
                fnum(&fs, "lr", rt_optim_last_lr(opt));
                fnum(&fs, "grad_norm", D ? D->last_norm : rt_optim_last_grad_norm(opt));
                fnum(&fs, "images_per_s", ips);
                if ((rc = emit_fields(mf, comm, &fs)) < 0)
                    goto out;
                win_loss = 0.0;
                win_correct = win_seen = 0;
            }
            if (gossip && (stop_requested || (comm->stop_requested && comm->stop_requested(comm->ctx))))
                break; /* the epoch's end tells everybody */
            if ((!D && stop_requested) || (flags & 1u) ||
                (!gossip && rt_train_testing_stop_at(&c, pos.step)))
                stop_now = true;
            if (stop_now) {
                if (D && c.mode == RT_MODE_AVERAGE && !exchange) {
                    /* the checkpoint holds one model: average first */
                    if ((rc = dist_average_params(D, m, opt, NULL)) < 0)
                        goto out;
                }
                res->steps = pos.step;
                if (D) {
                    if (comm->want_checkpoints &&
                        (rc = dist_checkpoint(D, m, opt, "last", &pos, true)) < 0)
                        goto out;
                } else if (last_path[0]) {
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

        double consensus = NAN, consensus_rel = NAN;
        if (gossip) {
            /* Nothing of this epoch may still be in flight when the ring
             * meets; then the replicas become their mean. A stop asked on any
             * worker rides along with that sum. */
            uint32_t flags = stop_requested ? 1u : 0u;
            if (comm->stop_requested && comm->stop_requested(comm->ctx))
                flags |= 1u;
            bool partial = g_done < g_count;
            if (g_done > 0 && t_train > 0.0)
                D->wall_rate = (double)seen / t_train;
            rc = comm->gossip_drain(comm->ctx, D->p, D->np, epoch);
            /* the epoch's training ends when the last worker's part does */
            t_train = rt_now() - t0;
            local_train += t_train;
            if (rc < 0 ||
                (rc = dist_gossip_converge(D, m, &flags, &consensus, &consensus_rel)) < 0 ||
                (rc = dist_average_opt(D, opt)) < 0)
                goto out;
            if ((flags & 1u) || partial) {
                res->steps = pos.step; /* the epoch starts over on --resume */
                if (comm->want_checkpoints &&
                    (rc = dist_checkpoint(D, m, opt, "last", &pos, true)) < 0)
                    goto out;
                rc = rt_error(RT_ERR_INTERRUPTED, "training interrupted in epoch %ld", epoch + 1);
                goto out;
            }
            pos.step = (epoch + 1) * spe;
            rt_optim_set_steps(opt, pos.step);
        } else if (D && c.mode == RT_MODE_AVERAGE) {
            local_train += t_train;
            if (pos.step % c.sync_every != 0 && (rc = dist_average_params(D, m, opt, NULL)) < 0)
                goto out;
        }
        pos.epoch = epoch + 1;

        if (D) {
            double t[6] = {loss_sum, (double)correct, (double)seen, used[0], used[1], used[2]};
            if ((rc = comm->allreduce_f64(comm->ctx, t, 6)) < 0 ||
                (rc = dist_average_state(D, m)) < 0)
                goto out;
            loss_sum = t[0];
            correct = (long)t[1];
            seen = (long)t[2];
            seen_all = seen;
            double nn = (double)ntrain;
            if ((first == 0 || gossip) &&
                (t[3] != nn || t[4] != nn * (nn - 1) / 2 || t[5] != (nn - 1) * nn * (2 * nn - 1) / 6)) {
                rc = rt_error(RT_ERR_ARG, "epoch %ld used %.0f samples (index sums %.0f, "
                                               "%.0f) where the set has %ld, each once: the "
                                               "workers' shares do not tile the epoch",
                              epoch + 1, t[3], t[4], t[5], ntrain);
                goto out;
            }
        }
        double val_loss = NAN, val_acc = NAN, test_loss = NAN, test_acc = NAN;
        if (D) {
            if (data.val && (rc = dist_evaluate(D, &ev, data.val, mb, &val_loss, &val_acc)) < 0)
                goto out;
            if (data.test && (rc = dist_evaluate(D, &ev, data.test, mb, &test_loss, &test_acc)) < 0)
                goto out;
        } else {
            if (data.val && (rc = evaluate(&ev, data.val, c.batch, &val_loss, &val_acc, NULL)) < 0)
                goto out;
            if (data.test && (rc = evaluate(&ev, data.test, c.batch, &test_loss, &test_acc, NULL)) < 0)
                goto out;
        }
        double secs = rt_now() - t_epoch;
        double ips = seen_all / fmax(t_train, 1e-9);
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
        if (gossip)
            len += snprintf(line + len, sizeof line - len, " | consensus distance %.3g (%.2g "
                                                           "relative)", consensus, consensus_rel);
        snprintf(line + len, sizeof line - len, " | %.0f img/s, %.1f s", ips, secs);
        if ((rc = emit_line(&prog, comm, line)) < 0)
            goto out;

        if (mf || D) {
            struct fields fs = {.n = 0};
            fint(&fs, "epoch", pos.epoch);
            fint(&fs, "step", pos.step);
            fnum(&fs, "train_loss", res->train_loss);
            fnum(&fs, "train_acc", res->train_acc);
            fnum(&fs, "val_loss", val_loss);
            fnum(&fs, "val_acc", val_acc);
            if (data.test) {
                fnum(&fs, "test_loss", test_loss);
                fnum(&fs, "test_acc", test_acc);
            }
            fnum(&fs, "lr", rt_optim_last_lr(opt));
            fnum(&fs, "images_per_s", ips);
            fnum(&fs, "seconds", secs);
            if (D)
                fint(&fs, "samples", seen);
            if (gossip) {
                fnum(&fs, "consensus_distance", consensus);
                fnum(&fs, "consensus_relative", consensus_rel);
            }
            if ((rc = emit_fields(mf, comm, &fs)) < 0)
                goto out;
        }

        if (data.val) {
            double v = c.monitor == RT_MONITOR_VAL_ACC ? val_acc : val_loss;
            /* Decided once, by rank 0, for everybody. */
            unsigned char decide[2] = {0, 0};
            if (!D || D->rank == 0) {
                decide[0] = improved(&c, v, pos.best_metric, have_best);
                decide[1] = !decide[0] && c.patience > 0 && pos.bad_epochs + 1 >= c.patience &&
                            pos.epoch < c.epochs;
            }
            if (D && (rc = comm->broadcast(comm->ctx, decide, sizeof decide, 0)) < 0)
                goto out;
            if (decide[0]) {
                have_best = true;
                pos.best_metric = v;
                pos.best_epoch = pos.epoch;
                pos.bad_epochs = 0;
                if (best_path[0] && !D) {
                    if ((rc = rt_checkpoint_save(best_path, m, NULL, &pos)) < 0)
                        goto out;
                } else if (best_host) {
                    size_t np = rt_model_param_count(m), ns = rt_model_state_count(m);
                    if ((rc = rt_download(dev, best_host, rt_model_params(m), np * 4)) < 0 ||
                        (rc = rt_download(dev, best_host + np, rt_model_state(m), ns * 4)) < 0)
                        goto out;
                }
                if (D && comm->want_checkpoints && D->rank == 0 &&
                    (rc = dist_checkpoint(D, m, opt, "best", &pos, false)) < 0)
                    goto out;
            } else {
                pos.bad_epochs++;
            }
            if (decide[1]) {
                stop_early = true;
                res->stopped_early = true;
            }
        }
        if (D && comm->want_checkpoints && (rc = dist_checkpoint(D, m, opt, "last", &pos, true)) < 0)
            goto out;
        if (last_path[0] && (rc = rt_checkpoint_save(last_path, m, opt, &pos)) < 0)
            goto out;
    }

    if (c.patience > 0 && have_best) {
        res->best_epoch = (int)pos.best_epoch;
        if (best_path[0] && !D && file_exists(best_path)) {
            if ((rc = rt_checkpoint_load(best_path, m, NULL, NULL)) < 0)
                goto out;
        } else if (best_host) {
            size_t np = rt_model_param_count(m), ns = rt_model_state_count(m);
            if ((rc = rt_upload(dev, rt_model_params(m), best_host, np * 4)) < 0 ||
                (rc = rt_upload(dev, rt_model_state(m), best_host + np, ns * 4)) < 0)
                goto out;
        }
        double vl = NAN, va = NAN, tl = NAN, ta = NAN;
        if (D) {
            if ((rc = dist_evaluate(D, &ev, data.val, mb, &vl, &va)) < 0)
                goto out;
            if (data.test && (rc = dist_evaluate(D, &ev, data.test, mb, &tl, &ta)) < 0)
                goto out;
        } else {
            if ((rc = evaluate(&ev, data.val, c.batch, &vl, &va, NULL)) < 0)
                goto out;
            if (data.test && (rc = evaluate(&ev, data.test, c.batch, &tl, &ta, NULL)) < 0)
                goto out;
        }
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
        if ((rc = emit_line(&prog, comm, line)) < 0)
            goto out;
    }
    if (c.save_path[0] && (rc = rt_checkpoint_save(c.save_path, m, NULL, &pos)) < 0)
        goto out;
    if (D) {
        if (comm->want_final && D->rank == 0 &&
            (rc = dist_checkpoint(D, m, opt, "final", &pos, false)) < 0)
            goto out;
        if ((rc = dist_hash(D, m, &res->params_hash)) < 0)
            goto out;
        res->local_steps = local_steps;
        res->train_seconds = local_train;
        res->gossip_averagings = gossip_applied;
        res->plans = D->plans;
        if (D->balanced && D->rank == 0) {
            /* the plan the run ended with, and how often it moved */
            char why[96];
            snprintf(why, sizeof why, "end; %ld plans, %ld taken", D->plans, D->plans_changed);
            dist_say_plan(D, &c, pos.step, why);
        }
    }
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
    dist_free(&dist);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    rt_data_close(&data);
    return rc;
}

int rt_train_run(const struct rt_train_config *c, struct rt_train_result *res)
{
    return train_main(c, NULL, res);
}

int rt_train_run_dist(const struct rt_train_config *c, const struct rt_train_comm *comm,
                      struct rt_train_result *res)
{
    RT_ASSERT(comm && comm->ready && comm->reduce_scatter && comm->all_gather &&
              comm->allreduce && comm->allreduce_f64 && comm->broadcast && comm->progress &&
              comm->line && comm->metrics && comm->checkpoint);
    return train_main(c, comm, res);
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
