/* partition.c — shares of a batch in proportion to measured speeds. */
#include "partition.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgroup.h"
#include "clock.h"
#include "status.h"

void rt_speedo_reset(struct rt_speedo *s) { memset(s, 0, sizeof *s); }

void rt_speedo_add_at(struct rt_speedo *s, long samples, double seconds, double at)
{
    if (samples <= 0 || !(seconds > 0.0))
        return;
    s->t[s->next] = seconds;
    s->at[s->next] = at;
    s->n[s->next] = samples;
    s->next = (s->next + 1) % RT_SPEED_STEPS_MAX;
    if (s->filled < RT_SPEED_STEPS_MAX)
        s->filled++;
}

void rt_speedo_add(struct rt_speedo *s, long samples, double seconds)
{
    rt_speedo_add_at(s, samples, seconds, rt_now());
}

/* The newest steps that make a window: RT_SPEED_WINDOW of them at least,
 * covering RT_SPEED_SECONDS of wall time (from the start of the oldest's
 * compute to the newest's end). *full: whether they do (or the history
 * is as long as it gets). */
static int window(const struct rt_speedo *s, bool *full)
{
    *full = s->filled == RT_SPEED_STEPS_MAX;
    if (s->filled == 0)
        return 0;
    int newest = (s->next + RT_SPEED_STEPS_MAX - 1) % RT_SPEED_STEPS_MAX;
    for (int k = 1; k <= s->filled; k++) {
        int i = (s->next + RT_SPEED_STEPS_MAX - k) % RT_SPEED_STEPS_MAX;
        if (k >= RT_SPEED_WINDOW && s->at[newest] - s->at[i] + s->t[i] >= RT_SPEED_SECONDS) {
            *full = true;
            return k;
        }
    }
    return s->filled;
}

/* The k-th smallest of v[0..n) (v reordered): Hoare's selection. */
static double select_kth(double *v, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double x = v[i];
                v[i++] = v[j];
                v[j--] = x;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return v[k];
    }
    return v[k];
}

/* The mean of the middle half of the window's per-step rates, not samples
 * over seconds: on a shared node a step now and then runs far slower
 * (another process took the core), and a mean swung the plan with it. Two
 * equal workers trained seedcnn at 1,313 and 1,310 img/s until one window
 * caught such steps and read 926: the plan moved to 27 and 37 of 64 and
 * the machine sat 9-12% idle for the rest of the run. Not the median
 * either: where the steps' rates take two values (a quota's phases, a
 * host's slow spells) the median jumps from one to the other with a step
 * more of either. A real change of speed holds for more than half the
 * window and moves this mean as well. */
double rt_speedo_measure(const struct rt_speedo *s, int *steps, bool *full)
{
    int n = *steps = window(s, full);
    if (n == 0)
        return 0.0;
    double r[RT_SPEED_STEPS_MAX];
    for (int k = 1; k <= n; k++) {
        int i = (s->next + RT_SPEED_STEPS_MAX - k) % RT_SPEED_STEPS_MAX;
        r[k - 1] = (double)s->n[i] / s->t[i];
    }
    /* r[q..n-1-q] is the middle: the q smallest before it, the q largest
     * after (two selections, no sort: this runs every step) */
    int q = n / 4, last = n - 1 - q;
    (void)select_kth(r, n, q);
    if (last > q)
        (void)select_kth(r + q + 1, n - q - 1, last - q - 1);
    double sum = 0.0;
    for (int k = q; k <= last; k++)
        sum += r[k];
    return sum / (double)(last - q + 1);
}

double rt_speedo_rate(const struct rt_speedo *s)
{
    int steps;
    bool full;
    return rt_speedo_measure(s, &steps, &full);
}

long rt_speed_window_steps(double steps_per_s)
{
    double k = ceil(RT_SPEED_SECONDS * steps_per_s);
    if (!(k >= RT_SPEED_WINDOW))
        return RT_SPEED_WINDOW;
    return k > RT_SPEED_STEPS_MAX ? RT_SPEED_STEPS_MAX : (long)k;
}

