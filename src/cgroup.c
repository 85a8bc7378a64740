/* cgroup.c — this process's cgroup lines (see cgroup.h). */
#include "config.h"

#include "cgroup.h"

#include <stdio.h>
#include <string.h>

bool rt_cgroup_lines(const char *proc_cgroup,
                     void (*fn)(const char *controllers, const char *path, void *arg), void *arg)
{
    FILE *f = fopen(proc_cgroup, "r");
    if (!f)
        return false;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || !c2)
            continue;
        *c2 = '\0';
        fn(c1 + 1, c2 + 1, arg);
    }
    fclose(f);
    return true;
}

bool rt_cgroup_has(const char *controllers, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = controllers; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, name, n))
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}
