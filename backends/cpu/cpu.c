/* cpu.c — the cpu backend's table, device, memory, GEMM, elementwise ops and
 * optimiser steps. Convolutions live in conv.c, the other layer ops in nn.c.
 *
 * This backend defines the reference maths (backends/backend.h) that every
 * other backend is compared against, so the loops here favour plain,
 * obviously-right code; speed comes from the BLAS and from OpenMP over
 * independent elements. Reductions use fixed per-thread blocks and a fixed
 * combine order, so a run repeats bit for bit at a given thread count. */
#include "config.h"

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "cpu-blas.h"

#include "cpu-impl.h"
#include "status.h"

/* ---- devices ------------------------------------------------------------------ */

static int cpu_device_count(void) { return 1; }

/* Cores this process may run on (its affinity mask), which is what matters
 * in a container with a CPU set; falls back to the online count. */
static int cpu_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void cpu_model_name(char *out, size_t size)
{
    snprintf(out, size, "host CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *p = strchr(line, ':');
        if (!p)
            break;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        p[strcspn(p, "\n")] = '\0';
        if (*p)
            snprintf(out, size, "%s", p);
        break;
    }
    fclose(f);
}

static int cpu_device_info(int device, struct rt_device_info *out)
{
    if (device != 0)
        return rt_error(RT_ERR_NOTFOUND, "cpu backend has one device; device %d does not exist",
                        device);
    cpu_model_name(out->name, sizeof out->name);
#if defined(RT_HAVE_CBLAS) && defined(RT_BLAS_BLIS)
    snprintf(out->platform, sizeof out->platform, "host, BLIS %s", bli_info_get_version_str());
#elif defined(RT_HAVE_CBLAS)
    /* the core ragtag's program named (app/main.c), and what OpenBLAS saw */
    const char *from = getenv("RAGTAG_BLAS_CORE_FROM");
    snprintf(out->platform, sizeof out->platform, "host, %s%s%s%s", openblas_get_config(),
             from ? " (raised from " : "", from ? from : "", from ? ")" : "");
#else
    snprintf(out->platform, sizeof out->platform, "host, built-in GEMM (no BLAS)");
#endif
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->mem_bytes = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    out->compute_units = cpu_cores();
    return RT_OK;
}

static int cpu_dev_open(rt_dev *d)
{
    struct cpu_dev *c = calloc(1, sizeof *c);
    if (!c)
        return rt_error(RT_ERR_NOMEM, "out of memory opening the cpu device");
#ifdef _OPENMP
    c->nt = d->threads > 0 ? d->threads : omp_get_max_threads();
#else
    c->nt = 1;
#endif
    if (c->nt < 1)
        c->nt = 1;
    if (c->nt > CPU_MAX_THREADS)
        c->nt = CPU_MAX_THREADS;
    d->threads = c->nt; /* what rt_dev_threads reports: the count in use */
    d->impl = c;
    return RT_OK;
}

static void cpu_dev_close(rt_dev *d)
{
    free(d->impl);
    d->impl = NULL;
}

/* ---- memory ------------------------------------------------------------------ */

/* Buffers start 64-byte aligned (a cache line, an AVX-512 vector), and each
 * at a different offset, a multiple of 128 bytes, from a 4 KiB boundary.
 * Large blocks come from mmap, page-aligned: without the offsets, element i
 * of every big buffer shares its low 12 address bits, and a loop reading x
 * while writing dx (pool and activation backward) stalls on 4K aliasing
 * between its loads and stores. The block's own address is kept just
 * below the handle. */
#define CPU_COLORS 31

static int cpu_buf_alloc(rt_dev *d, rt_buf *b)
{
    static _Atomic unsigned next_color;
    const size_t color = 128 * (1 + next_color++ % CPU_COLORS);
    size_t bytes = (b->bytes + 63) & ~(size_t)63;
    if (bytes < b->bytes || bytes > SIZE_MAX - 4096)
        return rt_error(RT_ERR_NOMEM, "cpu buffer of %zu bytes is too large", b->bytes);
    char *raw = aligned_alloc(64, bytes + 4096);
    if (!raw)
        return rt_error(RT_ERR_NOMEM, "out of host memory allocating %zu bytes", b->bytes);
    b->handle = raw + color;
    memcpy((char *)b->handle - sizeof raw, &raw, sizeof raw);
    return RT_OK;
}

