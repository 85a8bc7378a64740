/* coord_elastic.c — members that come and go during training (sync mode).
 *
 * A member lost (its connection closed, its process died, or it fell
 * silent for --worker-timeout) is dropped, and the others go on in a new
 * generation: the coordinator announces its members ("regroup"), each
 * member forms the ring of that generation and says so ("regrouped"), and
 * once every one has, "go" starts its data. The members redo at most the
 * step in flight with the state of the most advanced one (the trainer's
 * recover method). A worker that says hello during training gets the job,
 * sets up, measures its speed, and is admitted at the next generation,
 * where it receives the state from the members. Below --min-workers the
 * run waits --join-timeout for joiners, then stops (the last checkpoint is
 * whole). Every change is logged as "ragtag: [members] ..." and written
 * to the --metrics file as an event. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "coord-impl.h"
#include "status.h"

/* How long the run's end waits for joiners to read that it ended: a
 * lenet joiner's set-up takes 1-2 s. */
#define FAREWELL_WAIT 10.0

/* Every mode goes on with other members (sync redoes the step in flight;
 * average and gossip go back to their last agreement). */
bool coord_elastic(const struct coord *k)
{
    (void)k;
    return true;
}

static void members_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void members_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ragtag: [members] ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

int coord_alive(const struct coord *k)
{
    int n = 0;
    for (int i = 0; i < k->nw; i++)
        n += k->w[i].rank >= 0 && !k->w[i].gone;
    return n;
}

/* A member reported the end of its training (not a failure, not standby:
 * those leave the ring and the others regroup): the run is ending, and a
 * joiner admitted now would wait for a ring that member never forms. */
static bool member_done(const struct coord *k)
{
    for (int r = 0; r < k->ms.n; r++) {
        const struct coord_worker *w = &k->w[k->by_rank[r]];
        if (w->done && !w->gone && w->rank >= 0 &&
            (w->status == RT_OK || w->status == RT_ERR_INTERRUPTED))
            return true;
    }
    return false;
}

/* A joiner no formed generation has had (nor will the one announced). */
static bool unformed(const struct coord_worker *w)
{
    return w->rank >= 0 && !w->done && w->admitted && !w->formed;
}

/* A joiner the next generation takes: set up, measured, fast enough, and
 * the run not ending (member_done: it would wait for a ring that member
 * never forms; it is told the run ended instead). */
static bool admissible(const struct coord *k, const struct coord_worker *w)
{
    return w->pending && !w->gone && w->ready && w->probe_at == 0.0 && !member_done(k);
}

/* Joiners (ready_only: those admissible). */
static int joiners(const struct coord *k, bool ready_only)
{
    int n = 0;
    for (int i = 0; i < k->nw; i++) {
        const struct coord_worker *w = &k->w[i];
        n += ready_only ? admissible(k, w) : w->pending && !w->gone;
    }
    return n;
}

int coord_min_members(const struct coord *k)
{
    return k->o->min_workers > 0 ? k->o->min_workers : 1;
}

int coord_max_members(const struct coord *k)
{
    return k->o->max_workers > 0 ? k->o->max_workers : k->o->workers;
}

/* A message to a member that cannot leave (its connection is gone: the
 * router cannot route to it) makes it lost at the next look, which the
 * next generation follows; it never fails the run. */
static void send_or_lose(struct coord *k, struct coord_worker *w)
{
    if (coord_send(k, w, NULL, NULL, 0) < 0 && w->closed_at == 0.0)
        w->closed_at = rt_now() - 1.0;
}

/* A new generation: the members still here and the joiners that are
 * ready, ranked by name; each is told its members (and, re-adopted, what
 * the checkpoint file holds: rank 0 sends its later reports again). */
