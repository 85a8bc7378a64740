/* blas_core.c — the OpenBLAS core this CPU should run, when OpenBLAS picks
 * one below it.
 *
 * Why: OpenBLAS chooses its kernels by the CPU models it knows. Debian 12's
 * 0.3.21 takes a CPU newer than itself (an Emerald Rapids Xeon, family 6
 * model 207) for a Prescott and runs SSE3 kernels on an AVX-512 machine:
 * there seedcnn trained at 2,250 img/s on one thread, 3,390 with
 * Cooperlake's kernels, lenet 17,400 against 23,500 (and ragtag's own
 * AVX-512 kernels, which follow the BLAS's core, stayed off). OpenBLAS reads
 * OPENBLAS_CORETYPE once, as it loads, before main; so the program asks
 * here which core to name, names it and runs itself again (app/main.c,
 * bench/bench_ops.c, bench/bench_backends.c).
 * Only a core OpenBLAS is known to pick below the CPU's features is raised,
 * to the one OpenBLAS itself gives CPUs it knows with those features: a
 * core the user names stays, and so does any name this table does not know
 * (a newer OpenBLAS's). */
#include "config.h"

#include <stdlib.h>
#include <strings.h>

#include "backend.h"
#include "cpu-blas.h"
#include "cpu-impl.h"

/* OpenBLAS's x86-64 cores by the widest kernels they run: 0 SSE or AVX
 * without FMA, 1 AVX2 and FMA, 2 AVX-512, 3 AVX-512 with BF16. */
static const struct {
    const char *core;
    int width;
} cores[] = {
    {"katmai", 0},     {"coppermine", 0},   {"northwood", 0},   {"prescott", 0},
    {"banias", 0},     {"atom", 0},         {"core2", 0},       {"penryn", 0},
    {"dunnington", 0}, {"nehalem", 0},      {"sandybridge", 0}, {"athlon", 0},
    {"opteron", 0},    {"opteron_sse3", 0}, {"barcelona", 0},   {"bobcat", 0},
    {"bulldozer", 0},  {"piledriver", 0},   {"steamroller", 0}, {"nano", 0},
    {"excavator", 1},  {"haswell", 1},      {"zen", 1},         {"skylakex", 2},
    {"cooperlake", 3}, {"sapphirerapids", 3},
};
/* The core OpenBLAS gives a CPU of each width. */
static const char *const core_for_width[] = {NULL, "Haswell", "SkylakeX", "Cooperlake"};

int cpu_blas_core_width(const char *core)
{
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i].core))
            return cores[i].width;
    return -1;
}

int cpu_blas_cpu_width(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init(); /* libgcc checks that the OS saves the wide registers too */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd"))
        return __builtin_cpu_supports("avx512bf16") ? 3 : 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 1;
#endif
    return 0;
}

const char *cpu_blas_core_raised(const char *core, int cpu_width)
{
    int w = cpu_blas_core_width(core);
    if (w < 0 || cpu_width <= w || cpu_width > 3)
        return NULL;
    return core_for_width[cpu_width];
}

const char *rt_cpu_blas_core_wanted(const char **picked)
{
#if defined(RT_HAVE_CBLAS) && !defined(RT_BLAS_BLIS)
    if (getenv("OPENBLAS_CORETYPE"))
        return NULL;
    *picked = openblas_get_corename();
    return cpu_blas_core_raised(*picked, cpu_blas_cpu_width());
#else
    (void)picked;
    return NULL;
#endif
}

bool rt_cpu_blas_core_setenv(void)
{
    const char *picked = NULL, *core = rt_cpu_blas_core_wanted(&picked);
    return core && setenv("RAGTAG_BLAS_CORE_FROM", picked, 1) == 0 &&
           setenv("OPENBLAS_CORETYPE", core, 1) == 0;
}
