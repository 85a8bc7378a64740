/* test_coord.c — the coordinator inside a test process, its workers
 * played by this test over raw DEALER sockets (the real wire format):
 *   - child processes: posix_spawn, exit status and signal, the clean-up
 *     that kills what is left, a program that does not exist;
 *   - a hello carrying a member id that already joined, from another
 *     connection, is refused with a "reject" and the member keeps its
 *     route (its job comes to it); the member's own repeated hello is no
 *     news; the run then fails cleanly when a worker reports an error;
 *   - two coordinators in one process, on two ports, each through a
 *     whole run (join, job, ready, start, done): each hands out its own
 *     run id and members and ends with its own workers' parameter hash;
 *     every option of the run reaches the workers.
 * No data set is needed: the fake workers train nothing. */
#include "config.h"

#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "children.h"
#include "creds.h"
#include "membership.h"
#include "net.h"
#include "clock.h"
#include "status.h"
#include "transport.h"
#include "wire.h"

static void *zctx;

/* ---- child processes ----------------------------------------------------------------- */

static void test_children(void **state)
{
    rt_children *ch = rt_children_new();
    assert_non_null(ch);
    char *exit3[] = {"sh", "-c", "exit 3", NULL};
    char *killed[] = {"sh", "-c", "kill -9 $$", NULL};
    char *sleeper[] = {"sh", "-c", "sleep 30", NULL};
    assert_int_equal(rt_children_start(ch, "/bin/sh", exit3, "exit3"), 0);
    assert_int_equal(rt_children_start(ch, "/bin/sh", killed, "killed"), 1);
    assert_int_equal(rt_children_start(ch, "/bin/sh", sleeper, "sleeper"), 2);
    assert_true(rt_children_start(ch, "/nonexistent/ragtag", exit3, "worker 9") < 0);
    assert_non_null(strstr(rt_error_detail(), "cannot start worker 9"));
    assert_int_equal(rt_children_count(ch), 3);

    int st0 = 0, st1 = 0, st;
    double t0 = rt_now();
    while (rt_now() - t0 < 10.0) {
        rt_children_reap(ch);
        if (rt_children_exited(ch, 0, 0.0, &st0) && rt_children_exited(ch, 1, 0.0, &st1))
            break;
        usleep(10000);
    }
    assert_true(WIFEXITED(st0) && WEXITSTATUS(st0) == 3);
    assert_true(WIFSIGNALED(st1) && WTERMSIG(st1) == SIGKILL);
    /* the grace period: a child that just exited is not reported yet */
    assert_false(rt_children_exited(ch, 0, 60.0, &st));
    assert_false(rt_children_exited(ch, 2, 0.0, &st));

    /* waiting does not stop a child; signals do, to the ones still running */
    t0 = rt_now();
    assert_false(rt_children_wait(ch, 0.2));
    assert_true(rt_now() - t0 < 5.0);
    assert_false(rt_children_wait(ch, 0.0)); /* still one running: */
    assert_false(rt_children_exited(ch, 2, 0.0, &st));
    assert_false(rt_children_signal_one(ch, 0, SIGTERM)); /* exited: not signalled */
    assert_true(rt_children_signal_one(ch, 2, SIGTERM));
    assert_true(rt_children_wait(ch, 10.0));
    assert_true(rt_children_exited(ch, 2, 0.0, &st));
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    /* kill: SIGKILL and reaped at once */
    assert_int_equal(rt_children_start(ch, "/bin/sh", sleeper, "sleeper"), 3);
    rt_children_kill(ch);
    assert_true(rt_children_wait(ch, 0.0)); /* none running */
    assert_true(rt_children_exited(ch, 3, 0.0, &st));
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    rt_children_destroy(&ch);
    assert_null(ch);
}

/* ---- a coordinator on a thread ----------------------------------------------------- */

struct coord_thread {
    pthread_t t;
    struct rt_coord_options o;
    struct rt_train_config c;
    struct rt_train_result res;
    int rc;
    char detail[1024]; /* rt_error_detail is per thread */
};

