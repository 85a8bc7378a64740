/* report_local.c — a run in one process reports to the terminal and to the
 * --metrics file. */
#include "report_local.h"

#include <stdio.h>
#include <stdlib.h>

#include "metrics.h"
#include "status.h"

struct rt_local_report {
    rt_progress prog;
    rt_metrics *mf; /* NULL: no --metrics */
};

rt_local_report *rt_local_report_new(enum rt_progress_mode mode, const char *metrics_path)
{
    rt_local_report *r = calloc(1, sizeof *r);
    if (!r) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    rt_progress_init(&r->prog, stderr, mode);
    if (metrics_path && metrics_path[0] && !(r->mf = rt_metrics_open(metrics_path))) {
        free(r);
        return NULL;
    }
    return r;
}

void rt_local_report_destroy(rt_local_report **rp)
{
    if (!*rp)
        return;
    rt_metrics_close(&(*rp)->mf);
    free(*rp);
    *rp = NULL;
}

static void local_progress(void *ctx, int epoch, int epochs, long done, long total, double loss,
                           double acc, double img_s, double eta_s)
{
    rt_local_report *r = ctx;
    rt_progress_step(&r->prog, epoch, epochs, done, total, loss, acc, img_s, eta_s);
}

static int local_line(void *ctx, const char *text)
{
    rt_local_report *r = ctx;
    rt_progress_epoch(&r->prog, text);
    return RT_OK;
}

static int local_metrics(void *ctx, const struct rt_train_field *f, int n)
{
    rt_local_report *r = ctx;
    if (!r->mf)
        return RT_OK;
    rt_metrics_begin(r->mf);
    for (int i = 0; i < n; i++) {
        if (f[i].kind == 'i')
            rt_metrics_int(r->mf, f[i].key, f[i].integer);
        else
            rt_metrics_num(r->mf, f[i].key, f[i].num);
    }
    return rt_metrics_end(r->mf);
}

static const struct rt_reporter_ops local_ops = {
    .progress = local_progress,
    .line = local_line,
    .metrics = local_metrics,
};

rt_reporter rt_local_report_reporter(rt_local_report *r)
{
    return (rt_reporter){.ops = &local_ops, .ctx = r};
}
