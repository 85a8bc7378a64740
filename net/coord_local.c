/* coord_local.c — the local workers of `ragtag train --workers N`: N
 * processes of this very binary, `ragtag worker --join` this coordinator,
 * named local-0 ... local-(N-1).
 *
 * One that dies without saying "done" is a lost member (the others go on,
 * coord_elastic.c), and a new process takes its place, local-N, local-N+1,
 * ..., with its backend and throttle: it joins as any worker joining
 * during training does and gets the members' state. A local machine has
 * no other source of workers, so without this a run that lost one (the
 * kernel's OOM killer, a stray kill) would finish short of a worker, and
 * one that lost all would stop. --max-restarts bounds it (default 3): a
 * worker that dies for a reason of its own dies again. One that dies
 * before the run starts (a backend that cannot load, say) stops it: the
 * same start would fail the same way. */
#include "config.h"

#include <signal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coord-impl.h"
#include "status.h"

/* Item i of a comma list, cycling ("cpu,opencl": cpu, opencl, cpu, ...). */
static void list_item(const char *list, int i, char *out, size_t cap)
{
    int n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    i %= n;
    const char *p = list;
    while (i-- > 0)
        p = strchr(p, ',') + 1;
    snprintf(out, cap, "%.*s", (int)strcspn(p, ","), p);
}

static void local_name(int i, char *out, size_t cap) { snprintf(out, cap, "local-%d", i); }

/* Room for child i's place and verdict. */
static int local_room(struct coord_local *l, int i)
{
    if (i < l->cap)
        return RT_OK;
    int cap = l->cap ? 2 * l->cap : 8;
    int *slot = realloc(l->slot, (size_t)cap * sizeof *slot);
    if (slot)
        l->slot = slot;
    bool *answered = realloc(l->answered, (size_t)cap * sizeof *answered);
    if (answered)
        l->answered = answered;
    if (!slot || !answered)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    l->cap = cap;
    return RT_OK;
}

/* A new local worker in place `slot` of the N; its name is its child
 * index: local-0 ... for the first N, then local-N, ... */
static int local_spawn(struct coord *k, int slot)
{
    const struct rt_coord_options *o = k->o;
    struct coord_local *l = &k->local;
    int i = rt_children_count(l->ch);
    RT_TRY(local_room(l, i));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = o->local_threads > 0 ? o->local_threads
                                       : (int)((cores > 0 ? cores : 1) / o->workers);
    char th[16], dv[16], parent[24], name[32], be[32], tr[32], what[32];
    snprintf(th, sizeof th, "%d", threads < 1 ? 1 : threads);
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    snprintf(dv, sizeof dv, "%d", o->local_device);
    local_name(i, name, sizeof name);
    list_item(o->local_backend, slot, be, sizeof be);
    list_item(o->local_throttle, slot, tr, sizeof tr);
    char *argv[] = {"ragtag", "worker", "--join", k->endpoint, "--name", name,
                    "--threads", th, "--backend", be, "--device", dv, "--quiet",
                    "--connect-timeout", "60", "--parent", parent,
                    /* their coordinator is their parent: they die with it */
                    "--coord-timeout", "0",
                    o->insecure ? "--insecure" : "--quiet",
                    tr[0] ? "--throttle" : NULL, tr, NULL};
    snprintf(what, sizeof what, "worker %d", i);
    RT_TRY(rt_children_start(l->ch, "/proc/self/exe", argv, what));
    l->slot[i] = slot;
    l->answered[i] = false;
    return RT_OK;
}

int coord_local_start(struct coord *k)
{
    if (!(k->local.ch = rt_children_new()))
        return RT_ERR_NOMEM;
    for (int i = 0; i < k->o->workers; i++)
        RT_TRY(local_spawn(k, i));
    return RT_OK;
}

int coord_local_max_restarts(const struct coord *k)
{
    return k->o->max_restarts < 0 ? RT_LOCAL_MAX_RESTARTS : k->o->max_restarts;
}

bool coord_local_restart_left(const struct coord *k)
{
    const struct coord_local *l = &k->local;
    return l->restarts && *l->restarts < coord_local_max_restarts(k);
}

/* Child i died: a new worker in its place while the run trains or sets up
 * (it joins then), none once members are finishing or stopping. */
static int local_replace(struct coord *k, int i)
{
    struct coord_local *l = &k->local;
    char dead[32], name[32];
    local_name(i, dead, sizeof dead);
    if (k->ndone > 0 || k->stop_sent || coord_stop_requested(k))
        return RT_OK;
    if (!coord_local_restart_left(k)) {
        coord_note("%s is not started again: --max-restarts %d %s; the run goes on without it",
                   dead, coord_local_max_restarts(k),
                   coord_local_max_restarts(k) ? "used up" : "(none)");
        return RT_OK;
    }
    local_name(rt_children_count(l->ch), name, sizeof name);
    ++*l->restarts;
    coord_note("starting %s in place of %s (restart %d of --max-restarts %d)", name, dead,
               *l->restarts, coord_local_max_restarts(k));
    return local_spawn(k, l->slot[i]);
}

