/* model.h — a network read from a model file, its one parameter buffer and
 * its one gradient buffer (layers hold views), forward and backward.
 * File format: docs/model-format.md. */
#ifndef RT_MODEL_H
#define RT_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"

typedef struct rt_model rt_model;

/* Per-sample tensor shape, channels x height x width. */
struct rt_shape {
    int c, h, w;
};

/* One named tensor of a model, for checkpoints and summaries. `state` marks
 * non-trained buffers (batch norm running statistics) kept in the state
 * buffer rather than the parameter buffer. */
struct rt_tensor_info {
    char name[64];      /* e.g. "conv1.weight", "bn2.running_mean" */
    int ndim;
    int dims[4];
    size_t offset;      /* elements into params (or state when `state`) */
    size_t count;
    bool state;
};

/* One key=value of the model file's [train] section, with its place, so
 * that the trainer validates it like a flag and names file:line on error. */
struct rt_train_option {
    const char *key, *value;
    const char *file;
    int line;
};

/* Parse `path`, build the layers, allocate every buffer on `dev` for batches
 * up to `max_batch`. NULL on error with rt_error_detail() naming file:line. */
rt_model *rt_model_load(const char *path, rt_dev *dev, int max_batch);
/* The same from text in memory; `name` stands for the file in messages. */
rt_model *rt_model_load_string(const char *text, const char *name, rt_dev *dev,
                               int max_batch);
void rt_model_destroy(rt_model **m);

/* Seeded He (relu-family) / Glorot (others) initialisation of every
 * parameter; biases zero, batch-norm gamma 1, beta 0, running var 1. */
int rt_model_init(rt_model *m, uint64_t seed);

struct rt_shape rt_model_input_shape(const rt_model *m);
int rt_model_classes(const rt_model *m);
int rt_model_max_batch(const rt_model *m);
rt_dev *rt_model_dev(const rt_model *m);

size_t rt_model_param_count(const rt_model *m);
rt_view rt_model_params(const rt_model *m); /* param_count floats */
rt_view rt_model_grads(const rt_model *m);  /* param_count floats, then the spare */
/* The gradient buffer holds this many floats after the gradients that the
 * model never touches: a data-parallel step writes its counts there, so
 * that they travel with the gradient in one message (src/tally.h). */
#define RT_MODEL_GRAD_SPARE 32
/* Keep the gradient in host memory the caller owns from now on (at least
 * param_count + RT_MODEL_GRAD_SPARE floats, 64-byte aligned, outliving the
 * model): memory other processes can read (collective.h: shared_floats).
 * Backends whose buffers are host memory only. The contents move along. */
int rt_model_use_grad_memory(rt_model *m, float *mem, size_t floats);
/* Exchange the parameters' buffer with *b (param_count floats on the
 * model's device; the contents stay where they are): a host's workers
 * train on one shared copy (src/host_replica.c) and go back to their own. */
void rt_model_swap_params(rt_model *m, rt_buf **b);
size_t rt_model_state_count(const rt_model *m);
rt_view rt_model_state(const rt_model *m);  /* state_count floats (may be 0) */

int rt_model_tensor_count(const rt_model *m);
int rt_model_tensor_info(const rt_model *m, int i, struct rt_tensor_info *out);

/* One layer as the model built it, for converters (ONNX export): its type
 * (the section name), name, shapes, inputs and hyper-parameters, with the
 * defaults of the model file filled in. Fields a layer does not have are 0. */
struct rt_layer_info {
    const char *type;  /* "conv", "dense", ..., "softmax" (static string) */
    char name[32];     /* "conv1": the prefix of its tensors' names */
    int line;          /* of its section in the model file */
    struct rt_shape in, out;
    int ninputs;
    int inputs[2];     /* layer indices; -1 is the network input */
    enum rt_act act;   /* its nonlinearity (a standalone activation's own) */
    float alpha;       /* leaky slope */
    int size, stride, pad;   /* [conv], [maxpool], [avgpool] */
    bool batch_normalize;    /* [conv] */
    float eps, momentum;     /* [batchnorm], [conv] batch_normalize = 1 */
    float rate;              /* [dropout] */
};

/* Layers in file order, [softmax] last; `i` from 0 to count - 1. */
int rt_model_layer_count(const rt_model *m);
int rt_model_layer_info(const rt_model *m, int i, struct rt_layer_info *out);

/* After rt_model_forward of n samples: their logits (the input of [softmax]),
 * n x classes floats, copied to host memory. */
int rt_model_logits(rt_model *m, float *host, int n);

int rt_model_train_option_count(const rt_model *m);
struct rt_train_option rt_model_train_option(const rt_model *m, int i);

