/* flatten.c — [flatten]: c x h x w becomes (c*h*w) x 1 x 1. NCHW memory
 * is already flat, so where the model lets its output be its input's
 * memory (output_is_input) there is nothing to do; else it is a copy. It
 * exists so a model file can say what it means (and [dense] flattens by
 * itself anyway). */
#include "config.h"

#include "layer.h"
#include "status.h"

static int flatten_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    size_t n = rt_shape_count(l->in);
    if (n > (size_t)1 << 30)
        return rt_layer_error(su, "%zu values per sample is too many", n);
    l->out = (struct rt_shape){(int)n, 1, 1};
    return RT_OK;
}

static bool same_view(rt_view a, rt_view b) { return a.buf == b.buf && a.off == b.off; }

static int flatten_forward(struct rt_layer *l, const struct rt_pass *p)
{
    if (same_view(p->y, p->x[0]))
        return RT_OK;
    return rt_copy(p->dev, p->y, p->x[0], (size_t)p->n * rt_shape_count(l->out));
}

static int flatten_backward(struct rt_layer *l, const struct rt_pass *p)
{
    if (!p->need_dx[0] || same_view(p->dx[0], p->dy))
        return RT_OK;
    return rt_copy(p->dev, p->dx[0], p->dy, (size_t)p->n * rt_shape_count(l->out));
}

const struct rt_layer_ops rt_layer_flatten = {
    .type = "flatten",
    .prefix = "flatten",
    .keys = "",
    .setup = flatten_setup,
    .forward = flatten_forward,
    .backward = flatten_backward,
    .output_is_input = true,
};
