/* planner.c — shares by speed during a data-parallel run (planner.h). */
#include "config.h"

#include "planner.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "status.h"
#include "train-testing.h"
#include "trainer.h"

#define STANDBY_PROBE_EVERY 8 /* steps between a standby worker's probes */
#define STANDBY_GAIN 0.05     /* standby for a worker whose leaving shortens the step 5% */
/* A quota worker's overhead as the cut counts it: measured x 1.2. Over its
 * quota a worker holds every step (its pacer sleeps, its bursts take the
 * others' cores on a shared host), under it by a sample it loses a
 * sample's worth: bench_hetero's 0.2-core worker at 4 samples of 64 ran
 * 2-7% faster than at 5 in three interleaved rounds, where the measured
 * overheads put the two within 0.1% of each other. */
#define OVERHEAD_MARGIN 1.2
#define PLAN_GAIN 0.05        /* a new plan for a step 5% shorter */
/* Steps in a row a worker's speed must stay off its plan's before it asks
 * for a new one: half its speed window (RT_SPEED_WINDOW steps at least).
 * Two equal workers in one 0.6-core quota measured 7,144 and 10,235 img/s
 * for a 16-step window and swapped 38/26 and 27/37 shares within 33 steps;
 * a real change of speed lasts. */
#define PLAN_PERSIST (RT_SPEED_WINDOW / 2)

/* A worker in a CPU-quota cgroup (docker --cpus) computes in bursts: what
 * it sustains is its burst speed x quota / threads. */
static void planner_quota(struct rt_planner *p, const struct rt_trainer *t)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double q = rt_cpu_quota();
    double th = t->c.threads > 0 ? t->c.threads : (cores > 0 ? (double)cores : 1.0);
    p->quota_scale = q > 0.0 && q < th ? q / th : 1.0;
    p->quota = p->quota_scale < 1.0 ? q : 0.0;
    p->threads = th;
    /* a GPU computes while the CPU waits: its wall time is its speed */
    p->cpu_clock = p->quota > 0.0 && !strcmp(rt_dev_backend(t->dev), "cpu");
    p->qcpu0 = rt_cpu_now();
    /* where the workers wait for each other every step (not gossip) */
    rt_pacer_init(&p->pacer, p->roles ? p->quota : 0.0);
    if (p->quota_scale < 1.0)
        fprintf(stderr, "ragtag: [plan] rank %d: its cgroup allows %.2f cores for %.0f compute "
                        "threads: its speeds count x %.2f%s\n",
                t->rank, q, th, p->quota_scale,
                p->pacer.rate > 0.0 ? "; it paces its steps under the quota" : "");
}

int rt_planner_init(struct rt_planner *p, const struct rt_trainer *t, bool balanced, bool roles)
{
    memset(p, 0, sizeof *p);
    p->t = t;
    p->balanced = balanced;
    p->roles = roles;
    p->throttle = 1.0f;
    p->settle_steps = RT_SPEED_WINDOW;
    p->can_leave = roles && t->coll && t->coll->ops->regroup;
    int W = t->world;
    if (W > RT_MAX_WORKERS)
        return rt_error(RT_ERR_CONFIG, "%d workers: a run holds at most %d", W, RT_MAX_WORKERS);
    /* room for the most workers a run holds: the members may change */
    const int M = RT_MAX_WORKERS;
    p->speed = calloc((size_t)M * 2, sizeof *p->speed);
    p->overhead = p->speed ? p->speed + M : NULL;
    p->active = calloc((size_t)M, sizeof *p->active);
    p->share = calloc((size_t)M * 5, sizeof *p->share);
    if (!p->speed || !p->active || !p->share)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    p->off = p->share + M;
    p->nshare = p->share + 2 * M;
    p->noff = p->share + 3 * M;
    p->cap = p->share + 4 * M;
    for (int r = 0; r < M; r++) {
        p->active[r] = true;
        p->speed[r] = 1.0;
        p->cap[r] = t->c.batch;
    }
    planner_quota(p, t);
    if (rt_train_testing_throttle(&t->c) > 0.0f) {
        p->throttle = rt_train_testing_throttle(&t->c);
        if (!(p->throttle <= 1.0f))
            return rt_error(RT_ERR_CONFIG, "--throttle %g: one worker takes one fraction in "
                                           "(0, 1]", (double)p->throttle);
    }
    return RT_OK;
}

void rt_planner_free(struct rt_planner *p)
{
    free(p->speed);
    free(p->active);
    free(p->share);
    p->speed = NULL;
    p->active = NULL;
    p->share = NULL;
}