int coord_regroup(struct coord *k, long have)
{
    struct coord_worker *order[RT_MAX_WORKERS];
    int n = 0;
    for (int i = 0; i < k->nw; i++) {
        struct coord_worker *w = &k->w[i];
        if (!w->gone && (w->rank >= 0 || admissible(k, w)))
            order[n++] = w;
    }
    coord_sort_by_name(order, n);
    k->ms.gen++;
    k->ms.n = n;
    for (int r = 0; r < n; r++) {
        struct coord_worker *w = order[r];
        if (w->pending) {
            w->pending = false;
            w->admitted = true;
            w->formed = false;
            k->joined++;
            members_note("generation %llu: admitted %s (%s) as rank %d", 
                         (unsigned long long)k->ms.gen, w->m.name, w->m.host, r);
            coord_report_event(k, "joined", w, "admitted");
        }
        w->rank = r;
        w->regrouped = false;
        k->by_rank[r] = (int)(w - k->w);
        k->ms.m[r] = w->m;
        k->ms.m[r].images_per_s = w->ips;
    }
    k->regroup_gen = k->ms.gen;
    k->regroup_t0 = rt_now();
    k->short_since = 0.0;
    for (int r = 0; r < n; r++) {
        rt_wire_begin(&k->wr, k->run, "regroup", have >= 0 ? 3 : 2);
        rt_membership_put(&k->wr, &k->ms);
        if (have >= 0)
            rt_wire_put_uint(&k->wr, "have", (uint64_t)have);
        RT_TRY(rt_wire_end(&k->wr));
        send_or_lose(k, coord_rank(k, r));
    }
    return RT_OK;
}

bool coord_never_trained(const struct coord *k, const struct coord_worker *w)
{
    if (!unformed(w) || k->regroup_gen != k->ms.gen)
        return false;
    bool others_done = false;
    for (int r = 0; r < k->ms.n; r++) {
        const struct coord_worker *o = &k->w[k->by_rank[r]];
        if (unformed(o))
            continue; /* a joiner like it */
        if (!o->done || o->gone)
            return false;
        others_done = true;
    }
    return others_done;
}

/* Regroup when enough members (with the admissible joiners) are there. */
static int regroup_if_enough(struct coord *k)
{
    int have = coord_alive(k) + joiners(k, true);
    if (have >= coord_min_members(k))
        return coord_regroup(k, -1);
    if (k->short_since == 0.0) {
        k->short_since = rt_now();
        members_note("%d worker%s left, fewer than --min-workers %d: waiting up to %.0f s "
                     "(--join-timeout) for workers to join", have, have == 1 ? "" : "s",
                     coord_min_members(k), k->o->join_timeout);
    }
    return RT_OK;
}

const char *coord_resume_hint(const struct coord *k, char *out, size_t cap)
{
    if (coord_ckpt_written(k))
        snprintf(out, cap, "its last checkpoint, %s, is whole: run the coordinator again with "
                           "--resume", k->ck.last_path);
    else
        snprintf(out, cap, "no checkpoint to go on from (no --checkpoint DIR, or none written "
                           "yet)");
    return out;
}

/* A member out of the ring: lost, or gone on standby (event). */
static int drop_member(struct coord *k, struct coord_worker *w, const char *event,
                       const char *why)
{
    w->gone = true;
    w->left_at = rt_now();
    if (w->rank < 0) {
        members_note("worker %s (%s) lost while joining: %s", w->m.name, w->m.host, why);
        return RT_OK;
    }
    bool lost = !strcmp(event, "lost");
    k->lost += lost;
    k->standby += !lost;
    w->left_standby = !lost;
    int left = coord_alive(k);
    members_note("generation %llu: %srank %d (%s, %s)%s: %s; %d worker%s",
                 (unsigned long long)k->ms.gen + 1, lost ? "lost " : "", w->rank, w->m.name,
                 w->m.host, lost ? "" : " left the ring", why, left,
                 left == 1 ? " continues" : "s continue");
    coord_report_event(k, event, w, why);
    w->rank = -1;
    char hint[1300];
    /* Nobody holds the run's state (a joiner holds none): the same loss as
     * state_lost's, so the same way on (coord_restart.c): from the
     * checkpoint, with whoever joins within --join-timeout. */
    if (left == 0)
        return rt_error(RT_ERR_NO_STATE, "every worker was lost (the last: %s, %s); %s",
                        w->m.name, why, coord_resume_hint(k, hint, sizeof hint));
    return regroup_if_enough(k);
}

