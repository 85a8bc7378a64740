/* test_hostreduce.c — sums read in place between processes of one host
 * (net/hostreduce.h): 2, 3 and 4 forked ranks sum random floats over
 * ranges, and every rank must hold exactly the rank-order sum, bit for
 * bit, with the rest of its buffer untouched and every rank's votes ORed;
 * a peer that never takes part ends the sum through the check or the
 * timeout; a segment of another size, or open to others, is no peer's;
 * the name of a killed owner's segment is swept, a live owner's kept;
 * sum_apply hands each rank its slice summed, and a step given up before
 * a rank began it is known to have applied nothing. */
#include "config.h"

#include "testutil.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "collective.h"
#include "hostreduce.h"
#include "shm.h"
#include "status.h"
#include "yieldwait.h"

#define N_FLOATS 20000

static void secret(char out[17], unsigned tag, int rank)
{
    snprintf(out, 17, "%08x%08x", tag, (unsigned)rank);
}

/* Rank r's data for round k: floats of mixed magnitude, so that the order
 * of a sum shows in its bits. */
static void data(float *x, int r, int k)
{
    tu_fill_uniform(x, N_FLOATS, -1.0f, 1.0f, 1000u * (uint64_t)k + (uint64_t)r + 1);
    for (size_t i = 0; i < N_FLOATS; i += 7)
        x[i] *= 1e4f;
}

static int group_when_all_there(rt_hostreduce *h, int rank, int world, unsigned tag)
{
    char sec[4][17];
    const char *secs[4];
    for (int r = 0; r < world; r++) {
        secret(sec[r], tag, r);
        secs[r] = sec[r];
    }
    double t0 = rt_now();
    while (rt_hostreduce_group(h, 3, rank, world, secs) < 0) {
        if (rt_now() - t0 > 10.0)
            return -1;
        usleep(1000);
    }
    return 0;
}

/* What a rank's apply callback saw: the ranges it was handed, in order,
 * and whether each held the rank-order sum then. */
struct applied {
    const float *buf, *want;
    size_t next, lo0; /* the end of the last range; the first range's start */
    int calls, bad;
};

static int record(void *arg, size_t lo, size_t hi)
{
    struct applied *a = arg;
    if (a->calls++ == 0)
        a->lo0 = lo;
    else if (lo != a->next)
        a->bad = 1; /* not one contiguous slice */
    a->next = hi;
    if (memcmp(a->buf + lo, a->want + lo, (hi - lo) * sizeof(float)))
        a->bad = 2;
    return RT_OK;
}

/* rt_hostreduce_sum_apply over [from, N_FLOATS - TAIL) and a tail of TAIL:
 * this rank is handed exactly its rt_slice, each chunk already summed; the
 * tail is the sum on every rank; the sum of squares is the whole sum's;
 * the votes are ORed. */
#define TAIL 5
static int child_apply(rt_hostreduce *h, int rank, int world, float *buf, float *want, float *x)
{
    const size_t from = 37, end = N_FLOATS - TAIL;
    for (int r = 0; r < world; r++) {
        data(x, r, 9);
        for (size_t i = 0; i < N_FLOATS; i++)
            want[i] = r ? want[i] + x[i] : x[i];
    }
    double ss = 0.0, got = -1.0;
    for (size_t i = from; i < end; i++)
        ss += (double)want[i] * want[i];
    data(buf, rank, 9);
    struct applied a = {.buf = buf, .want = want};
    struct rt_hostreduce_apply ap = {from, N_FLOATS, TAIL, record, &a, &got};
    const struct rt_hostreduce_wait w = {.timeout_s = 30};
    uint32_t agreed = 0;
    if (rt_hostreduce_sum_apply(h, &ap, 1u << rank, &agreed, &w) < 0)
        return 20;
    size_t lo, hi;
    rt_slice(end - from, world, rank, &lo, &hi);
    if (a.bad || a.calls < 1 || a.lo0 != from + lo || a.next != from + hi)
        return 21;
    if (memcmp(buf + end, want + end, TAIL * sizeof(float)))
        return 22;
    if (!(fabs(got - ss) <= 1e-9 * ss))
        return 23;
    return agreed == (1u << world) - 1 ? 0 : 24;
}

