/* onnx_nodes.c — one converter per ONNX operator the importer takes: each
 * checks the node's inputs and attributes, then adds a ragtag layer (or
 * fuses into the last one) and records the value it leaves. What ragtag
 * cannot express is an error naming the node, its operator and the
 * attribute or input at fault (onnx_import.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

#define NODE_ERR(im, n, ...) rt_onnx_node_error(RT_ERR_UNSUPPORTED, (im)->path, (n), __VA_ARGS__)

static const char SUPPORTED[] =
    "Conv, Gemm, MatMul (+ Add), Relu, LeakyRelu, Sigmoid, Tanh, MaxPool, AveragePool, "
    "GlobalAveragePool, BatchNormalization, Flatten, Reshape (to 2-D), Dropout, Add, Softmax, "
    "Identity, Constant, Pad (zeros, before Conv or AveragePool)";

/* The shortest decimal text that reads back as the same float ("0.1", not
 * the 0.100000024 that 9 digits give): for the model file's keys. */
static const char *ftext(float v, char *buf, size_t n)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, n, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v)
            break;
    }
    return buf;
}

/* ---- inputs and outputs ------------------------------------------------------ */

static bool has_input(const Onnx__NodeProto *n, size_t k)
{
    return k < n->n_input && n->input[k][0];
}

/* Data input k: a value some layer (or the graph input) produced. */
static int data_in(struct importer *im, const Onnx__NodeProto *n, size_t k,
                   const struct imp_value **v)
{
    if (!has_input(n, k))
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "input %zu is missing", k);
    if ((*v = imp_value_find(im, n->input[k])))
        return RT_OK;
    if (imp_const_find(im, n->input[k]))
        return NODE_ERR(im, n, "input '%s' is a constant: ragtag imports this operator only "
                        "on the output of the previous layer", n->input[k]);
    return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "input '%s' is not the output of "
                              "an earlier node nor a graph input", n->input[k]);
}

/* v must be the previous layer's output: ragtag's layers form a chain. */
static int chained(struct importer *im, const Onnx__NodeProto *n, const struct imp_value *v)
{
    if (v->layer == im->nlayers - 1)
        return RT_OK;
    return NODE_ERR(im, n, "input '%s' is not the previous layer's output (ragtag's layers "
                    "form a chain; only Add may also take an earlier output)", v->name);
}

static int chained_in(struct importer *im, const Onnx__NodeProto *n, const struct imp_value **v)
{
    RT_TRY(data_in(im, n, 0, v));
    return chained(im, n, *v);
}

/* Output 0 becomes a value of `layer`; another output must not be read. */
static int output(struct importer *im, const Onnx__NodeProto *n, int layer, struct rt_shape s,
                  int rank)
{
    if (n->n_output < 1 || !n->output[0][0])
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "has no output");
    for (size_t k = 1; k < n->n_output; k++)
        if (n->output[k][0] && imp_uses(im, n->output[k]))
            return NODE_ERR(im, n, "output %zu ('%s') is used: ragtag computes only the "
                            "first output of %s", k, n->output[k], n->op_type);
    return imp_value_add(im, n->output[0], layer, s, rank);
}

/* Constant input k as floats; `want` values unless 0. */
static int const_in(struct importer *im, const Onnx__NodeProto *n, size_t k, size_t want,
                    const Onnx__TensorProto **t, float **data)
{
    size_t count;
    if (!has_input(n, k) || !(*t = imp_const_find(im, n->input[k])))
        return NODE_ERR(im, n, "input %zu%s%s%s must be a constant (an initializer)", k,
                        has_input(n, k) ? " ('" : "", has_input(n, k) ? n->input[k] : "",
                        has_input(n, k) ? "')" : "");
    RT_TRY(rt_onnx_tensor_floats(im->path, n, n->input[k], *t, data, &count));
    if (want && count != want) {
        free(*data);
        return NODE_ERR(im, n, "input %zu ('%s') holds %zu values, expected %zu", k,
                        n->input[k], count, want);
    }
    return RT_OK;
}

