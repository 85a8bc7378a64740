/* trainer.h — inside the trainer: its state, the step and epoch records,
 * and the table every training mode fills (not installed).
 *
 * src/train.c owns the loop: fit -> epoch -> step, written once. Whatever
 * differs between one process and the data-parallel modes is a method of
 * struct rt_mode_ops, one implementation per file: mode_local.c,
 * mode_sync.c, mode_average.c, mode_gossip.c. A feature that would add an
 * `if (mode == ...)` to the loop adds a method instead. */
#ifndef RT_TRAINER_H
#define RT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "checkpoint.h"
#include "data.h"
#include "evaluate.h"
#include "model.h"
#include "optim.h"
#include "tally.h"
#include "train.h"

struct rt_mode_ops;

/* One run. Everything a mode may read; what a mode owns lives in `ms`. */
struct rt_trainer {
    struct rt_train_config c;      /* with the schedule's steps filled in */
    const struct rt_mode_ops *mode;
    void *ms;                      /* the mode's own state */
    const rt_collective *coll;     /* the other workers; NULL in one process */
    const rt_pairwise *pairwise;   /* gossip's links; NULL otherwise */
    rt_reporter rep;               /* progress, lines, metrics, checkpoints */
    int rank, world;               /* 0 and 1 in one process */
    struct rt_data data;
    rt_dev *dev;
    rt_model *m;
    rt_optim *opt;                 /* made by the mode's init */
    rt_loader *loader;
    rt_buf *xb, *yb;               /* one batch of images and labels on dev */
    rt_buf *xwrap[2];              /* the loader's slots as dev buffers (host memory) */
    const float *xwrap_at[2];      /* the slot each wraps */
    int xwrap_next;                /* the one a new slot replaces */
    rt_evaluator *ev;
    int rows;                      /* images the activation buffers hold */
    size_t chw;                    /* floats per image */
    long ntrain, spe;              /* training images, steps per epoch */
    struct rt_train_pos pos;
    struct rt_epoch *ep;           /* the epoch under way (its sums move with the
                                    * state when the members change) */
    bool have_best;
    float *best_host;              /* the best weights, when not in a file */
    char last_path[1100], best_path[1100]; /* one process with --checkpoint */
    struct rt_train_result *res;
    float lr_given;                /* --lr before --lr-scale */
};

/* One epoch as the loop sees it. */
struct rt_epoch {
    long epoch;                    /* 0-based */
    long first;                    /* the loader starts at this batch */
    long count;                    /* batches this worker walks; < 0: to the end */
    long done;                     /* batches walked */
    long redone;                   /* steps taken again after the members changed */
    bool whole;                    /* counted from its start (not resumed inside it) */
    bool sums_global;              /* the sums are over all workers already (sync) */
    double loss_sum;
    long correct, seen;            /* this worker's samples (after the reduction: all) */
    long seen_all;                 /* images this epoch's rate counts */
    double used[3];                /* samples used: count, sum and sum of squares of
                                    * their indices, checked at the epoch's end */
    double t_epoch;                /* when the epoch began */
    double t0, t_train;            /* the step loop's start, seconds in it */
    bool has_samples;              /* data parallel: `seen` is over all workers */
    bool has_consensus;            /* gossip: how far replicas drifted apart */
    double consensus, consensus_rel;
};

/* One step as the loop sees it. */
struct rt_step {
    const float *x;                /* the global batch: n images */
    const int32_t *y;
    int n;
    long a, b;                     /* this worker's part [a, b) */
    float gscale;                  /* gradient scale of backward */
    uint64_t seed;                 /* dropout seed */
    struct rt_tally tally;         /* this worker's part; the whole batch once a mode
                                    * made it global (sync) */
    double t_compute, cpu_compute; /* clocks when compute started */
    bool log_now;                  /* a --log-every step */
    bool exchanged;                /* this step talked to the other workers */
    bool stop;                     /* every worker stops at this step */
    bool leave_epoch;              /* this worker's part of the epoch is over */
    bool not_begun;                /* RT_ERR_REGROUP before any work: nothing to redo */
};

