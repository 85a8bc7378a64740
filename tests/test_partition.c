/* test_partition.c — shares of a batch by speed (src/partition.c):
 * they add up to n, every active worker gets at least one item, each share
 * is within one item of the exact proportion, standby workers get nothing,
 * the roles change with hysteresis, and the speed window averages; shares
 * capped by a worker's memory; the memory limit read from a fake cgroup
 * tree (v1 and v2). */
#include "config.h"

#include "testutil.h"

#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "memory.h"
#include "pacer.h"
#include "partition.h"
#include "planner.h"
#include "status.h"
#include "trainer.h"

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
    assert_true(fabs(all - 0.005) < 1e-12); /* its overhead alone */
    assert_true(rt_plan_standby_overhead(64, 3, speed, over, 0.05, active));
    assert_true(active[0] && active[1] && !active[2]);
    double two = rt_plan_step_time(64, 3, speed, over, active);
    assert_true(fabs(two - (0.0006 + 32.0 / 12000.0)) < 1e-12);
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

/* A worker on a fifth of a core beside two on 0.8: what bench_hetero
 * measured (burst 48.5 and 53 us of CPU a sample, 0.15 ms of CPU a step
 * outside computing each). At its quota a sample costs w3 265 us and its
 * step's other work 0.75 ms: 4 samples fit beside the others' 30 (5 held
 * every step; the proportional cut gave it 7 and the run lost a quarter). */
static void test_shares_timed_with_overheads(void **state)
{
    (void)state;
    double speed[3] = {0.8 / 48.5e-6, 0.8 / 48.5e-6, 0.2 / 53e-6};
    double over[3] = {0.15e-3 / 0.8, 0.15e-3 / 0.8, 0.15e-3 / 0.2};
    bool act[3] = {true, true, true};
    long sh[3], prop[3];
    assert_true(rt_plan_shares_timed(64, 3, speed, over, act, NULL, sh));
    assert_int_equal(sh[0] + sh[1] + sh[2], 64);
    assert_int_equal(sh[2], 4);
    assert_true(labs(sh[0] - sh[1]) <= 1);
    rt_plan_shares(64, 3, speed, act, prop);
    assert_true(prop[2] >= 6);
    /* the cut's step is the shortest of every cut moving a sample to or from w3 */
    double t = rt_plan_shares_time(3, sh, speed, over, act);
    for (int d = -2; d <= 2; d++) {
        long alt[3] = {sh[0], sh[1], sh[2] + d};
        alt[d > 0 ? 0 : 1] -= d;
        assert_true(rt_plan_shares_time(3, alt, speed, over, act) >= t);
    }
    /* and it lies on the fluid level's integer side */
    double level = rt_plan_step_time(64, 3, speed, over, act);
    assert_true(level <= t && t < level + 300e-6);
    /* no overheads: the proportional cut, bit for bit */
    long plain[3];
    assert_true(rt_plan_shares_timed(64, 3, speed, NULL, act, NULL, plain));
    assert_memory_equal(plain, prop, sizeof plain);
    /* caps hold, and a cut that cannot fit says so */
    long cap[3] = {20, 64, 64}, c[3];
    assert_true(rt_plan_shares_timed(64, 3, speed, over, act, cap, c));
    assert_int_equal(c[0], 20);
    assert_int_equal(c[0] + c[1] + c[2], 64);
    long tiny[3] = {10, 10, 10};
    assert_false(rt_plan_shares_timed(64, 3, speed, over, act, tiny, c));
    /* standby: nothing; an overhead beyond the whole step: one sample */
    act[2] = false;
    assert_true(rt_plan_shares_timed(64, 3, speed, over, act, NULL, c));
    assert_int_equal(c[2], 0);
    act[2] = true;
    over[2] = 1.0;
    assert_true(rt_plan_shares_timed(64, 3, speed, over, act, NULL, c));
    assert_int_equal(c[2], 1);
}

/* A new plan only for a step shorter by more than the margin: two equal
 * workers whose 16-step speeds differ by noise keep an even cut, a real
 * difference moves it, and a plan that leaves an active worker without a
 * share (the members changed) always gives way. */
