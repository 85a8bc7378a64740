/* onnx_flat.c — the importer's converters of Flatten and Reshape (to N x
 * values, or back to the N x C x H x W ragtag holds) and of the final
 * Softmax (onnx_import.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

/* A [flatten] layer, or none when only dense layers read the result: then
 * `ragtag export` followed by import gives back the same layers, and the
 * same tensor names. */
static int flatten_layer(struct importer *im, const Onnx__NodeProto *n,
                         const struct imp_value *v)
{
    struct rt_shape flat = {(int)rt_shape_count(v->s), 1, 1};
    static const char *const dense[] = {"Gemm", "MatMul", NULL};
    if (n->n_output == 1 && imp_only_read_by(im, n->output[0], dense))
        return imp_output(im, n, v->layer, flat, 2);
    if (!imp_new_layer(im, n, "flatten"))
        return RT_ERR_NOMEM;
    return imp_output(im, n, im->nlayers - 1, flat, 2);
}

int imp_flatten(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    int64_t axis;
    RT_TRY(imp_chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "axis", 1, &axis));
    if (axis != 1 && axis != 1 - v->rank)
        return IMP_ERR(im, n, "attribute axis = %lld: ragtag flattens to N x values (axis 1)",
                        (long long)axis);
    return flatten_layer(im, n, v);
}

/* Reshape to a constant (batch, values): [0 or -1 or B, C*H*W] or [0, -1];
 * or back to the N x C x H x W ragtag already has (nothing to do). */
int imp_reshape(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    int64_t *s;
    size_t count;
    RT_TRY(imp_chained_in(im, n, &v));
    if (!imp_has_input(n, 1) || !(t = imp_const_find(im, n->input[1])))
        return IMP_ERR(im, n, "the shape is computed in the graph: ragtag imports Reshape to a "
                        "constant 2-D shape (export with torch.flatten or nn.Flatten)");
    RT_TRY(rt_onnx_tensor_int64s(im->path, n, n->input[1], t, &s, &count));
    long long values = (long long)rt_shape_count(v->s);
    bool same = count == 4 && s[0] >= -1 && s[1] == v->s.c && s[2] == v->s.h && s[3] == v->s.w;
    if (same) { /* N x C x H x W as ragtag holds it already (export writes these) */
        free(s);
        return imp_output(im, n, v->layer, v->s, 4);
    }
    bool ok = count == 2 && ((s[1] == values && s[0] >= -1) || (s[1] == -1 && s[0] == 0));
    long long s0 = count > 0 ? s[0] : 0, s1 = count > 1 ? s[1] : 0;
    free(s);
    if (!ok)
        return IMP_ERR(im, n, "reshapes to %zu dims [%lld, %lld%s]: ragtag reshapes only to "
                        "2-D (batch, %lld)", count, s0, s1, count > 2 ? ", ..." : "", values);
    return flatten_layer(im, n, v);
}

/* The final Softmax over the classes: it becomes ragtag's [softmax]. */
int imp_softmax(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    int64_t axis;
    RT_TRY(imp_chained_in(im, n, &v));
    bool old = imp_opset(im) < 13; /* then axis 1 means "flatten from 1 and take rows" */
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "axis", old ? 1 : -1, &axis));
    bool rows = v->rank == 2 ? (axis == 1 || axis == -1) : (old && axis == 1);
    if (!rows)
        return IMP_ERR(im, n, "axis = %lld on a %d-D input: ragtag's [softmax] is over the "
                        "classes of N x classes logits", (long long)axis, v->rank);
    int outputs = 0;
    for (size_t i = 0; i < im->g->n_output; i++)
        outputs += n->n_output && !strcmp(im->g->output[i]->name, n->output[0]);
    if (n->n_output < 1 || !outputs || imp_uses(im, n->output[0]) != outputs)
        return IMP_ERR(im, n, "its output is read by other nodes: ragtag's [softmax] ends "
                        "the model (its output may only be a graph output)");
    im->softmax_out = n->output[0];
    return RT_OK;
}
