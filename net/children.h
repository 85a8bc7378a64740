/* children.h — child processes of a run: the local workers of
 * `ragtag train --workers N`.
 *
 * Started with posix_spawn, never fork: the parent already runs ZeroMQ's
 * I/O threads, and a forked copy of a threaded process may only call
 * async-signal-safe functions until it execs. Children are reaped without
 * blocking while the run goes on, and waited for (then stopped) at its end.
 * Reaping takes only this set's process ids, so two sets (two
 * coordinators) can live in one process. */
#ifndef RT_CHILDREN_H
#define RT_CHILDREN_H

#include <stdbool.h>

typedef struct rt_children rt_children;

rt_children *rt_children_new(void);
/* Kills and reaps any child still running. */
void rt_children_destroy(rt_children **ch);

/* Start `path` with argv (NULL-terminated) and this process's environment;
 * its index (0, 1, ...) or an error "cannot start WHAT: why". */
int rt_children_start(rt_children *ch, const char *path, char *const argv[], const char *what);
int rt_children_count(const rt_children *ch);

/* Note every child that exited since the last call (never blocks). */
void rt_children_reap(rt_children *ch);
/* Whether child i exited at least `grace` seconds ago (as last reaped);
 * its wait status in *status. */
bool rt_children_exited(const rt_children *ch, int i, double grace, int *status);

/* Wait up to `limit` seconds for every child to exit: whether they all did. */
bool rt_children_wait(rt_children *ch, double limit);
/* Signal `sig` to each child still running (_one: to child i, if it
 * runs: whether it did). */
void rt_children_signal(rt_children *ch, int sig);
bool rt_children_signal_one(rt_children *ch, int i, int sig);
/* SIGKILL to the children still running, and reap them. */
void rt_children_kill(rt_children *ch);

#endif
