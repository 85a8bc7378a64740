/* coord-impl.h — private to the coordinator (net/coord*.c).
 *
 * The coordinator is one struct coord, made by rt_coord_run and handed to
 * every function here: nothing lives in file-scope variables, so two
 * coordinators can run in one process (tests/test_coord.c does). The
 * files, one concern each:
 *   coord.c          the entry, the run, and the one poll loop driven by
 *                    the phase table (join, setup, train);
 *   coord_socket.c   the ROUTER socket: receive one checked message, send;
 *   coord_security.c who may connect: credentials, CURVE, the join line;
 *   coord_members.c  hellos, who joined, ranks, "ready";
 *   coord_job.c      the job: model text, options, served data files;
 *   coord_local.c    the local workers of `ragtag train --workers N`;
 *   coord_ckpt.c     checkpoints assembled from the workers' parts, resume;
 *   coord_report.c   progress, lines, metrics, the cluster table, results;
 *   coord_elastic.c  members that come and go: losses, joins, generations;
 *   coord_adopt.c    the coordinator goes away and comes back: the run id kept
 *                    with the checkpoints, acknowledgements that bound the
 *                    workers' run-ahead, re-adoption of live workers;
 *   coord_status.c   the status page (--http): what the coordinator learns,
 *                    published into the snapshot the HTTP thread reads;
 *   coord_plan.c     what rank 0's plan lines say (shares, speeds, standby). */
#ifndef RT_COORD_IMPL_H
#define RT_COORD_IMPL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "checkpoint.h"
#include "datashare.h"
#include "membership.h"
#include "memory.h"
#include "metrics.h"
#include "model.h"
#include "net.h"
#include "optim.h"
#include "clock.h"
#include "progress.h"
#include "snapshot.h"
#include "children.h"
#include "creds.h"
#include "curve.h"
#include "transport.h"
#include "wire.h"

#define COORD_PROBE_EVERY 10.0 /* seconds between a held joiner's speed measures */

struct coord_worker {
    struct rt_member m;
    unsigned char rid[256]; /* ZeroMQ routing id of its connection */
    size_t rid_len;
    char peer[64];
    int rank;               /* in the current generation; -1: not a member */
    bool ready, done;
    bool pending;           /* joined during training: set up, not yet a member */
    bool admitted;          /* a joiner made a member (not one of the run's first) */
    bool formed;            /* ... and a generation with it formed since */
    bool farewell;          /* a joiner told the run ended, not yet known to have read it */
    bool gone;              /* lost: the run went on without it */
    bool lost_in_setup;     /* its connection closed while it set up: lost at the start */
    bool regrouped;         /* formed the ring of the generation announced */
    double expelled_at;     /* when it was last told it is out */
    double probe_at;        /* a joiner too slow for a share: when it measures again (0: not held) */
    bool left_standby;      /* it left the ring on standby (its next joins wait longer) */
    double left_at;         /* when it left the ring (lost or standby) */
    double back_at;         /* back from standby: when it sets up (its back-off ends) */
    double last_seen, ips;
    long acked;             /* the newest step read from it (its heartbeats); -1: none */
    int fd;                 /* the TCP connection its last message came on, or -1 */
    double closed_at;       /* when that connection closed (0: open) */
    int status;
    char message[600];
    uint64_t hash;
    struct rt_train_result res;
    /* the newest plan's view of it (coord_plan.c), for the status page */
    long plan_share;        /* samples of each batch (gossip: local batches of the epoch) */
    double plan_ips;        /* the speed that plan used (0: none yet) */
    bool plan_standby;
    uint64_t max_rss;       /* its peak memory, from its "done" (0: not known) */
    long mem_rows;          /* the images its memory holds of a share, when capped (0: not) */
};

/* The options sent to every worker with the job, as rt_train_config_each
 * gives them; grows as needed. */
struct coord_option_list {
    char **key, **value;
    int n, cap;
    bool built; /* once, for every job (coord_job.c) */
};

/* The coordinator's own copy of the model (cpu, batch 1) and a full-size
 * optimiser: where checkpoints are assembled and --resume is read. */
struct coord_ckpt {
    rt_dev *cpu;
    rt_model *cm;
    rt_optim *copt;
    size_t np, ns;
    char last_path[1100], best_path[1100];
    /* --resume: the checkpoint's position, its best weights */
    bool resuming, have_best;
    struct rt_train_pos rpos;
    float *best_params, *best_state;
};

/* The local workers of `train --workers N`: child i of ch took place
 * slot[i] of the N (its backend and throttle); answered[i] once its end
 * was dealt with. *restarts: workers started again in this command, kept
 * by rt_coord_run across a restart from the checkpoint. */
struct coord_local {
    rt_children *ch;
    int *slot;
    bool *answered;
    int cap;
    int *restarts;
};

