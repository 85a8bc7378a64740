/* test_gossip.c — asynchronous pairwise averaging (net/gossip.h) between
 * ranks that are threads of this process, over TCP on 127.0.0.1, each at
 * its own pace: the sum over ranks is preserved and the ranks converge
 * (without local updates), the delta rule keeps local updates in the sum,
 * drains end without deadlock whatever the arrival order, a slow rank
 * does not hold back the fast ones, garbage is dropped without effect and
 * a peer that never answers costs one reply timeout per request. The same
 * with ranks that share memory (gossip_shm.h), alone and mixed with ranks
 * over TCP, and garbage in a shared memory queue. */
#include "config.h"

#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "gossip.h"
#include "gossip_shm.h"
#include "junk.h"
#include "clock.h"
#include "status.h"
#include "transport.h"
#include "wire.h"

#define RUN "0123456789abcdef0123456789abcdef"
#define FOREIGN "fedcba9876543210fedcba9876543210"
#define GEN 3
#define MAXR 4

struct world {
    void *zctx;
    int ranks;
    size_t n;
    rt_gossip *g[MAXR];
    float *x[MAXR];
    const char *ep[MAXR];
};

/* The ranks of the next world_init that share memory (bit r: rank r), and
 * their secrets: random, so that test runs side by side never meet. */
static unsigned shm_mask;
static char shm_secret[MAXR][RT_SHM_SECRET_MAX];
static bool shm_keep_secrets; /* the test drew them already */

static void make_secrets(void)
{
    static unsigned count;
    for (int r = 0; r < MAXR; r++)
        snprintf(shm_secret[r], sizeof shm_secret[r], "%08x%04x%04x", (unsigned)getpid(),
                 (unsigned)(junk_rand() & 0xffff), ++count & 0xffff);
}

/* Whether this machine has a /dev/shm to make queues in; the shared
 * memory tests skip without one (the workers then use TCP). */
static bool shm_usable(void)
{
    return access("/dev/shm", W_OK) == 0;
}

/* Names in /dev/shm of this process's secrets: none once every queue is
 * mapped by its producer and a step of its owner went by. */
static int shm_names_left(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int left = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        for (int r = 0; r < MAXR; r++)
            left += strstr(e->d_name, shm_secret[r]) != NULL;
    closedir(d);
    return left;
}

static void world_init(struct world *w, int ranks, size_t n, double reply_timeout,
                       uint64_t seed)
{
    memset(w, 0, sizeof *w);
    const char *secrets[MAXR] = {NULL};
    if (shm_mask) {
        if (!shm_keep_secrets)
            make_secrets();
        for (int r = 0; r < ranks; r++)
            if (shm_mask >> r & 1)
                secrets[r] = shm_secret[r];
    }
    w->zctx = zmq_ctx_new();
    assert_non_null(w->zctx);
    w->ranks = ranks;
    w->n = n;
    for (int r = 0; r < ranks; r++) {
        struct rt_gossip_config c = {.zctx = w->zctx, .run = RUN, .gen = GEN, .rank = r,
                                     .world = ranks, .bind_ip = "127.0.0.1", .n = n,
                                     .seed = seed, .reply_timeout = reply_timeout,
                                     .shm_secrets = shm_mask ? secrets : NULL};
        w->g[r] = rt_gossip_new(&c);
        if (!w->g[r])
            fail_msg("rt_gossip_new rank %d: %s", r, rt_error_detail());
        w->ep[r] = rt_gossip_endpoint(w->g[r]);
        assert_int_equal(strncmp(w->ep[r], "tcp://127.0.0.1:", 16), 0);
        w->x[r] = malloc(n * sizeof(float));
        assert_non_null(w->x[r]);
        /* rank r's values in [r, r+1): far apart at first */
        tu_fill_uniform(w->x[r], n, (float)r, (float)r + 1.0f, seed * 31 + (uint64_t)r);
    }
    /* as the worker does: who could make its queues is told to all */
    bool ready[MAXR];
    int ok = 0;
    for (int r = 0; r < ranks; r++) {
        ready[r] = rt_gossip_shm_ready(w->g[r]);
        ok += ready[r] && (shm_mask >> r & 1);
    }
    for (int r = 0; r < ranks; r++)
        if (rt_gossip_connect(w->g[r], w->ep, NULL, ready) < 0)
            fail_msg("rt_gossip_connect rank %d: %s", r, rt_error_detail());
    for (int r = 0; r < ranks; r++)
        assert_int_equal(rt_gossip_shm_links(w->g[r]),
                         (shm_mask >> r & 1) && ready[r] ? ok - 1 : 0);
}

static void world_free(struct world *w)
{
    if (shm_mask) /* every rank stepped: no queue's name is left */
        assert_int_equal(shm_names_left(), 0);
    for (int r = 0; r < w->ranks; r++) {
        rt_gossip_destroy(&w->g[r]);
        assert_null(w->g[r]);
        free(w->x[r]);
    }
    zmq_ctx_term(w->zctx);
}

