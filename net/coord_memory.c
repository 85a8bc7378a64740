/* coord_memory.c — the workers' memory (issue 18), as the coordinator
 * sees it: a worker whose cgroup limit cannot hold the run is turned away
 * at its hello, with its estimated need and its limit, instead of being
 * killed by the kernel later (the others go on, as with any refusal);
 * the cluster table shows each worker's need and limit; the end of the
 * run reports each worker's peak (max RSS) in a log line and the metrics.
 * The estimate is the workers' own rule (src/memory.c), made here once
 * from the job, with each worker's resident memory at its hello. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "coord-impl.h"
#include "memory.h"
#include "status.h"

bool coord_memory_fits(struct coord *k, const struct rt_member *m, char *why, size_t cap)
{
    if (!m->mem_limit)
        return true;
    if (!k->mem_state) {
        k->mem_state = rt_mem_estimate(k->model_text, k->c, k->o->workers, &k->mem) == RT_OK
                           ? 1 : -1;
        if (k->mem_state < 0)
            coord_note("no estimate of the workers' memory need (%s): workers are admitted "
                       "whatever their memory limit", rt_error_detail());
    }
    if (k->mem_state < 0)
        return true;
    struct rt_mem_need n = k->mem;
    rt_mem_set_process(&n, m->mem_rss);
    long rows;
    uint64_t need;
    if (rt_mem_fit(&n, k->c, k->o->workers, m->mem_limit, &rows, &need) == RT_OK)
        return true;
    snprintf(why, cap, "it %s", rt_error_detail());
    return false;
}

void coord_memory_cell(const struct coord_worker *w, char *buf, size_t cap)
{
    char lim[32] = "-";
    if (w->m.mem_limit)
        snprintf(lim, sizeof lim, "%.0f", (double)w->m.mem_limit / RT_MB);
    if (w->m.mem_need)
        snprintf(buf, cap, "%.0f/%s%s", (double)w->m.mem_need / RT_MB, lim,
                 w->mem_rows ? "*" : "");
    else
        snprintf(buf, cap, "?/%s", lim);
}

/* One metrics line per worker of the last generation. */
static void memory_metrics(struct coord *k, const struct coord_worker *w)
{
    if (!k->mf)
        return;
    rt_metrics_begin(k->mf);
    rt_metrics_str(k->mf, "event", "memory");
    rt_metrics_int(k->mf, "rank", w->rank);
    rt_metrics_str(k->mf, "name", w->m.name);
    rt_metrics_str(k->mf, "host", w->m.host);
    rt_metrics_num(k->mf, "max_rss_mb", (double)w->max_rss / RT_MB);
    rt_metrics_num(k->mf, "mem_need_mb", (double)w->m.mem_need / RT_MB);
    rt_metrics_num(k->mf, "mem_limit_mb", (double)w->m.mem_limit / RT_MB);
    if (w->mem_rows)
        rt_metrics_int(k->mf, "mem_rows", w->mem_rows);
    if (rt_metrics_end(k->mf) < 0)
        coord_note("cannot write the metrics file: %s", rt_error_detail());
}

void coord_memory_report(struct coord *k, struct rt_train_result *res)
{
    char line[2048];
    int len = 0;
    res->max_rss = 0;
    for (int r = 0; r < k->ms.n && len < (int)sizeof line - 120; r++) {
        const struct coord_worker *w = coord_rank(k, r);
        char lim[40] = "no limit", peak[32] = "unknown", est[32] = "no estimate";
        if (w->m.mem_limit)
            snprintf(lim, sizeof lim, "limit %.0f MB", (double)w->m.mem_limit / RT_MB);
        if (w->max_rss)
            snprintf(peak, sizeof peak, "%.0f MB", (double)w->max_rss / RT_MB);
        if (w->m.mem_need)
            snprintf(est, sizeof est, "estimated %.0f MB", (double)w->m.mem_need / RT_MB);
        len += snprintf(line + len, sizeof line - (size_t)len, "%srank %d %s %s (%s, %s)",
                        r ? "; " : "", r, w->m.name, peak, est, lim);
        if (w->max_rss > res->max_rss)
            res->max_rss = w->max_rss;
        memory_metrics(k, w);
    }
    /* not "by rank: ": tests read the plan's last line by those words */
    coord_note("peak memory (max RSS): %s", line);
}