static void cpu_buf_free(rt_dev *d, rt_buf *b)
{
    if (b->handle) {
        char *raw;
        memcpy(&raw, (char *)b->handle - sizeof raw, sizeof raw);
        free(raw);
    }
    b->handle = NULL;
}

static int cpu_upload(rt_dev *d, rt_view dst, const void *src, size_t bytes)
{
    memcpy(cpu_f(dst), src, bytes);
    return RT_OK;
}

static int cpu_download(rt_dev *d, void *dst, rt_view src, size_t bytes)
{
    memcpy(dst, cpu_f(src), bytes);
    return RT_OK;
}

/* Long copies that do not overlap in blocks over the threads (resnet8's
 * shortcuts copy a 3.2 MB gradient a step, which one core moves at half
 * the speed two do); the others with one memmove. */
static int cpu_copy(rt_dev *d, rt_view dst, rt_view src, size_t n)
{
    float *y = cpu_f(dst);
    const float *x = cpu_f(src);
    const int nt = cpu_nt(d);
    const uintptr_t a = (uintptr_t)y, b = (uintptr_t)x, bytes = n * sizeof(float);
    if (nt == 1 || n <= CPU_PAR_MIN || (a < b + bytes && b < a + bytes)) {
        memmove(y, x, n * sizeof(float));
        return RT_OK;
    }
    CPU_FOR_BLOCKS(k)
    {
        const size_t lo = cpu_block_lo(k);
        memcpy(y + lo, x + lo, cpu_block_len(n, lo) * sizeof(float));
    }
    return RT_OK;
}

/* Every op finishes before it returns. */
static int cpu_sync(rt_dev *d) { return RT_OK; }

/* ---- GEMM -------------------------------------------------------------------- */

/* OpenBLAS comes as an OpenMP build, which runs serially when called from
 * inside a parallel region and otherwise follows the caller's OpenMP thread
 * count, or as a pthreads build with its own pool and one global count,
 * which knows nothing of our regions: called from two OpenMP threads with a
 * count of 2 it runs four threads on two cores, and its idle workers spin
 * (sched_yield) against OpenMP's. Which one is loaded is decided at run
 * time (Debian's alternatives pick the pthreads one for libopenblas.so.0
 * whatever the build linked). The pthreads build is kept at one thread,
 * always, and a big GEMM is split over OpenMP threads here instead
 * (cpu_sgemm), as with the OpenMP build: one thread pool in the process.
 *
 * cpu_blas_split_here: whether cpu_sgemm splits a big GEMM over our OpenMP
 * threads itself, each a single-threaded BLAS call on its own block of C
 * (no shared state, no waiting), rather than let the BLAS thread it.
 * Always for OpenBLAS: its pthreads build would start a second pool, and
 * its OpenMP build threads a GEMM by sharing packed panels between threads
 * that wait for each other in sched_yield loops, and every time slice the
 * machine takes from one thread stalls the other (bench_ops on a loaded
 * 2-core machine, 2 threads: 256^3 276 -> 195 us at best; seedcnn's
 * 64x4608x225 median 3,428 -> 1,047 us, best 804 -> 880). BLIS threads
 * its own way and is left to it. */
#ifdef RT_HAVE_CBLAS
static bool cpu_blas_split_here(void)
{
#if defined(RT_BLAS_BLIS) || !defined(_OPENMP)
    return false;
#else
    return true;
#endif
}
#endif

void cpu_runs_init(struct cpu_runs *rs, int n, int nt)
{
    for (int t = 0; t < nt; t++) {
        rs->r[t].next = (int)((long)n * t / nt);
        rs->r[t].end = (int)((long)n * (t + 1) / nt);
    }
}