/* Per-element sum over ranks, in double. */
static void sums(const struct world *w, double *s)
{
    for (size_t k = 0; k < w->n; k++) {
        s[k] = 0.0;
        for (int r = 0; r < w->ranks; r++)
            s[k] += (double)w->x[r][k];
    }
}

/* Root mean square distance of the ranks' vectors from their mean. */
static double consensus(const struct world *w)
{
    double acc = 0.0;
    for (size_t k = 0; k < w->n; k++) {
        double m = 0.0;
        for (int r = 0; r < w->ranks; r++)
            m += (double)w->x[r][k];
        m /= w->ranks;
        for (int r = 0; r < w->ranks; r++)
            acc += ((double)w->x[r][k] - m) * ((double)w->x[r][k] - m);
    }
    return sqrt(acc / ((double)w->ranks * (double)w->n));
}

/* max |a - b| / max |b| */
static double rel_diff(const double *a, const double *b, size_t n)
{
    double d = 0.0, m = 0.0;
    for (size_t k = 0; k < n; k++) {
        d = fmax(d, fabs(a[k] - b[k]));
        m = fmax(m, fabs(b[k]));
    }
    return d / m;
}

/* ---- a rank's thread ---------------------------------------------------------------- */

struct plan {
    double secs;         /* stepping per epoch */
    int sleep_us;        /* per step: this rank's pace */
    bool initiate;
    const float *update; /* added to x after every step ("training"), or NULL */
    double *added;       /* what adding `update` changed in x, in double (float
                            rounding included: the sum is then checked exactly) */
    double drain_delay;  /* seconds between the last step and the drain */
    int epochs;
};

struct rank_run {
    struct world *w;
    int r;
    struct plan p;
    _Atomic int *hold; /* keep stepping while set (garbage still coming) */
    int rc;
    char err[400];
    long steps, avgs;
    double drain_s;
};

static void *rank_main(void *arg)
{
    struct rank_run *rr = arg;
    rt_gossip *g = rr->w->g[rr->r];
    float *x = rr->w->x[rr->r];
    size_t n = rr->w->n;
    for (int e = 0; e < rr->p.epochs; e++) {
        double t0 = rt_now();
        while (rt_now() - t0 < rr->p.secs || (rr->hold && atomic_load(rr->hold))) {
            int rc = rt_gossip_step(g, x, rr->p.initiate);
            if (rc < 0) {
                rr->rc = rc;
                snprintf(rr->err, sizeof rr->err, "step: %s", rt_error_detail());
                return NULL;
            }
            rr->avgs += rc;
            rr->steps++;
            if (rr->p.update)
                for (size_t k = 0; k < n; k++) {
                    float old = x[k];
                    x[k] += rr->p.update[k];
                    rr->p.added[k] += (double)x[k] - (double)old;
                }
            if (rr->p.sleep_us)
                usleep((useconds_t)rr->p.sleep_us);
        }
        if (rr->p.drain_delay > 0)
            usleep((useconds_t)(rr->p.drain_delay * 1e6));
        double d0 = rt_now();
        int rc = rt_gossip_drain(g, x, (uint64_t)e, 10.0);
        rr->drain_s = rt_now() - d0;
        if (rc != RT_OK) {
            rr->rc = rc < 0 ? rc : RT_ERR_ARG;
            snprintf(rr->err, sizeof rr->err, "drain epoch %d: %d: %s", e, rc, rt_error_detail());
            return NULL;
        }
    }
    return NULL;
}

static void run_ranks(struct world *w, const struct plan *plans, struct rank_run *rr,
                      _Atomic int *hold)
{
    pthread_t th[MAXR];
    for (int r = 0; r < w->ranks; r++) {
        memset(&rr[r], 0, sizeof rr[r]);
        rr[r].w = w;
        rr[r].r = r;
        rr[r].p = plans[r];
        rr[r].hold = hold;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &rr[r]), 0);
    }
    for (int r = 0; r < w->ranks; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < w->ranks; r++)
        if (rr[r].rc < 0)
            fail_msg("rank %d: %s", r, rr[r].err);
}

static void print_stats(const char *what, const struct world *w, const struct rank_run *rr)
{
    for (int r = 0; r < w->ranks; r++) {
        struct rt_gossip_stats s;
        rt_gossip_stats(w->g[r], &s);
        printf("%s rank %d: %ld steps, %ld averagings; sent %ld answered %ld applied %ld "
               "abandoned %ld dropped %ld late %ld refused %ld; last drain %.3f s\n",
               what, r, rr[r].steps, rr[r].avgs, s.sent, s.answered, s.applied, s.abandoned,
               s.dropped, s.late, s.refused, rr[r].drain_s);
    }
}

/* Exchanges in flight cannot outlive a drain: sent == applied + abandoned
 * and, over all ranks, sent == answered when nothing was abandoned. */
