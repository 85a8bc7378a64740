/* checkpoint.c — a training checkpoint as one safetensors file.
 *
 * Tensors: every model tensor under its own name (params and batch-norm
 * state alike, so numpy / PyTorch see a plain state dict), then the
 * optimiser state as "optimizer.<state name>", each as long as the
 * trainable parameters: the whole parameter buffer, or without the frozen
 * layers' (--freeze) when some are, their spans back to back. Metadata (strings, as the format requires):
 *   format          "ragtag-checkpoint-1"
 *   epoch, step, seed, best_epoch, bad_epochs   decimal integers
 *   best_metric     %.17g, so that the double round-trips exactly
 *   optimizer       "sgd" / "adam" / "adamw" / "nadam", or "none"
 *   optimizer_steps updates the optimiser has made (Adam's bias correction)
 *   param_count, state_count   sizes of the model's two buffers
 *
 * Loading validates the whole file against the model (and optimiser) before
 * it changes anything, so a mismatch leaves the running model untouched. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "status.h"

#define CKPT_FORMAT "ragtag-checkpoint-1"
#define OPT_PREFIX "optimizer."

/* The model's tensor table must lie inside its buffers: anything else is a
 * bug in the model code, not bad input. */
static void check_info(const rt_model *m, const struct rt_tensor_info *ti)
{
    size_t count = 1;
    for (int d = 0; d < ti->ndim; d++)
        count *= (size_t)ti->dims[d];
    size_t limit = ti->state ? rt_model_state_count(m) : rt_model_param_count(m);
    RT_ASSERT(ti->ndim >= 0 && ti->ndim <= 4 && count == ti->count);
    RT_ASSERT(ti->offset <= limit && ti->count <= limit - ti->offset);
}

static void shape_str(char *buf, size_t size, int ndim, const int64_t *dims)
{
    size_t len = 0;
    len += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, d ? ", " : "", dims[d]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
}

