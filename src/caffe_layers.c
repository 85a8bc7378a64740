/* caffe_layers.c — one Caffe layer into ragtag's model file: a table from
 * Caffe's layer type to its translation. Each translation checks every
 * parameter ragtag cannot express and names it; the section it writes
 * names the Caffe layer in a comment. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caffe-impl.h"
#include "status.h"

enum { NOTE_MULT = 1, NOTE_GLOBAL_STATS = 2, NOTE_ACCURACY = 4, NOTE_LOSS_WEIGHT = 8,
       NOTE_PROPAGATE = 16 };

static const char *const IMPORTED =
    "Convolution, InnerProduct, Pooling, ReLU, Sigmoid, TanH, Dropout, BatchNorm, Scale after "
    "BatchNorm, Eltwise SUM, Flatten, Softmax, SoftmaxWithLoss; Data and Input layers give the "
    "input";

static const char *missing_blob(int layer)
{
    return layer == 0    ? " (the net's input)"
           : layer == -1 ? " (the labels)"
           : layer == -2 ? " (a value a later in-place layer replaced)"
           : layer == -3 ? " (which no layer makes)"
                         : "";
}

/* A ragtag layer reads the previous layer's output and makes one output. */
static int chain(struct caffe_net *n, const Caffe__LayerParameter *l, size_t bottoms)
{
    if (l->n_bottom != bottoms)
        return caffe_layer_error(n, l, "takes %zu inputs (expected %zu)", l->n_bottom, bottoms);
    if (l->n_top != 1)
        return caffe_layer_error(n, l, "makes %zu outputs (ragtag's layers make one)", l->n_top);
    if (strcmp(l->bottom[0], n->top) != 0)
        return caffe_layer_error(n, l, "reads '%s'%s, not the previous layer's output '%s': "
                                       "ragtag's models are a chain of layers (plus [shortcut] "
                                       "adds), so branches cannot be imported", l->bottom[0],
                                 missing_blob(caffe_blob_layer(n, l->bottom[0])), n->top);
    return RT_OK;
}

static void section(struct caffe_net *n, const char *type, const Caffe__LayerParameter *l)
{
    caffe_cfg_printf(n, "\n[%s]%*s# caffe: %s (%s)\n", type, (int)(16 - strlen(type)), "",
                     l->name, l->type);
}

/* The section just written is the new output. */
static int advance(struct caffe_net *n, const Caffe__LayerParameter *l, struct rt_shape s,
                   bool foldable)
{
    n->index++;
    n->shape = s;
    n->top = l->top[0];
    n->foldable = foldable;
    n->bn_map = -1;
    return caffe_blob_set(n, l->top[0], n->index);
}

/* One value for both axes: a repeated field (0 to 2 equal values) or its
 * _h / _w pair. */
static int square(struct caffe_net *n, const Caffe__LayerParameter *l, const char *what,
                  size_t nv, const uint32_t *v, bool has_h, uint32_t h, bool has_w, uint32_t w,
                  int def, int *out)
{
    if (has_h != has_w)
        return caffe_layer_error(n, l, "%s_h and %s_w must be given together", what, what);
    if (has_h && nv > 0)
        return caffe_layer_error(n, l, "both %s and %s_h / %s_w", what, what, what);
    if (has_h && h != w)
        return caffe_layer_error(n, l, "%s_h = %u and %s_w = %u: ragtag's %s is the same on "
                                       "both axes", what, h, what, w, what);
    if (nv > 2 || (nv == 2 && v[0] != v[1]))
        return caffe_layer_error(n, l, "%s = %u, %u: ragtag's %s is the same on both axes "
                                       "(and 2-D)", what, v[0], v[1], what);
    long val = has_h ? (long)h : nv > 0 ? (long)v[0] : def;
    if (val > 4096)
        return caffe_layer_error(n, l, "%s = %ld is too large (ragtag accepts up to 4096)", what,
                                 val);
    *out = (int)val;
    return RT_OK;
}

