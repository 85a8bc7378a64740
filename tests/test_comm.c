/* test_comm.c — the communication thread (net/comm.c) in forked processes,
 * with a stand-in coordinator (a ROUTER on inproc) where one is needed:
 *   - the first abort reason is kept: a second abort never rewrites the
 *     string a reader already holds, and later collectives fail with it;
 *   - a collective that a rank never joins fails with RT_ERR_TIMEOUT
 *     naming it, once its deadline has passed (TCP and shared memory),
 *     and the comm stays usable for an orderly end;
 *   - a message to the coordinator that cannot be built (a frame too large
 *     to allocate) fails with nothing sent: the next message arrives whole
 *     and alone, and the next collective runs;
 *   - a report handed over just before the comm is destroyed still leaves. */
#include "config.h"

#include "testutil.h"

#include <signal.h>

#include "comm.h"
#include "localring.h"
#include "clock.h"
#include "status.h"
#include "transport.h"
#include "wire.h"

/* A failed check ends the child at once (its sockets left open would hold
 * zmq_ctx_term forever) with a status the parent reports. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: line %d: ", rank, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, " (%s)\n", rt_error_detail());                     \
            fflush(NULL);                                                      \
            _exit(1);                                                          \
        }                                                                      \
    } while (0)

/* fn in each of n forked ranks; a rank's failure fails the test. */
static void in_ring(int n, enum rt_localring_links links, rt_localring_fn fn)
{
    struct rt_localring_opts o = {.n = n, .links = links};
    if (rt_localring_run(&o, fn, NULL, NULL, NULL, NULL, 0) < 0)
        fail_msg("%d ranks, links %d: %s", n, (int)links, rt_error_detail());
}

/* ---- a stand-in coordinator ------------------------------------------------------ */

struct coord {
    void *router, *dealer;
    char run[RT_RUN_ID_LEN + 1];
    rt_wire_writer w;
    rt_comm *comm;
};

/* A ROUTER with the worker's DEALER connected to it, and a comm thread
 * that owns the DEALER; heartbeats and the silence watch far away. */
static int coord_open(struct coord *k, rt_ring *ring)
{
    static int seq;
    memset(k, 0, sizeof *k);
    void *ctx = rt_ring_zctx(ring);
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://test-comm-coord-%d", seq++);
    rt_wire_new_run_id(k->run);
    rt_wire_writer_init(&k->w);
    k->router = zmq_socket(ctx, ZMQ_ROUTER);
    k->dealer = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, tmo = 5000;
    if (!k->router || !k->dealer || zmq_setsockopt(k->dealer, ZMQ_ROUTING_ID, "w0", 2) ||
        zmq_setsockopt(k->router, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(k->dealer, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(k->router, ZMQ_RCVTIMEO, &tmo, sizeof tmo) || zmq_bind(k->router, ep) ||
        zmq_connect(k->dealer, ep))
        return rt_error(RT_ERR_NET, "stand-in coordinator: %s", zmq_strerror(errno));
    struct rt_comm_config cc = {.ring = &ring, .borrow_ring = true, .zctx = ctx,
                                .ctrl = &k->dealer, .run = k->run, .hb_interval = 1000,
                                .peer_timeout = 1000};
    k->comm = rt_comm_new(&cc);
    return k->comm ? RT_OK : RT_ERR_NET;
}

static void coord_close(struct coord *k)
{
    rt_comm_destroy(&k->comm);
    rt_zsock_close(&k->dealer);
    rt_zsock_close(&k->router);
    rt_wire_writer_free(&k->w);
}

/* Send the worker a message of `type`, with a reason when not NULL. */
static int coord_say(struct coord *k, const char *type, const char *reason)
{
    rt_wire_begin(&k->w, k->run, type, reason ? 1 : 0);
    if (reason)
        rt_wire_put_str(&k->w, "reason", reason);
    RT_TRY(rt_wire_end(&k->w));
    RT_TRY(rt_zsend(k->router, "w0", 2, true));
    return rt_zsend(k->router, k->w.data, k->w.len, false);
}

/* ---- the first abort reason stays ------------------------------------------------ */

static int abort_kept(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)out_fd, (void)arg;
    struct coord k;
    CHECK(coord_open(&k, ring) == RT_OK, "open");
    CHECK(coord_say(&k, "abort", "reason A") == RT_OK, "send abort A");
    const char *first = NULL;
    double t0 = rt_now();
    while (!(first = rt_comm_aborted(k.comm)) && rt_now() - t0 < 10.0)
        usleep(1000);
    CHECK(first && strstr(first, "reason A"), "first abort: %s", first ? first : "(none)");
    char copy[512];
    snprintf(copy, sizeof copy, "%s", first);
    /* a second abort, then a stop: once the stop is seen, so was the abort */
    CHECK(coord_say(&k, "abort", "reason B") == RT_OK, "send abort B");
    CHECK(coord_say(&k, "stop", NULL) == RT_OK, "send stop");
    t0 = rt_now();
    while (!rt_comm_stop_requested(k.comm) && rt_now() - t0 < 10.0)
        usleep(1000);
    CHECK(rt_comm_stop_requested(k.comm), "the stop never arrived");
    CHECK(rt_comm_aborted(k.comm) == first, "the reason moved");
    CHECK(!strcmp(first, copy), "the reason was rewritten: '%s', was '%s'", first, copy);
    /* a collective after the abort fails, with the first reason */
    float x[4] = {1, 2, 3, 4};
    CHECK(rt_comm_allreduce(k.comm, x, 4, NULL) == RT_ERR_NET, "allreduce after an abort");
    CHECK(strstr(rt_error_detail(), "reason A"), "allreduce's error");
    coord_close(&k);
    return 0;
}

static void test_abort_reason_kept(void **state)
{
    (void)state;
    in_ring(1, RT_LINKS_TCP, abort_kept);
}

/* ---- a collective that a rank never joins ---------------------------------------- */

#define OP_TIMEOUT 0.5

static int never_joined(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)out_fd, (void)arg;
    if (rank == 1) {
        sleep(1); /* present, silent */
        return 0;
    }
    struct rt_comm_config cc = {.ring = &ring, .borrow_ring = true, .zctx = rt_ring_zctx(ring),
                                .op_timeout = OP_TIMEOUT};
    rt_comm *c = rt_comm_new(&cc);
    CHECK(c, "rt_comm_new");
    static float x[10000];
    double t0 = rt_now();
    uint32_t fl = 1;
    int rc = rt_comm_allreduce(c, x, 10000, &fl);
    double took = rt_now() - t0;
    printf("rank 0: %s after %.2f s: %s\n", rt_strerror(rc), took, rt_error_detail());
    fflush(stdout);
    CHECK(rc == RT_ERR_TIMEOUT, "allreduce returned %d", rc);
    CHECK(strstr(rt_error_detail(), "allreduce"), "the error names the collective");
    CHECK(took >= OP_TIMEOUT, "gave up before its deadline (%.2f s)", took);
    /* the ring is broken now: the next collective fails at once, no hang */
    rc = rt_comm_broadcast(c, x, sizeof x, 0);
    CHECK(rc < 0, "a collective on the broken ring returned %d", rc);
    rt_comm_destroy(&c);
    CHECK(c == NULL, "destroy");
    return 0;
}