int rt_planner_say_plan(const struct rt_planner *p, long step, const char *why)
{
    const struct rt_trainer *t = p->t;
    char buf[1600];
    int len = 0;
    for (int r = 0; r < t->world && len < (int)sizeof buf - 40; r++)
        len += snprintf(buf + len, sizeof buf - len, "%s%ld", r ? " " : "", p->share[r]);
    len += snprintf(buf + len, sizeof buf - len, " at img/s");
    for (int r = 0; r < t->world && len < (int)sizeof buf - 40; r++)
        len += snprintf(buf + len, sizeof buf - len, " %.0f", p->speed[r]);
    bool over = false; /* quota workers' (the cut counts them) */
    for (int r = 0; r < t->world; r++)
        over |= p->overhead[r] > 0.0;
    for (int r = 0; over && r < t->world && len < (int)sizeof buf - 60; r++)
        len += snprintf(buf + len, sizeof buf - len, "%s%.2f", r ? " " : ", ms a step outside computing ",
                        1e3 * p->overhead[r]);
    if (over && len < (int)sizeof buf - 40)
        snprintf(buf + len, sizeof buf - len, " (at their quotas, x %g)", OVERHEAD_MARGIN);
    return rt_trainer_say(t, "ragtag: [plan] step %ld (%s): shares of batch %d by rank: %s", step,
                          why, t->c.batch, buf);
}

/* A quota-limited worker's costs, for the cut: its speed is its compute's
 * at the quota (burst x quota / threads, rep), and the CPU it spends a
 * step outside computing (the optimiser update, its part of the sum, ring
 * traffic) is an overhead of that CPU / quota seconds a step: the quota
 * pays for both, so a step of k samples needs (other + k x per sample) /
 * quota of wall time. The cut (rt_plan_shares_timed) gives such a worker
 * the samples that fit beside the others' step. Folding the overhead into
 * a lower speed instead measured it at the step rate the last plan
 * reached, which a worker that held every step raised: bench_hetero's
 * 0.2-core worker kept 6 samples of 64 where 4 fit, and the run lost 8%
 * against 4 (bench/README.md, twentieth pass). */
static double quota_speed(struct rt_planner *p, double rep)
{
    if (p->quota > 0.0 && p->qsteps >= 8 && p->qsamples > 0 && p->qcompute > 0.0) {
        double other = fmax(0.0, rt_cpu_now() - p->qcpu0 - p->qcompute) / (double)p->qsteps;
        p->my_overhead = OVERHEAD_MARGIN * other / p->quota; /* wall s a step at its quota */
    }
    p->qcpu0 = rt_cpu_now();
    p->qcompute = 0.0;
    p->qsamples = p->qsteps = 0;
    return rep;
}

/* Everybody's current speed and overhead, and the images each one's
 * buffers hold (its memory's cap, else the whole batch), the same bits on
 * every rank. */
static int exchange_speeds(struct rt_planner *p, double mine)
{
    const struct rt_trainer *t = p->t;
    int W = t->world;
    double all[3 * RT_MAX_WORKERS] = {0};
    all[t->rank] = mine;
    all[W + t->rank] = p->my_overhead;
    all[2 * W + t->rank] = (double)t->rows;
    RT_TRY(t->coll->ops->allreduce_f64(t->coll->ctx, all, (size_t)(3 * W)));
    memcpy(p->speed, all, (size_t)W * sizeof *all);
    memcpy(p->overhead, all + W, (size_t)W * sizeof *all);
    for (int r = 0; r < W; r++)
        p->cap[r] = all[2 * W + r] >= 1.0 ? (long)all[2 * W + r] : 1;
    return RT_OK;
}

/* Shares of n images by speed; sync and average: none above a worker's
 * cap (gossip's cut is of local batches, never capped). */
static int cut(struct rt_planner *p, long n, long *share)
{
    const struct rt_trainer *t = p->t;
    if (rt_plan_shares_timed(n, t->world, p->speed, p->overhead, p->active,
                             p->roles ? p->cap : NULL, share))
        return RT_OK;
    long sum = 0;
    for (int r = 0; r < t->world; r++)
        sum += p->active[r] ? p->cap[r] : 0;
    return rt_error(RT_ERR_NOMEM, "the workers' memory holds %ld images of a batch of %ld "
                                  "(their caps by rank are in the cluster table): fewer "
                                  "images a batch (--batch), or workers with more memory",
                    sum, n);
}

/* Who is on standby: too slow for a share (--min-share), or costing the
 * step more than its samples save (its per-step overhead). */
