/* loader.c — batches of a data set, gathered ahead by a prefetch thread.
 *
 * Two staging slots. While the trainer works on batch k (slot k % 2), the
 * thread gathers batch k+1 into the other slot by the epoch's permutation.
 * rt_loader_next hands out batch k+1 and, in the same step, asks for k+2
 * into the slot of batch k, which the caller gave back by calling again.
 * At most one gather is ever outstanding, so one mutex, one condition
 * variable and a few fields are the whole protocol.
 *
 * Everything is allocated in rt_loader_new: a step allocates nothing.
 * The slots hold floats whatever the set stores (bytes, mostly).
 * The slots are page-aligned host memory; a backend that can pin memory
 * can register them, and a CPU backend reads them in place. */
#include "data.h"
#include "status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOADER_TAG 0x4c4f4144u /* "LOAD" */
#define LOADER_DEAD 0xdeadbeefu

struct rt_loader {
    uint32_t tag;
    const rt_dataset *ds;
    int batch;
    bool shuffle;
    uint64_t seed;
    long nbatches;
    size_t per; /* floats per sample */
    uint32_t *perm;
    float *x[2];
    int32_t *y[2];
    int count[2];
    int rc[2];         /* a gather that failed (shards: a corrupt record) */
    char why[2][512];  /* its message: the error detail is the thread's own */
    long got_a[2], got_b[2]; /* the rows of its batch a slot holds */
    bool partial;      /* gather the hinted rows only (rt_loader_rows) */
    long hint_a, hint_b; /* under mu: the rows the last step used */

    /* Trainer side only. */
    bool started;
    long next; /* the batch the next rt_loader_next returns */

    /* Shared with the thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool job;         /* a gather was asked for and is not done */
    int job_slot;
    long job_batch, job_a, job_b;
    long ready[2];    /* the batch a slot holds, -1 for none */
    bool quit;
    pthread_t thread;
};

static void check(const rt_loader *l) { RT_ASSERT(l && l->tag == LOADER_TAG); }

/* Rows a..b-1 (clipped to the batch) of batch b's samples into slot s,
 * as the floats the model sees: a set kept as bytes is normalised here, on
 * the fly (samples.c). perm is only written by rt_loader_start while no
 * gather is outstanding, and the mutex orders that write before this
 * read. */
static void gather(rt_loader *l, int s, long b, long a, long e)
{
    const rt_dataset *ds = l->ds;
    long first = b * l->batch;
    long n = ds->n - first < l->batch ? ds->n - first : l->batch;
    e = e > n ? n : e;
    a = a > e ? e : a;
    l->rc[s] = rt_dataset_gather(ds, l->perm + first + a, e - a, l->x[s] + (size_t)a * l->per,
                                 l->y[s] + a);
    if (l->rc[s] < 0)
        snprintf(l->why[s], sizeof l->why[s], "%s", rt_error_detail());
    l->got_a[s] = a;
    l->got_b[s] = e;
    l->count[s] = (int)n;
}

static void *prefetch_main(void *arg)
{
    rt_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->job && !l->quit)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit)
            break;
        int s = l->job_slot;
        long b = l->job_batch, a = l->job_a, e = l->job_b;
        pthread_mutex_unlock(&l->mu);
        gather(l, s, b, a, e);
        pthread_mutex_lock(&l->mu);
        l->ready[s] = b;
        l->job = false;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Ask the thread for batch b into its slot; the caller holds mu and no
 * gather is outstanding. */
static void request(rt_loader *l, long b)
{
    RT_ASSERT(!l->job);
    l->job = true;
    l->job_slot = (int)(b & 1);
    l->job_batch = b;
    l->job_a = l->partial ? l->hint_a : 0;
    l->job_b = l->partial ? l->hint_b : l->batch;
    l->ready[b & 1] = -1;
    pthread_cond_broadcast(&l->cv);
}

static void wait_idle(rt_loader *l)
{
    while (l->job)
        pthread_cond_wait(&l->cv, &l->mu);
}

