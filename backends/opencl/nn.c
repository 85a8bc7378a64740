/* nn.c — the opencl backend's layer ops: bias, pooling, activations,
 * softmax + cross-entropy, batch norm and dropout. The maths is in
 * kernels/nn.cl and kernels/elementwise.cl; this file sizes the launches
 * and turns a bad label, found on the device, into the cpu backend's
 * RT_ERR_ARG. */
#include "config.h"

#include <limits.h>

#include "ocl-impl.h"
#include "status.h"

int ocl_bias_add(rt_dev *d, int n, int c, int hw, rt_view b, rt_view y)
{
    size_t planes = (size_t)n * c;
    return ocl_run_n(d, OCL_K_bias_add, planes, "liivv", planes, c, hw, b, y);
}

/* One work-group per channel; on a CPU device, one work-item per channel
 * (a work-group runs on one core there, and its barriers cost more than
 * its tree saves). */
int ocl_bias_grad(rt_dev *d, int n, int c, int hw, rt_view dy, rt_view db)
{
    if (ocl(d)->sh->is_cpu)
        return ocl_run_n(d, OCL_K_bias_grad_cpu, (size_t)c, "iiivv", n, c, hw, dy, db);
    return ocl_run_groups(d, OCL_K_bias_grad, (size_t)c, "iiivv", n, c, hw, dy, db);
}

/* bias_add then act_fwd: one launch for relu, leaky and identity, else
 * the two kernels (the same values either way). */
int ocl_bias_act_fwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw, rt_view b,
                     rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "opencl: unknown activation %d", (int)kind);
    size_t planes = (size_t)n * c;
    if (kind <= RT_ACT_LEAKY) /* one launch, one pass */
        return ocl_run_n(d, OCL_K_bias_act_lin, planes, "liiifvv", planes, c, hw, (int)kind,
                         (double)alpha, b, y);
    RT_TRY(ocl_bias_add(d, n, c, hw, b, y));
    return ocl_act_fwd(d, kind, alpha, (size_t)n * c * hw, y, y);
}

/* act_bwd with y standing for x (y > 0 exactly where x > 0 for relu and
 * leaky), then bias_grad of dx: one launch on a CPU device for the
 * piecewise-linear activations. */
int ocl_act_bias_bwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw, rt_view y,
                     rt_view dy, rt_view dx, rt_view db)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "opencl: unknown activation %d", (int)kind);
    if (kind <= RT_ACT_LEAKY && ocl(d)->sh->is_cpu)
        return ocl_run_n(d, OCL_K_act_bias_grad_cpu, (size_t)c, "ifiiivvvv", (int)kind,
                         (double)alpha, n, c, hw, y, dy, dx, db);
    const size_t count = (size_t)n * c * hw;
    if (count)
        RT_TRY(ocl_act_bwd(d, kind, alpha, count, y, y, dy, dx));
    return ocl_bias_grad(d, n, c, hw, dx, db);
}

#define POOL_GEOM(s)                                                                         \
    (int)(s)->mode, (s)->h, (s)->w, (s)->r, (s)->s, (s)->stride_h, (s)->stride_w, (s)->pad_h, \
        (s)->pad_w, (s)->oh, (s)->ow

/* 2x2 max pooling, stride 2, tiling the input exactly, on a CPU device:
 * the hand-vectorised kernels. */
static bool pool_max2(rt_dev *d, const struct rt_pool_shape *s)
{
    return ocl(d)->sh->is_cpu && s->mode == RT_POOL_MAX && s->r == 2 && s->s == 2 &&
           s->stride_h == 2 && s->stride_w == 2 && s->pad_h == 0 && s->pad_w == 0 &&
           s->h == 2 * s->oh && s->w == 2 * s->ow;
}

int ocl_pool_fwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y)
{
    if (pool_max2(d, s)) {
        size_t planes = (size_t)s->n * s->c;
        return ocl_run_n(d, OCL_K_maxpool2_fwd, planes, "liivv", planes, s->oh, s->ow, x, y);
    }
    size_t rows = (size_t)s->n * s->c * s->oh;
    return ocl_run_n(d, OCL_K_pool_fwd, rows, "liiiiiiiiiiivv", rows, POOL_GEOM(s), x, y);
}