struct coord {
    const struct rt_coord_options *o;
    const struct rt_train_config *c;
    char run[RT_RUN_ID_LEN + 1];
    sig_atomic_t stops_at_start; /* SIGINT requests seen before this run */
    /* link security (coord_security.c) */
    rt_curve *curve;        /* NULL: --insecure */
    struct rt_creds creds;
    char join[RT_JOIN_MAX]; /* the join string workers need */
    /* the socket */
    void *zctx, *router;
    void *monitor;          /* the router's disconnect events (PAIR) */
    char endpoint[RT_ENDPOINT_MAX];
    rt_wire_writer wr;
    rt_wire_msg msg;
    rt_zframes fr;
    rt_wire_droplog drops;
    double last_hb;
    double phase_start;
    /* members, by arrival; by_rank[r] indexes w */
    struct coord_worker w[RT_MAX_WORKERS];
    int nw;
    int by_rank[RT_MAX_WORKERS];
    struct rt_membership ms;
    int ndone;
    /* the job */
    char *model_text;
    size_t model_len;
    struct rt_data_manifest man;
    struct coord_option_list opts;
    char *chunk; /* RT_DATA_CHUNK bytes of a served file */
    struct coord_local local; /* train --workers N (coord_local.c) */
    bool stop_sent;
    /* reports */
    rt_progress prog;
    rt_metrics *mf;
    char summary[2048];
    long interrupted_step;
    struct coord_ckpt ck;
    /* members that come and go (coord_elastic.c) */
    bool training;          /* in the train phase */
    uint64_t regroup_gen;   /* the generation announced, not yet "go" (0: none) */
    double regroup_t0;
    double short_since;     /* members below --min-workers since (0: not) */
    long lost, joined, standby; /* members lost, admitted, gone on standby */
    bool told_finished;     /* joiners were told the run ended: the socket lingers for them */
    char held[8][24];       /* ids of workers whose hellos wait for training (noted once) */
    int nheld;
    /* the coordinator goes away and comes back (coord_adopt.c) */
    double t_start, last_loop;
    bool adopt_wanted;      /* --resume found the run's id: its workers may be alive */
    bool restarted;         /* started again from the checkpoint (coord_restart.c): a new
                               run id, nobody to adopt */
    char prev_run[RT_RUN_ID_LEN + 1]; /* then: the run id it replaces ("" none) */
    double prev_told;       /* when one of its workers was last told to join again */
    double last_join;       /* when the last worker joined (the join phase) */
    bool adopting, adopted;
    uint64_t adopt_gen;     /* the newest generation the rejoined workers were in */
    int adopt_world;        /* its size */
    long adopt_step;        /* the most advanced rejoined worker's step */
    long metrics_step;      /* --resume: the newest step in the --metrics file (-1: none) */
    /* the status page, --http (coord_status.c; NULL: off) */
    rt_snap *snap;
    struct rt_http *http;
    struct rt_snap_worker *snap_rows; /* RT_MAX_WORKERS, for publishing */
    struct rt_snap_run srun; /* the run's fields, kept between publishes */
    double snap_at;          /* the last publish */
    /* the workers' memory need, estimated once (coord_memory.c) */
    int mem_state;          /* 0: not yet, 1: estimated, -1: could not */
    struct rt_mem_need mem;
};

/* coord.c */
void coord_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool coord_stop_requested(const struct coord *k);

/* coord_socket.c */
int coord_socket_open(struct coord *k);
/* rc < 0: the run failed, keep unsent messages a while. */
void coord_socket_close(struct coord *k, int rc);
int coord_send(struct coord *k, struct coord_worker *w, const void *const *frames,
               const size_t *sizes, int n);
/* Best effort (heartbeats, start, stop, abort); the error detail is kept. */
void coord_send_simple(struct coord *k, struct coord_worker *w, const char *type,
                       const char *reason);
void coord_send_all(struct coord *k, const char *type, const char *reason);
void coord_heartbeat(struct coord *k);
int coord_next_msg(struct coord *k, int timeout_ms, struct coord_worker **from);
/* Whether a message waits in the coordinator's socket. */
bool coord_has_input(struct coord *k);
void coord_drop_unexpected(struct coord *k, struct coord_worker *w);
/* The message in k->wr to a route (frames: none beyond the map). */
int coord_send_rid(struct coord *k, const void *rid, size_t rid_len, const char *name);
/* A "reject" to a route that is not (and must not become) a member's. */
int coord_send_reject(struct coord *k, const void *rid, size_t rid_len, const char *name,
                      const char *why);

/* coord_security.c */
/* Before the router binds: credentials and the ZAP handler, or a refusal
 * to listen beyond loopback without them (--insecure: a warning). */
