/* coord.c — the coordinator: `ragtag coord` and the heart of
 * `ragtag train --workers N`.
 *
 * One ROUTER socket, one thread, one poll loop run through three phases
 * (the table below: what ends a phase, what a stop request or the clock
 * does, which message types it takes and the action for each):
 *   join    wait for N hellos (or --min-workers when --join-timeout ends),
 *           failing with the list of who joined and who did not; then
 *           rank the workers (by name, so start order never matters) and
 *           send each the member list (generation 1), model, options, data;
 *   setup   serve data files; wait for every "ready"; log the cluster
 *           table; "start" (with the checkpoint's state on --resume);
 *   train   take rank 0's progress, lines and metrics, every rank's part
 *           of each checkpoint, heartbeats; Ctrl-C sends "stop"; a silent,
 *           dead or failing worker aborts the run for everybody;
 * and at the end every replica must report the same parameter hash.
 * The coordinator never takes part in the ring: its work is small and
 * it may live on a machine that is not in the cluster at all. Its state
 * is one struct coord (coord-impl.h), passed to every action. */
#include "config.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord-impl.h"
#include "ring.h"

#define SELF_PAUSE 2.0 /* seconds between two turns of a loop that turns every 100 ms:
                          this process was stopped */
#include "status.h"

/* The one process-wide thing: a signal handler cannot know which
 * coordinator it means, so SIGINT counts requests here and every
 * coordinator stops on one that came after it started. */
static volatile sig_atomic_t coord_stop_requests;

void rt_coord_request_stop(void) { coord_stop_requests++; }

bool coord_stop_requested(const struct coord *k)
{
    return coord_stop_requests != k->stops_at_start;
}

void rt_coord_options_defaults(struct rt_coord_options *o)
{
    memset(o, 0, sizeof *o);
    o->workers = 1;
    o->join_timeout = 60.0;
    o->setup_timeout = 300.0;
    o->worker_timeout = 30.0;
    o->allow_shm = true;
    o->chunk_bytes = RT_RING_DEFAULT_CHUNK;
    snprintf(o->local_backend, sizeof o->local_backend, "cpu");
    o->max_restarts = -1;
}

void coord_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ragtag: [coord] ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- the phases ---------------------------------------------------------------------- */

/* An action for one message type; w is NULL only for a stranger's hello. */
struct coord_action {
    const char *type;
    int (*act)(struct coord *k, struct coord_worker *w);
};

struct coord_phase {
    const char *name;
    int (*enter)(struct coord *k);
    bool (*finished)(const struct coord *k);
    int (*on_stop)(struct coord *k);     /* a SIGINT request is pending */
    bool heartbeat;                      /* send heartbeats meanwhile */
    int (*on_clock)(struct coord *k);    /* < 0 fails, 1 ends the phase now */
    const struct coord_action *actions;  /* NULL-terminated */
    int (*leave)(struct coord *k);
};

static int ignore(struct coord *k, struct coord_worker *w) { return RT_OK; }

static int hello_open(struct coord *k, struct coord_worker *w) { return coord_hello(k, w, true); }
static int hello_late(struct coord *k, struct coord_worker *w) { return coord_hello(k, w, false); }

/* join */
static int join_enter(struct coord *k)
{
    const struct rt_coord_options *o = k->o;
    coord_note("run %s: waiting up to %.0f s for %d worker%s on %s", k->run, o->join_timeout,
               o->workers, o->workers == 1 ? "" : "s", k->endpoint);
    return RT_OK;
}
static bool join_finished(const struct coord *k) { return k->nw >= k->o->workers; }
static int join_on_stop(struct coord *k)
{
    return rt_error(RT_ERR_INTERRUPTED, "interrupted while waiting for workers");
}
static int join_on_clock(struct coord *k)
{
    return rt_now() - k->phase_start > k->o->join_timeout ? coord_join_timeout(k)
                                                          : coord_restart_settled(k);
}
static int join_leave(struct coord *k)
{
    coord_assign_ranks(k);
    return coord_job_send(k);
}