/* Forward n <= max_batch samples of x (n x c x h x w on the model's device).
 * `train` selects batch-norm batch statistics and dropout; `seed` draws the
 * dropout masks (use a different one every step). The logits stay inside the
 * model for rt_model_loss / rt_model_backward. */
int rt_model_forward(rt_model *m, rt_view x, int n, bool train, uint64_t seed);

/* After forward: softmax cross-entropy against int32 labels (device view).
 * Adds the summed loss to *loss_sum and the number of correct argmax
 * predictions to *correct; copies the n x classes probabilities to
 * probs_host when not NULL. */
int rt_model_loss(rt_model *m, rt_view labels, int n, double *loss_sum, long *correct,
                  float *probs_host);
/* The same, with the labels' host copy (the n int32 the caller uploaded to
 * `labels`): no download of them. */
int rt_model_loss_host(rt_model *m, rt_view labels, const int32_t *labels_host, int n,
                       double *loss_sum, long *correct, float *probs_host);
/* rt_model_loss_host in two halves, so that the backward is queued between
 * them: start checks the labels, queues the softmax and starts the
 * download of its results (rt_download_start), collect waits for it and
 * tallies. On a device with a queue the host would otherwise wait for the
 * forward to drain (tens of microseconds of idle device a step on PoCL).
 * labels_host (when not NULL) must stay as it is until collect; a forward
 * in between drops the tally; collect after none does nothing. */
int rt_model_loss_start(rt_model *m, rt_view labels, const int32_t *labels_host, int n);
int rt_model_loss_collect(rt_model *m, double *loss_sum, long *correct, float *probs_host);

/* After forward + loss: gradients of (grad_scale * summed loss) w.r.t. every
 * parameter, overwriting the gradient buffer. Use grad_scale = 1/B for the
 * mean over a batch of B (B may be larger than n in data parallel runs). */
int rt_model_backward(rt_model *m, rt_view x, rt_view labels, int n, float grad_scale);

/* ---- frozen layers (freeze.c; docs/transfer.md) ------------------------------
 * A frozen layer's parameters never change: backward stops below the lowest
 * trainable layer and zeroes a frozen layer's gradient above it, and the
 * optimiser holds state for the trainable spans only. Layers are frozen by
 * `freeze = 1` in the model file or by rt_model_freeze. */

/* Freeze the layers `spec` names: a comma list of layer names ("conv1")
 * and 1-based layer numbers or ranges ("1-4", as in the names); `where`
 * names its origin in messages ("--freeze"). RT_ERR_CONFIG naming the item
 * and what is accepted. */
int rt_model_freeze(rt_model *m, const char *spec, const char *where);
bool rt_model_layer_frozen(const rt_model *m, int layer);
/* Index of the lowest layer with trainable parameters (the layer count
 * minus one when none has any). */
int rt_model_lowest_trainable(const rt_model *m);
/* Offset of the first trainable parameter (param_count when none): the
 * parameters below it are frozen, so a data-parallel step leaves their
 * gradients out of the exchange. */
size_t rt_model_trainable_from(const rt_model *m);
size_t rt_model_trainable_count(const rt_model *m);
/* The trainable parameters as [off, off + len) spans, ascending, adjacent
 * ones merged; at most rt_model_layer_count spans. Returns how many. */
struct rt_span; /* optim.h */
int rt_model_trainable_spans(const rt_model *m, struct rt_span *spans, int cap);
/* "conv1, conv3 (2,572 parameters)" or "none", for log lines. */
void rt_model_frozen_text(const rt_model *m, char *buf, size_t n);

/* Called by rt_model_backward as soon as a layer's backward is done, with
 * the range [lo, hi) of the gradient buffer its parameters own: those
 * gradients are final, and so is everything from lo on (parameters lie in
 * the order of the layers, and backward walks them from the last). A
 * data-parallel step starts reducing them while earlier layers still
 * compute. Not called for layers without parameters, nor when backward has
 * no samples (it zero-fills the whole buffer). A negative return fails the
 * backward with that status. */
typedef int (*rt_backward_hook)(void *arg, size_t lo, size_t hi);
/* Install (fn) or remove (NULL) the hook. */
void rt_model_set_backward_hook(rt_model *m, rt_backward_hook fn, void *arg);

/* Large layers' weight gradients (a dense layer's of 1 MiB or more) computed
 * at the end of backward, where the sum or the optimiser that reads them
 * next still finds them in the cache (on, the default), or as each layer's
 * backward runs (off: for a step that sends gradients while backward
 * runs). Either way the same bits; while on, the hook hears of a deferred
 * layer, and of every layer below it, at the end. */
void rt_model_defer_weight_grads(rt_model *m, bool on);

/* Keras-style table: layer, type, output shape, parameters; then totals. */
int rt_model_summary(const rt_model *m, FILE *out);

#endif