/* Speeds as integers (1/1024 sample/s), never 0. */
static void weights(int world, const double *speed, uint64_t *w)
{
    double lo = INFINITY;
    for (int r = 0; r < world; r++)
        if (isfinite(speed[r]) && speed[r] > 0.0 && speed[r] < lo)
            lo = speed[r];
    if (!isfinite(lo))
        lo = 1.0;
    for (int r = 0; r < world; r++) {
        double v = isfinite(speed[r]) && speed[r] > 0.0 ? speed[r] : lo;
        v = fmin(v, 1e12) * 1024.0;
        w[r] = v < 1.0 ? 1u : (uint64_t)v;
    }
}

void rt_plan_shares(long n, int world, const double *speed, const bool *active, long *share)
{
    RT_ASSERT(world >= 1 && world <= RT_MAX_WORKERS && n >= 0);
    uint64_t w[RT_MAX_WORKERS];
    weights(world, speed, w);
    int nact = 0;
    unsigned __int128 total = 0;
    for (int r = 0; r < world; r++) {
        share[r] = 0;
        if (!active || active[r]) {
            nact++;
            total += w[r];
        }
    }
    if (nact == 0) { /* cannot happen through rt_plan_standby; be total anyway */
        for (int r = 0; r < world; r++)
            share[r] = n * (r + 1) / world - n * r / world;
        return;
    }
    /* One item to each active worker first, when there are enough, then the
     * rest in proportion; remainders go to the largest fractions (ties to
     * the lower rank). */
    long base = n >= nact ? 1 : 0;
    long rest = n - base * nact;
    unsigned __int128 rem[RT_MAX_WORKERS];
    long given = 0;
    for (int r = 0; r < world; r++) {
        if (active && !active[r])
            continue;
        unsigned __int128 num = (unsigned __int128)rest * w[r];
        share[r] = base + (long)(num / total);
        rem[r] = num % total;
        given += share[r];
    }
    while (given < n) {
        int best = -1;
        for (int r = 0; r < world; r++)
            if ((!active || active[r]) && (best < 0 || rem[r] > rem[best]))
                best = r;
        share[best]++;
        rem[best] = 0;
        given++;
    }
}

bool rt_plan_shares_capped(long n, int world, const double *speed, const bool *active,
                           const long *cap, long *share)
{
    RT_ASSERT(world >= 1 && world <= RT_MAX_WORKERS && n >= 0);
    if (!cap) {
        rt_plan_shares(n, world, speed, active, share);
        return true;
    }
    bool open[RT_MAX_WORKERS];
    long sh[RT_MAX_WORKERS], rest = n;
    int nopen = 0;
    for (int r = 0; r < world; r++) {
        open[r] = !active || active[r];
        nopen += open[r];
        share[r] = 0;
    }
    /* Cut among the open workers; those given more than their cap get
     * their cap and close; cut the rest again among the others. Each
     * round closes a worker or ends, so at most `world` rounds. */
    while (nopen > 0) {
        rt_plan_shares(rest, world, speed, open, sh);
        bool over = false;
        for (int r = 0; r < world; r++)
            if (open[r] && sh[r] > cap[r]) {
                share[r] = cap[r];
                rest -= cap[r];
                open[r] = false;
                nopen--;
                over = true;
            }
        if (!over) {
            for (int r = 0; r < world; r++)
                if (open[r])
                    share[r] = sh[r];
            return true;
        }
    }
    return rest == 0;
}

bool rt_plan_standby(int world, const double *speed, double min_share, bool *active)
{
    bool changed = false;
    if (!(min_share > 0.0)) {
        for (int r = 0; r < world; r++) {
            changed |= !active[r];
            active[r] = true;
        }
        return changed;
    }
    double sum = 0.0;
    int nact = 0, fastest = 0;
    for (int r = 0; r < world; r++) {
        double v = isfinite(speed[r]) ? speed[r] : 0.0;
        if (v > (isfinite(speed[fastest]) ? speed[fastest] : 0.0))
            fastest = r;
        if (active[r]) {
            sum += v;
            nact++;
        }
    }
    double mean = nact ? sum / nact : 0.0;
    for (int r = 0; r < world; r++) {
        double v = isfinite(speed[r]) ? speed[r] : 0.0;
        bool want = active[r] ? !(v < min_share * mean) : v > 1.5 * min_share * mean;
        if (r == fastest)
            want = true;
        if (want != active[r]) {
            active[r] = want;
            changed = true;
        }
    }
    return changed;
}