/* setup */
/* every worker ready, but those lost while setting up */
static bool setup_finished(const struct coord *k)
{
    for (int i = 0; i < k->nw; i++)
        if (!k->w[i].ready && !k->w[i].gone)
            return false;
    return true;
}
static int setup_on_stop(struct coord *k)
{
    return rt_error(RT_ERR_INTERRUPTED, "interrupted while the workers set up");
}
static int setup_on_clock(struct coord *k)
{
    RT_TRY(coord_setup_check_alive(k));
    return rt_now() - k->phase_start > k->o->setup_timeout ? coord_setup_timeout(k) : RT_OK;
}
static int setup_leave(struct coord *k)
{
    if (k->summary[0])
        coord_note("%s", k->summary);
    coord_report_table(k);
    if (!k->ck.resuming) {
        coord_send_all(k, "start", NULL);
        return RT_OK;
    }
    for (int r = 0; r < k->ms.n; r++)
        if (!coord_rank(k, r)->gone)
            RT_TRY(coord_ckpt_send_resume(k, coord_rank(k, r)));
    return RT_OK;
}

/* train */
static int train_enter(struct coord *k)
{
    k->training = true;
    /* those lost while setting up: the others regroup without them */
    for (int i = 0; i < k->nw; i++)
        if (k->w[i].lost_in_setup && k->w[i].rank >= 0)
            RT_TRY(coord_lose(k, &k->w[i], "its connection closed while it set up"));
    return RT_OK;
}
/* Every member of the current generation is done (none of it lost: a
 * generation of members that all failed is not a finished run), but for
 * joiners admitted by a generation that never formed (the others ended
 * first: coord_never_trained). A regroup
 * announced to them need not form: a coordinator restarted after their
 * last step re-adopts members that have nothing left to train, and that
 * never answer it (it waited for them for ever). */
static bool train_finished(const struct coord *k)
{
    if (k->ms.n == 0)
        return false;
    for (int r = 0; r < k->ms.n; r++) {
        const struct coord_worker *w = &k->w[k->by_rank[r]];
        if ((!w->done || w->gone) && !coord_never_trained(k, w))
            return false;
    }
    return true;
}
static int train_on_stop(struct coord *k)
{
    if (k->stop_sent)
        return RT_OK;
    k->stop_sent = true;
    coord_send_all(k, "stop", NULL);
    coord_note("stopping every worker at the next step%s",
               k->ck.last_path[0] ? " (checkpointing)" : "");
    return RT_OK;
}
static int train_done(struct coord *k, struct coord_worker *w)
{
    bool was = w->done;
    coord_report_done(k, w);
    if (was || !w->done)
        return RT_OK;
    k->ndone++;
    if (w->status < 0 && w->status != RT_ERR_INTERRUPTED)
        return coord_member_failed(k, w, w->status, w->message);
    if (w->status == RT_ERR_INTERRUPTED)
        k->interrupted_step = w->res.steps;
    return RT_OK;
}

static const struct coord_action join_actions[] = {
    {"hello", hello_open},
    {"hb", ignore},
    {NULL, NULL},
};
/* A "done" before training is a failure, like "error". */
static const struct coord_action setup_actions[] = {
    {"hello", hello_late},
    {"fetch", coord_job_serve_file},
    {"ready", coord_ready},
    {"done", coord_report_failed},
    {"error", coord_report_failed},
    {"hb", ignore},
    {NULL, NULL},
};
static const struct coord_action adopt_actions[] = {
    {"rejoin", coord_adopt_rejoin},
    {"hb", coord_hb},
    {"hello", ignore}, /* a new worker's: it says hello every second, for the next phase */
    /* a rejoined worker's reports: they come again after the regroup */
    {"line", ignore},
    {"metrics", ignore},
    {"ckpt", ignore},
    {"progress", ignore},
    {NULL, NULL},
};
static const struct coord_action train_actions[] = {
    {"hello", hello_late},
    {"hb", coord_hb},
    {"rejoin", coord_rejoin_late},
    {"regrouped", coord_regrouped},
    {"ready", coord_joiner_ready},
    {"fetch", coord_job_serve_file},
    {"progress", coord_report_progress},
    {"line", coord_report_line},
    {"metrics", coord_report_metrics},
    {"ckpt", coord_ckpt_part},
    {"done", train_done},
    {"error", coord_joiner_failed},
    {NULL, NULL},
};

/* Only for a resumed run whose workers may be alive (coord_adopt.c). */
static const struct coord_phase adopt_phase = {
    .name = "adopt", .enter = coord_adopt_enter, .finished = coord_adopt_finished,
    .on_stop = join_on_stop, .on_clock = coord_adopt_clock, .actions = adopt_actions,
    .leave = coord_adopt_leave};

static const struct coord_phase phases[] = {
    {.name = "join", .enter = join_enter, .finished = join_finished, .on_stop = join_on_stop,
     .on_clock = join_on_clock, .actions = join_actions, .leave = join_leave},
    {.name = "setup", .finished = setup_finished, .on_stop = setup_on_stop, .heartbeat = true,
     .on_clock = setup_on_clock, .actions = setup_actions, .leave = setup_leave},
    {.name = "train", .enter = train_enter, .finished = train_finished,
     .on_stop = train_on_stop, .heartbeat = true,
     .on_clock = coord_check_alive, .actions = train_actions},
};