static void check_books(const struct world *w)
{
    long sent = 0, answered = 0;
    for (int r = 0; r < w->ranks; r++) {
        struct rt_gossip_stats s;
        rt_gossip_stats(w->g[r], &s);
        assert_int_equal(s.abandoned, 0);
        assert_int_equal(s.sent, s.applied);
        assert_false(rt_gossip_outstanding(w->g[r]));
        sent += s.sent;
        answered += s.answered;
    }
    assert_int_equal(sent, answered);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_single(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 1, 10, 0, 1);
    float before[10];
    memcpy(before, w.x[0], sizeof before);
    for (int i = 0; i < 5; i++)
        assert_int_equal(rt_gossip_step(w.g[0], w.x[0], true), 0);
    /* a lone rank waits for nobody: even a deadline already past is met */
    assert_int_equal(rt_gossip_drain(w.g[0], w.x[0], 0, 1e-9), 0);
    assert_memory_equal(before, w.x[0], sizeof before);
    world_free(&w);
}

/* No local updates, four paces: the sum holds and the ranks agree. */
static void test_mass(void **state)
{
    (void)state;
    struct world w;
    size_t n = 10007;
    world_init(&w, 4, n, 0, 11);
    double *s0 = malloc(n * sizeof *s0), *s1 = malloc(n * sizeof *s1);
    sums(&w, s0);
    double d0 = consensus(&w);
    struct plan p[4] = {{.secs = 1.0, .sleep_us = 50, .initiate = true, .epochs = 1},
                        {.secs = 1.0, .sleep_us = 300, .initiate = true, .epochs = 1},
                        {.secs = 1.0, .sleep_us = 1000, .initiate = true, .epochs = 1},
                        {.secs = 1.0, .sleep_us = 3000, .initiate = true, .epochs = 1}};
    struct rank_run rr[4];
    run_ranks(&w, p, rr, NULL);
    print_stats("mass", &w, rr);
    sums(&w, s1);
    double rel = rel_diff(s1, s0, n), d1 = consensus(&w);
    printf("mass: sum relative error %.2e, consensus distance %.3g -> %.3g\n", rel, d0, d1);
    assert_true(rel <= 1e-5);
    assert_true(d1 * 100.0 <= d0);
    check_books(&w);
    free(s0);
    free(s1);
    world_free(&w);
}

/* Every rank adds its own vector after each step: the sum is the initial
 * one plus everything added, although requests go out, params move on and
 * replies come back in between. */
static void test_delta(void **state)
{
    (void)state;
    struct world w;
    size_t n = 3001;
    world_init(&w, 3, n, 0, 22);
    double *s0 = malloc(n * sizeof *s0), *s1 = malloc(n * sizeof *s1);
    float *u[3];
    double *added[3];
    sums(&w, s0);
    struct plan p[3];
    for (int r = 0; r < 3; r++) {
        u[r] = malloc(n * sizeof(float));
        added[r] = calloc(n, sizeof(double));
        for (size_t k = 0; k < n; k++)
            u[r][k] = 1e-3f * (float)(r + 1) * (float)((int)(k % 7) - 3);
        p[r] = (struct plan){.secs = 1.0, .sleep_us = 100 + 700 * r, .initiate = true,
                             .update = u[r], .added = added[r], .epochs = 1};
    }
    struct rank_run rr[3];
    run_ranks(&w, p, rr, NULL);
    print_stats("delta", &w, rr);
    for (size_t k = 0; k < n; k++)
        for (int r = 0; r < 3; r++)
            s0[k] += added[r][k];
    sums(&w, s1);
    double rel = rel_diff(s1, s0, n);
    printf("delta: sum relative error %.2e (updates included)\n", rel);
    assert_true(rel <= 1e-5);
    check_books(&w);
    for (int r = 0; r < 3; r++) {
        struct rt_gossip_stats s;
        rt_gossip_stats(w.g[r], &s);
        assert_true(s.applied > 0);
        free(u[r]);
        free(added[r]);
    }
    free(s0);
    free(s1);
    world_free(&w);
}

/* Ranks reach the drain up to a second apart while the others still step,
 * twice in a row with no barrier in between; rank 3 never initiates. */
static void test_drain(void **state)
{
    (void)state;
    struct world w;
    size_t n = 257;
    world_init(&w, 4, n, 0, 33);
    double *s0 = malloc(n * sizeof *s0), *s1 = malloc(n * sizeof *s1);
    sums(&w, s0);
    struct plan p[4] = {{.secs = 0.1, .sleep_us = 200, .initiate = true, .epochs = 2},
                        {.secs = 0.4, .sleep_us = 500, .initiate = true, .epochs = 2},
                        {.secs = 0.2, .sleep_us = 100, .initiate = true, .drain_delay = 0.3,
                         .epochs = 2},
                        {.secs = 0.8, .sleep_us = 300, .initiate = false, .epochs = 2}};
    struct rank_run rr[4];
    run_ranks(&w, p, rr, NULL);
    print_stats("drain", &w, rr);
    sums(&w, s1);
    double rel = rel_diff(s1, s0, n);
    printf("drain: sum relative error %.2e\n", rel);
    assert_true(rel <= 1e-5);
    check_books(&w);
    struct rt_gossip_stats s;
    rt_gossip_stats(w.g[3], &s);
    assert_int_equal(s.sent, 0);
    assert_true(s.answered > 0);
    /* draining an epoch again is a caller's mistake, said so */
    assert_int_equal(rt_gossip_drain(w.g[0], w.x[0], 0, 1.0), RT_ERR_ARG);
    free(s0);
    free(s1);
    world_free(&w);
}

