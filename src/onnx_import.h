/* onnx_import.h — the importer's state, shared by its files:
 *   onnx_import.c  the driver: graph input, the walk over the nodes, outputs
 *   onnx_nodes.c   the table of converters and what they share
 *   onnx_window.c onnx_dense.c onnx_values.c onnx_flat.c
 *                  one converter per ONNX operator, into ragtag layers
 *   onnx_emit.c    the model file and the weights written from the layers
 *
 * ragtag's layers form a chain (each reads the previous one's output; a
 * [shortcut] also reads an earlier one), so the walk keeps, for every ONNX
 * value, the layer that produced it and its shape, and refuses a node whose
 * data input is not the last layer's output. An activation or a batch norm
 * that follows a layer able to hold it (conv, dense, shortcut; batch norm
 * after a conv without bias) and is that output's only reader is fused
 * into it, so `ragtag export` followed by import gives back the model. */
#ifndef RT_ONNX_IMPORT_H
#define RT_ONNX_IMPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "layer.h"
#include "model.h"
#include "onnx.pb-c.h"
#include "onnx_read.h"
#include "status.h"

#define IMP_MAX_TENSORS 6

struct imp_tensor {
    char suffix[32]; /* "weight", "bn.running_var", ... */
    int ndim;
    int dims[4];
    float *data; /* owned */
};

struct imp_layer {
    const char *type; /* ragtag section: "conv", "dense", ... */
    char keys[256];   /* its "key = value" lines */
    const Onnx__NodeProto *node; /* where it came from */
    enum rt_act act;  /* fused activation (conv, dense, shortcut) */
    bool bias;        /* conv: has a bias (no batch norm fusion then) */
    bool bn;          /* conv: batch_normalize = 1 */
    bool open_bias;   /* dense from MatMul: a following Add may give its bias */
    struct imp_tensor t[IMP_MAX_TENSORS];
    int nt;
};

/* An ONNX value: which layer made it (-1: the graph input) and its shape. */
struct imp_value {
    const char *name;
    int layer;
    struct rt_shape s;
    int rank; /* 2 (N x values) or 4 (N x C x H x W) */
    int pad;  /* a zero Pad on every side, left to the Conv/AveragePool reading it */
};

struct importer {
    const char *path;
    Onnx__ModelProto *model;
    Onnx__GraphProto *g;
    struct imp_layer *layers;
    int nlayers, cap_layers;
    struct imp_value *values;
    int nvalues, cap_values;
    const Onnx__TensorProto **consts; /* Constant nodes' tensors */
    const char **const_names;
    int nconsts, cap_consts;
    struct rt_shape input;
    struct rt_shape out_shape; /* the last layer's output */
    const char *softmax_out; /* the final Softmax's output, if any */
};

/* ---- onnx_import.c ---------------------------------------------------------- */
const struct imp_value *imp_value_find(const struct importer *im, const char *name);
int imp_value_add(struct importer *im, const char *name, int layer, struct rt_shape s, int rank);
/* An initializer or Constant output of that name, or NULL. */
const Onnx__TensorProto *imp_const_find(const struct importer *im, const char *name);
int imp_const_add(struct importer *im, const char *name, const Onnx__TensorProto *t);
/* How many node inputs and graph outputs read the value `name`. */
int imp_uses(const struct importer *im, const char *name);
/* A new layer of `type` made from node n (keys and tensors empty). */
struct imp_layer *imp_layer_add(struct importer *im, const Onnx__NodeProto *n, const char *type);
/* Append "key = value" to a layer's keys. */
void imp_key(struct imp_layer *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Give a layer a tensor; takes ownership of data (freed on failure too). */
int imp_tensor(struct importer *im, struct imp_layer *l, const char *suffix, int ndim,
               const int *dims, float *data);

/* ---- onnx_nodes.c: the converter table and what converters share ---------- */
/* Convert one node (or record a constant / alias); the error names it. */
int imp_node(struct importer *im, const Onnx__NodeProto *n);

/* An error naming the node and its operator, for what ragtag cannot express. */
#define IMP_ERR(im, n, ...) rt_onnx_node_error(RT_ERR_UNSUPPORTED, (im)->path, (n), __VA_ARGS__)

bool imp_has_input(const Onnx__NodeProto *n, size_t k);
/* Data input k: a value some layer (or the graph input) produced. */
int imp_data_in(struct importer *im, const Onnx__NodeProto *n, size_t k,
                const struct imp_value **v);
/* v must be the previous layer's output: ragtag's layers form a chain. */
int imp_chained(struct importer *im, const Onnx__NodeProto *n, const struct imp_value *v);
/* imp_data_in of input 0, which must be chained. */
int imp_chained_in(struct importer *im, const Onnx__NodeProto *n, const struct imp_value **v);
/* Output 0 becomes a value of `layer`; another output must not be read. */
int imp_output(struct importer *im, const Onnx__NodeProto *n, int layer, struct rt_shape s,
               int rank);
/* Constant input k as malloc'ed floats; `want` values unless 0. */
int imp_const_in(struct importer *im, const Onnx__NodeProto *n, size_t k, size_t want,
                 const Onnx__TensorProto **t, float **data);
/* A new layer made from node n (NULL with the error set). */
struct imp_layer *imp_new_layer(struct importer *im, const Onnx__NodeProto *n,
                                const char *type);
/* The last layer, when v is its output and nothing else reads v. */
struct imp_layer *imp_fusable(struct importer *im, const struct imp_value *v);
/* Whether every reader of `value` is one of `ops` (NULL-terminated). */
bool imp_only_read_by(const struct importer *im, const char *value, const char *const *ops);
/* The shortest text that reads back as the same float. */
const char *imp_ftext(float v, char *buf, size_t n);
/* The model's opset of the default domain. */
int imp_opset(const struct importer *im);

/* ---- the converters: onnx_window.c, onnx_dense.c, onnx_values.c, onnx_flat.c */
int imp_conv(struct importer *im, const Onnx__NodeProto *n);
int imp_pool(struct importer *im, const Onnx__NodeProto *n);    /* MaxPool, AveragePool */
int imp_gap(struct importer *im, const Onnx__NodeProto *n);
int imp_pad(struct importer *im, const Onnx__NodeProto *n);
int imp_gemm(struct importer *im, const Onnx__NodeProto *n);
int imp_matmul(struct importer *im, const Onnx__NodeProto *n);
int imp_add(struct importer *im, const Onnx__NodeProto *n);
int imp_act(struct importer *im, const Onnx__NodeProto *n);     /* Relu, LeakyRelu, ... */
int imp_bn(struct importer *im, const Onnx__NodeProto *n);
int imp_dropout(struct importer *im, const Onnx__NodeProto *n);
int imp_flatten(struct importer *im, const Onnx__NodeProto *n);
int imp_reshape(struct importer *im, const Onnx__NodeProto *n);
int imp_softmax(struct importer *im, const Onnx__NodeProto *n);

/* ---- onnx_emit.c ------------------------------------------------------------ */
/* DIR/model.cfg and DIR/weights.safetensors from the layers; the model file
 * is loaded back by ragtag to check it and to name the tensors. */
int imp_emit(struct importer *im, const char *out_dir, int classes);

#endif