/* Downloads one whole device buffer to the host (NULL, no error, when empty). */
static int download_all(rt_dev *d, rt_view v, size_t n, float **out)
{
    *out = NULL;
    if (n == 0)
        return RT_OK;
    *out = malloc(n * sizeof(float));
    if (!*out)
        return rt_error(RT_ERR_NOMEM, "out of memory for %zu floats", n);
    int rc = rt_download(d, *out, v, n * sizeof(float));
    if (rc < 0) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

int rt_checkpoint_save(const char *path, const rt_model *m, const rt_optim *o,
                       const struct rt_train_pos *pos)
{
    RT_ASSERT(path && m);
    struct rt_train_pos zero = {0};
    if (!pos)
        pos = &zero;
    rt_dev *d = rt_model_dev(m);
    size_t pc = rt_model_param_count(m), sc = rt_model_state_count(m);
    int nmt = rt_model_tensor_count(m);
    int nos = o ? rt_optim_state_count(o) : 0;
    size_t oc = o ? rt_optim_size(o) : 0; /* the trainable parameters (frozen: fewer) */
    if (oc > pc)
        return rt_error(RT_ERR_ARG,
                        "%s: the optimizer holds %zu values but the model has %zu parameters",
                        path, oc, pc);

    int rc = RT_OK;
    float *params = NULL, *state = NULL, *ostate[2] = {NULL, NULL};
    struct rt_tensor_info *infos = calloc((size_t)nmt + 1, sizeof *infos);
    struct rt_st_tensor *t = calloc((size_t)(nmt + nos) + 1, sizeof *t);
    char onames[2][96];
    if (!infos || !t) {
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
        goto free_tables;
    }

    rc = download_all(d, rt_model_params(m), pc, &params);
    if (rc < 0)
        goto free_host;
    rc = download_all(d, rt_model_state(m), sc, &state);
    if (rc < 0)
        goto free_host;
    for (int i = 0; i < nos; i++) {
        /* the optimiser may live on another device than the model (sync
         * mode updates on the host) */
        rt_view v = rt_optim_state(o, i);
        rc = download_all(v.buf->dev, v, oc, &ostate[i]);
        if (rc < 0)
            goto free_host;
    }

    for (int i = 0; i < nmt; i++) {
        rc = rt_model_tensor_info(m, i, &infos[i]);
        if (rc < 0)
            goto free_host;
        check_info(m, &infos[i]);
        t[i].name = infos[i].name;
        t[i].ndim = infos[i].ndim;
        for (int k = 0; k < infos[i].ndim; k++)
            t[i].dims[k] = infos[i].dims[k];
        t[i].data = (infos[i].state ? state : params) + infos[i].offset;
    }
    for (int i = 0; i < nos; i++) {
        struct rt_st_tensor *e = &t[nmt + i];
        snprintf(onames[i], sizeof onames[i], OPT_PREFIX "%s", rt_optim_state_name(o, i));
        e->name = onames[i];
        e->ndim = 1;
        e->dims[0] = (int64_t)oc;
        e->data = ostate[i];
    }

    char num[9][32];
    snprintf(num[0], sizeof num[0], "%ld", pos->epoch);
    snprintf(num[1], sizeof num[1], "%ld", pos->step);
    snprintf(num[2], sizeof num[2], "%" PRIu64, pos->seed);
    snprintf(num[3], sizeof num[3], "%.17g", pos->best_metric);
    snprintf(num[4], sizeof num[4], "%ld", pos->best_epoch);
    snprintf(num[5], sizeof num[5], "%ld", pos->bad_epochs);
    snprintf(num[6], sizeof num[6], "%ld", o ? rt_optim_steps(o) : 0L);
    snprintf(num[7], sizeof num[7], "%zu", pc);
    snprintf(num[8], sizeof num[8], "%zu", sc);
    const struct rt_st_meta meta[] = {
        {"format", CKPT_FORMAT},
        {"epoch", num[0]},
        {"step", num[1]},
        {"seed", num[2]},
        {"best_metric", num[3]},
        {"best_epoch", num[4]},
        {"bad_epochs", num[5]},
        {"optimizer", o ? rt_optim_kind_name(rt_optim_config(o)->kind) : "none"},
        {"optimizer_steps", num[6]},
        {"param_count", num[7]},
        {"state_count", num[8]},
    };
    rc = rt_safetensors_write(path, t, nmt + nos, meta, (int)(sizeof meta / sizeof meta[0]));

free_host:
    free(ostate[1]);
    free(ostate[0]);
    free(state);
    free(params);
free_tables:
    free(t);
    free(infos);
    return rc;
}

/* ---- loading ------------------------------------------------------------------ */

static int meta_str(const rt_st_file *f, const char *path, const char *key, const char **out)
{
    *out = rt_st_meta_get(f, key);
    if (!*out)
        return rt_error(RT_ERR_FORMAT, "%s: checkpoint metadata lacks \"%s\"", path, key);
    return RT_OK;
}

static int meta_long(const rt_st_file *f, const char *path, const char *key, long *out)
{
    const char *v;
    RT_TRY(meta_str(f, path, key, &v));
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 0)
        return rt_error(RT_ERR_FORMAT, "%s: checkpoint metadata \"%s\" = '%s' is not a "
                        "non-negative integer", path, key, v);
    *out = x;
    return RT_OK;
}

static int meta_u64(const rt_st_file *f, const char *path, const char *key, uint64_t *out)
{
    const char *v;
    RT_TRY(meta_str(f, path, key, &v));
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    /* strtoull accepts "-1" as a huge number: insist on digits only */
    if (errno || !isdigit((unsigned char)v[0]) || *end)
        return rt_error(RT_ERR_FORMAT, "%s: checkpoint metadata \"%s\" = '%s' is not an "
                        "unsigned integer", path, key, v);
    *out = (uint64_t)x;
    return RT_OK;
}