/* The newest member record of that name: a worker that was dropped (paused
 * too long) and joined again has two. */
static struct coord_worker *find_name(struct coord *k, const char *name)
{
    for (int j = k->nw - 1; j >= 0; j--)
        if (!strcmp(k->w[j].m.name, name))
            return &k->w[j];
    return NULL;
}

static bool said_done(struct coord *k, const char *name)
{
    for (int j = 0; j < k->nw; j++)
        if (!strcmp(k->w[j].m.name, name) && k->w[j].done)
            return true;
    return false;
}

/* A member whose connection closed and who is not lost yet: its loss is
 * still being settled (coord_check_alive). */
static bool loss_pending(const struct coord *k)
{
    for (int j = 0; j < k->nw; j++)
        if (!k->w[j].gone && !k->w[j].done && k->w[j].closed_at > 0.0)
            return true;
    return false;
}

/* Seconds after a local worker's exit before it is judged: its last
 * messages may still wait in the socket ("done"), and workers killed
 * together (the OOM killer, a kill of the process group) are seen to
 * die up to a second or more apart on a loaded host. A replacement made
 * at the first death would spend a restart on a run whose members are
 * all going: the run then goes on from its checkpoint instead, with N new
 * workers, as one restart (coord_restart.c). */
#define LOCAL_SETTLE 2.0

int coord_local_check(struct coord *k)
{
    struct coord_local *l = &k->local;
    if (!l->ch)
        return RT_OK;
    rt_children_reap(l->ch);
    for (int i = 0; i < rt_children_count(l->ch); i++) {
        int st;
        char name[32];
        local_name(i, name, sizeof name);
        if (l->answered[i] || !rt_children_exited(l->ch, i, 0.0, &st))
            continue;
        struct coord_worker *w = find_name(k, name);
        /* one the run already lost, with no restart left, is answered at
         * once: there is nothing to spend, so nothing to wait for */
        bool settled = w && w->gone && !coord_local_restart_left(k);
        if (!settled && (!rt_children_exited(l->ch, i, LOCAL_SETTLE, &st) || loss_pending(k)))
            continue;
        l->answered[i] = true;
        if (said_done(k, name))
            continue;
        char why[96];
        snprintf(why, sizeof why, "its process %s %d",
                 WIFEXITED(st) ? "exited with status" : "was killed by signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        bool started = k->training || (w && w->rank >= 0);
        if (!started && i < k->o->workers)
            return rt_error(RT_ERR_NET, "local worker %d: %s", i, why);
        if (w && !w->gone)
            RT_TRY(k->training ? coord_lose(k, w, why) : coord_setup_lose(k, w, why));
        RT_TRY(local_replace(k, i));
    }
    return RT_OK;
}

void coord_local_missing(struct coord *k, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < k->o->workers; i++) {
        char name[32];
        local_name(i, name, sizeof name);
        bool in = false;
        for (int j = 0; j < k->nw; j++)
            in |= !strcmp(k->w[j].m.name, name);
        if (in)
            continue;
        int n = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", name);
        if (n > 0 && (size_t)n < cap - used)
            used += (size_t)n;
    }
}

/* Local workers that are not members when the run ends: one that left on
 * standby and waits to come back, one still joining. Nothing tells them
 * that the run ended: they are stopped, not waited for (a run whose
 * standby worker left near its end sat 30 s before its last line, then
 * killed it). */
static void stop_outsiders(struct coord *k)
{
    struct coord_local *l = &k->local;
    char names[256] = "";
    size_t used = 0;
    for (int i = 0; i < rt_children_count(l->ch); i++) {
        char name[32];
        local_name(i, name, sizeof name);
        const struct coord_worker *w = find_name(k, name);
        if ((w && !w->gone && !w->pending && w->rank >= 0) ||
            !rt_children_signal_one(l->ch, i, SIGTERM))
            continue;
        int n = snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", name);
        if (n > 0 && (size_t)n < sizeof names - used)
            used += (size_t)n;
    }
    if (used)
        coord_note("local worker%s %s not in the run when it ended (on standby, or joining): "
                   "stopped", strchr(names, ',') ? "s" : "", names);
}

/* Give the members time to leave, more after a run that ended well. */
void coord_local_finish(struct coord *k, int rc)
{
    if (!k->local.ch)
        return;
    /* Keep the error detail: waiting may set its own. */
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", rt_error_detail());
    rt_children *ch = k->local.ch;
    if (rc >= 0)
        stop_outsiders(k);
    if (!rt_children_wait(ch, rc < 0 ? 5.0 : 30.0)) {
        rt_children_signal(ch, SIGTERM);
        if (!rt_children_wait(ch, 5.0))
            rt_children_kill(ch);
    }
    rt_children_destroy(&k->local.ch);
    free(k->local.slot);
    free(k->local.answered);
    if (rc < 0)
        rt_error(rc, "%s", keep);
}