int coord_lose(struct coord *k, struct coord_worker *w, const char *why)
{
    if (!coord_elastic(k) || !k->training)
        return rt_error(RT_ERR_NET, "lost worker %s (rank %d, %s): %s", w->m.name, w->rank,
                        w->m.host, why);
    return drop_member(k, w, "lost", why);
}

/* Every member that held the run's state is gone and those left had just
 * joined: nothing in memory to go on from. The run stops. */
static int state_lost(struct coord *k, struct coord_worker *w, const char *msg)
{
    char hint[1300];
    return rt_error(RT_ERR_NO_STATE, "the run's state is lost: every member that held it is "
                    "gone (%s, rank %d: %s); %s", w->m.name, w->rank, msg,
                    coord_resume_hint(k, hint, sizeof hint));
}

/* A member that stopped on a failure of the cluster's links (a ring that
 * would not form, a collective that timed out) is one lost: the others go
 * on. Any other failure (the data, the model, a diverged loss) would stop
 * them all the same way, so it stops the run, saying why. */
int coord_member_failed(struct coord *k, struct coord_worker *w, int status, const char *msg)
{
    if (status == RT_ERR_NO_STATE && k->training)
        return state_lost(k, w, msg);
    bool link = status == RT_ERR_NET || status == RT_ERR_TIMEOUT || status == RT_ERR_REGROUP;
    if (status == RT_ERR_STANDBY && k->training && !w->gone && w->rank >= 0)
        return drop_member(k, w, "standby", msg); /* it joins again, as a new member */
    if (!link || !coord_elastic(k) || !k->training || w->gone)
        return rt_error(RT_ERR_NET, "worker %s (rank %d, %s) failed: %s", w->m.name, w->rank,
                        w->m.host, msg);
    char why[700];
    snprintf(why, sizeof why, "it failed: %s", msg);
    return coord_lose(k, w, why);
}

/* An "error" during training: a joiner's costs the run nothing. */
int coord_joiner_failed(struct coord *k, struct coord_worker *w)
{
    if (!w->pending || w->gone)
        return coord_report_failed(k, w);
    char msg[600] = "", why[700];
    rt_wire_get_str(rt_wire_root(&k->msg), "message", 0, msg, sizeof msg);
    coord_sanitize(msg);
    snprintf(why, sizeof why, "it failed: %s", msg[0] ? msg : "(no message)");
    return coord_lose(k, w, why);
}

/* How often a worker of this name left the ring on standby, and when it
 * last did. */
static int standby_times(const struct coord *k, const char *name, double *last)
{
    int n = 0;
    *last = 0.0;
    for (int i = 0; i < k->nw; i++) {
        const struct coord_worker *o = &k->w[i];
        if (o->gone && o->left_standby && !strcmp(o->m.name, name)) {
            n++;
            *last = o->left_at > *last ? o->left_at : *last;
        }
    }
    return n;
}

/* A worker back from standby: its speed alone does not say what it cost
 * the ring, so it comes back after a wait that doubles each time it had
 * to leave (COORD_PROBE_EVERY, then twice that, up to 16 times), counted
 * from when it left. It waits idle, before it sets up: reading the data
 * and measuring its speed again at once would take CPU from members that
 * share its machine, for a worker that cannot take a share yet. The
 * seconds it still has to wait (0: none), and the note that says so. */
static double standby_backoff(const struct coord *k, const char *name, int *times)
{
    double last;
    *times = standby_times(k, name, &last);
    if (*times == 0)
        return 0.0;
    double wait = COORD_PROBE_EVERY * (double)(1 << (*times < 5 ? *times - 1 : 4));
    double left = last + wait - rt_now();
    return left > 0.0 ? left : 0.0;
}

