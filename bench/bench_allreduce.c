/* bench_allreduce.c — ragtag's ring allreduce (float32 sum) between N local
 * processes, in the figures nccl-tests and ../shared/bench/mpi_allreduce.c
 * print: time per operation, algbw = S/t, busbw = algbw * 2(n-1)/n, plus
 * the median (p50) time of single operations.
 *
 *   bench/bench_allreduce [-n N] [--links shm|tcp|host] [--min BYTES] [--max BYTES]
 *                         [--chunk BYTES] [--actor] [--curve] [--zmq]
 *
 * --links shm (default): neighbours on one host share memory (what ragtag
 * uses between local workers); tcp: every rank pretends to be its own host,
 * so the ring runs over TCP on 127.0.0.x, as between machines: raw TCP
 * links (tcplink.h), or ZeroMQ with --zmq (what ragtag used before them);
 * host: every rank reads the others' buffers where they lie
 * (hostreduce.h: what workers who all share one host use for the
 * gradient), on the calling thread.
 * --curve: the TCP links use CurveZMQ, as a cluster with credentials does
 * (always through ZeroMQ).
 * --actor: call through the communication thread (rt_comm), as the trainer
 * does, instead of calling the ring directly.
 * In place (one buffer); each size is checked once, then warm-up and timed
 * reps (about 256 MiB of vector per size, 5 to 1000 reps); the time of a
 * size is the largest mean over the ranks; cpu_us is the CPU time (all of
 * a process's threads) per operation, the largest over the ranks: on a
 * box whose cores all train, the time the sums take from compute. Never
 * fails on speed. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "hostreduce.h"
#include "localring.h"
#include "clock.h"
#include "ring.h"
#include "status.h"

#define MAXSIZES 32

struct stats {
    double mean[MAXSIZES], p50[MAXSIZES], cpu[MAXSIZES];
    int ok[MAXSIZES];
};

static size_t min_bytes = 4096, max_bytes = (size_t)64 << 20;
static bool use_actor, use_host;

/* --links host: each rank's buffer in its segment, the others' mapped. */
static rt_hostreduce *host_group(rt_ring *ring, int rank, size_t n)
{
    int N = rt_ring_size(ring);
    char sec[64][17];
    const char *secs[64];
    for (int r = 0; r < N; r++) {
        snprintf(sec[r], sizeof sec[r], "%08x%08x", (unsigned)getppid(), (unsigned)r);
        secs[r] = sec[r];
    }
    rt_hostreduce *h = rt_hostreduce_new(secs[rank], n);
    float one = 1.0f;
    if (!h || rt_ring_allreduce(ring, &one, 1, NULL) < 0 ||
        rt_hostreduce_group(h, 1, rank, N, secs) < 0 || rt_ring_allreduce(ring, &one, 1, NULL) < 0) {
        rt_hostreduce_destroy(&h);
        return NULL;
    }
    return h;
}

static int sum(rt_ring *ring, rt_comm *comm, rt_hostreduce *h, float *buf, size_t n)
{
    static const struct rt_hostreduce_wait hw = {.timeout_s = 60};
    if (h)
        return rt_hostreduce_allreduce(h, 0, n, 0, NULL, &hw);
    return comm ? rt_comm_allreduce(comm, buf, n, NULL) : rt_ring_allreduce(ring, buf, n, NULL);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)arg;
    int N = rt_ring_size(ring);
    rt_hostreduce *h = NULL;
    size_t hn;
    if (use_host && !(h = host_group(ring, rank, max_bytes / sizeof(float)))) {
        fprintf(stderr, "rank %d: %s\n", rank, rt_error_detail());
        return 6;
    }
    float *buf = h ? rt_hostreduce_floats(h, &hn) : malloc(max_bytes);
    double *times = malloc(1000 * sizeof *times);
    if (!buf || !times)
        return 5;
    memset(buf, 0, max_bytes); /* touch every page before timing */
    rt_comm *comm = NULL;
    if (use_actor && !(comm = rt_comm_new_bare(ring))) {
        fprintf(stderr, "rank %d: %s\n", rank, rt_error_detail());
        return 6;
    }
    static struct stats st;
    int k = 0;
    for (size_t bytes = min_bytes; bytes <= max_bytes && k < MAXSIZES; bytes *= 2, k++) {
        size_t n = bytes / sizeof(float);
        size_t r = ((size_t)256 << 20) / bytes;
        int reps = r < 5 ? 5 : r > 1000 ? 1000 : (int)r;
        int warm = reps / 10 < 2 ? 2 : reps / 10;
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)(rank + 1);
        int rc = sum(ring, comm, h, buf, n);
        if (rc < 0) {
            fprintf(stderr, "rank %d: %s\n", rank, rt_error_detail());
            return 2;
        }
        float expect = (float)N * (float)(N + 1) / 2.0f;
        st.ok[k] = buf[0] == expect && buf[n - 1] == expect && buf[n / 2] == expect;
        for (int i = 0; i < warm; i++)
            rc |= sum(ring, comm, h, buf, n);
        double t0 = rt_now(), c0 = rt_cpu_now();
        for (int i = 0; i < reps; i++) {
            double a = rt_now();
            rc |= sum(ring, comm, h, buf, n);
            times[i] = rt_now() - a;
        }
        st.mean[k] = (rt_now() - t0) / reps;
        st.cpu[k] = (rt_cpu_now() - c0) / reps;
        if (rc < 0) {
            fprintf(stderr, "rank %d: %s\n", rank, rt_error_detail());
            return 2;
        }
        qsort(times, (size_t)reps, sizeof *times, cmp_double);
        st.p50[k] = times[reps / 2];
    }
    rt_comm_destroy(&comm);
    if (h)
        rt_hostreduce_destroy(&h);
    else
        free(buf);
    free(times);
    if (write(out_fd, &st, sizeof st) != (ssize_t)sizeof st)
        return 4;
    return 0;
}