static struct imp_layer *new_layer(struct importer *im, const Onnx__NodeProto *n,
                                   const char *type)
{
    struct imp_layer *l = imp_layer_add(im, n, type);
    if (!l)
        rt_error(RT_ERR_NOMEM, "out of memory importing node %s", rt_onnx_node_label(n));
    return l;
}

/* The last layer, when v is its output and nothing else reads v: a node on
 * v may then be fused into it. */
static struct imp_layer *fusable(struct importer *im, const struct imp_value *v)
{
    if (v->layer < 0 || v->layer != im->nlayers - 1 || imp_uses(im, v->name) != 1)
        return NULL;
    return &im->layers[v->layer];
}

/* Whether every reader of `value` is one of the operators in `ops` (a
 * NULL-terminated list) and no graph output is it. */
static bool only_read_by(const struct importer *im, const char *value, const char *const *ops)
{
    int readers = 0;
    for (size_t i = 0; i < im->g->n_node; i++) {
        const Onnx__NodeProto *m = im->g->node[i];
        for (size_t k = 0; k < m->n_input; k++) {
            if (strcmp(m->input[k], value) != 0)
                continue;
            bool ok = false;
            for (const char *const *op = ops; *op && !ok; op++)
                ok = strcmp(m->op_type, *op) == 0;
            if (!ok)
                return false;
            readers++;
        }
    }
    return readers == imp_uses(im, value);
}

/* ---- windows: Conv, MaxPool, AveragePool -------------------------------------- */

struct window {
    int size, stride, pad;
};

static int pair_equal(struct importer *im, const Onnx__NodeProto *n, const char *name,
                      int64_t def, size_t want, int *out)
{
    const int64_t *v;
    size_t count;
    RT_TRY(rt_onnx_attr_get_ints(im->path, n, name, &v, &count));
    *out = (int)def;
    if (!v)
        return RT_OK;
    bool same = count == want;
    for (size_t i = 1; same && i < count; i++)
        same = v[i] == v[0];
    if (!same || v[0] < 0 || v[0] > 1024)
        return NODE_ERR(im, n, "attribute %s: %zu values%s (ragtag takes %zu equal values from "
                        "0 to 1024: square windows, the same %s on every side)", name, count,
                        same ? " out of range" : ", not all equal", want, name);
    *out = (int)v[0];
    return RT_OK;
}

/* kernel (from the weights for Conv: `size` > 0), strides, pads, dilations,
 * auto_pad; the window must fit the input as ragtag's layers require. */
static int window(struct importer *im, const Onnx__NodeProto *n, const struct imp_value *v,
                  int size, struct window *w)
{
    char autopad[32];
    int k, dil;
    RT_TRY(rt_onnx_attr_get_string(im->path, n, "auto_pad", "NOTSET", autopad, sizeof autopad));
    if (strcmp(autopad, "NOTSET") != 0 && strcmp(autopad, "VALID") != 0)
        return NODE_ERR(im, n, "attribute auto_pad = %s: ragtag needs explicit pads", autopad);
    RT_TRY(pair_equal(im, n, "kernel_shape", size, 2, &k));
    if ((size && k != size) || k < 1)
        return NODE_ERR(im, n, "attribute kernel_shape does not match the %dx%d weights or is "
                        "missing", size, size);
    RT_TRY(pair_equal(im, n, "strides", 1, 2, &w->stride));
    RT_TRY(pair_equal(im, n, "pads", 0, 4, &w->pad));
    RT_TRY(pair_equal(im, n, "dilations", 1, 2, &dil));
    if (dil != 1)
        return NODE_ERR(im, n, "attribute dilations = %d: ragtag's windows are not dilated", dil);
    if (w->stride < 1)
        return NODE_ERR(im, n, "attribute strides = 0");
    w->size = k;
    w->pad += v->pad; /* a Pad before it (torch writes one before AveragePool) */
    if (v->rank != 4)
        return NODE_ERR(im, n, "input '%s' is N x %zu values, not N x C x H x W", v->name,
                        rt_shape_count(v->s));
    if (w->pad >= k || k > v->s.h + 2 * w->pad || k > v->s.w + 2 * w->pad)
        return NODE_ERR(im, n, "a %dx%d window with pads %d on a %dx%d input: ragtag needs "
                        "pads < kernel <= input + 2*pads", k, k, w->pad, v->s.w, v->s.h);
    return RT_OK;
}

