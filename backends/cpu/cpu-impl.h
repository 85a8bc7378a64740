/* cpu-impl.h — private to the cpu backend (cpu.c, conv.c, nn.c).
 *
 * The cpu backend is the reference every other backend is compared with and
 * the speed baseline: buffers are 64-byte aligned host memory (the handle is
 * the host pointer), GEMM goes through a CBLAS when one is linked, and
 * OpenMP spreads loops over d->threads host threads. No op allocates: the
 * only scratch memory is the caller's conv workspace. */
#ifndef RT_CPU_IMPL_H
#define RT_CPU_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "backend-impl.h"

/* OpenMP is optional: without it every op runs on the calling thread. */
#ifdef _OPENMP
#include <omp.h>
static inline int cpu_thread_num(void) { return omp_get_thread_num(); }
static inline int cpu_num_threads(void) { return omp_get_num_threads(); }
#else
static inline int cpu_thread_num(void) { return 0; }
static inline int cpu_num_threads(void) { return 1; }
#endif

/* Upper bound on threads per device: per-thread partial sums live in
 * fixed-size stack arrays, so no op has to allocate. */
#define CPU_MAX_THREADS 256

/* Elementwise loops shorter than this run on one thread: starting a parallel
 * region costs more than it saves. */
#define CPU_PAR_MIN 32768

struct cpu_dev {
    int nt; /* threads used by this device's ops (>= 1) */
};

static inline int cpu_nt(const rt_dev *d) { return ((const struct cpu_dev *)d->impl)->nt; }

static inline float *cpu_f(rt_view v) { return (float *)v.buf->handle + v.off; }

static inline int *cpu_i(rt_view v) { return (int *)v.buf->handle + v.off; }

/* A view that may be absent (e.g. the momentum buffer when momentum is 0). */
static inline float *cpu_f_or_null(rt_view v)
{
    return v.buf ? (float *)v.buf->handle + v.off : NULL;
}

/* Row-major SGEMM on host pointers, C = alpha*op(A)*op(B) + beta*C, with
 * beta == 0 meaning C is not read. `nt` threads; pass 1 inside a parallel
 * region (the BLAS then runs on the calling thread only). */
void cpu_sgemm(int nt, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Call before a parallel region whose threads call cpu_sgemm(1, ...). */
void cpu_blas_before_parallel(void);

/* conv.c */
size_t cpu_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s);
int cpu_conv2d_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w, rt_view y,
                   rt_view ws);
int cpu_conv2d_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dy, rt_view w,
                        rt_view dx, rt_view ws);
int cpu_conv2d_bwd_filter(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view dy,
                          rt_view dw, rt_view ws);

/* nn.c */
int cpu_bias_add(rt_dev *d, int n, int c, int hw, rt_view b, rt_view y);
int cpu_bias_grad(rt_dev *d, int n, int c, int hw, rt_view dy, rt_view db);
int cpu_pool_fwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y);
int cpu_pool_bwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y, rt_view dy,
                 rt_view dx);
int cpu_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y);
int cpu_act_bwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y,
                rt_view dy, rt_view dx);
int cpu_softmax_xent_fwd(rt_dev *d, int n, int c, rt_view logits, rt_view labels,
                         rt_view probs, rt_view losses);
int cpu_softmax_xent_bwd(rt_dev *d, int n, int c, rt_view probs, rt_view labels, float scale,
                         rt_view dlogits);
int cpu_bn_fwd_train(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                     rt_view beta, rt_view y, rt_view save_mean, rt_view save_invstd,
                     rt_view run_mean, rt_view run_var);
int cpu_bn_fwd_infer(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                     rt_view beta, rt_view run_mean, rt_view run_var, rt_view y);
int cpu_bn_bwd(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view dy, rt_view gamma,
               rt_view save_mean, rt_view save_invstd, rt_view dx, rt_view dgamma,
               rt_view dbeta);
int cpu_dropout_fwd(rt_dev *d, size_t n, float rate, uint64_t seed, rt_view x, rt_view y,
                    rt_view mask);

#endif
