/* residual.c — [shortcut] (from = -N, activation): darknet's residual add.
 * y = act(x_prev + x_from), where x_from is the output of the layer N
 * places before this one; both shapes must match. The gradient reaches
 * both inputs; the model adds it to whatever else they already received. */
#include "config.h"

#include <stdio.h>

#include "layer.h"
#include "status.h"

struct shortcut {
    int from;
    enum rt_act act;
    float alpha;
    rt_buf *z; /* the sum before the activation (if any) */
};

static void shape_str(char *buf, size_t n, struct rt_shape s)
{
    snprintf(buf, n, "%dx%dx%d", s.w, s.h, s.c);
}

static int shortcut_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    struct shortcut *sc = l->priv;
    RT_TRY(rt_cfg_int(su->cfg, su->sec, "from", true, 0, -1000000, -1, &sc->from));
    RT_TRY(rt_act_parse(su, &sc->act, &sc->alpha));
    int target = l->index + sc->from;
    if (l->index == 0)
        return rt_layer_error(su, "cannot be the first layer (it adds the previous layer's "
                              "output to an earlier one)");
    if (target < 0)
        return rt_layer_error(su, "from = %d reaches before the first layer (this is "
                              "layer %d; accepted: -1 to %d)", sc->from, l->index + 1,
                              -l->index);
    const struct rt_layer *t = &su->layers[target];
    if (t->out.c != l->in.c || t->out.h != l->in.h || t->out.w != l->in.w) {
        char a[48], b[48];
        shape_str(a, sizeof a, t->out);
        shape_str(b, sizeof b, l->in);
        return rt_layer_error(su,
                              "from = %d: %s (line %d) outputs %s but the previous layer "
                              "outputs %s (the shapes must match)",
                              sc->from, t->name, t->line, a, b);
    }
    l->ninputs = 2;
    l->inputs[1] = target;
    l->out = l->in;
    l->act = sc->act;
    l->alpha = sc->alpha;
    return RT_OK;
}

static int shortcut_alloc(struct rt_layer *l, rt_dev *dev, int max_batch)
{
    struct shortcut *sc = l->priv;
    if (sc->act == RT_ACT_IDENTITY)
        return RT_OK;
    sc->z = rt_buf_new(dev, (size_t)max_batch * rt_shape_count(l->out) * sizeof(float));
    return sc->z ? RT_OK : RT_ERR_NOMEM;
}

static int shortcut_forward(struct rt_layer *l, const struct rt_pass *p)
{
    struct shortcut *sc = l->priv;
    size_t n = (size_t)p->n * rt_shape_count(l->out);
    rt_view z = sc->z ? rt_buf_view(sc->z) : p->y;
    RT_TRY(rt_copy(p->dev, z, p->x[0], n));
    RT_TRY(rt_op_axpy(p->dev, n, 1.0f, p->x[1], z));
    if (sc->z)
        RT_TRY(rt_op_act_fwd(p->dev, sc->act, sc->alpha, n, z, p->y));
    return RT_OK;
}

static int shortcut_backward(struct rt_layer *l, const struct rt_pass *p)
{
    struct shortcut *sc = l->priv;
    size_t n = (size_t)p->n * rt_shape_count(l->out);
    rt_view g = p->dy;
    if (sc->z) {
        RT_TRY(rt_op_act_bwd(p->dev, sc->act, sc->alpha, n, rt_buf_view(sc->z), p->y, g,
                             p->tmp[0]));
        g = p->tmp[0];
    }
    for (int i = 0; i < 2; i++)
        if (p->need_dx[i])
            RT_TRY(rt_copy(p->dev, p->dx[i], g, n));
    return RT_OK;
}

static void shortcut_release(struct rt_layer *l)
{
    struct shortcut *sc = l->priv;
    rt_buf_destroy(&sc->z);
}

const struct rt_layer_ops rt_layer_shortcut = {
    .type = "shortcut",
    .prefix = "shortcut",
    .keys = "from, activation",
    .priv_size = sizeof(struct shortcut),
    .setup = shortcut_setup,
    .alloc = shortcut_alloc,
    .forward = shortcut_forward,
    .backward = shortcut_backward,
    .release = shortcut_release,
};