static void test_plan_worth_a_change(void **state)
{
    (void)state;
    bool act[3] = {true, true, true};
    long even[2] = {32, 32}, noisy[2] = {33, 31}, skew[2] = {34, 30};
    double sp[2] = {1300.0, 1240.0}; /* 5% apart: 33 / 31 shortens the step 1.6% */
    assert_true(fabs(rt_plan_shares_time(2, even, sp, NULL, act) - 32.0 / 1240.0) < 1e-12);
    assert_false(rt_plan_worth(2, even, noisy, sp, NULL, act, 1, 0.05));
    assert_false(rt_plan_worth(2, even, skew, sp, NULL, act, 1, 0.05)); /* 34 / 30 is slower */
    double eq[2] = {1300.0, 1300.0}; /* the start's probes said 34 / 30, training says equal */
    assert_true(rt_plan_worth(2, skew, even, eq, NULL, act, 1, 0.05)); /* 6.25% shorter */
    assert_false(rt_plan_worth(2, skew, even, eq, NULL, act, 1, 0.07));
    assert_false(rt_plan_worth(2, skew, even, eq, NULL, act, 4, 0.0)); /* moved 2: within slack */
    double fast[2] = {2000.0, 1000.0};
    long third[2] = {43, 21};
    assert_true(rt_plan_worth(2, even, third, fast, NULL, act, 1, 0.05)); /* 2x: 1.5x shorter */
    /* an active worker with no share, or no speed: the old plan cannot stand */
    long none[3] = {32, 32, 0}, three[3] = {22, 21, 21};
    double sp3[3] = {1000.0, 1000.0, 1000.0};
    assert_true(isinf(rt_plan_shares_time(3, none, sp3, NULL, act)));
    assert_true(rt_plan_worth(3, none, three, sp3, NULL, act, 1, 0.05));
    act[2] = false; /* on standby: no share is right */
    assert_false(rt_plan_worth(3, none, (long[3]){33, 31, 0}, sp3, NULL, act, 1, 0.05));
    assert_false(rt_plan_worth(3, (long[3]){0, 0, 0}, (long[3]){0, 0, 0}, sp3, NULL, act, 1, 0.05));
}

/* A run of 2 as rank 1 sees it: rank 0's speed comes in through a fake
 * collective's exchange of speeds (no overhead, a whole batch's rows). */
static double peer_speed;

static int peer_allreduce_f64(void *ctx, double *buf, size_t n)
{
    (void)ctx;
    assert_int_equal(n, 6); /* speeds, overheads and rows of 2 ranks */
    buf[0] = peer_speed;
    buf[2] = 0.0;
    buf[4] = 64.0;
    return RT_OK;
}

static void replan_as_rank1(struct rt_planner *p, double peer, double mine, long *share)
{
    peer_speed = peer;
    assert_int_equal(rt_planner_replan(p, 0, mine, "test"), RT_OK);
    share[0] = p->share[0];
    share[1] = p->share[1];
}

/* The plan made on the start's probes is replaced by the first plan on
 * speeds measured in training, however small the change; after that a
 * move of one sample stays within the hysteresis. */
