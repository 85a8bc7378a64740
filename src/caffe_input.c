/* caffe_input.c — the input of a Caffe net: its shape (ragtag's [net]
 * input) from an Input, DummyData or MemoryData layer, the net's legacy
 * input / input_dim / input_shape fields, or --input for a Data layer (whose
 * images live in an LMDB that ragtag does not open), and the check that
 * the data layer's transformation is one ragtag's loader applies. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "caffe-impl.h"
#include "status.h"

static const char *const data_types[] = {"Data", "ImageData", "HDF5Data", "WindowData",
                                         "AnnotatedData", "MemoryData", "DummyData", "Input",
                                         "CoSData", NULL};

bool caffe_is_data_layer(const char *type)
{
    for (int i = 0; data_types[i]; i++)
        if (!strcmp(type, data_types[i]))
            return true;
    return false;
}

/* N x C x H x W (or N x D) dims into a per-sample shape. */
static int dims_shape(const struct caffe_net *n, const Caffe__LayerParameter *l, size_t nd,
                      const int64_t *d, struct rt_shape *s)
{
    for (size_t i = 0; i < nd; i++)
        if (d[i] < 1 || d[i] > (1 << 24))
            return caffe_layer_error(n, l, "input dimension %zu is %lld (accepted: 1 to %d)", i,
                                     (long long)d[i], 1 << 24);
    if (nd == 4)
        *s = (struct rt_shape){(int)d[1], (int)d[2], (int)d[3]};
    else if (nd == 2)
        *s = (struct rt_shape){(int)d[1], 1, 1};
    else
        return caffe_layer_error(n, l, "an input of %zu dimensions (ragtag takes N x C x H x W "
                                       "or N x D)", nd);
    return RT_OK;
}

static int parse_input_flag(const char *input, struct rt_shape *s)
{
    char end;
    if (sscanf(input, "%dx%dx%d%c", &s->w, &s->h, &s->c, &end) != 3 || s->w < 1 || s->h < 1 ||
        s->c < 1)
        return rt_error(RT_ERR_ARG, "--input '%s': expected WxHxC, e.g. 28x28x1", input);
    return RT_OK;
}

/* CaffeOnSpark's CoSData layer: the top blob that holds the images. */
static const Caffe__CoSDataParameter__TopBlob *cos_top(const Caffe__LayerParameter *l)
{
    const Caffe__CoSDataParameter *p = l->cos_data_param;
    for (size_t i = 0; p && l->n_top > 0 && i < p->n_top; i++)
        if (p->top[i]->name && !strcmp(p->top[i]->name, l->top[0]))
            return p->top[i];
    return NULL;
}

/* Caffe multiplies bytes by transform_param.scale; ragtag's loader feeds
 * bytes / 255. Anything else the transformation does, ragtag does not. */
static int transform_check(struct caffe_net *n, const Caffe__LayerParameter *l)
{
    const Caffe__TransformationParameter *t = l->transform_param;
    if (!strcmp(l->type, "HDF5Data") || !strcmp(l->type, "DummyData") || !strcmp(l->type, "Input"))
        return RT_OK;
    if (!strcmp(l->type, "CoSData")) {
        const Caffe__CoSDataParameter__TopBlob *top = cos_top(l);
        if (top && top->type != CAFFE__CO_SDATA_PARAMETER__DATA_TYPE__RAW_IMAGE &&
            top->type != CAFFE__CO_SDATA_PARAMETER__DATA_TYPE__ENCODED_IMAGE &&
            top->type != CAFFE__CO_SDATA_PARAMETER__DATA_TYPE__ENCODED_IMAGE_WITH_DIM)
            return RT_OK; /* numbers, not image bytes */
        t = top ? top->transform_param : NULL;
    }
    if (t && t->mean_file)
        return caffe_layer_error(n, l, "transform_param.mean_file: ragtag does not subtract a "
                                       "mean image (remove it, or normalise the data set)");
    if (t && t->n_mean_value > 0)
        return caffe_layer_error(n, l, "transform_param.mean_value: ragtag does not subtract "
                                       "per-channel means");
    if (t && t->crop_size > 0)
        return caffe_layer_error(n, l, "transform_param.crop_size: ragtag does not crop");
    if (t && t->mirror)
        return caffe_layer_error(n, l, "transform_param.mirror: ragtag has no random flips");
    double scale = t && t->has_scale ? t->scale : 1.0;
    if (scale < 1.0 / 256 * (1 - 1e-6) || scale > 1.0 / 255 * (1 + 1e-6))
        return caffe_layer_error(n, l, "transform_param.scale = %g: ragtag's loader scales bytes "
                                       "by 1/255 (accepted: 1/256 to 1/255)", scale);
    if (fabs(scale * 255 - 1) > 1e-6)
        caffe_note(n, "'%s' scales bytes by %g; ragtag's loader scales them by 1/255, so its "
                      "inputs are %.2f%% larger than Caffe's", l->name, scale,
                   100 * (1 / (255 * scale) - 1));
    return RT_OK;
}

