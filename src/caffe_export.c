/* caffe_export.c — a ragtag model's weights in the .caffemodel layout
 * (`ragtag export MODEL.cfg --weights W -o net.caffemodel`): a binary
 * NetParameter whose layers carry only their blobs, which is what Caffe's
 * CopyTrainedLayersFrom reads (it matches layers by name). The blob layouts
 * are the inverse of caffe_import.c's; a BatchNorm's scale factor is 1. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "caffe-impl.h"
#include "caffe_import.h"
#include "checkpoint.h"
#include "status.h"

static Caffe__BlobProto *blob_new(int ndim, const int *dims, const float *data, bool transpose)
{
    Caffe__BlobProto *b = malloc(sizeof *b);
    if (!b)
        return NULL;
    caffe__blob_proto__init(b);
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= (size_t)dims[i];
    b->shape = malloc(sizeof *b->shape);
    if (b->shape) {
        caffe__blob_shape__init(b->shape);
        b->shape->dim = malloc((size_t)ndim * sizeof *b->shape->dim + 1);
    }
    b->data = malloc(count * sizeof *b->data + 1);
    if (!b->shape || !b->shape->dim || !b->data) {
        caffe__blob_proto__free_unpacked(b, NULL);
        return NULL;
    }
    b->shape->n_dim = (size_t)ndim;
    b->n_data = count;
    for (int i = 0; i < ndim; i++)
        b->shape->dim[i] = transpose ? dims[ndim - 1 - i] : dims[i];
    if (!transpose)
        memcpy(b->data, data, count * sizeof *data);
    for (int o = 0; transpose && o < dims[0]; o++) /* (out, in) stored as (in, out) */
        for (int i = 0; i < dims[1]; i++)
            b->data[(size_t)i * dims[0] + o] = data[(size_t)o * dims[1] + i];
    return b;
}

