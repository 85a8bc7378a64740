/* nn.c — the cuda backend's layer ops: bias, pooling, activations,
 * softmax + cross-entropy, batch norm and dropout.
 *
 * cuDNN runs the ops whose maths it shares with backend.h:
 *  - average pooling (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING divides
 *    by r*s, padding counting as zeros, like PyTorch's default);
 *  - batch norm (spatial mode: per-channel statistics over n*hw values, the
 *    biased variance for y, the unbiased one for the running variance,
 *    exponentialAverageFactor = momentum as backend.h applies it, and the
 *    saved "inverse variance" is 1/sqrt(var + eps), backend.h's invstd).
 *    One value per channel (n*hw == 1) has no unbiased variance; backend.h
 *    then uses the biased one, which cuDNN does not: the own kernel runs.
 * Own kernels (kernels-nn.cu, kernels-elementwise.cu) run the rest:
 *  - max pooling: backend.h sends dy to the FIRST maximal element of a
 *    window in row-major order; cuDNN documents no tie rule;
 *  - activations: backend.h's relu and leaky derivatives look at x, cuDNN's
 *    at y, and cuDNN has no leaky relu; elementwise, nothing to gain;
 *  - softmax + cross-entropy: one pass that also checks the int32 labels
 *    and writes per-sample losses, which cuDNN's softmax does not;
 *  - bias, dropout (rt_dropout_keep's hash).
 * Where cuDNN refuses the arguments before running (cu_dnn_refused), and
 * with RAGTAG_CUDA_CUDNN=0, the own kernels run these ops too. */
#include "config.h"

#include <stdint.h>

#include "cuda-impl.h"
#include "status.h"

static const float one = 1.0f, zero = 0.0f;

int cu_bias_add(rt_dev *d, int n, int c, int hw, rt_view b, rt_view y)
{
    CU_LAUNCH(d, "bias_add", rtcu_bias_add(cu(d)->stream, n, c, hw, cu_f(b), cu_f(y)));
}

/* One block per channel; also writes zeros when there are no images. */
int cu_bias_grad(rt_dev *d, int n, int c, int hw, rt_view dy, rt_view db)
{
    const float *p = (size_t)n * hw > 0 ? cu_f(dy) : NULL;
    CU_LAUNCH(d, "bias_grad", rtcu_bias_grad(cu(d)->stream, n, c, hw, p, cu_f(db)));
}

/* cuBLAS's GEMM, then bias_act_fwd. */
int cu_dense_fwd(rt_dev *d, int n, int in, int units, rt_view x, rt_view w, rt_view b,
                 enum rt_act kind, float alpha, rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cuda: unknown activation %d", (int)kind);
    RT_TRY(cu_gemm(d, 0, 1, n, units, in, 1.0f, x, in, w, in, 0.0f, y, units));
    return cu_bias_act_fwd(d, kind, alpha, n, units, 1, b, y);
}

/* The two GEMMs in turn: one queue runs them so either way. */
int cu_dense_bwd(rt_dev *d, int n, int in, int units, rt_view g, rt_view x, rt_view w,
                  rt_view dw, rt_view dx)
{
    return rt_dense_bwd_by_gemm(d, n, in, units, g, x, w, dw, dx);
}

/* bias_add then act_fwd: the same kernels, so the same values. */
int cu_bias_act_fwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw, rt_view b,
                    rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cuda: unknown activation %d", (int)kind);
    RT_TRY(cu_bias_add(d, n, c, hw, b, y));
    return cu_act_fwd(d, kind, alpha, (size_t)n * c * hw, y, y);
}

/* act_bwd with y standing for x (y > 0 exactly where x > 0 for relu and
 * leaky), then bias_grad of dx. */
int cu_act_bias_bwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw, rt_view y,
                    rt_view dy, rt_view dx, rt_view db)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cuda: unknown activation %d", (int)kind);
    const size_t count = (size_t)n * c * hw;
    if (count)
        RT_TRY(cu_act_bwd(d, kind, alpha, count, y, y, dy, dx));
    return cu_bias_grad(d, n, c, hw, dx, db);
}

/* ---- pooling ---------------------------------------------------------------------- */