/* A rank that sleeps 4x longer per step does not hold back the others. */
static void test_slow(void **state)
{
    (void)state;
    double rate[2][2];
    for (int with_slow = 1; with_slow >= 0; with_slow--) {
        struct world w;
        int ranks = with_slow ? 3 : 2;
        size_t n = 4096;
        world_init(&w, ranks, n, 0, 44);
        struct plan p[3];
        for (int r = 0; r < ranks; r++)
            p[r] = (struct plan){.secs = 1.0, .sleep_us = r == 2 ? 4000 : 1000,
                                 .initiate = true, .epochs = 1};
        struct rank_run rr[3];
        run_ranks(&w, p, rr, NULL);
        print_stats(with_slow ? "slow (with)" : "slow (without)", &w, rr);
        for (int r = 0; r < 2; r++)
            rate[with_slow][r] = (double)rr[r].steps / p[r].secs;
        if (with_slow) {
            assert_true(rr[0].steps >= 2 * rr[2].steps);
            assert_true(rr[1].steps >= 2 * rr[2].steps);
            printf("slow: the slow rank did %ld steps\n", rr[2].steps);
        }
        check_books(&w);
        world_free(&w);
    }
    printf("slow: fast ranks' steps/s with the slow one %.0f, %.0f; without %.0f, %.0f\n",
           rate[1][0], rate[1][1], rate[0][0], rate[0][1]);
}

/* ---- garbage ------------------------------------------------------------------------ */

struct junk {
    const char *endpoint;
    int world;
    _Atomic int *hold;
    int sent; /* targeted messages, each of which must be dropped */
};

static void jsend(void *s, rt_wire_writer *w, const void *frame, size_t n, int *count)
{
    zmq_send(s, w->data, w->len, frame ? ZMQ_SNDMORE : 0);
    if (frame)
        zmq_send(s, frame, n, 0);
    (*count)++;
}

/* A gossip map with the given field values; "skip" leaves one out. */
static void jmap(rt_wire_writer *w, const char *run, const char *type, uint64_t gen,
                 const char *kind, uint64_t from, uint64_t seq, uint64_t n, const char *skip)
{
    int k = 6 - (skip ? 1 : 0);
    rt_wire_begin(w, run, type, k);
    if (!skip || strcmp(skip, "gen"))
        rt_wire_put_uint(w, "gen", gen);
    if (!skip || strcmp(skip, "kind"))
        rt_wire_put_str(w, "kind", kind);
    if (!skip || strcmp(skip, "from"))
        rt_wire_put_uint(w, "from", from);
    if (!skip || strcmp(skip, "seq"))
        rt_wire_put_uint(w, "seq", seq);
    if (!skip || strcmp(skip, "epoch"))
        rt_wire_put_uint(w, "epoch", 0);
    if (!skip || strcmp(skip, "n"))
        rt_wire_put_uint(w, "n", n);
    if (rt_wire_end(w) < 0) /* on the junk thread: no cmocka asserts here */
        abort();
}