int cpu_runs_next(struct cpu_runs *rs, int t, int nt)
{
    for (int k = 0; k < nt; k++) {
        const int u = (t + k) % nt; /* this thread's own run first */
        if (__atomic_load_n(&rs->r[u].next, __ATOMIC_RELAXED) >= rs->r[u].end)
            continue;
        const int i = __atomic_fetch_add(&rs->r[u].next, 1, __ATOMIC_RELAXED);
        if (i < rs->r[u].end)
            return i;
    }
    return -1;
}

bool cpu_has_avx512f(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static int known = -1; /* threads that race here store the same value */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k < 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx512f") ? 1 : 0;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 1;
#else
    return false;
#endif
}

/* Whether the BLAS runs AVX-512 kernels: OpenBLAS by the core it picked
 * (OPENBLAS_CORETYPE=Haswell holds it to AVX2 on an AVX-512 CPU, as a
 * mixed cluster may, for the same kernels on every host), BLIS by the CPU,
 * ragtag's own loops never. */
bool cpu_blas_avx512(void)
{
#if defined(RT_HAVE_CBLAS) && defined(RT_BLAS_BLIS)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#elif defined(RT_HAVE_CBLAS)
    static const char *const wide[] = {"skylakex", "cooperlake", "sapphirerapids"};
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < sizeof wide / sizeof wide[0]; i++)
        if (!strcasecmp(core, wide[i]))
            return true;
    return false;
#else
    return false;
#endif
}

/* Before a parallel region whose threads call the BLAS: make each call run
 * on its calling thread only. */
void cpu_blas_before_parallel(void)
{
#if defined(RT_HAVE_CBLAS) && !defined(RT_BLAS_BLIS)
    if (openblas_get_parallel() != 2 && openblas_get_num_threads() != 1)
        openblas_set_num_threads(1);
#endif
}

#ifdef RT_HAVE_CBLAS
/* Tell the BLAS to use nt threads for the next call made outside our
 * parallel regions (inside one, cpu_blas_before_parallel has done it). */
static void cpu_blas_threads(int nt)
{
#ifdef _OPENMP
    if (omp_in_parallel())
        return;
#endif
#ifdef RT_BLAS_BLIS
    static int blis_nt;
    if (blis_nt != nt) {
        bli_thread_set_num_threads(nt);
        blis_nt = nt;
    }
#else
    if (openblas_get_parallel() != 2) {
        cpu_blas_before_parallel(); /* the pthreads build: see above */
        return;
    }
#ifdef _OPENMP
    /* the OpenMP build follows this thread's OpenMP count, which
     * openblas_set_num_threads sets too */
    if (omp_get_max_threads() != nt || openblas_get_num_threads() != nt)
        openblas_set_num_threads(nt);
#endif
#endif
}
#endif /* RT_HAVE_CBLAS */

/* C = beta*C on an m x n block, with beta == 0 writing zeros (NaNs vanish). */
static void cpu_scale_block(int m, int n, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++) {
        float *ci = c + (size_t)i * ldc;
        if (beta == 0.0f)
            memset(ci, 0, (size_t)n * sizeof(float));
        else if (beta != 1.0f)
            for (int j = 0; j < n; j++)
                ci[j] *= beta;
    }
}

#ifndef RT_HAVE_CBLAS
/* The GEMM used when no BLAS is linked: rows of C split over threads, the k
 * loop blocked so a panel of B stays in cache while a row of C is updated. */
static void cpu_gemm_c(int nt, bool ta, bool tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float *c, int ldc)
{
    enum { KB = 128 };
    long work = (long)m * n * k;
    (void)nt;
    (void)work;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (work > 100000)
#endif
    for (int i = 0; i < m; i++) {
        float *ci = c + (size_t)i * ldc;
        if (tb) {
            /* C row i = dot products of A row i with rows of B. */
            for (int j = 0; j < n; j++) {
                const float *bj = b + (size_t)j * ldb;
                float acc = 0.0f;
                for (int p = 0; p < k; p++)
                    acc += (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) * bj[p];
                ci[j] += alpha * acc;
            }
            continue;
        }
        for (int p0 = 0; p0 < k; p0 += KB) {
            int p1 = p0 + KB < k ? p0 + KB : k;
            for (int p = p0; p < p1; p++) {
                float aip = alpha * (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);
                const float *bp = b + (size_t)p * ldb;
#ifdef _OPENMP
#pragma omp simd
#endif
                for (int j = 0; j < n; j++)
                    ci[j] += aip * bp[j];
            }
        }
    }
}
#endif

