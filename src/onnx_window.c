/* onnx_window.c — the importer's converters of windowed operators: Conv,
 * MaxPool, AveragePool, GlobalAveragePool, and a zero Pad left to the Conv
 * or AveragePool after it (onnx_import.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

/* ---- windows: Conv, MaxPool, AveragePool -------------------------------------- */

struct window {
    int size, stride, pad;
};

static int pair_equal(struct importer *im, const Onnx__NodeProto *n, const char *name,
                      int64_t def, size_t want, int *out)
{
    const int64_t *v;
    size_t count;
    RT_TRY(rt_onnx_attr_get_ints(im->path, n, name, &v, &count));
    *out = (int)def;
    if (!v)
        return RT_OK;
    bool same = count == want;
    for (size_t i = 1; same && i < count; i++)
        same = v[i] == v[0];
    if (!same || v[0] < 0 || v[0] > 1024)
        return IMP_ERR(im, n, "attribute %s: %zu values%s (ragtag takes %zu equal values from "
                        "0 to 1024: square windows, the same %s on every side)", name, count,
                        same ? " out of range" : ", not all equal", want, name);
    *out = (int)v[0];
    return RT_OK;
}

/* kernel (from the weights for Conv: `size` > 0), strides, pads, dilations,
 * auto_pad; the window must fit the input as ragtag's layers require. */
static int window(struct importer *im, const Onnx__NodeProto *n, const struct imp_value *v,
                  int size, struct window *w)
{
    char autopad[32];
    int k, dil;
    RT_TRY(rt_onnx_attr_get_string(im->path, n, "auto_pad", "NOTSET", autopad, sizeof autopad));
    if (strcmp(autopad, "NOTSET") != 0 && strcmp(autopad, "VALID") != 0)
        return IMP_ERR(im, n, "attribute auto_pad = %s: ragtag needs explicit pads", autopad);
    RT_TRY(pair_equal(im, n, "kernel_shape", size, 2, &k));
    if ((size && k != size) || k < 1)
        return IMP_ERR(im, n, "attribute kernel_shape does not match the %dx%d weights or is "
                        "missing", size, size);
    RT_TRY(pair_equal(im, n, "strides", 1, 2, &w->stride));
    RT_TRY(pair_equal(im, n, "pads", 0, 4, &w->pad));
    RT_TRY(pair_equal(im, n, "dilations", 1, 2, &dil));
    if (dil != 1)
        return IMP_ERR(im, n, "attribute dilations = %d: ragtag's windows are not dilated", dil);
    if (w->stride < 1)
        return IMP_ERR(im, n, "attribute strides = 0");
    w->size = k;
    w->pad += v->pad; /* a Pad before it (torch writes one before AveragePool) */
    if (v->rank != 4)
        return IMP_ERR(im, n, "input '%s' is N x %zu values, not N x C x H x W", v->name,
                        rt_shape_count(v->s));
    if (w->pad >= k || k > v->s.h + 2 * w->pad || k > v->s.w + 2 * w->pad)
        return IMP_ERR(im, n, "a %dx%d window with pads %d on a %dx%d input: ragtag needs "
                        "pads < kernel <= input + 2*pads", k, k, w->pad, v->s.w, v->s.h);
    return RT_OK;
}

static struct rt_shape window_out(struct rt_shape in, int c, const struct window *w)
{
    return (struct rt_shape){c, (in.h + 2 * w->pad - w->size) / w->stride + 1,
                             (in.w + 2 * w->pad - w->size) / w->stride + 1};
}

static void window_keys(struct imp_layer *l, const struct window *w)
{
    imp_key(l, "size = %d", w->size);
    imp_key(l, "stride = %d", w->stride);
    if (w->pad)
        imp_key(l, "pad = %d", w->pad);
}

int imp_conv(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    const Onnx__TensorProto *wt, *bt;
    float *w = NULL, *b = NULL;
    int64_t group;
    struct window win;
    RT_TRY(imp_chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "group", 1, &group));
    if (group != 1)
        return IMP_ERR(im, n, "attribute group = %lld: ragtag's convolutions are not grouped",
                        (long long)group);
    if (!imp_has_input(n, 1) || !(wt = imp_const_find(im, n->input[1])) || wt->n_dims != 4 ||
        wt->dims[1] != v->s.c || wt->dims[2] != wt->dims[3] || wt->dims[0] < 1 ||
        wt->dims[0] > 65536)
        return IMP_ERR(im, n, "the weights must be a constant K x %d x R x R (square kernels "
                        "over all %d input channels)", v->s.c, v->s.c);
    int K = (int)wt->dims[0], r = (int)wt->dims[2];
    RT_TRY(window(im, n, v, r, &win));
    RT_TRY(imp_const_in(im, n, 1, 0, &wt, &w));
    if (imp_has_input(n, 2) && imp_const_in(im, n, 2, (size_t)K, &bt, &b) < 0) {
        free(w);
        return RT_ERR_UNSUPPORTED;
    }
    struct imp_layer *l = imp_new_layer(im, n, "conv");
    if (!l || (!b && !(b = calloc((size_t)K, sizeof *b)))) {
        free(w);
        free(b);
        return RT_ERR_NOMEM;
    }
    l->bias = imp_has_input(n, 2);
    imp_key(l, "filters = %d", K);
    window_keys(l, &win);
    int wd[4] = {K, v->s.c, r, r}, bd[1] = {K};
    imp_tensor(im, l, "weight", 4, wd, w);
    imp_tensor(im, l, "bias", 1, bd, b);
    return imp_output(im, n, im->nlayers - 1, window_out(v->s, K, &win), 4);
}

