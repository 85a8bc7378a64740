/* elementwise.cl — fill, scale, axpy, mul, activations, dropout, the GEMM's
 * beta-only case, the fused optimiser steps and sumsq's first stage (maths
 * in backends/backend.h, written the way backends/cpu/cpu.c writes it, so
 * that results agree). */

kernel void rt_fill(ulong n, float v, global float *x, ulong xo)
{
    RT_ELEM(i, n);
    x[xo + i] = v;
}

kernel void rt_scale(ulong n, float a, global float *x, ulong xo)
{
    RT_ELEM(i, n);
    x[xo + i] *= a;
}

kernel void rt_axpy(ulong n, float a, global const float *x, ulong xo, global float *y, ulong yo)
{
    RT_ELEM(i, n);
    y[yo + i] += a * x[xo + i];
}

/* y may alias a or b: each element is read before it is written. */
kernel void rt_mul(ulong n, global const float *a, ulong ao, global const float *b, ulong bo,
                   global float *y, ulong yo)
{
    RT_ELEM(i, n);
    y[yo + i] = a[ao + i] * b[bo + i];
}

/* Row kernel. C = beta*C on an m x n block with row stride ldc; beta == 0
 * writes zeros (NaNs in C vanish). GEMM with k == 0 or alpha == 0. */
kernel void rt_scale_block(int m, int n, int ldc, float beta, global float *c, ulong co)
{
    RT_ELEM(row, m);
    global float *p = c + co + row * ldc;
    if (beta == 0.0f)
        for (int j = 0; j < n; j++)
            p[j] = 0.0f;
    else
        for (int j = 0; j < n; j++)
            p[j] *= beta;
}

/* Activation kinds: enum rt_act in backends/backend.h. */
#define RT_ACT_IDENTITY 0
#define RT_ACT_RELU 1
#define RT_ACT_LEAKY 2
#define RT_ACT_SIGMOID 3
#define RT_ACT_TANH 4

kernel void rt_act_fwd(int kind, float alpha, ulong n, global const float *x, ulong xo,
                       global float *y, ulong yo)
{
    RT_ELEM(i, n);
    const float v = x[xo + i];
    float r;
    switch (kind) {
    case RT_ACT_RELU: r = v > 0.0f ? v : 0.0f; break;
    case RT_ACT_LEAKY: r = v > 0.0f ? v : alpha * v; break;
    case RT_ACT_SIGMOID: r = 1.0f / (1.0f + exp(-v)); break;
    case RT_ACT_TANH: r = tanh(v); break;
    default: r = v; break;
    }
    y[yo + i] = r;
}

kernel void rt_act_bwd(int kind, float alpha, ulong n, global const float *x, ulong xo,
                       global const float *y, ulong yo, global const float *dy, ulong dyo,
                       global float *dx, ulong dxo)
{
    RT_ELEM(i, n);
    const float g = dy[dyo + i];
    float r;
    switch (kind) {
    case RT_ACT_RELU: r = x[xo + i] > 0.0f ? g : 0.0f; break;
    case RT_ACT_LEAKY: r = x[xo + i] > 0.0f ? g : alpha * g; break;
    case RT_ACT_SIGMOID: r = g * y[yo + i] * (1.0f - y[yo + i]); break;
    case RT_ACT_TANH: r = g * ((1.0f - y[yo + i]) * (1.0f + y[yo + i])); break;
    default: r = g; break;
    }
    dx[dxo + i] = r;
}

/* rt_dropout_keep() of backends/backend.h, in OpenCL C: the same 64-bit
 * hash, so every backend draws the same mask. */
bool rt_dropout_keep(ulong seed, ulong i, float rate)
{
    ulong z = seed + (i + 1) * 0x9E3779B97F4A7C15ul;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ul;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBul;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    return u >= rate;
}

kernel void rt_dropout_fwd(ulong n, float rate, float keep, ulong seed, global const float *x,
                           ulong xo, global float *y, ulong yo, global float *mask, ulong mo)
{
    RT_ELEM(i, n);
    const float m = rt_dropout_keep(seed, i, rate) ? keep : 0.0f;
    mask[mo + i] = m;
    y[yo + i] = x[xo + i] * m;
}

/* mode 0: no momentum (v unused), 1: momentum, 2: Nesterov momentum. */
kernel void rt_sgd_step(ulong n, float lr, float mu, float wd, int mode, global float *w,
                        ulong wo, global const float *g, ulong go, global float *v, ulong vo)
{
    RT_ELEM(i, n);
    w += wo;
    g += go;
    v += vo;
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

/* Adam / AdamW / Nadam with the per-step scalars computed on the host:
 * m_hat = cm*m + cg*g', as in backends/cpu/cpu.c. */
kernel void rt_adam_step(ulong n, float lr, float b1, float b2, float eps, float l2, float decay,
                         float inv_bc2, float cm, float cg, global float *w, ulong wo,
                         global const float *g, ulong go, global float *m, ulong mo,
                         global float *v, ulong vo)
{
    RT_ELEM(i, n);
    w += wo;
    g += go;
    m += mo;
    v += vo;
    const float wi = w[i] - decay * w[i];
    const float gi = g[i] + l2 * wi;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = cm * mi + cg * gi;
    w[i] = wi - lr * mhat / (sqrt(vi * inv_bc2) + eps);
}

/* Reduction. First stage of sumsq: work-group g sums the g-th of `groups`
 * contiguous slices; the host adds the partials in group order (a fixed
 * launch shape: a run repeats exactly). */
kernel void rt_sumsq_part(ulong n, global const float *x, ulong xo, global acc_t *part)
{
    local acc_t scratch[RT_RED];
    const ulong g = get_group_id(0), groups = get_num_groups(0);
    const ulong lo = n * g / groups, hi = n * (g + 1) / groups;
    x += xo;
    acc_t s = 0;
    for (ulong i = lo + get_local_id(0); i < hi; i += get_local_size(0)) {
        const acc_t v = x[i];
        s += v * v;
    }
    s = rt_group_sum(scratch, s);
    if (get_local_id(0) == 0)
        part[g] = s;
}
