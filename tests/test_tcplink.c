/* test_tcplink.c — the raw TCP ring links (net/tcplink.h) between two real
 * processes. The child forms both of its links with rt_tcplink_setup, as a
 * ring rank does; the parent plays its neighbour by hand, so that it can
 * also be every stranger: before the real hello it connects to the
 * child's link port with random bytes, a hello without the cookie, a
 * hello of another generation (with the right cookie) and nothing at all,
 * each of which must be refused with a log line while the real one is
 * taken. Then chunks of 0, 5 and 300,000 bytes cross intact, garbage
 * written on an established link is refused as "not a chunk header", and
 * a SIGKILLed peer is a lost link at once (the error names the closed
 * connection; the time it took is printed, not asserted). And a port the
 * neighbour cannot reach makes that direction fall back to ZeroMQ. */
#include "config.h"

#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "ring.h"
#include "status.h"
#include "tcplink.h"
#include "transport.h"
#include "wire.h"

#define GEN 7
static const size_t sizes[] = {0, 5, 300000};
static char run[RT_RUN_ID_LEN + 1];

struct side {
    void *ctx, *inbox, *out;
    char ep[RT_ENDPOINT_MAX];
};

static int side_open(struct side *s)
{
    s->ctx = zmq_ctx_new();
    s->inbox = rt_zsock_new(s->ctx, ZMQ_PULL, (int64_t)RT_RING_MAX_CHUNK, 4096);
    s->out = rt_zsock_new(s->ctx, ZMQ_PUSH, 0, 0);
    if (!s->inbox || !s->out)
        return -1;
    return rt_zsock_bind(s->inbox, "tcp://127.0.0.1:*", s->ep, sizeof s->ep);
}

static void side_close(struct side *s)
{
    rt_zsock_close(&s->inbox);
    rt_zsock_close(&s->out);
    zmq_ctx_term(s->ctx);
}

static unsigned char pattern(size_t i, size_t k) { return (unsigned char)(i * 131 + k * 7 + 1); }

/* Wait for a link to move (poll), at most 10 s in all. */
static int wait_fd(int fd, short ev, double t0)
{
    struct pollfd p = {.fd = fd, .events = ev};
    poll(&p, 1, 100);
    return rt_now() - t0 > 10.0 ? -1 : 0;
}

static int child_sends(rt_tcplink *tx)
{
    static unsigned char buf[300000];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        for (size_t i = 0; i < sizes[k]; i++)
            buf[i] = pattern(i, k);
        struct rt_tcplink_hdr h = {.gen = GEN, .op = k, .sig = 0xabcd, .t = 1, .j = (uint32_t)k,
                                   .fl = 3, .n = (uint32_t)sizes[k]};
        rt_tcplink_put(tx, &h, buf);
        double t0 = rt_now();
        while (rt_tcplink_sent(tx) < rt_tcplink_queued(tx))
            if (rt_tcplink_flush(tx) < 0 || wait_fd(rt_tcplink_fd(tx), POLLOUT, t0) < 0)
                return -1;
    }
    return 0;
}

/* The child: rank 1 of a ring of 2, both links raw. It reports the
 * refused connections and whether garbage on its rx link was refused; with
 * `fallback`, which of its links are raw after a set-up in which the parent
 * never connects to its port. */