/* One child: its exit status says what went wrong (0: nothing). */
static int child(int rank, int world, unsigned tag)
{
    char me[17];
    secret(me, tag, rank);
    rt_hostreduce *h = rt_hostreduce_new(me, N_FLOATS);
    if (!h || group_when_all_there(h, rank, world, tag) < 0)
        return 10;
    size_t n;
    float *buf = rt_hostreduce_floats(h, &n);
    float *want = malloc(N_FLOATS * sizeof *want), *x = malloc(N_FLOATS * sizeof *x);
    const struct rt_hostreduce_wait w = {.timeout_s = 30};
    int status = 0;
    for (int k = 0; k < 6 && !status; k++) {
        /* the same ranges on every rank: the whole, then random ones */
        rt_rng g;
        rt_rng_seed(&g, 77u + (uint64_t)k, 1);
        size_t lo = k ? (size_t)rt_rng_below(&g, N_FLOATS) : 0;
        size_t hi = k ? lo + (size_t)rt_rng_below(&g, N_FLOATS - lo + 1) : N_FLOATS;
        data(buf, rank, k);
        memcpy(want, buf, N_FLOATS * sizeof *want);
        for (size_t i = lo; i < hi; i++)
            want[i] = 0.0f;
        for (int r = 0; r < world; r++) {
            data(x, r, k);
            for (size_t i = lo; i < hi; i++)
                want[i] = r ? want[i] + x[i] : x[i];
        }
        uint32_t agreed = 0;
        if (rt_hostreduce_allreduce(h, lo, hi, 1u << rank, &agreed, &w) < 0)
            status = 11;
        else if (memcmp(buf, want, N_FLOATS * sizeof *want))
            status = 12;
        else if (agreed != (1u << world) - 1)
            status = 13;
    }
    if (!status)
        status = child_apply(h, rank, world, buf, want, x);
    free(want);
    free(x);
    rt_hostreduce_destroy(&h);
    return status;
}

static void run_world(int world)
{
    unsigned tag = (unsigned)getpid() ^ ((unsigned)time(NULL) << 8) ^ (unsigned)world;
    pid_t pids[4];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0)
            _exit(child(r, world, tag));
    }
    for (int r = 0; r < world; r++) {
        int st;
        assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st) == 10 && r == 0)
            skip(); /* no /dev/shm here: the workers sum through the ring */
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

static void test_two(void **state) { (void)state; run_world(2); }
static void test_three(void **state) { (void)state; run_world(3); }
static void test_four(void **state) { (void)state; run_world(4); }

/* Secrets of ranks 0 and 1 under a tag of this process and salt, and rank
 * 0's segment of n floats (NULL: no /dev/shm here). */
static rt_hostreduce *first_of_two(unsigned salt, char a[17], char b[17], size_t n)
{
    unsigned tag = (unsigned)getpid() ^ salt;
    secret(a, tag, 0);
    secret(b, tag, 1);
    return rt_hostreduce_new(a, n);
}

static int checks;
static int give_up_later(void *arg)
{
    (void)arg;
    return ++checks >= 3 ? rt_error(RT_ERR_REGROUP, "the members change") : RT_OK;
}

/* More ranks than cores (pinned to one): the group is crowded, its waits
 * yield before they sleep, and the sums stay exact; unpinned, crowded
 * exactly when the ranks outnumber the cores. */
static void test_crowded(void **state)
{
    (void)state;
    char a[17], b[17];
    rt_hostreduce *me = first_of_two(0x3c3c0000u, a, b, 64), *peer = rt_hostreduce_new(b, 64);
    if (!me)
        skip();
    assert_non_null(peer);
    const char *secs[] = {a, b};
    cpu_set_t all;
    tu_pin_one_core(&all);
    assert_int_equal(rt_hostreduce_group(me, 1, 0, 2, secs), RT_OK);
    assert_true(rt_hostreduce_crowded(me));
    run_world(3); /* forked ranks inherit the one core */
    tu_unpin(&all);
    assert_int_equal(rt_hostreduce_group(me, 2, 0, 2, secs), RT_OK);
    assert_true(rt_hostreduce_crowded(me) == (CPU_COUNT(&all) < 2));
    rt_hostreduce_destroy(&peer);
    rt_hostreduce_destroy(&me);
}

/* The crowded waits' back-off (base/yieldwait.h): yields that come back
 * within 1 ms never stop them, nor does a peer's burst of a few slow ones;
 * once more than a quarter of the recent ones (a moving average, 1/64 a
 * yield) took longer, none for a second, and the average starts again
 * from zero; tripping again within the last pause's length of the
 * yields' return doubles the pause, up to 16 s; after a calm spell it is
 * a second again. */
static int slow_until_off(struct rt_yield_gauge *g, double now)
{
    int k = 1;
    while (rt_yield_note(g, 2e-3, now))
        k++;
    return k;
}