static void *coord_main(void *arg)
{
    struct coord_thread *ct = arg;
    ct->rc = rt_coord_run(&ct->o, &ct->c, &ct->res);
    snprintf(ct->detail, sizeof ct->detail, "%s", rt_error_detail());
    return NULL;
}

/* A free TCP port on 127.0.0.1, asked of the kernel and released at once.
 * A plain socket, not a ZeroMQ one: zmq_close returns before the listener is
 * gone, and a fake worker connecting meanwhile would hand its hello to it. */
static void free_endpoint(char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    snprintf(out, cap, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
}

static void coord_start(struct coord_thread *ct, int workers)
{
    memset(ct, 0, sizeof *ct);
    rt_coord_options_defaults(&ct->o);
    ct->o.workers = workers;
    ct->o.join_timeout = ct->o.setup_timeout = ct->o.worker_timeout = 30.0;
    free_endpoint(ct->o.listen, sizeof ct->o.listen);
    rt_train_config_defaults(&ct->c);
    snprintf(ct->c.model_path, sizeof ct->c.model_path, "%s/examples/lenet.cfg", TOP_SRCDIR);
    ct->c.progress = RT_PROGRESS_OFF;
    assert_int_equal(pthread_create(&ct->t, NULL, coord_main, ct), 0);
}

static void coord_join(struct coord_thread *ct) { assert_int_equal(pthread_join(ct->t, NULL), 0); }

/* ---- fake workers -------------------------------------------------------------------- */

struct fake {
    void *s;
    struct rt_member m;
    rt_wire_writer w;
    rt_wire_msg msg;
    rt_zframes fr;
    char run[RT_RUN_ID_LEN + 1];
    int rank;
};

static void fake_open(struct fake *f, const char *endpoint, const char *id, const char *name)
{
    memset(f, 0, sizeof *f);
    f->s = zmq_socket(zctx, ZMQ_DEALER);
    assert_non_null(f->s);
    int zero = 0;
    assert_int_equal(zmq_setsockopt(f->s, ZMQ_LINGER, &zero, sizeof zero), 0);
    /* A coordinator on loopback makes this user's credentials when it
     * starts: the fake workers join with them like real ones. */
    struct rt_creds cr;
    double t0 = rt_now();
    while (rt_creds_local(endpoint, false, &cr) < 0 && rt_now() - t0 < 10.0)
        usleep(20000);
    assert_int_equal(zmq_setsockopt(f->s, ZMQ_CURVE_SERVERKEY, cr.coord.pub, 40), 0);
    assert_int_equal(zmq_setsockopt(f->s, ZMQ_CURVE_PUBLICKEY, cr.invite.pub, 40), 0);
    assert_int_equal(zmq_setsockopt(f->s, ZMQ_CURVE_SECRETKEY, cr.invite.sec, 40), 0);
    assert_int_equal(zmq_connect(f->s, endpoint), 0);
    snprintf(f->m.id, sizeof f->m.id, "%s", id);
    snprintf(f->m.name, sizeof f->m.name, "%s", name);
    snprintf(f->m.host, sizeof f->m.host, "testhost");
    snprintf(f->m.host_id, sizeof f->m.host_id, "test-%s", name);
    snprintf(f->m.endpoint, sizeof f->m.endpoint, "tcp://127.0.0.1:9");
    snprintf(f->m.backend, sizeof f->m.backend, "cpu");
    snprintf(f->m.device, sizeof f->m.device, "fake");
    f->m.threads = 1;
    snprintf(f->m.shm, sizeof f->m.shm, "%016llx", (unsigned long long)rt_net_nonce());
    snprintf(f->m.link, sizeof f->m.link, "%016llx%016llx", (unsigned long long)rt_net_nonce(),
             (unsigned long long)rt_net_nonce());
    f->rank = -1;
    rt_wire_writer_init(&f->w);
    rt_wire_msg_init(&f->msg);
    rt_zframes_init(&f->fr);
}

static void fake_close(struct fake *f)
{
    zmq_close(f->s);
    rt_wire_writer_free(&f->w);
    rt_wire_msg_free(&f->msg);
    rt_zframes_close(&f->fr);
}

static void fake_send(struct fake *f)
{
    assert_int_equal(rt_wire_end(&f->w), RT_OK);
    assert_int_equal(zmq_send(f->s, f->w.data, f->w.len, 0), (int)f->w.len);
}

static void fake_hello(struct fake *f)
{
    rt_wire_begin(&f->w, "", "hello", 1);
    rt_wire_put_key(&f->w, "member");
    rt_member_put(&f->w, &f->m);
    fake_send(f);
}

/* The next message that is not a heartbeat, within `seconds`: its type
 * (f->msg holds it), or "" when none came. */
static const char *fake_recv(struct fake *f, double seconds)
{
    double t0 = rt_now();
    while (rt_now() - t0 < seconds) {
        zmq_pollitem_t it = {.socket = f->s, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        assert_int_equal(rt_zframes_recv(f->s, &f->fr, ZMQ_DONTWAIT), 1);
        assert_int_equal(rt_wire_parse(&f->msg, rt_zframe_data(&f->fr, 0),
                                       rt_zframe_size(&f->fr, 0), NULL, true),
                         RT_OK);
        if (strcmp(f->msg.type, "hb") != 0)
            return f->msg.type;
    }
    return "";
}

static int count_option(void *arg, const char *key, const char *value)
{
    (*(int *)arg)++;
    return RT_OK;
}

/* A job for this fake: its rank, the run id, the member list, the options. */
static void fake_expect_job(struct fake *f, const struct rt_train_config *c, int world)
{
    /* as real workers do, say hello again every second until the job comes */
    const char *type = "";
    for (int i = 0; i < 60 && !*(type = fake_recv(f, 1.0)); i++)
        fake_hello(f);
    assert_string_equal(type, "job");
    rt_wire_map root = rt_wire_root(&f->msg);
    uint64_t rank;
    assert_int_equal(rt_wire_get_uint(root, "rank", 0, (uint64_t)world - 1, &rank), RT_OK);
    f->rank = (int)rank;
    snprintf(f->run, sizeof f->run, "%s", f->msg.run);
    struct rt_membership ms;
    assert_int_equal(rt_membership_get(root, &ms), RT_OK);
    assert_int_equal(ms.n, world);
    assert_string_equal(ms.m[f->rank].id, f->m.id);
    assert_string_equal(ms.m[f->rank].name, f->m.name);
    const msgpack_object *opts;
    size_t nopts;
    int want = 0;
    assert_int_equal(rt_train_config_each(c, count_option, &want), RT_OK);
    assert_int_equal(rt_wire_get_array(root, "options", 10000, &opts, &nopts), RT_OK);
    assert_int_equal((int)nopts, want);
}

static void fake_ready(struct fake *f)
{
    rt_wire_begin(&f->w, f->run, "ready", 2);
    rt_wire_put_uint(&f->w, "rank", (uint64_t)f->rank);
    rt_wire_put_f64(&f->w, "ips", 1000.0);
    fake_send(f);
}

static void fake_done_status(struct fake *f, uint64_t hash, int status, const char *message)
{
    rt_wire_begin(&f->w, f->run, "done", 14);
    rt_wire_put_int(&f->w, "status", status);
    rt_wire_put_str(&f->w, "message", message);
    rt_wire_put_uint(&f->w, "hash", hash);
    rt_wire_put_uint(&f->w, "epochs_run", 1);
    rt_wire_put_uint(&f->w, "steps", 7);
    rt_wire_put_f64(&f->w, "train_loss", 1.5);
    rt_wire_put_f64(&f->w, "train_acc", 0.5);
    rt_wire_put_f64(&f->w, "val_loss", 1.5);
    rt_wire_put_f64(&f->w, "val_acc", 0.5);
    rt_wire_put_f64(&f->w, "test_loss", 1.5);
    rt_wire_put_f64(&f->w, "test_acc", 0.5);
    rt_wire_put_f64(&f->w, "images_per_s", 1000.0);
    rt_wire_put_bool(&f->w, "stopped_early", false);
    rt_wire_put_uint(&f->w, "best_epoch", 0);
    fake_send(f);
}

static void fake_done(struct fake *f, uint64_t hash) { fake_done_status(f, hash, 0, ""); }

static void fake_error(struct fake *f, const char *text)
{
    rt_wire_begin(&f->w, f->run, "error", 1);
    rt_wire_put_str(&f->w, "message", text);
    fake_send(f);
}

/* ---- a second hello with a member's id ------------------------------------------------ */

static void test_duplicate_member_id(void **state)
{
    struct coord_thread ct;
    coord_start(&ct, 2);
    struct fake a, b, c;
    fake_open(&a, ct.o.listen, "00000000000000aa", "a");
    fake_open(&b, ct.o.listen, "00000000000000aa", "b"); /* a's id, another connection */
    fake_open(&c, ct.o.listen, "00000000000000cc", "c");
    fake_hello(&a);
    usleep(300000);
    fake_hello(&b);
    /* Whichever the coordinator heard first is the member; the other is
     * refused (on a loaded machine b may come first: both orders hold). */
    struct fake *member = NULL, *refused = NULL;
    for (int i = 0; i < 120 && !refused; i++) {
        if (!strcmp(fake_recv(&b, 0.25), "reject"))
            member = &a, refused = &b;
        else if (!strcmp(fake_recv(&a, 0.25), "reject"))
            member = &b, refused = &a;
    }
    assert_non_null(refused);
    char why[300];
    assert_int_equal(rt_wire_get_str(rt_wire_root(&refused->msg), "reason", 1, why, sizeof why),
                     RT_OK);
    assert_non_null(strstr(why, "worker id 00000000000000aa already joined as"));
    assert_non_null(strstr(why, member->m.name));
    /* the member says hello again, as real workers do until their job
     * comes: no news, no reject */
    fake_hello(member);
    assert_string_equal(fake_recv(member, 0.5), "");
    fake_hello(&c);
    /* the member kept its route: its job comes to it, none to the other */
    fake_expect_job(member, &ct.c, 2);
    fake_expect_job(&c, &ct.c, 2);
    assert_string_equal(fake_recv(refused, 0.5), "");
    fake_error(member, "the fake worker stops here");
    coord_join(&ct);
    assert_int_equal(ct.rc, RT_ERR_NET);
    assert_non_null(strstr(ct.detail, "failed: the fake worker stops here"));
    assert_string_equal(fake_recv(&c, 5.0), "abort");
    fake_close(&a);
    fake_close(&b);
    fake_close(&c);
}

/* ---- a worker gone between its hello and its job --------------------------------------- */

/* b says hello and goes (its connection closed) before the join phase
 * ends: its job cannot reach it. That is b lost while setting up, not the
 * run's end ("cannot reach worker b: Host unreachable" stopped it): a and
 * c get their jobs and start. */
static void test_gone_before_its_job(void **state)
{
    struct coord_thread ct;
    coord_start(&ct, 3);
    struct fake a, b, c;
    fake_open(&a, ct.o.listen, "00000000000000a2", "a");
    fake_open(&b, ct.o.listen, "00000000000000b2", "b");
    fake_open(&c, ct.o.listen, "00000000000000c2", "c");
    fake_hello(&a);
    fake_hello(&b);
    usleep(200000);
    fake_close(&b);
    usleep(300000); /* its route is gone (within CLOSED_GRACE: still a member) */
    fake_hello(&c);
    fake_expect_job(&a, &ct.c, 3);
    fake_expect_job(&c, &ct.c, 3);
    fake_ready(&a);
    fake_ready(&c);
    assert_string_equal(fake_recv(&a, 60.0), "start");
    assert_string_equal(fake_recv(&c, 60.0), "start");
    fake_error(&a, "the fake worker stops here");
    coord_join(&ct);
    assert_int_equal(ct.rc, RT_ERR_NET);
    assert_non_null(strstr(ct.detail, "failed: the fake worker stops here"));
    fake_close(&a);
    fake_close(&c);
}

/* ---- a run whose state is lost --------------------------------------------------------- */

/* A member reports that no member of its new group holds the run's state
 * (all had just joined): the run stops at once, saying so and that there
 * is no checkpoint, rather than waiting for joiners (who hold none) or
 * ending as a run that finished. */
static void test_state_lost_stops_the_run(void **state)
{
    struct coord_thread ct;
    coord_start(&ct, 2);
    struct fake a, b;
    fake_open(&a, ct.o.listen, "00000000000000a1", "a");
    fake_open(&b, ct.o.listen, "00000000000000b1", "b");
    fake_hello(&a);
    fake_hello(&b);
    fake_expect_job(&a, &ct.c, 2);
    fake_expect_job(&b, &ct.c, 2);
    fake_ready(&a);
    fake_ready(&b);
    assert_string_equal(fake_recv(&a, 60.0), "start");
    assert_string_equal(fake_recv(&b, 60.0), "start");
    fake_done_status(&b, 0, RT_ERR_NO_STATE,
                     "no member of the new group holds the run's state (all 2 just joined)");
    coord_join(&ct);
    assert_int_equal(ct.rc, RT_ERR_NO_STATE);
    assert_non_null(strstr(ct.detail, "the run's state is lost: every member that held it is "
                                      "gone (b, rank "));
    assert_non_null(strstr(ct.detail, "(all 2 just joined)); no checkpoint to go on from"));
    assert_string_equal(fake_recv(&a, 5.0), "abort");
    fake_close(&a);
    fake_close(&b);
}

/* ---- two coordinators in one process --------------------------------------------------- */

static void test_two_coordinators(void **state)
{
    static const uint64_t hash[2] = {0x1111222233334444ull, 0x5555666677778888ull};
    struct coord_thread ct[2];
    struct fake f[2][2];
    for (int i = 0; i < 2; i++)
        coord_start(&ct[i], 2);
    assert_string_not_equal(ct[0].o.listen, ct[1].o.listen);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            char id[24], name[16];
            snprintf(id, sizeof id, "00000000000000%d%d", i, j);
            snprintf(name, sizeof name, "c%dw%d", i, j);
            fake_open(&f[i][j], ct[i].o.listen, id, name);
            fake_hello(&f[i][j]);
        }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            fake_expect_job(&f[i][j], &ct[i].c, 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(f[i][0].run, f[i][1].run);
        assert_int_not_equal(f[i][0].rank, f[i][1].rank);
    }
    assert_string_not_equal(f[0][0].run, f[1][0].run);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            fake_ready(&f[i][j]);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            assert_string_equal(fake_recv(&f[i][j], 60.0), "start");
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            fake_done(&f[i][j], hash[i]);
    for (int i = 0; i < 2; i++) {
        coord_join(&ct[i]);
        assert_int_equal(ct[i].rc, RT_OK);
        assert_int_equal(ct[i].res.params_hash, hash[i]);
        assert_int_equal(ct[i].res.steps, 7);
        for (int j = 0; j < 2; j++)
            fake_close(&f[i][j]);
    }
}

int main(void)
{
    zctx = zmq_ctx_new();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_children),
        cmocka_unit_test(test_duplicate_member_id),
        cmocka_unit_test(test_gone_before_its_job),
        cmocka_unit_test(test_state_lost_stops_the_run),
        cmocka_unit_test(test_two_coordinators),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* a failed test leaves its sockets open and zmq_ctx_term would wait
     * for them forever: let the exit take them */
    if (rc == 0)
        zmq_ctx_term(zctx);
    return rc;
}
