/* kernels-conv.cu — the batched im2col / col2im of the cuda backend's
 * convolution without cuDNN (conv.c: RAGTAG_CUDA_CUDNN=0, or a shape cuDNN
 * refuses), and the two permutations between image-major and
 * channel-major layouts. The layout is the opencl backend's (kernels.h);
 * here every kernel gives one element to each thread. */
#include "common.cuh"

/* col[row][ni][oy][ox], row = (ch*r + i)*s + j */
__global__ static void k_im2col(struct rtcu_conv g, int nb, const float *x, float *col)
{
    const size_t total = (size_t)g.c * g.r * g.s * nb * g.oh * g.ow;
    RTCU_FOR_EACH(t, total)
    {
        const int ox = (int)(t % g.ow);
        size_t u = t / g.ow;
        const int oy = (int)(u % g.oh);
        u /= g.oh;
        const int ni = (int)(u % nb), row = (int)(u / nb);
        const int ch = row / (g.r * g.s), rs = row % (g.r * g.s), i = rs / g.s, j = rs % g.s;
        const int iy = oy * g.sh - g.ph + i, ix = ox * g.sw - g.pw + j;
        col[t] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                     ? x[(((size_t)ni * g.c + ch) * g.h + iy) * g.w + ix]
                     : 0.0f;
    }
}

/* dx[ni][ch][iy][ix] = the sum of the column entries im2col copied from it,
 * walked in (i, j) order — the order of the cpu backend's col2im, so the
 * sums agree. Overwrites dx. */
__global__ static void k_col2im(struct rtcu_conv g, int nb, const float *col, float *dx)
{
    const size_t total = (size_t)nb * g.c * g.h * g.w;
    const size_t np = (size_t)nb * g.oh * g.ow;
    RTCU_FOR_EACH(t, total)
    {
        const int ix = (int)(t % g.w);
        size_t u = t / g.w;
        const int iy = (int)(u % g.h);
        u /= g.h;
        const int ch = (int)(u % g.c), ni = (int)(u / g.c);
        const float *cb = col + (size_t)ch * g.r * g.s * np + (size_t)ni * g.oh * g.ow;
        /* outputs oy with 0 <= iy + ph - oy*sh < r, highest first (i rising) */
        const int ty = iy + g.ph, tx = ix + g.pw;
        const int oy_hi = min(ty / g.sh, g.oh - 1), oy_lo = ty < g.r ? 0 : (ty - g.r) / g.sh + 1;
        const int ox_hi = min(tx / g.sw, g.ow - 1), ox_lo = tx < g.s ? 0 : (tx - g.s) / g.sw + 1;
        float acc = 0.0f;
        for (int oy = oy_hi; oy >= oy_lo; oy--) {
            const int i = ty - oy * g.sh;
            for (int ox = ox_hi; ox >= ox_lo; ox--) {
                const int j = tx - ox * g.sw;
                acc += cb[((size_t)i * g.s + j) * np + (size_t)oy * g.ow + ox];
            }
        }
        dx[t] = acc;
    }
}

/* dst[kk][ni*p + i] = src[ni][kk][i] */
__global__ static void k_nkp_to_knp(int nb, int k, int p, const float *src, float *dst)
{
    RTCU_FOR_EACH(t, (size_t)nb * k * p)
    {
        const int i = (int)(t % p);
        const size_t u = t / p;
        const int kk = (int)(u % k), ni = (int)(u / k);
        dst[((size_t)kk * nb + ni) * p + i] = src[t];
    }
}

/* dst[ni][kk][i] = src[kk][ni*p + i] */
__global__ static void k_knp_to_nkp(int nb, int k, int p, const float *src, float *dst)
{
    RTCU_FOR_EACH(t, (size_t)nb * k * p)
    {
        const int i = (int)(t % p);
        const size_t u = t / p;
        const int kk = (int)(u % k), ni = (int)(u / k);
        dst[t] = src[((size_t)kk * nb + ni) * p + i];
    }
}

extern "C" cudaError_t rtcu_im2col(cudaStream_t st, const struct rtcu_conv *g, int nb,
                                   const float *x, float *col)
{
    const size_t total = (size_t)g->c * g->r * g->s * nb * g->oh * g->ow;
    RTCU_LAUNCH_N(k_im2col, st, total, *g, nb, x, col);
}

extern "C" cudaError_t rtcu_col2im(cudaStream_t st, const struct rtcu_conv *g, int nb,
                                   const float *col, float *dx)
{
    const size_t total = (size_t)nb * g->c * g->h * g->w;
    RTCU_LAUNCH_N(k_col2im, st, total, *g, nb, col, dx);
}

extern "C" cudaError_t rtcu_nkp_to_knp(cudaStream_t st, int nb, int k, int p, const float *src,
                                       float *dst)
{
    const size_t total = (size_t)nb * k * p;
    RTCU_LAUNCH_N(k_nkp_to_knp, st, total, nb, k, p, src, dst);
}

extern "C" cudaError_t rtcu_knp_to_nkp(cudaStream_t st, int nb, int k, int p, const float *src,
                                       float *dst)
{
    const size_t total = (size_t)nb * k * p;
    RTCU_LAUNCH_N(k_knp_to_nkp, st, total, nb, k, p, src, dst);
}
