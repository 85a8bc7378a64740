/* batchnorm.c — [batchnorm] and the batch-norm part that [conv]
 * batch_normalize = 1 reuses. Train mode normalises with the batch's
 * statistics and updates the running ones; inference uses the running
 * statistics (PyTorch's convention: momentum weighs the new batch). */
#include "config.h"

#include <stdio.h>

#include "layer.h"
#include "status.h"

int rt_bn_part_setup(struct rt_bn_part *b, struct rt_layer_setup *su, struct rt_layer *l,
                     const char *prefix, int c, int hw, float eps, float momentum)
{
    char name[48];
    int dims[1] = {c};
    b->shape.c = c;
    b->shape.hw = hw;
    b->shape.eps = eps;
    b->shape.momentum = momentum;
    struct rt_init_spec one = {.kind = RT_INIT_CONST, .value = 1.0f};
    struct rt_init_spec zero = {.kind = RT_INIT_CONST, .value = 0.0f};
    snprintf(name, sizeof name, "%sweight", prefix);
    b->gamma = rt_layer_param(su, l, name, 1, dims, one);
    snprintf(name, sizeof name, "%sbias", prefix);
    b->beta = rt_layer_param(su, l, name, 1, dims, zero);
    snprintf(name, sizeof name, "%srunning_mean", prefix);
    b->mean = rt_layer_state(su, l, name, 1, dims, 0.0f);
    snprintf(name, sizeof name, "%srunning_var", prefix);
    b->var = rt_layer_state(su, l, name, 1, dims, 1.0f);
    if (b->gamma == RT_LAYER_BAD_OFFSET || b->beta == RT_LAYER_BAD_OFFSET ||
        b->mean == RT_LAYER_BAD_OFFSET || b->var == RT_LAYER_BAD_OFFSET)
        return RT_ERR_NOMEM;
    return RT_OK;
}

int rt_bn_part_alloc(struct rt_bn_part *b, rt_dev *dev)
{
    b->saved = rt_buf_new(dev, 2 * (size_t)b->shape.c * sizeof(float));
    return b->saved ? RT_OK : RT_ERR_NOMEM;
}

void rt_bn_part_release(struct rt_bn_part *b) { rt_buf_destroy(&b->saved); }

int rt_bn_part_forward(struct rt_bn_part *b, const struct rt_pass *p, rt_view x, rt_view y)
{
    struct rt_bn_shape s = b->shape;
    s.n = p->n;
    rt_view gamma = rt_view_at(p->params, b->gamma), beta = rt_view_at(p->params, b->beta);
    rt_view mean = rt_view_at(p->state, b->mean), var = rt_view_at(p->state, b->var);
    if (!p->train)
        return rt_op_bn_fwd_infer(p->dev, &s, x, gamma, beta, mean, var, y);
    rt_view saved = rt_buf_view(b->saved);
    return rt_op_bn_fwd_train(p->dev, &s, x, gamma, beta, y, saved,
                              rt_view_at(saved, (size_t)s.c), mean, var);
}

/* Assumes the forward before it ran in train mode (batch statistics are
 * what the gradient is of); the model only backpropagates such passes. y:
 * the output, for the activation's gradient. */
int rt_bn_part_backward(struct rt_bn_part *b, const struct rt_pass *p, rt_view x, rt_view y,
                        rt_view dy, rt_view dx)
{
    struct rt_bn_shape s = b->shape;
    s.n = p->n;
    rt_view saved = rt_buf_view(b->saved);
    return rt_op_bn_bwd(p->dev, &s, x, y, dy, rt_view_at(p->params, b->gamma), saved,
                        rt_view_at(saved, (size_t)s.c), dx, rt_view_at(p->grads, b->gamma),
                        rt_view_at(p->grads, b->beta));
}

/* ---- the [batchnorm] layer --------------------------------------------------- */

static int bn_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    struct rt_bn_part *b = l->priv;
    float momentum, eps;
    RT_TRY(rt_cfg_float(su->cfg, su->sec, "momentum", false, 0.1f, 0.0, 1.0, false,
                        &momentum));
    RT_TRY(rt_cfg_float(su->cfg, su->sec, "eps", false, 1e-5f, 1e-12, 1.0, false, &eps));
    l->out = l->in;
    l->passthrough = true;
    return rt_bn_part_setup(b, su, l, "", l->in.c, l->in.h * l->in.w, eps, momentum);
}

static int bn_alloc(struct rt_layer *l, rt_dev *dev, int max_batch)
{
    return rt_bn_part_alloc(l->priv, dev);
}

static int bn_forward(struct rt_layer *l, const struct rt_pass *p)
{
    return rt_bn_part_forward(l->priv, p, p->x[0], p->y);
}

/* bn_bwd always writes dx, so without a consumer it lands in tmp. */
static int bn_backward(struct rt_layer *l, const struct rt_pass *p)
{
    return rt_bn_part_backward(l->priv, p, p->x[0], p->y, p->dy,
                               p->need_dx[0] ? p->dx[0] : p->tmp[0]);
}

static void bn_release(struct rt_layer *l) { rt_bn_part_release(l->priv); }

static void bn_describe(const struct rt_layer *l, struct rt_layer_info *d)
{
    const struct rt_bn_part *b = l->priv;
    d->eps = b->shape.eps;
    d->momentum = b->shape.momentum;
}

const struct rt_layer_ops rt_layer_batchnorm = {
    .type = "batchnorm",
    .prefix = "bn",
    .keys = "momentum, eps",
    .priv_size = sizeof(struct rt_bn_part),
    .setup = bn_setup,
    .alloc = bn_alloc,
    .forward = bn_forward,
    .backward = bn_backward,
    .release = bn_release,
    .describe = bn_describe,
};
