/* kernels-nn.cu — bias, pooling, softmax + cross-entropy and batch norm
 * (maths in backends/backend.h). Per-channel sums run one block per channel
 * with a fixed tree (rtcu_block_sum); pooling and softmax give each output
 * to one thread or warp. No kernel adds into memory with atomics, so
 * results do not depend on scheduling. The cuda backend uses cuDNN for
 * average pooling and batch norm where cuDNN's maths is backend.h's
 * (nn.c); these kernels do the rest, and everything when cuDNN is off. */
#include "common.cuh"

#include <math.h>

/* ---- bias ----------------------------------------------------------------------- */

__global__ static void k_bias_add(size_t total, int c, int hw, const float *b, float *y)
{
    RTCU_FOR_EACH(i, total)
    y[i] += b[(i / hw) % c];
}

/* Sum of channel j's n*hw values of x, by one block: planes of at least a
 * block's width run division-free. */
__device__ static double channel_sum(double *scratch, const float *x, int n, int c, int hw, int j)
{
    double s = 0.0;
    if (hw >= RTCU_THREADS) {
        for (int i = 0; i < n; i++) {
            const float *p = x + ((size_t)i * c + j) * hw;
            for (int k = threadIdx.x; k < hw; k += RTCU_THREADS)
                s += p[k];
        }
    } else {
        const size_t cnt = (size_t)n * hw;
        for (size_t t = threadIdx.x; t < cnt; t += RTCU_THREADS)
            s += x[((t / hw) * c + j) * hw + t % hw];
    }
    return rtcu_block_sum(scratch, s);
}

/* The index of element t of channel j's n*hw values. */
#define CH_INDEX(t, j) ((((t) / hw) * c + (j)) * hw + (t) % hw)

__global__ static void k_bias_grad(int n, int c, int hw, const float *dy, float *db)
{
    __shared__ double scratch[RTCU_THREADS];
    const int j = blockIdx.x;
    const double s = channel_sum(scratch, dy, n, c, hw, j);
    if (threadIdx.x == 0)
        db[j] = (float)s;
}

/* ---- pooling -------------------------------------------------------------------- */

/* Index in the plane of the window's FIRST maximal element, row-major,
 * strict '>': the tie rule of backend.h. cuDNN documents no tie rule for
 * its max pooling backward, so max pooling always runs here. */
__device__ static int pool_argmax(const float *x, int w, int h0, int h1, int w0, int w1)
{
    int best = h0 * w + w0;
    float bv = x[best];
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
            const float v = x[ih * w + iw];
            if (v > bv) {
                bv = v;
                best = ih * w + iw;
            }
        }
    return best;
}

/* One thread per output element. Average: the window's sum in row-major
 * order times 1/(r*s), as the cpu backend computes it. */
__global__ static void k_pool_fwd(struct rtcu_pool p, const float *x, float *y)
{
    const size_t total = (size_t)p.n * p.c * p.oh * p.ow;
    const float inv_area = 1.0f / (float)(p.r * p.s);
    RTCU_FOR_EACH(t, total)
    {
        const int ox = (int)(t % p.ow);
        const size_t u = t / p.ow;
        const int oy = (int)(u % p.oh);
        const size_t plane = u / p.oh;
        const float *xp = x + plane * p.h * p.w;
        const int hs = oy * p.sh - p.ph, ws = ox * p.sw - p.pw;
        const int h0 = max(hs, 0), h1 = min(hs + p.r, p.h), w0 = max(ws, 0), w1 = min(ws + p.s, p.w);
        float v;
        if (p.max) {
            v = xp[pool_argmax(xp, p.w, h0, h1, w0, w1)];
        } else {
            float sum = 0.0f;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++)
                    sum += xp[ih * p.w + iw];
            v = sum * inv_area;
        }
        y[t] = v;
    }
}

/* One thread per input element, gathering from the windows that contain
 * it in (oy, ox) order — the order in which the cpu backend adds into dx,
 * so the sums agree. Max finds each window's arg-max again from x. */
