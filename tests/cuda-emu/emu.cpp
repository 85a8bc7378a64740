/* emu.cpp — the thread pool behind emu.h: RTCU_THREADS threads, one block
 * at a time, barriers for __syncthreads and per warp for the shuffles. */
#include "emu.h"

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <thread>

thread_local emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {
constexpr unsigned kThreads = 256; /* RTCU_THREADS */
constexpr unsigned kWarps = kThreads / 32;

struct Pool {
    std::barrier<> start{kThreads + 1}, done{kThreads + 1}, block{kThreads};
    std::barrier<> *warp[kWarps];
    float exchange[kWarps][32];
    std::function<void()> body;
    unsigned bx = 0, gx = 0;

    Pool()
    {
        for (unsigned w = 0; w < kWarps; w++)
            warp[w] = new std::barrier<>(32);
        for (unsigned t = 0; t < kThreads; t++)
            std::thread([this, t] {
                threadIdx = {t, 0, 0};
                blockDim = {kThreads, 1, 1};
                for (;;) {
                    start.arrive_and_wait();
                    blockIdx = {bx, 0, 0};
                    gridDim = {gx, 1, 1};
                    body();
                    done.arrive_and_wait();
                }
            }).detach();
    }
};

Pool *pool; /* never destroyed: its threads wait out the process */
} // namespace

void emu_syncthreads() { pool->block.arrive_and_wait(); }

void emu_syncwarp() { pool->warp[threadIdx.x / 32]->arrive_and_wait(); }

/* Every lane of the warp posts its value, then reads its partner's; the
 * second barrier keeps a fast lane from overwriting before all have read. */
float emu_shfl(float v, int src_lane)
{
    const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
    pool->exchange[w][l] = v;
    pool->warp[w]->arrive_and_wait();
    const float r = pool->exchange[w][src_lane & 31];
    pool->warp[w]->arrive_and_wait();
    return r;
}

float emu_shfl_xor(float v, int lane_mask) { return emu_shfl(v, (int)(threadIdx.x % 32) ^ lane_mask); }

void emu_run(unsigned grid, unsigned block, std::function<void()> body)
{
    if (block != kThreads) {
        fprintf(stderr, "cuda-emu: blocks of %u threads, the emulation runs %u\n", block, kThreads);
        abort();
    }
    if (!pool)
        pool = new Pool;
    pool->body = std::move(body);
    pool->gx = grid;
    for (unsigned b = 0; b < grid; b++) {
        pool->bx = b;
        pool->start.arrive_and_wait();
        pool->done.arrive_and_wait();
    }
}