static int conv_shape(struct caffe_net *n, const Caffe__LayerParameter *l,
                      const Caffe__ConvolutionParameter *p, int *k, int *s, int *pad)
{
    RT_TRY(square(n, l, "kernel", p->n_kernel_size, p->kernel_size, p->has_kernel_h, p->kernel_h,
                  p->has_kernel_w, p->kernel_w, 0, k));
    RT_TRY(square(n, l, "stride", p->n_stride, p->stride, p->has_stride_h, p->stride_h,
                  p->has_stride_w, p->stride_w, 1, s));
    RT_TRY(square(n, l, "pad", p->n_pad, p->pad, p->has_pad_h, p->pad_h, p->has_pad_w, p->pad_w,
                  0, pad));
    if (*k < 1 || *s < 1)
        return caffe_layer_error(n, l, "convolution_param needs kernel_size and stride >= 1");
    for (size_t i = 0; i < p->n_dilation; i++)
        if (p->dilation[i] != 1)
            return caffe_layer_error(n, l, "convolution_param.dilation = %u: ragtag has no "
                                           "dilated convolution", p->dilation[i]);
    if (p->group != 1)
        return caffe_layer_error(n, l, "convolution_param.group = %u: ragtag has no grouped "
                                       "convolution", p->group);
    if (p->axis != 1)
        return caffe_layer_error(n, l, "convolution_param.axis = %d: ragtag convolves over the "
                                       "channels (axis 1)", p->axis);
    if (n->shape.h + 2 * *pad < *k || n->shape.w + 2 * *pad < *k)
        return caffe_layer_error(n, l, "kernel %d is larger than its padded %dx%d input", *k,
                                 n->shape.w, n->shape.h);
    return RT_OK;
}

static int conv(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    RT_TRY(chain(n, l, 1));
    const Caffe__ConvolutionParameter *p = l->convolution_param;
    if (!p || !p->has_num_output || p->num_output < 1 || p->num_output > 65536)
        return caffe_layer_error(n, l, "convolution_param.num_output must be 1 to 65536");
    int k, s, pad;
    RT_TRY(conv_shape(n, l, p, &k, &s, &pad));
    section(n, "conv", l);
    caffe_cfg_printf(n, "filters = %u\nsize = %d\nstride = %d\npad = %d\n", p->num_output, k, s,
                     pad);
    struct caffe_map *m = caffe_map_add(n, CAFFE_CONV, l->name);
    if (!m)
        return RT_ERR_NOMEM;
    snprintf(m->tensor, sizeof m->tensor, "conv%d.", n->index + 1);
    m->bias = p->bias_term;
    struct rt_shape o = {(int)p->num_output, (n->shape.h + 2 * pad - k) / s + 1,
                         (n->shape.w + 2 * pad - k) / s + 1};
    return advance(n, l, o, true);
}

static int dense(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    RT_TRY(chain(n, l, 1));
    const Caffe__InnerProductParameter *p = l->inner_product_param;
    if (!p || !p->has_num_output || p->num_output < 1 || p->num_output > (1u << 24))
        return caffe_layer_error(n, l, "inner_product_param.num_output must be 1 to %d", 1 << 24);
    if (p->axis != 1)
        return caffe_layer_error(n, l, "inner_product_param.axis = %d: ragtag flattens each "
                                       "sample whole (axis 1)", p->axis);
    section(n, "dense", l);
    caffe_cfg_printf(n, "units = %u\n", p->num_output);
    struct caffe_map *m = caffe_map_add(n, CAFFE_DENSE, l->name);
    if (!m)
        return RT_ERR_NOMEM;
    snprintf(m->tensor, sizeof m->tensor, "dense%d.", n->index + 1);
    m->bias = p->bias_term;
    m->transpose = p->transpose;
    return advance(n, l, (struct rt_shape){(int)p->num_output, 1, 1}, true);
}

/* Caffe's pooled size: rounded up unless round_mode is FLOOR, and a last
 * window that would start in the padding is dropped. */
static int caffe_pooled(int in, int k, int s, int pad, bool floor_mode)
{
    int span = in + 2 * pad - k;
    int out = (floor_mode ? span / s : (span + s - 1) / s) + 1;
    if (pad > 0 && (out - 1) * s >= in + pad)
        out--;
    return out;
}

static int global_pool(struct caffe_net *n, const Caffe__LayerParameter *l, bool max)
{
    if (!max) {
        section(n, "globalavgpool", l);
    } else if (n->shape.h == n->shape.w) {
        section(n, "maxpool", l);
        caffe_cfg_printf(n, "size = %d\nstride = %d\n", n->shape.h, n->shape.h);
    } else {
        return caffe_layer_error(n, l, "global MAX pooling of a %dx%d input: ragtag's max "
                                       "pooling is square", n->shape.w, n->shape.h);
    }
    return advance(n, l, (struct rt_shape){n->shape.c, 1, 1}, false);
}