__global__ static void k_pool_bwd(struct rtcu_pool p, const float *x, const float *dy, float *dx)
{
    const size_t total = (size_t)p.n * p.c * p.h * p.w;
    const float inv_area = 1.0f / (float)(p.r * p.s);
    RTCU_FOR_EACH(t, total)
    {
        const int ix = (int)(t % p.w);
        const size_t u = t / p.w;
        const int iy = (int)(u % p.h);
        const size_t plane = u / p.h;
        const float *xp = x + plane * p.h * p.w;
        const float *g = dy + plane * p.oh * p.ow;
        const int e = iy * p.w + ix;
        /* windows oy with oy*sh - ph <= iy < oy*sh - ph + r, likewise ox */
        const int ty = iy + p.ph - p.r + 1, tx = ix + p.pw - p.s + 1;
        const int oy0 = ty > 0 ? (ty + p.sh - 1) / p.sh : 0, oy1 = min((iy + p.ph) / p.sh, p.oh - 1);
        const int ox0 = tx > 0 ? (tx + p.sw - 1) / p.sw : 0, ox1 = min((ix + p.pw) / p.sw, p.ow - 1);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++) {
            const int hs = oy * p.sh - p.ph, h0 = max(hs, 0), h1 = min(hs + p.r, p.h);
            for (int ox = ox0; ox <= ox1; ox++) {
                const float gv = g[oy * p.ow + ox];
                if (p.max) {
                    const int ws = ox * p.sw - p.pw;
                    if (pool_argmax(xp, p.w, h0, h1, max(ws, 0), min(ws + p.s, p.w)) == e)
                        acc += gv;
                } else {
                    acc += gv * inv_area;
                }
            }
        }
        dx[t] = acc;
    }
}

/* ---- softmax + cross-entropy ------------------------------------------------------ */

/* One warp per row (blocks of RTCU_THREADS/32 rows): a row of 10 classes
 * or of 1000 is read once, its max is a butterfly across the warp (exact in
 * any order), its exponentials are computed by all lanes. The sum, though,
 * is added by one lane in class order, as the cpu backend adds it: a loss
 * near 0 is -log of a probability near 1, where one ulp of the probability
 * (6e-8) is already more than the conformance test allows, so the
 * probabilities must round as the cpu's do. Exponentials are taken in
 * double and rounded once (glibc's expf is correctly rounded but for rare
 * ties; CUDA's expf is within 2 ulp), for the same reason. */
#define ROWS_PER_BLOCK (RTCU_THREADS / 32)

__device__ static inline float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ static inline float exp_rounded(float x) { return (float)exp((double)x); }

__global__ static void k_softmax_xent_fwd(int n, int c, const float *logits, const int32_t *labels,
                                          float *probs, float *losses, uint32_t *bad)
{
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= (size_t)n)
        return; /* whole warps: every lane of a warp has the same row */
    const float *l = logits + row * c;
    float *p = probs + row * c;
    float m = -INFINITY;
    for (int j = lane; j < c; j += 32)
        m = l[j] > m ? l[j] : m;
    m = warp_max(m);
    for (int j = lane; j < c; j += 32)
        p[j] = exp_rounded(l[j] - m);
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
        for (int j = 0; j < c; j++)
            sum += p[j];
    const float inv = 1.0f / __shfl_sync(0xffffffffu, sum, 0);
    for (int j = lane; j < c; j += 32)
        p[j] *= inv;
    if (lane != 0)
        return;
    const int32_t lab = labels[row];
    if (lab < 0 || lab >= c) {
        atomicMin(bad, (uint32_t)row);
        losses[row] = NAN;
        return;
    }
    /* p[lab] as its lane computed it, without waiting for that lane's store */
    const float pl = exp_rounded(l[lab] - m) * inv;
    losses[row] = -logf(pl > 1e-30f ? pl : 1e-30f);
}