static struct rtcu_pool pool_geom(const struct rt_pool_shape *s)
{
    return (struct rtcu_pool){s->mode == RT_POOL_MAX, s->n, s->c, s->h, s->w, s->r, s->s,
                              s->stride_h, s->stride_w, s->pad_h, s->pad_w, s->oh, s->ow};
}

/* td[0]: x (n, c, h, w), td[1]: y (n, c, oh, ow), and the window. */
static int dnn_pool_setup(struct cu_dev *o, const struct rt_pool_shape *s)
{
    RT_TRY(cu_dnn_status(cudnnSetPooling2dDescriptor(o->pool,
                                                     CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                     CUDNN_PROPAGATE_NAN, s->r, s->s, s->pad_h,
                                                     s->pad_w, s->stride_h, s->stride_w),
                         "describing a pooling window"));
    RT_TRY(cu_dnn_status(cudnnSetTensor4dDescriptor(o->td[0], CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                    s->n, s->c, s->h, s->w),
                         "describing pooling's input"));
    return cu_dnn_status(cudnnSetTensor4dDescriptor(o->td[1], CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                    s->n, s->c, s->oh, s->ow),
                         "describing pooling's output");
}

int cu_pool_fwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    if (o->cudnn && s->mode == RT_POOL_AVG) {
        RT_TRY(dnn_pool_setup(o, s));
        cudnnStatus_t st = cudnnPoolingForward(o->dnn, o->pool, &one, o->td[0], cu_f(x), &zero,
                                               o->td[1], cu_f(y));
        if (!cu_dnn_refused(st))
            return cu_dnn_status(st, "average pooling forward");
    }
    const struct rtcu_pool g = pool_geom(s);
    return cu_status(rtcu_pool_fwd(o->stream, &g, cu_f(x), cu_f(y)), "launching pool_fwd");
}

/* Max: the arg-max is found again from x (the tie rule), y is not read. */
int cu_pool_bwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y, rt_view dy,
                rt_view dx)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    if (o->cudnn && s->mode == RT_POOL_AVG) {
        RT_TRY(dnn_pool_setup(o, s));
        cudnnStatus_t st = cudnnPoolingBackward(o->dnn, o->pool, &one, o->td[1], cu_f(y), o->td[1],
                                                cu_f(dy), o->td[0], cu_f(x), &zero, o->td[0],
                                                cu_f(dx));
        if (!cu_dnn_refused(st))
            return cu_dnn_status(st, "average pooling backward");
    }
    const struct rtcu_pool g = pool_geom(s);
    return cu_status(rtcu_pool_bwd(o->stream, &g, cu_f(x), cu_f(dy), cu_f(dx)),
                     "launching pool_bwd");
}

/* ---- activations --------------------------------------------------------------------- */

int cu_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cuda: unknown activation %d", (int)kind);
    if (kind == RT_ACT_IDENTITY && cu_f(x) == cu_f(y))
        return RT_OK;
    CU_LAUNCH(d, "act_fwd", rtcu_act_fwd(cu(d)->stream, (int)kind, alpha, n, cu_f(x), cu_f(y)));
}

int cu_add_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view a, rt_view b,
                   rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cuda: unknown activation %d", (int)kind);
    CU_LAUNCH(d, "add_act_fwd",
              rtcu_add_act(cu(d)->stream, (int)kind, alpha, n, cu_f(a), cu_f(b), cu_f(y)));
}

int cu_act_bwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y,
               rt_view dy, rt_view dx)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cuda: unknown activation %d", (int)kind);
    if (kind == RT_ACT_IDENTITY && cu_f(dy) == cu_f(dx))
        return RT_OK;
    CU_LAUNCH(d, "act_bwd",
              rtcu_act_bwd(cu(d)->stream, (int)kind, alpha, n, cu_f(x), cu_f(y), cu_f(dy),
                           cu_f(dx)));
}

/* ---- softmax + cross-entropy ------------------------------------------------------------ */

/* The kernels atomicMin the first bad sample's index into o->flag, which
 * starts at UINT32_MAX (all bytes 0xff). */
static int softmax_flag_reset(struct cu_dev *o)
{
    return cu_status(cudaMemsetAsync(o->flag, 0xff, sizeof *o->flag, o->stream),
                     "softmax: resetting the label check");
}

