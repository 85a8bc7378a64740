/* onnx_values.c — the importer's converters of operators applied value by
 * value or channel by channel: activations (fused into the layer before them
 * when they can be), BatchNormalization (fused into a conv without bias when
 * it can be) and Dropout (onnx_import.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

int imp_act(struct importer *im, const Onnx__NodeProto *n)
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
    RT_TRY(imp_chained_in(im, n, &v));
    if (acts[k].act == RT_ACT_LEAKY) {
        RT_TRY(rt_onnx_attr_get_float(im->path, n, "alpha", 0.01f, &alpha));
        if (!(alpha >= 0.0f && alpha < 1.0f))
            return IMP_ERR(im, n, "attribute alpha = %g: ragtag's leaky slope is from 0 to "
                            "below 1", (double)alpha);
    }
    struct imp_layer *l = imp_fusable(im, v);
    bool fuse = l && l->act == RT_ACT_IDENTITY && !l->open_bias &&
                (!strcmp(l->type, "conv") || !strcmp(l->type, "dense") ||
                 !strcmp(l->type, "shortcut")) &&
                (acts[k].act != RT_ACT_LEAKY || alpha == 0.1f); /* a fused leaky's slope */
    if (fuse) {
        l->act = acts[k].act;
        return imp_output(im, n, v->layer, v->s, v->rank);
    }
    char num[32];
    if (!(l = imp_new_layer(im, n, acts[k].type)))
        return RT_ERR_NOMEM;
    if (acts[k].act == RT_ACT_LEAKY)
        imp_key(l, "alpha = %s", imp_ftext(alpha, num, sizeof num));
    return imp_output(im, n, im->nlayers - 1, v->s, v->rank);
}

int imp_bn(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    float eps, mom, *p[4] = {NULL};
    int64_t training;
    RT_TRY(imp_chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "epsilon", 1e-5f, &eps));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "momentum", 0.9f, &mom));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "training_mode", 0, &training));
    int64_t spatial;
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "spatial", 1, &spatial)); /* before opset 9 */
    if (!spatial)
        return IMP_ERR(im, n, "attribute spatial = 0: ragtag normalises per channel");
    if (training)
        return IMP_ERR(im, n, "attribute training_mode = 1: export the model in inference "
                        "mode (model.eval())");
    if (!(eps >= 1e-12f && eps <= 1.0f) || !(mom >= 0.0f && mom <= 1.0f))
        return IMP_ERR(im, n, "attribute epsilon = %g or momentum = %g out of ragtag's range "
                        "(epsilon 1e-12 to 1, momentum 0 to 1)", (double)eps, (double)mom);
    int rc = RT_OK, c = v->s.c;
    for (int k = 0; k < 4 && rc == RT_OK; k++)
        rc = imp_const_in(im, n, (size_t)k + 1, (size_t)c, &t, &p[k]);
    struct imp_layer *l = rc == RT_OK ? imp_fusable(im, v) : NULL;
    bool fuse = l && !strcmp(l->type, "conv") && !l->bias && !l->bn &&
                l->act == RT_ACT_IDENTITY && eps == 1e-5f && fabsf(mom - 0.9f) < 1e-6f;
    if (rc == RT_OK && !fuse && !(l = imp_new_layer(im, n, "batchnorm")))
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
        return imp_output(im, n, v->layer, v->s, v->rank);
    }
    char num[32];
    /* ONNX keeps 1 - momentum as a float: 7 digits undo that rounding */
    imp_key(l, "momentum = %.7g", 1.0 - (double)mom);
    imp_key(l, "eps = %s", imp_ftext(eps, num, sizeof num));
    return imp_output(im, n, im->nlayers - 1, v->s, v->rank);
}

int imp_dropout(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    float rate, *r;
    RT_TRY(imp_chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_float(im->path, n, "ratio", 0.5f, &rate)); /* before opset 12 */
    if (imp_has_input(n, 1)) {
        RT_TRY(imp_const_in(im, n, 1, 1, &t, &r));
        rate = r[0];
        free(r);
    }
    if (imp_has_input(n, 2)) {
        int64_t *mode;
        size_t count;
        if (!(t = imp_const_find(im, n->input[2])))
            return IMP_ERR(im, n, "input 2 (training_mode) is not a constant");
        RT_TRY(rt_onnx_tensor_int64s(im->path, n, n->input[2], t, &mode, &count));
        bool training = count == 1 && mode[0];
        free(mode);
        if (training)
            return IMP_ERR(im, n, "training_mode is true: export in inference mode");
    }
    if (!(rate >= 0.0f && rate < 1.0f))
        return IMP_ERR(im, n, "ratio = %g: ragtag's dropout rate is from 0 to below 1",
                        (double)rate);
    struct imp_layer *l = imp_new_layer(im, n, "dropout");
    if (!l)
        return RT_ERR_NOMEM;
    char num[32];
    imp_key(l, "rate = %s", imp_ftext(rate, num, sizeof num));
    return imp_output(im, n, im->nlayers - 1, v->s, v->rank);
}