static Caffe__LayerParameter *layer_new(Caffe__NetParameter *net, const char *name,
                                        const char *type)
{
    Caffe__LayerParameter **grown = realloc(net->layer, (net->n_layer + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    net->layer = grown;
    Caffe__LayerParameter *l = malloc(sizeof *l);
    if (!l)
        return NULL;
    caffe__layer_parameter__init(l);
    net->layer[net->n_layer++] = l;
    l->name = strdup(name);
    l->type = strdup(type);
    return l->name && l->type ? l : NULL;
}

static int blob_add(Caffe__LayerParameter *l, int ndim, const int *dims, const float *data,
                    bool transpose)
{
    Caffe__BlobProto **grown = realloc(l->blobs, (l->n_blobs + 1) * sizeof *grown);
    if (!grown)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    l->blobs = grown;
    Caffe__BlobProto *b = blob_new(ndim, dims, data, transpose);
    if (!b)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    l->blobs[l->n_blobs++] = b;
    return RT_OK;
}

/* A tensor the Caffe layer cannot hold must be all `value`. */
static int must_be(const float *t, size_t count, float value, const char *name, const char *why)
{
    for (size_t i = 0; i < count; i++)
        if (t[i] != value)
            return rt_error(RT_ERR_CONFIG, "%s[%zu] = %g, not %g: %s", name, i, t[i], value, why);
    return RT_OK;
}

static int export_weight(Caffe__NetParameter *net, struct caffe_model *hm,
                         const struct caffe_map *mp)
{
    const struct rt_tensor_info *ti, *bi;
    const float *w = caffe_model_tensor(hm, mp->tensor, "weight", &ti);
    const float *bias = caffe_model_tensor(hm, mp->tensor, "bias", &bi);
    RT_ASSERT(w);
    Caffe__LayerParameter *l =
        layer_new(net, mp->layer, mp->kind == CAFFE_CONV ? "Convolution" : "InnerProduct");
    if (!l)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    RT_TRY(blob_add(l, ti->ndim, ti->dims, w, mp->transpose));
    if (mp->bias && bias)
        return blob_add(l, bi->ndim, bi->dims, bias, false);
    if (bias)
        return must_be(bias, bi->count, 0.0f, bi->name, "the Caffe layer has no bias "
                       "(bias_term: false)");
    return RT_OK;
}

static int export_bn(Caffe__NetParameter *net, struct caffe_model *hm, const struct caffe_map *mp)
{
    const struct rt_tensor_info *ti, *gi, *bi;
    const float *mean = caffe_model_tensor(hm, mp->tensor, "running_mean", &ti);
    const float *var = caffe_model_tensor(hm, mp->tensor, "running_var", &ti);
    const float *gamma = caffe_model_tensor(hm, mp->tensor, "weight", &gi);
    const float *beta = caffe_model_tensor(hm, mp->tensor, "bias", &bi);
    RT_ASSERT(mean && var && gamma && beta);
    Caffe__LayerParameter *l = layer_new(net, mp->layer, "BatchNorm");
    if (!l)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    float one = 1.0f;
    int one_dim = 1;
    RT_TRY(blob_add(l, ti->ndim, ti->dims, mean, false));
    RT_TRY(blob_add(l, ti->ndim, ti->dims, var, false));
    RT_TRY(blob_add(l, 1, &one_dim, &one, false));
    if (!mp->scale[0])
        RT_TRY(must_be(gamma, gi->count, 1.0f, gi->name, "the Caffe net has no Scale layer "
                       "after this BatchNorm"));
    if (!mp->scale[0] || !mp->bias)
        RT_TRY(must_be(beta, bi->count, 0.0f, bi->name, "the Caffe net's Scale layer after this "
                       "BatchNorm has no bias"));
    if (!mp->scale[0])
        return RT_OK;
    l = layer_new(net, mp->scale, "Scale");
    if (!l)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    RT_TRY(blob_add(l, gi->ndim, gi->dims, gamma, false));
    return mp->bias ? blob_add(l, bi->ndim, bi->dims, beta, false) : RT_OK;
}

/* Maps from ragtag's own tensor names, for a model without a prototxt. */
static int maps_from_model(struct caffe_net *n, struct caffe_model *hm)
{
    for (int i = 0; i < hm->nt; i++) {
        const char *name = hm->infos[i].name, *dot = strrchr(name, '.');
        if (!dot || strcmp(dot, ".weight") != 0)
            continue;
        bool conv = !strncmp(name, "conv", 4), dense = !strncmp(name, "dense", 5);
        bool bn = strstr(name, ".bn.") || !strncmp(name, "bn", 2);
        if (!conv && !dense && !bn)
            return rt_error(RT_ERR_UNSUPPORTED, "%s: tensor %s belongs to a layer that ragtag "
                            "does not export to Caffe", n->file, name);
        struct caffe_map *m =
            caffe_map_add(n, bn ? CAFFE_BN : conv ? CAFFE_CONV : CAFFE_DENSE, NULL);
        if (!m)
            return RT_ERR_NOMEM;
        snprintf(m->tensor, sizeof m->tensor, "%.*s", (int)(dot - name + 1), name);
        /* "conv2.bn." -> conv2_bn / conv2_scale; "bn3." -> bn3 / bn3_scale */
        int stem = (int)(strchr(name, '.') - name);
        snprintf(m->layer, sizeof m->layer, "%.*s%s", stem, name, conv && bn ? "_bn" : "");
        snprintf(m->scale, sizeof m->scale, "%.*s_scale", stem, name);
        const struct rt_tensor_info *bi;
        m->bias = bn || caffe_model_tensor(hm, m->tensor, "bias", &bi) != NULL;
    }
    return RT_OK;
}

/* Maps from the prototxt, which must translate to the same model. */
static int maps_from_prototxt(struct caffe_net *n, const struct caffe_model *hm)
{
    struct rt_shape s = rt_model_input_shape(hm->m);
    char input[64];
    snprintf(input, sizeof input, "%dx%dx%d", s.w, s.h, s.c);
    RT_TRY(caffe_prototxt_read(n->file, &n->net));
    RT_TRY(caffe_net_translate(n, input));
    char *text = caffe_net_model_text(n, n->file);
    if (!text)
        return RT_ERR_NOMEM;
    rt_model *pm = rt_model_load_string(text, n->file, hm->dev, 1);
    free(text);
    if (!pm)
        return rt_error_wrap(RT_ERR_CONFIG, "the model made from %s does not load", n->file);
    int rc = RT_OK, nt = rt_model_tensor_count(pm);
    if (nt != hm->nt)
        rc = rt_error(RT_ERR_CONFIG, "%s makes a model of %d tensors, not %d: it is not this "
                      "model's net", n->file, nt, hm->nt);
    for (int i = 0; rc == RT_OK && i < nt; i++) {
        struct rt_tensor_info ti;
        rc = rt_model_tensor_info(pm, i, &ti);
        const struct rt_tensor_info *mi = &hm->infos[i];
        if (rc == RT_OK && (strcmp(ti.name, mi->name) || ti.ndim != mi->ndim ||
                            memcmp(ti.dims, mi->dims, (size_t)ti.ndim * sizeof *ti.dims)))
            rc = rt_error(RT_ERR_CONFIG, "%s makes tensor %d %s of %zu values where the model "
                          "has %s of %zu: it is not this model's net", n->file, i, ti.name,
                          ti.count, mi->name, mi->count);
    }
    rt_model_destroy(&pm);
    return rc;
}

static int write_atomic(const char *path, const uint8_t *buf, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return rt_error(RT_ERR_IO, "%s: %s", tmp, strerror(errno));
    bool ok = fwrite(buf, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return RT_OK;
    int e = errno;
    unlink(tmp);
    return rt_error(RT_ERR_IO, "%s: %s", path, strerror(e));
}

static int pack_write(const Caffe__NetParameter *net, const char *out)
{
    size_t len = caffe__net_parameter__get_packed_size(net);
    uint8_t *buf = malloc(len + 1);
    if (!buf)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory for %zu bytes", out, len);
    caffe__net_parameter__pack(net, buf);
    int rc = write_atomic(out, buf, len);
    free(buf);
    return rc;
}

/* NET.prototxt next to NET.caffemodel, unless a file there is someone
 * else's (not written by ragtag export). */
static int deploy_path(const char *out, char *path, size_t size)
{
    size_t len = strlen(out);
    const char *ext = ".caffemodel";
    if (len > strlen(ext) && !strcmp(out + len - strlen(ext), ext))
        len -= strlen(ext);
    snprintf(path, size, "%.*s.prototxt", (int)len, out);
    FILE *f = fopen(path, "r");
    if (!f)
        return RT_OK;
    char line[64] = "";
    bool ours = fgets(line, sizeof line, f) && !strncmp(line, "# Written by `ragtag export`", 28);
    fclose(f);
    return ours ? RT_OK
                : rt_error(RT_ERR_IO, "%s exists and was not written by ragtag export: export "
                                      "writes the deploy net there (move it, or give "
                                      "--prototxt)", path);
}

int rt_caffe_export_weights(const char *model_cfg, const char *weights, const char *prototxt,
                            const char *out, char *deploy, size_t deploy_size)
{
    char dpath[4200] = "";
    if (!prototxt)
        RT_TRY(deploy_path(out, dpath, sizeof dpath));
    struct caffe_model hm;
    RT_TRY(caffe_model_open(model_cfg, &hm));
    struct caffe_net n = {.file = prototxt ? prototxt : model_cfg};
    Caffe__NetParameter net = CAFFE__NET_PARAMETER__INIT;
    int rc = rt_checkpoint_load(weights, hm.m, NULL, NULL);
    if (rc == RT_OK)
        rc = caffe_model_download(&hm);
    if (rc == RT_OK)
        rc = prototxt ? maps_from_prototxt(&n, &hm) : maps_from_model(&n, &hm);
    /* the net's name: the prototxt's, else the model file's without .cfg */
    const char *base = strrchr(model_cfg, '/') ? strrchr(model_cfg, '/') + 1 : model_cfg;
    const char *dot = strrchr(base, '.');
    net.name = n.net && n.net->name ? strdup(n.net->name)
                                    : strndup(base, dot && dot != base ? (size_t)(dot - base)
                                                                       : strlen(base));
    const char *name = net.name ? net.name : "";
    if (rc == RT_OK && !net.name)
        rc = rt_error(RT_ERR_NOMEM, "out of memory");
    for (int i = 0; rc == RT_OK && i < n.nmaps; i++)
        rc = n.maps[i].kind == CAFFE_BN ? export_bn(&net, &hm, &n.maps[i])
                                        : export_weight(&net, &hm, &n.maps[i]);
    if (rc == RT_OK)
        rc = pack_write(&net, out);
    if (rc == RT_OK && dpath[0])
        rc = caffe_deploy_write(model_cfg, hm.m, name, dpath);
    if (deploy && deploy_size)
        snprintf(deploy, deploy_size, "%s", rc == RT_OK ? dpath : "");
    if (rc < 0 && rc != RT_ERR_NOMEM)
        rt_error_wrap(rc, "exporting %s to %s", weights, out);
    /* everything in `net` was malloc'ed: free it as protobuf-c would */
    for (size_t i = 0; i < net.n_layer; i++)
        caffe__layer_parameter__free_unpacked(net.layer[i], NULL);
    free(net.layer);
    free(net.name);
    caffe_net_free(&n);
    caffe_model_close(&hm);
    return rc;
}