static struct rt_shape window_out(struct rt_shape in, int c, const struct window *w)
{
    return (struct rt_shape){c, (in.h + 2 * w->pad - w->size) / w->stride + 1,
                             (in.w + 2 * w->pad - w->size) / w->stride + 1};
}

static void window_keys(struct imp_layer *l, const struct window *w)
{
    imp_key(l, "size = %d", w->size);
    imp_key(l, "stride = %d", w->stride);
    if (w->pad)
        imp_key(l, "pad = %d", w->pad);
}

static int conv_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *wt, *bt;
    float *w = NULL, *b = NULL;
    int64_t group;
    struct window win;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "group", 1, &group));
    if (group != 1)
        return NODE_ERR(im, n, "attribute group = %lld: ragtag's convolutions are not grouped",
                        (long long)group);
    if (!has_input(n, 1) || !(wt = imp_const_find(im, n->input[1])) || wt->n_dims != 4 ||
        wt->dims[1] != v->s.c || wt->dims[2] != wt->dims[3] || wt->dims[0] < 1 ||
        wt->dims[0] > 65536)
        return NODE_ERR(im, n, "the weights must be a constant K x %d x R x R (square kernels "
                        "over all %d input channels)", v->s.c, v->s.c);
    int K = (int)wt->dims[0], r = (int)wt->dims[2];
    RT_TRY(window(im, n, v, r, &win));
    RT_TRY(const_in(im, n, 1, 0, &wt, &w));
    if (has_input(n, 2) && const_in(im, n, 2, (size_t)K, &bt, &b) < 0) {
        free(w);
        return RT_ERR_UNSUPPORTED;
    }
    struct imp_layer *l = new_layer(im, n, "conv");
    if (!l || (!b && !(b = calloc((size_t)K, sizeof *b)))) {
        free(w);
        free(b);
        return RT_ERR_NOMEM;
    }
    l->bias = has_input(n, 2);
    imp_key(l, "filters = %d", K);
    window_keys(l, &win);
    int wd[4] = {K, v->s.c, r, r}, bd[1] = {K};
    imp_tensor(im, l, "weight", 4, wd, w);
    imp_tensor(im, l, "bias", 1, bd, b);
    return output(im, n, im->nlayers - 1, window_out(v->s, K, &win), 4);
}

static int pool_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    struct window win;
    int64_t ceil_mode, include_pad;
    bool avg = strcmp(n->op_type, "AveragePool") == 0;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(window(im, n, v, 0, &win));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "ceil_mode", 0, &ceil_mode));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "count_include_pad", 0, &include_pad));
    if (ceil_mode)
        return NODE_ERR(im, n, "attribute ceil_mode = 1: ragtag rounds output sizes down");
    if (avg && win.pad > v->pad && !include_pad)
        return NODE_ERR(im, n, "attribute count_include_pad = 0 with pads: ragtag's average "
                        "pooling counts padding as zeros (count_include_pad = 1)");
    struct imp_layer *l = new_layer(im, n, avg ? "avgpool" : "maxpool");
    if (!l)
        return RT_ERR_NOMEM;
    window_keys(l, &win);
    return output(im, n, im->nlayers - 1, window_out(v->s, v->s.c, &win), 4);
}

static int gap_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    RT_TRY(chained_in(im, n, &v));
    if (v->rank != 4)
        return NODE_ERR(im, n, "input '%s' is not N x C x H x W", v->name);
    if (!new_layer(im, n, "globalavgpool"))
        return RT_ERR_NOMEM;
    return output(im, n, im->nlayers - 1, (struct rt_shape){v->s.c, 1, 1}, 4);
}

/* ---- dense: Gemm, MatMul, and Add of a constant as MatMul's bias ------------- */

