/* kernels-elementwise.cu — fill, scale, axpy, mul, activations, dropout, the
 * GEMM's beta-only case, the fused optimiser steps and sumsq's first stage
 * (maths in backends/backend.h, written as backends/cpu/cpu.c writes it). */
#include "common.cuh"

#include <math.h>

__global__ static void k_fill(size_t n, float v, float *x)
{
    RTCU_FOR_EACH(i, n)
    x[i] = v;
}

__global__ static void k_scale(size_t n, float a, float *x)
{
    RTCU_FOR_EACH(i, n)
    x[i] *= a;
}

__global__ static void k_axpy(size_t n, float a, const float *x, float *y)
{
    RTCU_FOR_EACH(i, n)
    y[i] += a * x[i];
}

/* y may alias a or b: each element is read before it is written. */
__global__ static void k_mul(size_t n, const float *a, const float *b, float *y)
{
    RTCU_FOR_EACH(i, n)
    y[i] = a[i] * b[i];
}

__global__ static void k_scale_block(int m, int n, int ldc, float beta, float *c)
{
    RTCU_FOR_EACH(t, (size_t)m * n)
    {
        float *p = c + (t / n) * (size_t)ldc + t % n;
        *p = beta == 0.0f ? 0.0f : *p * beta;
    }
}

/* enum rt_act in backends/backend.h */
enum { ACT_IDENTITY, ACT_RELU, ACT_LEAKY, ACT_SIGMOID, ACT_TANH };

__device__ static float act_value(int kind, float alpha, float v)
{
    switch (kind) {
    case ACT_RELU: return v > 0.0f ? v : 0.0f;
    case ACT_LEAKY: return v > 0.0f ? v : alpha * v;
    case ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case ACT_TANH: return tanhf(v);
    default: return v;
    }
}

__global__ static void k_act_fwd(int kind, float alpha, size_t n, const float *x, float *y)
{
    RTCU_FOR_EACH(i, n)
    {
        y[i] = act_value(kind, alpha, x[i]);
    }
}

/* y = act(a + b): a [shortcut]'s residual add (y may be a or b). */
__global__ static void k_add_act(int kind, float alpha, size_t n, const float *a, const float *b,
                                 float *y)
{
    RTCU_FOR_EACH(i, n)
    {
        y[i] = act_value(kind, alpha, a[i] + b[i]);
    }
}

/* relu and leaky look at x, sigmoid and tanh at y (backend.h). */
__global__ static void k_act_bwd(int kind, float alpha, size_t n, const float *x, const float *y,
                                 const float *dy, float *dx)
{
    RTCU_FOR_EACH(i, n)
    {
        const float g = dy[i];
        float r;
        switch (kind) {
        case ACT_RELU: r = x[i] > 0.0f ? g : 0.0f; break;
        case ACT_LEAKY: r = x[i] > 0.0f ? g : alpha * g; break;
        case ACT_SIGMOID: r = g * y[i] * (1.0f - y[i]); break;
        case ACT_TANH: r = g * ((1.0f - y[i]) * (1.0f + y[i])); break;
        default: r = g; break;
        }
        dx[i] = r;
    }
}

/* rt_dropout_keep() of backends/backend.h, for the device: the same 64-bit
 * hash, so every backend draws the same mask (tests/test_backend_ops.c
 * compares the masks bit for bit). */
__device__ static inline bool dropout_keep(uint64_t seed, uint64_t i, float rate)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    return u >= rate;
}

