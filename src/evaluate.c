/* evaluate.c — evaluation passes, and `ragtag eval` (rt_eval_run). */
#include "config.h"

#include "evaluate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "status.h"
#include "train.h"

#define EVALUATOR_TAG 0x4556414cu /* "EVAL" */

struct rt_evaluator {
    uint32_t tag;
    rt_model *m;
    rt_dev *dev;
    int batch;
    rt_buf *x, *y;
    float *probs;
    FILE *logits; /* --logits: one CSV line per image, or NULL */
    void (*tick)(void *arg); /* after each batch (liveness) */
    void *tick_arg;
};

void rt_evaluator_set_tick(rt_evaluator *ev, void (*tick)(void *arg), void *arg)
{
    ev->tick = tick;
    ev->tick_arg = arg;
}

void rt_evaluator_set_logits(rt_evaluator *ev, FILE *f) { ev->logits = f; }

/* The logits of the n images just forwarded, as CSV lines. */
static int write_logits(rt_evaluator *ev, int n)
{
    int classes = rt_model_classes(ev->m);
    RT_TRY(rt_model_logits(ev->m, ev->probs, n));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < classes; k++)
            fprintf(ev->logits, "%.9g%c", (double)ev->probs[(size_t)i * classes + k],
                    k + 1 < classes ? ',' : '\n');
    return ferror(ev->logits) ? rt_error(RT_ERR_IO, "writing the logits failed") : RT_OK;
}

rt_evaluator *rt_evaluator_new(rt_model *m, rt_dev *dev, int batch, const rt_dataset *shape_of)
{
    rt_evaluator *ev = calloc(1, sizeof *ev);
    if (!ev) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    ev->tag = EVALUATOR_TAG;
    ev->m = m;
    ev->dev = dev;
    ev->batch = batch;
    size_t chw = (size_t)shape_of->c * shape_of->h * shape_of->w;
    ev->x = rt_buf_new(dev, (size_t)batch * chw * sizeof(float));
    ev->y = rt_buf_new(dev, (size_t)batch * sizeof(int32_t));
    ev->probs = malloc((size_t)batch * rt_model_classes(m) * sizeof(float));
    if (!ev->x || !ev->y || !ev->probs) {
        rt_evaluator_destroy(&ev);
        rt_error(RT_ERR_NOMEM, "cannot allocate batch buffers of %d images", batch);
    }
    return ev;
}

void rt_evaluator_destroy(rt_evaluator **evp)
{
    rt_evaluator *ev = *evp;
    if (!ev)
        return;
    RT_ASSERT(ev->tag == EVALUATOR_TAG);
    rt_buf_destroy(&ev->x);
    rt_buf_destroy(&ev->y);
    free(ev->probs);
    ev->tag = 0;
    free(ev);
    *evp = NULL;
}

/* The most probable class of each of n rows into the confusion matrix. */
static void count_confusion(const rt_evaluator *ev, const int32_t *y, int n, long *confusion)
{
    int classes = rt_model_classes(ev->m);
    for (int i = 0; i < n; i++) {
        const float *p = ev->probs + (size_t)i * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (p[k] > p[best])
                best = k;
        confusion[(size_t)y[i] * classes + best]++;
    }
}

int rt_evaluator_sums(rt_evaluator *ev, const rt_dataset *ds, long lo, long hi, double *sums,
                      long *confusion)
{
    RT_ASSERT(ev && ev->tag == EVALUATOR_TAG && 0 <= lo && lo <= hi && hi <= ds->n);
    size_t chw = (size_t)ds->c * ds->h * ds->w;
    rt_dataset part;
    rt_dataset_slice(ds, lo, hi, &part);
    sums[0] = sums[1] = sums[2] = 0.0;
    if (part.n == 0)
        return RT_OK;
    rt_loader *l = rt_loader_new(&part, ev->batch, false, 0);
    if (!l)
        return rt_error_wrap(RT_ERR_NOMEM, "evaluating on %s", ds->name);
    int rc = rt_loader_start(l, 0, 0);
    double loss_sum = 0.0;
    long correct = 0, seen = 0;
    const float *x;
    const int32_t *y;
    int n;
    while (rc >= 0 && (rc = rt_loader_next(l, &x, &y, &n)) > 0) {
        rc = rt_upload(ev->dev, rt_buf_view(ev->x), x, (size_t)n * chw * sizeof(float));
        if (rc >= 0)
            rc = rt_upload(ev->dev, rt_buf_view(ev->y), y, (size_t)n * sizeof(int32_t));
        if (rc >= 0)
            rc = rt_model_forward(ev->m, rt_buf_view(ev->x), n, false, 0);
        if (ev->tick)
            ev->tick(ev->tick_arg);
        if (rc >= 0 && ev->logits)
            rc = write_logits(ev, n);
        if (rc >= 0)
            rc = rt_model_loss_host(ev->m, rt_buf_view(ev->y), y, n, &loss_sum, &correct,
                                    confusion ? ev->probs : NULL);
        if (rc >= 0 && confusion)
            count_confusion(ev, y, n, confusion);
        seen += n;
    }
    rt_loader_destroy(&l);
    if (rc < 0)
        return rc;
    sums[0] = loss_sum;
    sums[1] = (double)correct;
    sums[2] = (double)seen;
    return RT_OK;
}

