/* net_stranger.c — a process that is not invited tries its best, for
 * tests/test_security.sh:
 *     net_stranger hello ENDPOINT SECONDS [JOIN]
 *         a DEALER says a well-formed hello to a coordinator every 100 ms,
 *         plainly or, with JOIN (a join string), through CurveZMQ with its
 *         keys; then a hello, a disconnect and a hello again;
 *     net_stranger ring ENDPOINT SECONDS RUN [USER PASSWORD]
 *         a PUSH sends well-formed ring chunks of run RUN (generations 1-3,
 *         ops 0-400, NaN payloads) to a worker's ring inbox; with USER and
 *         PASSWORD through ZeroMQ PLAIN, as token links do (a guessed key
 *         and link secret).
 * Prints "received N bytes in M messages" (what came back: the model, the
 * options, data...). Exit 0; the test judges. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "clock.h"
#include "creds.h"
#include "membership.h"
#include "wire.h"

static void *open_socket(void *ctx, int type, const char *endpoint, const char *join,
                         const char *user, const char *pass)
{
    void *s = zmq_socket(ctx, type);
    int zero = 0, hwm = 100000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (user && pass) {
        zmq_setsockopt(s, ZMQ_PLAIN_USERNAME, user, strlen(user));
        zmq_setsockopt(s, ZMQ_PLAIN_PASSWORD, pass, strlen(pass));
    }
    static struct rt_creds c;
    if (join && rt_creds_from_join(join, &c) == 0) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c.coord.pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, c.invite.pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c.invite.sec, 40);
    }
    zmq_connect(s, endpoint);
    return s;
}

static void hello(void *s, rt_wire_writer *w, const struct rt_member *m)
{
    rt_wire_begin(w, "", "hello", 1);
    rt_wire_put_key(w, "member");
    rt_member_put(w, m);
    if (rt_wire_end(w) == 0)
        zmq_send(s, w->data, w->len, ZMQ_DONTWAIT);
}

/* Take what came back; counted in *bytes, *msgs. */
static void drain(void *s, long *bytes, long *msgs, int ms)
{
    zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, ms) <= 0)
        return;
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) >= 0) {
        *bytes += (long)zmq_msg_size(&m);
        if (!zmq_msg_more(&m))
            (*msgs)++;
    }
    zmq_msg_close(&m);
}

static void run_hello(void *ctx, const char *ep, double secs, const char *join)
{
    struct rt_member m;
    memset(&m, 0, sizeof m);
    snprintf(m.id, sizeof m.id, "00000000deadbeef");
    snprintf(m.name, sizeof m.name, "evil");
    snprintf(m.host, sizeof m.host, "evilhost");
    snprintf(m.host_id, sizeof m.host_id, "evil");
    snprintf(m.endpoint, sizeof m.endpoint, "tcp://127.0.0.1:9");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.shm, sizeof m.shm, "0123456789abcdef");
    snprintf(m.link, sizeof m.link, "0123456789abcdef0123456789abcdef");
    m.threads = 1;
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    long bytes = 0, msgs = 0;
    void *s = open_socket(ctx, ZMQ_DEALER, ep, join, NULL, NULL);
    double t0 = rt_now();
    for (int k = 0; rt_now() - t0 < secs; k++) {
        hello(s, &w, &m);
        drain(s, &bytes, &msgs, 100);
        if (k == 5) { /* a hello and a disconnect (once killed a run), then again */
            zmq_close(s);
            s = open_socket(ctx, ZMQ_DEALER, ep, join, NULL, NULL);
        }
    }
    zmq_close(s);
    rt_wire_writer_free(&w);
    printf("received %ld bytes in %ld messages\n", bytes, msgs);
}

static void run_ring(void *ctx, const char *ep, double secs, const char *run, const char *user,
                     const char *pass)
{
    void *s = open_socket(ctx, ZMQ_PUSH, ep, NULL, user, pass);
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    static float nan_chunk[1024];
    for (int i = 0; i < 1024; i++)
        nan_chunk[i] = NAN;
    double t0 = rt_now();
    long sent = 0;
    while (rt_now() - t0 < secs) {
        for (uint64_t op = 0; op < 400; op++) {
            rt_wire_begin(&w, run, "chunk", 6);
            rt_wire_put_uint(&w, "gen", 1 + op % 3);
            rt_wire_put_uint(&w, "op", op);
            rt_wire_put_uint(&w, "t", op % 4);
            rt_wire_put_uint(&w, "j", 0);
            rt_wire_put_uint(&w, "fl", 0);
            rt_wire_put_uint(&w, "n", sizeof nan_chunk);
            if (rt_wire_end(&w) == 0 && zmq_send(s, w.data, w.len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
                zmq_send(s, nan_chunk, sizeof nan_chunk, ZMQ_DONTWAIT) >= 0)
                sent++;
        }
        usleep(50000);
    }
    zmq_close(s);
    rt_wire_writer_free(&w);
    printf("sent %ld chunks; received 0 bytes in 0 messages\n", sent);
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "hello") && strcmp(argv[1], "ring")) ||
        (!strcmp(argv[1], "ring") && argc < 5)) {
        fprintf(stderr, "usage: net_stranger hello ENDPOINT SECONDS [JOIN] | ring ENDPOINT "
                        "SECONDS RUN [USER PASSWORD]\n");
        return 2;
    }
    void *ctx = zmq_ctx_new();
    double secs = atof(argv[3]);
    if (!strcmp(argv[1], "hello"))
        run_hello(ctx, argv[2], secs, argc > 4 ? argv[4] : NULL);
    else
        run_ring(ctx, argv[2], secs, argv[4], argc > 6 ? argv[5] : NULL,
                 argc > 6 ? argv[6] : NULL);
    zmq_ctx_term(ctx);
    return 0;
}
