/* onnx_import.c — `ragtag import MODEL.onnx -o DIR`: the driver. It finds
 * the graph's one data input, walks the nodes (which ONNX keeps in
 * topological order) through the converters of onnx_nodes.c, checks that
 * the graph's outputs are the logits (or their softmax) and has
 * onnx_emit.c write the model file and its weights (onnx_import.h). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.h"
#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

static int oom(void) { return rt_error(RT_ERR_NOMEM, "out of memory importing the model"); }

/* Grow *vec (of elements of `size` bytes) to hold one more. */
static int grow(void *vec, int n, int *cap, size_t size)
{
    void **v = vec;
    if (n < *cap)
        return RT_OK;
    int c = *cap ? 2 * *cap : 32;
    void *p = realloc(*v, (size_t)c * size);
    if (!p)
        return oom();
    *v = p;
    *cap = c;
    return RT_OK;
}

const struct imp_value *imp_value_find(const struct importer *im, const char *name)
{
    for (int i = im->nvalues - 1; i >= 0; i--)
        if (strcmp(im->values[i].name, name) == 0)
            return &im->values[i];
    return NULL;
}

int imp_value_add(struct importer *im, const char *name, int layer, struct rt_shape s, int rank)
{
    RT_TRY(grow(&im->values, im->nvalues, &im->cap_values, sizeof *im->values));
    im->values[im->nvalues++] = (struct imp_value){name, layer, s, rank, 0};
    if (layer >= 0 && layer == im->nlayers - 1)
        im->out_shape = s;
    return RT_OK;
}

const Onnx__TensorProto *imp_const_find(const struct importer *im, const char *name)
{
    for (size_t i = 0; i < im->g->n_initializer; i++)
        if (im->g->initializer[i]->name && strcmp(im->g->initializer[i]->name, name) == 0)
            return im->g->initializer[i];
    for (int i = 0; i < im->nconsts; i++)
        if (strcmp(im->const_names[i], name) == 0)
            return im->consts[i];
    return NULL;
}

int imp_const_add(struct importer *im, const char *name, const Onnx__TensorProto *t)
{
    int cap = im->cap_consts;
    RT_TRY(grow(&im->consts, im->nconsts, &cap, sizeof *im->consts));
    RT_TRY(grow(&im->const_names, im->nconsts, &im->cap_consts, sizeof *im->const_names));
    im->consts[im->nconsts] = t;
    im->const_names[im->nconsts++] = name;
    return RT_OK;
}

int imp_uses(const struct importer *im, const char *name)
{
    int uses = 0;
    for (size_t i = 0; i < im->g->n_node; i++)
        for (size_t k = 0; k < im->g->node[i]->n_input; k++)
            uses += strcmp(im->g->node[i]->input[k], name) == 0;
    for (size_t i = 0; i < im->g->n_output; i++)
        uses += strcmp(im->g->output[i]->name, name) == 0;
    return uses;
}

struct imp_layer *imp_layer_add(struct importer *im, const Onnx__NodeProto *n, const char *type)
{
    if (grow(&im->layers, im->nlayers, &im->cap_layers, sizeof *im->layers) < 0)
        return NULL;
    struct imp_layer *l = &im->layers[im->nlayers++];
    memset(l, 0, sizeof *l);
    l->type = type;
    l->node = n;
    l->act = RT_ACT_IDENTITY;
    return l;
}

void imp_key(struct imp_layer *l, const char *fmt, ...)
{
    size_t len = strlen(l->keys);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->keys + len, sizeof l->keys - len, fmt, ap);
    va_end(ap);
    len = strlen(l->keys);
    RT_ASSERT(len + 2 < sizeof l->keys);
    l->keys[len] = '\n';
    l->keys[len + 1] = '\0';
}

int imp_tensor(struct importer *im, struct imp_layer *l, const char *suffix, int ndim,
               const int *dims, float *data)
{
    RT_ASSERT(l->nt < IMP_MAX_TENSORS && ndim >= 1 && ndim <= 4);
    struct imp_tensor *t = &l->t[l->nt++];
    snprintf(t->suffix, sizeof t->suffix, "%s", suffix);
    t->ndim = ndim;
    memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
    t->data = data;
    (void)im;
    return RT_OK;
}

