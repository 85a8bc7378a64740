/* dist.h — what the data-parallel modes (sync, average, gossip) share: a
 * host replica, the planner, and the methods they fill their tables with.
 * Each mode's own state starts with a struct rt_dist. Not installed. */
#ifndef RT_DIST_H
#define RT_DIST_H

#include "planner.h"
#include "replica.h"
#include "trainer.h"

struct rt_dist {
    struct rt_replica r;
    struct rt_planner pl;
    double last_norm;   /* the gradient's norm at the last step (NaN: not measured) */
    bool no_state;      /* joined, or a recovery was cut while receiving: this replica
                           holds no state to give the others */
    long local_steps;   /* local optimiser steps (average, gossip) */
    double local_train; /* seconds in step loops (average, gossip) */
    long averagings;    /* pairwise averagings applied (gossip) */
};

/* The images of an even share of the batch, rounded up. */
int rt_dist_even_rows(const struct rt_trainer *t);
/* Set d up (t->ms = d): the replica, the planner, the optimiser on the host
 * for all the parameters (every worker holds the whole optimiser state, so
 * none is lost with a worker), the loader walking batches of loader_batch. */
int rt_dist_init(struct rt_trainer *t, struct rt_dist *d, bool balanced, bool roles,
                 int loader_batch);
/* Measure, report ready with the run's summary (+ the mode's words), start
 * from rank 0's replica or the checkpoint the coordinator holds. */
int rt_dist_begin(struct rt_trainer *t, const char *mode_words);
/* The epoch's sums over all workers, the state averaged, and the check
 * that every sample was used exactly once. */
int rt_dist_epoch_sums(struct rt_trainer *t, struct rt_epoch *e);
int rt_dist_evaluate(struct rt_trainer *t, const rt_dataset *ds, double *loss, double *acc);
int rt_dist_agree(struct rt_trainer *t, void *buf, size_t bytes);
int rt_dist_checkpoint(struct rt_trainer *t, enum rt_ckpt_which which);
int rt_dist_end(struct rt_trainer *t);
/* After a change of members: the most advanced member's state to all
 * (fresh: this worker has none yet), and a new plan. */
int rt_dist_recover(struct rt_trainer *t, bool fresh);
void rt_dist_free(struct rt_dist *d);

/* The last state every member agreed on (dist_commit.c): average and
 * gossip go back to it when the members change. */
struct rt_commit {
    float *buf;             /* weights, each optimiser buffer, batch-norm state */
    size_t floats;
    struct rt_train_pos pos;
    struct rt_epoch ep;     /* the epoch's sums over all members, then */
    bool valid;
};
/* Copy the replica's state and position now (every member holds the same). */
int rt_commit_take(struct rt_commit *k, struct rt_trainer *t);
/* Go back to it: state, position, the epoch's sums. */
int rt_commit_restore(const struct rt_commit *k, struct rt_trainer *t);
/* It was taken at this position already. */
bool rt_commit_here(const struct rt_commit *k, const struct rt_trainer *t);
void rt_commit_free(struct rt_commit *k);

/* One optimiser step of this worker alone on all of its parameters (host);
 * the gradient's norm measured when want_norm (the step logs it). */
int rt_dist_local_step(struct rt_trainer *t, struct rt_dist *d, bool want_norm);

#endif
