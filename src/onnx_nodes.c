/* onnx_nodes.c — what the importer's converters share (their inputs, outputs,
 * constants, fusion) and the table from ONNX operator to converter; the
 * converters are in onnx_window.c (Conv, pools, Pad), onnx_dense.c (Gemm,
 * MatMul, Add), onnx_values.c (activations, batch norm, dropout) and
 * onnx_flat.c (Flatten, Reshape, Softmax). What ragtag cannot express is an
 * error naming the node, its operator and the attribute or input at fault
 * (onnx_import.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

static const char SUPPORTED[] =
    "Conv, Gemm, MatMul (+ Add), Relu, LeakyRelu, Sigmoid, Tanh, MaxPool, AveragePool, "
    "GlobalAveragePool, BatchNormalization, Flatten, Reshape (to 2-D), Dropout, Add, Softmax, "
    "Identity, Constant, Pad (zeros, before Conv or AveragePool)";

/* The shortest decimal text that reads back as the same float ("0.1", not
 * the 0.100000024 that 9 digits give): for the model file's keys. */
const char *imp_ftext(float v, char *buf, size_t n)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, n, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v)
            break;
    }
    return buf;
}

/* ---- inputs and outputs ------------------------------------------------------ */

bool imp_has_input(const Onnx__NodeProto *n, size_t k)
{
    return k < n->n_input && n->input[k][0];
}

/* Data input k: a value some layer (or the graph input) produced. */
int imp_data_in(struct importer *im, const Onnx__NodeProto *n, size_t k,
                   const struct imp_value **v)
{
    if (!imp_has_input(n, k))
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "input %zu is missing", k);
    if ((*v = imp_value_find(im, n->input[k])))
        return RT_OK;
    if (imp_const_find(im, n->input[k]))
        return IMP_ERR(im, n, "input '%s' is a constant: ragtag imports this operator only "
                        "on the output of the previous layer", n->input[k]);
    return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "input '%s' is not the output of "
                              "an earlier node nor a graph input", n->input[k]);
}

/* v must be the previous layer's output: ragtag's layers form a chain. */
int imp_chained(struct importer *im, const Onnx__NodeProto *n, const struct imp_value *v)
{
    if (v->layer == im->nlayers - 1)
        return RT_OK;
    return IMP_ERR(im, n, "input '%s' is not the previous layer's output (ragtag's layers "
                    "form a chain; only Add may also take an earlier output)", v->name);
}

int imp_chained_in(struct importer *im, const Onnx__NodeProto *n, const struct imp_value **v)
{
    RT_TRY(imp_data_in(im, n, 0, v));
    return imp_chained(im, n, *v);
}

/* Output 0 becomes a value of `layer`; another output must not be read. */
int imp_output(struct importer *im, const Onnx__NodeProto *n, int layer, struct rt_shape s,
                  int rank)
{
    if (n->n_output < 1 || !n->output[0][0])
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "has no output");
    for (size_t k = 1; k < n->n_output; k++)
        if (n->output[k][0] && imp_uses(im, n->output[k]))
            return IMP_ERR(im, n, "output %zu ('%s') is used: ragtag computes only the "
                            "first output of %s", k, n->output[k], n->op_type);
    return imp_value_add(im, n->output[0], layer, s, rank);
}

/* Constant input k as floats; `want` values unless 0. */
int imp_const_in(struct importer *im, const Onnx__NodeProto *n, size_t k, size_t want,
                    const Onnx__TensorProto **t, float **data)
{
    size_t count;
    if (!imp_has_input(n, k) || !(*t = imp_const_find(im, n->input[k])))
        return IMP_ERR(im, n, "input %zu%s%s%s must be a constant (an initializer)", k,
                        imp_has_input(n, k) ? " ('" : "", imp_has_input(n, k) ? n->input[k] : "",
                        imp_has_input(n, k) ? "')" : "");
    RT_TRY(rt_onnx_tensor_floats(im->path, n, n->input[k], *t, data, &count));
    if (want && count != want) {
        free(*data);
        return IMP_ERR(im, n, "input %zu ('%s') holds %zu values, expected %zu", k,
                        n->input[k], count, want);
    }
    return RT_OK;
}