static void *junk_main(void *arg)
{
    struct junk *j = arg;
    size_t n = 1000;
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_PUSH);
    int linger = 2000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(s, j->endpoint);
    static float good[1001], nan_[1001]; /* one more: the frame of n + 1 */
    for (size_t i = 0; i <= n; i++) {
        good[i] = 1e6f;
        nan_[i] = NAN;
    }
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    int c = 0;
    for (int round = 0; round < 3; round++) {
        /* a foreign run, a stale generation, another size, a wrong frame */
        jmap(&w, FOREIGN, "gossip", GEN, "req", 1, 1, n, NULL);
        jsend(s, &w, good, n * 4, &c);
        jmap(&w, RUN, "gossip", GEN + 1, "req", 1, 1, n, NULL);
        jsend(s, &w, good, n * 4, &c);
        jmap(&w, RUN, "gossip", GEN, "req", 1, 1, n + 1, NULL);
        jsend(s, &w, good, (n + 1) * 4, &c);
        jmap(&w, RUN, "gossip", GEN, "req", 1, 1, n, NULL);
        jsend(s, &w, good, n * 4 - 4, &c);
        jmap(&w, RUN, "gossip", GEN, "rep", 1, 1, n, NULL);
        jsend(s, &w, good, 3, &c);
        /* no payload for a request, a payload for "drained", 3 frames */
        jmap(&w, RUN, "gossip", GEN, "req", 1, 1, n, NULL);
        jsend(s, &w, NULL, 0, &c);
        jmap(&w, RUN, "gossip", GEN, "drained", 1, 1, n, NULL);
        jsend(s, &w, good, n * 4, &c);
        jmap(&w, RUN, "gossip", GEN, "req", 1, 1, n, NULL);
        zmq_send(s, w.data, w.len, ZMQ_SNDMORE);
        zmq_send(s, good, n * 4, ZMQ_SNDMORE);
        jsend(s, &w, good, n * 4, &c);
        /* ranks that do not exist or are the receiver itself, a kind and a
         * type nobody knows, missing fields */
        jmap(&w, RUN, "gossip", GEN, "req", (uint64_t)j->world, 1, n, NULL);
        jsend(s, &w, good, n * 4, &c);
        jmap(&w, RUN, "gossip", GEN, "req", 0, 1, n, NULL);
        jsend(s, &w, good, n * 4, &c);
        jmap(&w, RUN, "gossip", GEN, "avg", 1, 1, n, NULL);
        jsend(s, &w, good, n * 4, &c);
        jmap(&w, RUN, "chunk", GEN, "req", 1, 1, n, NULL);
        jsend(s, &w, good, n * 4, &c);
        static const char *const fields[] = {"gen", "kind", "from", "seq", "epoch", "n"};
        for (int f = 0; f < 6; f++) {
            jmap(&w, RUN, "gossip", GEN, "req", 1, 1, n, fields[f]);
            jsend(s, &w, nan_, n * 4, &c);
        }
        /* a reply to a request nobody sent; a request of an epoch long gone
         * cannot be made here (the receivers are in epoch 0) */
        jmap(&w, RUN, "gossip", GEN, "rep", 1, 1u << 30, n, NULL);
        jsend(s, &w, nan_, n * 4, &c);
        /* random bytes with a payload */
        char rnd[64];
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (char)junk_rand();
        zmq_send(s, rnd, sizeof rnd, ZMQ_SNDMORE);
        zmq_send(s, good, n * 4, 0);
        c++;
        usleep(20000);
    }
    rt_wire_writer_free(&w);
    j->sent = c;
    zmq_close(s);
    zmq_ctx_term(ctx); /* waits (linger) until everything left */
    /* the generic garbage of tests/junk.h: random frames, bombs, other
     * types, an oversized frame, raw TCP */
    junk_blast(j->endpoint, ZMQ_PUSH, RUN, 1);
    usleep(200000);
    atomic_store(j->hold, 0);
    return NULL;
}

static void test_garbage(void **state)
{
    (void)state;
    struct world w;
    size_t n = 1000;
    world_init(&w, 3, n, 0, 55);
    double *s0 = malloc(n * sizeof *s0), *s1 = malloc(n * sizeof *s1);
    sums(&w, s0);
    double d0 = consensus(&w);
    _Atomic int hold = 1;
    struct junk j = {.endpoint = w.ep[0], .world = 3, .hold = &hold};
    pthread_t jt;
    assert_int_equal(pthread_create(&jt, NULL, junk_main, &j), 0);
    struct plan p[3];
    for (int r = 0; r < 3; r++)
        p[r] = (struct plan){.secs = 0.5, .sleep_us = 300 + 400 * r, .initiate = true,
                             .epochs = 1};
    struct rank_run rr[3];
    run_ranks(&w, p, rr, &hold);
    pthread_join(jt, NULL);
    print_stats("garbage", &w, rr);
    struct rt_gossip_stats s;
    rt_gossip_stats(w.g[0], &s);
    printf("garbage: %d targeted bad messages sent, %ld dropped\n", j.sent, s.dropped);
    assert_true(s.dropped >= j.sent);
    sums(&w, s1);
    double rel = rel_diff(s1, s0, n), d1 = consensus(&w);
    printf("garbage: sum relative error %.2e, consensus %.3g -> %.3g\n", rel, d0, d1);
    assert_true(rel <= 1e-5);
    assert_true(d1 * 100.0 <= d0);
    for (int r = 0; r < 3; r++)
        for (size_t k = 0; k < n; k++)
            assert_true(isfinite(w.x[r][k]) && w.x[r][k] < 10.0f);
    check_books(&w);
    free(s0);
    free(s1);
    world_free(&w);
}

/* ---- a peer that never answers ------------------------------------------------------- */

