/* train-testing.h — testing aids of the training driver. Private: not
 * installed, so they are no part of the library's API. A caller points
 * rt_train_config.testing at one of these (tests; net/worker.c for
 * `ragtag worker --throttle F`, which bench scripts and test_dist use to
 * make uneven workers on one machine). */
#ifndef RT_TRAIN_TESTING_H
#define RT_TRAIN_TESTING_H

#include "train.h"

struct rt_train_testing {
    float throttle;    /* a worker: 0 (off) or a fraction in (0, 1] of its speed that
                          it runs at, sleeping the rest (docs/heterogeneous.md) */
    long stop_at_step; /* behave as if interrupted (Ctrl-C) right after this step;
                          0: never */
    long stall_at_step; /* the training thread hangs this long at this step (liveness
                           tests: `ragtag worker --stall-at STEP:SECONDS`); 0: never */
    double stall_seconds;
};

/* The throttle of c, 0 when none. */
static inline float rt_train_testing_throttle(const struct rt_train_config *c)
{
    return c->testing ? c->testing->throttle : 0.0f;
}

/* Whether c asks to stop as if interrupted right after `step`. */
static inline bool rt_train_testing_stop_at(const struct rt_train_config *c, long step)
{
    return c->testing && c->testing->stop_at_step > 0 && step == c->testing->stop_at_step;
}

/* Seconds to hang at `step` (0: none). */
static inline double rt_train_testing_stall(const struct rt_train_config *c, long step)
{
    return c->testing && c->testing->stall_at_step > 0 && step == c->testing->stall_at_step
               ? c->testing->stall_seconds
               : 0.0;
}

#endif