static int meta_double(const rt_st_file *f, const char *path, const char *key, double *out)
{
    const char *v;
    RT_TRY(meta_str(f, path, key, &v));
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || (errno && errno != ERANGE))
        return rt_error(RT_ERR_FORMAT, "%s: checkpoint metadata \"%s\" = '%s' is not a number",
                        path, key, v);
    *out = x;
    return RT_OK;
}

static int read_pos(const rt_st_file *f, const char *path, struct rt_train_pos *p, long *osteps)
{
    RT_TRY(meta_long(f, path, "epoch", &p->epoch));
    RT_TRY(meta_long(f, path, "step", &p->step));
    RT_TRY(meta_u64(f, path, "seed", &p->seed));
    RT_TRY(meta_double(f, path, "best_metric", &p->best_metric));
    RT_TRY(meta_long(f, path, "best_epoch", &p->best_epoch));
    RT_TRY(meta_long(f, path, "bad_epochs", &p->bad_epochs));
    RT_TRY(meta_long(f, path, "optimizer_steps", osteps));
    return RT_OK;
}

static bool same_shape(const struct rt_st_tensor *t, const struct rt_tensor_info *ti)
{
    if (t->ndim != ti->ndim)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] != ti->dims[d])
            return false;
    return true;
}

/* Every model tensor is in the file with its shape, and the file holds no
 * model tensor this model lacks: a checkpoint of another architecture is
 * refused with the first tensor that differs. */
static int check_model(const rt_st_file *f, const char *path, const rt_model *m,
                       struct rt_tensor_info *infos, int nmt)
{
    for (int i = 0; i < nmt; i++) {
        RT_TRY(rt_model_tensor_info(m, i, &infos[i]));
        check_info(m, &infos[i]);
        struct rt_st_tensor t;
        if (rt_st_find(f, infos[i].name, &t) < 0)
            return rt_error(RT_ERR_SHAPE, "%s: the model's tensor '%s' is not in the checkpoint",
                            path, infos[i].name);
        if (!same_shape(&t, &infos[i])) {
            char want[96], got[96];
            int64_t dims[4];
            for (int d = 0; d < infos[i].ndim; d++)
                dims[d] = infos[i].dims[d];
            shape_str(want, sizeof want, infos[i].ndim, dims);
            shape_str(got, sizeof got, t.ndim, t.dims);
            return rt_error(RT_ERR_SHAPE,
                            "%s: tensor '%s' has shape %s in the checkpoint but %s in the model",
                            path, infos[i].name, got, want);
        }
    }
    int nt = rt_st_count(f);
    for (int j = 0; j < nt; j++) {
        struct rt_st_tensor t;
        RT_TRY(rt_st_get(f, j, &t));
        if (strncmp(t.name, OPT_PREFIX, strlen(OPT_PREFIX)) == 0)
            continue;
        bool known = false;
        for (int i = 0; i < nmt && !known; i++)
            known = strcmp(t.name, infos[i].name) == 0;
        if (!known)
            return rt_error(RT_ERR_SHAPE, "%s: tensor '%s' of the checkpoint is not in the model",
                            path, t.name);
    }
    return RT_OK;
}

/* The optimiser must be of the kind that was saved and each of its state
 * buffers must be in the file, full length. A state the file has but this
 * optimiser does not use (momentum switched off on resume) is ignored. */
static int check_optim(const rt_st_file *f, const char *path, const rt_optim *o,
                       struct rt_st_tensor *ot)
{
    const char *kind;
    RT_TRY(meta_str(f, path, "optimizer", &kind));
    const char *want = rt_optim_kind_name(rt_optim_config(o)->kind);
    if (strcmp(kind, "none") == 0)
        return rt_error(RT_ERR_CONFIG,
                        "%s: the checkpoint holds no optimizer state (saved without one); "
                        "load the weights only", path);
    if (strcmp(kind, want) != 0)
        return rt_error(RT_ERR_CONFIG,
                        "%s: the checkpoint's optimizer is %s but this run uses %s", path, kind,
                        want);
    for (int i = 0; i < rt_optim_state_count(o); i++) {
        char name[96];
        snprintf(name, sizeof name, OPT_PREFIX "%s", rt_optim_state_name(o, i));
        if (rt_st_find(f, name, &ot[i]) < 0)
            return rt_error(RT_ERR_FORMAT, "%s: optimizer state '%s' is not in the checkpoint",
                            path, name);
        if (ot[i].ndim != 1 || ot[i].dims[0] != (int64_t)rt_optim_size(o)) {
            char got[96];
            shape_str(got, sizeof got, ot[i].ndim, ot[i].dims);
            return rt_error(RT_ERR_SHAPE,
                            "%s: optimizer state '%s' has shape %s in the checkpoint but "
                            "[%zu] here (the trainable parameters: resume with the same "
                            "--freeze)", path, name, got, rt_optim_size(o));
        }
    }
    return RT_OK;
}

