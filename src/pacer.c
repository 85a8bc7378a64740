/* pacer.c — CPU use kept under a cgroup quota (pacer.h). */
#include "config.h"

#include "pacer.h"

#include <errno.h>
#include <math.h>
#include <time.h>

#include "clock.h"

/* The share of the quota a worker paces itself to: the quota itself. The
 * kernel freezes a cgroup only once a period's use passes its quota, and a
 * step's CPU after the pacing point (the comm thread's ring work) is a few
 * ms at most against a 100 ms period. Below the quota the pacer must not
 * bind: in sync mode a worker's own use is already under it (it waits for
 * the others every step), and every sleep of one worker is a wait of all
 * the others. At 0.95 it bound there, and two 0.8-core workers lost 5% of
 * their speed (bench/README.md, tenth pass). */
#define PACE_SHARE 1.0
/* Credit a worker may save up (seconds of wall time at its rate): a few
 * ms, well inside one CFS period, so that a worker that waited for the
 * others does not burst through its quota after. */
#define PACE_CREDIT 0.005

void rt_pacer_init(struct rt_pacer *pc, double quota)
{
    pc->rate = quota > 0.0 ? PACE_SHARE * quota : 0.0;
    pc->wall0 = rt_now();
    pc->cpu0 = rt_cpu_now();
    pc->slept = 0.0;
}

double rt_pacer_wait(struct rt_pacer *pc)
{
    if (!(pc->rate > 0.0))
        return 0.0;
    double wall = rt_now() - pc->wall0, used = rt_cpu_now() - pc->cpu0;
    double ahead = used / pc->rate - wall; /* seconds ahead of the rate */
    if (ahead < -PACE_CREDIT) {            /* forget credit beyond a few ms */
        pc->wall0 += -ahead - PACE_CREDIT;
        return 0.0;
    }
    if (ahead <= 0.0)
        return 0.0;
    struct timespec ts = {.tv_sec = (time_t)ahead,
                          .tv_nsec = (long)((ahead - floor(ahead)) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    pc->slept += ahead;
    return ahead;
}

void rt_pacer_exclude(struct rt_pacer *pc, double cpu, double wall)
{
    pc->cpu0 += cpu;
    pc->wall0 += wall;
}
