/* emu.h — the CUDA execution model on the CPU, enough of it to run the cuda
 * backend's own kernels (backends/cuda/kernels-*.cu) as C++ without a GPU
 * (tests/test_cuda_emu.sh). Each launch runs its blocks one after another,
 * a block's RTCU_THREADS CUDA threads as fibers on the launching thread
 * (emu.cpp), so __syncthreads and warp shuffles are real barriers (a fiber
 * waits there until all of its block or warp have come), and __shared__
 * memory is a static shared by the block running now. Kernel launches are
 * rewritten from kernel<<<grid, block, shmem, stream>>>(args) to
 * emu_launch(kernel, grid, block, shmem, stream, args) before compiling.
 * What this proves is the kernels' indexing and arithmetic; what it cannot
 * is anything about a GPU (timing, memory model, device math libraries). */
#pragma once
#include <functional>
#include <math.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __shared__ static

struct emu_dim3 {
    unsigned x, y, z;
};
extern thread_local emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

void emu_syncthreads();
void emu_syncwarp();
float emu_shfl(float v, int src_lane);
float emu_shfl_xor(float v, int lane_mask);
#define __syncthreads() emu_syncthreads()
#define __syncwarp() emu_syncwarp()
#define __shfl_sync(mask, v, src) emu_shfl((v), (src))
#define __shfl_xor_sync(mask, v, o) emu_shfl_xor((v), (o))

static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }

static inline unsigned atomicMin(uint32_t *p, uint32_t v)
{
    uint32_t old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < old &&
           !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}

void emu_run(unsigned grid, unsigned block, std::function<void()> body);

template <typename... P, typename... A>
void emu_launch(void (*kernel)(P...), unsigned grid, unsigned block, size_t, cudaStream_t, A... args)
{
    emu_run(grid, block, [=] { kernel(args...); });
}
