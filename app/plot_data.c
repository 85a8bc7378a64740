/* plot_data.c — the curves of a --metrics file (JSON Lines, docs/training.md)
 * for `ragtag plot`: epoch lines (train/val/test loss and accuracy,
 * images/s), --log-every windows (loss, accuracy, images/s, at fractional
 * epochs) and the coordinator's "plan" events (each worker's share). Read
 * with json-c; lines that are not JSON objects are skipped and counted. */
#include "config.h"

#include "plot.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

const char *const plot_series_names[PLOT_SERIES] = {
    "train_loss", "val_loss", "test_loss", "loss", "train_acc", "val_acc", "test_acc", "acc",
    "images_per_s", "window_images_per_s",
};

static int add_point(struct plot_curve *c, double x, double y)
{
    if (!isfinite(x) || !isfinite(y))
        return RT_OK;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        double *p = realloc(c->xy, (size_t)cap * 2 * sizeof *p);
        if (!p)
            return rt_error(RT_ERR_NOMEM, "out of memory");
        c->xy = p;
        c->cap = cap;
    }
    c->xy[2 * c->n] = x;
    c->xy[2 * c->n + 1] = y;
    c->n++;
    return RT_OK;
}

static double get(json_object *o, const char *k)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v))
        return NAN;
    json_type t = json_object_get_type(v);
    return t == json_type_double || t == json_type_int ? json_object_get_double(v) : NAN;
}

static struct plot_curve *worker_curve(struct plot_file *f, const char *name)
{
    for (int i = 0; i < f->nworkers; i++)
        if (!strcmp(f->worker[i], name))
            return &f->share[i];
    if (f->nworkers == PLOT_WORKERS)
        return NULL;
    snprintf(f->worker[f->nworkers], sizeof f->worker[0], "%s", name);
    return &f->share[f->nworkers++];
}

static int read_plan(struct plot_file *f, json_object *o)
{
    json_object *sh;
    double step = get(o, "step");
    if (!json_object_object_get_ex(o, "shares", &sh) || !json_object_is_type(sh, json_type_object))
        return RT_OK;
    json_object_object_foreach(sh, name, v)
    {
        struct plot_curve *c = worker_curve(f, name);
        if (c)
            RT_TRY(add_point(c, step, json_object_get_double(v)));
    }
    return RT_OK;
}

/* One line: an epoch line (train_loss), a log window (loss) or a plan. */
static int read_line(struct plot_file *f, json_object *o)
{
    json_object *ev;
    if (json_object_object_get_ex(o, "event", &ev))
        return !strcmp(json_object_get_string(ev), "plan") ? read_plan(f, o) : RT_OK;
    double epoch = get(o, "epoch");
    bool is_epoch = !isnan(get(o, "train_loss"));
    for (int s = 0; s < PLOT_SERIES; s++) {
        const char *key = plot_series_names[s];
        bool window_series = !strcmp(key, "loss") || !strcmp(key, "acc") ||
                             !strcmp(key, "window_images_per_s");
        if (window_series == is_epoch)
            continue;
        if (!strcmp(key, "window_images_per_s"))
            key = "images_per_s";
        RT_TRY(add_point(&f->curve[s], epoch, get(o, key)));
    }
    return RT_OK;
}

int plot_file_read(const char *path, struct plot_file *f)
{
    memset(f, 0, sizeof f[0]);
    snprintf(f->path, sizeof f->path, "%s", path);
    FILE *in = fopen(path, "r");
    if (!in)
        return rt_error(RT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int rc = RT_OK;
    while (rc == RT_OK && getline(&line, &cap, in) > 0) {
        json_object *o = json_tokener_parse(line);
        if (!o || !json_object_is_type(o, json_type_object))
            f->skipped++;
        else
            rc = read_line(f, o);
        json_object_put(o);
    }
    free(line);
    fclose(in);
    return rc;
}

void plot_file_free(struct plot_file *f)
{
    for (int s = 0; s < PLOT_SERIES; s++)
        free(f->curve[s].xy);
    for (int i = 0; i < f->nworkers; i++)
        free(f->share[i].xy);
    memset(f, 0, sizeof *f);
}