static void test_reply_timeout(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    size_t n = 64;
    /* rank 1: a bound PULL that nobody reads for now */
    void *mute = rt_zsock_new(ctx, ZMQ_PULL, 0, 0);
    char mute_ep[RT_ENDPOINT_MAX];
    assert_int_equal(rt_zsock_bind(mute, "tcp://127.0.0.1:*", mute_ep, sizeof mute_ep), RT_OK);
    struct rt_gossip_config c = {.zctx = ctx, .run = RUN, .gen = GEN, .rank = 0, .world = 2,
                                 .bind_ip = "127.0.0.1", .n = n, .seed = 7,
                                 .reply_timeout = 0.3};
    rt_gossip *g = rt_gossip_new(&c);
    assert_non_null(g);
    const char *eps[2] = {NULL, mute_ep};
    assert_int_equal(rt_gossip_connect(g, eps, NULL, NULL), RT_OK);
    float x[64], before[64];
    tu_fill_uniform(x, n, -1.0f, 1.0f, 66);
    memcpy(before, x, sizeof x);
    /* step with requests until one is abandoned: the rank goes on */
    struct rt_gossip_stats s;
    long steps = 0;
    double t0 = rt_now();
    do {
        assert_true(rt_gossip_step(g, x, true) >= 0);
        steps++;
        usleep(5000);
        rt_gossip_stats(g, &s);
    } while (s.abandoned == 0 && rt_now() - t0 < 5.0);
    double took = rt_now() - t0;
    printf("timeout: abandoned after %.2f s and %ld steps (reply timeout 0.3 s)\n", took, steps);
    assert_int_equal(s.abandoned, 1);
    /* not before its reply timeout; and the rank kept stepping while the
     * request was out (a step that waited for the reply would make 1 or 2) */
    assert_true(took >= 0.3);
    assert_true(steps >= 3);
    assert_memory_equal(x, before, sizeof x);
    /* the next request went out at once; let it be abandoned too, then stop */
    t0 = rt_now();
    while (s.abandoned < 2 && rt_now() - t0 < 5.0) {
        assert_true(rt_gossip_step(g, x, false) >= 0);
        usleep(5000);
        rt_gossip_stats(g, &s);
    }
    assert_int_equal(s.sent, 2);
    assert_int_equal(s.abandoned, 2);
    assert_false(rt_gossip_outstanding(g));

    /* the mute peer wakes up: it reads both requests and answers the last
     * one properly (the first is forgotten: its reply must be dropped) */
    rt_zframes fr;
    rt_zframes_init(&fr);
    rt_wire_msg msg;
    rt_wire_msg_init(&msg);
    uint64_t seq[2];
    float theirs[64], mine_sent[64];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rt_zframes_recv(mute, &fr, 0), 1);
        assert_int_equal(fr.n, 2);
        assert_int_equal(rt_wire_parse(&msg, rt_zframe_data(&fr, 0), rt_zframe_size(&fr, 0),
                                       RUN, false), RT_OK);
        assert_int_equal(rt_wire_get_uint(rt_wire_root(&msg), "seq", 0, UINT64_MAX, &seq[i]),
                         RT_OK);
        assert_int_equal(rt_zframe_size(&fr, 1), sizeof mine_sent);
        memcpy(mine_sent, rt_zframe_data(&fr, 1), sizeof mine_sent);
    }
    assert_memory_equal(mine_sent, before, sizeof before);
    void *back = rt_zsock_new(ctx, ZMQ_PUSH, 0, 0);
    assert_int_equal(rt_zsock_connect(back, rt_gossip_endpoint(g)), RT_OK);
    tu_fill_uniform(theirs, n, 5.0f, 6.0f, 77);
    float avg[64];
    for (size_t k = 0; k < n; k++)
        avg[k] = (theirs[k] + mine_sent[k]) * 0.5f;
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    for (int i = 0; i < 2; i++) {
        rt_wire_begin(&w, RUN, "gossip", 6);
        rt_wire_put_uint(&w, "gen", GEN);
        rt_wire_put_str(&w, "kind", "rep");
        rt_wire_put_uint(&w, "from", 1);
        rt_wire_put_uint(&w, "seq", seq[i]);
        rt_wire_put_uint(&w, "epoch", 0);
        rt_wire_put_uint(&w, "n", n);
        assert_int_equal(rt_wire_end(&w), RT_OK);
        const void *f[1] = {avg};
        size_t fn[1] = {sizeof avg};
        assert_int_equal(rt_zsend_msg(back, &w, f, fn, 1), RT_OK);
    }
    t0 = rt_now();
    do {
        assert_true(rt_gossip_step(g, x, false) >= 0);
        usleep(2000);
        rt_gossip_stats(g, &s);
    } while ((s.late < 1 || s.dropped < 1) && rt_now() - t0 < 5.0);
    assert_int_equal(s.late, 1);
    assert_int_equal(s.applied, 1);
    assert_int_equal(s.dropped, 1);
    /* params += avg - sent, and params were still what was sent */
    for (size_t k = 0; k < n; k++)
        assert_float_equal(x[k], before[k] + (avg[k] - before[k]), 1e-6);

    /* a drain with a peer that never says "drained" times out, naming it */
    t0 = rt_now();
    int rc = rt_gossip_drain(g, x, 0, 0.5);
    printf("timeout: drain: %s\n", rt_error_detail());
    assert_int_equal(rc, RT_ERR_TIMEOUT);
    assert_non_null(strstr(rt_error_detail(), "rank 1"));
    assert_true(rt_now() - t0 >= 0.5);

    rt_wire_writer_free(&w);
    rt_wire_msg_free(&msg);
    rt_zframes_close(&fr);
    rt_zsock_close(&back);
    rt_zsock_close(&mute);
    rt_gossip_destroy(&g);
    zmq_ctx_term(ctx);
}

