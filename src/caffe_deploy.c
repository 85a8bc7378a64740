/* caffe_deploy.c — a Caffe deploy prototxt for a ragtag model file, written
 * by `ragtag export` next to a .caffemodel whose layers carry ragtag's
 * names, so that Caffe can load the pair (`caffe test -model NET.prototxt
 * -weights NET.caffemodel`) and `ragtag import` can read it back.
 *
 * Each ragtag layer becomes one Caffe layer of the same name whose output
 * blob has that name too; a conv's own batch norm (conv2_bn + conv2_scale),
 * a [batchnorm]'s Scale and a layer's `activation` (conv2_relu) work in
 * place on that blob, which nothing else reads before them. Standalone
 * layers never work in place, so a [shortcut] always finds the value it
 * names. Pooling sizes are ragtag's (rounded down): round_mode: FLOOR where
 * Caffe's default would round up. The model file has loaded before this
 * runs, so its keys are known to be valid. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caffe-impl.h"
#include "cfg.h"
#include "model.h"
#include "status.h"

struct deploy {
    FILE *f;
    struct rt_cfg *cfg;
    struct rt_cfg_section *s;
    char bottom[40], top[40]; /* the previous layer's blob, this layer's */
    char (*tops)[40];         /* tops[k]: the blob of layer k (0: the input) */
    int k;                    /* the layer being written, from 1 */
    struct rt_shape shape;
};

static int ikey(struct deploy *d, const char *name, int def)
{
    int v = def;
    rt_cfg_int(d->cfg, d->s, name, false, def, INT_MIN, INT_MAX, &v);
    return v;
}

static double fkey(struct deploy *d, const char *name, float def)
{
    float v = def;
    rt_cfg_float(d->cfg, d->s, name, false, def, -1e30, 1e30, false, &v);
    return caffe_decimal(v);
}

/* A layer's `activation`, in place on its blob. */
static void activation(struct deploy *d, const char *act, double alpha)
{
    if (!strcmp(act, "relu") || !strcmp(act, "leaky")) {
        fprintf(d->f, "layer { name: \"%s_%s\" type: \"ReLU\" bottom: \"%s\" top: \"%s\"",
                d->top, act, d->top, d->top);
        if (!strcmp(act, "leaky"))
            fprintf(d->f, " relu_param { negative_slope: %.9g }", alpha);
        fprintf(d->f, " }\n");
    } else if (!strcmp(act, "sigmoid") || !strcmp(act, "tanh")) {
        fprintf(d->f, "layer { name: \"%s_%s\" type: \"%s\" bottom: \"%s\" top: \"%s\" }\n",
                d->top, act, act[0] == 's' ? "Sigmoid" : "TanH", d->top, d->top);
    }
}

static void own_activation(struct deploy *d)
{
    struct rt_cfg_entry *e = rt_cfg_find(d->s, "activation");
    if (e)
        activation(d, e->value, 0.1);
}

/* BatchNorm + Scale (gamma, beta) from `bottom` into this layer's blob. */
static void batchnorm(struct deploy *d, const char *bottom, const char *bn, const char *scale,
                      double momentum, double eps)
{
    fprintf(d->f,
            "layer { name: \"%s\" type: \"BatchNorm\" bottom: \"%s\" top: \"%s\"\n"
            "  batch_norm_param { moving_average_fraction: %.9g eps: %.9g } }\n"
            "layer { name: \"%s\" type: \"Scale\" bottom: \"%s\" top: \"%s\"\n"
            "  scale_param { bias_term: true } }\n",
            bn, bottom, d->top, 1.0 - momentum, eps, scale, d->top, d->top);
}

