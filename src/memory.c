/* memory.c — a process's memory limit and peak, and the estimate of what
 * a run needs (memory.h). */
#include "config.h"

#include "memory.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backend.h"
#include "cgroup.h"
#include "data.h"
#include "model.h"
#include "status.h"

/* v1 writes "no limit" as the largest page-aligned signed 64-bit value;
 * anything this large is no limit either. */
#define NO_LIMIT ((uint64_t)1 << 62)

/* Allowance for what a run allocates after the estimate and no buffer
 * count shows: BLAS and OpenMP per-thread buffers, the ring's and the
 * communication thread's buffers, thread stacks, malloc's slack. With it
 * the estimate of lenet and seedcnn workers stays 20-40% above their
 * measured peak (buffers are counted whole, the kernel counts touched
 * pages; docs/cluster.md, "Memory"). */
#define RUNTIME_SLACK ((uint64_t)16 << 20)

/* The limit written in DIR (v1: memory.limit_in_bytes, v2: memory.max);
 * 0 for none. */
static uint64_t limit_at(const char *dir, bool v2)
{
    char p[1300], s[64] = "";
    snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    bool ok = fscanf(f, "%63s", s) == 1;
    fclose(f);
    if (!ok || !strcmp(s, "max"))
        return 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    return *end || v == 0 || v >= NO_LIMIT ? 0 : (uint64_t)v;
}

/* The smallest limit from base/path up to base: a parent's limit holds
 * for its children too. */
static uint64_t limit_along(const char *base, const char *path, bool v2)
{
    char dir[1200];
    uint64_t best = 0;
    snprintf(dir, sizeof dir, "%s%s", base, strcmp(path, "/") ? path : "");
    size_t blen = strlen(base);
    for (;;) {
        uint64_t v = limit_at(dir, v2);
        if (v && (!best || v < best))
            best = v;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < blen)
            break;
        *slash = '\0';
    }
    return best;
}

struct limit_walk {
    const char *root;
    uint64_t best;
};

static void limit_line(const char *ctl, const char *path, void *arg)
{
    struct limit_walk *lw = arg;
    char base[600];
    uint64_t v = 0;
    if (!*ctl) { /* v2 */
        v = limit_along(lw->root, path, true);
        snprintf(base, sizeof base, "%s/unified", lw->root);
        if (!v)
            v = limit_along(base, path, true);
    } else if (rt_cgroup_has(ctl, "memory")) {
        snprintf(base, sizeof base, "%s/memory", lw->root);
        v = limit_along(base, path, false);
    }
    if (v && (!lw->best || v < lw->best))
        lw->best = v;
}

uint64_t rt_mem_limit_at(const char *proc_cgroup, const char *root)
{
    struct limit_walk lw = {.root = root, .best = 0};
    rt_cgroup_lines(proc_cgroup, limit_line, &lw);
    return lw.best;
}

uint64_t rt_mem_limit(void) { return rt_mem_limit_at("/proc/self/cgroup", "/sys/fs/cgroup"); }

uint64_t rt_mem_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, rss = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%llu %llu", &size, &rss) != 2)
        rss = 0;
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return (uint64_t)rss * (uint64_t)(page > 0 ? page : 4096);
}

uint64_t rt_mem_peak(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux: kilobytes */
}

/* Bytes of the buffers of the model built for `rows` images. */
static int model_bytes(const char *text, const char *name, rt_dev *dev, int rows,
                       uint64_t *bytes, size_t *np, struct rt_shape *in, int *classes)
{
    size_t before = rt_dev_live_bytes(dev);
    rt_model *m = rt_model_load_string(text, name, dev, rows);
    if (!m)
        return RT_ERR_CONFIG;
    *bytes = rt_dev_live_bytes(dev) - before;
    *np = rt_model_param_count(m);
    *in = rt_model_input_shape(m);
    *classes = rt_model_classes(m);
    rt_model_destroy(&m);
    return RT_OK;
}

static int optimiser_copies(const struct rt_optim_config *o)
{
    if (o->kind == RT_OPT_SGD)
        return o->momentum != 0.0f ? 1 : 0;
    return 2;
}