static void test_collective_timeout(void **state)
{
    (void)state;
    in_ring(2, RT_LINKS_SHM, never_joined);
    in_ring(2, RT_LINKS_TCP, never_joined);
}

/* ---- a send that fails leaves the pipe clean ------------------------------------- */

static int send_clean(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)out_fd, (void)arg;
    struct coord k;
    CHECK(coord_open(&k, ring) == RT_OK, "open");
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    /* a frame no allocator can give: the message cannot be built */
    char small[16] = "x";
    rt_wire_begin(&w, k.run, "bad", 0);
    CHECK(rt_wire_end(&w) == RT_OK, "encode");
    const void *bad[2] = {small, small};
    size_t bad_n[2] = {sizeof small, SIZE_MAX / 2};
    CHECK(rt_comm_send(k.comm, &w, bad, bad_n, 2) == RT_ERR_NOMEM, "the impossible send");
    CHECK(!rt_comm_aborted(k.comm), "a send refused up front is no abort");
    /* the next message arrives whole and alone */
    unsigned char pay[100];
    for (int i = 0; i < 100; i++)
        pay[i] = (unsigned char)(i * 7);
    rt_wire_begin(&w, k.run, "report", 0);
    CHECK(rt_wire_end(&w) == RT_OK, "encode");
    const void *good[1] = {pay};
    size_t good_n[1] = {sizeof pay};
    CHECK(rt_comm_send(k.comm, &w, good, good_n, 1) == RT_OK, "the good send");
    float x[3] = {1, 2, 3};
    CHECK(rt_comm_allreduce(k.comm, x, 3, NULL) == RT_OK, "a collective after the failed send");
    rt_zframes fr;
    rt_zframes_init(&fr);
    rt_wire_msg msg;
    rt_wire_msg_init(&msg);
    CHECK(rt_zframes_recv(k.router, &fr, 0) == 1, "nothing reached the coordinator");
    CHECK(fr.n == 3, "a message of %d frames (routing id, header, payload expected)", fr.n);
    CHECK(rt_wire_parse(&msg, rt_zframe_data(&fr, 1), rt_zframe_size(&fr, 1), k.run, false) ==
              RT_OK, "the header does not parse");
    CHECK(!strcmp(msg.type, "report"), "a '%s' message", msg.type);
    CHECK(rt_zframe_size(&fr, 2) == sizeof pay && !memcmp(rt_zframe_data(&fr, 2), pay, sizeof pay),
          "the payload changed on the way");
    int more = rt_zframes_recv(k.router, &fr, ZMQ_DONTWAIT);
    CHECK(more == 0, "a second message reached the coordinator");
    rt_zframes_close(&fr);
    rt_wire_msg_free(&msg);
    rt_wire_writer_free(&w);
    coord_close(&k);
    return 0;
}