static void test_probe_plan_replaced_in_training(void **state)
{
    (void)state;
    static const struct rt_collective_ops ops = {.allreduce_f64 = peer_allreduce_f64};
    rt_collective coll = {.ops = &ops};
    struct rt_trainer t;
    memset(&t, 0, sizeof t);
    t.c.batch = 64;
    t.c.threads = 1;
    t.rank = 1;
    t.world = 2;
    t.rows = 64;
    t.coll = &coll;
    t.dev = rt_dev_open("cpu", 0, 1);
    assert_non_null(t.dev);
    struct rt_planner p;
    long sh[2];
    assert_int_equal(rt_planner_init(&p, &t, true, true), RT_OK);
    replan_as_rank1(&p, 4331.0, 4539.0, sh); /* the probes, 5% apart */
    assert_int_equal(sh[0], 31);
    assert_int_equal(sh[1], 33);
    replan_as_rank1(&p, 5000.0, 5010.0, sh); /* training: equal */
    assert_int_equal(sh[0], 32);
    assert_int_equal(sh[1], 32);
    assert_int_equal(p.plans_changed, 2);
    replan_as_rank1(&p, 4331.0, 4539.0, sh); /* settled: one sample is noise */
    assert_int_equal(sh[0], 32);
    assert_int_equal(sh[1], 32);
    assert_int_equal(p.plans_changed, 2);
    replan_as_rank1(&p, 3000.0, 6000.0, sh); /* a real change */
    assert_true(sh[1] > 40 && sh[0] + sh[1] == 64);
    assert_int_equal(p.plans_changed, 3);
    rt_planner_free(&p);
    rt_dev_close(&t.dev);
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

/* The window's full flag and length, as the planner reads them. */
static bool window_full(const struct rt_speedo *sp)
{
    int steps;
    bool full;
    (void)rt_speedo_measure(sp, &steps, &full);
    return full;
}

static int window_steps(const struct rt_speedo *sp)
{
    int steps;
    bool full;
    (void)rt_speedo_measure(sp, &steps, &full);
    return steps;
}

/* Steps of `seconds` each, back to back on a clock of our own. */
static void add_steps(struct rt_speedo *sp, double *clock, int count, long samples,
                      double seconds)
{
    for (int i = 0; i < count; i++) {
        *clock += seconds;
        rt_speedo_add_at(sp, samples, seconds, *clock);
    }
}

static void test_speed_window(void **state)
{
    (void)state;
    struct rt_speedo sp;
    double clock = 100.0;
    rt_speedo_reset(&sp);
    assert_true(rt_speedo_rate(&sp) == 0.0);
    rt_speedo_add_at(&sp, 0, 1.0, 1.0);   /* ignored */
    rt_speedo_add_at(&sp, 10, -1.0, 1.0); /* ignored */
    assert_false(window_full(&sp));
    /* slow steps (1 s each): the window is RT_SPEED_WINDOW of them */
    add_steps(&sp, &clock, RT_SPEED_WINDOW - 1, 100, 1.0);
    assert_false(window_full(&sp));
    add_steps(&sp, &clock, 1, 100, 1.0);
    assert_true(window_full(&sp));
    assert_int_equal(window_steps(&sp), RT_SPEED_WINDOW);
    assert_true(fabs(rt_speedo_rate(&sp) - 100.0) < 1e-9);
    /* the window moves: after a full window at 50/s only that counts */
    add_steps(&sp, &clock, RT_SPEED_WINDOW, 50, 1.0);
    assert_true(fabs(rt_speedo_rate(&sp) - 50.0) < 1e-9);
    /* a few steps slowed 10-fold (a busy neighbour) do not move it; a
     * speed that holds for more than half the window does */
    add_steps(&sp, &clock, 3, 50, 10.0);
    assert_true(fabs(rt_speedo_rate(&sp) - 50.0) < 1e-9);
    add_steps(&sp, &clock, RT_SPEED_WINDOW / 2 + 1, 20, 1.0);
    assert_true(fabs(rt_speedo_rate(&sp) - 20.0) < 1e-9);
    /* the steps' rates, whatever their shares (samples over seconds would
     * be 340 / 7 = 48.6): 10 at 100/s and 6 at 40/s, of which the middle
     * half (the 5th to the 12th) is 2 at 40 and 6 at 100 */
    rt_speedo_reset(&sp);
    add_steps(&sp, &clock, 10, 10, 0.1);
    add_steps(&sp, &clock, 6, 40, 1.0);
    assert_true(fabs(rt_speedo_rate(&sp) - 85.0) < 1e-9);
}

/* Short steps: the window holds RT_SPEED_SECONDS of them, so phases of a
 * few tens of ms (a CPU quota's period, a host's slow spell) no longer
 * swing the speed from one window to the next. */
static void test_speed_window_spans_time(void **state)
{
    (void)state;
    struct rt_speedo sp;
    double clock = 0.0, step = 0.0025; /* lenet's 2.5 ms steps */
    int per_window = (int)(RT_SPEED_SECONDS / step + 0.5);
    rt_speedo_reset(&sp);
    add_steps(&sp, &clock, per_window / 2, 64, step);
    assert_true(window_steps(&sp) >= RT_SPEED_WINDOW); /* past 16 steps, not yet full */
    assert_false(window_full(&sp));
    add_steps(&sp, &clock, per_window - per_window / 2, 64, step);
    assert_true(window_full(&sp));
    assert_int_equal(window_steps(&sp), per_window);
    /* phases of 20 steps (50 ms) at 64 and 32 samples a step: a 16-step
     * window read one or the other, this one their mean, give or take the
     * step more of one phase that the window's edge may hold */
    rt_speedo_reset(&sp);
    double lo = 1e30, hi = 0.0;
    for (int phase = 0; phase < 40; phase++) {
        add_steps(&sp, &clock, 20, phase % 2 ? 32 : 64, step);
        if (window_full(&sp)) {
            double r = rt_speedo_rate(&sp);
            lo = r < lo ? r : lo;
            hi = r > hi ? r : hi;
        }
    }
    double mid = 0.5 * (64.0 + 32.0) / step;
    assert_true(fabs(lo - mid) < 0.01 * mid && fabs(hi - mid) < 0.01 * mid);
    /* the planner's one pass gives the rate too */
    int steps;
    bool full;
    assert_true(rt_speedo_measure(&sp, &steps, &full) == rt_speedo_rate(&sp));
    assert_true(full && steps >= per_window);
    /* a full history of short steps is a window whatever it spans */
    rt_speedo_reset(&sp);
    add_steps(&sp, &clock, RT_SPEED_STEPS_MAX + 5, 1, 1e-6);
    assert_true(window_full(&sp));
    assert_int_equal(window_steps(&sp), RT_SPEED_STEPS_MAX);
    assert_true(fabs(rt_speedo_rate(&sp) - 1e6) < 1e-3);
    /* the length every worker derives from the speeds they exchanged */
    assert_int_equal(rt_speed_window_steps(0.0), RT_SPEED_WINDOW);
    assert_int_equal(rt_speed_window_steps(10.0), RT_SPEED_WINDOW);
    assert_int_equal(rt_speed_window_steps(400.0), (long)ceil(400.0 * RT_SPEED_SECONDS));
    assert_int_equal(rt_speed_window_steps(1e9), RT_SPEED_STEPS_MAX);
    assert_int_equal(rt_speed_window_steps(NAN), RT_SPEED_WINDOW);
}

/* Caps: no share above its cap, the sum is n, the uncapped keep their
 * proportion of what is left, no caps is rt_plan_shares, and caps short
 * of n say so. */
static void test_shares_capped_by_memory(void **state)
{
    (void)state;
    double speed[4] = {100, 100, 100, 100};
    long cap[4] = {5, 1000, 1000, 1000}, share[4], plain[4];
    assert_true(rt_plan_shares_capped(64, 4, speed, NULL, cap, share));
    assert_int_equal(share[0], 5);
    assert_int_equal(share[0] + share[1] + share[2] + share[3], 64);
    for (int r = 1; r < 4; r++)
        assert_true(share[r] >= 19 && share[r] <= 20);
    assert_true(rt_plan_shares_capped(64, 4, speed, NULL, NULL, share));
    rt_plan_shares(64, 4, speed, NULL, plain);
    assert_memory_equal(share, plain, sizeof share);
    /* a cap that another cap's excess then pushes over: rounds go on */
    double fast[3] = {1000, 100, 100};
    long cap3[3] = {10, 30, 1000}, s3[3];
    assert_true(rt_plan_shares_capped(100, 3, fast, NULL, cap3, s3));
    assert_int_equal(s3[0], 10);
    assert_int_equal(s3[1], 30);
    assert_int_equal(s3[2], 60);
    /* standby workers stay at 0 */
    bool act[3] = {true, false, true};
    assert_true(rt_plan_shares_capped(100, 3, fast, act, cap3, s3));
    assert_int_equal(s3[1], 0);
    assert_int_equal(s3[0] + s3[2], 100);
    /* not enough memory among them */
    long tiny[2] = {10, 20}, s2[2];
    assert_false(rt_plan_shares_capped(64, 2, speed, NULL, tiny, s2));
    assert_true(s2[0] <= 10 && s2[1] <= 20);
    /* random: caps respected, sums right, the same every time */
    rt_rng g;
    rt_rng_seed(&g, 7, 3);
    for (int trial = 0; trial < 500; trial++) {
        int w = 1 + (int)(rt_rng_next(&g) % 8);
        long n = (long)(rt_rng_next(&g) % 256), sum = 0, caps = 0, sh[8], again[8], cp[8];
        double sp[8];
        for (int r = 0; r < w; r++) {
            sp[r] = 1.0 + (double)(rt_rng_next(&g) % 5000);
            cp[r] = (long)(rt_rng_next(&g) % 80);
            caps += cp[r];
        }
        bool ok = rt_plan_shares_capped(n, w, sp, NULL, cp, sh);
        assert_true(ok == (caps >= n));
        for (int r = 0; r < w; r++) {
            assert_true(sh[r] >= 0 && sh[r] <= cp[r]);
            sum += sh[r];
        }
        if (ok)
            assert_int_equal(sum, n);
        rt_plan_shares_capped(n, w, sp, NULL, cp, again);
        assert_memory_equal(sh, again, sizeof(long) * (size_t)w);
    }
}

static void put(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A fake /proc/self/cgroup and cgroup mounts: v1's limit is the smallest
 * along the path (a parent's holds too), v1's "no limit" and v2's "max"
 * are none, v2 is read from the root or its unified mount. */
static void test_memory_limit_fake_cgroups(void **state)
{
    (void)state;
    char root[256], d[512], proc[512];
    snprintf(root, sizeof root, "%s", tu_tmpdir());
    snprintf(proc, sizeof proc, "%s/cgroup", root);
    snprintf(d, sizeof d, "%s/memory", root);
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(d, sizeof d, "%s/memory/kube", root);
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(d, sizeof d, "%s/memory/kube/pod", root);
    assert_int_equal(mkdir(d, 0755), 0);
    put(root, "memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(root, "memory/kube/memory.limit_in_bytes", "536870912\n");
    put(root, "memory/kube/pod/memory.limit_in_bytes", "9223372036854771712\n");
    put(root, "cgroup", "12:cpu,cpuacct:/kube/pod\n7:memory:/kube/pod\n0::/\n");
    assert_true(rt_mem_limit_at(proc, root) == 536870912u);
    put(root, "memory/kube/pod/memory.limit_in_bytes", "268435456\n");
    assert_true(rt_mem_limit_at(proc, root) == 268435456u);
    /* no memory line: none */
    put(root, "cgroup", "12:cpu,cpuacct:/kube/pod\n");
    assert_true(rt_mem_limit_at(proc, root) == 0);
    /* v2 */
    snprintf(d, sizeof d, "%s/box", root);
    assert_int_equal(mkdir(d, 0755), 0);
    put(root, "box/memory.max", "max\n");
    put(root, "cgroup", "0::/box\n");
    assert_true(rt_mem_limit_at(proc, root) == 0);
    put(root, "box/memory.max", "67108864\n");
    assert_true(rt_mem_limit_at(proc, root) == 67108864u);
    snprintf(d, sizeof d, "%s/unified", root);
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(d, sizeof d, "%s/unified/u", root);
    assert_int_equal(mkdir(d, 0755), 0);
    put(root, "unified/u/memory.max", "134217728\n");
    put(root, "cgroup", "0::/u\n");
    assert_true(rt_mem_limit_at(proc, root) == 134217728u);
    assert_true(rt_mem_limit_at("/nonexistent/cgroup", root) == 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    /* this process: a peak at least what it holds now */
    assert_true(rt_mem_rss() > 0);
    assert_true(rt_mem_peak() >= rt_mem_rss() / 2);
}

/* The estimate counts what each mode keeps beside the model: average and
 * gossip a copy of the agreed state and of the optimiser's, gossip also
 * the copy its request sent and the average it answers with, sync the
 * shared copy of the weights and optimiser state of a host's workers
 * (--host-replica). */
static void test_memory_estimate_by_mode(void **state)
{
    (void)state;
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", F_OK) != 0 &&
        !getenv("RAGTAG_DATA_DIR"))
        skip(); /* the estimate reads the data set's headers */
    const char *model = "[net]\ninput = 28x28x1\nclasses = 10\n[dense]\nunits = 32\n"
                        "activation = relu\n[dense]\nunits = 10\n[softmax]\n";
    const uint64_t np = 28 * 28 * 32 + 32 + 32 * 10 + 10;
    struct rt_train_config c;
    rt_train_config_defaults(&c);
    snprintf(c.data_spec, sizeof c.data_spec, "fashion-mnist");
    c.optim.kind = RT_OPT_SGD;
    c.optim.momentum = 0.9f; /* one state vector */
    struct rt_mem_need sync, own, avg, gossip, alone;
    c.mode = RT_MODE_SYNC;
    int rc = rt_mem_estimate(model, &c, 3, &sync);
    if (rc != RT_OK)
        fail_msg("estimate: %s", rt_error_detail());
    c.host_replica = false;
    assert_int_equal(rt_mem_estimate(model, &c, 3, &own), RT_OK);
    assert_true(sync.model == own.model + 2 * np * sizeof(float)); /* weights, momentum */
    c.mode = RT_MODE_AVERAGE;
    assert_int_equal(rt_mem_estimate(model, &c, 3, &avg), RT_OK);
    c.mode = RT_MODE_GOSSIP;
    assert_int_equal(rt_mem_estimate(model, &c, 3, &gossip), RT_OK);
    assert_int_equal(rt_mem_estimate(model, &c, 1, &alone), RT_OK);
    assert_true(avg.model == own.model + 2 * np * sizeof(float));
    assert_true(gossip.model == avg.model + 2 * np * sizeof(float));
    assert_true(alone.model == own.model); /* one worker keeps nothing more */
}

/* Burn `cpu` seconds of this thread's CPU. */
static void burn(double cpu)
{
    volatile double x = 1.0;
    const double end = rt_cpu_now() + cpu;
    while (rt_cpu_now() < end)
        for (int i = 0; i < 1000; i++)
            x = x * 1.0000001 + 1e-9;
}

/* Paced at a quota of 0.2 cores, a process that burned 60 ms of CPU has
 * slept until it used no more than that rate since the pacer started (up
 * to the few us spent after the last check, which the next step's check
 * pays for: 0.1 ms allowed); with no quota it never sleeps. Only lower bounds on
 * time: a busy machine makes the ratio smaller, never larger (the burns
 * would have to run 5 times slower than the CPU time they use for the
 * pacer to owe no sleep). */
static void test_pacer_keeps_under_quota(void **state)
{
    (void)state;
    struct rt_pacer pc;
    rt_pacer_init(&pc, 0.0);
    burn(0.02);
    assert_true(rt_pacer_wait(&pc) == 0.0);
    rt_pacer_init(&pc, 0.2);
    const double w0 = rt_now(), c0 = rt_cpu_now();
    for (int i = 0; i < 3; i++) {
        burn(0.02);
        rt_pacer_wait(&pc);
    }
    const double used = rt_cpu_now() - c0, wall = rt_now() - w0;
    assert_true(pc.slept > 0.0);
    assert_true(used <= 0.2 * wall + 1e-4);
}

/* Credit is capped at a few ms: after 500 ms idle, a 50 ms burst at 0.2
 * cores (263 ms of wall time at its rate) is paid for by sleeping, not by
 * the idle time, which would let a worker burst through its CFS period's
 * quota and be frozen. */
static void test_pacer_credit_capped(void **state)
{
    (void)state;
    struct rt_pacer pc;
    rt_pacer_init(&pc, 0.2);
    nanosleep(&(struct timespec){.tv_nsec = 500000000L}, NULL);
    assert_true(rt_pacer_wait(&pc) == 0.0); /* idle: nothing to pay, the credit capped */
    burn(0.05);
    assert_true(rt_pacer_wait(&pc) > 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_add_up_and_follow_speeds),
        cmocka_unit_test(test_standby_gets_nothing),
        cmocka_unit_test(test_standby_for_overhead),
        cmocka_unit_test(test_shares_timed_with_overheads),
        cmocka_unit_test(test_plan_worth_a_change),
        cmocka_unit_test(test_probe_plan_replaced_in_training),
        cmocka_unit_test(test_unmeasured_speeds_still_get_work),
        cmocka_unit_test(test_speed_window),
        cmocka_unit_test(test_speed_window_spans_time),
        cmocka_unit_test(test_pacer_keeps_under_quota),
        cmocka_unit_test(test_pacer_credit_capped),
        cmocka_unit_test(test_shares_capped_by_memory),
        cmocka_unit_test(test_memory_limit_fake_cgroups),
        cmocka_unit_test(test_memory_estimate_by_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