int rt_mem_estimate(const char *model_text, const struct rt_train_config *c, int world,
                    struct rt_mem_need *out)
{
    memset(out, 0, sizeof *out);
    uint64_t peak = 0, kept = 0;
    RT_TRY(rt_data_need(c->data_spec, c->val_frac, c->limit, &peak, &kept));
    rt_dev *dev = rt_dev_open("cpu", 0, 1);
    if (!dev)
        return RT_ERR_DEVICE;
    uint64_t b1 = 0, b2 = 0;
    size_t np = 0;
    struct rt_shape in;
    int classes = 0;
    int rc = model_bytes(model_text, c->model_path, dev, 1, &b1, &np, &in, &classes);
    if (rc == RT_OK)
        rc = model_bytes(model_text, c->model_path, dev, 2, &b2, &np, &in, &classes);
    rt_dev_close(&dev);
    RT_TRY(rc);
    uint64_t chw = (uint64_t)in.c * (uint64_t)in.h * (uint64_t)in.w;
    uint64_t row_model = b2 > b1 ? b2 - b1 : 0;
    bool host = !strcmp(c->backend, "cpu"); /* else the model lives on its device */
    int copies = optimiser_copies(&c->optim);
    /* average and gossip keep a copy of the agreed state */
    if (world > 1 && c->mode != RT_MODE_SYNC)
        copies += 1 + copies;
    /* gossip: the copy of the parameters its request sent, and the average
     * it answers with (net/gossip.c). Not the queues of its peers on one
     * host (gossip_shm.h): who shares the host is not known yet */
    if (world > 1 && c->mode == RT_MODE_GOSSIP)
        copies += 2;
    if (!host)
        copies += 2; /* host replica: parameters and gradients */
    /* sync, workers of one host: their shared copy of the weights and the
     * optimiser state, mapped by each (src/host_replica.c; its write-back
     * takes the place of the worker's own). Counted though who shares the
     * host is not known yet: a worker alone pays for none. */
    if (world > 1 && c->mode == RT_MODE_SYNC && host && c->host_replica)
        copies += 1 + optimiser_copies(&c->optim);
    rt_mem_set_process(out, rt_mem_rss());
    out->data_peak = peak;
    out->data = kept;
    out->model = (host ? b1 - row_model : 0) + (uint64_t)copies * np * sizeof(float);
    /* the loader's two slots hold whole batches; the evaluator one share */
    out->batch = 2 * (uint64_t)c->batch * (chw * sizeof(float) + sizeof(int32_t));
    out->per_row = (host ? row_model : 0) + 2 * chw * sizeof(float) +
                   (uint64_t)classes * sizeof(float) + sizeof(int32_t);
    return RT_OK;
}

void rt_mem_set_process(struct rt_mem_need *n, uint64_t rss) { n->process = rss + RUNTIME_SLACK; }

int rt_mem_fit(const struct rt_mem_need *n, const struct rt_train_config *c, int world,
               uint64_t limit, long *rows, uint64_t *need)
{
    long want = rt_mem_rows(c, world, false), least = rt_mem_rows(c, world, true);
    *rows = want;
    *need = rt_mem_need_at(n, want);
    if (!limit || *need <= limit)
        return RT_OK;
    long cap = rt_mem_rows_cap(n, limit);
    if (cap >= least) {
        *rows = cap < want ? cap : want;
        *need = rt_mem_need_at(n, *rows);
        return RT_OK;
    }
    char d[400];
    rt_mem_describe(n, least, d, sizeof d);
    return rt_error(RT_ERR_NOMEM, "needs %s but its memory limit is %.0f MB", d,
                    (double)limit / RT_MB);
}

long rt_mem_rows(const struct rt_train_config *c, int world, bool least)
{
    world = world > 0 ? world : 1;
    if (c->mode == RT_MODE_GOSSIP)
        return c->local_batch > 0 ? c->local_batch : (c->batch + world - 1) / world;
    if (least && c->mode == RT_MODE_SYNC && c->partition == RT_PARTITION_BALANCED && world > 1)
        return 1;
    return c->batch;
}

/* Reading the data is over before the model is built: the peak is the
 * larger of the two moments. */
uint64_t rt_mem_need_at(const struct rt_mem_need *n, long rows)
{
    uint64_t train = n->data + n->model + n->batch + (uint64_t)(rows > 0 ? rows : 0) * n->per_row;
    return n->process + (train > n->data_peak ? train : n->data_peak);
}

long rt_mem_rows_cap(const struct rt_mem_need *n, uint64_t limit)
{
    if (!limit)
        return LONG_MAX;
    if (rt_mem_need_at(n, 1) > limit)
        return 0;
    if (!n->per_row)
        return LONG_MAX;
    uint64_t fixed = n->process + n->data + n->model + n->batch;
    uint64_t rows = (limit - fixed) / n->per_row;
    return rows > (uint64_t)LONG_MAX ? LONG_MAX : (long)rows;
}

void rt_mem_describe(const struct rt_mem_need *n, long rows, char *buf, unsigned cap)
{
    snprintf(buf, cap,
             "about %.0f MB (process %.0f, data %.0f (%.0f while read), model %.0f, batch "
             "buffers %.0f, %ld image%s of activations %.1f)",
             rt_mem_need_at(n, rows) / RT_MB, n->process / RT_MB, n->data / RT_MB,
             n->data_peak / RT_MB, n->model / RT_MB, n->batch / RT_MB, rows,
             rows == 1 ? "" : "s", (double)rows * (double)n->per_row / RT_MB);
}
