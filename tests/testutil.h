/* testutil.h — small helpers shared by ragtag's cmocka tests. */
#ifndef RT_TESTUTIL_H
#define RT_TESTUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rng.h"

/* Fill with uniform values in [lo, hi) from a seeded stream. */
static inline void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    rt_rng r;
    rt_rng_seed(&r, seed, 0x7e57);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)rt_rng_uniform(&r);
}

/* Largest |a-b| / max(|b|, floor) over n elements. */
static inline double tu_max_rel_err(const float *a, const float *b, size_t n, double floor_)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs((double)b[i]);
        if (den < floor_)
            den = floor_;
        double e = fabs((double)a[i] - (double)b[i]) / den;
        if (!(e <= worst)) /* catches NaN */
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* A fresh temporary directory (removed by the OS's tmp cleaning). */
static inline const char *tu_tmpdir(void)
{
    static char dir[256];
    snprintf(dir, sizeof dir, "/tmp/ragtag-test-XXXXXX");
    if (!mkdtemp(dir))
        fail_msg("mkdtemp failed");
    return dir;
}

/* Skip a whole test program (automake's SKIP status). */
#define TU_SKIP_PROGRAM(...)                                                   \
    do {                                                                       \
        printf("SKIP: " __VA_ARGS__);                                          \
        printf("\n");                                                          \
        exit(77);                                                              \
    } while (0)

/* Skip the program when Fashion-MNIST (Debian's dataset-fashion-mnist, or
 * RAGTAG_DATA_DIR) is not there: the tests that train need real data. */
#define TU_NEED_FASHION_MNIST()                                                \
    do {                                                                       \
        if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", \
                   F_OK) != 0 && !getenv("RAGTAG_DATA_DIR"))                   \
            TU_SKIP_PROGRAM("Fashion-MNIST not installed (apt-get install "    \
                            "dataset-fashion-mnist)");                         \
    } while (0)

#endif
