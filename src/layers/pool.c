/* pool.c — [maxpool], [avgpool] (size, stride, pad) and [globalavgpool]
 * (an average over each whole channel, giving c x 1 x 1). */
#include "config.h"

#include "layer.h"
#include "status.h"

struct pool {
    struct rt_pool_shape ps; /* n set per call */
};

static int window_setup(struct rt_layer *l, struct rt_layer_setup *su, enum rt_pool_mode mode)
{
    struct pool *pl = l->priv;
    int size, stride, pad;
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "size", true, 0, 1, 1024, &size));
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "stride", false, size, 1, 1024, &stride));
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "pad", false, 0, 0, 1024, &pad));
    if (pad >= size)
        return rt_layer_error(su, "pad = %d must be smaller than size = %d", pad, size);
    if (size > l->in.h + 2 * pad || size > l->in.w + 2 * pad)
        return rt_layer_error(su,
                              "size = %d does not fit its %dx%d input with pad = %d "
                              "(size must be <= input + 2*pad)",
                              size, l->in.w, l->in.h, pad);
    struct rt_pool_shape *s = &pl->ps;
    s->mode = mode;
    s->c = l->in.c;
    s->h = l->in.h;
    s->w = l->in.w;
    s->r = s->s = size;
    s->stride_h = s->stride_w = stride;
    s->pad_h = s->pad_w = pad;
    s->oh = (s->h + 2 * pad - size) / stride + 1;
    s->ow = (s->w + 2 * pad - size) / stride + 1;
    l->out = (struct rt_shape){s->c, s->oh, s->ow};
    return RT_OK;
}

static int maxpool_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    return window_setup(l, su, RT_POOL_MAX);
}

static int avgpool_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    return window_setup(l, su, RT_POOL_AVG);
}

static int gap_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    struct rt_pool_shape *s = &((struct pool *)l->priv)->ps;
    s->mode = RT_POOL_AVG;
    s->c = l->in.c;
    s->h = s->r = l->in.h;
    s->w = s->s = l->in.w;
    s->stride_h = s->stride_w = 1;
    s->oh = s->ow = 1;
    l->out = (struct rt_shape){s->c, 1, 1};
    return RT_OK;
}

static int pool_forward(struct rt_layer *l, const struct rt_pass *p)
{
    struct rt_pool_shape s = ((struct pool *)l->priv)->ps;
    s.n = p->n;
    return rt_op_pool_fwd(p->dev, &s, p->x[0], p->y);
}

static int pool_backward(struct rt_layer *l, const struct rt_pass *p)
{
    if (!p->need_dx[0])
        return RT_OK;
    struct rt_pool_shape s = ((struct pool *)l->priv)->ps;
    s.n = p->n;
    return rt_op_pool_bwd(p->dev, &s, p->x[0], p->y, p->dy, p->dx[0]);
}

static void window_describe(const struct rt_layer *l, struct rt_layer_info *d)
{
    const struct rt_pool_shape *s = &((const struct pool *)l->priv)->ps;
    d->size = s->r;
    d->stride = s->stride_h;
    d->pad = s->pad_h;
}

const struct rt_layer_ops rt_layer_maxpool = {
    .type = "maxpool",
    .prefix = "maxpool",
    .keys = "size, stride, pad",
    .priv_size = sizeof(struct pool),
    .setup = maxpool_setup,
    .forward = pool_forward,
    .backward = pool_backward,
    .describe = window_describe,
};

const struct rt_layer_ops rt_layer_avgpool = {
    .type = "avgpool",
    .prefix = "avgpool",
    .keys = "size, stride, pad",
    .priv_size = sizeof(struct pool),
    .setup = avgpool_setup,
    .forward = pool_forward,
    .backward = pool_backward,
    .describe = window_describe,
};

const struct rt_layer_ops rt_layer_globalavgpool = {
    .type = "globalavgpool",
    .prefix = "gap",
    .keys = "",
    .priv_size = sizeof(struct pool),
    .setup = gap_setup,
    .forward = pool_forward,
    .backward = pool_backward,
};