static int child(int to_parent, int from_parent, bool fallback)
{
    struct side s;
    char peer[RT_ENDPOINT_MAX];
    if (side_open(&s) < 0 || write(to_parent, s.ep, sizeof s.ep) != (ssize_t)sizeof s.ep ||
        read(from_parent, peer, sizeof peer) != (ssize_t)sizeof peer ||
        rt_zsock_connect(s.out, peer) < 0)
        return 10;
    rt_wire_droplog drops;
    rt_wire_droplog_init(&drops, "child rank 1");
    struct rt_tcplink_setup u = {.run = run, .gen = GEN, .rank = 1, .left = 0, .right = 0,
                                 .self_endpoint = s.ep, .left_endpoint = peer, .out = s.out,
                                 .inbox = s.inbox, .left_key = "", .timeout_s = fallback ? 4 : 20,
                                 .drops = &drops};
    rt_tcplink *tx = NULL, *rx = NULL;
    if (rt_tcplink_setup(&u, &tx, &rx) < 0) {
        fprintf(stderr, "child: %s\n", rt_error_detail());
        return 11;
    }
    if (fallback) {
        long report[2] = {tx != NULL, rx != NULL};
        return write(to_parent, report, sizeof report) == (ssize_t)sizeof report ? 0 : 13;
    }
    if (child_sends(tx) < 0)
        return 12;
    struct rt_tcplink_rx x = {0};
    static unsigned char in[64];
    int rc = 0;
    double t0 = rt_now();
    while ((rc = rt_tcplink_recv(rx, &x, in, sizeof in)) == 0)
        if (wait_fd(rt_tcplink_fd(rx), POLLIN, t0) < 0)
            break;
    long report[2] = {drops.total, rc < 0 && strstr(rt_error_detail(), "not a chunk header")};
    printf("child: garbage on the link: %s\n", rt_error_detail());
    fflush(stdout);
    if (write(to_parent, report, sizeof report) != (ssize_t)sizeof report)
        return 13;
    pause(); /* until the parent kills it */
    return 0;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void hello(unsigned char *b, uint64_t gen, const unsigned char *cookie)
{
    memset(b, 0, 64);
    put32(b, 0x484c5452u);
    put32(b + 4, 1);
    put32(b + 8, (uint32_t)gen);
    put32(b + 12, (uint32_t)(gen >> 32));
    put32(b + 16, 0); /* from rank 0 */
    put32(b + 20, 1); /* to rank 1 */
    memcpy(b + 24, cookie, RT_TCPLINK_COOKIE);
}

static int parse(rt_wire_msg *m, rt_zframes *fr)
{
    return rt_wire_parse(m, rt_zframe_data(fr, 0), rt_zframe_size(fr, 0), run, false);
}

/* The child's offer from the parent's inbox: its port and cookie. */
static int take_offer(struct side *s, unsigned char *cookie)
{
    rt_zframes fr;
    rt_wire_msg m;
    rt_zframes_init(&fr);
    rt_wire_msg_init(&m);
    zmq_pollitem_t it = {.socket = s->inbox, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, 10000), 1);
    assert_int_equal(rt_zframes_recv(s->inbox, &fr, 0), 1);
    assert_true(rt_tcplink_is_offer(&fr));
    assert_int_equal(parse(&m, &fr), 0);
    uint64_t port, gen;
    const void *ck;
    size_t n;
    assert_int_equal(rt_wire_get_uint(rt_wire_root(&m), "port", 1, 65535, &port), 0);
    assert_int_equal(rt_wire_get_uint(rt_wire_root(&m), "gen", 0, UINT64_MAX, &gen), 0);
    assert_int_equal(rt_wire_get_bin(rt_wire_root(&m), "cookie", 64, &ck, &n), 0);
    assert_int_equal(gen, GEN);
    assert_int_equal(n, RT_TCPLINK_COOKIE);
    memcpy(cookie, ck, n);
    rt_wire_msg_free(&m);
    rt_zframes_close(&fr);
    return (int)port;
}

/* Strangers first, then the real hello: the link from the child. */
static rt_tcplink *connect_past_strangers(int port, const unsigned char *cookie)
{
    unsigned char b[64], wrong[RT_TCPLINK_COOKIE];
    for (int i = 0; i < 64; i++)
        b[i] = (unsigned char)(i * 37 + 11);
    int fds[4];
    fds[0] = dial(port);
    assert_int_equal(send(fds[0], b, 64, 0), 64); /* random bytes */
    memcpy(wrong, cookie, sizeof wrong);
    wrong[5] ^= 1;
    hello(b, GEN, wrong);
    fds[1] = dial(port);
    assert_int_equal(send(fds[1], b, 64, 0), 64); /* not this link's cookie */
    hello(b, GEN + 1, cookie);
    fds[2] = dial(port);
    assert_int_equal(send(fds[2], b, 64, 0), 64); /* another generation */
    fds[3] = dial(port);
    close(fds[3]); /* nothing at all */
    for (int i = 0; i < 3; i++) { /* each is closed by the child */
        char c;
        assert_true(recv(fds[i], &c, 1, 0) <= 0);
        close(fds[i]);
    }
    int fd = dial(port);
    hello(b, GEN, cookie);
    assert_int_equal(send(fd, b, 64, 0), 64);
    unsigned char ack[8];
    assert_int_equal(recv(fd, ack, 8, MSG_WAITALL), 8);
    return rt_tcplink_wrap(fd, "the child (rank 1)");
}

static void receive_chunks(rt_tcplink *rx)
{
    static unsigned char buf[300000];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        struct rt_tcplink_rx x = {0};
        int rc;
        double t0 = rt_now();
        while ((rc = rt_tcplink_recv(rx, &x, buf, sizes[k])) != 2) {
            assert_true(rc >= 0);
            assert_int_equal(wait_fd(rt_tcplink_fd(rx), POLLIN, t0), 0);
        }
        assert_true(x.hdr_ok);
        assert_int_equal(x.h.gen, GEN);
        assert_int_equal(x.h.op, k);
        assert_int_equal(x.h.j, k);
        assert_int_equal(x.h.fl, 3);
        assert_int_equal(x.h.sig, 0xabcd);
        assert_int_equal(x.h.n, sizes[k]);
        for (size_t i = 0; i < sizes[k]; i++)
            if (buf[i] != pattern(i, k))
                fail_msg("chunk %zu byte %zu differs", k, i);
    }
}

