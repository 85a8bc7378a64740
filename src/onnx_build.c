/* onnx_build.c — the exporter's graph builder (onnx_build.h). Every struct
 * and string it hands out lives in its arena until destroy; the growable
 * lists (nodes, initializers, inputs, outputs) are realloc'ed vectors. */
#include "config.h"

#include "onnx_build.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"

#define MAX_ATTRS 8 /* the most any exported node has is 5 (Conv) */

struct rt_onnx_builder {
    void **blocks; /* the arena */
    size_t nblocks, cap_blocks;
    Onnx__GraphProto graph;
    size_t cap_node, cap_init, cap_in, cap_out;
};

static void *arena(rt_onnx_builder *b, size_t bytes)
{
    if (b->nblocks == b->cap_blocks) {
        size_t cap = b->cap_blocks ? 2 * b->cap_blocks : 256;
        void **p = realloc(b->blocks, cap * sizeof *p);
        if (!p)
            return NULL;
        b->blocks = p;
        b->cap_blocks = cap;
    }
    void *m = calloc(1, bytes ? bytes : 1);
    if (m)
        b->blocks[b->nblocks++] = m;
    return m;
}

static int oom(void) { return rt_error(RT_ERR_NOMEM, "out of memory building the ONNX graph"); }

/* Append p to a vector of pointers. */
static int push(void ***vec, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 32;
        void **v = realloc(*vec, c * sizeof *v);
        if (!v)
            return oom();
        *vec = v;
        *cap = c;
    }
    (*vec)[(*n)++] = p;
    return RT_OK;
}

rt_onnx_builder *rt_onnx_builder_new(void)
{
    rt_onnx_builder *b = calloc(1, sizeof *b);
    if (!b) {
        oom();
        return NULL;
    }
    onnx__graph_proto__init(&b->graph);
    return b;
}

void rt_onnx_builder_destroy(rt_onnx_builder **bp)
{
    rt_onnx_builder *b = *bp;
    if (!b)
        return;
    for (size_t i = 0; i < b->nblocks; i++)
        free(b->blocks[i]);
    free(b->blocks);
    free(b->graph.node);
    free(b->graph.initializer);
    free(b->graph.input);
    free(b->graph.output);
    free(b);
    *bp = NULL;
}

char *rt_onnx_name(rt_onnx_builder *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = len >= 0 ? arena(b, (size_t)len + 1) : NULL;
    if (!s) {
        oom();
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    return s;
}

Onnx__NodeProto *rt_onnx_node(rt_onnx_builder *b, const char *op, const char *name,
                              int nin, const char *const *inputs, const char *output)
{
    Onnx__NodeProto *n = arena(b, sizeof *n);
    char **in = arena(b, (size_t)nin * sizeof *in);
    char **out = arena(b, sizeof *out);
    Onnx__AttributeProto **attrs = arena(b, MAX_ATTRS * sizeof *attrs);
    if (!n || !in || !out || !attrs)
        goto fail;
    onnx__node_proto__init(n);
    n->op_type = rt_onnx_name(b, "%s", op);
    n->name = rt_onnx_name(b, "%s", name);
    n->output = out;
    n->n_output = 1;
    if (!n->op_type || !n->name || !(out[0] = rt_onnx_name(b, "%s", output)))
        goto fail;
    for (int i = 0; i < nin; i++)
        if (!(in[i] = rt_onnx_name(b, "%s", inputs[i])))
            goto fail;
    n->input = in;
    n->n_input = (size_t)nin;
    n->attribute = attrs;
    if (push((void ***)&b->graph.node, &b->graph.n_node, &b->cap_node, n) < 0)
        return NULL;
    return n;
fail:
    oom();
    return NULL;
}

static Onnx__AttributeProto *new_attr(rt_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type)
{
    RT_ASSERT(n->n_attribute < MAX_ATTRS);
    Onnx__AttributeProto *a = arena(b, sizeof *a);
    if (!a) {
        oom();
        return NULL;
    }
    onnx__attribute_proto__init(a);
    if (!(a->name = rt_onnx_name(b, "%s", name)))
        return NULL;
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

int rt_onnx_attr_int(rt_onnx_builder *b, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = new_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a)
        return RT_ERR_NOMEM;
    a->has_i = 1;
    a->i = v;
    return RT_OK;
}

int rt_onnx_attr_float(rt_onnx_builder *b, Onnx__NodeProto *n, const char *name, float v)
{
    Onnx__AttributeProto *a =
        new_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (!a)
        return RT_ERR_NOMEM;
    a->has_f = 1;
    a->f = v;
    return RT_OK;
}

int rt_onnx_attr_ints(rt_onnx_builder *b, Onnx__NodeProto *n, const char *name, int count,
                      const int64_t *v)
{
    Onnx__AttributeProto *a = new_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *ints = arena(b, (size_t)count * sizeof *ints);
    if (!a || !ints)
        return oom();
    memcpy(ints, v, (size_t)count * sizeof *ints);
    a->ints = ints;
    a->n_ints = (size_t)count;
    return RT_OK;
}

/* An initializer of `bytes` raw little-endian bytes (x86, ARM: the host's). */
static int add_init(rt_onnx_builder *b, const char *name, int32_t type, int ndim,
                    const int64_t *dims, const void *data, size_t bytes)
{
    Onnx__TensorProto *t = arena(b, sizeof *t);
    int64_t *d = arena(b, (size_t)ndim * sizeof *d);
    uint8_t *raw = arena(b, bytes);
    if (!t || !d || !raw)
        return oom();
    onnx__tensor_proto__init(t);
    if (!(t->name = rt_onnx_name(b, "%s", name)))
        return RT_ERR_NOMEM;
    memcpy(d, dims, (size_t)ndim * sizeof *d);
    memcpy(raw, data, bytes);
    t->dims = d;
    t->n_dims = (size_t)ndim;
    t->has_data_type = 1;
    t->data_type = type;
    t->has_raw_data = 1;
    t->raw_data.data = raw;
    t->raw_data.len = bytes;
    return push((void ***)&b->graph.initializer, &b->graph.n_initializer, &b->cap_init, t);
}

int rt_onnx_init_floats(rt_onnx_builder *b, const char *name, int ndim, const int64_t *dims,
                        const float *data)
{
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= (size_t)dims[i];
    return add_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims, data,
                    count * sizeof(float));
}

