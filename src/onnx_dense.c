/* onnx_dense.c — the importer's converters of Gemm and MatMul (dense
 * layers) and of Add: a MatMul's bias, or a residual [shortcut]
 * (onnx_import.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

/* ---- dense: Gemm, MatMul, and Add of a constant as MatMul's bias ------------- */

/* A dense layer of `units` outputs with weight w (units x inputs) and bias b. */
static int dense_layer(struct importer *im, const Onnx__NodeProto *n, const struct imp_value *v,
                       int units, float *w, float *b, bool open_bias)
{
    int inputs = (int)rt_shape_count(v->s);
    struct imp_layer *l = imp_new_layer(im, n, "dense");
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
    return imp_output(im, n, im->nlayers - 1, (struct rt_shape){units, 1, 1}, 2);
}

/* B of a Gemm / MatMul: a constant of 2 dims whose `in_dim` is the input's
 * value count; the weights come back as units x inputs, scaled. */
static int dense_weights(struct importer *im, const Onnx__NodeProto *n, int inputs,
                         bool trans, float alpha, float **w, int *units)
{
    const Onnx__TensorProto *t = imp_has_input(n, 1) ? imp_const_find(im, n->input[1]) : NULL;
    if (!t || t->n_dims != 2 || t->dims[trans ? 1 : 0] != inputs || t->dims[trans ? 0 : 1] < 1 ||
        t->dims[trans ? 0 : 1] > 16777216)
        return IMP_ERR(im, n, "input 1 must be a constant %s matrix for an input of %d values",
                        trans ? "units x inputs" : "inputs x units", inputs);
    float *raw;
    RT_TRY(imp_const_in(im, n, 1, 0, &t, &raw));
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

int imp_gemm(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *ct;
    int64_t ta, tb;
    float alpha, beta, *w, *c = NULL;
    int units;
    RT_TRY(imp_chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "transA", 0, &ta));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "transB", 0, &tb));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "alpha", 1.0f, &alpha));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "beta", 1.0f, &beta));
    if (ta)
        return IMP_ERR(im, n, "attribute transA = %lld: ragtag's dense layers take the "
                        "samples as rows", (long long)ta);
    RT_TRY(dense_weights(im, n, (int)rt_shape_count(v->s), tb != 0, alpha, &w, &units));
    float *b = calloc((size_t)units, sizeof *b);
    if (!b || (imp_has_input(n, 2) && imp_const_in(im, n, 2, 0, &ct, &c) < 0)) {
        free(w);
        free(b);
        return b ? RT_ERR_UNSUPPORTED : rt_error(RT_ERR_NOMEM, "out of memory");
    }
    long long cn = c ? rt_onnx_tensor_count(ct) : 0;
    if (c && cn != units && cn != 1) {
        free(w);
        free(b);
        free(c);
        return IMP_ERR(im, n, "input 2 (C) holds %lld values for %d units", cn, units);
    }
    for (int o = 0; c && o < units; o++)
        b[o] = beta * c[cn == 1 ? 0 : o];
    free(c);
    return dense_layer(im, n, v, units, w, b, false);
}

int imp_matmul(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    float *w;
    int units;
    RT_TRY(imp_chained_in(im, n, &v));
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
    RT_TRY(imp_data_in(im, n, (size_t)(1 - k_const), &v));
    struct imp_layer *l = imp_fusable(im, v);
    if (!l || !l->open_bias)
        return IMP_ERR(im, n, "adds a constant: ragtag imports that only as the bias right "
                        "after a MatMul");
    RT_TRY(imp_const_in(im, n, (size_t)k_const, 0, &t, &c));
    long long cn = rt_onnx_tensor_count(t), units = l->t[1].dims[0];
    if (cn != units && cn != 1) {
        free(c);
        return IMP_ERR(im, n, "the bias holds %lld values for %lld units", cn, units);
    }
    for (long long o = 0; o < units; o++)
        l->t[1].data[o] += c[cn == 1 ? 0 : o];
    free(c);
    l->open_bias = false;
    return imp_output(im, n, v->layer, v->s, v->rank);
}

/* ---- the rest ---------------------------------------------------------------- */

int imp_add(struct importer *im, const Onnx__NodeProto *n)
{
    if (n->n_input != 2)
        return rt_onnx_node_error(RT_ERR_FORMAT, im->path, n, "has %zu inputs, not 2",
                                  n->n_input);
    bool c0 = imp_const_find(im, n->input[0]) != NULL, c1 = imp_const_find(im, n->input[1]) != NULL;
    if (c0 != c1)
        return bias_add(im, n, c0 ? 0 : 1);
    const struct imp_value *a, *b;
    RT_TRY(imp_data_in(im, n, 0, &a));
    RT_TRY(imp_data_in(im, n, 1, &b));
    int last = im->nlayers - 1;
    const struct imp_value *cur = a->layer == last ? a : b, *other = a->layer == last ? b : a;
    RT_TRY(imp_chained(im, n, cur));
    if (other->layer < 0)
        return IMP_ERR(im, n, "adds the graph input '%s': ragtag's [shortcut] adds the "
                        "outputs of two layers", other->name);
    if (cur->s.c != other->s.c || cur->s.h != other->s.h || cur->s.w != other->s.w)
        return IMP_ERR(im, n, "adds '%s' (%dx%dx%d) and '%s' (%dx%dx%d): ragtag adds equal "
                        "shapes only (no broadcasting)", cur->name, cur->s.w, cur->s.h,
                        cur->s.c, other->name, other->s.w, other->s.h, other->s.c);
    struct imp_layer *l = imp_new_layer(im, n, "shortcut");
    if (!l)
        return RT_ERR_NOMEM;
    imp_key(l, "from = %d", other->layer - (im->nlayers - 1));
    return imp_output(im, n, im->nlayers - 1, cur->s, cur->rank);
}
