/* coord_adopt.c — the coordinator goes away and comes back.
 *
 * Workers train peer to peer; the coordinator only coordinates, logs and
 * writes the files. So a coordinator that is paused or killed costs the
 * run nothing if (1) the workers never get far ahead of what it has read
 * (each heartbeat of a worker carries its step; the coordinator answers
 * with the newest step it read from that worker, every report sent before
 * included: the worker waits when it is RUN_AHEAD steps ahead, see
 * net/worker.c), and (2) a coordinator restarted with --checkpoint DIR
 * --resume on the same address takes back the workers still alive, which
 * kept their state and waited (worker --coord-timeout).
 *
 * Restart rather than a worker taking the coordinator's role over: one
 * process keeps writing the checkpoints, in one place, and two
 * coordinators can never both believe they run the run (no split brain):
 * the workers never elect anything, they only answer whoever holds the
 * run id on the address they were given.
 *
 * The run id lives in DIR/run-id, written at the start of a run with
 * --checkpoint. A resumed coordinator takes it back and, for a moment
 * (ADOPT_WINDOW), listens: a worker of the run answers its "who" with a
 * "rejoin" (its member entry, generation and step). The workers that
 * rejoined become the members of a new generation, above theirs, and the
 * trainer's recover path gives every one the state of the most advanced:
 * the run goes on from the workers' memory, not from the file. Nobody
 * back in time: today's resume from the file, under a new run id (a
 * straggler of the old run is then refused as another run's). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#include "coord-impl.h"
#include "status.h"

#define ADOPT_WINDOW 5.0 /* seconds: live workers answer within a heartbeat (1 s) */
#define RUN_ID_FILE "run-id"

/* ---- the run id, kept with the checkpoints -------------------------------------------- */

static void run_id_path(const struct coord *k, char *out, size_t cap, const char *suffix)
{
    snprintf(out, cap, "%s/%s%s", k->c->checkpoint_dir, RUN_ID_FILE, suffix);
}

