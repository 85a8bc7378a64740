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

float rt_act_value(int kind, float alpha, float v)
{
    switch (kind) {
    case RT_ACT_RELU: return v > 0.0f ? v : 0.0f;
    case RT_ACT_LEAKY: return v > 0.0f ? v : alpha * v;
    case RT_ACT_SIGMOID: return 1.0f / (1.0f + exp(-v));
    case RT_ACT_TANH: return tanh(v);
    default: return v;
    }
}

kernel void rt_act_fwd(int kind, float alpha, ulong n, global const float *x, ulong xo,
                       global float *y, ulong yo)
{
    RT_ELEM(i, n);
    y[yo + i] = rt_act_value(kind, alpha, x[xo + i]);
}

/* y = act(a + b): a [shortcut]'s residual add (y may be a or b). */
kernel void rt_add_act(int kind, float alpha, ulong n, global const float *a, ulong ao,
                       global const float *b, ulong bo, global float *y, ulong yo)
{
    RT_ELEM(i, n);
    y[yo + i] = rt_act_value(kind, alpha, a[ao + i] + b[bo + i]);
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

/* Identity, relu and leaky without the transcendental cases: loops of
 * selects that PoCL vectorises across work-items (rt_act_fwd's calls to
 * exp and tanh keep it scalar). The same results as rt_act_fwd/bwd. */
kernel void rt_act_fwd_lin(int kind, float alpha, ulong n, global const float *x, ulong xo,
                           global float *y, ulong yo)
{
    RT_ELEM(i, n);
    const float v = x[xo + i];
    const float neg = kind == RT_ACT_RELU ? 0.0f : kind == RT_ACT_LEAKY ? alpha * v : v;
    y[yo + i] = v > 0.0f ? v : neg;
}

kernel void rt_act_bwd_lin(int kind, float alpha, ulong n, global const float *x, ulong xo,
                           global const float *dy, ulong dyo, global float *dx, ulong dxo)
{
    RT_ELEM(i, n);
    const float g = dy[dyo + i];
    const float neg = kind == RT_ACT_RELU ? 0.0f : kind == RT_ACT_LEAKY ? alpha * g : g;
    dx[dxo + i] = x[xo + i] > 0.0f ? g : neg;
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

/* ---- GEMM for CPU devices --------------------------------------------------------------
 * CLBlast's kernels are shaped for GPUs; on PoCL they reach 5-17 GFLOP/s at
 * a dense layer's shapes (64 rows). These two hold a register tile of
 * vectors per work-item instead, float8 or, on AVX-512, float16 (_v16;
 * backends/opencl/opencl.c picks them on CPU devices). C = alpha*op(A)*op(B) + beta*C, row-major; beta == 0
 * does not read C. Rows and columns past the edges are computed on clamped
 * (duplicate) indices and not stored; tails along the vector are loaded
 * lane by lane, never past the matrix. */

/* The sum of a vector's lanes, in a fixed order. */
float rt_hsum8(float8 a)
{
    const float4 h4 = a.lo + a.hi;
    const float2 h2 = h4.lo + h4.hi;
    return h2.x + h2.y;
}

float rt_hsum16(float16 a) { return rt_hsum8(a.lo + a.hi); }

/* The first n (0..16) floats at p, zeros after. */
float16 rt_vload_part(int n, global const float *p)
{
    if (n >= 16)
        return vload16(0, p);
    float t[16];
    for (int i = 0; i < 16; i++)
        t[i] = i < n ? p[i] : 0.0f;
    return vload16(0, t);
}

/* Store the first n (0..8) lanes of v at p. */
void rt_vstore_part8(float8 v, int n, global float *p)
{
    if (n >= 8) {
        vstore8(v, 0, p);
        return;
    }
    float4 b = v.lo;
    if (n & 4) {
        vstore4(b, 0, p);
        p += 4;
        b = v.hi;
    }
    float2 c = b.lo;
    if (n & 2) {
        vstore2(c, 0, p);
        p += 2;
        c = b.hi;
    }
    if (n & 1)
        p[0] = c.x;
}

/* Store the first n (0..16) lanes of v at p. */
void rt_vstore_part16(float16 v, int n, global float *p)
{
    if (n >= 8) {
        vstore8(v.lo, 0, p);
        rt_vstore_part8(v.hi, n - 8, p + 8);
    } else {
        rt_vstore_part8(v.lo, n, p);
    }
}

/* C row = alpha*acc (+ beta*C), its first nv (0..8, or 0..16) lanes. */
void rt_gemm_put8(float8 acc, int nv, float alpha, float beta, global float *c)
{
    float8 v = alpha * acc;
    if (beta != 0.0f)
        v += beta * rt_vload_part(nv, c).lo;
    rt_vstore_part8(v, nv, c);
}

void rt_gemm_put16(float16 acc, int nv, float alpha, float beta, global float *c)
{
    float16 v = alpha * acc;
    if (beta != 0.0f)
        v += beta * rt_vload_part(nv, c);
    rt_vstore_part16(v, nv, c);
}

/* The first n floats at p (zeros after), as a vector of 8 or 16. */
float8 rt_gemm_part8(int n, global const float *p) { return rt_vload_part(n, p).lo; }
float16 rt_gemm_part16(int n, global const float *p) { return rt_vload_part(n, p); }

#define RT_GM 6 /* rows per work-item of rt_gemm_rows */

/* RT_GEMM_ROWS's loop along k: B's two vectors of row kk (loaded as B0 and
 * B1, from bk), each times RT_GM broadcasts of A. */
#define RT_ROWS_LOOP(V, B0, B1)                                                             \
    for (int kk = 0; kk < k; kk++) {                                                        \
        global const float *ak = a + kk * sak, *bk = b + (ulong)kk * ldb;                   \
        const float##V b0 = B0, b1 = B1;                                                    \
        _Pragma("unroll")                                                                   \
        for (int r = 0; r < RT_GM; r++) {                                                   \
            const float##V av = (float##V)ak[ro[r]];                                        \
            p[r] = RT_MAD(av, b0, p[r]);                                                    \
            q[r] = RT_MAD(av, b1, q[r]);                                                    \
        }                                                                                   \
    }

/* op(B) not transposed: vectors along C's rows. One work-item: RT_GM rows x
 * 2 V columns, 2 RT_GM vector accumulators; vectors of 8 fit AVX2's 16
 * registers with their operands, and of 16 (_v16) AVX-512's 32, where
 * each load of B and broadcast of A feeds twice the lanes (float16 tiles
 * on AVX2 were spilled). op(A)[i][kk] = A[i*sai + kk*sak]. Work-items:
 * column block fastest, then row block, or the other way round (rowfast):
 * neighbours then share a panel of B rather than rows of A (the host picks
 * whichever streams less). NAME: one GEMM; NAME_pair: two independent
 * ones in one launch, work-items [0, items0) on the first (a dense
 * layer's weight and data gradients: on a CPU device a launch costs as
 * much as one of lenet's small GEMMs), each tile the bits of NAME's. */
#define RT_GEMM_ROWS_ARGS(S)                                                                \
    int m##S, int n##S, int k##S, float alpha##S, int sai##S, int sak##S,                  \
        global const float *a##S, ulong ao##S, global const float *b##S, ulong bo##S,      \
        int ldb##S, float beta##S, global float *c##S, ulong co##S, int ldc##S, int rowfast##S
#define RT_GEMM_ROWS_PASS(S)                                                                \
    m##S, n##S, k##S, alpha##S, sai##S, sak##S, a##S + ao##S, b##S + bo##S, ldb##S,          \
        beta##S, c##S + co##S, ldc##S, rowfast##S
#define RT_GEMM_ROWS(NAME, V)                                                               \
    inline void NAME##_tile(ulong t, int m, int n, int k, float alpha, int sai, int sak,    \
                            global const float *a, global const float *b, int ldb,         \
                            float beta, global float *c, int ldc, int rowfast)             \
    {                                                                                       \
        const int ncb = (n + 2 * V - 1) / (2 * V), nrb = (m + RT_GM - 1) / RT_GM;          \
        if (t >= (ulong)ncb * nrb)                                                          \
            return;                                                                         \
        const int j0 = (int)(rowfast ? t / nrb : t % ncb) * 2 * V;                          \
        const int i0 = (int)(rowfast ? t % nrb : t / ncb) * RT_GM;                          \
        b += j0;                                                                            \
        int ro[RT_GM];                                                                      \
        _Pragma("unroll")                                                                   \
        for (int r = 0; r < RT_GM; r++)                                                     \
            ro[r] = min(i0 + r, m - 1) * sai;                                               \
        float##V p[RT_GM], q[RT_GM];                                                        \
        _Pragma("unroll")                                                                   \
        for (int r = 0; r < RT_GM; r++)                                                     \
            p[r] = q[r] = (float##V)0.0f;                                                   \
        const int nv = min(n - j0, 2 * V);                                                  \
        if (nv == 2 * V)                                                                    \
            RT_ROWS_LOOP(V, vload##V(0, bk), vload##V(0, bk + V))                           \
        else                                                                                \
            RT_ROWS_LOOP(V, rt_gemm_part##V(nv, bk), rt_gemm_part##V(nv - V, bk + V))       \
        _Pragma("unroll")                                                                   \
        for (int r = 0; r < RT_GM; r++) {                                                   \
            if (i0 + r < m) {                                                               \
                global float *cr = c + (ulong)(i0 + r) * ldc + j0;                          \
                rt_gemm_put##V(p[r], min(nv, V), alpha, beta, cr);                          \
                if (nv > V)                                                                 \
                    rt_gemm_put##V(q[r], nv - V, alpha, beta, cr + V);                      \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    kernel void NAME(RT_GEMM_ROWS_ARGS(0))                                                  \
    {                                                                                       \
        NAME##_tile(get_global_id(0), RT_GEMM_ROWS_PASS(0));                                \
    }                                                                                       \
    kernel void NAME##_pair(ulong items0, RT_GEMM_ROWS_ARGS(0), RT_GEMM_ROWS_ARGS(1))       \
    {                                                                                       \
        const ulong t = get_global_id(0);                                                   \
        if (t < items0)                                                                     \
            NAME##_tile(t, RT_GEMM_ROWS_PASS(0));                                           \
        else                                                                                \
            NAME##_tile(t - items0, RT_GEMM_ROWS_PASS(1));                                  \
    }
RT_GEMM_ROWS(rt_gemm_rows, 8)
RT_GEMM_ROWS(rt_gemm_rows_v16, 16)

/* One step of RT_GEMM_DOTS along k: 6 loads of type T (LOAD), 9 FMAs into
 * the accumulators s[e] or their low halves (SUB .lo). */
#define RT_DOTS_STEP(T, LOAD, SUB)                                                          \
    {                                                                                       \
        const T x0 = LOAD(a0), x1 = LOAD(a1), x2 = LOAD(a2);                                \
        const T y0 = LOAD(b0), y1 = LOAD(b1), y2 = LOAD(b2);                                \
        s[0] SUB = RT_MAD(x0, y0, s[0] SUB);                                                \
        s[1] SUB = RT_MAD(x0, y1, s[1] SUB);                                                \
        s[2] SUB = RT_MAD(x0, y2, s[2] SUB);                                                \
        s[3] SUB = RT_MAD(x1, y0, s[3] SUB);                                                \
        s[4] SUB = RT_MAD(x1, y1, s[4] SUB);                                                \
        s[5] SUB = RT_MAD(x1, y2, s[5] SUB);                                                \
        s[6] SUB = RT_MAD(x2, y0, s[6] SUB);                                                \
        s[7] SUB = RT_MAD(x2, y1, s[7] SUB);                                                \
        s[8] SUB = RT_MAD(x2, y2, s[8] SUB);                                                \
    }
#define RT_DOTS_LOAD8(p) vload8(0, (p) + kk)
#define RT_DOTS_LOAD16(p) vload16(0, (p) + kk)
#define RT_DOTS_TAIL8(p) rt_vload_part(k - kk, (p) + kk).lo
#define RT_DOTS_LO8
#define RT_DOTS_LO16 .lo

/* C's entry (i, j) from its dot product: alpha*dot (+ beta*C), then, where
 * kind >= 0, column j's bias and the activation as rt_bias_act_lin gives
 * them (the dense layer's forward in one launch). */
void rt_dots_put(float dot, float alpha, float beta, global float *cp, global const float *bias,
                 ulong bj, int kind, float act_alpha)
{
    const float v = alpha * dot;
    float o = beta != 0.0f ? v + beta * *cp : v;
    if (kind >= 0) {
        const float t = o + bias[bj];
        const float neg = kind == RT_ACT_RELU ? 0.0f : kind == RT_ACT_LEAKY ? act_alpha * t : t;
        o = t > 0.0f ? t : neg;
    }
    *cp = o;
}

/* A not transposed, B transposed: dot products along k. One work-item:
 * 3 x 3 entries of C, 9 vector accumulators and 6 loads, in vectors of 8,
 * or of 16 (_v16: AVX-512) with a last step of 8 into their low halves;
 * the lanes summed in rt_hsum's fixed order. Work-item order as in
 * rt_gemm_rows. Where kind >= 0, rt_dots_put applies the bias and the
 * activation. */
#define RT_GEMM_DOTS(NAME, V)                                                               \
    kernel void NAME(int m, int n, int k, float alpha, global const float *a, ulong ao,    \
                     int lda, global const float *b, ulong bo, int ldb, float beta,        \
                     global float *c, ulong co, int ldc, int rowfast,                      \
                     global const float *bias, ulong biaso, int kind, float act_alpha)     \
    {                                                                                       \
        const int ncb = (n + 2) / 3, nrb = (m + 2) / 3;                                     \
        const ulong t = get_global_id(0);                                                   \
        if (t >= (ulong)ncb * nrb)                                                          \
            return;                                                                         \
        const int j0 = (int)(rowfast ? t / nrb : t % ncb) * 3;                              \
        const int i0 = (int)(rowfast ? t % nrb : t / ncb) * 3;                              \
        global const float *a0 = a + ao + (ulong)min(i0, m - 1) * lda;                      \
        global const float *a1 = a + ao + (ulong)min(i0 + 1, m - 1) * lda;                  \
        global const float *a2 = a + ao + (ulong)min(i0 + 2, m - 1) * lda;                  \
        global const float *b0 = b + bo + (ulong)min(j0, n - 1) * ldb;                      \
        global const float *b1 = b + bo + (ulong)min(j0 + 1, n - 1) * ldb;                  \
        global const float *b2 = b + bo + (ulong)min(j0 + 2, n - 1) * ldb;                  \
        float##V s[9];                                                                      \
        _Pragma("unroll")                                                                   \
        for (int e = 0; e < 9; e++)                                                         \
            s[e] = (float##V)0.0f;                                                          \
        int kk = 0;                                                                         \
        for (; kk + V <= k; kk += V)                                                        \
            RT_DOTS_STEP(float##V, RT_DOTS_LOAD##V, )                                       \
        if (V == 16 && kk + 8 <= k) {                                                       \
            RT_DOTS_STEP(float8, RT_DOTS_LOAD8, RT_DOTS_LO##V)                              \
            kk += 8;                                                                        \
        }                                                                                   \
        if (kk < k)                                                                         \
            RT_DOTS_STEP(float8, RT_DOTS_TAIL8, RT_DOTS_LO##V)                              \
        _Pragma("unroll")                                                                   \
        for (int e = 0; e < 9; e++) {                                                       \
            const int i = i0 + e / 3, j = j0 + e % 3;                                       \
            if (i < m && j < n)                                                             \
                rt_dots_put(rt_hsum##V(s[e]), alpha, beta, c + co + (ulong)i * ldc + j,    \
                            bias, biaso + j, kind, act_alpha);                              \
        }                                                                                   \
    }

RT_GEMM_DOTS(rt_gemm_dots, 8)
RT_GEMM_DOTS(rt_gemm_dots_v16, 16)