/* A dense layer of `units` outputs with weight w (units x inputs) and bias b. */
static int dense_layer(struct importer *im, const Onnx__NodeProto *n, const struct imp_value *v,
                       int units, float *w, float *b, bool open_bias)
{
    int inputs = (int)rt_shape_count(v->s);
    struct imp_layer *l = new_layer(im, n, "dense");
    if (!l) {
        free(w);
        free(b);
        return RT_ERR_NOMEM;
    }
    l->open_bias = open_bias;
    imp_key(l, "units = %d", units);
    int wd[2] = {units, inputs}, bd[1] = {units};
    imp_tensor(im, l, "weight", 2, wd, w);
    imp_tensor(im, l, "bias", 1, bd, b);
    return output(im, n, im->nlayers - 1, (struct rt_shape){units, 1, 1}, 2);
}

/* B of a Gemm / MatMul: a constant of 2 dims whose `in_dim` is the input's
 * value count; the weights come back as units x inputs, scaled. */
static int dense_weights(struct importer *im, const Onnx__NodeProto *n, int inputs,
                         bool trans, float alpha, float **w, int *units)
{
    const Onnx__TensorProto *t = has_input(n, 1) ? imp_const_find(im, n->input[1]) : NULL;
    if (!t || t->n_dims != 2 || t->dims[trans ? 1 : 0] != inputs || t->dims[trans ? 0 : 1] < 1 ||
        t->dims[trans ? 0 : 1] > 16777216)
        return NODE_ERR(im, n, "input 1 must be a constant %s matrix for an input of %d values",
                        trans ? "units x inputs" : "inputs x units", inputs);
    float *raw;
    RT_TRY(const_in(im, n, 1, 0, &t, &raw));
    int u = (int)t->dims[trans ? 0 : 1];
    float *out = malloc((size_t)u * (size_t)inputs * sizeof *out);
    if (!out) {
        free(raw);
        return rt_error(RT_ERR_NOMEM, "out of memory importing %s", rt_onnx_node_label(n));
    }
    for (int o = 0; o < u; o++)
        for (int i = 0; i < inputs; i++)
            out[(size_t)o * inputs + i] =
                alpha * (trans ? raw[(size_t)o * inputs + i] : raw[(size_t)i * u + o]);
    free(raw);
    *w = out;
    *units = u;
    return RT_OK;
}

static int gemm_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *ct;
    int64_t ta, tb;
    float alpha, beta, *w, *c = NULL;
    int units;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "transA", 0, &ta));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "transB", 0, &tb));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "alpha", 1.0f, &alpha));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "beta", 1.0f, &beta));
    if (ta)
        return NODE_ERR(im, n, "attribute transA = %lld: ragtag's dense layers take the "
                        "samples as rows", (long long)ta);
    RT_TRY(dense_weights(im, n, (int)rt_shape_count(v->s), tb != 0, alpha, &w, &units));
    float *b = calloc((size_t)units, sizeof *b);
    if (!b || (has_input(n, 2) && const_in(im, n, 2, 0, &ct, &c) < 0)) {
        free(w);
        free(b);
        return b ? RT_ERR_UNSUPPORTED : rt_error(RT_ERR_NOMEM, "out of memory");
    }
    long long cn = c ? rt_onnx_tensor_count(ct) : 0;
    if (c && cn != units && cn != 1) {
        free(w);
        free(b);
        free(c);
        return NODE_ERR(im, n, "input 2 (C) holds %lld values for %d units", cn, units);
    }
    for (int o = 0; c && o < units; o++)
        b[o] = beta * c[cn == 1 ? 0 : o];
    free(c);
    return dense_layer(im, n, v, units, w, b, false);
}

static int matmul_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    float *w;
    int units;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(dense_weights(im, n, (int)rt_shape_count(v->s), false, 1.0f, &w, &units));
    float *b = calloc((size_t)units, sizeof *b);
    if (!b) {
        free(w);
        return rt_error(RT_ERR_NOMEM, "out of memory");
    }
    return dense_layer(im, n, v, units, w, b, true);
}