static int dispatch(struct coord *k, const struct coord_action *a, struct coord_worker *w)
{
    for (; a->type; a++)
        if (!strcmp(a->type, k->msg.type)) {
            RT_ASSERT(w || !strcmp(a->type, "hello") || /* coord_next_msg's promise */
                      !strcmp(a->type, "rejoin"));
            return a->act(k, w);
        }
    coord_drop_unexpected(k, w);
    return RT_OK;
}

/* The poll loop, for any phase: until the phase is finished, a stop
 * request, the local workers' health, heartbeats, the clock, and one
 * message (waiting at most 100 ms). */
static int run_phase(struct coord *k, const struct coord_phase *p)
{
    k->phase_start = rt_now();
    coord_status_phase(k, p->name);
    if (p->enter)
        RT_TRY(p->enter(k));
    while (!p->finished(k)) {
        double now = rt_now();
        if (k->last_loop > 0.0 && now - k->last_loop > SELF_PAUSE)
            coord_members_resumed(k, now - k->last_loop);
        k->last_loop = now;
        if (coord_stop_requested(k))
            RT_TRY(p->on_stop(k));
        RT_TRY(coord_local_check(k));
        if (p->heartbeat)
            coord_heartbeat(k);
        coord_status_publish(k, false);
        int rc = p->on_clock(k);
        if (rc < 0)
            return rc;
        if (rc > 0)
            break;
        struct coord_worker *w = NULL;
        if (coord_next_msg(k, 100, &w) <= 0)
            continue;
        if (w && w->gone)
            coord_expel(k, w); /* the run went on without it */
        else
            RT_TRY(dispatch(k, p->actions, w));
    }
    return p->leave ? p->leave(k) : RT_OK;
}

/* ---- the run ------------------------------------------------------------------------- */

static int check_options(const struct rt_coord_options *o, const struct rt_train_config *c)
{
    if (o->workers < 1 || o->workers > RT_MAX_WORKERS)
        return rt_error(RT_ERR_CONFIG, "--workers %d: from 1 to %d", o->workers, RT_MAX_WORKERS);
    if (o->min_workers > o->workers)
        return rt_error(RT_ERR_CONFIG, "--min-workers %d is more than --workers %d",
                        o->min_workers, o->workers);
    if (c->resume && !c->checkpoint_dir[0])
        return rt_error(RT_ERR_CONFIG, "--resume needs --checkpoint DIR to resume from");
    if (c->patience > 0 && c->val_frac <= 0.0f)
        return rt_error(RT_ERR_CONFIG, "--patience needs a validation split: give --val F > 0");
    return RT_OK;
}

static struct coord *coord_new(const struct rt_coord_options *o, const struct rt_train_config *c)
{
    struct coord *k = calloc(1, sizeof *k);
    if (!k) {
        rt_error(RT_ERR_NOMEM, "no memory for the coordinator");
        return NULL;
    }
    k->o = o;
    k->c = c;
    k->stops_at_start = coord_stop_requests;
    rt_wire_writer_init(&k->wr);
    rt_wire_msg_init(&k->msg);
    rt_zframes_init(&k->fr);
    rt_wire_droplog_init(&k->drops, "coord");
    rt_progress_init(&k->prog, stderr, c->progress);
    rt_wire_new_run_id(k->run);
    k->t_start = rt_now();
    return k;
}

/* Everything before the first worker may join: the model, the files the
 * run writes, the data to serve, the socket, the local workers. */
static int coord_prepare(struct coord *k)
{
    const struct rt_train_config *c = k->c;
    RT_TRY(coord_job_read_model(k));
    RT_TRY(coord_ckpt_open(k));
    RT_TRY(coord_report_open(k));
    if (c->resume)
        RT_TRY(coord_ckpt_load_resume(k));
    coord_ckpt_start_from_init(k);
    RT_TRY(coord_adopt_prepare(k));
    if (k->o->serve_data) {
        RT_TRY(rt_manifest_build(c->data_spec, &k->man));
        coord_note("serving data %s: %d files", c->data_spec, k->man.files.n);
    }
    RT_TRY(coord_socket_open(k));
    RT_TRY(coord_status_open(k));
    if (k->o->spawn_local)
        RT_TRY(coord_local_start(k));
    return RT_OK;
}

