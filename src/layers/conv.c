/* conv.c — [conv]: 2-D convolution, bias (or batch norm), activation.
 * y = act(bn(conv(x, w)))  or  y = act(conv(x, w) + b): two ops, conv2d_fwd
 * then bn_fwd_train with the activation fused, or one (conv2d_fwd_bias_act).
 * Either way the activation's backward needs y alone (relu and leaky are
 * positive where their input is; sigmoid and tanh take their derivative
 * from y), so no pre-activation copy is kept: with batch norm, only the
 * conv's output z, for bn's backward. */
#include "config.h"

#include "layer.h"
#include "status.h"

struct conv {
    struct rt_conv_shape cs; /* n = max_batch; set per call */
    size_t w, b;             /* param offsets (b unused with batch norm) */
    bool bn;
    struct rt_bn_part norm;
    enum rt_act act;
    float alpha;
    rt_buf *z; /* conv output, kept for bn backward (with batch norm) */
};

static int conv_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    struct conv *cv = l->priv;
    int filters, size, stride, pad, bn;
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "filters", true, 0, 1, 65536, &filters));
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "size", true, 0, 1, 1024, &size));
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "stride", false, 1, 1, 1024, &stride));
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "pad", false, 0, 0, 1024, &pad));
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "batch_normalize", false, 0, 0, 1, &bn));
    RT_TRY(rt_act_parse(su, &cv->act, &cv->alpha));
    if (pad >= size)
        return rt_layer_error(su, "pad = %d must be smaller than size = %d", pad, size);
    if (size > l->in.h + 2 * pad || size > l->in.w + 2 * pad)
        return rt_layer_error(su,
                              "size = %d does not fit its %dx%d input with pad = %d "
                              "(size must be <= input + 2*pad)",
                              size, l->in.w, l->in.h, pad);
    struct rt_conv_shape *s = &cv->cs;
    s->c = l->in.c;
    s->h = l->in.h;
    s->w = l->in.w;
    s->k = filters;
    s->r = s->s = size;
    s->stride_h = s->stride_w = stride;
    s->pad_h = s->pad_w = pad;
    s->oh = (s->h + 2 * pad - size) / stride + 1;
    s->ow = (s->w + 2 * pad - size) / stride + 1;
    l->out = (struct rt_shape){filters, s->oh, s->ow};
    l->act = cv->act;
    l->alpha = cv->alpha;
    cv->bn = bn;

    int wd[4] = {filters, s->c, size, size};
    int fan_in = s->c * size * size, fan_out = filters * size * size;
    struct rt_init_spec winit = {.kind = RT_INIT_AUTO, .fan_in = fan_in, .fan_out = fan_out};
    cv->w = rt_layer_param(su, l, "weight", 4, wd, winit);
    if (cv->w == RT_LAYER_BAD_OFFSET)
        return RT_ERR_NOMEM;
    if (bn) { /* a bias before batch norm is cancelled by its mean: none */
        RT_TRY(rt_bn_part_setup(&cv->norm, su, l, "bn.", filters, s->oh * s->ow, 1e-5f,
                                0.1f));
        cv->norm.shape.act = cv->act; /* applied by batch norm's ops */
        cv->norm.shape.alpha = cv->alpha;
        return RT_OK;
    }
    struct rt_init_spec zero = {.kind = RT_INIT_CONST, .value = 0.0f};
    cv->b = rt_layer_param(su, l, "bias", 1, wd, zero);
    return cv->b == RT_LAYER_BAD_OFFSET ? RT_ERR_NOMEM : RT_OK;
}

static int conv_alloc(struct rt_layer *l, rt_dev *dev, int max_batch)
{
    struct conv *cv = l->priv;
    size_t bytes = (size_t)max_batch * rt_shape_count(l->out) * sizeof(float);
    if (cv->bn) {
        if (!(cv->z = rt_buf_new(dev, bytes)))
            return RT_ERR_NOMEM;
    }
    if (cv->bn)
        RT_TRY(rt_bn_part_alloc(&cv->norm, dev));
    return RT_OK;
}