/* Add(x, constant) right after a MatMul: the dense layer's bias. */
static int bias_add(struct importer *im, const Onnx__NodeProto *n, int k_const)
{
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    float *c;
    RT_TRY(data_in(im, n, (size_t)(1 - k_const), &v));
    struct imp_layer *l = fusable(im, v);
    if (!l || !l->open_bias)
        return NODE_ERR(im, n, "adds a constant: ragtag imports that only as the bias right "
                        "after a MatMul");
    RT_TRY(const_in(im, n, (size_t)k_const, 0, &t, &c));
    long long cn = rt_onnx_tensor_count(t), units = l->t[1].dims[0];
    if (cn != units && cn != 1) {
        free(c);
        return NODE_ERR(im, n, "the bias holds %lld values for %lld units", cn, units);
    }
    for (long long o = 0; o < units; o++)
        l->t[1].data[o] += c[cn == 1 ? 0 : o];
    free(c);
    l->open_bias = false;
    return output(im, n, v->layer, v->s, v->rank);
}

/* ---- the rest ---------------------------------------------------------------- */

static int add_node(struct importer *im, const Onnx__NodeProto *n)
{
    if (n->n_input != 2)
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "has %zu inputs, not 2",
                                  n->n_input);
    bool c0 = imp_const_find(im, n->input[0]) != NULL, c1 = imp_const_find(im, n->input[1]) != NULL;
    if (c0 != c1)
        return bias_add(im, n, c0 ? 0 : 1);
    const struct imp_value *a, *b;
    RT_TRY(data_in(im, n, 0, &a));
    RT_TRY(data_in(im, n, 1, &b));
    int last = im->nlayers - 1;
    const struct imp_value *cur = a->layer == last ? a : b, *other = a->layer == last ? b : a;
    RT_TRY(chained(im, n, cur));
    if (other->layer < 0)
        return NODE_ERR(im, n, "adds the graph input '%s': ragtag's [shortcut] adds the "
                        "outputs of two layers", other->name);
    if (cur->s.c != other->s.c || cur->s.h != other->s.h || cur->s.w != other->s.w)
        return NODE_ERR(im, n, "adds '%s' (%dx%dx%d) and '%s' (%dx%dx%d): ragtag adds equal "
                        "shapes only (no broadcasting)", cur->name, cur->s.w, cur->s.h,
                        cur->s.c, other->name, other->s.w, other->s.h, other->s.c);
    struct imp_layer *l = new_layer(im, n, "shortcut");
    if (!l)
        return RT_ERR_NOMEM;
    imp_key(l, "from = %d", other->layer - (im->nlayers - 1));
    return output(im, n, im->nlayers - 1, cur->s, cur->rank);
}

static int act_node(struct importer *im, const Onnx__NodeProto *n)
{
    static const struct {
        const char *op, *type;
        enum rt_act act;
    } acts[] = {{"Relu", "relu", RT_ACT_RELU},
                {"LeakyRelu", "leaky", RT_ACT_LEAKY},
                {"Sigmoid", "sigmoid", RT_ACT_SIGMOID},
                {"Tanh", "tanh", RT_ACT_TANH}};
    size_t k = 0;
    while (strcmp(acts[k].op, n->op_type) != 0)
        k++;
    const struct imp_value *v;
    float alpha = 0.0f;
    RT_TRY(chained_in(im, n, &v));
    if (acts[k].act == RT_ACT_LEAKY) {
        RT_TRY(rt_onnx_attr_get_float(im->path, n, "alpha", 0.01f, &alpha));
        if (!(alpha >= 0.0f && alpha < 1.0f))
            return NODE_ERR(im, n, "attribute alpha = %g: ragtag's leaky slope is from 0 to "
                            "below 1", (double)alpha);
    }
    struct imp_layer *l = fusable(im, v);
    bool fuse = l && l->act == RT_ACT_IDENTITY && !l->open_bias &&
                (!strcmp(l->type, "conv") || !strcmp(l->type, "dense") ||
                 !strcmp(l->type, "shortcut")) &&
                (acts[k].act != RT_ACT_LEAKY || alpha == 0.1f); /* a fused leaky's slope */
    if (fuse) {
        l->act = acts[k].act;
        return output(im, n, v->layer, v->s, v->rank);
    }
    char num[32];
    if (!(l = new_layer(im, n, acts[k].type)))
        return RT_ERR_NOMEM;
    if (acts[k].act == RT_ACT_LEAKY)
        imp_key(l, "alpha = %s", ftext(alpha, num, sizeof num));
    return output(im, n, im->nlayers - 1, v->s, v->rank);
}