/* ---- shared memory ------------------------------------------------------------------ */

/* A test of the TCP worlds again, the ranks of `mask` sharing memory. */
static void on_shm(void **state, unsigned mask, void (*test)(void **))
{
    if (!shm_usable())
        skip();
    shm_mask = mask;
    test(state);
    shm_mask = 0;
}

/* All four ranks on one host: every exchange through shared memory. */
static void test_mass_shm(void **state) { on_shm(state, 0xf, test_mass); }

/* Ranks 0 and 1 share memory, rank 2 is elsewhere: both kinds of link at
 * once keep the sum. */
static void test_delta_mixed(void **state) { on_shm(state, 0x3, test_delta); }

/* The drain's order ("drained" after the last request on each link) holds
 * on shared memory queues too; rank 3 over TCP. */
static void test_drain_mixed(void **state) { on_shm(state, 0x7, test_drain); }

/* Rank 1 of three cannot make its queues (a name taken, as a full
 * /dev/shm would fail it): it says so, and its pairs go over ZeroMQ while
 * ranks 0 and 2 keep theirs; the sum holds. */
static void test_shm_fallback(void **state)
{
    if (!shm_usable())
        skip();
    make_secrets();
    char name[128];
    snprintf(name, sizeof name, "/ragtag-%s-g%d-gossip0", shm_secret[1], GEN);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    close(fd);
    shm_keep_secrets = true; /* world_init must use the secrets drawn above */
    shm_mask = 0x7;
    struct world w;
    size_t n = 1001;
    world_init(&w, 3, n, 0, 66);
    assert_false(rt_gossip_shm_ready(w.g[1]));
    assert_true(rt_gossip_shm_ready(w.g[0]) && rt_gossip_shm_ready(w.g[2]));
    assert_int_equal(rt_gossip_shm_links(w.g[0]), 1);
    assert_int_equal(rt_gossip_shm_links(w.g[1]), 0);
    double *s0 = malloc(n * sizeof *s0), *s1 = malloc(n * sizeof *s1);
    sums(&w, s0);
    struct plan p[3];
    for (int r = 0; r < 3; r++)
        p[r] = (struct plan){.secs = 0.5, .sleep_us = 200 + 300 * r, .initiate = true,
                             .epochs = 1};
    struct rank_run rr[3];
    run_ranks(&w, p, rr, NULL);
    print_stats("fallback", &w, rr);
    sums(&w, s1);
    assert_true(rel_diff(s1, s0, n) <= 1e-5);
    check_books(&w);
    struct rt_gossip_stats s;
    rt_gossip_stats(w.g[1], &s);
    assert_true(s.sent > 0 && s.answered > 0); /* rank 1 took part, over ZeroMQ */
    shm_unlink(name);
    world_free(&w);
    free(s0);
    free(s1);
    shm_mask = 0;
    shm_keep_secrets = false;
}

/* Queue msg (and a payload of n floats unless NULL) as rank 1; step rank 0
 * once: it must be dropped, x untouched. */
static void shm_junk(rt_gossip *g, struct rt_gshm *fake, const struct rt_gshm_msg *m,
                     const float *payload, float *x, const float *before, size_t n, long *dropped)
{
    assert_int_equal(rt_gshm_send(fake, 0, m, payload), 1);
    assert_int_equal(rt_gossip_step(g, x, false), 0);
    struct rt_gossip_stats s;
    rt_gossip_stats(g, &s);
    assert_int_equal(s.dropped, ++*dropped);
    assert_memory_equal(x, before, n * sizeof *x);
}

/* Rank 0 of two, rank 1 played by hand through its queues: every wrong
 * field is dropped and counted, a request is answered through the queue. */