rt_loader *rt_loader_new(const rt_dataset *ds, int batch, bool shuffle, uint64_t seed)
{
    RT_ASSERT(ds && ds->n >= 0);
    if (batch <= 0) {
        rt_error(RT_ERR_ARG, "batch size %d is not positive", batch);
        return NULL;
    }
    bool no_thread = false;
    rt_loader *l = calloc(1, sizeof *l);
    if (!l)
        goto fail;
    l->ds = ds;
    l->batch = batch;
    l->shuffle = shuffle;
    l->seed = seed;
    l->nbatches = ((long)ds->n + batch - 1) / batch;
    l->per = (size_t)ds->c * ds->h * ds->w;
    l->ready[0] = l->ready[1] = -1;
    l->hint_b = batch;
    l->perm = malloc(((size_t)ds->n + 1) * sizeof *l->perm);
    if (!l->perm)
        goto fail_free;
    for (int s = 0; s < 2; s++) {
        void *p = NULL;
        if (posix_memalign(&p, 4096, (size_t)batch * l->per * sizeof(float)) != 0)
            goto fail_free;
        l->x[s] = p;
        if (!(l->y[s] = malloc((size_t)batch * sizeof(int32_t))))
            goto fail_free;
    }
    if (pthread_mutex_init(&l->mu, NULL) != 0)
        goto fail_free;
    if (pthread_cond_init(&l->cv, NULL) != 0)
        goto fail_mutex;
    if (pthread_create(&l->thread, NULL, prefetch_main, l) != 0) {
        no_thread = true;
        goto fail_cond;
    }
    l->tag = LOADER_TAG;
    return l;

fail_cond:
    pthread_cond_destroy(&l->cv);
fail_mutex:
    pthread_mutex_destroy(&l->mu);
fail_free:
    for (int s = 0; s < 2; s++) {
        free(l->x[s]);
        free(l->y[s]);
    }
    free(l->perm);
    free(l);
fail:
    if (no_thread)
        rt_error(RT_ERR_NOMEM, "cannot start the data prefetch thread");
    else
        rt_error(RT_ERR_NOMEM, "out of memory for a loader of batch %d of %dx%dx%d images",
                 batch, ds->c, ds->h, ds->w);
    return NULL;
}

void rt_loader_destroy(rt_loader **lp)
{
    if (!lp || !*lp)
        return;
    rt_loader *l = *lp;
    check(l);
    pthread_mutex_lock(&l->mu);
    l->quit = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    for (int s = 0; s < 2; s++) {
        free(l->x[s]);
        free(l->y[s]);
    }
    free(l->perm);
    l->tag = LOADER_DEAD;
    free(l);
    *lp = NULL;
}

int rt_loader_start(rt_loader *l, long epoch, long first_batch)
{
    check(l);
    if (epoch < 0)
        return rt_error(RT_ERR_ARG, "epoch %ld is negative", epoch);
    if (first_batch < 0 || first_batch > l->nbatches)
        return rt_error(RT_ERR_ARG, "cannot start at batch %ld: an epoch has %ld batches",
                        first_batch, l->nbatches);
    pthread_mutex_lock(&l->mu);
    wait_idle(l); /* a gather of the old epoch may still be running */
    if (l->shuffle) {
        rt_permutation(l->perm, l->ds->n, l->seed, epoch);
    } else {
        for (long i = 0; i < l->ds->n; i++)
            l->perm[i] = (uint32_t)i;
    }
    l->ready[0] = l->ready[1] = -1;
    l->next = first_batch;
    l->started = true;
    if (first_batch < l->nbatches)
        request(l, first_batch);
    pthread_mutex_unlock(&l->mu);
    return RT_OK;
}

int rt_loader_next(rt_loader *l, const float **x, const int32_t **y, int *n)
{
    check(l);
    RT_ASSERT(l->started && x && y && n);
    long b = l->next;
    if (b >= l->nbatches)
        return 0;
    int s = (int)(b & 1);
    pthread_mutex_lock(&l->mu);
    while (l->ready[s] != b)
        pthread_cond_wait(&l->cv, &l->mu);
    if (l->rc[s] < 0) {
        pthread_mutex_unlock(&l->mu);
        return rt_error(l->rc[s], "%s", l->why[s]);
    }
    /* Slot s^1 held batch b-1, which the caller has given back. */
    if (b + 1 < l->nbatches)
        request(l, b + 1);
    pthread_mutex_unlock(&l->mu);
    *x = l->x[s];
    *y = l->y[s];
    *n = l->count[s];
    l->next = b + 1;
    return 1;
}

void rt_loader_set_partial(rt_loader *l)
{
    check(l);
    l->partial = true;
}

int rt_loader_rows(rt_loader *l, long a, long b)
{
    check(l);
    RT_ASSERT(l->started && l->next > 0 && 0 <= a && a <= b && b <= l->batch);
    int s = (int)((l->next - 1) & 1);
    pthread_mutex_lock(&l->mu);
    l->hint_a = a;
    l->hint_b = b;
    pthread_mutex_unlock(&l->mu);
    if (a == b || (l->got_a[s] <= a && b <= l->got_b[s]))
        return RT_OK;
    /* the part moved (a new plan): read it now; the thread works on the
     * other slot meanwhile */
    gather(l, s, l->next - 1, a, b);
    return l->rc[s] < 0 ? rt_error(l->rc[s], "%s", l->why[s]) : RT_OK;
}

const uint32_t *rt_loader_indices(const rt_loader *l)
{
    check(l);
    RT_ASSERT(l->started && l->next > 0);
    return l->perm + (size_t)(l->next - 1) * (size_t)l->batch;
}

long rt_loader_batches(const rt_loader *l)
{
    check(l);
    return l->nbatches;
}