static int bn_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    float eps, mom, *p[4] = {NULL};
    int64_t training;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "epsilon", 1e-5f, &eps));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "momentum", 0.9f, &mom));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "training_mode", 0, &training));
    int64_t spatial;
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "spatial", 1, &spatial)); /* before opset 9 */
    if (!spatial)
        return NODE_ERR(im, n, "attribute spatial = 0: ragtag normalises per channel");
    if (training)
        return NODE_ERR(im, n, "attribute training_mode = 1: export the model in inference "
                        "mode (model.eval())");
    if (!(eps >= 1e-12f && eps <= 1.0f) || !(mom >= 0.0f && mom <= 1.0f))
        return NODE_ERR(im, n, "attribute epsilon = %g or momentum = %g out of ragtag's range "
                        "(epsilon 1e-12 to 1, momentum 0 to 1)", (double)eps, (double)mom);
    int rc = RT_OK, c = v->s.c;
    for (int k = 0; k < 4 && rc == RT_OK; k++)
        rc = const_in(im, n, (size_t)k + 1, (size_t)c, &t, &p[k]);
    struct imp_layer *l = rc == RT_OK ? fusable(im, v) : NULL;
    bool fuse = l && !strcmp(l->type, "conv") && !l->bias && !l->bn &&
                l->act == RT_ACT_IDENTITY && eps == 1e-5f && fabsf(mom - 0.9f) < 1e-6f;
    if (rc == RT_OK && !fuse && !(l = new_layer(im, n, "batchnorm")))
        rc = RT_ERR_NOMEM;
    if (rc < 0) {
        for (int k = 0; k < 4; k++)
            free(p[k]);
        return rc;
    }
    static const char *const names[4] = {"weight", "bias", "running_mean", "running_var"};
    int dims[1] = {c};
    char suffix[32];
    for (int k = 0; k < 4; k++) {
        snprintf(suffix, sizeof suffix, "%s%s", fuse ? "bn." : "", names[k]);
        imp_tensor(im, l, suffix, 1, dims, p[k]);
    }
    if (fuse) { /* the conv's zero bias gives way to the batch norm */
        free(l->t[1].data);
        l->t[1] = l->t[--l->nt];
        l->bn = true;
        imp_key(l, "batch_normalize = 1");
        return output(im, n, v->layer, v->s, v->rank);
    }
    char num[32];
    /* ONNX keeps 1 - momentum as a float: 7 digits undo that rounding */
    imp_key(l, "momentum = %.7g", 1.0 - (double)mom);
    imp_key(l, "eps = %s", ftext(eps, num, sizeof num));
    return output(im, n, im->nlayers - 1, v->s, v->rank);
}

/* A [flatten] layer, or none when only dense layers read the result: then
 * `ragtag export` followed by import gives back the same layers, and the
 * same tensor names. */
static int flatten_layer(struct importer *im, const Onnx__NodeProto *n,
                         const struct imp_value *v)
{
    struct rt_shape flat = {(int)rt_shape_count(v->s), 1, 1};
    static const char *const dense[] = {"Gemm", "MatMul", NULL};
    if (n->n_output == 1 && only_read_by(im, n->output[0], dense))
        return output(im, n, v->layer, flat, 2);
    if (!new_layer(im, n, "flatten"))
        return RT_ERR_NOMEM;
    return output(im, n, im->nlayers - 1, flat, 2);
}

static int flatten_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    int64_t axis;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "axis", 1, &axis));
    if (axis != 1 && axis != 1 - v->rank)
        return NODE_ERR(im, n, "attribute axis = %lld: ragtag flattens to N x values (axis 1)",
                        (long long)axis);
    return flatten_layer(im, n, v);
}

/* Reshape to a constant (batch, values): [0 or -1 or B, C*H*W] or [0, -1];
 * or back to the N x C x H x W ragtag already has (nothing to do). */
