/* yieldwait.c — see yieldwait.h. */
#include "config.h"

#include "yieldwait.h"

#include <sched.h>

#include "clock.h"

#define YIELD_SLOW 1e-3       /* a yield that gave the core away for a time slice */
#define YIELD_SLOW_SHARE 0.25 /* of the recent yields, beyond which: */
#define YIELD_OFF 1.0         /* seconds without yields, */
#define YIELD_OFF_MAX 16.0    /* doubled up to this while it trips again at once */
/* A yield's weight in the moving share. A peer's own burst of work (a
 * 4-rank ring over TCP, its neighbour on the core sending 512 KiB chunks)
 * makes a few slow yields in a row: at 1/8, three of them stopped the
 * yields, and 4 MiB ran at busbw 1.12-1.14 GB/s against 1.32-1.34 with
 * none stopped. A busy stranger's time slices, nearly every yield, reach
 * the share after 18. */
#define YIELD_WEIGHT (1.0 / 64)

bool rt_yield_allowed(const struct rt_yield_gauge *g, double now)
{
    return now >= g->off_until;
}

bool rt_yield_note(struct rt_yield_gauge *g, double took, double now)
{
    const bool slow = took > YIELD_SLOW;
    g->slow += ((slow ? 1.0 : 0.0) - g->slow) * YIELD_WEIGHT;
    if (g->slow <= YIELD_SLOW_SHARE)
        return true;
    /* tripped again within the last pause's length of the yields' return:
     * the stranger is still there, so each return costs less */
    double off = g->off_s > 0.0 && now - g->off_until < g->off_s ? 2.0 * g->off_s : YIELD_OFF;
    g->off_s = off < YIELD_OFF_MAX ? off : YIELD_OFF_MAX;
    g->off_until = now + g->off_s;
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