void rt_evaluator_metrics(const double *sums, double *loss, double *acc)
{
    *loss = sums[2] > 0 ? sums[0] / sums[2] : NAN;
    *acc = sums[2] > 0 ? sums[1] / sums[2] : NAN;
}

int rt_model_check_data(const rt_model *m, const rt_dataset *ds, const char *model_path)
{
    struct rt_shape s = rt_model_input_shape(m);
    if (s.c != ds->c || s.h != ds->h || s.w != ds->w)
        return rt_error(RT_ERR_SHAPE,
                        "%s takes %dx%dx%d inputs (WxHxC) but data set %s has %dx%dx%d images",
                        model_path, s.w, s.h, s.c, ds->name, ds->w, ds->h, ds->c);
    if (rt_model_classes(m) < ds->classes)
        return rt_error(RT_ERR_SHAPE, "%s has %d classes but data set %s has labels up to %d",
                        model_path, rt_model_classes(m), ds->name, ds->classes - 1);
    return RT_OK;
}

int rt_eval_run(const char *model_path, const char *weights_path, const char *data_spec,
                const char *backend, int device, int threads, int batch, long limit,
                const char *classes, const char *logits_path, struct rt_eval_result *res)
{
    FILE *logits = NULL;
    struct rt_data data = {0};
    rt_dev *dev = NULL;
    rt_model *m = NULL;
    rt_evaluator *ev = NULL;
    int rc;
    memset(res, 0, sizeof *res);

    rc = rt_data_open_classes(data_spec, classes, 0.0f, limit, 1, &data);
    if (rc < 0)
        goto out;
    const rt_dataset *set = data.test ? data.test : data.train;
    snprintf(res->set_name, sizeof res->set_name, "%s", data.test ? "test" : "train");
    if (!(dev = rt_dev_open(backend, device, threads))) {
        rc = RT_ERR_DEVICE;
        goto out;
    }
    if (!(m = rt_model_load(model_path, dev, batch))) {
        rc = RT_ERR_CONFIG;
        goto out;
    }
    if ((rc = rt_model_check_data(m, set, model_path)) < 0 ||
        (rc = rt_checkpoint_load(weights_path, m, NULL, NULL)) < 0)
        goto out;
    if (!(ev = rt_evaluator_new(m, dev, batch, set))) {
        rc = RT_ERR_NOMEM;
        goto out;
    }
    if (logits_path && !(logits = fopen(logits_path, "w"))) {
        rc = rt_error(RT_ERR_IO, "cannot write logits file %s: %s", logits_path, strerror(errno));
        goto out;
    }
    rt_evaluator_set_logits(ev, logits);
    res->classes = rt_model_classes(m);
    res->confusion = calloc((size_t)res->classes * res->classes, sizeof(long));
    if (!res->confusion) {
        rc = rt_error(RT_ERR_NOMEM, "no memory for the confusion matrix");
        goto out;
    }
    double sums[3];
    if ((rc = rt_evaluator_sums(ev, set, 0, set->n, sums, res->confusion)) < 0)
        goto out;
    rt_evaluator_metrics(sums, &res->loss, &res->acc);
    res->n = set->n;
out:
    if (logits && fclose(logits) != 0 && rc >= 0)
        rc = rt_error(RT_ERR_IO, "writing logits file %s: %s", logits_path, strerror(errno));
    rt_evaluator_destroy(&ev);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    rt_data_close(&data);
    return rc;
}
