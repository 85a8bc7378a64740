/* caffe_import.c — `ragtag import net.prototxt [--weights net.caffemodel]`:
 * the model file from the translation (caffe_net.c), checked by loading it
 * like any model file, then every tensor filled from its Caffe blobs and
 * saved as a ragtag checkpoint.
 *
 * Caffe's conventions, and ragtag's equivalents:
 *  Convolution  weight (num_output, channels, kh, kw) = convN.weight as is
 *  InnerProduct weight (out, in) = denseN.weight; (in, out) with transpose
 *               is transposed. Both flatten a C x H x W input in C, H, W order.
 *  BatchNorm    blobs mean, var, scale factor s: the running statistics are
 *               mean / s and var / s (0 when s is 0), as Caffe computes them
 *  Scale        (after BatchNorm) gamma, beta = bnN.weight, bnN.bias; without
 *               a Scale layer gamma is 1 and beta 0
 *  bias_term: false  a zero bias (the same function). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "caffe-impl.h"
#include "caffe_import.h"
#include "checkpoint.h"
#include "status.h"

struct fill {
    const char *path; /* the .caffemodel */
    const Caffe__NetParameter *w;
    struct caffe_model *hm;
};

static Caffe__BlobProto **layer_blobs(const struct fill *f, const char *layer, size_t need,
                                      const char *what)
{
    size_t nb;
    Caffe__BlobProto **b = caffe_weights_blobs(f->w, layer, &nb);
    if (nb == CAFFE_NO_LAYER)
        rt_error(RT_ERR_FORMAT, "%s: has no layer '%s' (the prototxt's layer with %s)", f->path,
                 layer, what);
    else if (nb < need)
        rt_error(RT_ERR_FORMAT, "%s: layer '%s' has %zu blobs; the prototxt makes it hold %zu "
                 "(%s)", f->path, layer, nb, need, what);
    return nb == CAFFE_NO_LAYER || nb < need ? NULL : b;
}

static int fill_weight(const struct fill *f, const struct caffe_map *mp, Caffe__BlobProto **b)
{
    const struct rt_tensor_info *ti, *bi;
    float *w = caffe_model_tensor(f->hm, mp->tensor, "weight", &ti);
    float *bias = caffe_model_tensor(f->hm, mp->tensor, "bias", &bi);
    RT_ASSERT(w && bias);
    if (mp->transpose) {
        int out = ti->dims[0], in = ti->dims[1], dims[2] = {in, out};
        float *tmp = malloc((size_t)in * (size_t)out * sizeof *tmp + 1);
        if (!tmp)
            return rt_error(RT_ERR_NOMEM, "%s: out of memory", f->path);
        int rc = caffe_blob_copy(f->path, mp->layer, 0, b[0], 2, dims, tmp);
        for (int i = 0; rc == RT_OK && i < in; i++)
            for (int o = 0; o < out; o++)
                w[(size_t)o * in + i] = tmp[(size_t)i * out + o];
        free(tmp);
        RT_TRY(rc);
    } else {
        RT_TRY(caffe_blob_copy(f->path, mp->layer, 0, b[0], ti->ndim, ti->dims, w));
    }
    if (mp->bias)
        return caffe_blob_copy(f->path, mp->layer, 1, b[1], bi->ndim, bi->dims, bias);
    memset(bias, 0, bi->count * sizeof *bias);
    return RT_OK;
}