/* The backend's workspace for one batch size is assumed to grow with n, so
 * the larger of 1 and max_batch covers every call. */
static size_t conv_workspace(struct rt_layer *l, rt_dev *dev, int max_batch)
{
    struct conv *cv = l->priv;
    struct rt_conv_shape s = cv->cs;
    s.n = 1;
    size_t a = rt_conv2d_workspace(dev, &s);
    s.n = max_batch;
    size_t b = rt_conv2d_workspace(dev, &s);
    return a > b ? a : b;
}

static int conv_forward(struct rt_layer *l, const struct rt_pass *p)
{
    struct conv *cv = l->priv;
    struct rt_conv_shape s = cv->cs;
    s.n = p->n;
    rt_view w = rt_view_at(p->params, cv->w);
    if (!cv->bn)
        return rt_op_conv2d_fwd_bias_act(p->dev, &s, p->x[0], w, rt_view_at(p->params, cv->b),
                                         cv->act, cv->alpha, p->y, p->ws);
    rt_view z = rt_buf_view(cv->z);
    RT_TRY(rt_op_conv2d_fwd(p->dev, &s, p->x[0], w, z, p->ws));
    return rt_bn_part_forward(&cv->norm, p, z, p->y); /* and the activation */
}

static int conv_backward(struct rt_layer *l, const struct rt_pass *p)
{
    struct conv *cv = l->priv;
    struct rt_conv_shape s = cv->cs;
    s.n = p->n;
    /* g (dy through the activation) goes into dy's own memory, dead after
     * this backward (layer.h): a scratch of its own was one more layer's
     * output in the cache (seedcnn's conv1, 2.8 MB a worker's step): +4-6%
     * img/s (bench/README.md, twenty-seventh pass) */
    rt_view g = p->dy, db = rt_view_at(p->grads, cv->b), scratch = p->dy;
    enum rt_act kind = cv->act;
    if (cv->bn) { /* act(bn(conv)): the conv's own gradient has neither */
        RT_TRY(rt_bn_part_backward(&cv->norm, p, rt_buf_view(cv->z), p->y, g, p->tmp[0]));
        g = p->tmp[0];
        scratch = p->tmp[1];
        kind = RT_ACT_IDENTITY;
        db = (rt_view){0};
    }
    /* the activation's, bias's, filter's and data's gradients in one op */
    rt_view dx = p->need_dx[0] ? p->dx[0] : (rt_view){0};
    return rt_op_conv2d_bwd_act(p->dev, &s, kind, cv->alpha, p->x[0], p->y, g,
                                rt_view_at(p->params, cv->w), scratch, dx,
                                rt_view_at(p->grads, cv->w), db, p->ws);
}

static void conv_release(struct rt_layer *l)
{
    struct conv *cv = l->priv;
    rt_buf_destroy(&cv->z);
    rt_bn_part_release(&cv->norm);
}

static void conv_describe(const struct rt_layer *l, struct rt_layer_info *d)
{
    const struct conv *cv = l->priv;
    d->size = cv->cs.r;
    d->stride = cv->cs.stride_h;
    d->pad = cv->cs.pad_h;
    d->batch_normalize = cv->bn;
    if (cv->bn) {
        d->eps = cv->norm.shape.eps;
        d->momentum = cv->norm.shape.momentum;
    }
}

const struct rt_layer_ops rt_layer_conv = {
    .type = "conv",
    .prefix = "conv",
    .keys = "filters, size, stride, pad, activation, batch_normalize",
    .priv_size = sizeof(struct conv),
    .setup = conv_setup,
    .alloc = conv_alloc,
    .workspace = conv_workspace,
    .forward = conv_forward,
    .backward = conv_backward,
    .release = conv_release,
    .describe = conv_describe,
};
