/* yieldwait.h — waiting on a crowded machine: one that runs more of a
 * collective's processes than they have cores. There the peer a process
 * waits for needs its core: a spin holds it, and a sleep's wake-up waits
 * until the scheduler takes the core back from whoever has it. So the
 * wait yields between its looks (RT_YIELD_TURNS of them) before it sleeps.
 *
 * Among the collective's processes alone a yield comes back within 10 us
 * nearly always (1 in 100 after 1-4 ms: a peer sent meanwhile); beside
 * busy processes that are not peers most take 1-8 ms, a time slice each
 * (two busy loops beside a 4-rank ring: 4 KiB p50 487 us sleeping, 5.9 ms
 * yielding every time). So where more than a quarter of the recent yields
 * (a moving average over about 64) took longer than 1 ms, none for a
 * second, for twice as long each time that trips again right after (up to
 * 16 s). (Ending a wait's yields at its first slow one lost most of the
 * gain at 4 MiB: there the slow ones are the peers' sends.) Used by
 * net/ring.c's waits and net/hostreduce.c's. */
#ifndef RT_YIELDWAIT_H
#define RT_YIELDWAIT_H

#include <stdbool.h>

#define RT_YIELD_TURNS 100

struct rt_yield_gauge {
    double slow;      /* moving share of the recent yields that took over 1 ms */
    double off_until; /* no yields before this time (rt_now) */
    double off_s;     /* the last pause's length (0: none yet) */
};

/* Whether a wait may yield now (not backing off). */
bool rt_yield_allowed(const struct rt_yield_gauge *g, double now);
/* One turn: give the core to a runnable task. False, and no yields for a
 * second or more, once the recent yields were mostly slow. */
bool rt_yield_turn(struct rt_yield_gauge *g);
/* rt_yield_turn's bookkeeping: a yield that took `took` seconds, ending at
 * `now`. */
bool rt_yield_note(struct rt_yield_gauge *g, double took, double now);
/* The cores this process may run on (its affinity; 1 when unknown). */
int rt_affinity_cores(void);
/* Whether `procs` processes of one collective on this machine outnumber
 * the cores this process may use (its affinity, or its CPU quota `quota`
 * where lower; 0: none). */
bool rt_crowded(int procs, double quota);

#endif
