/* pacer.h — a worker in a CPU-quota cgroup keeps its CPU use under its
 * quota, so that the kernel never freezes it.
 *
 * A process that runs until its quota is spent is frozen for the rest of
 * each CFS period: 20 ms of every 100 at 0.8 cores. Where the workers wait
 * for each other every step (sync, average), every worker waits out every
 * other one's freezes, and those fall at different times (each cgroup has
 * its own period). Sleeping a little before each step instead keeps the
 * process at PACE_SHARE of its quota: the workers sleep at the same
 * moment, right after the exchange, and nobody freezes. A worker whose use
 * stays under its quota never sleeps. Not installed. */
#ifndef RT_PACER_H
#define RT_PACER_H

struct rt_pacer {
    double rate;         /* CPU seconds a wall second it may use; 0: no pacing */
    double wall0, cpu0;  /* the reference: CPU used since cpu0 is paid for since wall0 */
    double slept;        /* seconds slept, in all */
};

/* quota: the cgroup's cores (0: none, nothing to pace). */
void rt_pacer_init(struct rt_pacer *pc, double quota);
/* Sleep as long as this process is ahead of its rate; returns the seconds slept. */
double rt_pacer_wait(struct rt_pacer *pc);
/* CPU and wall time not to pace against (an evaluation between steps). */
void rt_pacer_exclude(struct rt_pacer *pc, double cpu, double wall);

#endif