#ifdef RT_HAVE_CBLAS
/* Whether gemm_small.c's kernel takes a call: B read in place (not
 * transposed), C set or added to, and B within half an L2 (the kernel
 * blocks the inner index for L1, but not B's columns for L2). On those,
 * OpenBLAS's packing of both operands on every call costs more than its
 * kernel saves: the dense layers' backward (lenet's 400 -> 120 at 2
 * threads: 30.5 -> 24.1 ms over 300 steps). seedcnn's 4608 -> 225 ran 20%
 * slower in it and stays with the BLAS. */
static bool small_fits(bool tb, int n, int k, float alpha, float beta)
{
    return !tb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
           (size_t)n * (size_t)k <= 65536 && cpu_avx2_kernels();
}

/* Whether gemm_tn_smallk.c's kernel takes a call: C = A^T B with a short
 * inner index and a C much bigger than both operands (a dense layer's
 * weight gradient), where a BLAS spends its time scaling, packing and
 * adding to C in passes of their own. */
static bool smallk_fits(bool ta, bool tb, int m, int n, int k, float alpha, float beta)
{
    return ta && !tb && alpha == 1.0f && beta == 0.0f && k <= CPU_SMALLK_MAX &&
           (size_t)m * (size_t)n >= (size_t)2 * k * ((size_t)m + (size_t)n);
}

/* Whether gemm_nt_longk.c's kernel takes a call: C = A B^T with a long
 * inner index (a dense layer's forward on a wide input). */
static bool longk_fits(bool ta, bool tb, int k, float alpha, float beta)
{
    return !ta && tb && alpha == 1.0f && beta == 0.0f && k >= 1024;
}

/* Whether gemm_small512.c's kernel takes a plain C = A B: few rows, an
 * inner index of 96 or more (a dense layer's data gradient; below it the
 * BLAS was as fast). */
static bool nn512_fits(bool ta, bool tb, int m, int k, float alpha, float beta)
{
    return !ta && !tb && alpha == 1.0f && beta == 0.0f && m <= 64 && k >= 96;
}