static int pool(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    RT_TRY(chain(n, l, 1));
    const Caffe__PoolingParameter *p = l->pooling_param;
    if (!p)
        return caffe_layer_error(n, l, "has no pooling_param");
    if (p->pool == CAFFE__POOLING_PARAMETER__POOL_METHOD__STOCHASTIC)
        return caffe_layer_error(n, l, "pooling_param.pool = STOCHASTIC: ragtag pools MAX or AVE");
    bool max = p->pool == CAFFE__POOLING_PARAMETER__POOL_METHOD__MAX;
    if (p->global_pooling)
        return global_pool(n, l, max);
    int k, s, pad;
    RT_TRY(square(n, l, "kernel", p->has_kernel_size, &p->kernel_size, p->has_kernel_h,
                  p->kernel_h, p->has_kernel_w, p->kernel_w, 0, &k));
    RT_TRY(square(n, l, "stride", p->has_stride, &p->stride, p->has_stride_h, p->stride_h,
                  p->has_stride_w, p->stride_w, 1, &s));
    RT_TRY(square(n, l, "pad", p->has_pad, &p->pad, p->has_pad_h, p->pad_h, p->has_pad_w,
                  p->pad_w, 0, &pad));
    if (k < 1 || s < 1 || pad >= k || n->shape.h + 2 * pad < k || n->shape.w + 2 * pad < k)
        return caffe_layer_error(n, l, "kernel %d, stride %d, pad %d do not fit its %dx%d input "
                                       "(pad must be smaller than the kernel)", k, s, pad,
                                 n->shape.w, n->shape.h);
    bool fl = p->round_mode == CAFFE__POOLING_PARAMETER__ROUND_MODE__FLOOR;
    int ch = caffe_pooled(n->shape.h, k, s, pad, fl), cw = caffe_pooled(n->shape.w, k, s, pad, fl);
    struct rt_shape o = {n->shape.c, (n->shape.h + 2 * pad - k) / s + 1,
                         (n->shape.w + 2 * pad - k) / s + 1};
    if (ch != o.h || cw != o.w)
        return caffe_layer_error(n, l, "Caffe rounds this pooling's output up to %dx%d where "
                                       "ragtag rounds down to %dx%d (input %dx%d, kernel %d, "
                                       "stride %d, pad %d): set pooling_param.round_mode: FLOOR "
                                       "or choose sizes that divide evenly", cw, ch, o.w, o.h,
                                 n->shape.w, n->shape.h, k, s, pad);
    section(n, max ? "maxpool" : "avgpool", l);
    caffe_cfg_printf(n, "size = %d\nstride = %d\npad = %d\n", k, s, pad);
    return advance(n, l, o, false);
}

/* An activation joins the section before it when that one takes an
 * `activation` key, else it is a section of its own. */
static int activation(struct caffe_net *n, const Caffe__LayerParameter *l, const char *act,
                      float alpha)
{
    RT_TRY(chain(n, l, 1));
    bool is_leaky = !strcmp(act, "leaky");
    if (n->foldable && (!is_leaky || alpha == 0.1f)) {
        caffe_cfg_printf(n, "activation = %s%*s# caffe: %s (%s)\n", act, (int)(8 - strlen(act)),
                         "", l->name, l->type);
        n->foldable = false;
        if (strcmp(l->top[0], l->bottom[0]) != 0) {
            /* the value before the activation is gone */
            RT_TRY(caffe_blob_set(n, l->bottom[0], -2));
            n->top = l->top[0];
            return caffe_blob_set(n, l->top[0], n->index);
        }
        return RT_OK;
    }
    section(n, act, l);
    if (is_leaky)
        caffe_cfg_printf(n, "alpha = %.9g\n", caffe_decimal(alpha));
    return advance(n, l, n->shape, false);
}

static int relu(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    float slope = l->relu_param ? l->relu_param->negative_slope : 0.0f;
    if (slope == 0.0f)
        return activation(n, l, "relu", 0.0f);
    if (!(slope > 0.0f && slope < 1.0f))
        return caffe_layer_error(n, l, "relu_param.negative_slope = %g: ragtag's leaky slope is "
                                       "0 to below 1", slope);
    return activation(n, l, "leaky", slope);
}

static int sigmoid(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    return activation(n, l, "sigmoid", 0.0f);
}

static int tanh_layer(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    return activation(n, l, "tanh", 0.0f);
}