int imp_pool(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    struct window win;
    int64_t ceil_mode, include_pad;
    bool avg = strcmp(n->op_type, "AveragePool") == 0;
    RT_TRY(imp_chained_in(im, n, &v));
    RT_TRY(window(im, n, v, 0, &win));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "ceil_mode", 0, &ceil_mode));
    RT_TRY(rt_onnx_attr_get_int(im->path, n, "count_include_pad", 0, &include_pad));
    if (ceil_mode)
        return IMP_ERR(im, n, "attribute ceil_mode = 1: ragtag rounds output sizes down");
    if (avg && win.pad > v->pad && !include_pad)
        return IMP_ERR(im, n, "attribute count_include_pad = 0 with pads: ragtag's average "
                        "pooling counts padding as zeros (count_include_pad = 1)");
    struct imp_layer *l = imp_new_layer(im, n, avg ? "avgpool" : "maxpool");
    if (!l)
        return RT_ERR_NOMEM;
    window_keys(l, &win);
    return imp_output(im, n, im->nlayers - 1, window_out(v->s, v->s.c, &win), 4);
}

int imp_gap(struct importer *im, const Onnx__NodeProto *n)
{
    const struct imp_value *v;
    RT_TRY(imp_chained_in(im, n, &v));
    if (v->rank != 4)
        return IMP_ERR(im, n, "input '%s' is not N x C x H x W", v->name);
    if (!imp_new_layer(im, n, "globalavgpool"))
        return RT_ERR_NOMEM;
    return imp_output(im, n, im->nlayers - 1, (struct rt_shape){v->s.c, 1, 1}, 4);
}

/* The same zero padding p on H and W (none on N and C), or -1. */
static int even_pad(const int64_t *p, size_t count)
{
    if (count != 8 || p[0] || p[1] || p[4] || p[5])
        return -1;
    for (int k = 3; k < 8; k++)
        if (k != 4 && k != 5 && p[k] != p[2])
            return -1;
    return p[2] >= 0 && p[2] <= 1024 ? (int)p[2] : -1;
}

/* A constant zero Pad: nothing, or padding left to the Conv / AveragePool
 * that reads it (zeros counted in the average: ragtag's avgpool). */
int imp_pad(struct importer *im, const Onnx__NodeProto *n)
{
    static const char *const readers[] = {"Conv", "AveragePool", NULL};
    const struct imp_value *v;
    const Onnx__TensorProto *t;
    char mode[32];
    int64_t *p;
    size_t count;
    RT_TRY(imp_chained_in(im, n, &v));
    RT_TRY(rt_onnx_attr_get_string(im->path, n, "mode", "constant", mode, sizeof mode));
    if (strcmp(mode, "constant") != 0)
        return IMP_ERR(im, n, "attribute mode = %s: ragtag pads with zeros only", mode);
    if (imp_has_input(n, 2)) {
        float *c;
        RT_TRY(imp_const_in(im, n, 2, 1, &t, &c));
        float c0 = c[0];
        free(c);
        if (c0 != 0.0f)
            return IMP_ERR(im, n, "pads with %g: ragtag pads with zeros only", (double)c0);
    }
    if (!imp_has_input(n, 1) || !(t = imp_const_find(im, n->input[1])))
        return IMP_ERR(im, n, "input 1 (pads) must be a constant");
    RT_TRY(rt_onnx_tensor_int64s(im->path, n, n->input[1], t, &p, &count));
    int pad = v->rank == 4 ? even_pad(p, count) : -1;
    bool zero = true;
    for (size_t k = 0; k < count; k++)
        zero = zero && p[k] == 0;
    free(p);
    if (!zero && (pad < 0 || n->n_output != 1 || !imp_only_read_by(im, n->output[0], readers)))
        return IMP_ERR(im, n, "ragtag imports a Pad only as the same zero padding of H and W "
                        "read by Conv or AveragePool alone");
    RT_TRY(imp_output(im, n, v->layer, v->s, v->rank));
    im->values[im->nvalues - 1].pad = v->pad + (zero ? 0 : pad);
    return RT_OK;
}