static void blas_part(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc)
{
    if (longk_fits(ta, tb, k, alpha, beta) && cpu_gemm_nt_longk(m, n, k, a, lda, b, ldb, c, ldc))
        return;
    if (nn512_fits(ta, tb, m, k, alpha, beta) && cpu_gemm_nn512(m, n, k, a, lda, b, ldb, c, ldc))
        return;
    if (smallk_fits(ta, tb, m, n, k, alpha, beta) &&
        cpu_gemm_tn_smallk(m, n, k, a, lda, b, ldb, c, ldc))
        return;
    if (small_fits(tb, n, k, alpha, beta)) {
        cpu_gemm_small_acc(ta, m, n, k, a, lda, b, ldb, beta != 0.0f, c, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

/* Where thread t's block of len rows or columns starts: the even share
 * rounded to 16 (one AVX-512 vector, a cache line of floats), so each
 * block's kernel runs whole vectors, and where a row of C is a whole number
 * of lines no line of C is written by two threads (at 120 or 84 columns a
 * column cut still shares one line on some rows: docs/backends.md). lenet's
 * 64x120x400 forward at 2 threads (cut 60/60 before, 64/56 now): 45.6 ->
 * 38.0 us, its 84-unit layer 18.0 -> 14.9 (Xeon). */
static int split_at(int len, int t, int tn)
{
    if (t <= 0)
        return 0;
    if (t >= tn)
        return len;
    int at = (int)(((long)len * t / tn + 8) / 16 * 16);
    return at < len ? at : len;
}

#ifdef RT_HAVE_CBLAS
/* Thread t of tn's block of g's C, along its longer side (split_at), as a
 * single-threaded call. */
static void sgemm_block(const struct cpu_sgemm_call *g, int t, int tn)
{
    const bool by_rows = g->m >= g->n;
    const int len = by_rows ? g->m : g->n;
    const int lo = split_at(len, t, tn), hi = split_at(len, t + 1, tn);
    if (hi <= lo)
        return;
    if (by_rows) /* rows lo..hi of op(A) and of C */
        blas_part(g->ta, g->tb, hi - lo, g->n, g->k, g->alpha,
                  g->a + (g->ta ? (size_t)lo : (size_t)lo * g->lda), g->lda, g->b, g->ldb,
                  g->beta, g->c + (size_t)lo * g->ldc, g->ldc);
    else /* columns lo..hi of op(B) and of C */
        blas_part(g->ta, g->tb, g->m, hi - lo, g->k, g->alpha, g->a, g->lda,
                  g->b + (g->tb ? (size_t)lo * g->ldb : (size_t)lo), g->ldb, g->beta, g->c + lo,
                  g->ldc);
}

/* How many of nt threads g is split over: blocks that stay big enough for
 * the BLAS kernels (16 rows / columns at least, 1e5 multiply-adds). */
static int sgemm_parts(const struct cpu_sgemm_call *g, int nt)
{
    const double work = (double)g->m * g->n * g->k;
    int parts = nt;
    while (parts > 1 && (work / parts < 1e5 || (g->m < 16 * parts && g->n < 16 * parts)))
        parts--;
    return parts;
}
#endif

/* Whether g is nothing but C = beta C (done here when it is). */
static bool sgemm_trivial(const struct cpu_sgemm_call *g)
{
    if (g->m <= 0 || g->n <= 0)
        return true;
    if (g->k > 0 && g->alpha != 0.0f)
        return false;
    cpu_scale_block(g->m, g->n, g->beta, g->c, g->ldc);
    return true;
}

void cpu_sgemm_call(int nt, const struct cpu_sgemm_call *g)
{
    if (sgemm_trivial(g))
        return;
#ifdef RT_HAVE_CBLAS
    const int parts = sgemm_parts(g, nt);
    if (parts > 1 && cpu_blas_split_here()) {
        cpu_blas_before_parallel();
#ifdef _OPENMP
#pragma omp parallel num_threads(parts)
#endif
        sgemm_block(g, cpu_thread_num(), cpu_num_threads());
        return;
    }
    /* too small to split: on one thread, when we would have split it */
    if (!small_fits(g->tb, g->n, g->k, g->alpha, g->beta))
        cpu_blas_threads(cpu_blas_split_here() ? 1 : nt);
    blas_part(g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb, g->beta,
              g->c, g->ldc);
#else
    cpu_scale_block(g->m, g->n, g->beta, g->c, g->ldc);
    cpu_gemm_c(nt, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb, g->c,
               g->ldc);
#endif
}

void cpu_sgemm(int nt, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    const struct cpu_sgemm_call g = {ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
    cpu_sgemm_call(nt, &g);
}

/* Two independent GEMMs side by side: threads [0, h) split g0, [h, nt)
 * split g1, in one parallel region, where one after the other each would
 * be split over all nt. A dense layer's weight and data gradients at a
 * batch of 64 split badly: each half of a 64-row GEMM is short, its C
 * shares lines with the other half's, and the weight gradient reads g and
 * x that the other core has just written. Each whole on one core, both
 * run at their 1-thread speed at once (lenet, 2 threads: docs/backends.md). */
void cpu_sgemm_pair(int nt, const struct cpu_sgemm_call *g0, const struct cpu_sgemm_call *g1)
{
    const bool done0 = sgemm_trivial(g0), done1 = sgemm_trivial(g1);
#if defined(RT_HAVE_CBLAS) && defined(_OPENMP)
    if (nt >= 2 && cpu_blas_split_here() && !done0 && !done1) {
        cpu_blas_before_parallel();
#pragma omp parallel num_threads(nt)
        {
            const int t = cpu_thread_num(), tn = cpu_num_threads(), h = tn / 2;
            if (tn < 2) { /* the runtime gave one thread */
                sgemm_block(g0, 0, 1);
                sgemm_block(g1, 0, 1);
            } else if (t < h) {
                sgemm_block(g0, t, h);
            } else {
                sgemm_block(g1, t - h, tn - h);
            }
        }
        return;
    }
#endif
    if (!done0)
        cpu_sgemm_call(nt, g0);
    if (!done1)
        cpu_sgemm_call(nt, g1);
}

int cpu_gemm(rt_dev *d, int ta, int tb, int m, int n, int k, float alpha, rt_view a,
             int lda, rt_view b, int ldb, float beta, rt_view c, int ldc)
{
    /* With k == 0 the wrapper has not checked a and b: do not touch them. */
    const float *ap = k > 0 ? cpu_f(a) : NULL, *bp = k > 0 ? cpu_f(b) : NULL;
    cpu_sgemm(cpu_nt(d), ta != 0, tb != 0, m, n, k, alpha, ap, lda, bp, ldb, beta, cpu_f(c), ldc);
    return RT_OK;
}

/* ---- elementwise ------------------------------------------------------------- */

/* The elementwise loops below are split over threads only when long enough
 * (CPU_PAR_MIN); `n` and `nt` are the names the pragma refers to. */
#ifdef _OPENMP
#define CPU_PAR_FOR _Pragma("omp parallel for simd num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)")
#else
#define CPU_PAR_FOR
#endif

int cpu_mul(rt_dev *d, size_t n, rt_view av, rt_view bv, rt_view yv)
{
    const float *a = cpu_f(av), *b = cpu_f(bv);
    float *y = cpu_f(yv);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_PAR_FOR
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
    return RT_OK;
}

int cpu_axpy(rt_dev *d, size_t n, float alpha, rt_view xv, rt_view yv)
{
    const float *x = cpu_f(xv);
    float *y = cpu_f(yv);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_PAR_FOR
    for (size_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
    return RT_OK;
}

int cpu_scale(rt_dev *d, size_t n, float alpha, rt_view xv)
{
    float *x = cpu_f(xv);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_PAR_FOR
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
    return RT_OK;
}

int cpu_fill(rt_dev *d, size_t n, float value, rt_view xv)
{
    float *x = cpu_f(xv);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_PAR_FOR
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    return RT_OK;
}

/* The sum of squares of one block in double, in 16 interleaved chains
 * (four vectors of 4 doubles) added in a fixed tree at the end. A float's
 * square is exact in double, so a fused multiply-add gives the bits of a
 * multiply and an add, and every CPU_CLONES clone gives the same sum (GCC
 * vectors, lowered to SSE2 pairs in the default clone). Four scalar chains
 * were bound by the add's latency, one float a cycle: 20 us of lenet's
 * 124 us per-step overhead. */
typedef float sumsq_v4f __attribute__((vector_size(16)));
typedef double sumsq_v4d __attribute__((vector_size(32)));
/* acc += the squares of x[0..3], in double (a macro: a function returning
 * a 32-byte vector would change the ABI of the SSE2 default clone) */
#define SUMSQ_ADD4(acc, x)                                                                     \
    do {                                                                                       \
        sumsq_v4f f_;                                                                          \
        memcpy(&f_, (x), sizeof f_);                                                           \
        sumsq_v4d v_ = __builtin_convertvector(f_, sumsq_v4d);                                 \
        (acc) += v_ * v_;                                                                      \
    } while (0)

CPU_CLONES static double sumsq_span(const float *x, size_t n)
{
    enum { LANES = 16 };
    sumsq_v4d a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}; /* lane j: floats i+j */
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        SUMSQ_ADD4(a0, x + i);
        SUMSQ_ADD4(a1, x + i + 4);
        SUMSQ_ADD4(a2, x + i + 8);
        SUMSQ_ADD4(a3, x + i + 12);
    }
    double lane[LANES];
    memcpy(lane, &a0, sizeof a0);
    memcpy(lane + 4, &a1, sizeof a1);
    memcpy(lane + 8, &a2, sizeof a2);
    memcpy(lane + 12, &a3, sizeof a3);
    for (int j = 0; i < n; i++, j++)
        lane[j] += (double)x[i] * (double)x[i];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++)
            lane[j] += lane[j + w];
    return lane[0];
}

/* Sum of squares in double. The range is cut into nt fixed blocks whatever
 * the team size, and the block sums are added in block order, so the result
 * depends only on the device's thread count. */
int cpu_sumsq(rt_dev *d, size_t n, rt_view xv, double *out)
{
    const float *x = cpu_f(xv);
    int nb = n > CPU_PAR_MIN ? cpu_nt(d) : 1;
    double part[CPU_MAX_THREADS];
#ifdef _OPENMP
#pragma omp parallel num_threads(nb) if (nb > 1)
#endif
    {
        int t = cpu_thread_num(), tn = cpu_num_threads();
        for (int blk = t; blk < nb; blk += tn) {
            size_t lo = n * (size_t)blk / (size_t)nb, hi = n * (size_t)(blk + 1) / (size_t)nb;
            part[blk] = sumsq_span(x + lo, hi - lo);
        }
    }
    double s = 0.0;
    for (int b = 0; b < nb; b++)
        s += part[b];
    *out = s;
    return RT_OK;
}

/* ---- optimiser steps ------------------------------------------------------------ */

/* An update reads each weight (and its state), then writes it. Where
 * another core has read the line since it was last written here (the
 * host's one replica, which every worker's forward reads: host_replica.h),
 * the read brings it shared and the write then invalidates the other copy:
 * two trips to the other core a line. PREFETCHW a little ahead asks for
 * the line writable at once. SGD over half of seedcnn's shared weights,
 * per worker of 2: 500-550 -> 255-300 us a step; one 2-thread process,
 * whose threads also read each other's rows, 287 -> 243-256 us. */
#define OWN_BLOCK 256 /* floats updated between two rounds of prefetches */
#define OWN_AHEAD 512 /* floats ahead of the update (2 KB) */

/* PREFETCHW is there (CPUID 0x80000001 ECX bit 8): on x86-64 CPUs without
 * it the instruction is not executed at all. */
static bool has_prefetchw(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static int known = -1; /* threads that race here store the same value */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k < 0) {
        unsigned a, b, c, d;
        k = __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 8)) ? 1 : 0;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 1;
#else
    return false;
#endif
}