/* y is not needed: the arg-max is found again from x (the tie rule).
 * Windows that tile the input (LeNet's 2x2, stride 2) take the scatter
 * kernel; overlapping or padded ones the gather. */
int ocl_pool_bwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y, rt_view dy,
                 rt_view dx)
{
    if (pool_max2(d, s)) {
        size_t planes = (size_t)s->n * s->c;
        return ocl_run_n(d, OCL_K_maxpool2_bwd, planes, "liivvv", planes, s->oh, s->ow, x, dy,
                         dx);
    }
    if (s->stride_h == s->r && s->stride_w == s->s && s->pad_h == 0 && s->pad_w == 0) {
        size_t rows = (size_t)s->n * s->c * s->oh;
        return ocl_run_n(d, OCL_K_pool_bwd_tile, rows, "liiiiiiivvv", rows, (int)s->mode, s->h,
                         s->w, s->r, s->s, s->oh, s->ow, x, dy, dx);
    }
    size_t rows = (size_t)s->n * s->c * s->h;
    return ocl_run_n(d, OCL_K_pool_bwd, rows, "liiiiiiiiiiivvv", rows, POOL_GEOM(s), x, dy, dx);
}

int ocl_add_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view a, rt_view b,
                    rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "opencl: unknown activation %d", (int)kind);
    return ocl_run_n(d, OCL_K_add_act, n, "iflvvv", (int)kind, (double)alpha, n, a, b, y);
}

int ocl_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "opencl: unknown activation %d", (int)kind);
    if (kind == RT_ACT_IDENTITY && x.buf == y.buf && x.off == y.off)
        return RT_OK;
    if (kind <= RT_ACT_LEAKY)
        return ocl_run_n(d, OCL_K_act_fwd_lin, n, "iflvv", (int)kind, (double)alpha, n, x, y);
    return ocl_run_n(d, OCL_K_act_fwd, n, "iflvv", (int)kind, (double)alpha, n, x, y);
}

int ocl_act_bwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y,
                rt_view dy, rt_view dx)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "opencl: unknown activation %d", (int)kind);
    if (kind == RT_ACT_IDENTITY && dy.buf == dx.buf && dy.off == dx.off)
        return RT_OK;
    if (kind <= RT_ACT_LEAKY)
        return ocl_run_n(d, OCL_K_act_bwd_lin, n, "iflvvv", (int)kind, (double)alpha, n, x, dy,
                         dx);
    return ocl_run_n(d, OCL_K_act_bwd, n, "iflvvvv", (int)kind, (double)alpha, n, x, y, dy, dx);
}

/* ---- softmax + cross-entropy ----------------------------------------------------- */

static int softmax_flag_reset(rt_dev *d)
{
    static const cl_int none = INT_MAX;
    struct ocl_dev *o = ocl(d);
    cl_int err = clEnqueueWriteBuffer(o->queue, o->flag, CL_FALSE, 0, sizeof none, &none, 0, NULL,
                                      NULL);
    return ocl_status(err, "softmax: resetting the label check");
}

/* Queues the read of the flag the kernel just set; the next download or
 * sync waits for it (ocl_late_check) and reports a bad label there.
 * Waiting here instead cost a round trip to the host twice a training
 * step (the backward's in the middle of it), and the trainer has checked
 * the labels on the host before the forward anyway (backend.h allows a
 * device backend to report a bad label late). chained: an earlier op's
 * read is still on its way, into the same late_flag; this later one
 * brings both ops' labels (the flag was not reset between them) and
 * replaces it. */
static int softmax_flag_later(rt_dev *d, const char *op, int c, bool chained)
{
    struct ocl_dev *o = ocl(d);
    cl_event earlier = chained ? o->late_ev : NULL;
    if (!chained) {
        o->late_flag = INT_MAX;
        o->late_c = c;
        o->late_op = op;
    }
    cl_int err = clEnqueueReadBuffer(o->queue, o->flag, CL_FALSE, 0, sizeof o->late_flag,
                                     &o->late_flag, 0, NULL, &o->late_ev);
    if (err != CL_SUCCESS)
        o->late_ev = NULL;
    if (earlier)
        clReleaseEvent(earlier); /* (the queue keeps the read itself) */
    return ocl_status(err, "softmax: queueing the label check");
}