/* overhead[r] as a time: 0 where there is none or it is not a number. */
static double over_at(const double *overhead, int r)
{
    return overhead && isfinite(overhead[r]) && overhead[r] > 0.0 ? overhead[r] : 0.0;
}

double rt_plan_shares_time(int world, const long *share, const double *speed,
                           const double *overhead, const bool *active)
{
    double t = 0.0;
    for (int r = 0; r < world; r++) {
        if (active && !active[r])
            continue;
        if (share[r] <= 0 || !isfinite(speed[r]) || speed[r] <= 0.0)
            return INFINITY;
        t = fmax(t, over_at(overhead, r) + (double)share[r] / speed[r]);
    }
    return t;
}

bool rt_plan_worth(int world, const long *old, const long *share, const double *speed,
                   const double *overhead, const bool *active, long slack, double gain)
{
    double t_old = rt_plan_shares_time(world, old, speed, overhead, active);
    double t_new = rt_plan_shares_time(world, share, speed, overhead, active);
    if (isinf(t_old)) /* an active worker without a share: any plan that stands */
        return !isinf(t_new);
    long moved = 0;
    for (int r = 0; r < world; r++)
        moved = labs(old[r] - share[r]) > moved ? labs(old[r] - share[r]) : moved;
    return moved > slack && t_old > t_new * (1.0 + gain);
}

/* The level T at which the active workers, each busy overhead[r] + k /
 * speed[r], share n samples evenly in time: the sum over the workers with
 * overhead[r] < T of speed[r] x (T - overhead[r]) is n. Workers whose
 * overhead alone passes the level take no part (each round drops them and
 * raises nobody's, so at most `world` rounds). */
static double fluid_level(long n, int world, const double *speed, const double *overhead,
                          const bool *active)
{
    bool in[RT_MAX_WORKERS];
    for (int r = 0; r < world; r++)
        in[r] = (!active || active[r]) && isfinite(speed[r]) && speed[r] > 0.0;
    double level = INFINITY;
    for (int round = 0; round < world; round++) {
        double sum = 0.0, fixed = (double)n;
        for (int r = 0; r < world; r++)
            if (in[r]) {
                sum += speed[r];
                fixed += speed[r] * over_at(overhead, r);
            }
        level = sum > 0.0 ? fixed / sum : INFINITY;
        bool dropped = false;
        for (int r = 0; r < world; r++)
            if (in[r] && over_at(overhead, r) >= level) {
                in[r] = false;
                dropped = true;
            }
        if (!dropped)
            break;
    }
    return level;
}

double rt_plan_step_time(long n, int world, const double *speed, const double *overhead,
                         const bool *active)
{
    double omax = 0.0;
    bool any = false;
    for (int r = 0; r < world; r++) {
        if (active && !active[r])
            continue;
        any |= isfinite(speed[r]) && speed[r] > 0.0;
        omax = fmax(omax, over_at(overhead, r));
    }
    return any ? fmax(fluid_level(n, world, speed, overhead, active), omax) : INFINITY;
}

bool rt_plan_shares_timed(long n, int world, const double *speed, const double *overhead,
                          const bool *active, const long *cap, long *share)
{
    RT_ASSERT(world >= 1 && world <= RT_MAX_WORKERS && n >= 0);
    bool any = false;
    for (int r = 0; r < world; r++)
        any |= (!active || active[r]) && over_at(overhead, r) > 0.0;
    if (!any)
        return rt_plan_shares_capped(n, world, speed, active, cap, share);
    uint64_t w[RT_MAX_WORKERS];
    weights(world, speed, w); /* unmeasured speeds as the smallest measured */
    double sp[RT_MAX_WORKERS];
    int nact = 0;
    for (int r = 0; r < world; r++) {
        sp[r] = (double)w[r] / 1024.0;
        share[r] = 0;
        nact += !active || active[r];
    }
    long given = 0;
    /* one sample to each active worker first, when there are enough */
    for (int r = 0; r < world && n >= nact; r++)
        if ((!active || active[r]) && (!cap || cap[r] > 0))
            share[r] = 1, given++;
    /* then each next sample to whoever would finish it first */
    for (; given < n; given++) {
        int best = -1;
        double tb = INFINITY;
        for (int r = 0; r < world; r++) {
            if ((active && !active[r]) || (cap && share[r] >= cap[r]))
                continue;
            double t = over_at(overhead, r) + (double)(share[r] + 1) / sp[r];
            if (t < tb)
                tb = t, best = r;
        }
        if (best < 0)
            return false;
        share[best]++;
    }
    return true;
}