static bool is_run_id(const char *s)
{
    if (strlen(s) != RT_RUN_ID_LEN)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

/* 1 and the id, 0 when there is no file, or an error for a bad one. */
static int read_run_id(const struct coord *k, char id[RT_RUN_ID_LEN + 1])
{
    char path[1200], buf[80] = "";
    run_id_path(k, path, sizeof path, "");
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0
                               : rt_error(RT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    bool got = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    if (!got || !is_run_id(buf))
        return rt_error(RT_ERR_FORMAT, "%s does not hold a run id (%d hex digits): remove it to "
                                       "resume from the checkpoint under a new run id",
                        path, RT_RUN_ID_LEN);
    snprintf(id, RT_RUN_ID_LEN + 1, "%s", buf);
    return 1;
}

/* Written whole or not at all: a temporary file, synced, renamed. */
static int write_run_id(const struct coord *k)
{
    char path[1200], tmp[1200];
    run_id_path(k, path, sizeof path, "");
    run_id_path(k, tmp, sizeof tmp, ".new");
    FILE *f = fopen(tmp, "w");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    bool ok = fprintf(f, "%s\n", k->run) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return rt_error(RT_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return RT_OK;
}

int coord_adopt_prepare(struct coord *k)
{
    if (!k->c->checkpoint_dir[0])
        return RT_OK;
    char id[RT_RUN_ID_LEN + 1];
    /* Local workers die with their parent: a new run id then, so that
     * nothing of the old run (a straggler, a shared-memory segment named
     * after it) can be taken for this one. */
    bool adoptable = coord_elastic(k) && !k->o->spawn_local && !k->restarted;
    int rc = k->c->resume ? read_run_id(k, id) : 0;
    if (rc < 0)
        return rc;
    if (rc == 0 || !adoptable)
        return write_run_id(k);
    snprintf(k->run, sizeof k->run, "%s", id);
    k->adopt_wanted = true;
    return RT_OK;
}

/* ---- acknowledgements: the bound on the workers' run-ahead ------------------------------ */

void coord_send_ack(struct coord *k, struct coord_worker *w)
{
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", rt_error_detail());
    rt_wire_begin(&k->wr, k->run, "hb", w->acked >= 0 ? 1 : 0);
    if (w->acked >= 0)
        rt_wire_put_uint(&k->wr, "ack", (uint64_t)w->acked);
    if (rt_wire_end(&k->wr) == RT_OK && coord_send(k, w, NULL, NULL, 0) < 0)
        rt_error(RT_ERR_NET, "%s", keep); /* best effort, like every heartbeat */
}

/* A heartbeat (or a rejoin of a known worker: this coordinator was only
 * paused) with the worker's step: everything it sent before is read. */
int coord_hb(struct coord *k, struct coord_worker *w)
{
    uint64_t step;
    rt_wire_map r = rt_wire_root(&k->msg);
    /* While adopting, an acknowledgement would also release reports the
     * worker sent to the coordinator this one replaces, which never read
     * them: the regroup says what to send again, acknowledgements follow. */
    if (!rt_wire_has(r, "step") || k->adopting)
        return RT_OK;
    if (rt_wire_get_uint(r, "step", 0, (uint64_t)1 << 50, &step) < 0) {
        rt_wire_drop(&k->drops, w->m.name, rt_error_detail());
        return RT_OK;
    }
    if ((long)step > w->acked) {
        w->acked = (long)step;
        coord_send_ack(k, w);
    }
    return RT_OK;
}

/* A heartbeat of our run from a connection we do not know: a worker of the
 * run whose coordinator this one replaces. Asked who it is. */
void coord_ask_who(struct coord *k)
{
    rt_wire_begin(&k->wr, k->run, "who", 0);
    if (rt_wire_end(&k->wr) == RT_OK &&
        zmq_send(k->router, rt_zframe_data(&k->fr, 0), rt_zframe_size(&k->fr, 0),
                 ZMQ_SNDMORE) >= 0)
        zmq_send(k->router, k->wr.data, k->wr.len, 0);
    rt_error_clear();
}

/* ---- re-adoption ------------------------------------------------------------------------ */

struct rejoin {
    uint64_t gen, rank, world, step;
    struct rt_member m;
};

static int read_rejoin(struct coord *k, struct rejoin *j)
{
    rt_wire_map r = rt_wire_root(&k->msg), mm;
    if (rt_wire_get_uint(r, "gen", 1, UINT32_MAX, &j->gen) < 0 ||
        rt_wire_get_uint(r, "world", 1, RT_MAX_WORKERS, &j->world) < 0 ||
        rt_wire_get_uint(r, "rank", 0, j->world - 1, &j->rank) < 0 ||
        rt_wire_get_uint(r, "step", 0, (uint64_t)1 << 50, &j->step) < 0 ||
        rt_wire_get_map(r, "member", &mm) < 0 || rt_member_get(mm, &j->m) < 0)
        return RT_ERR_FORMAT;
    return RT_OK;
}

/* Why this rejoin cannot be taken, or NULL. */
static const char *rejoin_refusal(struct coord *k, const struct rejoin *j, char *why, size_t cap)
{
    if (rt_zframe_size(&k->fr, 0) > sizeof k->w[0].rid)
        return "a routing id longer than 256 bytes";
    if (k->nw >= RT_MAX_WORKERS)
        return "the coordinator has no room for another worker";
    for (int i = 0; i < k->nw; i++) {
        if (!strcmp(k->w[i].m.id, j->m.id) || !strcmp(k->w[i].m.name, j->m.name)) {
            snprintf(why, cap, "worker %s (id %s) already rejoined", k->w[i].m.name,
                     k->w[i].m.id);
            return why;
        }
    }
    return NULL;
}

/* "rejoin" while this coordinator takes its run's workers back. */
int coord_adopt_rejoin(struct coord *k, struct coord_worker *w)
{
    char peer[64], why[200];
    struct rejoin j;
    rt_zframes_peer(&k->fr, 1, peer, sizeof peer);
    if (w)
        return coord_hb(k, w); /* said again: no news */
    if (read_rejoin(k, &j) < 0) {
        rt_wire_drop(&k->drops, peer, rt_error_detail());
        return RT_OK;
    }
    const char *no = rejoin_refusal(k, &j, why, sizeof why);
    if (no) {
        rt_wire_drop(&k->drops, peer, no);
        return RT_OK;
    }
    w = coord_add_member(k, &j.m, peer);
    w->rank = (int)j.rank; /* a member (its place in the new generation comes with it) */
    w->ready = true;
    w->ips = j.m.images_per_s;
    w->acked = (long)j.step;
    if (j.gen > k->adopt_gen || (j.gen == k->adopt_gen && (int)j.world > k->adopt_world)) {
        k->adopt_gen = j.gen;
        k->adopt_world = (int)j.world;
    }
    k->adopt_step = (long)j.step > k->adopt_step ? (long)j.step : k->adopt_step;
    coord_note("worker %s (%s) of run %.8s is alive: generation %llu, rank %llu of %llu, at step "
               "%llu [%d/%d]", j.m.name, peer[0] ? peer : j.m.host, k->run,
               (unsigned long long)j.gen, (unsigned long long)j.rank,
               (unsigned long long)j.world, (unsigned long long)j.step, k->nw, k->adopt_world);
    return RT_OK;
}

/* A rejoin during training from a worker this run went on without (it
 * came back too late): it joins again as a new member. */
int coord_rejoin_late(struct coord *k, struct coord_worker *w)
{
    if (w)
        return coord_hb(k, w); /* a member: this coordinator was only paused */
    rt_wire_begin(&k->wr, k->run, "expelled", 1);
    rt_wire_put_str(&k->wr, "reason", "it came back after the run went on without it");
    if (rt_wire_end(&k->wr) == RT_OK &&
        zmq_send(k->router, rt_zframe_data(&k->fr, 0), rt_zframe_size(&k->fr, 0),
                 ZMQ_SNDMORE) >= 0)
        zmq_send(k->router, k->wr.data, k->wr.len, 0);
    rt_error_clear();
    return RT_OK;
}

int coord_adopt_enter(struct coord *k)
{
    k->adopting = true;
    coord_note("run %s: resuming; waiting up to %.0f s for its workers that are still alive on "
               "%s", k->run, ADOPT_WINDOW, k->endpoint);
    return RT_OK;
}

bool coord_adopt_finished(const struct coord *k)
{
    return k->nw > 0 && k->nw >= k->adopt_world;
}

int coord_adopt_clock(struct coord *k)
{
    return rt_now() - k->phase_start > ADOPT_WINDOW ? 1 : RT_OK;
}

/* Nobody came back: today's resume from the file, for new workers, under
 * a new run id. It is a restart (coord_restart.c): a worker of the old run
 * that did not rejoin (one that was setting up, not training, when its
 * coordinator went) is told to join again when its next message comes,
 * rather than waiting out its --coord-timeout and exiting, and the run
 * starts with those back once no other came for a while. */
static int fall_back(struct coord *k)
{
    char old[RT_RUN_ID_LEN + 1];
    snprintf(old, sizeof old, "%s", k->run);
    snprintf(k->prev_run, sizeof k->prev_run, "%s", old);
    k->restarted = true;
    rt_wire_new_run_id(k->run);
    coord_note("no worker of run %.8s came back within %.0f s: run %s starts from the "
               "checkpoint%s", old, ADOPT_WINDOW, k->run,
               k->ck.resuming ? "" : " (there is none yet: from scratch)");
    return write_run_id(k);
}

int coord_adopt_leave(struct coord *k)
{
    k->adopting = false;
    if (k->nw == 0)
        return fall_back(k);
    long have = k->ck.resuming ? k->ck.rpos.step : 0;
    k->adopted = true;
    k->training = true;
    k->ms.gen = k->adopt_gen;
    coord_note("re-adopted %d live worker%s of run %.8s (generation %llu): the most advanced "
               "is at step %ld, the checkpoint file at step %ld; the run goes on from the "
               "workers' memory (%ld steps the file would redo), generation %llu",
               k->nw, k->nw == 1 ? "" : "s", k->run, (unsigned long long)k->adopt_gen,
               k->adopt_step, have, k->adopt_step - have, (unsigned long long)k->adopt_gen + 1);
    return coord_regroup(k, have);
}