static void test_failed_send_leaves_pipe_clean(void **state)
{
    (void)state;
    in_ring(1, RT_LINKS_TCP, send_clean);
}

/* ---- the last report leaves -------------------------------------------------------- */

/* A report handed over just before the comm is destroyed still reaches
 * the coordinator (the thread ends after what is in its pipe): many
 * times, since a lost one is a race. */
static int last_report(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)out_fd, (void)arg;
    rt_zframes fr;
    rt_zframes_init(&fr);
    for (int round = 0; round < 200; round++) {
        struct coord k;
        CHECK(coord_open(&k, ring) == RT_OK, "open");
        rt_wire_begin(&k.w, k.run, "result", 0);
        CHECK(rt_wire_end(&k.w) == RT_OK, "encode");
        CHECK(rt_comm_send(k.comm, &k.w, NULL, NULL, 0) == RT_OK, "send");
        rt_comm_destroy(&k.comm);
        CHECK(rt_zframes_recv(k.router, &fr, 0) == 1, "round %d: the last report was lost", round);
        coord_close(&k);
    }
    rt_zframes_close(&fr);
    return 0;
}

static void test_last_report_leaves(void **state)
{
    (void)state;
    in_ring(1, RT_LINKS_TCP, last_report);
}

/* ---- step marks reach the coordinator ------------------------------------------------- */

/* The newest "step" of the heartbeats that reach the stand-in coordinator
 * within `secs` (-1: none); frames: [routing id, message]. */
static long newest_hb_step(struct coord *k, rt_zframes *fr, double secs)
{
    long newest = -1;
    rt_wire_msg msg;
    rt_wire_msg_init(&msg);
    for (double t0 = rt_now(); rt_now() - t0 < secs;) {
        if (rt_zframes_recv(k->router, fr, ZMQ_DONTWAIT) != 1) {
            usleep(1000);
            continue;
        }
        uint64_t step;
        if (fr->n == 2 &&
            rt_wire_parse(&msg, rt_zframe_data(fr, 1), rt_zframe_size(fr, 1), k->run, false) == 0 &&
            !strcmp(msg.type, "hb") &&
            rt_wire_get_uint(rt_wire_root(&msg), "step", 0, 1u << 30, &step) == 0 &&
            (long)step > newest)
            newest = (long)step;
    }
    rt_wire_msg_free(&msg);
    return newest;
}

/* A step mark wakes the comm thread only where it sleeps past STEP_HB or
 * MARK_STEPS marks went unseen (net/comm.c); each still reaches the
 * coordinator in a heartbeat soon: a mark after a long sleep, marks given
 * while the thread sleeps short (every 2 ms, so most wake nothing), a run
 * of marks faster than any heartbeat. Heartbeats are otherwise 1000 s
 * apart here. */
static int marks_reach(rt_ring *ring, int rank, int out_fd, void *arg)
{
    (void)rank, (void)out_fd, (void)arg;
    rt_zframes fr;
    rt_zframes_init(&fr);
    struct coord k;
    CHECK(coord_open(&k, ring) == RT_OK, "open");
    usleep(300000); /* the thread in its long sleep */
    rt_comm_mark(k.comm, 3);
    long got = newest_hb_step(&k, &fr, 0.5);
    CHECK(got == 3, "after a long sleep, mark 3: newest heartbeat step %ld", got);
    for (long s = 4; s <= 30; s++) {
        rt_comm_mark(k.comm, s);
        usleep(2000);
    }
    got = newest_hb_step(&k, &fr, 0.5);
    CHECK(got == 30, "marks 4-30 every 2 ms: newest heartbeat step %ld", got);
    for (long s = 31; s <= 1000; s++)
        rt_comm_mark(k.comm, s);
    got = newest_hb_step(&k, &fr, 0.5);
    CHECK(got == 1000, "marks 31-1000 at once: newest heartbeat step %ld", got);
    coord_close(&k);
    rt_zframes_close(&fr);
    return 0;
}

static void test_marks_reach_the_coordinator(void **state)
{
    (void)state;
    in_ring(1, RT_LINKS_TCP, marks_reach);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abort_reason_kept),
        cmocka_unit_test(test_collective_timeout),
        cmocka_unit_test(test_failed_send_leaves_pipe_clean),
        cmocka_unit_test(test_last_report_leaves),
        cmocka_unit_test(test_marks_reach_the_coordinator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
