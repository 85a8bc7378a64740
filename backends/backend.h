/* backend.h — ragtag's kernel table: what every compute backend implements.
 *
 * Layers never touch device memory: they hold rt_views into buffers and call
 * the rt_op_* wrappers (src/backend.c), which check shapes and bounds once
 * and dispatch through a backend's struct rt_backend_ops. The op list itself
 * lives in backends/ops.def.
 *
 * Exact maths of each op (every backend must agree with the cpu backend):
 *  gemm           C = alpha*op(A)*op(B) + beta*C, row-major, op(A) m x k,
 *                 op(B) k x n; lda/ldb/ldc are row strides of A, B, C as
 *                 stored. beta == 0 means C is not read (NaNs in C vanish).
 *  conv2d_fwd     y[n,k,oh,ow] = sum_{c,r,s} x[n,c,oh*sh-ph+r,ow*sw-pw+s]
 *                 * w[k,c,r,s] (zero padding); no bias (see bias_add).
 *  conv2d_bwd_data   dx = d(y)/dx applied to dy.
 *  conv2d_bwd_filter dw = d(y)/dw applied to dy (summed over the batch).
 *                 All three may use `ws` of conv2d_workspace() floats.
 *  conv2d_fwd_bias_act  y = act(conv2d_fwd(x, w) + b[k]): the three ops
 *                 conv2d_fwd, bias_add, act_fwd fused, the same values
 *                 (bias and activation applied while the output is in
 *                 cache); ws as conv2d_fwd's.
 *  conv2d_bwd_act the backward of conv2d_fwd_bias_act, fused: g =
 *                 act_bias_bwd(y, dy) (db its sum per channel), dw =
 *                 conv2d_bwd_filter(x, g), dx = conv2d_bwd_data(g, w); the
 *                 same values as those ops. dx and db may be absent (buf
 *                 NULL): no data or bias gradient. With the identity and no
 *                 db, g is dy (y and g unused: a conv before batch norm).
 *                 g (n k oh ow floats) is scratch: a backend may keep g
 *                 there or never form it (the cpu backend's Winograd path
 *                 applies f' while it transforms dy); ws as the others'.
 *  dense_fwd      y[n,units] = act(x[n,in] * w[units,in]^T + b): gemm (0, 1,
 *                 alpha 1, beta 0) then bias_act_fwd (hw 1) fused, the same
 *                 values (a launch fewer where launches cost).
 *  dense_bwd      dw[units,in] = g[n,units]^T * x[n,in] and dx[n,in] =
 *                 g * w[units,in]: gemm (1, 0) and gemm (0, 0), alpha 1,
 *                 beta 0, the same values; g is dy through the activation
 *                 (act_bias_bwd). dw or dx may be absent (buf NULL). The
 *                 two are independent: a backend may run them side by side
 *                 (the cpu backend, each on its own threads).
 *  bias_add       y[n,c,i] += b[c] for i < hw.
 *  bias_grad      db[c] = sum_{n,i} dy[n,c,i].
 *  bias_act_fwd   y = act(y + b[c]) in place: bias_add then act_fwd.
 *  act_bias_bwd   dx = dy * f'(.) from the activation's OUTPUT y alone
 *                 (relu/leaky: y>0, which is x>0 for alpha >= 0; sigmoid,
 *                 tanh: y), then db[c] = sum_{n,i} dx[n,c,i]: act_bwd(y, y)
 *                 then bias_grad(dx), fused. dx may alias dy.
 *  pool_fwd       max or average over windows; average divides by r*s
 *                 (padding counts as zeros, like PyTorch's default);
 *                 max ignores padding.
 *  pool_bwd       max: dy goes to the FIRST maximal element of the window in
 *                 row-major order (ties resolved the same on every backend);
 *                 avg: dy/(r*s) to every in-bounds element. dx overwritten.
 *  act_fwd        relu max(x,0); leaky x>0?x:alpha*x; sigmoid; tanh;
 *                 identity copies. y may alias x.
 *  add_act_fwd    y = act(a + b) elementwise ([shortcut]): the same values as
 *                 a + b, then act_fwd. y may alias a or b.
 *  act_bwd        dx = dy * f'(x) (relu/leaky use x>0, sigmoid/tanh use y).
 *  softmax_xent_fwd probs = softmax(logits) per row (max-subtracted);
 *                 losses[i] = -log(max(probs[i,label_i], 1e-30)).
 *                 labels is an int32 view.
 *  softmax_xent_bwd dlogits = scale * (probs - onehot(labels)).
 *                 A label outside [0, c) is RT_ERR_ARG for both (never an
 *                 index past a row); a device backend may report it at
 *                 its next download or sync instead (the trainer checks
 *                 labels on the host before the forward).
 *  bn_fwd_train   per channel c over n*hw values: mean, biased var;
 *                 y = gamma*(x-mean)*invstd + beta, invstd = 1/sqrt(var+eps);
 *                 saves mean, invstd; run_mean = (1-mom)*run_mean + mom*mean,
 *                 run_var = (1-mom)*run_var + mom*unbiased_var. Then
 *                 y = act(y) with the shape's act and alpha, fused: the same
 *                 values as act_fwd after it (a [conv] with batch norm).
 *  bn_fwd_infer   y = act(gamma*(x-run_mean)/sqrt(run_var+eps) + beta).
 *  bn_bwd         standard batch-norm gradient w.r.t. x, gamma, beta
 *                 (dgamma, dbeta overwritten) of g = dy * f'(y), f the
 *                 shape's act, from its output y alone (as act_bias_bwd):
 *                 the same values as act_bwd(y, y, dy) then bn_bwd of g.
 *                 y unused with the identity; dx may alias dy.
 *  dropout_fwd    mask[i] = rt_dropout_keep(seed, i, rate) ? 1/(1-rate) : 0;
 *                 y = x * mask. Backward is mul(dy, mask).
 *  mul            y = a * b elementwise (y may alias a or b).
 *  axpy           y += alpha * x.        scale  x *= alpha.
 *  fill           x = value.             sumsq  *out = sum x^2 (double).
 *  sgd_step       PyTorch SGD: g' = g + wd*w; if momentum: v = mu*v + g',
 *                 g' = nesterov ? g' + mu*v : v; w -= lr*g'.
 *  adam_step      Adam, AdamW, Nadam with the step's scalars p computed once
 *                 by the core (src/optim.c), so that every backend applies
 *                 the same bits; in float, per element:
 *                 w' = w - decay*w; g' = g + l2*w';
 *                 m = b1*m + (1-b1)*g'; v = b2*v + (1-b2)*g'*g';
 *                 w = w' - lr*(cm*m + cg*g') / (sqrt(v*inv_bc2) + eps).
 */
