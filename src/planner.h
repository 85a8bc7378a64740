/* planner.h — a data-parallel run's shares by measured speed, at run time.
 *
 * partition.h holds the pure rules (shares, standby, the speed window);
 * the planner applies them during a run: it times this worker's compute
 * (with what a CPU quota sustains and the --throttle testing aid), lets a
 * standby worker probe its speed now and then, votes for a re-plan when
 * its speed moved, exchanges the speeds and cuts each batch. Every worker
 * computes the same plan from the same speeds. Not installed. */
#ifndef RT_PLANNER_H
#define RT_PLANNER_H

#include <stdbool.h>
#include <stdint.h>

#include "collective.h"
#include "pacer.h"
#include "partition.h"

struct rt_trainer;
struct rt_step;

struct rt_planner {
    const struct rt_trainer *t;
    bool balanced;        /* shares by speed (else even, static) */
    bool roles;           /* standby decisions (not gossip) */
    bool can_leave;       /* the members may change: a worker on standby leaves the ring */
    bool whole_epochs;    /* gossip: the mode cuts each epoch's local batches by the speeds
                           * (rt_plan_shares), so every plan takes the speeds just measured */
    bool leaving;         /* this worker just went on standby and leaves */
    /* speeds and roles as last exchanged; the shares of a full batch and
     * of the last short one */
    double *speed;
    double *overhead;     /* seconds per step each spends outside computing (quota workers) */
    double my_overhead;   /* this worker's, measured since the last plan */
    bool *active;
    long *share, *off, *nshare, *noff;
    long *cap;            /* images each rank's buffers hold (memory, issue 18) */
    struct rt_speedo speedo;
    double plan_speed;    /* this rank's speed when the plan was made */
    int moved_steps;      /* steps in a row its speed has been off plan_speed */
    int window_steps;     /* steps in its speed window now */
    long settle_steps;    /* steps of a speed window at the last plan's speeds */
    long plan_step;       /* step of the last plan */
    long plans, plans_changed;
    bool replan_due;
    const char *replan_why;
    bool settled;         /* planned once on speeds measured in training */
    float throttle;       /* testing aid: fraction of this worker's speed */
    double quota_scale;   /* CPU quota / threads, at most 1 (rt_cpu_quota) */
    double quota;         /* the quota in cores, 0: none */
    double threads;       /* compute threads the quota is shared by */
    bool cpu_clock;       /* speeds from the CPU clock (a quota, the cpu backend) */
    /* since the last plan, for a quota-limited worker: process CPU time at
     * its start, CPU spent computing, samples and steps */
    double qcpu0, qcompute;
    long qsamples, qsteps;
    double wall_rate;     /* gossip: samples / step-loop seconds of the last epoch */
    struct rt_pacer pacer; /* under a quota, where the workers wait for each other */
};

int rt_planner_init(struct rt_planner *p, const struct rt_trainer *t, bool balanced, bool roles);
void rt_planner_free(struct rt_planner *p);

/* Exchange speeds (mine: this worker's compute speed) and make the plan;
 * logged by rank 0 when it changes. */
int rt_planner_replan(struct rt_planner *p, long step, double mine, const char *why);
/* The members changed (t's rank and world are the new group's): everybody
 * active again, speeds exchanged, a new plan. */
int rt_planner_regroup(struct rt_planner *p);
/* The plan due since the last exchange's votes, if any. */
/* RT_ERR_STANDBY when the last plan put this worker on standby and it
 * leaves the ring (it joins again when its speed comes back): a worker on
 * a fraction of a core would otherwise slow every step by forwarding ring
 * traffic with nothing to add. */
int rt_planner_check_leave(const struct rt_planner *p);
int rt_planner_replan_if_due(struct rt_planner *p, long step);
/* This worker's part [a, b) of a global batch of n (full: the whole batch). */
void rt_planner_part(struct rt_planner *p, long n, long *a, long *b);
/* This worker's part of an evaluation over n images. */
void rt_planner_eval_part(struct rt_planner *p, long n, long *lo, long *hi);
/* Around a step's compute: start the clocks; after it, measure, probe when
 * on standby, account for the quota. */
void rt_planner_step_begin(struct rt_planner *p, struct rt_step *s);
int rt_planner_step_end(struct rt_planner *p, struct rt_trainer *t, struct rt_step *s);
/* Time and CPU spent between steps on something else (an evaluation):
 * not the steps' overhead, and not CPU to pace against. At the end of an
 * epoch a worker at 0.8 cores counted its share of the test set as 19.8 ms
 * a step outside computing and went on standby. */
void rt_planner_exclude(struct rt_planner *p, double cpu, double wall);
/* The vote of this worker on an exchanging step: a re-plan when its speed
 * has been more than --replan-change off the plan's for half its speed
 * window of steps in a row (a window's noise does not re-plan). */
uint32_t rt_planner_vote(const struct rt_planner *p);
/* After an exchange (step not yet counted): whether the next step re-plans. */
void rt_planner_agreed(struct rt_planner *p, uint32_t agreed, long step);
/* "ragtag: [plan] step S (why): shares of batch B by rank: ..." (rank 0). */
int rt_planner_say_plan(const struct rt_planner *p, long step, const char *why);
/* The rate to plan on: measured, or as at the start when nothing is yet. */
double rt_planner_rate(const struct rt_planner *p);

#endif
