/* floatsum.c — elementwise sums (see floatsum.h). */
#include "config.h"

#include "floatsum.h"

#include <stdalign.h>
#include <stdlib.h> /* glibc's __GLIBC__, for the test below */

/* One clone per x86-64 ISA level where the compiler and libc can pick at
 * load time (ifunc); elsewhere the loops as the build compiles them. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute) && \
    !defined(__clang__) && __GNUC__ >= 11
#if __has_attribute(target_clones)
#define SUM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef SUM_CLONES
#define SUM_CLONES
#endif
#ifdef _OPENMP
#define SUM_SIMD _Pragma("omp simd")
#else
#define SUM_SIMD
#endif

SUM_CLONES
void rt_f32_add(float *restrict d, const float *restrict s, size_t n)
{
    SUM_SIMD
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

SUM_CLONES
void rt_f64_add(double *restrict d, const double *restrict s, size_t n)
{
    SUM_SIMD
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

/* Two sources (the common host of two workers) straight into d; more go
 * through a block in L1, since d may be any of them. */
SUM_CLONES
void rt_f32_sum_sources(float *d, const float *const *src, int nsrc, size_t n)
{
    if (nsrc == 1) {
        if (d != src[0])
            for (size_t i = 0; i < n; i++)
                d[i] = src[0][i];
        return;
    }
    enum { BLOCK = 1024 };
    alignas(64) float acc[BLOCK];
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t m = n - b < BLOCK ? n - b : BLOCK;
        float *db = d + b;
        const float *s0 = src[0] + b, *s1 = src[1] + b;
        if (nsrc == 2) { /* same-index reads before the write: d may be s0 or s1 */
            SUM_SIMD
            for (size_t i = 0; i < m; i++)
                db[i] = s0[i] + s1[i];
            continue;
        }
        SUM_SIMD
        for (size_t i = 0; i < m; i++)
            acc[i] = s0[i] + s1[i];
        for (int r = 2; r < nsrc; r++) {
            const float *sr = src[r] + b;
            SUM_SIMD
            for (size_t i = 0; i < m; i++)
                acc[i] += sr[i];
        }
        SUM_SIMD
        for (size_t i = 0; i < m; i++)
            db[i] = acc[i];
    }
}