static void conv(struct deploy *d)
{
    int f = ikey(d, "filters", 1), k = ikey(d, "size", 1), st = ikey(d, "stride", 1);
    int pad = ikey(d, "pad", 0);
    bool bn = ikey(d, "batch_normalize", 0) != 0;
    fprintf(d->f, "layer { name: \"%s\" type: \"Convolution\" bottom: \"%s\" top: \"%s\"\n"
                  "  convolution_param { num_output: %d kernel_size: %d stride: %d pad: %d%s } "
                  "}\n",
            d->top, d->bottom, d->top, f, k, st, pad, bn ? " bias_term: false" : "");
    if (bn) {
        /* the names export gives a conv's own batch norm; momentum and eps
         * are fixed (docs/model-format.md) */
        char name[48], scale[48];
        snprintf(name, sizeof name, "%s_bn", d->top);
        snprintf(scale, sizeof scale, "%s_scale", d->top);
        batchnorm(d, d->top, name, scale, 0.1, 1e-5);
    }
    own_activation(d);
    d->shape = (struct rt_shape){f, (d->shape.h + 2 * pad - k) / st + 1,
                                 (d->shape.w + 2 * pad - k) / st + 1};
}

static void dense(struct deploy *d)
{
    int units = ikey(d, "units", 1);
    fprintf(d->f, "layer { name: \"%s\" type: \"InnerProduct\" bottom: \"%s\" top: \"%s\"\n"
                  "  inner_product_param { num_output: %d } }\n",
            d->top, d->bottom, d->top, units);
    own_activation(d);
    d->shape = (struct rt_shape){units, 1, 1};
}

/* Caffe's pooled size (rounded up, a last window in the padding dropped)
 * differs from ragtag's (rounded down)? */
static bool rounds_up(int in, int k, int s, int pad)
{
    int span = in + 2 * pad - k, up = (span + s - 1) / s + 1;
    if (pad > 0 && (up - 1) * s >= in + pad)
        up--;
    return up != span / s + 1;
}

static void pool(struct deploy *d, bool max)
{
    int k = ikey(d, "size", 1), st = ikey(d, "stride", k), pad = ikey(d, "pad", 0);
    bool floor_mode = rounds_up(d->shape.h, k, st, pad) || rounds_up(d->shape.w, k, st, pad);
    fprintf(d->f, "layer { name: \"%s\" type: \"Pooling\" bottom: \"%s\" top: \"%s\"\n"
                  "  pooling_param { pool: %s kernel_size: %d stride: %d pad: %d%s } }\n",
            d->top, d->bottom, d->top, max ? "MAX" : "AVE", k, st, pad,
            floor_mode ? " round_mode: FLOOR" : "");
    d->shape.h = (d->shape.h + 2 * pad - k) / st + 1;
    d->shape.w = (d->shape.w + 2 * pad - k) / st + 1;
}

static void simple(struct deploy *d, const char *type, const char *params)
{
    fprintf(d->f, "layer { name: \"%s\" type: \"%s\" bottom: \"%s\" top: \"%s\"%s }\n", d->top,
            type, d->bottom, d->top, params);
}

static void shortcut(struct deploy *d)
{
    int from = ikey(d, "from", -1);
    fprintf(d->f, "layer { name: \"%s\" type: \"Eltwise\" bottom: \"%s\" bottom: \"%s\" "
                  "top: \"%s\" eltwise_param { operation: SUM } }\n",
            d->top, d->bottom, d->tops[d->k + from], d->top);
    own_activation(d);
}

