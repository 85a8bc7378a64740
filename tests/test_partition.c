/* test_partition.c — shares of a batch by speed (src/partition.c):
 * they add up to n, every active worker gets at least one item, each share
 * is within one item of the exact proportion, standby workers get nothing,
 * the roles change with hysteresis, and the speed window averages. */
#include "config.h"

#include "testutil.h"

#include "partition.h"

static void test_shares_add_up_and_follow_speeds(void **state)
{
    (void)state;
    rt_rng s;
    rt_rng_seed(&s, 42, 1);
    for (int trial = 0; trial < 2000; trial++) {
        int world = 1 + (int)(rt_rng_next(&s) % 9);
        long n = (long)(rt_rng_next(&s) % 300);
        double speed[9];
        long share[9];
        double tot = 0.0;
        for (int r = 0; r < world; r++) {
            speed[r] = 10.0 + (double)(rt_rng_next(&s) % 100000) / 7.0;
            tot += speed[r];
        }
        rt_plan_shares(n, world, speed, NULL, share);
        long sum = 0;
        for (int r = 0; r < world; r++) {
            sum += share[r];
            if (n >= world) {
                assert_true(share[r] >= 1);
                /* first one each, the rest by largest remainder */
                double exact = 1.0 + (double)(n - world) * speed[r] / tot;
                assert_true(fabs((double)share[r] - exact) < 1.0 + 1e-9);
            }
        }
        assert_int_equal(sum, n);
        long again[9];
        rt_plan_shares(n, world, speed, NULL, again);
        assert_memory_equal(share, again, sizeof(long) * (size_t)world);
    }
}

static void test_standby_gets_nothing(void **state)
{
    (void)state;
    double speed[3] = {1000.0, 1000.0, 10.0};
    bool active[3] = {true, true, true};
    long share[3], off[3];
    assert_true(rt_plan_standby(3, speed, 0.1, active));
    assert_true(active[0] && active[1] && !active[2]);
    rt_plan_shares(64, 3, speed, active, share);
    assert_int_equal(share[0] + share[1], 64);
    assert_int_equal(share[2], 0);
    rt_plan_offsets(3, share, off);
    assert_int_equal(off[0], 0);
    assert_int_equal(off[1], share[0]);
    assert_int_equal(off[2], 64);
    /* hysteresis: back only above 1.5 x min_share x mean of the active */
    speed[2] = 120.0; /* 0.12 of the mean 1000: not enough */
    assert_false(rt_plan_standby(3, speed, 0.1, active));
    assert_false(active[2]);
    speed[2] = 160.0;
    assert_true(rt_plan_standby(3, speed, 0.1, active));
    assert_true(active[2]);
    /* the fastest never leaves; min_share 0 brings everybody back */
    double one[2] = {5.0, 0.0};
    bool a2[2] = {true, true};
    rt_plan_standby(2, one, 0.9, a2);
    assert_true(a2[0]);
    assert_false(a2[1]);
    assert_true(rt_plan_standby(2, one, 0.0, a2));
    assert_true(a2[1]);
}

/* A worker on a fifth of a core: its samples are few, but the ring
 * traffic and the update it must do every step take it 5 ms, which every
 * step then waits for. */
static void test_standby_for_overhead(void **state)
{
    (void)state;
    double speed[3] = {12000.0, 12000.0, 1300.0};
    double over[3] = {0.0006, 0.0006, 0.005};
    bool active[3] = {true, true, true};
    double all = rt_plan_step_time(64, 3, speed, over, active);
    assert_true(fabs(all - (64.0 / 25300.0 + 0.005)) < 1e-12);
    assert_true(rt_plan_standby_overhead(64, 3, speed, over, 0.05, active));
    assert_true(active[0] && active[1] && !active[2]);
    assert_true(rt_plan_step_time(64, 3, speed, over, active) < 0.5 * all);
    /* back only when it helps by twice the margin: 1% better is not enough */
    over[2] = 0.0007;
    assert_false(rt_plan_standby_overhead(64, 3, speed, over, 0.05, active));
    assert_false(active[2]);
    speed[2] = 6000.0;
    over[2] = 0.0;
    assert_true(rt_plan_standby_overhead(64, 3, speed, over, 0.05, active));
    assert_true(active[2]);
    /* no overhead: every worker's samples shorten the step, nobody leaves */
    double none[3] = {0.0, 0.0, 0.0};
    double slow[3] = {12000.0, 12000.0, 50.0};
    bool act[3] = {true, true, true};
    assert_false(rt_plan_standby_overhead(64, 3, slow, none, 0.05, act));
    /* the fastest never leaves, even when it alone is slow to step */
    double big[2] = {0.01, 0.0};
    double sp[2] = {1000.0, 900.0};
    bool a2[2] = {true, true};
    rt_plan_standby_overhead(64, 2, sp, big, 0.05, a2);
    assert_true(a2[0]);
}

static void test_unmeasured_speeds_still_get_work(void **state)
{
    (void)state;
    double speed[3] = {0.0, NAN, 500.0};
    long share[3];
    rt_plan_shares(30, 3, speed, NULL, share);
    assert_int_equal(share[0] + share[1] + share[2], 30);
    assert_int_equal(share[0], 10);
    assert_int_equal(share[1], 10);
    /* fewer items than workers: no minimum, still adds up */
    rt_plan_shares(2, 3, speed, NULL, share);
    assert_int_equal(share[0] + share[1] + share[2], 2);
}

static void test_speed_window(void **state)
{
    (void)state;
    struct rt_speedo sp;
    rt_speedo_reset(&sp);
    assert_true(rt_speedo_rate(&sp) == 0.0);
    rt_speedo_add(&sp, 0, 1.0);   /* ignored */
    rt_speedo_add(&sp, 10, -1.0); /* ignored */
    assert_false(rt_speedo_full(&sp));
    for (int i = 0; i < RT_SPEED_WINDOW; i++)
        rt_speedo_add(&sp, 100, 1.0);
    assert_true(rt_speedo_full(&sp));
    assert_true(fabs(rt_speedo_rate(&sp) - 100.0) < 1e-9);
    /* the window moves: after a full window at 50/s only that counts */
    for (int i = 0; i < RT_SPEED_WINDOW; i++)
        rt_speedo_add(&sp, 50, 1.0);
    assert_true(fabs(rt_speedo_rate(&sp) - 50.0) < 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_add_up_and_follow_speeds),
        cmocka_unit_test(test_standby_gets_nothing),
        cmocka_unit_test(test_standby_for_overhead),
        cmocka_unit_test(test_unmeasured_speeds_still_get_work),
        cmocka_unit_test(test_speed_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