/* Waits for the kernel (the caller reads the losses next anyway) and turns
 * a bad label into the cpu backend's RT_ERR_ARG, with the same message. */
static int softmax_flag_check(struct cu_dev *o, rt_view labels, int c)
{
    RT_TRY(cu_status(cudaMemcpyAsync(o->flag_host, o->flag, sizeof *o->flag,
                                     cudaMemcpyDeviceToHost, o->stream),
                     "softmax: reading the label check"));
    RT_TRY(cu_status(cudaStreamSynchronize(o->stream), "softmax"));
    const uint32_t bad = *o->flag_host;
    if (bad == UINT32_MAX)
        return RT_OK;
    int32_t lab = 0;
    RT_TRY(cu_status(cudaMemcpyAsync(&lab, cu_i(labels) + bad, sizeof lab, cudaMemcpyDeviceToHost,
                                     o->stream),
                     "softmax: reading a bad label"));
    RT_TRY(cu_status(cudaStreamSynchronize(o->stream), "softmax: reading a bad label"));
    return rt_error(RT_ERR_ARG, "softmax: label %d of sample %u is outside [0, %d)", (int)lab,
                    bad, c);
}

int cu_softmax_xent_fwd(rt_dev *d, int n, int c, rt_view logits, rt_view labels, rt_view probs,
                        rt_view losses)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    RT_TRY(softmax_flag_reset(o));
    RT_TRY(cu_status(rtcu_softmax_xent_fwd(o->stream, n, c, cu_f(logits), cu_i(labels),
                                           cu_f(probs), cu_f(losses), o->flag),
                     "launching softmax_xent_fwd"));
    return softmax_flag_check(o, labels, c);
}

int cu_softmax_xent_bwd(rt_dev *d, int n, int c, rt_view probs, rt_view labels, float scale,
                        rt_view dlogits)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    RT_TRY(softmax_flag_reset(o));
    RT_TRY(cu_status(rtcu_softmax_xent_bwd(o->stream, n, c, scale, cu_f(probs), cu_i(labels),
                                           cu_f(dlogits), o->flag),
                     "launching softmax_xent_bwd"));
    return softmax_flag_check(o, labels, c);
}

/* ---- batch norm --------------------------------------------------------------------------- */

/* td[0]: x as (n, c, hw, 1); td[1]: the per-channel tensors, (1, c, 1, 1). */
static int dnn_bn_setup(struct cu_dev *o, const struct rt_bn_shape *s)
{
    RT_TRY(cu_dnn_status(cudnnSetTensor4dDescriptor(o->td[0], CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                    s->n, s->c, s->hw, 1),
                         "describing batch norm's input"));
    return cu_dnn_status(cudnnSetTensor4dDescriptor(o->td[1], CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                    1, s->c, 1, 1),
                         "describing batch norm's parameters");
}

static bool bn_by_cudnn(const struct cu_dev *o, const struct rt_bn_shape *s)
{
    return o->cudnn && (size_t)s->n * s->hw > 1 && s->eps >= CUDNN_BN_MIN_EPSILON;
}

/* The shape's activation after batch norm, in place (act_fwd allows it). */
static int bn_act(rt_dev *d, const struct rt_bn_shape *s, rt_view y)
{
    if (s->act == RT_ACT_IDENTITY)
        return RT_OK;
    return cu_act_fwd(d, s->act, s->alpha, (size_t)s->n * s->c * s->hw, y, y);
}

static int bn_fwd_train(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                        rt_view beta, rt_view y, rt_view save_mean, rt_view save_invstd,
                        rt_view run_mean, rt_view run_var)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    if (bn_by_cudnn(o, s) && cu_f(x) != cu_f(y)) {
        RT_TRY(dnn_bn_setup(o, s));
        cudnnStatus_t st = cudnnBatchNormalizationForwardTraining(
            o->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, o->td[0], cu_f(x), o->td[0], cu_f(y),
            o->td[1], cu_f(gamma), cu_f(beta), (double)s->momentum, cu_f(run_mean),
            cu_f(run_var), (double)s->eps, cu_f(save_mean), cu_f(save_invstd));
        if (!cu_dnn_refused(st))
            return cu_dnn_status(st, "batch norm forward (training)");
    }
    return cu_status(rtcu_bn_fwd_train(o->stream, s->n, s->c, s->hw, s->eps, s->momentum, cu_f(x),
                                       cu_f(gamma), cu_f(beta), cu_f(y), cu_f(save_mean),
                                       cu_f(save_invstd), cu_f(run_mean), cu_f(run_var)),
                     "launching bn_fwd_train");
}