#ifndef RT_BACKEND_H
#define RT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 2: adam_step takes the step's scalars (struct rt_adam_scalars)
 * 3: the fused ops conv2d_fwd_bias_act, bias_act_fwd, act_bias_bwd
 * 4: conv2d_bwd_act
 * 5: batch norm applies the activation in rt_bn_shape (act, alpha); bn_bwd
 *    takes the activation's output y; add_act_fwd
 * 6: dense_fwd
 * 7: dense_bwd
 * 8: download_start, download_wait */
#define RT_BACKEND_ABI_VERSION 8

typedef struct rt_dev rt_dev; /* an opened device context */
typedef struct rt_buf rt_buf; /* a block of device memory */

/* A place in a buffer; off counts 4-byte elements (float or int32). */
typedef struct rt_view {
    rt_buf *buf;
    size_t off;
} rt_view;

static inline rt_view rt_view_at(rt_view v, size_t off)
{
    v.off += off;
    return v;
}

enum rt_act { RT_ACT_IDENTITY, RT_ACT_RELU, RT_ACT_LEAKY, RT_ACT_SIGMOID, RT_ACT_TANH };
enum rt_pool_mode { RT_POOL_MAX, RT_POOL_AVG };

struct rt_conv_shape {
    int n, c, h, w;           /* input */
    int k, r, s;              /* filters: k output channels of c x r x s */
    int stride_h, stride_w, pad_h, pad_w;
    int oh, ow;               /* output: (h + 2*pad_h - r)/stride_h + 1, ... */
};

struct rt_pool_shape {
    enum rt_pool_mode mode;
    int n, c, h, w;
    int r, s, stride_h, stride_w, pad_h, pad_w;
    int oh, ow;
};

struct rt_bn_shape {
    int n, c, hw;
    float eps, momentum;
    enum rt_act act; /* applied after batch norm, fused (identity: none) */
    float alpha;     /* leaky's slope */
};

struct rt_sgd_params {
    float lr, momentum, weight_decay;
    bool nesterov;
};

/* One Adam/AdamW/Nadam step's scalars (adam_step); rt_optim_adam_scalars
 * (src/optim.h) derives them from the hyper-parameters and the step count. */
struct rt_adam_scalars {
    float lr, beta1, beta2, eps;
    float l2;      /* L2 decay added to the gradient (Adam, Nadam), else 0 */
    float decay;   /* lr * decoupled decay taken off w first (AdamW), else 0 */
    float inv_bc2; /* 1 / (1 - beta2^t) */
    float cm, cg;  /* the bias-corrected moment: m_hat = cm*m + cg*g' */
};