static int layer(struct deploy *d)
{
    const char *t = d->s->name;
    char buf[96];
    if (!strcmp(t, "conv"))
        conv(d);
    else if (!strcmp(t, "dense"))
        dense(d);
    else if (!strcmp(t, "maxpool") || !strcmp(t, "avgpool"))
        pool(d, t[0] == 'm');
    else if (!strcmp(t, "globalavgpool")) {
        simple(d, "Pooling", " pooling_param { pool: AVE global_pooling: true }");
        d->shape.h = d->shape.w = 1;
    } else if (!strcmp(t, "flatten")) {
        simple(d, "Flatten", "");
        d->shape = (struct rt_shape){(int)caffe_shape_count(d->shape), 1, 1};
    } else if (!strcmp(t, "relu") || !strcmp(t, "sigmoid") || !strcmp(t, "tanh")) {
        simple(d, t[0] == 'r' ? "ReLU" : t[0] == 's' ? "Sigmoid" : "TanH", "");
    } else if (!strcmp(t, "leaky")) {
        snprintf(buf, sizeof buf, " relu_param { negative_slope: %.9g }", fkey(d, "alpha", 0.1f));
        simple(d, "ReLU", buf);
    } else if (!strcmp(t, "dropout")) {
        snprintf(buf, sizeof buf, " dropout_param { dropout_ratio: %.9g }", fkey(d, "rate", 0.5f));
        simple(d, "Dropout", buf);
    } else if (!strcmp(t, "batchnorm")) {
        snprintf(buf, sizeof buf, "%s_scale", d->top);
        batchnorm(d, d->bottom, d->top, buf, fkey(d, "momentum", 0.1f), fkey(d, "eps", 1e-5f));
    } else if (!strcmp(t, "shortcut")) {
        shortcut(d);
    } else if (!strcmp(t, "softmax")) {
        simple(d, "Softmax", "");
    } else {
        return rt_error(RT_ERR_UNSUPPORTED, "%s:%d: [%s] has no Caffe layer in ragtag's export",
                        d->cfg->file, d->s->line, t);
    }
    return RT_OK;
}

/* The prefix of a section's layer names (src/layers/: `.prefix`). */
static const char *prefix(const char *type)
{
    static const char *const map[][2] = {{"batchnorm", "bn"}, {"globalavgpool", "gap"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(type, map[i][0]))
            return map[i][1];
    return type;
}

static int write_layers(struct deploy *d, const char *net_name)
{
    fprintf(d->f, "# Written by `ragtag export` from %s: a deploy net for the .caffemodel\n"
                  "# written with it (docs/caffe.md).\n"
                  "name: \"%s\"\n"
                  "layer { name: \"data\" type: \"Input\" top: \"data\"\n"
                  "  input_param { shape { dim: 1 dim: %d dim: %d dim: %d } } }\n",
            d->cfg->file, net_name, d->shape.c, d->shape.h, d->shape.w);
    snprintf(d->tops[0], sizeof d->tops[0], "data");
    for (int i = 0; i < d->cfg->count; i++) {
        d->s = &d->cfg->sections[i];
        if (!strcmp(d->s->name, "net") || !strcmp(d->s->name, "train"))
            continue;
        d->k++;
        snprintf(d->tops[d->k], sizeof d->tops[0], "%s%d", prefix(d->s->name), d->k);
        snprintf(d->bottom, sizeof d->bottom, "%s", d->tops[d->k - 1]);
        snprintf(d->top, sizeof d->top, "%s", d->tops[d->k]);
        RT_TRY(layer(d));
    }
    return RT_OK;
}

int caffe_deploy_write(const char *cfg_path, const rt_model *m, const char *net_name,
                       const char *path)
{
    char *text;
    size_t len;
    RT_TRY(caffe_read_text(cfg_path, &text, &len));
    struct deploy d = {.shape = rt_model_input_shape(m)};
    int rc = rt_cfg_parse(text, cfg_path, &d.cfg);
    free(text);
    if (rc < 0)
        return rc;
    d.tops = calloc((size_t)d.cfg->count + 1, sizeof *d.tops);
    d.f = fopen(path, "w");
    if (!d.tops || !d.f)
        rc = d.tops ? rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno))
                    : rt_error(RT_ERR_NOMEM, "out of memory");
    if (rc == RT_OK)
        rc = write_layers(&d, net_name);
    if (d.f && fclose(d.f) != 0 && rc == RT_OK)
        rc = rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
    free(d.tops);
    rt_cfg_destroy(&d.cfg);
    return rc;
}
