/* dropout.c — [dropout] (rate): inverted dropout in train mode (kept values
 * scaled by 1/(1-rate)), identity in inference. The mask comes from the
 * step's seed mixed with the layer index (rt_dropout_keep), so every
 * backend draws the same mask. */
#include "config.h"

#include "layer.h"
#include "status.h"

struct dropout {
    float rate;
    rt_buf *mask;
    bool masked; /* the last forward applied the mask */
};

static int dropout_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    struct dropout *d = l->priv;
    RT_TRY(rt_cfg_float(su->cfg, su->sec, "rate", false, 0.5f, 0.0, 1.0, true, &d->rate));
    l->out = l->in;
    l->passthrough = true;
    return RT_OK;
}

static int dropout_alloc(struct rt_layer *l, rt_dev *dev, int max_batch)
{
    struct dropout *d = l->priv;
    d->mask = rt_buf_new(dev, (size_t)max_batch * rt_shape_count(l->out) * sizeof(float));
    return d->mask ? RT_OK : RT_ERR_NOMEM;
}

static int dropout_forward(struct rt_layer *l, const struct rt_pass *p)
{
    struct dropout *d = l->priv;
    size_t n = (size_t)p->n * rt_shape_count(l->out);
    d->masked = p->train;
    if (!p->train)
        return rt_copy(p->dev, p->y, p->x[0], n);
    return rt_op_dropout_fwd(p->dev, n, d->rate, p->seed, p->x[0], p->y,
                             rt_buf_view(d->mask));
}

static int dropout_backward(struct rt_layer *l, const struct rt_pass *p)
{
    struct dropout *d = l->priv;
    size_t n = (size_t)p->n * rt_shape_count(l->out);
    if (!p->need_dx[0])
        return RT_OK;
    if (!d->masked)
        return rt_copy(p->dev, p->dx[0], p->dy, n);
    return rt_op_mul(p->dev, n, p->dy, rt_buf_view(d->mask), p->dx[0]);
}

static void dropout_release(struct rt_layer *l)
{
    struct dropout *d = l->priv;
    rt_buf_destroy(&d->mask);
}

static void dropout_describe(const struct rt_layer *l, struct rt_layer_info *d)
{
    d->rate = ((const struct dropout *)l->priv)->rate;
}

const struct rt_layer_ops rt_layer_dropout = {
    .type = "dropout",
    .prefix = "dropout",
    .keys = "rate",
    .priv_size = sizeof(struct dropout),
    .setup = dropout_setup,
    .alloc = dropout_alloc,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .release = dropout_release,
    .describe = dropout_describe,
};
