/* onnx_export.c — `ragtag export`: a model file and its weights as an ONNX
 * graph (opset 13). Each layer becomes the node(s) that compute the same
 * thing in inference mode; initializers keep ragtag's tensor names.
 *
 * ragtag's activations are all N x C x H x W; in ONNX a [dense] (Gemm)
 * gives N x units, so the exporter tracks each value's rank and inserts a
 * Flatten (4-D to 2-D) or a Reshape (2-D to 4-D) where a layer needs the
 * other one. The value a layer leaves is named after it ("conv1"); the
 * graph's outputs are "logits" and "probabilities". */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model.h"
#include "onnx.h"
#include "onnx_build.h"
#include "status.h"

#define OPSET 13

struct exporter {
    rt_onnx_builder *b;
    rt_model *m;
    float *params, *state; /* host copies of the model's buffers */
    const char **value;    /* per layer: the name of its output value */
    int *rank;             /* per layer: 2 or 4 */
    Onnx__NodeProto **last; /* per layer: the node that made its value, or NULL */
};

struct layer_out {
    const char *value;
    int rank;
    Onnx__NodeProto *node;
};

static struct layer_out value_of(const struct exporter *ex, int j)
{
    if (j < 0)
        return (struct layer_out){"input", 4, NULL};
    return (struct layer_out){ex->value[j], ex->rank[j], ex->last[j]};
}

/* The tensor `<layer>.<suffix>` as an initializer of the same name. */
static const char *weight(struct exporter *ex, const char *layer, const char *suffix)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s", layer, suffix);
    for (int t = 0; t < rt_model_tensor_count(ex->m); t++) {
        struct rt_tensor_info ti;
        rt_model_tensor_info(ex->m, t, &ti);
        if (strcmp(ti.name, name) != 0)
            continue;
        int64_t dims[4];
        for (int d = 0; d < ti.ndim; d++)
            dims[d] = ti.dims[d];
        const float *data = (ti.state ? ex->state : ex->params) + ti.offset;
        if (rt_onnx_init_floats(ex->b, name, ti.ndim, dims, data) < 0)
            return NULL;
        return rt_onnx_name(ex->b, "%s", name);
    }
    RT_ASSERT(!"a layer's tensor is missing from its model");
    return NULL;
}

/* `x` (rank `*rank`) as a value of rank `want`, for layer l. */
static const char *as_rank(struct exporter *ex, const struct rt_layer_info *l, const char *x,
                           int rank, int want)
{
    if (rank == want)
        return x;
    const char *out = rt_onnx_name(ex->b, "%s/%s", l->name, want == 2 ? "flat" : "4d");
    if (!out)
        return NULL;
    if (want == 2) {
        Onnx__NodeProto *n = rt_onnx_node(ex->b, "Flatten", out, 1, &x, out);
        return n && rt_onnx_attr_int(ex->b, n, "axis", 1) == RT_OK ? out : NULL;
    }
    /* 0 copies the batch size from the input (allowzero = 0) */
    int64_t shape[4] = {0, l->in.c, l->in.h, l->in.w};
    const char *sname = rt_onnx_name(ex->b, "%s.shape", l->name);
    if (!sname || rt_onnx_init_int64s(ex->b, sname, 4, shape) < 0)
        return NULL;
    const char *in[2] = {x, sname};
    return rt_onnx_node(ex->b, "Reshape", out, 2, in, out) ? out : NULL;
}

/* act(x) as node `<layer>/<act>` when the layer has one; the result in *y. */
static int activation(struct exporter *ex, const struct rt_layer_info *l, enum rt_act act,
                      float alpha, struct layer_out *y)
{
    static const char *const ops[] = {[RT_ACT_RELU] = "Relu", [RT_ACT_LEAKY] = "LeakyRelu",
                                      [RT_ACT_SIGMOID] = "Sigmoid", [RT_ACT_TANH] = "Tanh"};
    if (act == RT_ACT_IDENTITY)
        return RT_OK;
    const char *out = rt_onnx_name(ex->b, "%s/%s", l->name, ops[act]);
    Onnx__NodeProto *n = out ? rt_onnx_node(ex->b, ops[act], out, 1, &y->value, out) : NULL;
    if (!n)
        return RT_ERR_NOMEM;
    if (act == RT_ACT_LEAKY)
        RT_TRY(rt_onnx_attr_float(ex->b, n, "alpha", alpha));
    y->value = out;
    y->node = n;
    return RT_OK;
}

