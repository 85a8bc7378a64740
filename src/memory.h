/* memory.h — the memory a worker has and the memory it will need.
 *
 * A worker in a small container (256 MB is common) that runs out of
 * memory is killed by the kernel and lost. So a worker reads its limit
 * (its cgroup's, like rt_cpu_quota reads its CPU quota), estimates what a
 * run will take before it reads its data, says so at join instead of
 * being killed later, and in sync mode its share of the batch may be
 * capped to what its memory holds. Peak memory (max RSS) goes into the
 * run's metrics. */
#ifndef RT_MEMORY_H
#define RT_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "train.h"

#define RT_MB (1024.0 * 1024.0)

/* This process's memory limit in bytes: the smallest of cgroup v1
 * memory.limit_in_bytes or v2 memory.max along its cgroup's path up to the
 * root; 0 when there is none ("max", or v1's page-rounded 2^63) or it
 * cannot be read. */
uint64_t rt_mem_limit(void);
/* The same from a /proc/PID/cgroup file and a cgroup mount root (tests
 * make a fake tree): v1 looks under ROOT/memory, v2 under ROOT and
 * ROOT/unified. */
uint64_t rt_mem_limit_at(const char *proc_cgroup, const char *root);
/* Resident memory now, and the most it has been (getrusage's ru_maxrss),
 * in bytes. */
uint64_t rt_mem_rss(void);
uint64_t rt_mem_peak(void);

/* A run's memory on one worker, in bytes: what does not depend on its
 * share of the batch, what each image of the share adds, and the parts
 * for people. */
struct rt_mem_need {
    uint64_t process;   /* the process as it is (code, libraries, sockets) + runtime slack */
    uint64_t data_peak; /* the data set while read and split (before the model exists) */
    uint64_t data;      /* the data set once open */
    uint64_t model;     /* parameters, gradients, optimiser state, buffers of a 1-image model */
    uint64_t batch;    /* loader slots and buffers for the whole batch */
    uint64_t per_row;  /* activations and their gradients, per image of its share */
};

/* Estimate the run of config c (the model text in model_text, named
 * c->model_path) on this worker, with `world` workers, without reading the
 * data's pixels: a 1- and a 2-image model are built on a 1-thread cpu
 * device and their buffers counted. */
int rt_mem_estimate(const char *model_text, const struct rt_train_config *c, int world,
                    struct rt_mem_need *out);
/* The images a worker's buffers hold in the run of c with `world`
 * workers: the whole batch in sync and average (a balanced share may grow
 * to it), gossip's local batch. least: the fewest it can do with, 1 for a
 * balanced sync share, which its memory may cap (rt_plan_shares_capped). */
long rt_mem_rows(const struct rt_train_config *c, int world, bool least);
/* The whole need with a share of `rows` images. */
uint64_t rt_mem_need_at(const struct rt_mem_need *n, long rows);
/* The most images of a share that fit in `limit` bytes (0: not even one);
 * LONG_MAX when limit is 0 (none). */
long rt_mem_rows_cap(const struct rt_mem_need *n, uint64_t limit);
/* The part of n that is the process itself, from its resident memory
 * (the coordinator estimates for a worker from the RSS its hello gave). */
void rt_mem_set_process(struct rt_mem_need *n, uint64_t rss);
/* Whether the run of c fits in `limit` bytes (0: no limit): RT_OK and
 * *rows, the images this worker's buffers hold (the mode's, or fewer in a
 * balanced sync run when that is what fits), and *need at those rows; or
 * RT_ERR_NOMEM with a detail naming the need and the limit. */
int rt_mem_fit(const struct rt_mem_need *n, const struct rt_train_config *c, int world,
               uint64_t limit, long *rows, uint64_t *need);
/* "about 310 MB (process 21, data 55, model 17, batch buffers 1, 64
 * images of activations 16)" */
void rt_mem_describe(const struct rt_mem_need *n, long rows, char *buf, unsigned cap);

#endif