static void test_yield_gauge(void **state)
{
    (void)state;
    struct rt_yield_gauge g = {0};
    for (int i = 0; i < 1000; i++)
        assert_true(rt_yield_note(&g, 0.9e-3, 10.0));
    assert_true(rt_yield_allowed(&g, 10.0));
    /* bursts of 6 slow yields among 60 fast ones, over and over: never off */
    for (int i = 0; i < 2000; i++)
        assert_true(rt_yield_note(&g, i % 66 < 6 ? 3e-3 : 1e-5, 10.0));
    g = (struct rt_yield_gauge){0};
    assert_int_equal(slow_until_off(&g, 10.0), 19); /* 1 - (63/64)^19 > 0.25 */
    assert_false(rt_yield_allowed(&g, 10.9));
    assert_true(rt_yield_allowed(&g, 11.0));
    /* trips again 0.5 s after the return: 2 s, then 4, 8, 16, 16 */
    double at = 11.5, pause = 2.0;
    for (int i = 0; i < 5; i++, pause = pause < 16.0 ? 2.0 * pause : 16.0) {
        assert_int_equal(slow_until_off(&g, at), 19); /* (from zero again) */
        assert_false(rt_yield_allowed(&g, at + pause - 0.01));
        assert_true(rt_yield_allowed(&g, at + pause));
        at += pause + 0.5;
    }
    /* a calm spell longer than the last pause: a second again */
    at += 20.0;
    assert_int_equal(slow_until_off(&g, at), 19);
    assert_false(rt_yield_allowed(&g, at + 0.99));
    assert_true(rt_yield_allowed(&g, at + 1.0));
    /* one slow yield in eight fast ones, over and over: never off */
    struct rt_yield_gauge h = {0};
    for (int i = 0; i < 900; i++)
        assert_true(rt_yield_note(&h, i % 9 ? 1e-5 : 3e-3, 20.0));
    assert_true(rt_yield_turn(&h)); /* a real yield, on a quiet core */
}

/* A peer whose segment is there but who never sums: the check gives the
 * sum up; without one, the timeout does, naming the rank. */
static void test_absent_peer(void **state)
{
    (void)state;
    char a[17], b[17];
    rt_hostreduce *me = first_of_two(0x5a5a0000u, a, b, 64), *silent = rt_hostreduce_new(b, 64);
    if (!me)
        skip();
    assert_non_null(silent);
    const char *secs[] = {a, b};
    assert_int_equal(rt_hostreduce_group(me, 1, 0, 2, secs), RT_OK);
    checks = 0;
    struct rt_hostreduce_wait w = {.timeout_s = 30, .check = give_up_later};
    double t0 = rt_now();
    assert_int_equal(rt_hostreduce_allreduce(me, 0, 64, 0, NULL, &w), RT_ERR_REGROUP);
    assert_true(rt_now() - t0 < 5.0);
    assert_int_equal(checks, 3);
    w = (struct rt_hostreduce_wait){.timeout_s = 0.05};
    assert_int_equal(rt_hostreduce_allreduce(me, 0, 64, 0, NULL, &w), RT_ERR_TIMEOUT);
    assert_non_null(strstr(rt_error_detail(), "rank 1"));
    rt_hostreduce_destroy(&silent);
    rt_hostreduce_destroy(&me);
}

static int never(void *arg, size_t lo, size_t hi)
{
    (void)lo, (void)hi;
    ++*(int *)arg;
    return RT_OK;
}

/* A sum_apply given up while a peer had not begun it applied nothing, and
 * the peer that begins it later gives up too instead of applying; once
 * every rank began it, nobody can tell, and the answer is no. */
static void test_apply_undone(void **state)
{
    (void)state;
    char a[17], b[17];
    rt_hostreduce *me = first_of_two(0x3c3c0000u, a, b, 64), *late = rt_hostreduce_new(b, 64);
    if (!me)
        skip();
    assert_non_null(late);
    const char *secs[] = {a, b};
    assert_int_equal(rt_hostreduce_group(me, 1, 0, 2, secs), RT_OK);
    assert_int_equal(rt_hostreduce_group(late, 1, 1, 2, secs), RT_OK);
    assert_false(rt_hostreduce_apply_undone(me)); /* no sum_apply yet */
    int applied = 0;
    checks = 0;
    struct rt_hostreduce_wait w = {.timeout_s = 30, .check = give_up_later};
    struct rt_hostreduce_apply ap = {0, 64, 4, never, &applied, NULL};
    assert_int_equal(rt_hostreduce_sum_apply(me, &ap, 0, NULL, &w), RT_ERR_REGROUP);
    assert_true(rt_hostreduce_apply_undone(me));
    /* the late rank finds every READY mark there, and the given-up one */
    assert_int_equal(rt_hostreduce_sum_apply(late, &ap, 0, NULL, &w), RT_ERR_REGROUP);
    assert_non_null(strstr(rt_error_detail(), "gave this step up"));
    assert_int_equal(applied, 0);
    assert_false(rt_hostreduce_apply_undone(me)); /* both began it now */
    /* a new generation: nobody has given anything up in it */
    assert_int_equal(rt_hostreduce_group(me, 2, 0, 2, secs), RT_OK);
    assert_int_equal(rt_hostreduce_group(late, 2, 1, 2, secs), RT_OK);
    assert_false(rt_hostreduce_apply_undone(me));
    rt_hostreduce_destroy(&late);
    rt_hostreduce_destroy(&me);
}