__global__ static void k_softmax_xent_bwd(int n, int c, float scale, const float *probs,
                                          const int32_t *labels, float *dl, uint32_t *bad)
{
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= (size_t)n)
        return;
    const float *p = probs + row * c;
    float *g = dl + row * c;
    const int32_t lab = labels[row];
    if (lane == 0 && (lab < 0 || lab >= c))
        atomicMin(bad, (uint32_t)row);
    for (int j = lane; j < c; j += 32)
        g[j] = scale * (p[j] - (j == lab ? 1.0f : 0.0f));
}

/* ---- batch norm ------------------------------------------------------------------- */

/* One block per channel: the mean, then the sum of squared deviations (two
 * passes, like the cpu backend, so a large mean does not eat the
 * variance), in double; then y; thread 0 updates the statistics. */
__global__ static void k_bn_fwd_train(int n, int c, int hw, float eps, float mom, const float *x,
                                      const float *gamma, const float *beta, float *y,
                                      float *save_mean, float *save_invstd, float *run_mean,
                                      float *run_var)
{
    __shared__ double scratch[RTCU_THREADS];
    const int j = blockIdx.x;
    const size_t cnt = (size_t)n * hw;
    const double mean = channel_sum(scratch, x, n, c, hw, j) / (double)cnt;
    double q = 0.0;
    for (size_t t = threadIdx.x; t < cnt; t += RTCU_THREADS) {
        const double e = x[CH_INDEX(t, j)] - mean;
        q += e * e;
    }
    const double sq = rtcu_block_sum(scratch, q);
    const double var = sq / (double)cnt;
    /* One value per channel has no unbiased variance: use the biased one. */
    const double uvar = cnt > 1 ? sq / (double)(cnt - 1) : var;
    const float invstd = (float)(1.0 / sqrt(var + (double)eps));
    const float fm = (float)mean, a = gamma[j] * invstd, b = beta[j];
    for (size_t t = threadIdx.x; t < cnt; t += RTCU_THREADS) {
        const size_t k = CH_INDEX(t, j);
        y[k] = a * (x[k] - fm) + b;
    }
    if (threadIdx.x == 0) {
        save_mean[j] = fm;
        save_invstd[j] = invstd;
        run_mean[j] = (1.0f - mom) * run_mean[j] + mom * fm;
        run_var[j] = (1.0f - mom) * run_var[j] + mom * (float)uvar;
    }
}

__global__ static void k_bn_fwd_infer(size_t total, int c, int hw, float eps, const float *x,
                                      const float *gamma, const float *beta,
                                      const float *run_mean, const float *run_var, float *y)
{
    RTCU_FOR_EACH(i, total)
    {
        const int j = (int)((i / hw) % c);
        const float invstd = 1.0f / sqrtf(run_var[j] + eps);
        const float a = gamma[j] * invstd;
        y[i] = a * (x[i] - run_mean[j]) + beta[j];
    }
}

/* dbeta = sum dy, dgamma = sum dy*xhat,
 * dx = gamma*invstd * (dy - dbeta/M - xhat*dgamma/M), M = n*hw. */
__global__ static void k_bn_bwd(int n, int c, int hw, const float *x, const float *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, float *dx, float *dgamma, float *dbeta)
{
    __shared__ double scratch[RTCU_THREADS];
    const int j = blockIdx.x;
    const size_t cnt = (size_t)n * hw;
    const float mean = save_mean[j], invstd = save_invstd[j];
    double sdy = 0.0, sdyx = 0.0;
    for (size_t t = threadIdx.x; t < cnt; t += RTCU_THREADS) {
        const size_t k = CH_INDEX(t, j);
        sdy += dy[k];
        sdyx += (double)dy[k] * ((x[k] - mean) * invstd);
    }
    const float db = (float)rtcu_block_sum(scratch, sdy);
    const float dg = (float)rtcu_block_sum(scratch, sdyx);
    const float k1 = gamma[j] * invstd, mdb = db / (float)cnt, mdg = dg / (float)cnt;
    for (size_t t = threadIdx.x; t < cnt; t += RTCU_THREADS) {
        const size_t k = CH_INDEX(t, j);
        const float xhat = (x[k] - mean) * invstd;
        dx[k] = k1 * (dy[k] - mdb - xhat * mdg);
    }
    if (threadIdx.x == 0) {
        dgamma[j] = dg;
        dbeta[j] = db;
    }
}

