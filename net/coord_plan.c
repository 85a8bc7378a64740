/* coord_plan.c — what rank 0's plan lines say, for the status page and the
 * metrics file:
 *   "ragtag: [plan] step 120 (why): shares of batch 64 by rank: 30 34 at img/s 900 1020"
 *   "ragtag: [plan] rank 2 on standby at step 300: ..."
 *   "ragtag: [plan] rank 2 back from standby at step 420: 850 img/s"
 *   "ragtag: [plan] gossip epoch 3: local batches of 32 by rank: 400 537 at img/s 900 1200 (...)"
 * The plan is the workers' (the coordinator takes no part in it) and these
 * lines are what they already tell it, written by src/planner.c and
 * src/mode_gossip.c of the same version; a line that does not parse, or
 * names another number of ranks than the generation has, changes nothing.
 * Each plan becomes a point of the shares curve, an event, and a "plan"
 * line of the --metrics file (ragtag plot draws the shares from it). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord-impl.h"
#include "status.h"

/* Up to max numbers separated by spaces from s; stops at anything else. */
static int read_numbers(const char *s, double *v, int max, const char **end)
{
    int n = 0;
    char *e;
    while (n < max) {
        double x = strtod(s, &e);
        if (e == s)
            break;
        v[n++] = x;
        s = e;
    }
    if (end)
        *end = s;
    return n;
}

/* The plan in the metrics file: each member's share and speed by name. */
static void plan_to_metrics(struct coord *k, long step, bool speeds)
{
    if (!k->mf)
        return;
    rt_metrics_begin(k->mf);
    rt_metrics_str(k->mf, "event", "plan");
    rt_metrics_int(k->mf, "generation", (long)k->ms.gen);
    rt_metrics_int(k->mf, "step", step);
    rt_metrics_map_begin(k->mf, "shares");
    for (int r = 0; r < k->ms.n; r++)
        rt_metrics_int(k->mf, coord_rank(k, r)->m.name, coord_rank(k, r)->plan_share);
    rt_metrics_map_end(k->mf);
    if (speeds) {
        rt_metrics_map_begin(k->mf, "images_per_s");
        for (int r = 0; r < k->ms.n; r++)
            rt_metrics_num(k->mf, coord_rank(k, r)->m.name, coord_rank(k, r)->plan_ips);
        rt_metrics_map_end(k->mf);
    }
    if (rt_metrics_end(k->mf) < 0)
        coord_note("cannot write the metrics file: %s", rt_error_detail());
}

/* Each rank's share (and speed) from one plan; the curve point. */
static void take_plan(struct coord *k, long step, const double *share, const double *ips,
                      bool sync)
{
    const char *names[RT_MAX_WORKERS];
    long sh[RT_MAX_WORKERS];
    int n = k->ms.n;
    for (int r = 0; r < n; r++) {
        struct coord_worker *w = coord_rank(k, r);
        w->plan_share = (long)share[r];
        if (ips)
            w->plan_ips = ips[r];
        w->plan_standby = sync && share[r] == 0;
        names[r] = w->m.name;
        sh[r] = (long)share[r];
    }
    k->srun.plans++;
    if (k->snap) {
        double epoch = k->srun.total > 0 ? k->srun.epoch - 1 + (double)k->srun.done /
                                                                  (double)k->srun.total
                                         : 0.0;
        rt_snap_plan(k->snap, step, epoch, names, sh, n);
    }
}

static void plan_event(struct coord *k, const char *text)
{
    const char *p = strstr(text, "[plan] ");
    coord_status_event(k, "plan", "%s", p ? p + 7 : text);
}

/* A line of rank 0 (already checked: printable); the plan lines only. */
void coord_plan_line(struct coord *k, const char *text)
{
    const char *p;
    double v[2 * RT_MAX_WORKERS];
    long step = 0;
    int n = k->ms.n, rank;
    if (strncmp(text, "ragtag: [plan] ", 15) != 0 || n <= 0)
        return;
    if ((p = strstr(text, "shares of batch ")) && sscanf(text + 15, "step %ld", &step) == 1 &&
        (p = strstr(p, " by rank: "))) {
        const char *rest;
        if (read_numbers(p + 10, v, n, &rest) != n || strncmp(rest, " at img/s", 9) != 0 ||
            read_numbers(rest + 9, v + n, n, NULL) != n)
            return;
        take_plan(k, step, v, v + n, true);
        plan_to_metrics(k, step, true);
        plan_event(k, text);
    } else if (!strncmp(text + 15, "gossip epoch ", 13) && (p = strstr(text, " by rank: "))) {
        const char *rest;
        if (read_numbers(p + 10, v, n, &rest) != n)
            return;
        bool speeds = strncmp(rest, " at img/s", 9) == 0 &&
                      read_numbers(rest + 9, v + n, n, NULL) == n;
        step = k->srun.step;
        take_plan(k, step, v, speeds ? v + n : NULL, false);
        plan_to_metrics(k, step, speeds);
        plan_event(k, text);
    } else if (sscanf(text + 15, "rank %d ", &rank) == 1 && rank >= 0 && rank < n &&
               strstr(text, "standby")) {
        coord_rank(k, rank)->plan_standby = strstr(text, " on standby ") != NULL;
        coord_status_event(k, "standby", "%s", text + 15);
    }
}

/* The first plan, which the cluster table shows (computed there from the
 * speeds measured at join, as the workers compute it). */
void coord_plan_first(struct coord *k, const long *share)
{
    double v[RT_MAX_WORKERS], ips[RT_MAX_WORKERS];
    if (k->c->mode == RT_MODE_GOSSIP)
        return; /* its plans count local batches of an epoch, not samples of a batch */
    for (int r = 0; r < k->ms.n; r++) {
        v[r] = (double)share[r];
        ips[r] = coord_rank(k, r)->ips;
    }
    take_plan(k, k->srun.step, v, ips, k->c->mode != RT_MODE_GOSSIP);
}