static int reshape_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    int64_t *s;
    size_t count;
    RT_TRY(chained_in(im, n, &v));
    if (!has_input(n, 1) || !(t = imp_const_find(im, n->input[1])))
        return NODE_ERR(im, n, "the shape is computed in the graph: ragtag imports Reshape to a "
                        "constant 2-D shape (export with torch.flatten or nn.Flatten)");
    RT_TRY(rt_onnx_tensor_int64s(im->path, n, n->input[1], t, &s, &count));
    long long values = (long long)rt_shape_count(v->s);
    bool same = count == 4 && s[0] >= -1 && s[1] == v->s.c && s[2] == v->s.h && s[3] == v->s.w;
    if (same) { /* N x C x H x W as ragtag holds it already (export writes these) */
        free(s);
        return output(im, n, v->layer, v->s, 4);
    }
    bool ok = count == 2 && ((s[1] == values && s[0] >= -1) || (s[1] == -1 && s[0] == 0));
    long long s0 = count > 0 ? s[0] : 0, s1 = count > 1 ? s[1] : 0;
    free(s);
    if (!ok)
        return NODE_ERR(im, n, "reshapes to %zu dims [%lld, %lld%s]: ragtag reshapes only to "
                        "2-D (batch, %lld)", count, s0, s1, count > 2 ? ", ..." : "", values);
    return flatten_layer(im, n, v);
}

static int dropout_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    float rate, *r;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "ratio", 0.5f, &rate)); /* before opset 12 */
    if (has_input(n, 1)) {
        RT_TRY(const_in(im, n, 1, 1, &t, &r));
        rate = r[0];
        free(r);
    }
    if (has_input(n, 2)) {
        int64_t *mode;
        size_t count;
        if (!(t = imp_const_find(im, n->input[2])))
            return NODE_ERR(im, n, "input 2 (training_mode) is not a constant");
        RT_TRY(rt_onnx_tensor_int64s(im->path, n, n->input[2], t, &mode, &count));
        bool training = count == 1 && mode[0];
        free(mode);
        if (training)
            return NODE_ERR(im, n, "training_mode is true: export in inference mode");
    }
    if (!(rate >= 0.0f && rate < 1.0f))
        return NODE_ERR(im, n, "ratio = %g: ragtag's dropout rate is from 0 to below 1",
                        (double)rate);
    struct imp_layer *l = new_layer(im, n, "dropout");
    if (!l)
        return RT_ERR_NOMEM;
    char num[32];
    imp_key(l, "rate = %s", ftext(rate, num, sizeof num));
    return output(im, n, im->nlayers - 1, v->s, v->rank);
}

static int opset(const struct importer *im)
{
    for (size_t i = 0; i < im->model->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = im->model->opset_import[i];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx"))
            return (int)o->version;
    }
    return 1;
}

/* The final Softmax over the classes: it becomes ragtag's [softmax]. */
static int softmax_node(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    int64_t axis;
    RT_TRY(chained_in(im, n, &v));
    bool old = opset(im) < 13; /* then axis 1 means "flatten from 1 and take rows" */
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "axis", old ? 1 : -1, &axis));
    bool rows = v->rank == 2 ? (axis == 1 || axis == -1) : (old && axis == 1);
    if (!rows)
        return NODE_ERR(im, n, "axis = %lld on a %d-D input: ragtag's [softmax] is over the "
                        "classes of N x classes logits", (long long)axis, v->rank);
    int outputs = 0;
    for (size_t i = 0; i < im->g->n_output; i++)
        outputs += n->n_output && !strcmp(im->g->output[i]->name, n->output[0]);
    if (n->n_output < 1 || !outputs || imp_uses(im, n->output[0]) != outputs)
        return NODE_ERR(im, n, "its output is read by other nodes: ragtag's [softmax] ends "
                        "the model (its output may only be a graph output)");
    im->softmax_out = n->output[0];
    return RT_OK;
}

/* The same zero padding p on H and W (none on N and C), or -1. */
static int even_pad(const int64_t *p, size_t count)
{
    if (count != 8 || p[0] || p[1] || p[4] || p[5])
        return -1;
    for (int k = 3; k < 8; k++)
        if (k != 4 && k != 5 && p[k] != p[2])
            return -1;
    return p[2] >= 0 && p[2] <= 1024 ? (int)p[2] : -1;
}

/* A constant zero Pad: nothing, or padding left to the Conv / AveragePool
 * that reads it (zeros counted in the average: ragtag's avgpool). */