/* Fork the child and connect the parent's side to it. */
static pid_t start(struct side *s, int *up, bool fallback)
{
    int down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    rt_wire_new_run_id(run);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(child(up[1], down[0], fallback));
    char peer[RT_ENDPOINT_MAX];
    assert_int_equal(side_open(s), 0);
    assert_int_equal(read(up[0], peer, sizeof peer), (ssize_t)sizeof peer);
    assert_int_equal(write(down[1], s->ep, sizeof s->ep), (ssize_t)sizeof s->ep);
    assert_int_equal(rt_zsock_connect(s->out, peer), 0);
    return pid;
}

static void test_link(void **state)
{
    (void)state;
    int up[2];
    struct side s;
    pid_t pid = start(&s, up, false);

    unsigned char cookie[RT_TCPLINK_COOKIE];
    int port = take_offer(&s, cookie);
    rt_tcplink *rx = connect_past_strangers(port, cookie);
    assert_non_null(rx);
    rt_wire_droplog drops;
    rt_wire_droplog_init(&drops, "parent rank 0");
    struct rt_tcplink_setup u = {.run = run, .gen = GEN, .rank = 0, .left = 1, .right = 1,
                                 .self_endpoint = s.ep, .out = s.out, .timeout_s = 20,
                                 .drops = &drops};
    rt_tcplink *tx = NULL, *none = NULL;
    if (rt_tcplink_setup(&u, &tx, &none) < 0)
        fail_msg("parent: %s", rt_error_detail());
    assert_null(none);
    receive_chunks(rx);

    char junk[RT_TCPLINK_HDR];
    memset(junk, 'x', sizeof junk);
    assert_int_equal(send(rt_tcplink_fd(tx), junk, sizeof junk, 0), (ssize_t)sizeof junk);
    long report[2];
    assert_int_equal(read(up[0], report, sizeof report), (ssize_t)sizeof report);
    printf("the child refused %ld strangers; garbage on the link refused: %s\n", report[0],
           report[1] ? "yes" : "no");
    assert_int_equal(report[0], 4);
    assert_int_equal(report[1], 1);

    /* a killed peer: its link is lost at once */
    double t0 = rt_now();
    kill(pid, SIGKILL);
    struct rt_tcplink_rx x = {0};
    unsigned char b[16];
    int rc;
    while ((rc = rt_tcplink_recv(rx, &x, b, sizeof b)) == 0)
        assert_int_equal(wait_fd(rt_tcplink_fd(rx), POLLIN, t0), 0);
    printf("killed peer: \"%s\" after %.1f ms\n", rt_error_detail(), (rt_now() - t0) * 1e3);
    assert_true(rc < 0);
    assert_non_null(strstr(rt_error_detail(), "is lost"));
    int st;
    waitpid(pid, &st, 0);
    rt_tcplink_destroy(&rx);
    rt_tcplink_destroy(&tx);
    side_close(&s);
}

/* The parent never connects to the child's port (a firewall): the child
 * gives its raw link up and offers port 0 (ZeroMQ for that direction);
 * its other link, to a reachable port, is raw. */
static void test_fallback(void **state)
{
    (void)state;
    int up[2];
    struct side s;
    pid_t pid = start(&s, up, true);
    rt_wire_droplog drops;
    rt_wire_droplog_init(&drops, "parent rank 0");
    struct rt_tcplink_setup u = {.run = run, .gen = GEN, .rank = 0, .left = 1, .right = 1,
                                 .self_endpoint = s.ep, .out = s.out, .timeout_s = 20,
                                 .drops = &drops};
    rt_tcplink *tx = NULL, *none = NULL;
    if (rt_tcplink_setup(&u, &tx, &none) < 0)
        fail_msg("parent: %s", rt_error_detail());
    long report[2];
    assert_int_equal(read(up[0], report, sizeof report), (ssize_t)sizeof report);
    printf("after the fallback: the child's link to the parent is %s, from it %s\n",
           report[0] ? "raw" : "ZeroMQ", report[1] ? "raw" : "ZeroMQ");
    assert_int_equal(report[0], 0);
    assert_int_equal(report[1], 1);
    int offers = 0, port = -1;
    rt_zframes fr;
    rt_wire_msg m;
    rt_zframes_init(&fr);
    rt_wire_msg_init(&m);
    while (rt_zframes_recv(s.inbox, &fr, ZMQ_DONTWAIT) == 1) { /* the last says port 0 */
        uint64_t p;
        assert_int_equal(parse(&m, &fr), 0);
        assert_int_equal(rt_wire_get_uint(rt_wire_root(&m), "port", 0, 65535, &p), 0);
        port = (int)p;
        offers++;
    }
    printf("%d offers, the last of port %d\n", offers, port);
    assert_int_equal(port, 0);
    rt_wire_msg_free(&m);
    rt_zframes_close(&fr);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    rt_tcplink_destroy(&tx);
    side_close(&s);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link),
        cmocka_unit_test(test_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
