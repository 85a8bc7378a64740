/* cgroup.h — reading this process's cgroups (/proc/self/cgroup), for the
 * CPU quota (partition.c) and the memory limit (memory.c). Not installed. */
#ifndef RT_CGROUP_H
#define RT_CGROUP_H

#include <stdbool.h>

/* Calls fn(controllers, path, arg) for each line "ID:CONTROLLERS:PATH" of
 * the file (controllers "" for the v2 hierarchy). False when the file
 * cannot be read. */
bool rt_cgroup_lines(const char *proc_cgroup,
                     void (*fn)(const char *controllers, const char *path, void *arg), void *arg);
/* Whether `name` is one of the comma-separated controllers. */
bool rt_cgroup_has(const char *controllers, const char *name);

#endif
