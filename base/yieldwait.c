/* yieldwait.c — see yieldwait.h. */
#include "config.h"

#include "yieldwait.h"

#include <sched.h>

#include "clock.h"

#define YIELD_SLOW 1e-3       /* a yield that gave the core away for a time slice */
#define YIELD_SLOW_SHARE 0.25 /* of the recent yields, beyond which: */
#define YIELD_OFF 1.0         /* seconds without yields */

bool rt_yield_allowed(const struct rt_yield_gauge *g, double now)
{
    return now >= g->off_until;
}

bool rt_yield_note(struct rt_yield_gauge *g, double took, double now)
{
    const bool slow = took > YIELD_SLOW;
    g->slow += ((slow ? 1.0 : 0.0) - g->slow) / 8.0;
    if (g->slow <= YIELD_SLOW_SHARE)
        return true;
    g->off_until = now + YIELD_OFF;
    g->slow = 0.0;
    return false;
}

bool rt_yield_turn(struct rt_yield_gauge *g)
{
    double t0 = rt_now();
    sched_yield();
    double t1 = rt_now();
    return rt_yield_note(g, t1 - t0, t1);
}

int rt_affinity_cores(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

bool rt_crowded(int procs, double quota)
{
    double cores = rt_affinity_cores();
    if (quota > 0.0 && quota < cores)
        cores = quota;
    return procs > cores;
}