/* The shape a data layer states itself; false when it has none. */
static int layer_shape(const struct caffe_net *n, const Caffe__LayerParameter *l,
                       struct rt_shape *s, bool *known)
{
    *known = true;
    const Caffe__BlobShape *bs = NULL;
    if (!strcmp(l->type, "Input") && l->input_param && l->input_param->n_shape > 0)
        bs = l->input_param->shape[0];
    if (!strcmp(l->type, "DummyData") && l->dummy_data_param &&
        l->dummy_data_param->n_shape > 0)
        bs = l->dummy_data_param->shape[0];
    if (bs)
        return dims_shape(n, l, bs->n_dim, bs->dim, s);
    const Caffe__MemoryDataParameter *md = l->memory_data_param;
    if (!strcmp(l->type, "MemoryData") && md) {
        int64_t d[4] = {1, md->channels, md->height, md->width};
        return dims_shape(n, l, 4, d, s);
    }
    const Caffe__CoSDataParameter__TopBlob *top = cos_top(l);
    if (top && top->channels > 0) {
        bool out = top->out_channels > 0; /* the shape after the transformation */
        int64_t d[4] = {1, out ? top->out_channels : top->channels,
                        out ? top->out_height : top->height, out ? top->out_width : top->width};
        return dims_shape(n, l, 4, d, s);
    }
    if (!strcmp(l->type, "Input") || !strcmp(l->type, "DummyData"))
        return caffe_layer_error(n, l, "states no shape");
    *known = false;
    return RT_OK;
}

/* The net's own input / input_shape / input_dim fields (deploy files). */
static int legacy_input(struct caffe_net *n, struct rt_shape *s)
{
    const Caffe__NetParameter *net = n->net;
    if (net->n_input > 1)
        return rt_error(RT_ERR_CONFIG, "%s: %zu inputs ('%s', '%s', ...): ragtag's models have "
                        "one", n->file, net->n_input, net->input[0], net->input[1]);
    Caffe__LayerParameter fake = CAFFE__LAYER_PARAMETER__INIT;
    fake.name = net->input[0];
    fake.type = (char *)"input";
    if (net->n_input_shape > 0)
        return dims_shape(n, &fake, net->input_shape[0]->n_dim, net->input_shape[0]->dim, s);
    int64_t d[4];
    for (size_t i = 0; i < net->n_input_dim && i < 4; i++)
        d[i] = net->input_dim[i];
    return dims_shape(n, &fake, net->n_input_dim, d, s);
}

static int data_layer(struct caffe_net *n, const Caffe__LayerParameter *l, const char *input,
                      struct rt_shape *s, bool *have)
{
    struct rt_shape ls;
    bool known;
    RT_TRY(transform_check(n, l));
    RT_TRY(layer_shape(n, l, &ls, &known));
    if (!known && !input)
        return caffe_layer_error(n, l, "its images' shape is in its data source, which ragtag "
                                       "does not open: give it with --input WxHxC (e.g. 28x28x1)");
    if (!known)
        RT_TRY(parse_input_flag(input, &ls));
    if (*have && memcmp(&ls, s, sizeof ls) != 0)
        return caffe_layer_error(n, l, "its shape %dx%dx%d differs from the input's %dx%dx%d "
                                       "(WxHxC)", ls.w, ls.h, ls.c, s->w, s->h, s->c);
    if (l->n_top < 1)
        return caffe_layer_error(n, l, "has no top blob");
    *s = ls;
    *have = true;
    RT_TRY(caffe_blob_set(n, l->top[0], 0));
    for (size_t t = 1; t < l->n_top; t++)
        RT_TRY(caffe_blob_set(n, l->top[t], -1)); /* labels */
    n->top = l->top[0];
    return RT_OK;
}

int caffe_input_shape(struct caffe_net *n, const Caffe__LayerParameter *const *layers, int count,
                      const char *input)
{
    struct rt_shape s = {0, 0, 0};
    bool have = false;
    if (n->net->n_input > 0) {
        RT_TRY(legacy_input(n, &s));
        RT_TRY(caffe_blob_set(n, n->net->input[0], 0));
        n->top = n->net->input[0];
        have = true;
    }
    int i = 0;
    for (; i < count && caffe_is_data_layer(layers[i]->type); i++)
        RT_TRY(data_layer(n, layers[i], input, &s, &have));
    if (!have)
        return rt_error(RT_ERR_CONFIG, "%s: the net has no input: no Data or Input layer before "
                                       "its first layer and no 'input' field", n->file);
    struct rt_shape flag;
    if (input) {
        RT_TRY(parse_input_flag(input, &flag));
        if (memcmp(&flag, &s, sizeof s) != 0)
            return rt_error(RT_ERR_ARG, "--input %s: the net's input is %dx%dx%d (WxHxC)", input,
                            s.w, s.h, s.c);
    }
    n->in = n->shape = s;
    return i;
}
