/* onnx_read.h — reading an ONNX file for the importer: the model unpacked
 * by protobuf-c, checked attribute getters and constant tensors as host
 * arrays. Every error names the file, the node (its name, or its first
 * output when it has none) and its operator. */
#ifndef RT_ONNX_READ_H
#define RT_ONNX_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"

/* Read and unpack path; RT_ERR_FORMAT when it is not an ONNX model. Free
 * with onnx__model_proto__free_unpacked(m, NULL). */
int rt_onnx_read(const char *path, Onnx__ModelProto **out);

/* The name a message gives a node: its name, else "output <first output>". */
const char *rt_onnx_node_label(const Onnx__NodeProto *n);

/* "<path>: node '<label>' (<op>): <message>" with the given status. */
int rt_onnx_node_error(int status, const char *path, const Onnx__NodeProto *n,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

const Onnx__AttributeProto *rt_onnx_attr(const Onnx__NodeProto *n, const char *name);

/* Typed attribute getters: `def` when absent; RT_ERR_FORMAT naming node and
 * attribute when present with another type. */
int rt_onnx_attr_get_int(const char *path, const Onnx__NodeProto *n, const char *name,
                         int64_t def, int64_t *out);
int rt_onnx_attr_get_float(const char *path, const Onnx__NodeProto *n, const char *name,
                           float def, float *out);
/* *count = 0 and *v = NULL when absent. */
int rt_onnx_attr_get_ints(const char *path, const Onnx__NodeProto *n, const char *name,
                          const int64_t **v, size_t *count);
/* `def` when absent; the string is the attribute's (not NUL-terminated in
 * the file: copied into buf of n bytes). */
int rt_onnx_attr_get_string(const char *path, const Onnx__NodeProto *n, const char *name,
                            const char *def, char *buf, size_t bufn);

/* A tensor's element count from its dims; -1 when a dim is negative or the
 * count overflows. */
long long rt_onnx_tensor_count(const Onnx__TensorProto *t);

/* Float (or double, converted) data of t into a malloc'ed array of exactly
 * rt_onnx_tensor_count(t) floats; errors name `what` and the node that reads
 * it (when not NULL). */
int rt_onnx_tensor_floats(const char *path, const Onnx__NodeProto *node, const char *what,
                          const Onnx__TensorProto *t, float **out, size_t *count);
/* INT64 (or INT32) data, the same way. */
int rt_onnx_tensor_int64s(const char *path, const Onnx__NodeProto *node, const char *what,
                          const Onnx__TensorProto *t, int64_t **out, size_t *count);

#endif