static bool plan_roles(struct rt_planner *p)
{
    const struct rt_trainer *t = p->t;
    if (!p->roles)
        return false;
    bool a = rt_plan_standby(t->world, p->speed, t->c.min_share, p->active);
    bool b = t->c.min_share > 0.0f &&
             rt_plan_standby_overhead(t->c.batch, t->world, p->speed, p->overhead,
                                      STANDBY_GAIN, p->active);
    return a || b;
}

/* Rank 0 says who went on standby or came back. */
static void say_roles(const struct rt_planner *p, const bool *was, long step)
{
    const struct rt_trainer *t = p->t;
    int W = t->world;
    double mean = 0.0;
    int nact = 0;
    for (int r = 0; r < W; r++)
        if (was[r] || p->plans == 1)
            mean += p->speed[r], nact++;
    mean = nact ? mean / nact : 0.0;
    for (int r = 0; r < W; r++) {
        char why[160];
        if (p->speed[r] < (double)t->c.min_share * mean)
            snprintf(why, sizeof why, "%.0f img/s is below --min-share %g of the mean %.0f img/s",
                     p->speed[r], (double)t->c.min_share, mean);
        else
            snprintf(why, sizeof why, "its %.1f ms a step outside computing cost the step more "
                     "than its samples save", 1e3 * p->overhead[r]);
        if (was[r] && !p->active[r])
            rt_trainer_say(t, "ragtag: [plan] rank %d on standby at step %ld: %s; %s", r, step,
                           why, p->can_leave ? "it leaves the ring until it is fast enough"
                                             : "it keeps its replica and takes no samples");
        else if (!was[r] && p->active[r] && p->plans > 1)
            rt_trainer_say(t, "ragtag: [plan] rank %d back from standby at step %ld: %.0f img/s",
                           r, step, p->speed[r]);
    }
}

/* Steps of a speed window at the speeds just exchanged (the same number on
 * every rank): when the first plan on speeds measured in training is due. */
static long settle_steps(const struct rt_planner *p)
{
    const struct rt_trainer *t = p->t;
    double sum = 0.0;
    for (int r = 0; r < t->world; r++)
        sum += p->active[r] && isfinite(p->speed[r]) && p->speed[r] > 0.0 ? p->speed[r] : 0.0;
    return rt_speed_window_steps(sum / (double)t->c.batch);
}

int rt_planner_replan(struct rt_planner *p, long step, double mine, const char *why)
{
    const struct rt_trainer *t = p->t;
    int W = t->world;
    bool on_probes = !p->settled; /* the plan in force came from the start's probes */
    p->settled = p->plans > 0;    /* the first plan of a group rests on probes */
    /* Gossip plans whole epochs: the rate over the last epoch's loop (wall
     * time, so it sees quota freezes and exchanges) is steadier than a
     * 16-step window. Otherwise the compute speed, for a quota-limited
     * worker what its quota sustains. */
    double rep = p->wall_rate > 0.0 ? p->wall_rate : quota_speed(p, mine * p->quota_scale);
    double ospeed[RT_MAX_WORKERS];
    long old[RT_MAX_WORKERS];
    bool was[RT_MAX_WORKERS];
    memcpy(ospeed, p->speed, (size_t)W * sizeof *ospeed);
    RT_TRY(exchange_speeds(p, rep));
    p->settle_steps = settle_steps(p);
    p->plan_speed = mine;
    p->plan_step = step;
    rt_speedo_reset(&p->speedo); /* measure the new shares afresh */
    p->moved_steps = 0;
    for (int r = 0; r < W; r++) {
        old[r] = p->share[r];
        was[r] = p->active[r];
    }
    bool roles = plan_roles(p);
    p->leaving = p->can_leave && W > 1 && !p->active[t->rank];
    RT_TRY(cut(p, t->c.batch, p->share));
    p->plans++;
    /* A move of a sample or two is noise (a smaller share runs at fewer
     * img/s, which asks for a smaller share...), and so is a plan that
     * would shorten the step by less than PLAN_GAIN: keep the plan then,
     * shares and the speeds they came from together. Not in gossip: its
     * cut is of a whole epoch's local batches, where a change too small
     * to move a batch's rows is still tens of batches (a 0.2-core worker
     * kept 129 of 1,164, about 11%, for a whole run when its speed was
     * 10% of the sum), and a new cut costs nothing. Nor in place of a plan
     * that rests on probes: two workers probed at 6,884 and 6,337 img/s
     * and got 33 and 31 of 64, then trained at 6,249 and 6,481, where 31
     * and 33 make the step 3.7% shorter (a move of 2 samples: under both
     * bars), and the probes' plan stood for the whole run. */
    long slack = t->c.batch / 50 > 1 ? t->c.batch / 50 : 1;
    bool changed = p->whole_epochs || on_probes || roles ||
                   rt_plan_worth(W, old, p->share, p->speed, p->overhead, p->active, slack, PLAN_GAIN);
    if (!changed)
        for (int r = 0; r < W; r++) {
            p->share[r] = old[r];
            p->speed[r] = ospeed[r];
        }
    rt_plan_offsets(W, p->share, p->off);
    if (t->rank == 0)
        say_roles(p, was, step);
    if (changed)
        p->plans_changed++;
    if (t->rank == 0 && p->roles && changed)
        RT_TRY(rt_planner_say_plan(p, step, why));
    return RT_OK;
}

