/* residual.c — [shortcut] (from = -N, activation): darknet's residual add.
 * y = act(x_prev + x_from), where x_from is the output of the layer N
 * places before this one; both shapes must match: one op (add_act_fwd).
 * The gradient reaches both inputs; the model adds it to whatever else
 * they already received. The activation's gradient is taken from y alone
 * (relu and leaky are positive where their input is; sigmoid and tanh
 * differentiate from y), so the sum is not kept. */
#include "config.h"

#include <stdio.h>

#include "layer.h"
#include "status.h"

struct shortcut {
    int from;
    enum rt_act act;
    float alpha;
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

static int shortcut_forward(struct rt_layer *l, const struct rt_pass *p)
{
    struct shortcut *sc = l->priv;
    size_t n = (size_t)p->n * rt_shape_count(l->out);
    return rt_op_add_act_fwd(p->dev, sc->act, sc->alpha, n, p->x[0], p->x[1], p->y);
}

/* dy * f'(y) into the first input's gradient that is wanted, copied to
 * the other. */
static int shortcut_backward(struct rt_layer *l, const struct rt_pass *p)
{
    struct shortcut *sc = l->priv;
    size_t n = (size_t)p->n * rt_shape_count(l->out);
    int first = p->need_dx[0] ? 0 : 1;
    if (!p->need_dx[first])
        return RT_OK;
    RT_TRY(rt_op_act_bwd(p->dev, sc->act, sc->alpha, n, p->y, p->y, p->dy, p->dx[first]));
    if (first == 0 && p->need_dx[1])
        RT_TRY(rt_copy(p->dev, p->dx[1], p->dx[0], n));
    return RT_OK;
}

const struct rt_layer_ops rt_layer_shortcut = {
    .type = "shortcut",
    .prefix = "shortcut",
    .keys = "from, activation",
    .priv_size = sizeof(struct shortcut),
    .setup = shortcut_setup,
    .forward = shortcut_forward,
    .backward = shortcut_backward,
};
