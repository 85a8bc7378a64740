/* coord_restart.c — the run's state lost, its checkpoint whole: go on.
 *
 * When every member that held the run's state is gone before the workers
 * just admitted received it (coord_elastic.c, state_lost), or every
 * worker is (drop_member), nothing in memory can carry the run on. Its last checkpoint can: rather than stop
 * and wait for a person to type `coord --resume`, the coordinator starts
 * the run again from it on the same address, as that command would, and
 * tells every worker still here ("expelled": the run goes on without the
 * generation it was in) to join again; they come back as new workers and
 * get the checkpoint's state with "start"; with nobody left, it waits
 * --join-timeout for new workers (a retried Spark stage, a restarted
 * container), as a first start does, and stops if none come. What the run
 * loses is the work since that checkpoint, never the run.
 *
 * With --checkpoint DIR but none written yet it starts again from its
 * beginning. For `train --workers N` the next run starts N new local
 * workers (it counts as one of --max-restarts, coord_local.c). Not for a
 * coordinator on a port chosen at random (nobody could find the new one),
 * nor without --checkpoint or after Ctrl-C: the run stops then, as
 * before, naming what it can be resumed from. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "coord-impl.h"
#include "status.h"

/* A fixed port: tcp://HOST:PORT with PORT neither * nor 0. */
static bool fixed_address(const char *ep)
{
    const char *colon = strrchr(ep, ':');
    return ep[0] && colon && colon[1] && strcmp(colon + 1, "*") != 0 &&
           strcmp(colon + 1, "0") != 0;
}

/* What the workers are told with "expelled". */
static void rejoin_reason(const struct coord *k, char *out, size_t cap)
{
    if (coord_ckpt_written(k))
        snprintf(out, cap, "the run's state was lost; it goes on from its last checkpoint, %s: "
                           "join again", k->ck.last_path);
    else
        snprintf(out, cap, "the run's state was lost before its first checkpoint; it starts "
                           "again from its beginning: join again");
}

/* With --checkpoint DIR, also before its first checkpoint: what is lost
 * then is less than one checkpoint's worth of work, and the run goes on. */
bool coord_restart_possible(const struct coord *k, int rc)
{
    if (rc != RT_ERR_NO_STATE || !k->ck.last_path[0] || coord_stop_requested(k))
        return false;
    return k->o->spawn_local ? coord_local_restart_left(k) : fixed_address(k->o->listen);
}

/* Where the next run starts, as the log says it. */
static const char *restart_from(const struct coord *k)
{
    return coord_ckpt_written(k) ? "goes on from that checkpoint"
                                 : "starts again from its beginning";
}

/* train --workers N: the next run starts N new local workers; those still
 * here (joiners without the state) end with this one. */
static int restart_local(struct coord *k)
{
    ++*k->local.restarts;
    char why[1500];
    snprintf(why, sizeof why, "the run %s with new local workers", restart_from(k));
    coord_send_all(k, "abort", why);
    fprintf(stderr, "ragtag: [members] %s; instead the run %s with %d new local workers "
                    "(restart %d of --max-restarts %d)\n", rt_error_detail(), restart_from(k),
            k->o->workers, *k->local.restarts, coord_local_max_restarts(k));
    coord_report_restart(k, k->o->workers);
    usleep(500000); /* as coord_abort: the I/O thread writes them */
    return 0;
}

int coord_restart_tell(struct coord *k)
{
    if (k->o->spawn_local)
        return restart_local(k);
    char why[1500];
    rejoin_reason(k, why, sizeof why);
    int n = 0;
    for (int i = 0; i < k->nw; i++) {
        struct coord_worker *w = &k->w[i];
        if (w->gone)
            continue;
        coord_send_simple(k, w, "expelled", why);
        n++;
    }
    const char *from = restart_from(k);
    if (n > 0)
        fprintf(stderr, "ragtag: [members] %s; instead the run %s on %s: the %d worker%s still "
                        "here join%s again\n", rt_error_detail(), from, k->o->listen, n,
                n == 1 ? "" : "s", n == 1 ? "s" : "");
    else
        fprintf(stderr, "ragtag: [members] %s; instead the run %s on %s with the workers that "
                        "join within --join-timeout (%.0f s)\n",
                rt_error_detail(), from, k->o->listen, k->o->join_timeout);
    coord_report_restart(k, n);
    /* as coord_abort: the I/O thread needs a moment to write them all */
    usleep(500000);
    return n;
}

bool coord_restart_retell(struct coord *k)
{
    if (!k->restarted || !k->prev_run[0] ||
        rt_wire_parse(&k->msg, rt_zframe_data(&k->fr, 1), rt_zframe_size(&k->fr, 1), k->prev_run,
                      true) < 0)
        return false;
    double now = rt_now();
    if (now - k->prev_told < 0.5) /* its heartbeats come faster than it can act */
        return true;
    k->prev_told = now;
    char why[1500];
    rejoin_reason(k, why, sizeof why);
    rt_wire_begin(&k->wr, k->prev_run, "expelled", 1);
    rt_wire_put_str(&k->wr, "reason", why);
    if (rt_wire_end(&k->wr) == RT_OK)
        (void)coord_send_rid(k, rt_zframe_data(&k->fr, 0), rt_zframe_size(&k->fr, 0),
                             "of the last run");
    return true;
}

/* Seconds without a new worker after which a restarted run goes on with
 * those back: the workers of a retried Spark stage or of restarted
 * containers come within a second or two of each other, and the rest are
 * admitted in training as any joiner is, instead of idling the others
 * up to --join-timeout. */
#define RESTART_SETTLE_S 5.0

int coord_restart_settled(struct coord *k)
{
    if (!k->restarted || k->nw < coord_min_members(k) || k->nw >= k->o->workers ||
        rt_now() - k->last_join < RESTART_SETTLE_S)
        return 0;
    coord_note("starting with the %d of %d workers back (no other came for %.0f s); others "
               "join during training", k->nw, k->o->workers, RESTART_SETTLE_S);
    return 1;
}