static int pad_node(struct importer *im, const Onnx__NodeProto *n)
{
    static const char *const readers[] = {"Conv", "AveragePool", NULL};
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    char mode[32];
    int64_t *p;
    size_t count;
    RT_TRY(chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_string(im->path, n, "mode", "constant", mode, sizeof mode));
    if (strcmp(mode, "constant") != 0)
        return NODE_ERR(im, n, "attribute mode = %s: ragtag pads with zeros only", mode);
    if (has_input(n, 2)) {
        float *c;
        RT_TRY(const_in(im, n, 2, 1, &t, &c));
        float c0 = c[0];
        free(c);
        if (c0 != 0.0f)
            return NODE_ERR(im, n, "pads with %g: ragtag pads with zeros only", (double)c0);
    }
    if (!has_input(n, 1) || !(t = imp_const_find(im, n->input[1])))
        return NODE_ERR(im, n, "input 1 (pads) must be a constant");
    RT_TRY(rt_onnx_tensor_int64s(im->path, n, n->input[1], t, &p, &count));
    int pad = v->rank == 4 ? even_pad(p, count) : -1;
    bool zero = true;
    for (size_t k = 0; k < count; k++)
        zero = zero && p[k] == 0;
    free(p);
    if (!zero && (pad < 0 || n->n_output != 1 || !only_read_by(im, n->output[0], readers)))
        return NODE_ERR(im, n, "ragtag imports a Pad only as the same zero padding of H and W "
                        "read by Conv or AveragePool alone");
    RT_TRY(output(im, n, v->layer, v->s, v->rank));
    im->values[im->nvalues - 1].pad = v->pad + (zero ? 0 : pad);
    return RT_OK;
}

static int identity_node(struct importer *im, const Onnx__NodeProto *n)
{
    const Onnx__TensorProto *t = has_input(n, 0) ? imp_const_find(im, n->input[0]) : NULL;
    if (t && n->n_output)
        return imp_const_add(im, n->output[0], t);
    const struct imp_value *v;
    RT_TRY(data_in(im, n, 0, &v));
    return output(im, n, v->layer, v->s, v->rank);
}

static int constant_node(struct importer *im, const Onnx__NodeProto *n)
{
    const Onnx__AttributeProto *a = rt_onnx_attr(n, "value");
    if (!a || a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR || !a->t ||
        n->n_output != 1)
        return NODE_ERR(im, n, "ragtag imports Constant nodes with a tensor attribute 'value' "
                        "and one output");
    return imp_const_add(im, n->output[0], a->t);
}

static const struct {
    const char *op;
    int (*fn)(struct importer *im, const Onnx__NodeProto *n);
} converters[] = {
    {"Conv", conv_node},         {"MaxPool", pool_node},
    {"AveragePool", pool_node},  {"GlobalAveragePool", gap_node},
    {"Gemm", gemm_node},         {"MatMul", matmul_node},
    {"Add", add_node},           {"Relu", act_node},
    {"LeakyRelu", act_node},     {"Sigmoid", act_node},
    {"Tanh", act_node},          {"BatchNormalization", bn_node},
    {"Flatten", flatten_node},   {"Reshape", reshape_node},
    {"Dropout", dropout_node},   {"Softmax", softmax_node},
    {"Identity", identity_node}, {"Constant", constant_node},
    {"Pad", pad_node},
};

int imp_node(struct importer *im, const Onnx__NodeProto *n)
{
    if (!n->op_type)
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "has no operator");
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return NODE_ERR(im, n, "operator of domain '%s' not supported by ragtag (supported: "
                        "%s)", n->domain, SUPPORTED);
    for (size_t k = 0; k < sizeof converters / sizeof converters[0]; k++) {
        if (strcmp(converters[k].op, n->op_type) != 0)
            continue;
        bool passive = converters[k].fn == constant_node || converters[k].fn == identity_node;
        if (im->softmax_out && !passive)
            return NODE_ERR(im, n, "comes after the final Softmax (ragtag's [softmax] ends "
                            "the model)");
        return converters[k].fn(im, n);
    }
    return NODE_ERR(im, n, "operator not supported by ragtag (supported: %s)", SUPPORTED);
}