/* Only a segment of this layout and size, this user's alone, is a peer's. */
static void test_not_a_peer(void **state)
{
    (void)state;
    char a[17], b[17], path[96];
    rt_hostreduce *me = first_of_two(0xa5a50000u, a, b, 64);
    if (!me)
        skip();
    const char *secs[] = {a, b};
    assert_true(rt_hostreduce_group(me, 1, 0, 2, secs) < 0); /* not there at all */
    rt_hostreduce *other = rt_hostreduce_new(b, 65);
    assert_non_null(other);
    assert_true(rt_hostreduce_group(me, 1, 0, 2, secs) < 0); /* another size */
    assert_false(rt_hostreduce_grouped(me));
    rt_hostreduce_destroy(&other);
    other = rt_hostreduce_new(b, 64);
    assert_non_null(other);
    snprintf(path, sizeof path, "/dev/shm/ragtag-%s-grads", b);
    assert_int_equal(chmod(path, 0644), 0);
    assert_true(rt_hostreduce_group(me, 1, 0, 2, secs) < 0); /* open to others */
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(rt_hostreduce_group(me, 1, 0, 2, secs), RT_OK);
    assert_true(rt_hostreduce_grouped(me));
    rt_hostreduce_destroy(&other);
    rt_hostreduce_destroy(&me);
    assert_int_not_equal(access(path, F_OK), 0); /* the owner removed its name */
}

static void age(const char *path)
{
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= 2 * (time_t)RT_SHM_STALE_AGE;
    t[1] = t[0];
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* A killed worker's gradient goes at the next sweep, and so does one whose
 * owner's pid now names another process (a container's restarted pid 1);
 * a live one's stays, however old its name. */
static void test_sweep_dead_owner(void **state)
{
    (void)state;
    char a[17], b[17], live[96], dead[96];
    unsigned tag = (unsigned)getpid() ^ 0x3c3c0000u;
    rt_hostreduce *mine = first_of_two(0x3c3c0000u, a, b, 64);
    if (!mine)
        skip();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(rt_hostreduce_new(b, 64) ? 0 : 1); /* dies without removing it */
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 0);
    snprintf(live, sizeof live, "/dev/shm/ragtag-%s-grads", a);
    snprintf(dead, sizeof dead, "/dev/shm/ragtag-%s-grads", b);
    char reused[96], c[17];
    secret(c, tag, 2);
    rt_hostreduce *again = rt_hostreduce_new(c, 64);
    assert_non_null(again);
    snprintf(reused, sizeof reused, "/dev/shm/ragtag-%s-grads", c);
    int fd = open(reused, O_WRONLY);
    uint64_t other_start = 12345; /* hostreduce.c's header: the start at byte 16 */
    assert_int_equal(pwrite(fd, &other_start, sizeof other_start, 16), sizeof other_start);
    close(fd);
    age(live);
    age(dead);
    age(reused);
    rt_shm_sweep("/dev/shm", RT_SHM_STALE_AGE, NULL);
    assert_int_equal(access(live, F_OK), 0);
    assert_int_not_equal(access(dead, F_OK), 0);
    assert_int_not_equal(access(reused, F_OK), 0);
    rt_hostreduce_destroy(&again);
    rt_hostreduce_destroy(&mine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two),
        cmocka_unit_test(test_three),
        cmocka_unit_test(test_four),
        cmocka_unit_test(test_crowded),
        cmocka_unit_test(test_yield_gauge),
        cmocka_unit_test(test_absent_peer),
        cmocka_unit_test(test_apply_undone),
        cmocka_unit_test(test_not_a_peer),
        cmocka_unit_test(test_sweep_dead_owner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