/* The one graph input that is not an initializer: float, N x C x H x W or
 * N x F, with fixed sizes past the batch. */
static int graph_input(struct importer *im)
{
    const Onnx__ValueInfoProto *in = NULL;
    for (size_t i = 0; i < im->g->n_input; i++) {
        const Onnx__ValueInfoProto *v = im->g->input[i];
        if (imp_const_find(im, v->name))
            continue;
        if (in)
            return rt_error(RT_ERR_UNSUPPORTED, "%s: the graph has several inputs (%s, %s); "
                            "a ragtag model has one", im->path, in->name, v->name);
        in = v;
    }
    if (!in)
        return rt_error(RT_ERR_FORMAT, "%s: the graph has no input", im->path);
    const Onnx__TypeProto *t = in->type;
    if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type->shape ||
        t->tensor_type->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
        return rt_error(RT_ERR_UNSUPPORTED, "%s: graph input %s is not a float tensor of "
                        "known shape", im->path, in->name);
    const Onnx__TensorShapeProto *s = t->tensor_type->shape;
    int d[4] = {1, 1, 1, 1};
    if (s->n_dim != 4 && s->n_dim != 2)
        return rt_error(RT_ERR_UNSUPPORTED, "%s: graph input %s has %zu dimensions (ragtag "
                        "takes N x C x H x W or N x features)", im->path, in->name, s->n_dim);
    for (size_t k = 1; k < s->n_dim; k++) {
        if (s->dim[k]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
            s->dim[k]->dim_value < 1 || s->dim[k]->dim_value > 65536)
            return rt_error(RT_ERR_UNSUPPORTED, "%s: graph input %s: dimension %zu is not a "
                            "fixed size from 1 to 65536", im->path, in->name, k);
        d[k] = (int)s->dim[k]->dim_value;
    }
    im->input = (struct rt_shape){d[1], d[2], d[3]};
    return imp_value_add(im, in->name, -1, im->input, (int)s->n_dim);
}

/* Every graph output is the last layer's value or the Softmax of it. */
static int graph_outputs(struct importer *im, int *classes)
{
    if (im->nlayers == 0)
        return rt_error(RT_ERR_UNSUPPORTED, "%s: the graph computes nothing ragtag can train "
                        "(no layer)", im->path);
    for (size_t i = 0; i < im->g->n_output; i++) {
        const char *name = im->g->output[i]->name;
        const struct imp_value *v = imp_value_find(im, name);
        bool softmax = im->softmax_out && strcmp(name, im->softmax_out) == 0;
        if (!softmax && (!v || v->layer != im->nlayers - 1))
            return rt_error(RT_ERR_UNSUPPORTED, "%s: graph output %s is not the last "
                            "layer's output (a ragtag model has one output: the logits, or "
                            "their softmax)", im->path, name);
    }
    *classes = (int)rt_shape_count(im->out_shape);
    return RT_OK;
}

static void importer_free(struct importer *im)
{
    for (int i = 0; i < im->nlayers; i++)
        for (int k = 0; k < im->layers[i].nt; k++)
            free(im->layers[i].t[k].data);
    free(im->layers);
    free(im->values);
    free(im->consts);
    free(im->const_names);
    if (im->model)
        onnx__model_proto__free_unpacked(im->model, NULL);
}

int rt_onnx_import(const char *onnx_path, const char *out_dir)
{
    struct importer im = {.path = onnx_path};
    int rc = rt_onnx_read(onnx_path, &im.model);
    if (rc == RT_OK) {
        im.g = im.model->graph;
        rc = graph_input(&im);
    }
    for (size_t i = 0; rc == RT_OK && i < im.g->n_node; i++)
        rc = imp_node(&im, im.g->node[i]);
    int classes = 0;
    if (rc == RT_OK)
        rc = graph_outputs(&im, &classes);
    if (rc == RT_OK)
        rc = imp_emit(&im, out_dir, classes);
    importer_free(&im);
    return rc;
}