int coord_security_open(struct coord *k, const char *endpoint);
/* After it bound: the line that tells how workers join. */
void coord_security_announce(struct coord *k);
void coord_security_close(struct coord *k);
/* "CurveZMQ ..." or "INSECURE ...", for the status lines. */
const char *coord_security_mode(const struct coord *k);

/* coord_memory.c */
/* Whether worker m's memory limit holds the run; why says what it needs. */
bool coord_memory_fits(struct coord *k, const struct rt_member *m, char *why, size_t cap);
/* "NEED/LIMIT" in MB for the cluster table ("*": its share is capped). */
void coord_memory_cell(const struct coord_worker *w, char *buf, size_t cap);
/* Each worker's peak memory: a log line, metrics, res->max_rss the largest. */
void coord_memory_report(struct coord *k, struct rt_train_result *res);

/* coord_members.c */
int coord_hello(struct coord *k, struct coord_worker *w, bool open);
int coord_ready(struct coord *k, struct coord_worker *w);
/* The --join-timeout verdict: 1 start with fewer (--min-workers), or an error. */
int coord_join_timeout(struct coord *k);
int coord_setup_timeout(struct coord *k);
int coord_check_alive(struct coord *k);
/* The set-up phase's: a worker whose connection closed is left out. */
int coord_setup_check_alive(struct coord *k);
int coord_setup_lose(struct coord *k, struct coord_worker *w, const char *how);
/* This process did not run for a while (SIGSTOP, a frozen VM): the
 * workers' silence is not theirs; their clocks start again. */
void coord_members_resumed(struct coord *k, double paused);
void coord_assign_ranks(struct coord *k);
/* A new worker from the hello in k->fr (route) with member m. */
struct coord_worker *coord_add_member(struct coord *k, const struct rt_member *m,
                                      const char *peer);
/* The members' order: by name (start order never matters). */
void coord_sort_by_name(struct coord_worker **order, int n);
/* By rank: rank r's worker. */
static inline struct coord_worker *coord_rank(struct coord *k, int r)
{
    return &k->w[k->by_rank[r]];
}

/* coord_job.c */
int coord_job_read_model(struct coord *k);
int coord_job_send(struct coord *k);
/* The job to a worker that joins during training (its rank and place come
 * with the generation that admits it); it sets up after setup_after
 * seconds (a worker back from standby waits out its back-off idle). */
int coord_job_send_late(struct coord *k, struct coord_worker *w, double setup_after);
int coord_job_serve_file(struct coord *k, struct coord_worker *w);
void coord_job_free(struct coord *k);

/* coord_local.c */
int coord_local_start(struct coord *k);
int coord_local_check(struct coord *k);
/* --max-restarts (its default when not given), and whether it leaves
 * another start of a local worker. */
int coord_local_max_restarts(const struct coord *k);
bool coord_local_restart_left(const struct coord *k);
/* The local workers' names that have not joined, comma separated. */
void coord_local_missing(struct coord *k, char *out, size_t cap);
void coord_local_finish(struct coord *k, int rc);

/* coord_ckpt.c */
int coord_ckpt_open(struct coord *k);
int coord_ckpt_load_resume(struct coord *k);
int coord_ckpt_send_resume(struct coord *k, struct coord_worker *w);
int coord_ckpt_part(struct coord *k, struct coord_worker *w);
void coord_ckpt_close(struct coord_ckpt *ck);
void coord_ckpt_start_from_init(struct coord *k);
/* Whether --checkpoint DIR holds a last.safetensors to go on from. */
bool coord_ckpt_written(const struct coord *k);

/* coord_elastic.c */
/* Whether members may change during training (sync mode). */
bool coord_elastic(const struct coord *k);
/* The fewest members training goes on with (--min-workers, at least 1)
 * and the most it admits (--max-workers, else --workers). */
int coord_min_members(const struct coord *k);
int coord_max_members(const struct coord *k);
/* A member or joiner is lost: the run goes on without it (a new
 * generation), or fails when it cannot. */
int coord_lose(struct coord *k, struct coord_worker *w, const char *why);
/* Where a run that stops for want of members can go on from (its whole
 * checkpoint and --resume, or that there is none), into out. */
const char *coord_resume_hint(const struct coord *k, char *out, size_t cap);
int coord_member_failed(struct coord *k, struct coord_worker *w, int status, const char *msg);
int coord_joiner_failed(struct coord *k, struct coord_worker *w);
/* A hello during training: admitted as a joiner (the job), or turned away. */
int coord_admit(struct coord *k, const struct rt_member *m, const char *peer);
/* A joiner admitted into generations none of which formed, the last
 * never to form: every other member is done. It trained nothing, and the
 * run's end is the others' (coord_elastic_end tells it the run ended). */