/* The end of the block of an update of n floats from i0, after asking for
 * p[i][i0 + OWN_AHEAD, ...) writable for each p[i] (NULL: none) when pw. */
static inline size_t own_block(bool pw, float *const p[3], size_t i0, size_t n)
{
    const size_t i1 = n - i0 < OWN_BLOCK ? n : i0 + OWN_BLOCK;
#if defined(__x86_64__) && defined(__GNUC__)
    const size_t end = i1 + OWN_AHEAD < n ? i1 + OWN_AHEAD : n;
    for (int k = 0; pw && k < 3 && p[k]; k++)
        for (size_t q = i0 + OWN_AHEAD; q < end; q += 16)
            __asm__ volatile("prefetchw %0" ::"m"(p[k][q]));
#else
    (void)pw, (void)p;
#endif
    return i1;
}

/* SGD over one block: plain, momentum or Nesterov, weight decay folded
 * into the gradient. Elementwise with restrict pointers, so each clone runs
 * it in its widest vectors and the bits are those of any width. Before, it
 * was an `omp parallel for simd` loop, built for the default target's
 * 4-float SSE2 vectors: 78 GB/s where AdamW, which moves more, ran at 196
 * (bench_ops BENCH_ONLY=optim, seedcnn). A data-parallel worker runs this
 * over every parameter each step. */