static int fill_bn(const struct fill *f, const struct caffe_map *mp)
{
    Caffe__BlobProto **b = layer_blobs(f, mp->layer, 3, "mean, variance and scale factor");
    if (!b)
        return RT_ERR_FORMAT;
    const struct rt_tensor_info *ti;
    float *mean = caffe_model_tensor(f->hm, mp->tensor, "running_mean", &ti);
    float *var = caffe_model_tensor(f->hm, mp->tensor, "running_var", &ti);
    float *gamma = caffe_model_tensor(f->hm, mp->tensor, "weight", &ti);
    float *beta = caffe_model_tensor(f->hm, mp->tensor, "bias", &ti);
    RT_ASSERT(mean && var && gamma && beta);
    int one = 1;
    float s;
    RT_TRY(caffe_blob_copy(f->path, mp->layer, 0, b[0], ti->ndim, ti->dims, mean));
    RT_TRY(caffe_blob_copy(f->path, mp->layer, 1, b[1], ti->ndim, ti->dims, var));
    RT_TRY(caffe_blob_copy(f->path, mp->layer, 2, b[2], 1, &one, &s));
    float k = s == 0.0f ? 0.0f : 1.0f / s;
    for (size_t i = 0; i < ti->count; i++) {
        mean[i] *= k;
        var[i] *= k;
        gamma[i] = 1.0f;
        beta[i] = 0.0f;
    }
    if (!mp->scale[0])
        return RT_OK;
    b = layer_blobs(f, mp->scale, 1 + mp->bias, mp->bias ? "gamma and beta" : "gamma");
    if (!b)
        return RT_ERR_FORMAT;
    RT_TRY(caffe_blob_copy(f->path, mp->scale, 0, b[0], ti->ndim, ti->dims, gamma));
    if (mp->bias)
        RT_TRY(caffe_blob_copy(f->path, mp->scale, 1, b[1], ti->ndim, ti->dims, beta));
    return RT_OK;
}

/* Every tensor from its blobs, then the whole model saved as a checkpoint. */
static int import_weights(const struct caffe_net *n, const char *weights, const char *cfg_path,
                          const char *st_path)
{
    struct caffe_model hm;
    RT_TRY(caffe_model_open(cfg_path, &hm));
    Caffe__NetParameter *w = NULL;
    int rc = caffe_weights_read(weights, &w);
    struct fill f = {weights, w, &hm};
    for (int i = 0; rc == RT_OK && i < n->nmaps; i++) {
        const struct caffe_map *mp = &n->maps[i];
        if (mp->kind == CAFFE_BN) {
            rc = fill_bn(&f, mp);
            continue;
        }
        Caffe__BlobProto **b = layer_blobs(&f, mp->layer, 1 + mp->bias,
                                           mp->bias ? "a weight and a bias" : "a weight");
        rc = b ? fill_weight(&f, mp, b) : RT_ERR_FORMAT;
    }
    if (rc == RT_OK)
        rc = caffe_model_upload(&hm);
    if (rc == RT_OK)
        rc = rt_checkpoint_save(st_path, hm.m, NULL, NULL);
    if (w)
        caffe__net_parameter__free_unpacked(w, NULL);
    caffe_model_close(&hm);
    return rc;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    return ok ? RT_OK : rt_error(RT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
}

int rt_caffe_import_shape(const char *prototxt, const char *weights, const char *outdir,
                          const char *input, struct rt_caffe_import_result *res)
{
    struct rt_caffe_import_result local;
    if (!res)
        res = &local;
    memset(res, 0, sizeof *res);
    if (mkdir(outdir, 0777) != 0 && errno != EEXIST)
        return rt_error(RT_ERR_IO, "%s: %s", outdir, strerror(errno));
    struct caffe_net n = {.file = prototxt};
    int rc = caffe_prototxt_read(prototxt, &n.net);
    if (rc == RT_OK)
        rc = caffe_net_translate(&n, input);
    char *text = rc == RT_OK ? caffe_net_model_text(&n, prototxt) : NULL;
    if (rc == RT_OK && !text)
        rc = RT_ERR_NOMEM;
    /* the names `ragtag import` gives every format's output (src/onnx.h) */
    snprintf(res->cfg, sizeof res->cfg, "%s/model.cfg", outdir);
    if (rc == RT_OK)
        rc = write_text(res->cfg, text);
    if (rc == RT_OK) {
        /* the model file must load like any other: a shortcut's shapes, the
         * classes, every key's range */
        struct caffe_model hm;
        rc = caffe_model_open(res->cfg, &hm);
        if (rc < 0)
            rt_error_wrap(rc, "the model made from %s does not load", prototxt);
        else
            caffe_model_close(&hm);
    }
    if (rc == RT_OK && weights) {
        snprintf(res->weights, sizeof res->weights, "%s/weights.safetensors", outdir);
        rc = import_weights(&n, weights, res->cfg, res->weights);
    }
    res->layers = n.index;
    free(text);
    caffe_net_free(&n);
    return rc;
}

int rt_caffe_import(const char *prototxt, const char *weights, const char *outdir)
{
    return rt_caffe_import_shape(prototxt, weights, outdir, NULL, NULL);
}