struct imp_layer *imp_new_layer(struct importer *im, const Onnx__NodeProto *n,
                                   const char *type)
{
    struct imp_layer *l = imp_layer_add(im, n, type);
    if (!l)
        rt_error(RT_ERR_NOMEM, "out of memory importing node %s", rt_onnx_node_label(n));
    return l;
}

/* The last layer, when v is its output and nothing else reads v: a node on
 * v may then be fused into it. */
struct imp_layer *imp_fusable(struct importer *im, const struct imp_value *v)
{
    if (v->layer < 0 || v->layer != im->nlayers - 1 || imp_uses(im, v->name) != 1)
        return NULL;
    return &im->layers[v->layer];
}

/* Whether every reader of `value` is one of the operators in `ops` (a
 * NULL-terminated list) and no graph output is it. */
bool imp_only_read_by(const struct importer *im, const char *value, const char *const *ops)
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

int imp_opset(const struct importer *im)
{
    for (size_t i = 0; i < im->model->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = im->model->opset_import[i];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx"))
            return (int)o->version;
    }
    return 1;
}

static int identity_node(struct importer *im, const Onnx__NodeProto *n)
{
    const Onnx__TensorProto *t = imp_has_input(n, 0) ? imp_const_find(im, n->input[0]) : NULL;
    if (t && n->n_output)
        return imp_const_add(im, n->output[0], t);
    const struct imp_value *v;
    RT_TRY(imp_data_in(im, n, 0, &v));
    return imp_output(im, n, v->layer, v->s, v->rank);
}

static int constant_node(struct importer *im, const Onnx__NodeProto *n)
{
    const Onnx__AttributeProto *a = rt_onnx_attr(n, "value");
    if (!a || a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR || !a->t ||
        n->n_output != 1)
        return IMP_ERR(im, n, "ragtag imports Constant nodes with a tensor attribute 'value' "
                        "and one output");
    return imp_const_add(im, n->output[0], a->t);
}

static const struct {
    const char *op;
    int (*fn)(struct importer *im, const Onnx__NodeProto *n);
} converters[] = {
    {"Conv", imp_conv},             {"MaxPool", imp_pool},
    {"AveragePool", imp_pool},      {"GlobalAveragePool", imp_gap},
    {"Gemm", imp_gemm},             {"MatMul", imp_matmul},
    {"Add", imp_add},               {"Relu", imp_act},
    {"LeakyRelu", imp_act},         {"Sigmoid", imp_act},
    {"Tanh", imp_act},              {"BatchNormalization", imp_bn},
    {"Flatten", imp_flatten},       {"Reshape", imp_reshape},
    {"Dropout", imp_dropout},       {"Softmax", imp_softmax},
    {"Identity", identity_node},    {"Constant", constant_node},
    {"Pad", imp_pad},
};

int imp_node(struct importer *im, const Onnx__NodeProto *n)
{
    if (!n->op_type)
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "has no operator");
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return IMP_ERR(im, n, "operator of domain '%s' not supported by ragtag (supported: "
                        "%s)", n->domain, SUPPORTED);
    for (size_t k = 0; k < sizeof converters / sizeof converters[0]; k++) {
        if (strcmp(converters[k].op, n->op_type) != 0)
            continue;
        bool passive = converters[k].fn == constant_node || converters[k].fn == identity_node;
        if (im->softmax_out && !passive)
            return IMP_ERR(im, n, "comes after the final Softmax (ragtag's [softmax] ends "
                            "the model)");
        return converters[k].fn(im, n);
    }
    return IMP_ERR(im, n, "operator not supported by ragtag (supported: %s)", SUPPORTED);
}