int ocl_late_check(rt_dev *d)
{
    struct ocl_dev *o = ocl(d);
    if (!o->late_ev)
        return RT_OK;
    RT_TRY(ocl_status(ocl_event_done(&o->late_ev), "softmax: reading the label check"));
    if (o->late_flag == INT_MAX)
        return RT_OK;
    return rt_error(RT_ERR_ARG, "%s: the label of sample %d is outside [0, %d)", o->late_op,
                    (int)o->late_flag, o->late_c);
}

int ocl_softmax_xent_fwd(rt_dev *d, int n, int c, rt_view logits, rt_view labels, rt_view probs,
                         rt_view losses)
{
    RT_TRY(ocl_late_check(d));
    RT_TRY(softmax_flag_reset(d));
    RT_TRY(ocl_run_n(d, OCL_K_softmax_xent_fwd, (size_t)n, "iivvvvm", n, c, logits, labels, probs,
                     losses, ocl(d)->flag));
    return softmax_flag_later(d, "softmax_xent_fwd", c, false);
}

int ocl_softmax_xent_bwd(rt_dev *d, int n, int c, rt_view probs, rt_view labels, float scale,
                         rt_view dlogits)
{
    /* the forward's check may still be on its way: waiting for it would
     * drain the queue in the middle of a step; the flag keeps a bad label
     * of either op (atomic_min) and one later read brings it */
    const bool chained = ocl(d)->late_ev != NULL;
    if (!chained)
        RT_TRY(softmax_flag_reset(d));
    RT_TRY(ocl_run_n(d, OCL_K_softmax_xent_bwd, (size_t)n, "iifvvvm", n, c, (double)scale,
                     probs, labels, dlogits, ocl(d)->flag));
    return softmax_flag_later(d, "softmax_xent_bwd", c, chained);
}

/* ---- batch norm ---------------------------------------------------------------------- */

/* One work-group per channel. */
/* The shape's activation after batch norm, in place (act_fwd allows it). */
static int bn_act(rt_dev *d, const struct rt_bn_shape *s, rt_view y)
{
    if (s->act == RT_ACT_IDENTITY)
        return RT_OK;
    return ocl_act_fwd(d, s->act, s->alpha, (size_t)s->n * s->c * s->hw, y, y);
}

int ocl_bn_fwd_train(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                     rt_view beta, rt_view y, rt_view save_mean, rt_view save_invstd,
                     rt_view run_mean, rt_view run_var)
{
    RT_TRY(ocl_run_groups(d, OCL_K_bn_fwd_train, (size_t)s->c, "iiiffvvvvvvvv", s->n, s->c,
                          s->hw, (double)s->eps, (double)s->momentum, x, gamma, beta, y,
                          save_mean, save_invstd, run_mean, run_var));
    return bn_act(d, s, y);
}

int ocl_bn_fwd_infer(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                     rt_view beta, rt_view run_mean, rt_view run_var, rt_view y)
{
    size_t planes = (size_t)s->n * s->c;
    RT_TRY(ocl_run_n(d, OCL_K_bn_fwd_infer, planes, "liifvvvvvv", planes, s->c, s->hw,
                     (double)s->eps, x, gamma, beta, run_mean, run_var, y));
    return bn_act(d, s, y);
}

/* With an activation: its gradient g into dx first, then batch norm's of
 * g in place (each element is read before it is written, by one work-item). */
int ocl_bn_bwd(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view y, rt_view dy,
               rt_view gamma, rt_view save_mean, rt_view save_invstd, rt_view dx,
               rt_view dgamma, rt_view dbeta)
{
    if (s->act != RT_ACT_IDENTITY) {
        RT_TRY(ocl_act_bwd(d, s->act, s->alpha, (size_t)s->n * s->c * s->hw, y, y, dy, dx));
        dy = dx;
    }
    return ocl_run_groups(d, OCL_K_bn_bwd, (size_t)s->c, "iiivvvvvvvv", s->n, s->c, s->hw, x, dy,
                          gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

/* ---- dropout ---------------------------------------------------------------------------- */

int ocl_dropout_fwd(rt_dev *d, size_t n, float rate, uint64_t seed, rt_view x, rt_view y,
                    rt_view mask)
{
    const float keep = 1.0f / (1.0f - rate);
    return ocl_run_n(d, OCL_K_dropout_fwd, n, "lffuvvv", n, (double)rate, (double)keep, seed, x, y,
                     mask);
}
