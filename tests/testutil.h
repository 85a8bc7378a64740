/* testutil.h — small helpers shared by ragtag's cmocka tests. */
#ifndef RT_TESTUTIL_H
#define RT_TESTUTIL_H

#include <math.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>
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

/* path and everything under it (links not followed). */
/* Pin this process (and what it forks) to the first core it may use; *all
 * gets the cores it had, for tu_unpin. A machine with more of a
 * collective's processes than cores ("crowded") on any machine. */
static inline void tu_pin_one_core(cpu_set_t *all)
{
    assert_int_equal(sched_getaffinity(0, sizeof *all, all), 0);
    int first = 0;
    while (!CPU_ISSET(first, all))
        first++;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
}

static inline void tu_unpin(const cpu_set_t *all)
{
    assert_int_equal(sched_setaffinity(0, sizeof *all, all), 0);
}

static inline void tu_rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[1024];
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) < (int)sizeof sub)
                tu_rm_tree(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* The directories tu_tmpdir made, removed when the test program exits
 * (not by a forked child's exit: the parent still uses them), unless
 * RAGTAG_KEEP_TMP is set: a developer's make check left about twenty in
 * /tmp a run. */
static char tu_tmpdirs[64][32];
static int tu_ntmpdirs;
static pid_t tu_tmp_owner;

static inline void tu_tmpdirs_remove(void)
{
    if (getpid() != tu_tmp_owner || getenv("RAGTAG_KEEP_TMP"))
        return;
    for (int i = 0; i < tu_ntmpdirs; i++)
        tu_rm_tree(tu_tmpdirs[i]);
}

/* A fresh temporary directory, removed at exit (above). */
static inline const char *tu_tmpdir(void)
{
    static char dir[32];
    snprintf(dir, sizeof dir, "/tmp/ragtag-test-XXXXXX");
    if (!mkdtemp(dir))
        fail_msg("mkdtemp failed");
    if (tu_ntmpdirs == 0) {
        tu_tmp_owner = getpid();
        atexit(tu_tmpdirs_remove);
    }
    if (tu_ntmpdirs < 64)
        memcpy(tu_tmpdirs[tu_ntmpdirs++], dir, sizeof dir);
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