int rt_onnx_init_int64s(rt_onnx_builder *b, const char *name, int count, const int64_t *v)
{
    int64_t dims[1] = {count};
    return add_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims, v,
                    (size_t)count * sizeof(int64_t));
}

int rt_onnx_graph_io(rt_onnx_builder *b, int output, const char *name, int ndim,
                     const int64_t *dims)
{
    Onnx__ValueInfoProto *v = arena(b, sizeof *v);
    Onnx__TypeProto *type = arena(b, sizeof *type);
    Onnx__TypeProto__Tensor *tt = arena(b, sizeof *tt);
    Onnx__TensorShapeProto *shape = arena(b, sizeof *shape);
    Onnx__TensorShapeProto__Dimension **dv = arena(b, (size_t)ndim * sizeof *dv);
    if (!v || !type || !tt || !shape || !dv)
        return oom();
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(type);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(shape);
    for (int i = 0; i < ndim; i++) {
        Onnx__TensorShapeProto__Dimension *d = arena(b, sizeof *d);
        if (!d)
            return oom();
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[i] < 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            if (!(d->dim_param = rt_onnx_name(b, "N")))
                return RT_ERR_NOMEM;
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        }
        dv[i] = d;
    }
    shape->dim = dv;
    shape->n_dim = (size_t)ndim;
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = shape;
    type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type->tensor_type = tt;
    v->type = type;
    if (!(v->name = rt_onnx_name(b, "%s", name)))
        return RT_ERR_NOMEM;
    if (output)
        return push((void ***)&b->graph.output, &b->graph.n_output, &b->cap_out, v);
    return push((void ***)&b->graph.input, &b->graph.n_input, &b->cap_in, v);
}

static int write_all(const char *path, const uint8_t *buf, size_t len)
{
    char *tmp = malloc(strlen(path) + 16);
    if (!tmp)
        return oom();
    sprintf(tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int rc = rt_error(RT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    bool ok = fwrite(buf, 1, len, f) == len;
    ok = (fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int rc = rt_error(RT_ERR_IO, "writing %s: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return RT_OK;
}

int rt_onnx_builder_write(rt_onnx_builder *b, const char *path, int64_t opset,
                          const char *graph_name, const char *doc)
{
    Onnx__OperatorSetIdProto op = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__OperatorSetIdProto *ops[1] = {&op};
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    op.domain = "";
    op.has_version = 1;
    op.version = opset;
    model.has_ir_version = 1;
    model.ir_version = 7; /* ONNX 1.8+, enough for opset 13 */
    model.opset_import = ops;
    model.n_opset_import = 1;
    model.producer_name = "ragtag";
    model.producer_version = PACKAGE_VERSION;
    model.doc_string = (char *)doc;
    b->graph.name = (char *)graph_name;
    model.graph = &b->graph;
    size_t len = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return oom();
    onnx__model_proto__pack(&model, buf);
    int rc = write_all(path, buf, len);
    free(buf);
    b->graph.name = NULL;
    return rc;
}
