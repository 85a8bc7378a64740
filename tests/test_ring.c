/* test_ring.c — ring collectives between real processes on 127.0.0.x:
 * N = 1..5, shared memory, ZeroMQ over TCP and both in one ring, lengths
 * from 0 to well past one chunk and not divisible by N. Values are small
 * integers so every sum is exact; a second pass with arbitrary floats checks
 * that all ranks end with bitwise the same result, also when reduced in
 * ranges (the bits of the whole allreduce) and as fp16/bf16 elements (exact
 * small sums; the same bits everywhere). The TCP cases run over raw TCP
 * links (tcplink.h), and over ZeroMQ with CurveZMQ where a case says so.
 * The last cases run while another process sends garbage and foreign
 * messages to every rank, and with a rank SIGKILLed. */
#include "config.h"

#include "testutil.h"

#include <signal.h>
#include <sys/wait.h>

#include "junk.h"
#include "clock.h"
#include "half.h"
#include "localring.h"
#include "ring.h"
#include "status.h"

#define MAXLEN 100003
static const size_t lengths[] = {0, 1, 2, 3, 5, 7, 31, 1000, 4099, MAXLEN};
#define NLEN (sizeof lengths / sizeof lengths[0])

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: ", rank);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            return 1;                                                          \
        }                                                                      \
    } while (0)

#define CALL(expr)                                                             \
    do {                                                                       \
        if ((expr) < 0) {                                                      \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #expr, rt_error_detail()); \
            return 2;                                                          \
        }                                                                      \
    } while (0)

static int one_pass(rt_ring *ring, int rank, uint64_t *hash);

/* arg: seconds to keep repeating the pass (rank 0 decides, by broadcast,
 * so every rank runs the same collectives), or NULL for one pass. */
static int battery(rt_ring *ring, int rank, int out_fd, void *arg)
{
    double secs = arg ? *(const double *)arg : 0.0;
    double t0 = rt_now();
    uint64_t hashes = 0;
    int more = 1;
    while (more) {
        int rc = one_pass(ring, rank, &hashes);
        if (rc)
            return rc;
        more = rank == 0 && rt_now() - t0 < secs;
        CALL(rt_ring_broadcast(ring, &more, sizeof more, 0));
    }
    if (write(out_fd, &hashes, sizeof hashes) != (ssize_t)sizeof hashes)
        return 4;
    long dropped = rt_ring_dropped(ring);
    if (write(out_fd, &dropped, sizeof dropped) != (ssize_t)sizeof dropped)
        return 4;
    return 0;
}

/* The arbitrary floats of one_pass again, reduced in three ranges from the
 * top (as the sync mode's buckets go): bitwise the whole allreduce's sums
 * (`whole`), and nothing outside a range touched. Then 16-bit elements:
 * small integers summed exactly in fp16 over a range, and arbitrary bf16
 * values, the same bits on every rank (into the hash). */
static int ranges(rt_ring *ring, int rank, size_t n, const float *whole, uint64_t *hash)
{
    int N = rt_ring_size(ring);
    static float y[MAXLEN];
    static uint16_t h[MAXLEN];
    size_t c1 = n / 3 + (n > 4), c2 = 2 * n / 3;
    for (size_t i = 0; i < n; i++)
        y[i] = sinf((float)(i + 1) * (float)(rank + 3) * 0.37f) * 1e-3f * (float)(rank + 1);
    uint32_t fl = 1u << rank;
    CALL(rt_ring_allreduce_range(ring, y, RT_ELEM_F32, n, c2, n, &fl));
    /* flags travel with chunks: an empty range exchanges none */
    CHECK(fl == (c2 < n ? (1u << N) - 1 : 1u << rank), "range allreduce flags %#x", fl);
    for (size_t i = 0; i < c2; i++) /* below the range: this rank's own still */
        CHECK(y[i] == sinf((float)(i + 1) * (float)(rank + 3) * 0.37f) * 1e-3f * (float)(rank + 1),
              "range [%zu, %zu) of %zu touched y[%zu]", c2, n, n, i);
    CALL(rt_ring_allreduce_range(ring, y, RT_ELEM_F32, n, c1, c2, NULL));
    CALL(rt_ring_allreduce_range(ring, y, RT_ELEM_F32, n, 0, c1, NULL));
    CHECK(memcmp(y, whole, n * sizeof(float)) == 0,
          "n=%zu: three ranges summed to other bits than the whole allreduce", n);
    float S = (float)N * (float)(N + 1) / 2.0f;
    for (size_t i = 0; i < n; i++)
        h[i] = rt_f32_to_f16((float)(rank + 1) * (float)(i % 7 + 1));
    CALL(rt_ring_allreduce_range(ring, h, RT_ELEM_F16, n, c1, n, NULL));
    for (size_t i = 0; i < n; i++) {
        float want = (float)(i % 7 + 1) * (i < c1 ? (float)(rank + 1) : S);
        CHECK(rt_f16_to_f32(h[i]) == want, "fp16 range n=%zu h[%zu]=%g, expected %g", n, i,
              (double)rt_f16_to_f32(h[i]), (double)want);
    }
    for (size_t i = 0; i < n; i++)
        h[i] = rt_f32_to_bf16(cosf((float)(i + 1) * (float)(rank + 2) * 0.21f));
    CALL(rt_ring_allreduce_range(ring, h, RT_ELEM_BF16, n, 0, n, NULL));
    *hash ^= fnv(h, n * sizeof *h) * 31u;
    return 0;
}

