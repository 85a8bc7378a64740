/* partition.h — who computes how much of a batch.
 *
 * Straggler-aware partitioning: every worker measures its own speed
 * (samples per second of compute, over a moving window of steps) and the
 * batch of each step is cut in proportion to those speeds, so that a slow
 * worker gets fewer samples and everybody finishes the step at about the
 * same time. The cut is computed on every worker from the same speeds
 * (exchanged over the ring) with integer arithmetic only, so every worker
 * derives the same shares bit for bit without asking anybody.
 *
 * A worker much slower than the others (below `min_share` of an equal
 * share) is put on standby: it gets no samples, still takes part in the
 * collectives, and comes back when its speed recovers (hysteresis 1.5x). */
#ifndef RT_PARTITION_H
#define RT_PARTITION_H

#include <stdbool.h>

#include "collective.h"

/* A speed is measured over the last RT_SPEED_WINDOW steps at least, and
 * over at least RT_SPEED_SECONDS of wall time: lenet's steps take 2-3 ms,
 * and 16 of them (40 ms) fell inside one phase of a CPU quota's 100 ms
 * period or of a shared host's slow spells, so that two equal workers read
 * 6,873 and 11,086 img/s in one window and the plan swung with them. At
 * most RT_SPEED_STEPS_MAX steps. */
#define RT_SPEED_WINDOW 16
#define RT_SPEED_SECONDS 0.5
#define RT_SPEED_STEPS_MAX 1024

/* samples/s over the window (the mean of the middle half of the steps'
 * rates). */
struct rt_speedo {
    double t[RT_SPEED_STEPS_MAX];  /* compute seconds of each step */
    double at[RT_SPEED_STEPS_MAX]; /* wall clock when it ended */
    long n[RT_SPEED_STEPS_MAX];
    int next, filled;
};

void rt_speedo_reset(struct rt_speedo *s);
/* A step of `samples` computed in `seconds`, ending now (_at: at wall
 * time `at`, rt_now()'s clock; tests give their own). */
void rt_speedo_add(struct rt_speedo *s, long samples, double seconds);
void rt_speedo_add_at(struct rt_speedo *s, long samples, double seconds, double at);
/* 0 while nothing was measured. A few slow steps do not move it. */
double rt_speedo_rate(const struct rt_speedo *s);
/* The same rate, with the steps in the window now (*steps) and whether
 * it is full (*full: a rate worth re-planning on); one pass, every step. */
double rt_speedo_measure(const struct rt_speedo *s, int *steps, bool *full);
/* Steps that take `seconds` of wall time at `steps_per_s`: a window's
 * length known on every worker alike (from exchanged speeds), within
 * [RT_SPEED_WINDOW, RT_SPEED_STEPS_MAX]. */
long rt_speed_window_steps(double steps_per_s);

/* Cut n items between `world` workers in proportion to speed[] (largest
 * remainder). Every active worker gets at least one item while n is at
 * least the number of active workers; standby ones (active[i] false) get
 * none. A speed that is not finite or <= 0 counts as the smallest positive
 * one measured (a worker that could not measure still gets work). active
 * may be NULL (all active). Deterministic: integer arithmetic on the
 * speeds rounded to 1/1024 sample/s. */
void rt_plan_shares(long n, int world, const double *speed, const bool *active, long *share);
/* The same with no worker above cap[r] images (its memory's limit; NULL:
 * no caps): a capped worker's excess goes to the others by their speeds.
 * false when the active workers' caps add up to less than n (the shares
 * then hold the caps, short of n). */
bool rt_plan_shares_capped(long n, int world, const double *speed, const bool *active,
                           const long *cap, long *share);
/* world <= RT_MAX_WORKERS in all three. */

/* Standby decisions with hysteresis: an active worker whose speed is below
 * min_share x the mean speed of the active workers goes on standby; a
 * standby worker whose speed is above 1.5 x min_share x that mean comes
 * back. The fastest worker always stays active; min_share <= 0 keeps
 * everybody active. Returns whether any worker changed role. */
bool rt_plan_standby(int world, const double *speed, double min_share, bool *active);

/* Seconds of a step cut as share[] at these speeds: the slowest active
 * worker's overhead[r] + share[r] / speed[r] (overhead may be NULL: none).
 * INFINITY when an active worker has no share or no speed (a plan that
 * cannot stand). */
double rt_plan_shares_time(int world, const long *share, const double *speed,
                           const double *overhead, const bool *active);

/* Whether the new shares are worth taking over the old at the speeds just
 * measured: some share moved by more than slack samples, and the step
 * gets shorter by more than the fraction gain (or the old plan cannot
 * stand). Speeds measured over a few steps are noisy (two equal workers:
 * +-10% a 16-step window), and a plan that follows the noise leaves the
 * step waiting on the larger share. */
bool rt_plan_worth(int world, const long *old, const long *share, const double *speed,
                   const double *overhead, const bool *active, long slack, double gain);

/* Seconds of a step of n samples between the active workers, each also
 * busy overhead[r] seconds a step outside computing (the optimiser update,
 * ring traffic: for a worker on a fraction of a core, its quota's worth of
 * that CPU, a real cost): the samples cut so that all finish together,
 * none below its overhead, and never less than the largest active
 * overhead (an active worker takes a sample). INFINITY when no active
 * worker has a speed. */
double rt_plan_step_time(long n, int world, const double *speed, const double *overhead,
                         const bool *active);
/* The cut of n samples that ends the step soonest when each active worker
 * takes overhead[r] + share[r] / speed[r] seconds: one sample each first
 * (when n is at least the active workers), then each next to whoever
 * would finish it first (ties to the lower rank), none above cap[r] (cap
 * NULL: no caps). With no overhead anywhere (overhead NULL or all 0) the
 * proportional cut of rt_plan_shares_capped. A worker in a CPU quota
 * whose per-step work outside computing costs a third of its step gets
 * fewer samples than its speed alone would say: above that it holds every
 * step. false as rt_plan_shares_capped. Deterministic. */
bool rt_plan_shares_timed(long n, int world, const double *speed, const double *overhead,
                          const bool *active, const long *cap, long *share);
/* Standby for workers that cost a step more than they add: while taking
 * one active worker out (the fastest never) makes the step at least
 * `gain` shorter (0.05: 5%), it goes on standby; a standby one comes back
 * when adding it makes the step 2 x gain shorter. Returns whether any
 * worker changed role. */
bool rt_plan_standby_overhead(long n, int world, const double *speed, const double *overhead,
                              double gain, bool *active);

/* The CPU quota of this process's cgroup in cores (cgroup v1 cpu.cfs_quota_us
 * / cpu.cfs_period_us, or v2 cpu.max, the smallest along the path to the
 * root), e.g. 0.25 for `docker run --cpus 0.25`; 0 when there is none or it
 * cannot be read. A quota-limited worker computes at full speed until its
 * quota runs out and is then frozen for the rest of the period, so its
 * compute time alone overstates what it sustains: the trainer scales the
 * speed it reports by quota / threads. */
double rt_cpu_quota(void);

/* Offsets of the shares: off[r] = share[0] + ... + share[r-1]. */
void rt_plan_offsets(int world, const long *share, long *off);

#endif