/* Assembles one of the model's buffers on the host and uploads it whole: one
 * transfer rather than one per tensor. Starts from the current contents so
 * that any gap between tensors keeps its value. */
static int load_buffer(const rt_st_file *f, rt_model *m, const struct rt_tensor_info *infos,
                       int nmt, bool state)
{
    rt_dev *d = rt_model_dev(m);
    rt_view v = state ? rt_model_state(m) : rt_model_params(m);
    size_t n = state ? rt_model_state_count(m) : rt_model_param_count(m);
    float *host = NULL;
    RT_TRY(download_all(d, v, n, &host));
    for (int i = 0; i < nmt; i++) {
        if (infos[i].state != state)
            continue;
        struct rt_st_tensor t;
        RT_ASSERT(rt_st_find(f, infos[i].name, &t) == RT_OK); /* checked before */
        memcpy(host + infos[i].offset, t.data, infos[i].count * sizeof(float));
    }
    int rc = n ? rt_upload(d, v, host, n * sizeof(float)) : RT_OK;
    free(host);
    return rc;
}

int rt_checkpoint_load(const char *path, rt_model *m, rt_optim *o, struct rt_train_pos *pos)
{
    RT_ASSERT(path && m);
    rt_st_file *f = NULL;
    RT_TRY(rt_safetensors_read(path, &f));

    int rc;
    int nmt = rt_model_tensor_count(m);
    struct rt_tensor_info *infos = calloc((size_t)nmt + 1, sizeof *infos);
    if (!infos) {
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
        goto destroy_file;
    }

    const char *format = rt_st_meta_get(f, "format");
    if (!format || strcmp(format, CKPT_FORMAT) != 0) {
        rc = rt_error(RT_ERR_FORMAT,
                      "%s: not a ragtag checkpoint (metadata \"format\" is %s%s%s, expected '"
                      CKPT_FORMAT "')", path, format ? "'" : "", format ? format : "missing",
                      format ? "'" : "");
        goto free_infos;
    }
    struct rt_train_pos p;
    long osteps;
    rc = read_pos(f, path, &p, &osteps);
    if (rc < 0)
        goto free_infos;
    rc = check_model(f, path, m, infos, nmt);
    if (rc < 0)
        goto free_infos;
    struct rt_st_tensor ot[2];
    if (o) {
        rc = check_optim(f, path, o, ot);
        if (rc < 0)
            goto free_infos;
    }

    /* Everything checked: now overwrite. */
    rc = load_buffer(f, m, infos, nmt, false);
    if (rc < 0)
        goto free_infos;
    rc = load_buffer(f, m, infos, nmt, true);
    if (rc < 0)
        goto free_infos;
    if (o) {
        size_t n = rt_optim_size(o);
        for (int i = 0; i < rt_optim_state_count(o) && n > 0; i++) {
            rt_view v = rt_optim_state(o, i);
            rc = rt_upload(v.buf->dev, v, ot[i].data, n * sizeof(float));
            if (rc < 0)
                goto free_infos;
        }
        rt_optim_set_steps(o, osteps);
    }
    if (pos)
        *pos = p;
    rc = RT_OK;

free_infos:
    free(infos);
destroy_file:
    rt_st_file_destroy(&f);
    return rc;
}
