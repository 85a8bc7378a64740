/* layer.h — the private interface between the model and its layers.
 *
 * Caffe's split, in C: a static registry (model.c) maps a model file's
 * section name to a struct rt_layer_ops; each layer keeps its own small
 * private struct (priv_size bytes, zeroed by the model), never one union of
 * every layer's fields.
 *
 * Life of a layer:
 *  setup     reads its keys (strict getters of cfg.h), checks its input
 *            shape, sets l->out, declares its parameter and state tensors
 *            (rt_layer_param / rt_layer_state give their offsets);
 *  alloc     (optional) allocates its own device buffers for max_batch;
 *  workspace (optional) conv workspace floats it needs, shared model-wide;
 *  forward / backward, with everything in struct rt_pass;
 *  release   (optional) frees what alloc made (the model frees priv).
 *
 * Layers reach memory and kernels only through rt_op_* / rt_buf_* /
 * rt_copy, never host pointers, so every backend runs them unchanged, and
 * they never allocate in forward or backward.
 *
 * Gradient contract: backward OVERWRITES p->dx[i] for every input i with
 * p->need_dx[i], and overwrites its parameter gradients; it may use p->dy's
 * memory as scratch (the model reads no delta after its layer's backward),
 * and that memory stays as the layer left it until backward ends (all its
 * writers are the layers above, which ran before): weight_grad reads it.
 * The model points dx at a scratch buffer and adds it in when an
 * activation feeds several layers (shortcuts), so layers never accumulate
 * themselves. */
#ifndef RT_LAYER_H
#define RT_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cfg.h"
#include "model.h"

struct rt_layer;
struct rt_layer_setup;

/* Everything forward and backward see. Views point at the first of n
 * samples; tmp[] are two model-wide scratch areas of max_batch times the
 * largest activation, free for a layer's use within one call. */
struct rt_pass {
    rt_dev *dev;
    int n;
    bool train;
    uint64_t seed; /* already mixed with the layer index */
    rt_view params, grads, state; /* bases of the model's three buffers */
    rt_view x[2];                 /* inputs (x[1]: a shortcut's second input) */
    rt_view y;                    /* output */
    rt_view dy;                   /* backward: gradient w.r.t. y; the layer may
                                     overwrite it (nothing reads it after) */
    rt_view dx[2];                /* backward: gradient w.r.t. x[i], overwritten */
    bool need_dx[2];              /* false for the network input */
    rt_view tmp[2];
    rt_view ws; /* conv workspace */
    /* backward: leave the weight gradient to ops->weight_grad, which the
     * model calls at the end of backward (rt_layer_defers) */
    bool defer_weights;
};

struct rt_layer_ops {
    const char *type;   /* section name, e.g. "conv" */
    const char *prefix; /* name prefix of its tensors and summary row, e.g. "bn" */
    const char *keys;   /* accepted keys, "a, b" ("" for none), for messages */
    size_t priv_size;
    int (*setup)(struct rt_layer *l, struct rt_layer_setup *su);
    int (*alloc)(struct rt_layer *l, rt_dev *dev, int max_batch);
    size_t (*workspace)(struct rt_layer *l, rt_dev *dev, int max_batch);
    int (*forward)(struct rt_layer *l, const struct rt_pass *p);
    int (*backward)(struct rt_layer *l, const struct rt_pass *p);
    void (*release)(struct rt_layer *l);
    /* (optional) The weight gradient alone, after a backward that deferred
     * it (p->defer_weights; p's views as then). A large layer's weight
     * gradient, written as its backward runs, has left the cache when the
     * sum or the optimiser reads it after the layers below: computed last,
     * it is still there (seedcnn's dense layer, 4 MB: a median +2.9% img/s
     * for 2 workers of one host, bench/README.md). */
    int (*weight_grad)(struct rt_layer *l, const struct rt_pass *p);
    /* (optional) its hyper-parameters into the fields of rt_layer_info
     * that model.c cannot fill from struct rt_layer */
    void (*describe)(const struct rt_layer *l, struct rt_layer_info *d);
    /* The output is the input's memory read as another shape (flatten):
     * model.c gives it its input's activation and gradient, so forward and
     * backward find y == x and dx == dy, where a copy was a pass over the
     * batch each way (seedcnn: 1.2 MB each way a step). Only where the input
     * is another layer's output that nothing else reads. */
    bool output_is_input;
};

struct rt_layer {
    const struct rt_layer_ops *ops;
    int index;     /* 0-based position among the layers */
    char name[32]; /* prefix + 1-based index: "conv1", "bn3" */
    int line;      /* of its section header */
    struct rt_shape in, out;
    int ninputs;
    int inputs[2]; /* layer indices; -1 is the network input */
    /* The nonlinearity applied to this layer's output (identity if none),
     * so a weight layer's init can look at what follows it. */
    enum rt_act act;
    float alpha;
    bool passthrough; /* batchnorm / dropout: look past it for the act */
    size_t params, state; /* element counts it declared */
    size_t param_off;     /* where its parameters start (they are contiguous) */
    bool frozen;          /* --freeze or `freeze = 1`: its parameters never change */
    void *priv;
};

