/* transfer.c — --init and --freeze (transfer.h, docs/transfer.md).
 *
 * --init reads a checkpoint of another model: a tensor is loaded when the
 * model has one of that name and shape, and every other one is named in
 * the log with the reason, so that a new classifier (another shape, or
 * another name) visibly keeps its fresh initialisation. */
#include "config.h"

#include "transfer.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "status.h"

#define OPT_PREFIX "optimizer." /* a checkpoint's optimiser state: never a model tensor */

/* A list of names for one log line, cut with "..." when long. */
struct names {
    char text[1536];
    int count;
};

static void names_add(struct names *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void names_add(struct names *l, const char *fmt, ...)
{
    size_t len = strlen(l->text);
    if (len + 8 < sizeof l->text) {
        char item[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(item, sizeof item, fmt, ap);
        va_end(ap);
        if (len + strlen(item) + 8 < sizeof l->text)
            snprintf(l->text + len, sizeof l->text - len, "%s%s", l->count ? ", " : "", item);
        else
            snprintf(l->text + len, sizeof l->text - len, "%s...", l->count ? ", " : "");
    }
    l->count++;
}

static void dims_text(char *buf, size_t n, int ndim, const int64_t *dims)
{
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, d ? ", " : "", dims[d]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
}

static bool same_shape(const struct rt_st_tensor *t, const struct rt_tensor_info *ti)
{
    if (t->ndim != ti->ndim)
        return false;
    for (int d = 0; d < ti->ndim; d++)
        if (t->dims[d] != ti->dims[d])
            return false;
    return true;
}

/* The model's two buffers on the host, to patch and upload whole. */
struct host_model {
    float *p, *s;
    size_t np, ns;
};

static int host_pull(rt_model *m, struct host_model *h)
{
    h->np = rt_model_param_count(m);
    h->ns = rt_model_state_count(m);
    h->p = malloc((h->np ? h->np : 1) * sizeof(float));
    h->s = malloc((h->ns ? h->ns : 1) * sizeof(float));
    if (!h->p || !h->s)
        return rt_error(RT_ERR_NOMEM, "out of memory for a copy of the model");
    rt_dev *d = rt_model_dev(m);
    RT_TRY(rt_download(d, h->p, rt_model_params(m), h->np * sizeof(float)));
    return h->ns ? rt_download(d, h->s, rt_model_state(m), h->ns * sizeof(float)) : RT_OK;
}

static int host_push(rt_model *m, const struct host_model *h)
{
    rt_dev *d = rt_model_dev(m);
    RT_TRY(rt_upload(d, rt_model_params(m), h->p, h->np * sizeof(float)));
    return h->ns ? rt_upload(d, rt_model_state(m), h->s, h->ns * sizeof(float)) : RT_OK;
}

/* Each model tensor: loaded, or skipped with the reason. */
static int match_tensors(const rt_st_file *f, rt_model *m, struct host_model *h,
                         struct names *loaded, struct names *skipped, size_t *values)
{
    for (int i = 0; i < rt_model_tensor_count(m); i++) {
        struct rt_tensor_info ti;
        RT_TRY(rt_model_tensor_info(m, i, &ti));
        struct rt_st_tensor t;
        if (rt_st_find(f, ti.name, &t) < 0) {
            rt_error_clear();
            names_add(skipped, "%s (not in the file)", ti.name);
            continue;
        }
        if (!same_shape(&t, &ti)) {
            char got[96], want[96];
            int64_t d64[4];
            for (int d = 0; d < ti.ndim; d++)
                d64[d] = ti.dims[d];
            dims_text(got, sizeof got, t.ndim, t.dims);
            dims_text(want, sizeof want, ti.ndim, d64);
            names_add(skipped, "%s (shape %s in the file, %s here)", ti.name, got, want);
            continue;
        }
        memcpy((ti.state ? h->s : h->p) + ti.offset, t.data, ti.count * sizeof(float));
        names_add(loaded, "%s", ti.name);
        *values += ti.count;
    }
    return RT_OK;
}

/* The file's tensors that no model tensor is called (optimiser state aside). */
static int unused_tensors(const rt_st_file *f, const rt_model *m, struct names *unused)
{
    for (int j = 0; j < rt_st_count(f); j++) {
        struct rt_st_tensor t;
        RT_TRY(rt_st_get(f, j, &t));
        if (strncmp(t.name, OPT_PREFIX, strlen(OPT_PREFIX)) == 0)
            continue;
        bool known = false;
        for (int i = 0; i < rt_model_tensor_count(m) && !known; i++) {
            struct rt_tensor_info ti;
            RT_TRY(rt_model_tensor_info(m, i, &ti));
            known = strcmp(ti.name, t.name) == 0;
        }
        if (!known)
            names_add(unused, "%s", t.name);
    }
    return RT_OK;
}

static int say(rt_note_fn note, void *arg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(rt_note_fn note, void *arg, const char *fmt, ...)
{
    if (!note)
        return RT_OK;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return note(arg, line);
}

static int report(const char *path, const struct names *loaded, size_t values,
                  const struct names *skipped, const struct names *unused, rt_note_fn note,
                  void *arg)
{
    RT_TRY(say(note, arg, "--init %s: loaded %d tensor%s (%zu values): %s", path, loaded->count,
               loaded->count == 1 ? "" : "s", values, loaded->text));
    if (skipped->count)
        RT_TRY(say(note, arg, "--init %s: skipped %d tensor%s of the model, which keep%s "
                              "their initialisation: %s", path, skipped->count,
                   skipped->count == 1 ? "" : "s", skipped->count == 1 ? "s" : "",
                   skipped->text));
    if (unused->count)
        RT_TRY(say(note, arg, "--init %s: %d tensor%s of the file not in the model: %s", path,
                   unused->count, unused->count == 1 ? "" : "s", unused->text));
    return RT_OK;
}

int rt_transfer_init(const char *path, rt_model *m, rt_note_fn note, void *arg)
{
    RT_ASSERT(path && m);
    rt_st_file *f = NULL;
    int rc = rt_safetensors_read(path, &f);
    if (rc < 0)
        return rt_error_wrap(rc, "--init");
    struct host_model h = {0};
    struct names *l = calloc(3, sizeof *l); /* loaded, skipped, unused */
    size_t values = 0;
    if (!l) {
        rc = rt_error(RT_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = host_pull(m, &h)) < 0 || (rc = match_tensors(f, m, &h, &l[0], &l[1], &values)) < 0 ||
        (rc = unused_tensors(f, m, &l[2])) < 0)
        goto out;
    if (l[0].count == 0) {
        rc = rt_error(RT_ERR_SHAPE, "--init %s: none of its tensors has the name and shape of "
                                    "one of the model's (skipped: %s)", path, l[1].text);
        goto out;
    }
    if ((rc = host_push(m, &h)) < 0)
        goto out;
    rc = report(path, &l[0], values, &l[1], &l[2], note, arg);
out:
    free(l);
    free(h.p);
    free(h.s);
    rt_st_file_destroy(&f);
    return rc;
}

int rt_transfer_prepare(rt_model *m, const struct rt_train_config *c, rt_note_fn note,
                        void *arg)
{
    if (c->freeze[0])
        RT_TRY(rt_model_freeze(m, c->freeze, "--freeze"));
    size_t np = rt_model_param_count(m), nt = rt_model_trainable_count(m);
    if (nt < np) {
        char frozen[1024];
        rt_model_frozen_text(m, frozen, sizeof frozen);
        RT_TRY(say(note, arg, "frozen: %s; %zu of %zu parameters train (from parameter %zu "
                              "on), the optimiser holds state for those only", frozen, nt, np,
                   rt_model_trainable_from(m)));
    }
    if (c->init_path[0])
        RT_TRY(rt_transfer_init(c->init_path, m, note, arg));
    return RT_OK;
}

rt_optim *rt_optim_new_trainable(rt_dev *d, const struct rt_optim_config *c, const rt_model *m)
{
    int cap = rt_model_layer_count(m);
    struct rt_span *spans = malloc(((size_t)cap + 1) * sizeof *spans);
    if (!spans) {
        rt_error(RT_ERR_NOMEM, "out of memory for the optimizer");
        return NULL;
    }
    int n = rt_model_trainable_spans(m, spans, cap);
    rt_optim *o = rt_optim_new_spans(d, c, spans, n);
    free(spans);
    return o;
}