/* The step time with worker r's role flipped. */
static double flipped_time(long n, int world, const double *speed, const double *overhead,
                           bool *active, int r)
{
    active[r] = !active[r];
    double t = rt_plan_step_time(n, world, speed, overhead, active);
    active[r] = !active[r];
    return t;
}

bool rt_plan_standby_overhead(long n, int world, const double *speed, const double *overhead,
                              double gain, bool *active)
{
    int fastest = 0;
    for (int r = 1; r < world; r++)
        if ((isfinite(speed[r]) ? speed[r] : 0.0) > (isfinite(speed[fastest]) ? speed[fastest] : 0.0))
            fastest = r;
    bool changed = false;
    for (int round = 0; round < world; round++) {
        double now = rt_plan_step_time(n, world, speed, overhead, active), best = now;
        int pick = -1;
        for (int r = 0; r < world; r++) {
            if (r == fastest)
                continue;
            double t = flipped_time(n, world, speed, overhead, active, r);
            double need = active[r] ? 1.0 - gain : 1.0 - 2.0 * gain;
            if (t < now * need && t < best)
                best = t, pick = r;
        }
        if (pick < 0)
            break;
        active[pick] = !active[pick];
        changed = true;
    }
    return changed;
}

void rt_plan_offsets(int world, const long *share, long *off)
{
    long o = 0;
    for (int r = 0; r < world; r++) {
        off[r] = o;
        o += share[r];
    }
}

/* v1: QUOTA and PERIOD files; v2: "QUOTA PERIOD" or "max PERIOD" in one. */
static double quota_at(const char *dir, bool v2)
{
    char p[1300];
    long long q = -1, per = 0;
    FILE *f;
    if (v2) {
        snprintf(p, sizeof p, "%s/cpu.max", dir);
        if (!(f = fopen(p, "r")))
            return 0.0;
        char qs[32] = "";
        if (fscanf(f, "%31s %lld", qs, &per) != 2 || !strcmp(qs, "max"))
            q = -1;
        else
            q = strtoll(qs, NULL, 10);
        fclose(f);
    } else {
        snprintf(p, sizeof p, "%s/cpu.cfs_quota_us", dir);
        if (!(f = fopen(p, "r")))
            return 0.0;
        if (fscanf(f, "%lld", &q) != 1)
            q = -1;
        fclose(f);
        snprintf(p, sizeof p, "%s/cpu.cfs_period_us", dir);
        if (!(f = fopen(p, "r")))
            return 0.0;
        if (fscanf(f, "%lld", &per) != 1)
            per = 0;
        fclose(f);
    }
    return q > 0 && per > 0 ? (double)q / (double)per : 0.0;
}

/* The smallest quota from base/path up to base. */
static double quota_along(const char *base, const char *path, bool v2)
{
    char dir[1200];
    double best = 0.0;
    snprintf(dir, sizeof dir, "%s%s", base, strcmp(path, "/") ? path : "");
    size_t blen = strlen(base);
    for (;;) {
        double q = quota_at(dir, v2);
        if (q > 0.0 && (best == 0.0 || q < best))
            best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < blen)
            break;
        *slash = '\0';
    }
    return best;
}

static void quota_line(const char *ctl, const char *path, void *arg)
{
    double *best = arg, q = 0.0;
    if (!*ctl) { /* v2 */
        q = quota_along("/sys/fs/cgroup", path, true);
        if (q == 0.0)
            q = quota_along("/sys/fs/cgroup/unified", path, true);
    } else if (rt_cgroup_has(ctl, "cpu")) {
        static const char *const bases[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct",
                                            "/sys/fs/cgroup/cpuacct,cpu"};
        for (int i = 0; i < 3 && q == 0.0; i++)
            q = quota_along(bases[i], path, false);
    }
    if (q > 0.0 && (*best == 0.0 || q < *best))
        *best = q;
}

double rt_cpu_quota(void)
{
    double best = 0.0;
    rt_cgroup_lines("/proc/self/cgroup", quota_line, &best);
    return best;
}