/* kernel_shape, strides, pads of a square window: conv and pools. */
static int window_attrs(struct exporter *ex, Onnx__NodeProto *n, const struct rt_layer_info *l)
{
    int64_t k[2] = {l->size, l->size}, s[2] = {l->stride, l->stride};
    int64_t p[4] = {l->pad, l->pad, l->pad, l->pad};
    RT_TRY(rt_onnx_attr_ints(ex->b, n, "kernel_shape", 2, k));
    RT_TRY(rt_onnx_attr_ints(ex->b, n, "strides", 2, s));
    return rt_onnx_attr_ints(ex->b, n, "pads", 4, p);
}

static int batchnorm(struct exporter *ex, const struct rt_layer_info *l, const char *prefix,
                     struct layer_out *y)
{
    char suffix[4][48];
    const char *in[5] = {y->value};
    static const char *const parts[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++) {
        snprintf(suffix[i], sizeof suffix[i], "%s%s", prefix, parts[i]);
        if (!(in[i + 1] = weight(ex, l->name, suffix[i])))
            return RT_ERR_NOMEM;
    }
    const char *out = rt_onnx_name(ex->b, "%s/bn", l->name);
    Onnx__NodeProto *n = out ? rt_onnx_node(ex->b, "BatchNormalization", out, 5, in, out) : NULL;
    if (!n)
        return RT_ERR_NOMEM;
    RT_TRY(rt_onnx_attr_float(ex->b, n, "epsilon", l->eps));
    /* ONNX: running = running * momentum + batch * (1 - momentum) */
    RT_TRY(rt_onnx_attr_float(ex->b, n, "momentum", 1.0f - l->momentum));
    y->value = out;
    y->node = n;
    return RT_OK;
}

static int export_conv(struct exporter *ex, const struct rt_layer_info *l, struct layer_out *y)
{
    const char *in[3] = {as_rank(ex, l, y->value, y->rank, 4), weight(ex, l->name, "weight")};
    int nin = 2;
    if (!l->batch_normalize) {
        in[2] = weight(ex, l->name, "bias");
        nin = 3;
    }
    const char *out = rt_onnx_name(ex->b, "%s/conv", l->name);
    if (!in[0] || !in[1] || (nin == 3 && !in[2]) || !out)
        return RT_ERR_NOMEM;
    Onnx__NodeProto *n = rt_onnx_node(ex->b, "Conv", out, nin, in, out);
    if (!n)
        return RT_ERR_NOMEM;
    RT_TRY(window_attrs(ex, n, l));
    int64_t dil[2] = {1, 1};
    RT_TRY(rt_onnx_attr_ints(ex->b, n, "dilations", 2, dil));
    RT_TRY(rt_onnx_attr_int(ex->b, n, "group", 1));
    *y = (struct layer_out){out, 4, n};
    if (l->batch_normalize)
        RT_TRY(batchnorm(ex, l, "bn.", y));
    return activation(ex, l, l->act, l->alpha, y);
}

static int export_dense(struct exporter *ex, const struct rt_layer_info *l, struct layer_out *y)
{
    const char *in[3] = {as_rank(ex, l, y->value, y->rank, 2), weight(ex, l->name, "weight"),
                         weight(ex, l->name, "bias")};
    const char *out = rt_onnx_name(ex->b, "%s/gemm", l->name);
    if (!in[0] || !in[1] || !in[2] || !out)
        return RT_ERR_NOMEM;
    Onnx__NodeProto *n = rt_onnx_node(ex->b, "Gemm", out, 3, in, out);
    if (!n || rt_onnx_attr_int(ex->b, n, "transB", 1) < 0)
        return RT_ERR_NOMEM;
    *y = (struct layer_out){out, 2, n};
    return activation(ex, l, l->act, l->alpha, y);
}

/* One node op(x) of the same rank as x (or of rank `rank` when > 0). */
static int simple(struct exporter *ex, const struct rt_layer_info *l, const char *op, int rank,
                  struct layer_out *y, Onnx__NodeProto **node)
{
    const char *x = rank ? as_rank(ex, l, y->value, y->rank, rank) : y->value;
    const char *out = rt_onnx_name(ex->b, "%s/%s", l->name, op);
    Onnx__NodeProto *n = x && out ? rt_onnx_node(ex->b, op, out, 1, &x, out) : NULL;
    if (!n)
        return RT_ERR_NOMEM;
    *y = (struct layer_out){out, rank ? rank : y->rank, n};
    if (node)
        *node = n;
    return RT_OK;
}