double rt_planner_rate(const struct rt_planner *p)
{
    double mine = rt_speedo_rate(&p->speedo);
    return mine > 0.0 ? mine : p->plan_speed;
}

int rt_planner_regroup(struct rt_planner *p)
{
    const struct rt_trainer *t = p->t;
    for (int r = 0; r < RT_MAX_WORKERS; r++) {
        p->active[r] = true;
        p->share[r] = 0;
    }
    p->replan_due = false;
    if (!p->balanced)
        return RT_OK;
    /* shares at 0: the new plan counts as a change, and rank 0 logs it */
    RT_TRY(rt_planner_replan(p, t->pos.step, rt_planner_rate(p), "the members changed"));
    p->settled = false; /* a newcomer's speed is its probe's: measure it in training */
    return RT_OK;
}

int rt_planner_check_leave(const struct rt_planner *p)
{
    if (!p->leaving)
        return RT_OK;
    const struct rt_trainer *t = p->t;
    return rt_error(RT_ERR_STANDBY, "on standby at step %ld (%.0f img/s, %.1f ms a step outside "
                                    "computing): it costs the others more than it adds; this "
                                    "worker leaves the ring and joins again when it is fast enough",
                    t->pos.step, p->speed[t->rank], 1e3 * p->overhead[t->rank]);
}

int rt_planner_replan_if_due(struct rt_planner *p, long step)
{
    if (!p->replan_due)
        return RT_OK;
    p->replan_due = false;
    return rt_planner_replan(p, step, rt_planner_rate(p), p->replan_why);
}

void rt_planner_part(struct rt_planner *p, long n, long *a, long *b)
{
    const struct rt_trainer *t = p->t;
    if (!p->balanced) {
        size_t lo, hi;
        rt_slice((size_t)n, t->world, t->rank, &lo, &hi);
        *a = (long)lo;
        *b = (long)hi;
        return;
    }
    const long *sh = p->share, *of = p->off;
    if (n != t->c.batch) {
        /* fits: n is less than a full batch, which did */
        (void)rt_plan_shares_timed(n, t->world, p->speed, p->overhead, p->active,
                                   p->roles ? p->cap : NULL, p->nshare);
        rt_plan_offsets(t->world, p->nshare, p->noff);
        sh = p->nshare;
        of = p->noff;
    }
    *a = of[t->rank];
    *b = *a + sh[t->rank];
}