static int one_pass(rt_ring *ring, int rank, uint64_t *hash)
{
    int N = rt_ring_size(ring);
    static float x[MAXLEN];
    static double d[MAXLEN / 10];
    float S = (float)N * (float)(N + 1) / 2.0f;
    uint64_t hashes = 0;
    for (size_t li = 0; li < NLEN; li++) {
        size_t n = lengths[li];
        /* allreduce, exact */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(rank + 1) * (float)(i % 7 + 1);
        uint32_t fl = 1u << rank;
        CALL(rt_ring_allreduce(ring, x, n, &fl));
        CHECK(fl == (1u << N) - 1, "allreduce flags %#x", fl);
        for (size_t i = 0; i < n; i++)
            CHECK(x[i] == S * (float)(i % 7 + 1), "allreduce n=%zu x[%zu]=%g", n, i, x[i]);
        /* reduce-scatter: my segment, exact */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(rank + 1) * (float)(i % 5 + 1);
        fl = rank == N - 1 ? 4u : 0u;
        CALL(rt_ring_reduce_scatter(ring, x, n, &fl));
        CHECK(fl == 4u, "reduce-scatter flags %#x", fl);
        size_t lo, hi;
        rt_slice(n, N, rank, &lo, &hi);
        for (size_t i = lo; i < hi; i++)
            CHECK(x[i] == S * (float)(i % 5 + 1), "reduce-scatter n=%zu x[%zu]=%g", n, i, x[i]);
        /* all-gather */
        for (size_t i = 0; i < n; i++)
            x[i] = -1.0f;
        for (size_t i = lo; i < hi; i++)
            x[i] = (float)(rank * 1000) + (float)(i % 97);
        fl = 0;
        CALL(rt_ring_all_gather(ring, x, n, &fl));
        for (int q = 0; q < N; q++) {
            size_t a, b;
            rt_slice(n, N, q, &a, &b);
            for (size_t i = a; i < b; i++)
                CHECK(x[i] == (float)(q * 1000) + (float)(i % 97), "all-gather n=%zu x[%zu]=%g",
                      n, i, x[i]);
        }
        /* broadcast from a rank that moves with the length */
        int root = (int)(li % (size_t)N);
        for (size_t i = 0; i < n; i++)
            x[i] = rank == root ? (float)i * 0.5f : NAN;
        CALL(rt_ring_broadcast(ring, x, n * sizeof(float), root));
        for (size_t i = 0; i < n; i++)
            CHECK(x[i] == (float)i * 0.5f, "broadcast from %d n=%zu x[%zu]=%g", root, n, i, x[i]);
        /* float64 allreduce of a shorter vector */
        size_t nd = n / 10;
        for (size_t i = 0; i < nd; i++)
            d[i] = (double)(rank + 1) * 0.25 * (double)(i + 1);
        CALL(rt_ring_allreduce_f64(ring, d, nd));
        for (size_t i = 0; i < nd; i++)
            CHECK(d[i] == (double)S * 0.25 * (double)(i + 1), "f64 allreduce d[%zu]=%g", i, d[i]);
        /* arbitrary floats: every rank must hold bitwise the same sums */
        for (size_t i = 0; i < n; i++)
            x[i] = sinf((float)(i + 1) * (float)(rank + 3) * 0.37f) * 1e-3f * (float)(rank + 1);
        CALL(rt_ring_allreduce(ring, x, n, NULL));
        hashes ^= fnv(x, n * sizeof(float)) + li;
        /* ranges() fails with CHECK's 1 or CALL's 2: not a negative status */
        int rc = ranges(ring, rank, n, x, &hashes);
        if (rc != 0)
            return rc;
    }
    *hash = hashes;
    return 0;
}