int cu_bn_fwd_train(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                    rt_view beta, rt_view y, rt_view save_mean, rt_view save_invstd,
                    rt_view run_mean, rt_view run_var)
{
    RT_TRY(bn_fwd_train(d, s, x, gamma, beta, y, save_mean, save_invstd, run_mean, run_var));
    return bn_act(d, s, y);
}

static int bn_fwd_infer(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                        rt_view beta, rt_view run_mean, rt_view run_var, rt_view y)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    if (o->cudnn && s->eps >= CUDNN_BN_MIN_EPSILON && s->n > 0) {
        RT_TRY(dnn_bn_setup(o, s));
        cudnnStatus_t st = cudnnBatchNormalizationForwardInference(
            o->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, o->td[0], cu_f(x), o->td[0], cu_f(y),
            o->td[1], cu_f(gamma), cu_f(beta), cu_f(run_mean), cu_f(run_var), (double)s->eps);
        if (!cu_dnn_refused(st))
            return cu_dnn_status(st, "batch norm forward (inference)");
    }
    return cu_status(rtcu_bn_fwd_infer(o->stream, s->n, s->c, s->hw, s->eps, cu_f(x), cu_f(gamma),
                                       cu_f(beta), cu_f(run_mean), cu_f(run_var), cu_f(y)),
                     "launching bn_fwd_infer");
}

int cu_bn_fwd_infer(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                    rt_view beta, rt_view run_mean, rt_view run_var, rt_view y)
{
    RT_TRY(bn_fwd_infer(d, s, x, gamma, beta, run_mean, run_var, y));
    return bn_act(d, s, y);
}

/* cuDNN takes the saved mean and invstd as given (it does not recompute
 * them from x), which is backend.h's contract. With an activation, its
 * gradient goes into dx first and batch norm's is taken in place there, by
 * the kernel (each element read before it is written, by one thread): cuDNN
 * is not asked to work in place. */
int cu_bn_bwd(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view y, rt_view dy,
              rt_view gamma, rt_view save_mean, rt_view save_invstd, rt_view dx,
              rt_view dgamma, rt_view dbeta)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    if (s->act != RT_ACT_IDENTITY) {
        RT_TRY(cu_act_bwd(d, s->act, s->alpha, (size_t)s->n * s->c * s->hw, y, y, dy, dx));
        dy = dx;
    }
    if (bn_by_cudnn(o, s) && cu_f(dy) != cu_f(dx)) {
        RT_TRY(dnn_bn_setup(o, s));
        cudnnStatus_t st = cudnnBatchNormalizationBackward(
            o->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, o->td[0], cu_f(x),
            o->td[0], cu_f(dy), o->td[0], cu_f(dx), o->td[1], cu_f(gamma), cu_f(dgamma),
            cu_f(dbeta), (double)s->eps, cu_f(save_mean), cu_f(save_invstd));
        if (!cu_dnn_refused(st))
            return cu_dnn_status(st, "batch norm backward");
    }
    return cu_status(rtcu_bn_bwd(o->stream, s->n, s->c, s->hw, cu_f(x), cu_f(dy), cu_f(gamma),
                                 cu_f(save_mean), cu_f(save_invstd), cu_f(dx), cu_f(dgamma),
                                 cu_f(dbeta)),
                     "launching bn_bwd");
}

/* ---- dropout ------------------------------------------------------------------------------ */

int cu_dropout_fwd(rt_dev *d, size_t n, float rate, uint64_t seed, rt_view x, rt_view y,
                   rt_view mask)
{
    const float keep = 1.0f / (1.0f - rate);
    CU_LAUNCH(d, "dropout_fwd",
              rtcu_dropout_fwd(cu(d)->stream, n, rate, keep, seed, cu_f(x), cu_f(y), cu_f(mask)));
}