int main(int argc, char **argv)
{
    struct rt_localring_opts o = {.n = 2, .links = RT_LINKS_SHM, .stall_timeout = 120};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "-n")) {
            o.n = atoi(v);
            i++;
        } else if (!strcmp(a, "--links")) {
            o.links = !strcmp(v, "tcp") ? RT_LINKS_TCP : RT_LINKS_SHM;
            use_host = !strcmp(v, "host");
            i++;
        } else if (!strcmp(a, "--min")) {
            min_bytes = strtoull(v, NULL, 0);
            i++;
        } else if (!strcmp(a, "--max")) {
            max_bytes = strtoull(v, NULL, 0);
            i++;
        } else if (!strcmp(a, "--chunk")) {
            o.chunk_bytes = strtoull(v, NULL, 0);
            i++;
        } else if (!strcmp(a, "--actor")) {
            use_actor = true;
        } else if (!strcmp(a, "--curve")) {
            o.curve = true;
        } else if (!strcmp(a, "--zmq")) {
            o.zmq_data = true;
        } else {
            fprintf(stderr, "usage: %s [-n N] [--links shm|tcp|host] [--min BYTES] "
                            "[--max BYTES] [--chunk BYTES] [--actor] [--curve] [--zmq]\n", argv[0]);
            return 2;
        }
    }
    if (o.n < 1 || o.n > 64 || min_bytes < 4 || max_bytes < min_bytes ||
        (use_host && use_actor)) {
        fprintf(stderr, "bench_allreduce: bad arguments\n");
        return 2;
    }
    static struct stats st[64];
    if (rt_localring_run(&o, bench, NULL, NULL, NULL, st, sizeof st[0]) < 0) {
        fprintf(stderr, "bench_allreduce: %s\n", rt_error_detail());
        return 1;
    }
    printf("# ragtag ring allreduce float32 sum, ranks=%d, links=%s%s%s, in-place\n", o.n,
           use_host                      ? "host (each rank reads the others' buffers)"
           : o.links != RT_LINKS_TCP     ? "shm (shared memory)"
           : o.curve || o.zmq_data        ? "tcp (ZeroMQ, 127.0.0.x)"
                                          : "tcp (raw TCP links, 127.0.0.x)",
           o.curve ? " with CurveZMQ" : "", use_actor ? ", through the comm thread" : "");
    printf("%12s %10s %12s %10s %10s %10s %5s %8s\n", "bytes", "count", "time_us", "p50_us",
           "algbw_GBs", "busbw_GBs", "check", "cpu_us");
    int k = 0;
    for (size_t bytes = min_bytes; bytes <= max_bytes && k < MAXSIZES; bytes *= 2, k++) {
        double t = 0, p50 = 0, cpu = 0;
        int ok = 1;
        for (int r = 0; r < o.n; r++) {
            t = fmax(t, st[r].mean[k]);
            cpu = fmax(cpu, st[r].cpu[k]);
            p50 = fmax(p50, st[r].p50[k]);
            ok &= st[r].ok[k];
        }
        double alg = (double)bytes / t / 1e9;
        printf("%12zu %10zu %12.1f %10.1f %10.3f %10.3f %5s %8.1f\n", bytes, bytes / sizeof(float),
               t * 1e6, p50 * 1e6, alg, alg * 2.0 * (o.n - 1) / o.n, ok ? "ok" : "WRONG",
               cpu * 1e6);
    }
    return 0;
}