static int dropout(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    RT_TRY(chain(n, l, 1));
    const Caffe__DropoutParameter *p = l->dropout_param;
    float rate = p ? p->dropout_ratio : 0.5f;
    if (!(rate >= 0.0f && rate < 1.0f))
        return caffe_layer_error(n, l, "dropout_param.dropout_ratio = %g (accepted: 0 to below "
                                       "1)", rate);
    section(n, "dropout", l);
    caffe_cfg_printf(n, "rate = %.9g\n", caffe_decimal(rate));
    return advance(n, l, n->shape, false);
}

static int batchnorm(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    RT_TRY(chain(n, l, 1));
    const Caffe__BatchNormParameter *p = l->batch_norm_param;
    float eps = p ? p->eps : 1e-5f, maf = p ? p->moving_average_fraction : 0.999f;
    if (!(eps >= 1e-12f && eps <= 1.0f))
        return caffe_layer_error(n, l, "batch_norm_param.eps = %g (ragtag accepts 1e-12 to 1)",
                                 eps);
    if (!(maf >= 0.0f && maf <= 1.0f))
        return caffe_layer_error(n, l, "batch_norm_param.moving_average_fraction = %g "
                                       "(accepted: 0 to 1)", maf);
    if (p && p->has_use_global_stats && !(n->noted & NOTE_GLOBAL_STATS)) {
        n->noted |= NOTE_GLOBAL_STATS;
        caffe_note(n, "batch_norm_param.use_global_stats is ignored: ragtag normalises with "
                      "the batch's statistics in training and the running ones in evaluation");
    }
    section(n, "batchnorm", l);
    /* Caffe: running = maf * running + batch (then divided by the scale
     * factor); ragtag: running = (1 - momentum) * running + momentum * batch */
    caffe_cfg_printf(n, "momentum = %.9g\neps = %.9g\n", 1.0 - caffe_decimal(maf), caffe_decimal(eps));
    struct caffe_map *m = caffe_map_add(n, CAFFE_BN, l->name);
    if (!m)
        return RT_ERR_NOMEM;
    snprintf(m->tensor, sizeof m->tensor, "bn%d.", n->index + 1);
    RT_TRY(advance(n, l, n->shape, false));
    n->bn_map = n->nmaps - 1;
    return RT_OK;
}

/* Caffe's BatchNorm has no gamma and beta: the Scale layer after it does. */
static int scale(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    RT_TRY(chain(n, l, 1));
    if (n->bn_map < 0)
        return caffe_layer_error(n, l, "does not follow a BatchNorm layer: ragtag has no "
                                       "standalone per-channel scale");
    const Caffe__ScaleParameter *p = l->scale_param;
    if (p && (p->axis != 1 || p->num_axes != 1))
        return caffe_layer_error(n, l, "scale_param.axis = %d, num_axes = %d: ragtag scales "
                                       "per channel (1, 1)", p->axis, p->num_axes);
    struct caffe_map *m = &n->maps[n->bn_map];
    snprintf(m->scale, sizeof m->scale, "%s", l->name);
    m->bias = p && p->bias_term;
    caffe_cfg_printf(n, "# caffe: %s (Scale): the batch norm's gamma%s\n", l->name,
                     m->bias ? " and beta" : " (beta 0)");
    n->bn_map = -1;
    n->top = l->top[0];
    return caffe_blob_set(n, l->top[0], n->index);
}

static int eltwise(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    const Caffe__EltwiseParameter *p = l->eltwise_param;
    if (p && p->operation != CAFFE__ELTWISE_PARAMETER__ELTWISE_OP__SUM)
        return caffe_layer_error(n, l, "eltwise_param.operation = %s: ragtag's [shortcut] adds "
                                       "(SUM)", p->operation == 0 ? "PROD" : "MAX");
    for (size_t i = 0; p && i < p->n_coeff; i++)
        if (p->coeff[i] != 1.0f)
            return caffe_layer_error(n, l, "eltwise_param.coeff = %g: ragtag's [shortcut] adds "
                                           "with coefficients 1", p->coeff[i]);
    if (l->n_bottom != 2 || l->n_top != 1)
        return caffe_layer_error(n, l, "adds %zu inputs into %zu outputs: ragtag's [shortcut] "
                                       "adds two into one", l->n_bottom, l->n_top);
    int mine = !strcmp(l->bottom[0], n->top) ? 0 : !strcmp(l->bottom[1], n->top) ? 1 : -1;
    if (mine < 0)
        return caffe_layer_error(n, l, "adds '%s' and '%s', neither of which is the previous "
                                       "layer's output '%s'", l->bottom[0], l->bottom[1], n->top);
    const char *other = l->bottom[1 - mine];
    int j = caffe_blob_layer(n, other);
    if (j < 1)
        return caffe_layer_error(n, l, "adds '%s'%s: ragtag's [shortcut] adds the output of an "
                                       "earlier layer", other, missing_blob(j));
    section(n, "shortcut", l);
    caffe_cfg_printf(n, "from = %d\n", j - (n->index + 1));
    return advance(n, l, n->shape, true);
}