struct rt_device_info {
    char name[128];
    char platform[128];
    size_t mem_bytes;
    int compute_units;
};

/* Every buffer, whatever its backend: the device it lives on, its size and
 * the backend's handle (a host pointer for cpu, a cl_mem, a device pointer). */
struct rt_buf {
    rt_dev *dev;
    size_t bytes;
    void *handle;
    bool borrowed; /* rt_buf_wrap_host: the memory is the caller's */
};

/* Dropout's keep decision: a counter-based hash of (seed, i), so every
 * backend draws the same mask without sharing RNG state. */
static inline bool rt_dropout_keep(uint64_t seed, uint64_t i, float rate)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f); /* [0,1) */
    return u >= rate;
}

/* Op enum and names, generated from ops.def. */
enum rt_opk {
#define RT_OP(name, params) RT_OPK_##name,
#include "ops.def"
#undef RT_OP
    RT_OPK_COUNT
};
extern const char *const rt_op_names[RT_OPK_COUNT];

/* ---- the wrappers layers call (src/backend.c) ------------------------------
 * Each checks bounds of every view against its buffer and that all buffers
 * live on `d`, then dispatches. Prototypes generated from ops.def. */
#define RT_OP(name, params) int rt_op_##name params;
#include "ops.def"
#undef RT_OP

/* ---- devices and memory ------------------------------------------------------ */

/* Names of the backends known to this process ("cpu", ...). */
int rt_backend_count(void);
const char *rt_backend_name(int i);
int rt_backend_device_count(const char *backend);
int rt_backend_device_info(const char *backend, int device, struct rt_device_info *out);

/* The OpenBLAS core the cpu backend should run (an OPENBLAS_CORETYPE value,
 * which OpenBLAS reads only as it loads; *picked: the one it runs now), or
 * NULL when that one suits this CPU, the user named one, or the BLAS is not
 * OpenBLAS. A program sets it and runs itself again (app/main.c). */
const char *rt_cpu_blas_core_wanted(const char **picked);
/* Sets OPENBLAS_CORETYPE to that core and RAGTAG_BLAS_CORE_FROM to the one
 * it replaces (shown by `ragtag devices`); true when it did: the caller
 * then runs itself again, before any other work. */
bool rt_cpu_blas_core_setenv(void);

/* Open device `device` of `backend` with `threads` host threads (0: all). */
rt_dev *rt_dev_open(const char *backend, int device, int threads);
void rt_dev_close(rt_dev **d);
const char *rt_dev_backend(const rt_dev *d);
int rt_dev_threads(const rt_dev *d);
/* Bytes of the buffers allocated on d and not yet destroyed (a worker's
 * memory estimate measures a model's buffers with it). */
size_t rt_dev_live_bytes(const rt_dev *d);

/* Buffers: allocate `bytes`; contents undefined. */
rt_buf *rt_buf_new(rt_dev *d, size_t bytes);
/* A buffer over the caller's host memory (a backend whose buffers are host
 * memory only; 64-byte aligned), which stays the caller's: destroying the
 * buffer leaves it. */
rt_buf *rt_buf_wrap_host(rt_dev *d, void *host, size_t bytes);
void rt_buf_destroy(rt_buf **b);
static inline rt_view rt_buf_view(rt_buf *b) { rt_view v = {b, 0}; return v; }

int rt_upload(rt_dev *d, rt_view dst, const void *src, size_t bytes);
int rt_download(rt_dev *d, void *dst, rt_view src, size_t bytes);
/* A download the host need not wait for now: src's bytes as they are once
 * the work queued before it is done (work queued after it does not change
 * them) land in dst, which must stay valid, by the time the next
 * rt_download_wait, rt_download or rt_sync on d returns; dst is not read
 * or written by the caller before then. On a device with a queue the host
 * queues more work meanwhile: the training step tallies its loss after
 * the backward is queued, so the device never idles for that round trip.
 * A backend without it downloads at once. One started download at a time:
 * a second one waits for the first. */
int rt_download_start(rt_dev *d, void *dst, rt_view src, size_t bytes);
/* Returns once the started download (if any) is in its dst. */
int rt_download_wait(rt_dev *d);
int rt_copy(rt_dev *d, rt_view dst, rt_view src, size_t n);
int rt_sync(rt_dev *d);

/* Floats of workspace a conv2d op needs on `d` for shape `s`. A model
 * sizes it for the larger of 1 image and its batch, so for any n up to a
 * batch it must be at most that (tests/test_cpu_ops.c checks the cpu's). */
size_t rt_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s);

/* Host pointer of a view when the device shares host memory (cpu), else NULL. */
void *rt_view_host(rt_view v);

#endif