enum rt_ckpt_which { RT_CKPT_LAST, RT_CKPT_BEST, RT_CKPT_STOP, RT_CKPT_FINAL };

/* A training mode. Every method is required unless said otherwise. */
struct rt_mode_ops {
    const char *name;
    /* Images one step of this worker may compute at most (activations). */
    int (*rows)(const struct rt_trainer *t);
    /* The model is built: make t->opt and the mode's state. */
    int (*init)(struct rt_trainer *t);
    /* Before the first epoch: resume, announce the run, meet the others. */
    int (*begin)(struct rt_trainer *t);
    /* Which batches of this epoch this worker walks (e->first, e->count). */
    int (*epoch_begin)(struct rt_trainer *t, struct rt_epoch *e);
    /* This worker's part of the step's batch, its gradient scale and seed. */
    int (*part)(struct rt_trainer *t, struct rt_step *s);
    /* The gradient of the part is in the model: exchange, optimise, vote. */
    int (*after_backward)(struct rt_trainer *t, struct rt_step *s);
    /* A --log-every line: reduce the window's sums w (loss, correct, seen)
     * where needed; *emit false when this step writes none; *grad_norm. */
    int (*log_window)(struct rt_trainer *t, const struct rt_step *s, double w[3], bool *emit,
                      double *grad_norm);
    /* Batches done of the epoch for the progress display, and images/s. */
    void (*progress)(const struct rt_trainer *t, const struct rt_epoch *e, long *done,
                     double *ips);
    /* The epoch's step loop is over: settle the replicas, reduce e's sums. */
    int (*epoch_end)(struct rt_trainer *t, struct rt_epoch *e);
    /* Loss and accuracy of a whole data set. */
    int (*evaluate)(struct rt_trainer *t, const rt_dataset *ds, double *loss, double *acc);
    /* Rank 0's bytes to everybody (a decision made once). */
    int (*agree)(struct rt_trainer *t, void *buf, size_t bytes);
    /* Keep a checkpoint (a file, or this rank's part to the coordinator). */
    int (*checkpoint)(struct rt_trainer *t, enum rt_ckpt_which which);
    /* The members changed (a collective answered RT_ERR_REGROUP and the new
     * group is formed; fresh: this worker just joined it): make every
     * member's state that of the most advanced one — position, weights,
     * optimiser, the epoch's sums — and plan for the new group. NULL: the
     * mode cannot change members. */
    int (*recover)(struct rt_trainer *t, bool fresh);
    /* The run is over: final weights, the replica hash, the mode's counts. */
    int (*end)(struct rt_trainer *t);
    /* Free the mode's state (t->ms may be NULL: init failed early). */
    void (*destroy)(struct rt_trainer *t);
};

extern const struct rt_mode_ops rt_mode_local, rt_mode_sync, rt_mode_average, rt_mode_gossip;

/* The loop's shared pieces, for the modes. */
/* A different, reproducible dropout seed for every step. */
uint64_t rt_step_seed(uint64_t seed, long step);
/* A step's counts into the epoch's sums. */
void rt_epoch_add(struct rt_epoch *e, const struct rt_tally *k);
/* forward, loss and backward of `n` images of the batch from image a,
 * with gradient scale `gscale` (loss and correct counted into s when
 * `count`). */
int rt_trainer_compute(struct rt_trainer *t, struct rt_step *s, long a, int n, float gscale,
                       bool count);
/* progress for modes that walk the global batches: batches done of the
 * epoch from the step count, images/s of the whole cluster. */
void rt_mode_progress_global(const struct rt_trainer *t, const struct rt_epoch *e, long *done,
                             double *ips);
/* Whether a stop was asked of this process (Ctrl-C) or by the reporter. */
bool rt_trainer_stop_asked(const struct rt_trainer *t);
/* "effective learning rate 0.006 = --lr 0.003 x 2 (--lr-scale linear: ...)". */
void rt_trainer_lr_text(const struct rt_trainer *t, char *buf, size_t n);
/* A line to the reporter, printf style. */
int rt_trainer_say(const struct rt_trainer *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
