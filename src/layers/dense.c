/* dense.c — [dense]: y = act(x W^T + b), W [units, in]; any input shape is
 * flattened (NCHW order, as PyTorch's nn.Flatten). */
#include "config.h"

#include "layer.h"
#include "status.h"

struct dense {
    int in, units;
    size_t w, b;
    enum rt_act act;
    float alpha;
    rt_view g; /* a deferred weight gradient's g: in dy's memory (layer.h) */
    int g_n;   /* its rows */
};

static int dense_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    struct dense *d = l->priv;
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "units", true, 0, 1, 1 << 24, &d->units));
    RT_TRY(rt_act_parse(su, &d->act, &d->alpha));
    size_t in = rt_shape_count(l->in);
    if (in > (size_t)1 << 30 || in * (size_t)d->units > (size_t)1 << 31)
        return rt_layer_error(su, "a %zu x %d weight matrix is too large (at most 2^31 "
                              "weights)", in, d->units);
    d->in = (int)in;
    l->out = (struct rt_shape){d->units, 1, 1};
    l->act = d->act;
    l->alpha = d->alpha;
    int wd[2] = {d->units, d->in};
    struct rt_init_spec winit = {.kind = RT_INIT_AUTO, .fan_in = d->in, .fan_out = d->units};
    struct rt_init_spec zero = {.kind = RT_INIT_CONST, .value = 0.0f};
    d->w = rt_layer_param(su, l, "weight", 2, wd, winit);
    d->b = rt_layer_param(su, l, "bias", 1, wd, zero);
    return d->w == RT_LAYER_BAD_OFFSET || d->b == RT_LAYER_BAD_OFFSET ? RT_ERR_NOMEM : RT_OK;
}

static int dense_forward(struct rt_layer *l, const struct rt_pass *p)
{
    struct dense *d = l->priv;
    /* y[n, units] = act(x[n, in] * W[units, in]^T + b) */
    return rt_op_dense_fwd(p->dev, p->n, d->in, d->units, p->x[0], rt_view_at(p->params, d->w),
                           rt_view_at(p->params, d->b), d->act, d->alpha, p->y);
}

/* dW[units, in] = g[n, units]^T * x[n, in] (when dw.buf), dx[n, in] =
 * g[n, units] * W[units, in] (when dx.buf): one op, so that a backend may
 * run the two side by side */
static int grads(const struct dense *d, const struct rt_pass *p, rt_view g, rt_view dw,
                 rt_view dx)
{
    return rt_op_dense_bwd(p->dev, p->n, d->in, d->units, g, p->x[0],
                           rt_view_at(p->params, d->w), dw, dx);
}

static int dense_weight_grad(struct rt_layer *l, const struct rt_pass *p)
{
    struct dense *d = l->priv;
    RT_ASSERT(d->g.buf && d->g_n == p->n);
    return grads(d, p, d->g, rt_view_at(p->grads, d->w), (rt_view){0});
}

static int dense_backward(struct rt_layer *l, const struct rt_pass *p)
{
    struct dense *d = l->priv;
    /* g: dy through the activation (from y alone: no pre-activation kept),
     * in dy's own memory */
    const rt_view g = p->dy;
    if (d->act != RT_ACT_IDENTITY)
        RT_TRY(rt_op_act_bias_bwd(p->dev, d->act, d->alpha, p->n, d->units, 1, p->y, g, g,
                                  rt_view_at(p->grads, d->b)));
    else
        RT_TRY(rt_op_bias_grad(p->dev, p->n, d->units, 1, g, rt_view_at(p->grads, d->b)));
    if (p->defer_weights) { /* for dense_weight_grad, at the end of backward */
        d->g = g;
        d->g_n = p->n;
    }
    const rt_view dw = p->defer_weights ? (rt_view){0} : rt_view_at(p->grads, d->w);
    return grads(d, p, g, dw, p->need_dx[0] ? p->dx[0] : (rt_view){0});
}

const struct rt_layer_ops rt_layer_dense = {
    .type = "dense",
    .prefix = "dense",
    .keys = "units, activation",
    .priv_size = sizeof(struct dense),
    .setup = dense_setup,
    .forward = dense_forward,
    .backward = dense_backward,
    .weight_grad = dense_weight_grad,
};