static int flatten(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    RT_TRY(chain(n, l, 1));
    const Caffe__FlattenParameter *p = l->flatten_param;
    if (p && (p->axis != 1 || p->end_axis != -1))
        return caffe_layer_error(n, l, "flatten_param.axis = %d, end_axis = %d: ragtag flattens "
                                       "each sample whole (1, -1)", p->axis, p->end_axis);
    section(n, "flatten", l);
    return advance(n, l, (struct rt_shape){(int)caffe_shape_count(n->shape), 1, 1}, false);
}

static int softmax(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    bool loss = !strcmp(l->type, "SoftmaxWithLoss");
    RT_TRY(chain(n, l, loss ? 2 : 1));
    if (l->softmax_param && l->softmax_param->axis != 1)
        return caffe_layer_error(n, l, "softmax_param.axis = %d: ragtag's softmax is over the "
                                       "classes (axis 1)", l->softmax_param->axis);
    if (l->loss_param && l->loss_param->has_ignore_label)
        return caffe_layer_error(n, l, "loss_param.ignore_label: ragtag counts every label");
    section(n, "softmax", l);
    n->classes = (int)caffe_shape_count(n->shape);
    n->index++;
    n->ended = true;
    return RT_OK;
}

static void skipped(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    if (!strcmp(l->type, "Accuracy") && !(n->noted & NOTE_ACCURACY)) {
        n->noted |= NOTE_ACCURACY;
        caffe_note(n, "skipped layer '%s' (Accuracy): ragtag reports accuracy itself", l->name);
    }
}

/* Training knobs of Caffe's that ragtag has no place for: noted once. */
static void param_note(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    for (size_t i = 0; i < l->n_loss_weight && !(n->noted & NOTE_LOSS_WEIGHT); i++)
        if (l->loss_weight[i] != (strstr(l->type, "Loss") ? 1.0f : 0.0f)) {
            n->noted |= NOTE_LOSS_WEIGHT;
            caffe_note(n, "loss_weight ignored (first in '%s'): ragtag's one loss is the "
                          "softmax cross-entropy, weight 1", l->name);
        }
    for (size_t i = 0; i < l->n_propagate_down && !(n->noted & NOTE_PROPAGATE); i++)
        if (!l->propagate_down[i] && i == 0) {
            n->noted |= NOTE_PROPAGATE;
            caffe_note(n, "propagate_down: false ignored (first in '%s'): ragtag computes "
                          "every gradient", l->name);
        }
    for (size_t i = 0; i < l->n_param && !(n->noted & NOTE_MULT); i++)
        if (l->param[i]->lr_mult != 1.0f || l->param[i]->decay_mult != 1.0f) {
            n->noted |= NOTE_MULT;
            caffe_note(n, "param { lr_mult decay_mult } ignored (first in '%s'): ragtag uses one "
                          "learning rate and weight decay for every tensor", l->name);
        }
}

static const struct {
    const char *type;
    int (*fn)(struct caffe_net *n, const Caffe__LayerParameter *l);
} table[] = {
    {"Convolution", conv},  {"InnerProduct", dense}, {"Pooling", pool},
    {"ReLU", relu},         {"Sigmoid", sigmoid},    {"TanH", tanh_layer},
    {"Dropout", dropout},   {"BatchNorm", batchnorm}, {"Scale", scale},
    {"Eltwise", eltwise},   {"Flatten", flatten},    {"Softmax", softmax},
    {"SoftmaxWithLoss", softmax},
};

int caffe_layer_translate(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    if (!strcmp(l->type, "Accuracy") || !strcmp(l->type, "Silence")) {
        skipped(n, l);
        return RT_OK;
    }
    if (n->ended)
        return caffe_layer_error(n, l, "comes after the softmax: ragtag's [softmax] (softmax + "
                                       "cross-entropy) is the model's last layer");
    if (caffe_is_data_layer(l->type))
        return caffe_layer_error(n, l, "a data layer after the first layers: ragtag's models "
                                       "have one input");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(l->type, table[i].type)) {
            param_note(n, l);
            return table[i].fn(n, l);
        }
    return caffe_layer_error(n, l, "ragtag has no layer of this type (it imports %s)", IMPORTED);
}
