/* onnx_read.c — an ONNX file unpacked by protobuf-c, and checked access to
 * attributes and constant tensors (onnx_read.h). */
#include "config.h"

#include "onnx_read.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* A model larger than this is refused before reading (protobuf's own
 * limit for one message is 2 GiB). */
#define MAX_FILE ((long)2000 * 1000 * 1000)

static int slurp(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_error(errno == ENOENT ? RT_ERR_NOTFOUND : RT_ERR_IO, "cannot open %s: %s",
                        path, strerror(errno));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return rt_error(RT_ERR_IO, "%s: cannot find its size (not a regular file?)", path);
    }
    if (size == 0 || size > MAX_FILE) {
        fclose(f);
        return rt_error(RT_ERR_FORMAT, "%s: %ld bytes: not an ONNX model (accepted: 1 byte to "
                        "2 GB)", path, size);
    }
    *buf = malloc((size_t)size);
    if (!*buf) {
        fclose(f);
        return rt_error(RT_ERR_NOMEM, "out of memory reading %s (%ld bytes)", path, size);
    }
    size_t got = fread(*buf, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) {
        free(*buf);
        return rt_error(RT_ERR_IO, "%s: read %zu of %ld bytes", path, got, size);
    }
    *len = got;
    return RT_OK;
}

int rt_onnx_read(const char *path, Onnx__ModelProto **out)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    *out = NULL;
    RT_TRY(slurp(path, &buf, &len));
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    if (!m)
        return rt_error(RT_ERR_FORMAT, "%s: not an ONNX model (the protobuf ModelProto does "
                        "not parse: truncated or another kind of file)", path);
    if (!m->graph) {
        onnx__model_proto__free_unpacked(m, NULL);
        return rt_error(RT_ERR_FORMAT, "%s: the ONNX model has no graph", path);
    }
    *out = m;
    return RT_OK;
}

const char *rt_onnx_node_label(const Onnx__NodeProto *n)
{
    static _Thread_local char buf[160];
    if (n->name && n->name[0])
        return n->name;
    snprintf(buf, sizeof buf, "output %s", n->n_output && n->output[0] ? n->output[0] : "?");
    return buf;
}

int rt_onnx_node_error(int status, const char *path, const Onnx__NodeProto *n,
                       const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rt_error(status, "%s: node '%s' (%s): %s", path, rt_onnx_node_label(n),
                    n->op_type ? n->op_type : "?", msg);
}

/* An error about a tensor, in the node that reads it when there is one. */
static int tensor_error(int status, const char *path, const Onnx__NodeProto *n,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int tensor_error(int status, const char *path, const Onnx__NodeProto *n,
                        const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        return rt_onnx_node_error(status, path, n, "%s", msg);
    return rt_error(status, "%s: %s", path, msg);
}

const Onnx__AttributeProto *rt_onnx_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0)
            return n->attribute[i];
    return NULL;
}

static int wrong_type(const char *path, const Onnx__NodeProto *n, const char *name,
                      const char *want)
{
    return rt_onnx_node_error(RT_ERR_FORMAT, path, n, "attribute %s is not %s", name, want);
}

int rt_onnx_attr_get_int(const char *path, const Onnx__NodeProto *n, const char *name,
                         int64_t def, int64_t *out)
{
    const Onnx__AttributeProto *a = rt_onnx_attr(n, name);
    *out = def;
    if (!a)
        return RT_OK;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT)
        return wrong_type(path, n, name, "an integer");
    *out = a->i;
    return RT_OK;
}

int rt_onnx_attr_get_float(const char *path, const Onnx__NodeProto *n, const char *name,
                           float def, float *out)
{
    const Onnx__AttributeProto *a = rt_onnx_attr(n, name);
    *out = def;
    if (!a)
        return RT_OK;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT)
        return wrong_type(path, n, name, "a float");
    *out = a->f;
    return RT_OK;
}

int rt_onnx_attr_get_ints(const char *path, const Onnx__NodeProto *n, const char *name,
                          const int64_t **v, size_t *count)
{
    const Onnx__AttributeProto *a = rt_onnx_attr(n, name);
    *v = NULL;
    *count = 0;
    if (!a)
        return RT_OK;
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)
        return wrong_type(path, n, name, "a list of integers");
    *v = a->ints;
    *count = a->n_ints;
    return RT_OK;
}

int rt_onnx_attr_get_string(const char *path, const Onnx__NodeProto *n, const char *name,
                            const char *def, char *buf, size_t bufn)
{
    const Onnx__AttributeProto *a = rt_onnx_attr(n, name);
    if (!a) {
        snprintf(buf, bufn, "%s", def);
        return RT_OK;
    }
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING)
        return wrong_type(path, n, name, "a string");
    snprintf(buf, bufn, "%.*s", (int)(a->s.len < bufn ? a->s.len : bufn - 1),
             (const char *)a->s.data);
    return RT_OK;
}

