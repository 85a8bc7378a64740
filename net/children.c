/* children.c — child processes of a run (see children.h). */
#include "config.h"

#include "children.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "status.h"

extern char **environ;

struct child {
    pid_t pid;        /* 0 once reaped */
    int status;       /* its wait status */
    double exit_time; /* when it was reaped; 0 while it runs */
};

struct rt_children {
    struct child *c;
    int n, cap;
};

rt_children *rt_children_new(void)
{
    rt_children *ch = calloc(1, sizeof *ch);
    if (!ch)
        rt_error(RT_ERR_NOMEM, "out of memory");
    return ch;
}

void rt_children_destroy(rt_children **ch)
{
    if (!ch || !*ch)
        return;
    rt_children_kill(*ch);
    free((*ch)->c);
    free(*ch);
    *ch = NULL;
}

int rt_children_start(rt_children *ch, const char *path, char *const argv[], const char *what)
{
    if (ch->n == ch->cap) {
        int cap = ch->cap ? 2 * ch->cap : 8;
        struct child *c = realloc(ch->c, (size_t)cap * sizeof *c);
        if (!c)
            return rt_error(RT_ERR_NOMEM, "cannot start %s: out of memory", what);
        ch->c = c;
        ch->cap = cap;
    }
    pid_t pid;
    int err = posix_spawn(&pid, path, NULL, NULL, argv, environ);
    if (err != 0)
        return rt_error(RT_ERR_IO, "cannot start %s: %s", what, strerror(err));
    ch->c[ch->n] = (struct child){.pid = pid};
    return ch->n++;
}

int rt_children_count(const rt_children *ch) { return ch->n; }

void rt_children_reap(rt_children *ch)
{
    double now = rt_now();
    for (int i = 0; i < ch->n; i++) {
        struct child *c = &ch->c[i];
        int st;
        if (c->pid > 0 && waitpid(c->pid, &st, WNOHANG) == c->pid) {
            c->pid = 0;
            c->status = st;
            c->exit_time = now;
        }
    }
}

bool rt_children_exited(const rt_children *ch, int i, double grace, int *status)
{
    RT_ASSERT(i >= 0 && i < ch->n);
    const struct child *c = &ch->c[i];
    if (c->pid != 0 || c->exit_time == 0.0 || rt_now() - c->exit_time < grace)
        return false;
    *status = c->status;
    return true;
}

/* The children still running. */
static int running(rt_children *ch)
{
    rt_children_reap(ch);
    int n = 0;
    for (int i = 0; i < ch->n; i++)
        n += ch->c[i].pid > 0;
    return n;
}

bool rt_children_wait(rt_children *ch, double limit)
{
    double t0 = rt_now();
    while (running(ch) > 0) {
        if (rt_now() - t0 >= limit)
            return false;
        usleep(20000);
    }
    return true;
}

void rt_children_signal(rt_children *ch, int sig)
{
    for (int i = 0; i < ch->n; i++)
        if (ch->c[i].pid > 0)
            kill(ch->c[i].pid, sig);
}

bool rt_children_signal_one(rt_children *ch, int i, int sig)
{
    RT_ASSERT(i >= 0 && i < ch->n);
    rt_children_reap(ch);
    if (ch->c[i].pid <= 0)
        return false;
    kill(ch->c[i].pid, sig);
    return true;
}

void rt_children_kill(rt_children *ch)
{
    rt_children_reap(ch);
    for (int i = 0; i < ch->n; i++)
        if (ch->c[i].pid > 0) {
            kill(ch->c[i].pid, SIGKILL);
            waitpid(ch->c[i].pid, &ch->c[i].status, 0);
            ch->c[i].pid = 0;
            ch->c[i].exit_time = rt_now();
        }
}