CPU_CLONES static void sgd_span(const struct rt_sgd_params *p, float *restrict w,
                                const float *restrict g, float *restrict v, size_t n)
{
    const float lr = p->lr, mu = p->momentum, wd = p->weight_decay;
    const bool pw = has_prefetchw();
    float *const own[3] = {w, mu == 0.0f ? NULL : v, NULL};
    for (size_t i0 = 0, i1; i0 < n; i0 = i1) {
        i1 = own_block(pw, own, i0, n);
        if (mu == 0.0f) {
            CPU_SIMD
            for (size_t i = i0; i < i1; i++)
                w[i] -= lr * (g[i] + wd * w[i]);
        } else if (p->nesterov) {
            CPU_SIMD
            for (size_t i = i0; i < i1; i++) {
                float gi = g[i] + wd * w[i];
                float vi = mu * v[i] + gi;
                v[i] = vi;
                w[i] -= lr * (gi + mu * vi);
            }
        } else {
            CPU_SIMD
            for (size_t i = i0; i < i1; i++) {
                float vi = mu * v[i] + (g[i] + wd * w[i]);
                v[i] = vi;
                w[i] -= lr * vi;
            }
        }
    }
}

int cpu_sgd_step(rt_dev *d, size_t n, const struct rt_sgd_params *p, rt_view wv,
                 rt_view gv, rt_view vv)
{
    float *w = cpu_f(wv), *v = cpu_f_or_null(vv);
    const float *g = cpu_f(gv);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_FOR_BLOCKS(k) {
        size_t lo = cpu_block_lo(k), len = cpu_block_len(n, lo);
        sgd_span(p, w + lo, g + lo, v ? v + lo : NULL, len);
    }
    return RT_OK;
}

