/* emu.cpp — the scheduler behind emu.h: each block's RTCU_THREADS CUDA
 * threads are fibers (ucontext) on the launching thread, run one after
 * another; a fiber that reaches __syncthreads, __syncwarp or a shuffle
 * waits there until every thread of its block (its warp) has, then goes
 * on. One OS thread per CUDA thread, as this file first had, spent most
 * of test_cuda_emu's two minutes in futex calls: 257-way barriers twice a
 * block on a 2-core machine. */
#include "emu.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <ucontext.h>

thread_local emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {
constexpr unsigned kThreads = 256; /* RTCU_THREADS */
constexpr unsigned kWarps = kThreads / 32;
constexpr size_t kStack = 64 * 1024;

enum Wait { kRunnable, kBlock, kWarp };

struct Fiber {
    ucontext_t ctx;
    char *stack = nullptr;
    Wait wait = kRunnable;
    unsigned gen = 0; /* the barrier's generation it waits to see pass */
    bool done = false;
};

struct Sched {
    Fiber fiber[kThreads];
    ucontext_t main;
    const std::function<void()> *body = nullptr;
    unsigned cur = 0;
    unsigned block_arrived = 0, block_gen = 0;
    unsigned warp_arrived[kWarps] = {}, warp_gen[kWarps] = {};
    float exchange[kWarps][32];
};

Sched *sched;          /* never freed: its stacks are reused by every launch */
std::mutex launch_mtx; /* one launch at a time: the fibers share the block's statics */

void fiber_entry()
{
    (*sched->body)();
    sched->fiber[sched->cur].done = true;
    /* uc_link returns to main */
}

bool runnable(unsigned t)
{
    const Fiber &f = sched->fiber[t];
    if (f.done)
        return false;
    switch (f.wait) {
    case kBlock:
        return sched->block_gen != f.gen;
    case kWarp:
        return sched->warp_gen[t / 32] != f.gen;
    default:
        return true;
    }
}

/* Arrive at a barrier of `count` threads (arrived, gen: its state); the
 * last to arrive releases the others and goes on at once. */
void arrive(unsigned &arrived, unsigned &gen, unsigned count, Wait kind)
{
    if (++arrived == count) {
        arrived = 0;
        gen++;
        return;
    }
    Fiber &f = sched->fiber[sched->cur];
    f.wait = kind;
    f.gen = gen;
    swapcontext(&f.ctx, &sched->main);
}

void run_block()
{
    for (unsigned t = 0; t < kThreads; t++) {
        Fiber &f = sched->fiber[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = kStack;
        f.ctx.uc_link = &sched->main;
        makecontext(&f.ctx, fiber_entry, 0);
        f.wait = kRunnable;
        f.done = false;
    }
    unsigned left = kThreads;
    while (left > 0) {
        bool ran = false;
        for (unsigned t = 0; t < kThreads; t++) {
            Fiber &f = sched->fiber[t];
            if (!runnable(t))
                continue;
            sched->cur = t;
            threadIdx = {t, 0, 0};
            f.wait = kRunnable;
            swapcontext(&sched->main, &f.ctx);
            ran = true;
            left -= f.done;
        }
        if (!ran) {
            fprintf(stderr, "cuda-emu: block %u of %u: every thread left waits at a barrier that "
                            "not all threads reach\n", blockIdx.x, gridDim.x);
            abort();
        }
    }
}
} // namespace

void emu_syncthreads() { arrive(sched->block_arrived, sched->block_gen, kThreads, kBlock); }

void emu_syncwarp()
{
    const unsigned w = threadIdx.x / 32;
    arrive(sched->warp_arrived[w], sched->warp_gen[w], 32, kWarp);
}

/* Every lane of the warp posts its value, then reads its partner's; the
 * second barrier keeps a fast lane from overwriting before all have read. */
float emu_shfl(float v, int src_lane)
{
    const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
    sched->exchange[w][l] = v;
    emu_syncwarp();
    const float r = sched->exchange[w][src_lane & 31];
    emu_syncwarp();
    return r;
}

float emu_shfl_xor(float v, int lane_mask) { return emu_shfl(v, (int)(threadIdx.x % 32) ^ lane_mask); }

void emu_run(unsigned grid, unsigned block, std::function<void()> body)
{
    if (block != kThreads) {
        fprintf(stderr, "cuda-emu: blocks of %u threads, the emulation runs %u\n", block, kThreads);
        abort();
    }
    std::lock_guard<std::mutex> lock(launch_mtx);
    if (!sched) {
        sched = new Sched;
        for (Fiber &f : sched->fiber)
            f.stack = static_cast<char *>(malloc(kStack));
    }
    sched->body = &body;
    blockDim = {kThreads, 1, 1};
    gridDim = {grid, 1, 1};
    for (unsigned b = 0; b < grid; b++) {
        blockIdx = {b, 0, 0};
        run_block();
    }
}
