/* bench_backends.c — SGEMM speed of every backend and device ragtag finds:
 * square sizes, then the skinny shapes of LeNet's convolutions (im2col +
 * GEMM over a batch of 64), which are what training actually runs. Prints
 * figures; never fails on speed. bench/bench_backends.sh adds LeNet
 * training images/s per backend.
 *
 *   bench/bench_backends [SIZE...]      default sizes: 128 256 512 1024
 *   BENCH_BACKENDS="cpu opencl"         only these backends
 *
 * Each figure is the best of 5 timed loops of >= 0.1 s after two warm-up
 * calls (the first call on an OpenCL device compiles kernels): the machines
 * this runs on are shared, and the best loop is the least disturbed. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "status.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct shape {
    int ta, tb, m, n, k;
    const char *what;
};

/* Seconds per C = op(A) op(B) on `d`, or a negative status. */
static double time_gemm(rt_dev *d, const struct shape *s)
{
    int m = s->m, n = s->n, k = s->k;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    rt_buf *a = rt_buf_new(d, na * 4), *b = rt_buf_new(d, nb * 4), *c = rt_buf_new(d, nc * 4);
    double best = -1.0;
    if (!a || !b || !c || rt_op_fill(d, na, 0.5f, rt_buf_view(a)) < 0 ||
        rt_op_fill(d, nb, 0.25f, rt_buf_view(b)) < 0)
        goto out;
    int lda = s->ta ? m : k, ldb = s->tb ? k : n;
    for (int rep = -2; rep < 5; rep++) {
        long calls = 0;
        double t0 = now(), t;
        do {
            if (rt_op_gemm(d, s->ta, s->tb, m, n, k, 1.0f, rt_buf_view(a), lda, rt_buf_view(b),
                           ldb, 0.0f, rt_buf_view(c), n) < 0 ||
                rt_sync(d) < 0)
                goto out;
            calls++;
            t = now() - t0;
        } while (rep >= 0 && t < 0.1);
        t /= (double)calls;
        if (rep >= 0 && (best < 0 || t < best))
            best = t;
    }
out:
    rt_buf_destroy(&a);
    rt_buf_destroy(&b);
    rt_buf_destroy(&c);
    return best;
}

static bool wanted(const char *backend)
{
    const char *only = getenv("BENCH_BACKENDS");
    if (!only || !*only)
        return true;
    size_t len = strlen(backend);
    for (const char *p = only; (p = strstr(p, backend)); p += len)
        if ((p == only || p[-1] == ' ' || p[-1] == ',') &&
            (p[len] == '\0' || p[len] == ' ' || p[len] == ','))
            return true;
    return false;
}

static void bench_device(const char *backend, int device, const struct shape *shapes, int nshapes)
{
    struct rt_device_info info;
    if (rt_backend_device_info(backend, device, &info) < 0) {
        printf("%s:%d unavailable: %s\n", backend, device, rt_error_detail());
        return;
    }
    printf("%s:%d  %s  [%s]  %.1f GiB, %d compute units\n", backend, device, info.name,
           info.platform, (double)info.mem_bytes / (1u << 30), info.compute_units);
    rt_dev *d = rt_dev_open(backend, device, 0);
    if (!d) {
        printf("  cannot open: %s\n", rt_error_detail());
        return;
    }
    for (int i = 0; i < nshapes; i++) {
        const struct shape *s = &shapes[i];
        double t = time_gemm(d, s);
        char dims[64];
        snprintf(dims, sizeof dims, "%s%s %dx%dx%d", s->ta ? "T" : "N", s->tb ? "T" : "N", s->m,
                 s->n, s->k);
        if (t < 0)
            printf("  sgemm %-22s %-28s failed: %s\n", dims, s->what, rt_error_detail());
        else
            printf("  sgemm %-22s %-28s %10.1f us %8.1f GFLOP/s\n", dims, s->what, t * 1e6,
                   2.0 * s->m * s->n * (double)s->k / t * 1e-9);
        fflush(stdout);
    }
    rt_dev_close(&d);
}

int main(int argc, char **argv)
{
    /* the OpenBLAS core the ragtag program runs (backends/cpu/blas_core.c) */
    if (rt_cpu_blas_core_setenv())
        execv("/proc/self/exe", argv);
    struct shape shapes[64];
    int ns = 0;
    static const int default_sizes[] = {128, 256, 512, 1024};
    if (argc > 1) {
        for (int i = 1; i < argc && ns < 32; i++) {
            int v = atoi(argv[i]);
            if (v <= 0) {
                fprintf(stderr, "usage: bench_backends [SIZE...]\n");
                return 2;
            }
            shapes[ns++] = (struct shape){0, 0, v, v, v, "square"};
        }
    } else {
        for (int i = 0; i < 4; i++)
            shapes[ns++] = (struct shape){0, 0, default_sizes[i], default_sizes[i],
                                          default_sizes[i], "square"};
    }
    /* LeNet, batch 64, as im2col + one GEMM per batch (the opencl backend's
     * shapes; the cpu backend runs one image at a time). */
    static const struct shape lenet[] = {
        {0, 0, 6, 50176, 25, "lenet conv1 forward"},
        {0, 1, 6, 25, 50176, "lenet conv1 filter grad"},
        {0, 0, 16, 6400, 150, "lenet conv2 forward"},
        {1, 0, 150, 6400, 16, "lenet conv2 data grad"},
        {0, 1, 16, 150, 6400, "lenet conv2 filter grad"},
        {0, 1, 64, 120, 400, "lenet dense1 forward"},
    };
    for (size_t i = 0; i < sizeof lenet / sizeof lenet[0]; i++)
        shapes[ns++] = lenet[i];

    for (int b = 0; b < rt_backend_count(); b++) {
        const char *name = rt_backend_name(b);
        if (!wanted(name))
            continue;
        int n = rt_backend_device_count(name);
        if (n < 0) {
            printf("%s: unavailable: %s\n", name, rt_error_detail());
            continue;
        }
        for (int i = 0; i < n; i++)
            bench_device(name, i, shapes, ns);
    }
    return 0;
}
