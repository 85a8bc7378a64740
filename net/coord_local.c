/* coord_local.c — the local workers of `ragtag train --workers N`: N
 * processes of this very binary, `ragtag worker --join` this coordinator,
 * named local-0 ... local-(N-1); one that dies without saying "done"
 * ends the run. */
#include "config.h"

#include <stdio.h>
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

int coord_local_start(struct coord *k)
{
    const struct rt_coord_options *o = k->o;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = o->local_threads > 0 ? o->local_threads
                                       : (int)((cores > 0 ? cores : 1) / o->workers);
    if (threads < 1)
        threads = 1;
    char th[16], dv[16], parent[24];
    snprintf(th, sizeof th, "%d", threads);
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    snprintf(dv, sizeof dv, "%d", o->local_device);
    if (!(k->local = rt_children_new()))
        return RT_ERR_NOMEM;
    for (int i = 0; i < o->workers; i++) {
        char name[32], be[32], tr[32], what[32];
        local_name(i, name, sizeof name);
        list_item(o->local_backend, i, be, sizeof be);
        list_item(o->local_throttle, i, tr, sizeof tr);
        char *argv[] = {"ragtag", "worker", "--join", k->endpoint, "--name", name,
                        "--threads", th, "--backend", be, "--device", dv, "--quiet",
                        "--connect-timeout", "60", "--parent", parent,
                        /* their coordinator is their parent: they die with it */
                        "--coord-timeout", "0",
                        o->insecure ? "--insecure" : "--quiet",
                        tr[0] ? "--throttle" : NULL, tr, NULL};
        snprintf(what, sizeof what, "worker %d", i);
        RT_TRY(rt_children_start(k->local, "/proc/self/exe", argv, what));
    }
    return RT_OK;
}

static struct coord_worker *find_name(struct coord *k, const char *name)
{
    for (int j = 0; j < k->nw; j++)
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

/* Its last messages may still wait in the socket when a worker's exit is
 * seen, so the verdict waits a moment. */
int coord_local_check(struct coord *k)
{
    if (!k->local)
        return RT_OK;
    rt_children_reap(k->local);
    for (int i = 0; i < rt_children_count(k->local); i++) {
        int st;
        char name[32];
        local_name(i, name, sizeof name);
        if (!rt_children_exited(k->local, i, 2.0, &st) || said_done(k, name))
            continue;
        char why[96];
        snprintf(why, sizeof why, "its process %s %d",
                 WIFEXITED(st) ? "exited with status" : "was killed by signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        struct coord_worker *w = find_name(k, name);
        if (!w)
            return rt_error(RT_ERR_NET, "local worker %d: %s", i, why);
        if (!w->gone)
            RT_TRY(coord_lose(k, w, why));
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

/* Give the workers time to leave: more after a run that ended well. */
void coord_local_finish(struct coord *k, int rc)
{
    if (!k->local)
        return;
    /* Keep the error detail: waiting may set its own. */
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", rt_error_detail());
    rt_children_wait(k->local, rc < 0 ? 5.0 : 30.0);
    rt_children_destroy(&k->local);
    if (rc < 0)
        rt_error(rc, "%s", keep);
}