struct result {
    uint64_t hash;
    long dropped;
};

static void run_case_as(int n, enum rt_localring_links links, rt_localring_hook hook, bool curve)
{
    struct rt_localring_opts o = {.n = n, .links = links, .chunk_bytes = 4096,
                                  .stall_timeout = 60, .curve = curve};
    struct result res[8];
    memset(res, 0, sizeof res);
    double secs = 3.0;
    int rc = rt_localring_run(&o, battery, hook ? &secs : NULL, hook, NULL, res, sizeof res[0]);
    if (rc < 0)
        fail_msg("N=%d links=%d: %s", n, (int)links, rt_error_detail());
    for (int r = 1; r < n; r++)
        if (res[r].hash != res[0].hash)
            fail_msg("N=%d links=%d: rank %d's sums differ from rank 0's", n, (int)links, r);
    if (hook) {
        long total = 0;
        for (int r = 0; r < n; r++)
            total += res[r].dropped;
        if (curve && total != 0) /* refused in the handshake: none reaches a decoder */
            fail_msg("N=%d, CurveZMQ: %ld messages of a stranger reached the ring", n, total);
        if (!curve && total == 0)
            fail_msg("N=%d: garbage was sent but no rank dropped anything", n);
        printf("N=%d links=%d%s: %ld bad messages dropped, results exact\n", n, (int)links,
               curve ? " CurveZMQ" : "", total);
    }
}

static void run_case(int n, enum rt_localring_links links, rt_localring_hook hook)
{
    run_case_as(n, links, hook, false);
}

static void test_shm(void **state)
{
    (void)state;
    for (int n = 1; n <= 5; n++)
        run_case(n, RT_LINKS_SHM, NULL);
}

static void test_tcp(void **state)
{
    (void)state;
    for (int n = 1; n <= 5; n++)
        run_case(n, RT_LINKS_TCP, NULL);
}

/* The battery where each rank first checks rt_ring_crowded against *arg. */
static int crowded_battery(rt_ring *ring, int rank, int out_fd, void *arg)
{
    CHECK(rt_ring_crowded(ring) == *(const bool *)arg, "crowded is %d, expected %d",
          (int)rt_ring_crowded(ring), (int)*(const bool *)arg);
    return battery(ring, rank, out_fd, NULL);
}

static void run_crowded(int n, enum rt_localring_links links, bool want)
{
    struct rt_localring_opts o = {.n = n, .links = links, .chunk_bytes = 4096,
                                  .stall_timeout = 60};
    struct result res[8];
    memset(res, 0, sizeof res);
    if (rt_localring_run(&o, crowded_battery, &want, NULL, NULL, res, sizeof res[0]) < 0)
        fail_msg("N=%d, crowded %d: %s", n, (int)want, rt_error_detail());
    for (int r = 1; r < n; r++)
        if (res[r].hash != res[0].hash)
            fail_msg("N=%d, crowded: rank %d's sums differ from rank 0's", n, r);
}

/* Ranks on one machine with more ranks than cores ("crowded": each wait
 * yields the core before it sleeps), over raw TCP and shared memory:
 * pinned to one core, any ring of two or more is, whatever the machine;
 * the same exact sums. */
static void test_crowded(void **state)
{
    (void)state;
    cpu_set_t all;
    tu_pin_one_core(&all);
    run_crowded(1, RT_LINKS_TCP, false);
    run_crowded(2, RT_LINKS_TCP, true);
    run_crowded(4, RT_LINKS_TCP, true);
    run_crowded(3, RT_LINKS_SHM, true);
    tu_unpin(&all);
    /* unpinned: crowded exactly when the ranks outnumber the cores */
    const int cores = CPU_COUNT(&all);
    if (cores < 8)
        run_crowded(cores + 1, RT_LINKS_TCP, true);
    run_crowded(2, RT_LINKS_SHM, cores < 2);
}

static void test_mixed(void **state)
{
    (void)state;
    for (int n = 3; n <= 5; n++)
        run_case(n, RT_LINKS_MIXED, NULL);
}

/* A garbage sender per run, started when the endpoints are known. It is a
 * forked process (the parent holds no ZeroMQ context), reaped at exit. */
static pid_t junk_pid = -1;

static void junk_hook(const struct rt_membership *ms, const char *run, void *arg)
{
    (void)arg;
    fflush(NULL);
    junk_pid = fork();
    if (junk_pid == 0) {
        for (int round = 0; round < 3; round++)
            for (int r = 0; r < ms->n; r++)
                junk_blast(ms->m[r].endpoint, ZMQ_PUSH, round == 1 ? run : NULL, 2);
        _exit(0);
    }
}