/* Weights from which a layer's weight gradient is left to the end of
 * backward: a gradient of 1 MiB, more than most cores' L2. */
#define RT_LAYER_DEFER_MIN_PARAMS ((size_t)1 << 18)

/* Whether the model defers this layer's weight gradient (when it defers
 * any: rt_model_defer_weight_grads). */
static inline bool rt_layer_defers(const struct rt_layer *l)
{
    return l->ops->weight_grad && l->params >= RT_LAYER_DEFER_MIN_PARAMS;
}

/* What setup sees: the file (for messages and getters), its section, the
 * layers before it (for shortcuts) and the model being built. */
struct rt_layer_setup {
    const struct rt_cfg *cfg;
    struct rt_cfg_section *sec;
    const struct rt_layer *layers; /* layers[0 .. l->index-1] */
    rt_model *model;
    int classes;
};

/* How a tensor is initialised by rt_model_init (init.c). */
enum rt_init_kind {
    RT_INIT_CONST, /* every element = value */
    RT_INIT_AUTO,  /* He for relu/leaky after it, Glorot otherwise */
    RT_INIT_HE,    /* uniform, variance 2 / ((1 + alpha^2) fan_in) */
    RT_INIT_GLOROT /* uniform, variance 2 / (fan_in + fan_out) */
};

struct rt_init_spec {
    enum rt_init_kind kind;
    float value, alpha;
    int fan_in, fan_out;
};

/* Declare a tensor named "<layer name>.<suffix>" of dims[0..ndim-1];
 * returns its element offset in the parameter buffer (rt_layer_param) or
 * the state buffer (rt_layer_state), or (size_t)-1 with an error set. */
size_t rt_layer_param(struct rt_layer_setup *su, struct rt_layer *l, const char *suffix,
                      int ndim, const int *dims, struct rt_init_spec init);
size_t rt_layer_state(struct rt_layer_setup *su, struct rt_layer *l, const char *suffix,
                      int ndim, const int *dims, float value);
#define RT_LAYER_BAD_OFFSET ((size_t)-1)

/* rt_model_load_string that also returns the status (for tests). */
int rt_model_open_string(const char *text, const char *name, rt_dev *dev, int max_batch,
                         rt_model **out);

/* The layers, for the parts of the core that walk them (freeze.c). */
struct rt_layer *rt_model_layer(rt_model *m, int i);
const struct rt_layer *rt_model_layer_const(const rt_model *m, int i);

/* The init recipe of tensor i (same order as rt_model_tensor_info). */
const struct rt_init_spec *rt_model_tensor_init(const rt_model *m, int i);

/* "FILE:LINE: [type] " of a layer, for shape errors. */
int rt_layer_error(const struct rt_layer_setup *su, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline size_t rt_shape_count(struct rt_shape s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

/* ---- parts shared by several layers ---------------------------------------- */

/* The `activation` key (linear, relu, leaky, sigmoid, tanh; leaky slope 0.1)
 * of conv, dense and shortcut (activation.c). */
int rt_act_parse(struct rt_layer_setup *su, enum rt_act *kind, float *alpha);
const char *rt_act_name(enum rt_act kind);

/* Batch norm over c channels of hw values, used by [batchnorm] and by
 * [conv] batch_normalize = 1 (batchnorm.c), which sets shape.act to its
 * activation: y = act(bn(x)) in one op each way. */
struct rt_bn_part {
    struct rt_bn_shape shape; /* n set per call */
    size_t gamma, beta;       /* param offsets */
    size_t mean, var;         /* state offsets */
    rt_buf *saved;            /* 2c floats: batch mean, invstd */
};
int rt_bn_part_setup(struct rt_bn_part *b, struct rt_layer_setup *su, struct rt_layer *l,
                     const char *prefix, int c, int hw, float eps, float momentum);
int rt_bn_part_alloc(struct rt_bn_part *b, rt_dev *dev);
int rt_bn_part_forward(struct rt_bn_part *b, const struct rt_pass *p, rt_view x, rt_view y);
int rt_bn_part_backward(struct rt_bn_part *b, const struct rt_pass *p, rt_view x, rt_view y,
                        rt_view dy, rt_view dx);
void rt_bn_part_release(struct rt_bn_part *b);

/* ---- the layers (one file each under src/layers/) ------------------------- */
extern const struct rt_layer_ops rt_layer_conv, rt_layer_dense, rt_layer_maxpool,
    rt_layer_avgpool, rt_layer_globalavgpool, rt_layer_flatten, rt_layer_relu,
    rt_layer_leaky, rt_layer_sigmoid, rt_layer_tanh, rt_layer_dropout,
    rt_layer_batchnorm, rt_layer_shortcut, rt_layer_softmax;

#endif