int coord_admit(struct coord *k, const struct rt_member *m, const char *peer)
{
    int cap = coord_max_members(k);
    char why[700];
    const char *no = NULL;
    if (coord_alive(k) + joiners(k, false) >= cap) {
        snprintf(why, sizeof why, "the run has its %d workers (--max-workers)", cap);
        no = why;
    } else if (k->nw >= RT_MAX_WORKERS) {
        no = "the coordinator has no room for another worker";
    }
    for (int i = 0; !no && i < k->nw; i++)
        if (!k->w[i].gone && !strcmp(k->w[i].m.name, m->name)) {
            snprintf(why, sizeof why, "a worker named %s is in the run (give --name)", m->name);
            no = why;
        }
    if (!no && !coord_memory_fits(k, m, why, sizeof why))
        no = why;
    if (no) {
        (void)coord_send_reject(k, rt_zframe_data(&k->fr, 0), rt_zframe_size(&k->fr, 0),
                                m->name, no);
        coord_note("turned away worker %s from %s: %s", m->name, peer, no);
        return RT_OK;
    }
    int times;
    double after = standby_backoff(k, m->name, &times);
    struct coord_worker *w = coord_add_member(k, m, peer);
    w->pending = true;
    if (after > 0.0)
        members_note("worker %s back from standby (%d time%s) from %s (%s, %s): it waits "
                     "%.0f s, then sets up and measures its speed", m->name, times,
                     times == 1 ? "" : "s", peer, m->host, m->endpoint, after);
    else
        members_note("worker %s joining from %s (%s, %s): it sets up, then the members hand "
                     "it their state", m->name, peer, m->host, m->endpoint);
    w->back_at = after > 0.0 ? rt_now() + after : 0.0;
    if (coord_job_send_late(k, w, after) < 0) {
        members_note("worker %s left before its job could reach it: %s", m->name,
                     rt_error_detail());
        w->gone = true;
    }
    return RT_OK;
}

/* The members' mean speed (their last measure), or 0. */
static double members_mean_speed(const struct coord *k)
{
    double sum = 0.0;
    int n = 0;
    for (int i = 0; i < k->nw; i++)
        if (k->w[i].rank >= 0 && !k->w[i].gone && k->w[i].ips > 0.0)
            sum += k->w[i].ips, n++;
    return n ? sum / n : 0.0;
}

/* Whether a joiner is fast enough to take a share: the planner's rule for
 * a worker back from standby (partition.h: 1.5 x --min-share of the mean),
 * where a plan would put it on standby at once. */
static bool fast_enough(const struct coord *k, const struct coord_worker *w, double *mean)
{
    *mean = members_mean_speed(k);
    bool roles = k->c->mode != RT_MODE_GOSSIP && k->c->partition == RT_PARTITION_BALANCED;
    return !roles || k->c->min_share <= 0.0f || *mean <= 0.0 ||
           w->ips >= 1.5 * (double)k->c->min_share * *mean;
}

int coord_joiner_ready(struct coord *k, struct coord_worker *w)
{
    if (!w->pending) {
        coord_drop_unexpected(k, w);
        return RT_OK;
    }
    bool was = w->ready && w->probe_at == 0.0;
    RT_TRY(coord_ready(k, w));
    double mean;
    if (!fast_enough(k, w, &mean)) {
        if (w->probe_at == 0.0)
            members_note("worker %s stays on standby: %.0f img/s, below 1.5 x --min-share %g of "
                         "the members' mean %.0f img/s; it measures again every %.0f s",
                         w->m.name, w->ips, (double)k->c->min_share, mean, COORD_PROBE_EVERY);
        w->probe_at = rt_now() + COORD_PROBE_EVERY;
        return RT_OK;
    }
    w->probe_at = 0.0;
    return !was && admissible(k, w) ? regroup_if_enough(k) : RT_OK;
}

