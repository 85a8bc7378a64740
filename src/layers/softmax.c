/* softmax.c — [softmax]: the last layer, softmax + cross-entropy loss.
 * Its input are the logits; the model computes probabilities and the loss
 * with the labels (rt_model_loss) and starts backward from them, so the
 * layer itself only checks the shape: classes values per sample. */
#include "config.h"

#include "layer.h"
#include "status.h"

static int softmax_setup(struct rt_layer *l, struct rt_layer_setup *su)
{
    size_t n = rt_shape_count(l->in);
    if (n != (size_t)su->classes)
        return rt_layer_error(su,
                              "gets %zu values per sample (%dx%dx%d) but [net] classes = %d "
                              "(the layer before [softmax] must output classes values, "
                              "e.g. [dense] units = %d)",
                              n, l->in.w, l->in.h, l->in.c, su->classes, su->classes);
    l->out = (struct rt_shape){su->classes, 1, 1};
    return RT_OK;
}

static int softmax_nothing(struct rt_layer *l, const struct rt_pass *p) { return RT_OK; }

const struct rt_layer_ops rt_layer_softmax = {
    .type = "softmax",
    .prefix = "softmax",
    .keys = "",
    .setup = softmax_setup,
    .forward = softmax_nothing,
    .backward = softmax_nothing,
};