void rt_planner_eval_part(struct rt_planner *p, long n, long *lo, long *hi)
{
    const struct rt_trainer *t = p->t;
    if (p->plans == 0) {
        size_t a, b;
        rt_slice((size_t)n, t->world, t->rank, &a, &b);
        *lo = (long)a;
        *hi = (long)b;
        return;
    }
    /* by speed, like the training shares (standby: none) */
    rt_plan_shares(n, t->world, p->speed, p->balanced ? p->active : NULL, p->nshare);
    rt_plan_offsets(t->world, p->nshare, p->noff);
    *lo = p->noff[t->rank];
    *hi = *lo + p->nshare[t->rank];
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

void rt_planner_step_begin(struct rt_planner *p, struct rt_step *s)
{
    rt_pacer_wait(&p->pacer); /* before the clocks: the speeds are the compute's */
    s->t_compute = rt_now();
    s->cpu_compute = p->quota > 0.0 ? rt_cpu_now() : 0.0;
}

/* Seconds a compute that began at wall time T0 (CPU time C0) took, as this
 * worker's speed counts them. Under a CPU quota (cpu backend), the CPU
 * time it used spread over its threads: wall time would count the quota's
 * freezes, which fall into some 16-step windows (a few ms a step) and not
 * into others (a CFS period is 100 ms), and the shares of two equal
 * workers would swing with them; what the quota sustains is quota_speed's
 * part. */
static double busy_seconds(const struct rt_planner *p, double t0, double c0)
{
    double busy = p->cpu_clock ? (rt_cpu_now() - c0) / p->threads : rt_now() - t0;
    return busy + throttle_sleep(p->throttle, busy);
}

/* Standby: now and then a few samples, not counted, only to keep measuring
 * this worker's speed so that it may come back. A quarter of an equal
 * share, not one sample: one sample runs far slower per image and would
 * keep it on standby for good. Not every step: a worker in a small CPU
 * quota would spend its quota on probes and freeze the ring. */
static int standby_probe(struct rt_planner *p, struct rt_trainer *t, struct rt_step *s,
                         int *probed)
{
    int nprobe = t->c.batch / (4 * t->world);
    nprobe = nprobe < 1 ? 1 : nprobe > s->n ? s->n : nprobe;
    nprobe = nprobe > t->rows ? t->rows : nprobe;
    double tp = rt_now(), cp = p->quota > 0.0 ? rt_cpu_now() : 0.0;
    RT_TRY(rt_trainer_compute(t, s, 0, nprobe, 0.0f, false));
    RT_TRY(rt_sync(t->dev));
    RT_TRY(rt_op_fill(t->dev, rt_model_param_count(t->m), 0.0f, rt_model_grads(t->m)));
    rt_speedo_add(&p->speedo, nprobe, busy_seconds(p, tp, cp));
    *probed = nprobe;
    return RT_OK;
}

int rt_planner_step_end(struct rt_planner *p, struct rt_trainer *t, struct rt_step *s)
{
    long nl = s->b - s->a;
    int probed = 0;
    double hang = rt_train_testing_stall(&t->c, t->pos.step);
    if (hang > 0.0) /* testing aid: a training thread that hangs (liveness) */
        nanosleep(&(struct timespec){.tv_sec = (time_t)hang,
                                     .tv_nsec = (long)((hang - floor(hang)) * 1e9)}, NULL);
    if (nl == 0 && p->balanced && !p->active[t->rank] && s->n > 0 &&
        t->pos.step % STANDBY_PROBE_EVERY == 0)
        RT_TRY(standby_probe(p, t, s, &probed));
    if (nl > 0 && p->balanced)
        RT_TRY(rt_sync(t->dev));
    if (p->quota > 0.0) {
        p->qcompute += rt_cpu_now() - s->cpu_compute; /* shares and standby probes */
        p->qsamples += nl > 0 ? nl : probed;
        p->qsteps++;
    }
    if (nl > 0)
        rt_speedo_add(&p->speedo, nl, busy_seconds(p, s->t_compute, s->cpu_compute));
    /* every step, as the vote was: a standby worker's rate moves only with
     * its probes, and it must still ask to come back */
    bool full;
    double mine = rt_speedo_measure(&p->speedo, &p->window_steps, &full);
    bool off = p->balanced && full && p->plan_speed > 0.0 &&
               fabs(mine - p->plan_speed) > (double)t->c.replan_change * p->plan_speed;
    p->moved_steps = off ? p->moved_steps + 1 : 0;
    return RT_OK;
}

void rt_planner_exclude(struct rt_planner *p, double cpu, double wall)
{
    p->qcpu0 += cpu;
    rt_pacer_exclude(&p->pacer, cpu, wall);
}

uint32_t rt_planner_vote(const struct rt_planner *p)
{
    int persist = p->window_steps / 2 > PLAN_PERSIST ? p->window_steps / 2 : PLAN_PERSIST;
    return p->balanced && p->moved_steps >= persist ? RT_VOTE_REPLAN : 0;
}

void rt_planner_agreed(struct rt_planner *p, uint32_t agreed, long step)
{
    if (!p->balanced)
        return;
    if (agreed & RT_VOTE_REPLAN) {
        p->replan_due = true;
        p->replan_why = "a speed changed";
    } else if (!p->settled && step + 1 - p->plan_step >= p->settle_steps) {
        /* The first plan came from probes each worker ran on its own, as
         * it joined: two equal workers measured 1,488 and 1,300 img/s
         * (one probing while the other was still starting) and kept 34
         * and 30 of 64 until the periodic plan, every step waiting 6% on
         * the larger share. One plan on a window of real steps, taken by
         * all at once (the same step everywhere: its length comes from
         * the speeds exchanged), corrects that early. */
        p->replan_due = true;
        p->replan_why = "speeds measured in training";
    } else if (p->t->c.replan_every > 0 && step + 1 - p->plan_step >= p->t->c.replan_every) {
        p->replan_due = true;
        p->replan_why = "periodic";
    }
}
