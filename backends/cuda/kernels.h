/* kernels.h — the cuda backend's own kernels, as C functions that launch
 * them (kernels-*.cu, compiled by nvcc).
 *
 * This header is the one thing the C side (cuda.c, conv.c, nn.c, compiled
 * by the C compiler) and the CUDA side share. It holds no ragtag type, so
 * nvcc never compiles ragtag's headers, and the .c files never see CUDA C++:
 * pointers are device pointers with the view's offset already added, sizes
 * are plain integers, and every launcher enqueues on `st` and returns the
 * launch's status (cudaGetLastError), never waiting for the kernel.
 *
 * The maths is backends/backend.h's, written the way backends/cpu/ writes
 * it (same operation order, no a*b+c contraction: nvcc runs with
 * --fmad=false), so most results agree with the cpu backend bit for bit.
 * Reductions have a fixed launch shape and order and use no atomics on
 * data, so a run repeats exactly; per-channel sums and sumsq accumulate in
 * double, softmax's row sums in float in class order, as the cpu's do. */
#ifndef RT_CUDA_KERNELS_H
#define RT_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every kernel; the block reductions assume it. */
#define RTCU_THREADS 256

/* Blocks of sumsq's first stage, at most: the host adds their sums. */
#define RTCU_SUMSQ_BLOCKS 256

/* A pooling window's geometry (struct rt_pool_shape, minus the enum). */
struct rtcu_pool {
    int max; /* 1: max pooling, 0: average */
    int n, c, h, w, r, s, sh, sw, ph, pw, oh, ow;
};

/* A convolution's geometry (struct rt_conv_shape). */
struct rtcu_conv {
    int n, c, h, w, k, r, s, sh, sw, ph, pw, oh, ow;
};

/* Is there code for the current device in this module? cudaSuccess, or
 * cudaErrorNoKernelImageForDevice when it was built for other GPUs. */
cudaError_t rtcu_probe(void);

/* ---- kernels-elementwise.cu ---------------------------------------------------- */
cudaError_t rtcu_fill(cudaStream_t st, size_t n, float v, float *x);
cudaError_t rtcu_scale(cudaStream_t st, size_t n, float a, float *x);
cudaError_t rtcu_axpy(cudaStream_t st, size_t n, float a, const float *x, float *y);
cudaError_t rtcu_mul(cudaStream_t st, size_t n, const float *a, const float *b, float *y);
/* C = beta*C on an m x n block of row stride ldc; beta == 0 writes zeros. */
cudaError_t rtcu_scale_block(cudaStream_t st, int m, int n, int ldc, float beta, float *c);
/* kind: enum rt_act's values (0 identity, 1 relu, 2 leaky, 3 sigmoid, 4 tanh) */
cudaError_t rtcu_act_fwd(cudaStream_t st, int kind, float alpha, size_t n, const float *x,
                         float *y);
cudaError_t rtcu_act_bwd(cudaStream_t st, int kind, float alpha, size_t n, const float *x,
                         const float *y, const float *dy, float *dx);
cudaError_t rtcu_add_act(cudaStream_t st, int kind, float alpha, size_t n, const float *a,
                         const float *b, float *y);
cudaError_t rtcu_dropout_fwd(cudaStream_t st, size_t n, float rate, float keep, uint64_t seed,
                             const float *x, float *y, float *mask);
/* mode 0: no momentum (v unused, may be NULL), 1: momentum, 2: Nesterov. */
cudaError_t rtcu_sgd_step(cudaStream_t st, size_t n, float lr, float mu, float wd, int mode,
                          float *w, const float *g, float *v);
/* m_hat = cm*m + cg*g'; the scalars as backends/cpu/cpu.c computes them. */
cudaError_t rtcu_adam_step(cudaStream_t st, size_t n, float lr, float b1, float b2, float eps,
                           float l2, float decay, float inv_bc2, float cm, float cg, float *w,
                           const float *g, float *m, float *v);
/* part[b] = sum of x[i]^2 over the b-th of `blocks` contiguous slices. */
cudaError_t rtcu_sumsq_part(cudaStream_t st, size_t n, const float *x, int blocks, double *part);

/* ---- kernels-nn.cu -------------------------------------------------------------- */
cudaError_t rtcu_bias_add(cudaStream_t st, int n, int c, int hw, const float *b, float *y);
cudaError_t rtcu_bias_grad(cudaStream_t st, int n, int c, int hw, const float *dy, float *db);
cudaError_t rtcu_pool_fwd(cudaStream_t st, const struct rtcu_pool *p, const float *x, float *y);
cudaError_t rtcu_pool_bwd(cudaStream_t st, const struct rtcu_pool *p, const float *x,
                          const float *dy, float *dx);
/* *bad (unsigned, set to UINT32_MAX before) receives the smallest sample
 * index whose label is outside [0, c). */
cudaError_t rtcu_softmax_xent_fwd(cudaStream_t st, int n, int c, const float *logits,
                                  const int32_t *labels, float *probs, float *losses,
                                  uint32_t *bad);
cudaError_t rtcu_softmax_xent_bwd(cudaStream_t st, int n, int c, float scale, const float *probs,
                                  const int32_t *labels, float *dlogits, uint32_t *bad);
cudaError_t rtcu_bn_fwd_train(cudaStream_t st, int n, int c, int hw, float eps, float mom,
                              const float *x, const float *gamma, const float *beta, float *y,
                              float *save_mean, float *save_invstd, float *run_mean,
                              float *run_var);
cudaError_t rtcu_bn_fwd_infer(cudaStream_t st, int n, int c, int hw, float eps, const float *x,
                              const float *gamma, const float *beta, const float *run_mean,
                              const float *run_var, float *y);
cudaError_t rtcu_bn_bwd(cudaStream_t st, int n, int c, int hw, const float *x, const float *dy,
                        const float *gamma, const float *save_mean, const float *save_invstd,
                        float *dx, float *dgamma, float *dbeta);

/* ---- kernels-conv.cu: im2col + GEMM, the convolution without cuDNN ------------------
 * For a chunk of nb images the column matrix is crs x (nb*ohw): row
 * (ch*r + i)*s + j, column (ni*oh + oy)*ow + ox (the opencl backend's). */
cudaError_t rtcu_im2col(cudaStream_t st, const struct rtcu_conv *g, int nb, const float *x,
                        float *col);
cudaError_t rtcu_col2im(cudaStream_t st, const struct rtcu_conv *g, int nb, const float *col,
                        float *dx);
/* dst[k][ni*p + i] = src[ni][k][i] and back. */
cudaError_t rtcu_nkp_to_knp(cudaStream_t st, int nb, int k, int p, const float *src, float *dst);
cudaError_t rtcu_knp_to_nkp(cudaStream_t st, int nb, int k, int p, const float *src, float *dst);

#ifdef __cplusplus
}
#endif

#endif
