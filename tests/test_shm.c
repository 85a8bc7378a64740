/* test_shm.c — same-host queues (net/shm.h): a round trip through a
 * segment, a full queue that refuses more, the name gone once mapped; and
 * the sweep of names that killed processes left: old names of ours go
 * (a worker's gradient only once its owner is gone: test_hostreduce.c),
 * fresh ones, other names and other kinds of file stay. */
#include "config.h"

#include "testutil.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"
#include "status.h"

#define RUN "0123456789abcdef0123456789abcdef"

static void test_round_trip(void **state)
{
    (void)state;
    char name[64], path[96];
    snprintf(name, sizeof name, "/ragtag-%08x%08x-g7", (unsigned)getpid(), (unsigned)time(NULL));
    snprintf(path, sizeof path, "/dev/shm%s", name);
    rt_shm *own = rt_shm_create(name, RUN, 7, 2, 128, 1);
    if (!own)
        skip(); /* no /dev/shm here: the workers use TCP */
    struct rt_shm_wait w = {.timeout_s = 1.0};
    rt_shm *peer = rt_shm_open(name, RUN, 7, &w);
    assert_non_null(peer);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(rt_shm_unlink_when_attached(own, &w), RT_OK);
    assert_int_not_equal(access(path, F_OK), 0); /* mapped: the name is gone */
    /* another run's or generation's segment is refused */
    assert_null(rt_shm_open(name, RUN, 8, &(struct rt_shm_wait){.timeout_s = 0.05}));
    for (uint32_t i = 0; i < 2; i++) {
        assert_true(rt_shm_can_put(peer));
        memset(rt_shm_slot_to_fill(peer), (int)(0x40 + i), 128);
        struct rt_shm_desc d = {.op = 5, .t = i, .bytes = 128};
        rt_shm_publish(peer, &d);
    }
    assert_false(rt_shm_can_put(peer)); /* two slots */
    for (uint32_t i = 0; i < 2; i++) {
        struct rt_shm_desc d;
        const void *p;
        assert_int_equal(rt_shm_peek(own, &d, &p), 1);
        assert_int_equal(d.t, i);
        assert_int_equal(((const unsigned char *)p)[127], 0x40 + i);
        rt_shm_consume(own, NULL);
    }
    struct rt_shm_desc d;
    const void *p;
    assert_int_equal(rt_shm_peek(own, &d, &p), 0);
    assert_true(rt_shm_can_put(peer));
    rt_shm_close(&peer);
    rt_shm_close(&own);
}

/* A file in dir, last changed `age` seconds ago. */
static void make_file(const char *dir, const char *name, size_t bytes, double age)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= (time_t)age;
    t[1] = t[0];
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

static bool present(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void test_sweep(void **state)
{
    (void)state;
    char dir[256];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    const double hour = 3600.0;
    make_file(dir, "ragtag-0123456789abcdef-g1", 4096, hour);           /* a ring's: goes */
    make_file(dir, "ragtag-fedcba9876543210-g12-gossip3", 8192, hour);  /* gossip's: goes */
    make_file(dir, "ragtag-0123456789abcdef-g2", 4096, 5.0);            /* set-up now: stays */
    make_file(dir, "ragtag-0123456789abcdef-grads", 16384, hour);       /* a gradient never
                                                                           initialised: goes */
    make_file(dir, "ragtag-00112233445566ff-grads", 4096, 5.0);         /* fresh: stays */
    make_file(dir, "ragtag-0123456789abcde-g1", 4096, hour);            /* 15 digits */
    make_file(dir, "ragtag-0123456789abcdef-g1-other", 4096, hour);     /* another suffix */
    make_file(dir, "ragtag-0123456789abcdef-g", 4096, hour);            /* no generation */
    make_file(dir, "ragtag-0123456789abcdef-g1-gossip", 4096, hour);    /* no rank */
    make_file(dir, "someone-else", 4096, hour);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/ragtag-00112233445566ff-g1", dir); /* not a file */
    assert_int_equal(mkdir(sub, 0700), 0);
    uint64_t bytes = 0;
    assert_int_equal(rt_shm_sweep(dir, RT_SHM_STALE_AGE, &bytes), 3);
    assert_int_equal(bytes, 4096 + 8192 + 16384);
    assert_false(present(dir, "ragtag-0123456789abcdef-grads"));
    assert_false(present(dir, "ragtag-0123456789abcdef-g1"));
    assert_false(present(dir, "ragtag-fedcba9876543210-g12-gossip3"));
    static const char *const kept[] = {
        "ragtag-0123456789abcdef-g2", "ragtag-00112233445566ff-grads", "ragtag-0123456789abcde-g1",
        "ragtag-0123456789abcdef-g1-other", "ragtag-0123456789abcdef-g",
        "ragtag-0123456789abcdef-g1-gossip", "someone-else", "ragtag-00112233445566ff-g1"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        assert_true(present(dir, kept[i]));
        if (i + 1 < sizeof kept / sizeof kept[0]) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, kept[i]);
            unlink(path);
        }
    }
    /* again: nothing left of ours to remove */
    assert_int_equal(rt_shm_sweep(dir, RT_SHM_STALE_AGE, NULL), 0);
    rmdir(sub);
    assert_int_equal(rmdir(dir), 0);
    /* a directory that is not there: nothing, no error */
    assert_int_equal(rt_shm_sweep(dir, 0.0, &bytes), 0);
    assert_int_equal(bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
