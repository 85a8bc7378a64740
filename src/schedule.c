/* schedule.c — learning-rate schedules: constant, step decay and cosine
 * annealing, each optionally preceded by a linear warm-up.
 *
 * The schedule is a pure function of the step number so that every worker
 * of a run, and a run resumed from a checkpoint, computes the same rate
 * without sharing any state. Arithmetic is done in double and rounded once,
 * so the float result does not depend on the order of operations of the
 * caller's compiler. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "optim.h"
#include "status.h"

static const char *const sched_names[] = {
    [RT_SCHED_CONSTANT] = "constant",
    [RT_SCHED_STEP] = "step",
    [RT_SCHED_COSINE] = "cosine",
};
#define N_SCHED ((int)(sizeof sched_names / sizeof sched_names[0]))

int rt_sched_kind_parse(const char *s, enum rt_sched_kind *out)
{
    for (int i = 0; i < N_SCHED; i++) {
        if (s && strcmp(s, sched_names[i]) == 0) {
            *out = (enum rt_sched_kind)i;
            return RT_OK;
        }
    }
    return rt_error(RT_ERR_CONFIG,
                    "unknown learning-rate schedule '%s' (accepted: constant, step, cosine)",
                    s ? s : "(null)");
}

const char *rt_sched_kind_name(enum rt_sched_kind k)
{
    return (int)k >= 0 && (int)k < N_SCHED ? sched_names[k] : "?";
}

/* The warm-up ramps to lr and hands over at step warmup_steps; the decay
 * schedules then count their own steps from zero, so "step_size" and the
 * cosine length mean the same with and without warm-up. total_steps is the
 * length of the whole run (warm-up included): cosine reaches min_lr on the
 * last step however long the warm-up was, and stays there afterwards. */
float rt_schedule_lr(const struct rt_optim_config *c, long step)
{
    double lr = c->lr;
    long warm = c->warmup_steps > 0 ? c->warmup_steps : 0;

    if (step < 0)
        step = 0;
    if (step < warm)
        return (float)(lr * (double)(step + 1) / (double)warm);

    long t = step - warm;
    switch (c->schedule) {
    case RT_SCHED_CONSTANT:
        return (float)lr;
    case RT_SCHED_STEP:
        if (c->step_size <= 0)
            return (float)lr;
        return (float)(lr * pow((double)c->gamma, (double)(t / c->step_size)));
    case RT_SCHED_COSINE: {
        double min_lr = c->min_lr;
        long span = c->total_steps - warm;
        if (span <= 0 || t >= span)
            return (float)min_lr;
        double pi = acos(-1.0);
        return (float)(min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(pi * (double)t / (double)span)));
    }
    }
    return (float)lr;
}

/* The rule scales the whole schedule (peak and floor); warm-up then ramps
 * to the scaled rate, which is what makes the linear rule work for big
 * batches (Goyal et al. 2017, section 2.2). */
double rt_lr_scale_factor(enum rt_lr_scale rule, int batch, int base)
{
    RT_ASSERT(batch > 0 && base > 0);
    double r = (double)batch / (double)base;
    switch (rule) {
    case RT_LR_SCALE_NONE:
        return 1.0;
    case RT_LR_SCALE_LINEAR:
        return r;
    case RT_LR_SCALE_SQRT:
        return sqrt(r);
    }
    return 1.0;
}
