/* onnx_build.h — an ONNX graph under construction, for the exporter: nodes,
 * attributes, initializers and graph inputs/outputs as protobuf-c structs
 * whose memory an arena owns, then packed and written in one go. */
#ifndef RT_ONNX_BUILD_H
#define RT_ONNX_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"

typedef struct rt_onnx_builder rt_onnx_builder;

rt_onnx_builder *rt_onnx_builder_new(void);
void rt_onnx_builder_destroy(rt_onnx_builder **b);

/* A string owned by the builder ("%s.weight" etc.); NULL when out of memory. */
char *rt_onnx_name(rt_onnx_builder *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A node op(inputs) -> output; node and value names are copied. NULL when
 * out of memory (the error is set). */
Onnx__NodeProto *rt_onnx_node(rt_onnx_builder *b, const char *op, const char *name,
                              int nin, const char *const *inputs, const char *output);
int rt_onnx_attr_int(rt_onnx_builder *b, Onnx__NodeProto *n, const char *name, int64_t v);
int rt_onnx_attr_float(rt_onnx_builder *b, Onnx__NodeProto *n, const char *name, float v);
int rt_onnx_attr_ints(rt_onnx_builder *b, Onnx__NodeProto *n, const char *name, int count,
                      const int64_t *v);

/* Initializers (constant tensors) copied from host memory. */
int rt_onnx_init_floats(rt_onnx_builder *b, const char *name, int ndim, const int64_t *dims,
                        const float *data);
int rt_onnx_init_int64s(rt_onnx_builder *b, const char *name, int count, const int64_t *v);

/* A float graph input or output of ndim dims; a dim < 0 is the symbolic
 * batch size "N". */
int rt_onnx_graph_io(rt_onnx_builder *b, int output, const char *name, int ndim,
                     const int64_t *dims);

/* Pack the model (ir_version, one opset of the default domain) and write it
 * to path through a temporary file renamed into place. */
int rt_onnx_builder_write(rt_onnx_builder *b, const char *path, int64_t opset,
                          const char *graph_name, const char *doc);

#endif