static int export_pool(struct exporter *ex, const struct rt_layer_info *l, struct layer_out *y)
{
    Onnx__NodeProto *n;
    bool avg = strcmp(l->type, "avgpool") == 0;
    RT_TRY(simple(ex, l, avg ? "AveragePool" : "MaxPool", 4, y, &n));
    RT_TRY(window_attrs(ex, n, l));
    /* ragtag's average pooling divides by size*size, padding included */
    return avg ? rt_onnx_attr_int(ex->b, n, "count_include_pad", 1) : RT_OK;
}

static int export_gap(struct exporter *ex, const struct rt_layer_info *l, struct layer_out *y)
{
    return simple(ex, l, "GlobalAveragePool", 4, y, NULL);
}

static int export_flatten(struct exporter *ex, const struct rt_layer_info *l,
                          struct layer_out *y)
{
    if (y->rank == 2) /* already N x values */
        return RT_OK;
    Onnx__NodeProto *n;
    RT_TRY(simple(ex, l, "Flatten", 2, y, &n));
    return rt_onnx_attr_int(ex->b, n, "axis", 1);
}

static int export_act(struct exporter *ex, const struct rt_layer_info *l, struct layer_out *y)
{
    return activation(ex, l, l->act, l->alpha, y);
}

static int export_dropout(struct exporter *ex, const struct rt_layer_info *l,
                          struct layer_out *y)
{
    /* identity in inference; the rate travels as the ratio input */
    int64_t none[1];
    const char *rname = rt_onnx_name(ex->b, "%s.ratio", l->name);
    if (!rname || rt_onnx_init_floats(ex->b, rname, 0, none, &l->rate) < 0)
        return RT_ERR_NOMEM;
    const char *in[2] = {y->value, rname};
    const char *out = rt_onnx_name(ex->b, "%s/Dropout", l->name);
    Onnx__NodeProto *n = out ? rt_onnx_node(ex->b, "Dropout", out, 2, in, out) : NULL;
    if (!n)
        return RT_ERR_NOMEM;
    *y = (struct layer_out){out, y->rank, n};
    return RT_OK;
}

static int export_batchnorm(struct exporter *ex, const struct rt_layer_info *l,
                            struct layer_out *y)
{
    return batchnorm(ex, l, "", y);
}

static int export_shortcut(struct exporter *ex, const struct rt_layer_info *l,
                           struct layer_out *y)
{
    struct layer_out other = value_of(ex, l->inputs[1]);
    /* equal C x H x W in ragtag; a 2-D one means H = W = 1 */
    int rank = y->rank < other.rank ? y->rank : other.rank;
    const char *in[2] = {as_rank(ex, l, y->value, y->rank, rank),
                         as_rank(ex, l, other.value, other.rank, rank)};
    const char *out = rt_onnx_name(ex->b, "%s/Add", l->name);
    Onnx__NodeProto *n = in[0] && in[1] && out ? rt_onnx_node(ex->b, "Add", out, 2, in, out)
                                               : NULL;
    if (!n)
        return RT_ERR_NOMEM;
    *y = (struct layer_out){out, rank, n};
    return activation(ex, l, l->act, l->alpha, y);
}

static const struct {
    const char *type;
    int (*fn)(struct exporter *ex, const struct rt_layer_info *l, struct layer_out *y);
} exporters[] = {
    {"conv", export_conv},           {"dense", export_dense},
    {"maxpool", export_pool},        {"avgpool", export_pool},
    {"globalavgpool", export_gap},   {"flatten", export_flatten},
    {"relu", export_act},            {"leaky", export_act},
    {"sigmoid", export_act},         {"tanh", export_act},
    {"dropout", export_dropout},     {"batchnorm", export_batchnorm},
    {"shortcut", export_shortcut},
};

static int export_layer(struct exporter *ex, int i)
{
    struct rt_layer_info l;
    RT_TRY(rt_model_layer_info(ex->m, i, &l));
    struct layer_out y = value_of(ex, l.inputs[0]);
    y.node = NULL;
    for (size_t k = 0; k < sizeof exporters / sizeof exporters[0]; k++) {
        if (strcmp(exporters[k].type, l.type) != 0)
            continue;
        int rc = exporters[k].fn(ex, &l, &y);
        if (rc < 0)
            return rt_error_wrap(rc, "exporting %s (line %d)", l.name, l.line);
        ex->value[i] = y.value;
        ex->rank[i] = y.rank;
        ex->last[i] = y.node;
        return RT_OK;
    }
    return rt_error(RT_ERR_UNSUPPORTED, "%s (line %d): no ONNX export for [%s]", l.name, l.line,
                    l.type);
}