int coord_regrouped(struct coord *k, struct coord_worker *w)
{
    uint64_t gen, rank;
    rt_wire_map r = rt_wire_root(&k->msg);
    if (rt_wire_get_uint(r, "gen", 1, UINT32_MAX, &gen) < 0 ||
        rt_wire_get_uint(r, "rank", 0, RT_MAX_WORKERS - 1, &rank) < 0) {
        rt_wire_drop(&k->drops, w->m.name, rt_error_detail());
        return RT_OK;
    }
    if (gen != k->regroup_gen || (int)rank != w->rank)
        return RT_OK; /* an older generation's, overtaken by a newer one */
    w->regrouped = true;
    for (int r = 0; r < k->ms.n; r++)
        if (!coord_rank(k, r)->regrouped)
            return RT_OK;
    for (int r = 0; r < k->ms.n; r++) {
        coord_rank(k, r)->formed = true;
        rt_wire_begin(&k->wr, k->run, "go", 1);
        rt_wire_put_uint(&k->wr, "gen", gen);
        RT_TRY(rt_wire_end(&k->wr));
        send_or_lose(k, coord_rank(k, r));
    }
    members_note("generation %llu formed in %.2f s: %d worker%s", (unsigned long long)gen,
                 rt_now() - k->regroup_t0, k->ms.n, k->ms.n == 1 ? "" : "s");
    coord_status_event(k, "generation", "generation %llu formed: %d worker%s",
                       (unsigned long long)gen, k->ms.n, k->ms.n == 1 ? "" : "s");
    if (k->adopted && gen == k->adopt_gen + 1)
        members_note("training goes on %.2f s after this coordinator started (re-adopted)",
                     rt_now() - k->t_start);
    k->regroup_gen = 0;
    coord_report_table(k);
    return RT_OK;
}

int coord_elastic_clock(struct coord *k)
{
    double now = rt_now();
    for (int i = 0; i < k->nw; i++) {
        struct coord_worker *w = &k->w[i];
        if (w->pending && !w->gone && w->probe_at > 0.0 && now >= w->probe_at) {
            w->probe_at = now + 1e9; /* until its next "ready" */
            coord_send_simple(k, w, "probe", "measure your speed again");
        }
    }
    if (k->short_since > 0.0 && rt_now() - k->short_since > k->o->join_timeout)
        return rt_error(RT_ERR_NET, "only %d worker%s left (--min-workers %d) and none joined "
                                    "within %.0f s", coord_alive(k),
                        coord_alive(k) == 1 ? "" : "s", coord_min_members(k),
                        k->o->join_timeout);
    return RT_OK;
}

void coord_expel(struct coord *k, struct coord_worker *w)
{
    double now = rt_now();
    if (now - w->expelled_at < 2.0)
        return;
    w->expelled_at = now;
    coord_send_simple(k, w, "expelled", "it was lost (closed or silent) and the run went on "
                                        "without it");
}

/* Whether a joiner told "finished" may not have read it yet. */
static bool farewell_open(const struct coord_worker *w)
{
    return w->farewell && !w->gone && !(w->closed_at > 0.0);
}

/* Joiners admitted by a generation that never formed (coord_never_trained)
 * go back to waiting joiners: the run's members and reports are the
 * others'. */
static void unadmit(struct coord *k)
{
    int n = 0;
    for (int r = 0; r < k->ms.n; r++) {
        struct coord_worker *w = coord_rank(k, r);
        if (coord_never_trained(k, w)) {
            members_note("generation %llu never formed: its members ended first; %s was not "
                         "admitted after all", (unsigned long long)k->ms.gen, w->m.name);
            w->rank = -1;
            w->pending = true;
            w->admitted = false;
            k->joined--;
            continue;
        }
        w->rank = n;
        k->by_rank[n] = k->by_rank[r];
        k->ms.m[n++] = k->ms.m[r];
    }
    k->ms.n = n;
}

void coord_elastic_end(struct coord *k)
{
    unadmit(k);
    for (int i = 0; i < k->nw; i++)
        if (k->w[i].pending && !k->w[i].gone) {
            coord_send_simple(k, &k->w[i], "finished", "the run ended before this worker was "
                                                       "admitted");
            k->told_finished = k->w[i].farewell = true;
        }
    /* A joiner still setting up reads its messages only when its set-up
     * next waits, and its control socket (ZMQ_IMMEDIATE) drops what it
     * holds unread when this end closes: it would wait out its timeout
     * and fail. So this end stays until each has answered "bye" (it read
     * "finished") or closed its link, for a few seconds at most. */
    for (double t0 = rt_now(); rt_now() - t0 < FAREWELL_WAIT;) {
        bool open = false;
        for (int i = 0; i < k->nw; i++)
            open = open || farewell_open(&k->w[i]);
        if (!open)
            return;
        struct coord_worker *from = NULL;
        if (coord_next_msg(k, 100, &from) > 0 && from && !strcmp(k->msg.type, "bye"))
            from->farewell = false;
    }
}