static void test_garbage_shm(void **state)
{
    (void)state;
    if (!shm_usable())
        skip();
    void *ctx = zmq_ctx_new();
    enum { N = 100 };
    make_secrets();
    const char *secrets[2] = {shm_secret[0], shm_secret[1]};
    struct rt_gossip_config c = {.zctx = ctx, .run = RUN, .gen = GEN, .rank = 0, .world = 2,
                                 .bind_ip = "127.0.0.1", .n = N, .seed = 8,
                                 .shm_secrets = secrets};
    rt_gossip *g = rt_gossip_new(&c);
    assert_non_null(g);
    struct rt_gshm fake;
    assert_int_equal(rt_gshm_create(&fake, RUN, GEN, 1, 2, N * sizeof(float), secrets), RT_OK);
    const char *eps[2] = {rt_gossip_endpoint(g), "tcp://127.0.0.1:9"}; /* never used */
    assert_int_equal(rt_gossip_connect(g, eps, NULL, NULL), RT_OK);
    assert_int_equal(rt_gshm_open(&fake, RUN, GEN, secrets, 1.0), RT_OK);
    assert_int_equal(rt_gossip_shm_links(g), 1);
    float x[N], before[N], theirs[N];
    tu_fill_uniform(x, N, -1.0f, 1.0f, 88);
    tu_fill_uniform(theirs, N, 3.0f, 4.0f, 89);
    memcpy(before, x, sizeof x);
    long dropped = 0;
    const struct rt_gshm_msg req = {.kind = 0, .from = 1, .gen = GEN, .seq = 1, .epoch = 0,
                                    .n = N};
    struct rt_gshm_msg m = req;
    m.gen = GEN + 1; /* a stale generation */
    shm_junk(g, &fake, &m, theirs, x, before, N, &dropped);
    m = req;
    m.from = 0; /* another rank's name on rank 1's queue */
    shm_junk(g, &fake, &m, theirs, x, before, N, &dropped);
    m = req;
    m.n = N + 1;
    shm_junk(g, &fake, &m, theirs, x, before, N, &dropped);
    m = req;
    m.kind = 7;
    shm_junk(g, &fake, &m, theirs, x, before, N, &dropped);
    shm_junk(g, &fake, &req, NULL, x, before, N, &dropped); /* a request without payload */
    m = req;
    m.kind = 2; /* "drained" with a payload */
    shm_junk(g, &fake, &m, theirs, x, before, N, &dropped);
    m = req;
    m.kind = 1; /* a reply to a request never made */
    shm_junk(g, &fake, &m, theirs, x, before, N, &dropped);
    /* a slot that is no gossip message at all */
    rt_shm_slot_to_fill(fake.out[0]);
    struct rt_shm_desc d = {.op = 0, .t = 1, .sig = 0x12345678u, .bytes = 4};
    rt_shm_publish(fake.out[0], &d);
    assert_int_equal(rt_gossip_step(g, x, false), 0);
    /* a message over ZeroMQ that says it is from rank 1, whose messages
     * come through its queue only */
    void *push = rt_zsock_new(ctx, ZMQ_PUSH, 0, 0);
    assert_int_equal(rt_zsock_connect(push, rt_gossip_endpoint(g)), RT_OK);
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    jmap(&w, RUN, "gossip", GEN, "req", 1, 1, N, NULL);
    const void *f[1] = {theirs};
    size_t fn[1] = {sizeof theirs};
    assert_int_equal(rt_zsend_msg(push, &w, f, fn, 1), RT_OK);
    struct rt_gossip_stats s;
    double t0 = rt_now();
    do {
        assert_int_equal(rt_gossip_step(g, x, false), 0);
        rt_gossip_stats(g, &s);
    } while (s.dropped < dropped + 2 && rt_now() - t0 < 5.0);
    assert_int_equal(s.dropped, dropped + 2);
    assert_memory_equal(x, before, sizeof x);
    /* a good request: answered with the average, through rank 1's queue */
    assert_int_equal(rt_gshm_send(&fake, 0, &req, theirs), 1);
    assert_int_equal(rt_gossip_step(g, x, false), 1);
    struct rt_gshm_msg rep;
    const float *avg;
    size_t bytes;
    char why[200];
    assert_int_equal(rt_gshm_peek(&fake, 0, &rep, &avg, &bytes, why, sizeof why), 1);
    assert_int_equal(rep.kind, 1);
    assert_int_equal(rep.from, 0);
    assert_int_equal(rep.seq, 1);
    assert_int_equal(bytes, sizeof theirs);
    for (int k = 0; k < N; k++) {
        assert_true(avg[k] == (before[k] + theirs[k]) * 0.5f);
        assert_true(x[k] == avg[k]);
    }
    rt_gshm_consume(&fake, 0);
    assert_int_equal(shm_names_left(), 0);
    rt_wire_writer_free(&w);
    rt_zsock_close(&push);
    rt_gshm_close(&fake);
    rt_gossip_destroy(&g);
    zmq_ctx_term(ctx);
}

/* Wrong configurations are refused with a detail. */
static void test_config(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    struct rt_gossip_config c = {.zctx = ctx, .run = "not-a-run", .rank = 0, .world = 2, .n = 4};
    assert_null(rt_gossip_new(&c));
    c.run = RUN;
    c.rank = 2;
    assert_null(rt_gossip_new(&c));
    c.rank = 0;
    c.n = 0;
    assert_null(rt_gossip_new(&c));
    zmq_ctx_term(ctx);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_mass),
        cmocka_unit_test(test_delta),
        cmocka_unit_test(test_drain),
        cmocka_unit_test(test_slow),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_reply_timeout),
        cmocka_unit_test(test_mass_shm),
        cmocka_unit_test(test_delta_mixed),
        cmocka_unit_test(test_drain_mixed),
        cmocka_unit_test(test_garbage_shm),
        cmocka_unit_test(test_shm_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