static void test_garbage(void **state)
{
    (void)state;
    run_case(3, RT_LINKS_TCP, junk_hook);
    int st;
    waitpid(junk_pid, &st, 0);
    run_case(4, RT_LINKS_MIXED, junk_hook);
    waitpid(junk_pid, &st, 0);
    /* with security on, the same garbage is refused before any decoder
     * (an admitted member's garbage is the plain case above: the same
     * decoders, after the handshake) */
    run_case_as(3, RT_LINKS_TCP, junk_hook, true);
    waitpid(junk_pid, &st, 0);
}

/* Ranks whose steps diverged (rank 0 sums 4096 floats, the others 2048):
 * the rank that receives the other's chunk says so at once, naming the
 * cause, instead of waiting out the stall timeout (its neighbour, with no
 * coordinator here to tell it, waits for it: 5 s). Each rank writes 1 when its error names the cause, 2
 * when it completed (it must not), 0 for another error. */
static int diverge(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)arg;
    static float x[4096];
    for (int i = 0; i < 4096; i++)
        x[i] = 1.0f;
    int rc = rt_ring_allreduce(ring, x, rank == 0 ? 4096 : 2048, NULL);
    uint64_t what = rc == 0 ? 2 : strstr(rt_error_detail(), "is in another collective") ? 1 : 0;
    if (rc < 0)
        printf("rank %d: %s\n", rank, rt_error_detail());
    uint64_t pad = 0;
    if (write(out_fd, &what, sizeof what) != (ssize_t)sizeof what ||
        write(out_fd, &pad, sizeof pad) != (ssize_t)sizeof pad)
        return 4;
    return 0;
}

static void test_diverged_ranks(void **state)
{
    (void)state;
    for (int links = RT_LINKS_SHM; links <= RT_LINKS_TCP + 1; links++) {
        /* the last: raw TCP links (no CurveZMQ) */
        bool raw = links > RT_LINKS_TCP;
        struct rt_localring_opts o = {.n = 2,
                                      .links = raw ? RT_LINKS_TCP : (enum rt_localring_links)links,
                                      .chunk_bytes = 4096, .stall_timeout = 5, .curve = !raw};
        struct result res[2];
        memset(res, 0, sizeof res);
        double t0 = rt_now();
        assert_int_equal(rt_localring_run(&o, diverge, NULL, NULL, NULL, res, sizeof res[0]), 0);
        printf("links %d: diverged ranks told in %.2f s\n", links, rt_now() - t0);
        assert_true(res[0].hash != 2 && res[1].hash != 2); /* nobody completed */
        assert_true(res[0].hash == 1 || res[1].hash == 1); /* the cause was named */
    }
}

/* Rank 1 of 3 is SIGKILLed after one allreduce; over raw TCP links its
 * neighbours' next collective fails at once, naming the lost link (no idle
 * callback here: nobody would change the members), not after the 60 s
 * stall timeout. Each survivor writes 1 when it did. */
static int killed(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)arg;
    static float x[300000];
    for (size_t i = 0; i < 300000; i++)
        x[i] = 1.0f;
    int rc = rt_ring_allreduce(ring, x, 300000, NULL);
    if (rank == 1)
        kill(getpid(), SIGKILL);
    double t0 = rt_now();
    if (rc == 0)
        rc = rt_ring_allreduce(ring, x, 300000, NULL);
    uint64_t what[2] = {rc < 0 && strstr(rt_error_detail(), "is lost"), 0};
    printf("rank %d: %s after %.1f ms\n", rank, rc < 0 ? rt_error_detail() : "completed",
           (rt_now() - t0) * 1e3);
    fflush(stdout);
    return write(out_fd, what, sizeof what) == (ssize_t)sizeof what ? 0 : 4;
}

static void test_killed_peer(void **state)
{
    (void)state;
    struct rt_localring_opts o = {.n = 3, .links = RT_LINKS_TCP, .stall_timeout = 60};
    struct result res[3];
    memset(res, 0, sizeof res);
    int rc = rt_localring_run(&o, killed, NULL, NULL, NULL, res, sizeof res[0]);
    assert_true(rc < 0 && strstr(rt_error_detail(), "rank 1 of 3 was killed by signal 9"));
    assert_int_equal(res[0].hash, 1);
    assert_int_equal(res[2].hash, 1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm),
        cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_crowded),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_diverged_ranks),
        cmocka_unit_test(test_killed_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