/* Adam, AdamW and Nadam as written in backend.h, over n floats: elementwise
 * (no contraction in C11), so the bits are those of any vector width and
 * every clone gives every replica the same parameters. The SSE2 default
 * ran the divide and the square root 4 floats at a time; a data-parallel
 * worker runs the whole update on every step (the replicated optimiser). */
CPU_CLONES static void adam_span(const struct rt_adam_scalars *p, float *w, const float *g,
                                 float *m, float *v, size_t n)
{
    const float b1 = p->beta1, b2 = p->beta2, eps = p->eps, lr = p->lr;
    const float l2 = p->l2, decay = p->decay, inv_bc2 = p->inv_bc2, cm = p->cm, cg = p->cg;
    const bool pw = has_prefetchw();
    float *const own[3] = {w, m, v};
    for (size_t i0 = 0, i1; i0 < n; i0 = i1) {
        i1 = own_block(pw, own, i0, n);
        CPU_SIMD
        for (size_t i = i0; i < i1; i++) {
            float wi = w[i] - decay * w[i];
            float gi = g[i] + l2 * wi;
            float mi = b1 * m[i] + (1.0f - b1) * gi;
            float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            float mhat = cm * mi + cg * gi;
            w[i] = wi - lr * mhat / (sqrtf(vi * inv_bc2) + eps);
        }
    }
}

int cpu_adam_step(rt_dev *d, size_t n, const struct rt_adam_scalars *p, rt_view wv, rt_view gv,
                  rt_view mv, rt_view vv)
{
    float *w = cpu_f(wv), *m = cpu_f(mv), *v = cpu_f(vv);
    const float *g = cpu_f(gv);
    int nt = cpu_nt(d);
    (void)nt;
    CPU_FOR_BLOCKS(k) {
        size_t lo = cpu_block_lo(k), len = cpu_block_len(n, lo);
        adam_span(p, w + lo, g + lo, m + lo, v + lo, len);
    }
    return RT_OK;
}

/* ---- the table --------------------------------------------------------------- */

const struct rt_backend_ops rt_cpu_backend = {
    .abi_version = RT_BACKEND_ABI_VERSION,
    .size = sizeof(struct rt_backend_ops),
    .name = "cpu",
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .dev_open = cpu_dev_open,
    .dev_close = cpu_dev_close,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .conv2d_workspace = cpu_conv2d_workspace,
    .host_memory = true,
#define RT_OP(name, params) .name = cpu_##name,
#include "ops.def"
#undef RT_OP
};