/* A failed run takes every worker down with it, telling them why. */
static void coord_abort(struct coord *k, int rc)
{
    if (rc >= 0 || rc == RT_ERR_INTERRUPTED || !k->router)
        return;
    char why[400];
    snprintf(why, sizeof why, "%s", rt_error_detail());
    coord_send_all(k, "abort", why);
    /* Measured with libzmq 4.3.4: closing the ROUTER right after this
     * loses the abort to all but the first worker, ZMQ_LINGER or not;
     * half a second lets the I/O thread write every one. */
    usleep(500000);
}

static void coord_destroy(struct coord **kp, int rc)
{
    struct coord *k = *kp;
    coord_status_close(k, rc);
    coord_local_finish(k, rc);
    rt_wire_droplog_flush(&k->drops);
    coord_socket_close(k, rc);
    coord_report_close(k);
    coord_ckpt_close(&k->ck);
    coord_job_free(k);
    rt_wire_writer_free(&k->wr);
    rt_wire_msg_free(&k->msg);
    rt_zframes_close(&k->fr);
    free(k);
    *kp = NULL;
}

/* One run from its start (or checkpoint); *again >= 0 when its state was
 * lost and it should start once more from the checkpoint, with that many
 * workers still here (coord_restart.c), else -1. prev_run: the run id it
 * replaces ("" for the first), then its own. */
static int run_once(const struct rt_coord_options *o, const struct rt_train_config *c,
                    char prev_run[RT_RUN_ID_LEN + 1], struct rt_train_result *res, int *again,
                    sig_atomic_t stops0, int *restarts)
{
    double t_start = rt_now();
    struct coord *k = coord_new(o, c);
    if (!k)
        return RT_ERR_NOMEM;
    k->local.restarts = restarts;
    k->restarted = prev_run[0] != '\0';
    /* a Ctrl-C between two runs of one command stops the next one */
    k->stops_at_start = stops0;
    snprintf(k->prev_run, sizeof k->prev_run, "%s", prev_run);
    int rc = check_options(o, c);
    if (rc == RT_OK)
        rc = coord_prepare(k);
    if (rc == RT_OK && k->adopt_wanted)
        rc = run_phase(k, &adopt_phase);
    /* re-adopted workers are set up and training: straight to the train phase */
    for (size_t i = k->adopted ? 2 : 0; rc == RT_OK && i < sizeof phases / sizeof phases[0]; i++)
        rc = run_phase(k, &phases[i]);
    /* joiners still setting up go on too: not told the run ended */
    *again = coord_restart_possible(k, rc) ? coord_restart_tell(k) : -1;
    if (*again < 0)
        coord_elastic_end(k);
    if (rc == RT_OK)
        rc = coord_report_end(k, t_start, res);
    if (*again < 0)
        coord_abort(k, rc);
    snprintf(prev_run, RT_RUN_ID_LEN + 1, "%s", k->run);
    coord_destroy(&k, rc);
    return rc;
}

int rt_coord_run(const struct rt_coord_options *o, const struct rt_train_config *c,
                 struct rt_train_result *res)
{
    struct rt_coord_options ro = *o;
    struct rt_train_config cfg = *c;
    char prev_run[RT_RUN_ID_LEN + 1] = ""; /* the run a restarted one replaces */
    sig_atomic_t stops0 = coord_stop_requests;
    int restarts = 0; /* of local workers, this command's (--max-restarts) */
    for (;;) {
        memset(res, 0, sizeof *res);
        res->test_loss = res->test_acc = -1.0;
        int again = -1;
        int rc = run_once(&ro, &cfg, prev_run, res, &again, stops0, &restarts);
        if (rc != RT_ERR_NO_STATE || again < 0)
            return rc;
        if (!ro.max_workers)
            ro.max_workers = ro.workers;
        if (again > 0) {
            /* the workers still here start it, others may join up to the cap,
             * and it starts with those that came back when --join-timeout ends */
            ro.workers = again < ro.max_workers ? again : ro.max_workers;
            ro.min_workers = ro.min_workers <= 0   ? 1
                             : ro.min_workers < ro.workers ? ro.min_workers
                                                           : ro.workers;
        } else {
            /* nobody is left: the run's own --workers (new workers, a retried
             * Spark stage), and when --join-timeout ends those that came, at
             * least training's floor (--min-workers, default 1) */
            ro.workers = o->workers < ro.max_workers ? o->workers : ro.max_workers;
            ro.min_workers = o->min_workers > 0 ? o->min_workers : 1;
        }
        cfg.resume = true;
        rt_error_clear();
    }
}