long long rt_onnx_tensor_count(const Onnx__TensorProto *t)
{
    long long count = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || (t->dims[i] > 0 && count > (1LL << 40) / t->dims[i]))
            return -1;
        count *= t->dims[i];
    }
    return count;
}

/* Check the stored element count of t against its dims. */
static int check_count(const char *path, const Onnx__NodeProto *node, const char *what,
                       const Onnx__TensorProto *t, size_t have, long long want)
{
    if (want < 0)
        return tensor_error(RT_ERR_FORMAT, path, node, "tensor %s: bad dims", what);
    if ((long long)have != want)
        return tensor_error(RT_ERR_FORMAT, path, node,
                            "tensor %s holds %zu values but its dims say %lld", what, have, want);
    if (t->n_external_data || (t->has_data_location &&
                               t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
        return tensor_error(RT_ERR_UNSUPPORTED, path, node, "tensor %s is stored in an "
                            "external file (save the model with its data inside)", what);
    return RT_OK;
}

int rt_onnx_tensor_floats(const char *path, const Onnx__NodeProto *node, const char *what,
                          const Onnx__TensorProto *t, float **out, size_t *count)
{
    long long n = rt_onnx_tensor_count(t);
    bool dbl = t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    size_t esize = dbl ? 8 : 4;
    if (t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && !dbl)
        return tensor_error(RT_ERR_UNSUPPORTED, path, node, "tensor %s has ONNX data type %d "
                            "(ragtag imports float32 and float64 weights)", what,
                            (int)t->data_type);
    size_t have = t->has_raw_data ? t->raw_data.len / esize
                  : dbl           ? t->n_double_data
                                  : t->n_float_data;
    if (t->has_raw_data && t->raw_data.len % esize)
        return tensor_error(RT_ERR_FORMAT, path, node, "tensor %s: raw data of %zu bytes", what,
                            t->raw_data.len);
    RT_TRY(check_count(path, node, what, t, have, n));
    float *v = malloc((have ? have : 1) * sizeof *v);
    if (!v)
        return rt_error(RT_ERR_NOMEM, "out of memory reading tensor %s", what);
    const uint8_t *raw = t->has_raw_data ? t->raw_data.data : NULL;
    for (size_t i = 0; i < have; i++) { /* raw data: little-endian, maybe unaligned */
        if (!dbl && raw) {
            float f;
            memcpy(&f, raw + i * esize, esize);
            v[i] = f;
        } else if (!dbl) {
            v[i] = t->float_data[i];
        } else if (raw) {
            double d;
            memcpy(&d, raw + i * esize, esize);
            v[i] = (float)d;
        } else {
            v[i] = (float)t->double_data[i];
        }
    }
    *out = v;
    *count = have;
    return RT_OK;
}

int rt_onnx_tensor_int64s(const char *path, const Onnx__NodeProto *node, const char *what,
                          const Onnx__TensorProto *t, int64_t **out, size_t *count)
{
    long long n = rt_onnx_tensor_count(t);
    /* BOOL (Dropout's training_mode) is one byte raw, or int32_data */
    bool b8 = t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    bool i32 = b8 || t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    size_t esize = b8 ? 1 : i32 ? 4 : 8;
    if (t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__INT64 && !i32)
        return tensor_error(RT_ERR_UNSUPPORTED, path, node, "tensor %s has ONNX data type %d "
                            "(expected integers)", what, (int)t->data_type);
    size_t have = t->has_raw_data ? t->raw_data.len / esize
                  : i32           ? t->n_int32_data
                                  : t->n_int64_data;
    RT_TRY(check_count(path, node, what, t, have, n));
    int64_t *v = malloc((have ? have : 1) * sizeof *v);
    if (!v)
        return rt_error(RT_ERR_NOMEM, "out of memory reading tensor %s", what);
    const uint8_t *raw = t->has_raw_data ? t->raw_data.data : NULL;
    for (size_t i = 0; i < have; i++) {
        int32_t a;
        if (b8 && raw) {
            v[i] = raw[i];
        } else if (i32 && raw) {
            memcpy(&a, raw + i * esize, esize);
            v[i] = a;
        } else if (i32) {
            v[i] = t->int32_data[i];
        } else if (raw) {
            memcpy(&v[i], raw + i * esize, esize);
        } else {
            v[i] = t->int64_data[i];
        }
    }
    *out = v;
    *count = have;
    return RT_OK;
}