__global__ static void k_dropout_fwd(size_t n, float rate, float keep, uint64_t seed,
                                     const float *x, float *y, float *mask)
{
    RTCU_FOR_EACH(i, n)
    {
        const float m = dropout_keep(seed, i, rate) ? keep : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

__global__ static void k_sgd_step(size_t n, float lr, float mu, float wd, int mode, float *w,
                                  const float *g, float *v)
{
    RTCU_FOR_EACH(i, n)
    {
        if (mode == 0) {
            w[i] -= lr * (g[i] + wd * w[i]);
        } else if (mode == 2) {
            const float gi = g[i] + wd * w[i];
            const float vi = mu * v[i] + gi;
            v[i] = vi;
            w[i] -= lr * (gi + mu * vi);
        } else {
            const float vi = mu * v[i] + (g[i] + wd * w[i]);
            v[i] = vi;
            w[i] -= lr * vi;
        }
    }
}

__global__ static void k_adam_step(size_t n, float lr, float b1, float b2, float eps, float l2,
                                   float decay, float inv_bc2, float cm, float cg, float *w,
                                   const float *g, float *m, float *v)
{
    RTCU_FOR_EACH(i, n)
    {
        const float wi = w[i] - decay * w[i];
        const float gi = g[i] + l2 * wi;
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float mhat = cm * mi + cg * gi;
        w[i] = wi - lr * mhat / (sqrtf(vi * inv_bc2) + eps);
    }
}

/* Block b sums the b-th of gridDim.x contiguous slices of x. */
__global__ static void k_sumsq_part(size_t n, const float *x, double *part)
{
    __shared__ double scratch[RTCU_THREADS];
    const size_t b = blockIdx.x, nb = gridDim.x;
    const size_t lo = n / nb * b + (n % nb) * b / nb, hi = n / nb * (b + 1) + (n % nb) * (b + 1) / nb;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += RTCU_THREADS) {
        const double v = x[i];
        s += v * v;
    }
    s = rtcu_block_sum(scratch, s);
    if (threadIdx.x == 0)
        part[b] = s;
}

/* ---- launchers ------------------------------------------------------------------ */

extern "C" cudaError_t rtcu_probe(void)
{
    cudaFuncAttributes attr;
    return cudaFuncGetAttributes(&attr, (const void *)k_fill);
}

extern "C" cudaError_t rtcu_fill(cudaStream_t st, size_t n, float v, float *x)
{
    RTCU_LAUNCH_N(k_fill, st, n, n, v, x);
}

extern "C" cudaError_t rtcu_scale(cudaStream_t st, size_t n, float a, float *x)
{
    RTCU_LAUNCH_N(k_scale, st, n, n, a, x);
}

extern "C" cudaError_t rtcu_axpy(cudaStream_t st, size_t n, float a, const float *x, float *y)
{
    RTCU_LAUNCH_N(k_axpy, st, n, n, a, x, y);
}

extern "C" cudaError_t rtcu_mul(cudaStream_t st, size_t n, const float *a, const float *b,
                                float *y)
{
    RTCU_LAUNCH_N(k_mul, st, n, n, a, b, y);
}

extern "C" cudaError_t rtcu_scale_block(cudaStream_t st, int m, int n, int ldc, float beta,
                                        float *c)
{
    RTCU_LAUNCH_N(k_scale_block, st, (size_t)m * n, m, n, ldc, beta, c);
}

extern "C" cudaError_t rtcu_act_fwd(cudaStream_t st, int kind, float alpha, size_t n,
                                    const float *x, float *y)
{
    RTCU_LAUNCH_N(k_act_fwd, st, n, kind, alpha, n, x, y);
}

extern "C" cudaError_t rtcu_add_act(cudaStream_t st, int kind, float alpha, size_t n,
                                    const float *a, const float *b, float *y)
{
    RTCU_LAUNCH_N(k_add_act, st, n, kind, alpha, n, a, b, y);
}

extern "C" cudaError_t rtcu_act_bwd(cudaStream_t st, int kind, float alpha, size_t n,
                                    const float *x, const float *y, const float *dy, float *dx)
{
    RTCU_LAUNCH_N(k_act_bwd, st, n, kind, alpha, n, x, y, dy, dx);
}

extern "C" cudaError_t rtcu_dropout_fwd(cudaStream_t st, size_t n, float rate, float keep,
                                        uint64_t seed, const float *x, float *y, float *mask)
{
    RTCU_LAUNCH_N(k_dropout_fwd, st, n, n, rate, keep, seed, x, y, mask);
}

extern "C" cudaError_t rtcu_sgd_step(cudaStream_t st, size_t n, float lr, float mu, float wd,
                                     int mode, float *w, const float *g, float *v)
{
    RTCU_LAUNCH_N(k_sgd_step, st, n, n, lr, mu, wd, mode, w, g, v);
}

extern "C" cudaError_t rtcu_adam_step(cudaStream_t st, size_t n, float lr, float b1, float b2,
                                      float eps, float l2, float decay, float inv_bc2, float cm,
                                      float cg, float *w, const float *g, float *m, float *v)
{
    RTCU_LAUNCH_N(k_adam_step, st, n, n, lr, b1, b2, eps, l2, decay, inv_bc2, cm, cg, w, g, m, v);
}

extern "C" cudaError_t rtcu_sumsq_part(cudaStream_t st, size_t n, const float *x, int blocks,
                                       double *part)
{
    if (blocks <= 0)
        return cudaErrorInvalidValue;
    k_sumsq_part<<<blocks, RTCU_THREADS, 0, st>>>(n, x, part);
    return cudaGetLastError();
}