/* "logits" (N x classes) from the last layer's value, then its softmax. */
static int outputs(struct exporter *ex)
{
    int L = rt_model_layer_count(ex->m), K = rt_model_classes(ex->m);
    struct layer_out y = value_of(ex, L - 2);
    if (y.rank == 2 && y.node) {
        y.node->output[0] = "logits"; /* nothing after it reads the old name */
    } else {
        const char *op = y.rank == 2 ? "Identity" : "Flatten";
        Onnx__NodeProto *n = rt_onnx_node(ex->b, op, "logits", 1, &y.value, "logits");
        if (!n || (y.rank == 4 && rt_onnx_attr_int(ex->b, n, "axis", 1) < 0))
            return RT_ERR_NOMEM;
    }
    const char *logits = "logits";
    Onnx__NodeProto *sm = rt_onnx_node(ex->b, "Softmax", "softmax", 1, &logits, "probabilities");
    if (!sm || rt_onnx_attr_int(ex->b, sm, "axis", 1) < 0)
        return RT_ERR_NOMEM;
    struct rt_shape s = rt_model_input_shape(ex->m);
    int64_t in[4] = {-1, s.c, s.h, s.w}, out[2] = {-1, K};
    RT_TRY(rt_onnx_graph_io(ex->b, 0, "input", 4, in));
    RT_TRY(rt_onnx_graph_io(ex->b, 1, "logits", 2, out));
    return rt_onnx_graph_io(ex->b, 1, "probabilities", 2, out);
}

/* The model with its weights, and host copies of its buffers. */
static int open_model(struct exporter *ex, rt_dev *dev, const char *model_path,
                      const char *weights_path)
{
    if (!(ex->m = rt_model_load(model_path, dev, 1)))
        return RT_ERR_CONFIG;
    RT_TRY(rt_checkpoint_load(weights_path, ex->m, NULL, NULL));
    size_t np = rt_model_param_count(ex->m), ns = rt_model_state_count(ex->m);
    int L = rt_model_layer_count(ex->m);
    ex->params = malloc((np ? np : 1) * sizeof(float));
    ex->state = malloc((ns ? ns : 1) * sizeof(float));
    ex->value = calloc((size_t)L, sizeof *ex->value);
    ex->rank = calloc((size_t)L, sizeof *ex->rank);
    ex->last = calloc((size_t)L, sizeof *ex->last);
    if (!ex->params || !ex->state || !ex->value || !ex->rank || !ex->last)
        return rt_error(RT_ERR_NOMEM, "out of memory exporting %s", model_path);
    RT_TRY(rt_download(dev, ex->params, rt_model_params(ex->m), np * sizeof(float)));
    return rt_download(dev, ex->state, rt_model_state(ex->m), ns * sizeof(float));
}

int rt_onnx_export(const char *model_path, const char *weights_path, const char *onnx_path)
{
    struct exporter ex = {0};
    rt_dev *dev = rt_dev_open("cpu", 0, 1);
    int rc = dev ? RT_OK : RT_ERR_DEVICE;
    if (rc == RT_OK && !(ex.b = rt_onnx_builder_new()))
        rc = RT_ERR_NOMEM;
    if (rc == RT_OK)
        rc = open_model(&ex, dev, model_path, weights_path);
    int L = ex.m ? rt_model_layer_count(ex.m) : 0;
    if (rc == RT_OK && L < 2)
        rc = rt_error(RT_ERR_CONFIG, "%s: no layer before [softmax]: nothing to export",
                      model_path);
    for (int i = 0; rc == RT_OK && i < L - 1; i++)
        rc = export_layer(&ex, i);
    if (rc == RT_OK)
        rc = outputs(&ex);
    if (rc == RT_OK) {
        char *doc = rt_onnx_name(ex.b, "exported by ragtag from %s with weights %s",
                                 model_path, weights_path);
        rc = doc ? rt_onnx_builder_write(ex.b, onnx_path, OPSET, "ragtag", doc) : RT_ERR_NOMEM;
    }
    if (rc < 0 && ex.m)
        rc = rt_error_wrap(rc, "exporting %s to %s", model_path, onnx_path);
    free(ex.params);
    free(ex.state);
    free(ex.value);
    free(ex.rank);
    free(ex.last);
    rt_model_destroy(&ex.m);
    rt_onnx_builder_destroy(&ex.b);
    rt_dev_close(&dev);
    return rc;
}
