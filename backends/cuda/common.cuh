/* common.cuh — what the cuda backend's .cu files share: launch shapes,
 * the grid-stride loop and the block reduction. */
#ifndef RT_CUDA_COMMON_CUH
#define RT_CUDA_COMMON_CUH

#include <stdint.h>

#include "kernels.h"

/* Blocks for n elements, one thread each, capped: the kernels loop over a
 * grid stride, so a capped grid still covers every element. */
static inline unsigned rtcu_grid(size_t n)
{
    size_t g = (n + RTCU_THREADS - 1) / RTCU_THREADS;
    if (g == 0)
        g = 1;
    return g > (1u << 20) ? (1u << 20) : (unsigned)g;
}

#define RTCU_FOR_EACH(i, n)                                                                  \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);          \
         i += (size_t)gridDim.x * blockDim.x)

/* Launch `kernel` over n elements on stream st and return the launch status. */
#define RTCU_LAUNCH_N(kernel, st, n, ...)                                                    \
    do {                                                                                     \
        if ((n) == 0)                                                                        \
            return cudaSuccess;                                                              \
        kernel<<<rtcu_grid(n), RTCU_THREADS, 0, (st)>>>(__VA_ARGS__);                        \
        return cudaGetLastError();                                                           \
    } while (0)

/* Sum of one value per thread of a block of RTCU_THREADS threads, returned
 * to every thread: a fixed tree in shared memory, so the result does not
 * depend on scheduling. `scratch` holds RTCU_THREADS values; the trailing
 * barrier lets the caller reuse it at once. */
__device__ static inline double rtcu_block_sum(double *scratch, double v)
{
    const unsigned t = threadIdx.x;
    scratch[t] = v;
    __syncthreads();
    for (unsigned s = RTCU_THREADS / 2; s > 0; s >>= 1) {
        if (t < s)
            scratch[t] += scratch[t + s];
        __syncthreads();
    }
    const double r = scratch[0];
    __syncthreads();
    return r;
}

#endif