bool coord_never_trained(const struct coord *k, const struct coord_worker *w);
/* "ready" of a joiner: admitted at a new generation. */
int coord_joiner_ready(struct coord *k, struct coord_worker *w);
/* "regrouped": w formed the ring of the announced generation. */
int coord_regrouped(struct coord *k, struct coord_worker *w);
/* Members still in the run (current generation, not lost). */
int coord_alive(const struct coord *k);
/* The train phase's clock: too few members for too long fails the run. */
int coord_elastic_clock(struct coord *k);
/* The run is over: joiners not yet admitted are told so, and the
 * coordinator waits (up to a few seconds) until each has read it. */
void coord_elastic_end(struct coord *k);
/* A message from a worker the run went on without: tell it so. */
void coord_expel(struct coord *k, struct coord_worker *w);
/* Announce a new generation of the members still here and the joiners
 * ready; have >= 0: a re-adoption, the step the checkpoint file holds. */
int coord_regroup(struct coord *k, long have);

/* coord_restart.c */
/* Whether a run that ended with rc can start again from its checkpoint. */
bool coord_restart_possible(const struct coord *k, int rc);
/* Tell every worker still here to join again; how many were told. */
int coord_restart_tell(struct coord *k);
/* A message of the run this one replaces, in k->fr: its worker missed the
 * word to join again (paused, say) and is told once more. Whether it was. */
bool coord_restart_retell(struct coord *k);
/* The join phase of a restarted run: 1 (and a note) once at least
 * --min-workers are back and no other came for a few seconds, else 0. */
int coord_restart_settled(struct coord *k);

/* coord_adopt.c */
/* The run id: kept in --checkpoint DIR, taken back on --resume. */
int coord_adopt_prepare(struct coord *k);
/* The adopt phase (a resumed run whose workers may be alive). */
int coord_adopt_enter(struct coord *k);
bool coord_adopt_finished(const struct coord *k);
int coord_adopt_clock(struct coord *k);
int coord_adopt_rejoin(struct coord *k, struct coord_worker *w);
int coord_adopt_leave(struct coord *k);
/* During training: a rejoin of a member (a pause) or of a stranger (too late). */
int coord_rejoin_late(struct coord *k, struct coord_worker *w);
/* A heartbeat: the worker's step is acknowledged. */
int coord_hb(struct coord *k, struct coord_worker *w);
/* A heartbeat to w with the newest step read from it. */
void coord_send_ack(struct coord *k, struct coord_worker *w);
/* A heartbeat of this run from an unknown connection: "who". */
void coord_ask_who(struct coord *k);

/* coord_report.c */
void coord_sanitize(char *s);
int coord_report_open(struct coord *k);
void coord_report_close(struct coord *k);
int coord_report_progress(struct coord *k, struct coord_worker *w);
int coord_report_line(struct coord *k, struct coord_worker *w);
int coord_report_metrics(struct coord *k, struct coord_worker *w);
void coord_report_table(struct coord *k);
/* A membership event in the --metrics file ("lost", "joined"). */
void coord_report_event(struct coord *k, const char *event, const struct coord_worker *w,
                        const char *why);
/* The run starts again from its checkpoint (coord_restart.c): an event in
 * the --metrics file and on the status page, before the next run's lines;
 * workers: those still here that join again (0: it waits for new ones), or
 * the new local workers of train --workers N. */
void coord_report_restart(struct coord *k, int workers);
/* A worker's "done": its result kept in w (w->done set when well-formed). */
void coord_report_done(struct coord *k, struct coord_worker *w);
/* A worker's "error" or failed "done": the error that ends the run. */
int coord_report_failed(struct coord *k, struct coord_worker *w);
/* The end: rank 0's result, and whether the run was interrupted or
 * its replicas diverged. */
int coord_report_end(struct coord *k, double t_start, struct rt_train_result *res);

/* coord_status.c: the status page; every call returns at once without --http */
/* After the socket (and its credentials): the snapshot and the server. */
int coord_status_open(struct coord *k);
void coord_status_close(struct coord *k, int rc);
void coord_status_phase(struct coord *k, const char *phase);
/* The table and the run's fields into the snapshot (now: not rate-limited). */
void coord_status_publish(struct coord *k, bool now);
void coord_status_event(struct coord *k, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void coord_status_progress(struct coord *k, int epoch, int epochs, long done, long total,
                           double loss, double acc, double ips, double eta);
/* A checked "metrics" message of rank 0: a point of the curves. */
void coord_status_metrics(struct coord *k, rt_wire_map f);

/* coord_plan.c */
/* A line of rank 0: a plan's shares and speeds, standby on or off. */
void coord_plan_line(struct coord *k, const char *text);
/* The first plan (the cluster table's shares, by rank). */
void coord_plan_first(struct coord *k, const long *share);

#endif