/* ---- launchers -------------------------------------------------------------------- */

extern "C" cudaError_t rtcu_bias_add(cudaStream_t st, int n, int c, int hw, const float *b,
                                     float *y)
{
    const size_t total = (size_t)n * c * hw;
    RTCU_LAUNCH_N(k_bias_add, st, total, total, c, hw, b, y);
}

extern "C" cudaError_t rtcu_bias_grad(cudaStream_t st, int n, int c, int hw, const float *dy,
                                      float *db)
{
    if (c <= 0)
        return cudaSuccess;
    k_bias_grad<<<c, RTCU_THREADS, 0, st>>>(n, c, hw, dy, db);
    return cudaGetLastError();
}

extern "C" cudaError_t rtcu_pool_fwd(cudaStream_t st, const struct rtcu_pool *p, const float *x,
                                     float *y)
{
    const size_t total = (size_t)p->n * p->c * p->oh * p->ow;
    RTCU_LAUNCH_N(k_pool_fwd, st, total, *p, x, y);
}

extern "C" cudaError_t rtcu_pool_bwd(cudaStream_t st, const struct rtcu_pool *p, const float *x,
                                     const float *dy, float *dx)
{
    const size_t total = (size_t)p->n * p->c * p->h * p->w;
    RTCU_LAUNCH_N(k_pool_bwd, st, total, *p, x, dy, dx);
}

static unsigned row_blocks(int n) { return (unsigned)(((size_t)n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

extern "C" cudaError_t rtcu_softmax_xent_fwd(cudaStream_t st, int n, int c, const float *logits,
                                             const int32_t *labels, float *probs, float *losses,
                                             uint32_t *bad)
{
    if (n <= 0)
        return cudaSuccess;
    k_softmax_xent_fwd<<<row_blocks(n), RTCU_THREADS, 0, st>>>(n, c, logits, labels, probs,
                                                                losses, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t rtcu_softmax_xent_bwd(cudaStream_t st, int n, int c, float scale,
                                             const float *probs, const int32_t *labels,
                                             float *dlogits, uint32_t *bad)
{
    if (n <= 0)
        return cudaSuccess;
    k_softmax_xent_bwd<<<row_blocks(n), RTCU_THREADS, 0, st>>>(n, c, scale, probs, labels,
                                                                dlogits, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t rtcu_bn_fwd_train(cudaStream_t st, int n, int c, int hw, float eps,
                                         float mom, const float *x, const float *gamma,
                                         const float *beta, float *y, float *save_mean,
                                         float *save_invstd, float *run_mean, float *run_var)
{
    if (c <= 0)
        return cudaSuccess;
    k_bn_fwd_train<<<c, RTCU_THREADS, 0, st>>>(n, c, hw, eps, mom, x, gamma, beta, y, save_mean,
                                                save_invstd, run_mean, run_var);
    return cudaGetLastError();
}

extern "C" cudaError_t rtcu_bn_fwd_infer(cudaStream_t st, int n, int c, int hw, float eps,
                                         const float *x, const float *gamma, const float *beta,
                                         const float *run_mean, const float *run_var, float *y)
{
    const size_t total = (size_t)n * c * hw;
    RTCU_LAUNCH_N(k_bn_fwd_infer, st, total, total, c, hw, eps, x, gamma, beta, run_mean, run_var,
                  y);
}

extern "C" cudaError_t rtcu_bn_bwd(cudaStream_t st, int n, int c, int hw, const float *x,
                                   const float *dy, const float *gamma, const float *save_mean,
                                   const float *save_invstd, float *dx, float *dgamma,
                                   float *dbeta)
{
    if (c <= 0)
        return cudaSuccess;
    k_bn_bwd<<<c, RTCU_THREADS, 0, st>>>(n, c, hw, x, dy, gamma, save_mean, save_invstd, dx,
                                          dgamma, dbeta);
    return cudaGetLastError();
}
