/* activation.c — standalone [relu], [leaky], [sigmoid], [tanh] layers, and
 * the `activation` key that conv, dense and shortcut fuse into themselves. */
#include "config.h"

#include "layer.h"
#include "status.h"

static const char *const act_names[] = {"linear", "relu", "leaky", "sigmoid", "tanh", NULL};

/* Darknet's fixed slope for a fused leaky; the [leaky] layer has `alpha`. */
#define FUSED_LEAKY_ALPHA 0.1f

int rt_act_parse(struct rt_layer_setup *su, enum rt_act *kind, float *alpha)
{
    int k;
    RT_TRY(rt_cfg_choice(su->cfg, su->sec, "activation", act_names, 0, &k));
    /* act_names is listed in enum rt_act order */
    *kind = (enum rt_act)k;
    *alpha = *kind == RT_ACT_LEAKY ? FUSED_LEAKY_ALPHA : 0.0f;
    return RT_OK;
}

const char *rt_act_name(enum rt_act kind)
{
    return (unsigned)kind < 5 ? act_names[kind] : "?";
}

struct act {
    enum rt_act kind;
    float alpha;
};

static int setup_common(struct rt_layer *l, enum rt_act kind, float alpha)
{
    struct act *a = l->priv;
    a->kind = kind;
    a->alpha = alpha;
    l->act = kind;
    l->alpha = alpha;
    l->out = l->in;
    return RT_OK;
}

static int relu_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    return setup_common(l, RT_ACT_RELU, 0.0f);
}

static int sigmoid_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    return setup_common(l, RT_ACT_SIGMOID, 0.0f);
}

static int tanh_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    return setup_common(l, RT_ACT_TANH, 0.0f);
}

static int leaky_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    float alpha;
    RT_TRY(rt_cfg_float(su->cfg, su->sec, "alpha", false, 0.1f, 0.0, 1.0, true, &alpha));
    return setup_common(l, RT_ACT_LEAKY, alpha);
}

static int act_forward(struct rt_layer *l, const struct rt_pass *p)
{
    const struct act *a = l->priv;
    return rt_op_act_fwd(p->dev, a->kind, a->alpha, (size_t)p->n * rt_shape_count(l->out),
                         p->x[0], p->y);
}

static int act_backward(struct rt_layer *l, const struct rt_pass *p)
{
    const struct act *a = l->priv;
    if (!p->need_dx[0])
        return RT_OK;
    return rt_op_act_bwd(p->dev, a->kind, a->alpha, (size_t)p->n * rt_shape_count(l->out),
                         p->x[0], p->y, p->dy, p->dx[0]);
}

#define ACT_LAYER(var, name, keys_, setup_fn)                                  \
    const struct rt_layer_ops var = {                                          \
        .type = name,                                                          \
        .prefix = name,                                                        \
        .keys = keys_,                                                         \
        .priv_size = sizeof(struct act),                                       \
        .setup = setup_fn,                                                     \
        .forward = act_forward,                                                \
        .backward = act_backward,                                              \
    };

ACT_LAYER(rt_layer_relu, "relu", "", relu_setup)
ACT_LAYER(rt_layer_leaky, "leaky", "alpha", leaky_setup)
ACT_LAYER(rt_layer_sigmoid, "sigmoid", "", sigmoid_setup)
ACT_LAYER(rt_layer_tanh, "tanh", "", tanh_setup)
