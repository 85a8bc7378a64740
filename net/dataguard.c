/* dataguard.c — a worker opens only data its own command line allows (see
 * dataguard.h). */
#include "config.h"

#include "dataguard.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"

#define MAX_PATHS 2

/* The paths a spec names (without touching them): 0 for the worker's own
 * default data ("fashion-mnist"), -1 for an unknown spec. */
static int spec_paths(const char *spec, char paths[MAX_PATHS][PATH_MAX])
{
    static const char *const dirs[] = {"fashion-mnist:", "mnist:", "idx:", "cifar10:", "shards:"};
    if (!strcmp(spec, "fashion-mnist"))
        return 0;
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++)
        if (!strncmp(spec, dirs[k], strlen(dirs[k]))) {
            snprintf(paths[0], PATH_MAX, "%s", spec + strlen(dirs[k]));
            return 1;
        }
    if (strncmp(spec, "csv:", 4) != 0)
        return -1;
    char buf[2 * PATH_MAX];
    snprintf(buf, sizeof buf, "%s", spec + 4);
    char *opt = strstr(buf, ":shape=");
    if (opt)
        *opt = '\0';
    char *comma = strchr(buf, ',');
    if (comma)
        *comma = '\0';
    if (snprintf(paths[0], PATH_MAX, "%s", buf) >= PATH_MAX ||
        (comma && snprintf(paths[1], PATH_MAX, "%s", comma + 1) >= PATH_MAX))
        return -1;
    return comma ? 2 : 1;
}

/* p made absolute and free of "." and ".." by its letters alone (nothing
 * is looked up: a path outside the allowed directories is never touched,
 * so not even its existence shows). */
static bool lexical(const char *p, char *out, size_t cap)
{
    char buf[2 * PATH_MAX];
    if (p[0] == '/') {
        snprintf(buf, sizeof buf, "%s", p);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return false;
        if (snprintf(buf, sizeof buf, "%s/%s", cwd, p) >= (int)sizeof buf)
            return false;
    }
    size_t n = 0;
    out[0] = '\0';
    for (char *save = NULL, *part = strtok_r(buf, "/", &save); part;
         part = strtok_r(NULL, "/", &save)) {
        if (!strcmp(part, "."))
            continue;
        if (!strcmp(part, "..")) {
            char *slash = strrchr(out, '/');
            n = slash ? (size_t)(slash - out) : 0;
            out[n] = '\0';
            continue;
        }
        int k = snprintf(out + n, cap - n, "/%s", part);
        if (k < 0 || (size_t)k >= cap - n)
            return false;
        n += (size_t)k;
    }
    if (!n)
        snprintf(out, cap, "/");
    return true;
}

static bool under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return true;
    return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

/* Whether path lies under one of the allowed directories, by its letters
 * and, when it exists, once its symbolic links are followed. */
static bool allowed(const struct rt_worker_options *o, const char *path)
{
    char lex[PATH_MAX], real[PATH_MAX], dir[PATH_MAX];
    if (!lexical(path, lex, sizeof lex))
        return false;
    for (int i = 0; i < o->ndata_dirs; i++) {
        if (!realpath(o->data_dirs[i], dir) || !under(lex, dir))
            continue;
        return !realpath(lex, real) || under(real, dir);
    }
    return false;
}

int rt_data_guard(const struct rt_worker_options *o, const char *spec)
{
    char paths[MAX_PATHS][PATH_MAX];
    int n = spec_paths(spec, paths);
    if (n < 0)
        return rt_error(RT_ERR_CONFIG, "unknown data spec '%s'", spec);
    if (o->any_data)
        return RT_OK;
    for (int i = 0; i < n; i++)
        if (!allowed(o, paths[i]))
            return rt_error(RT_ERR_CONFIG,
                            "this worker opens no path a coordinator names unless it lies under "
                            "a --data-dir of its own command line: '%s' does not (%s); serve "
                            "the data (coord --serve-data) or start the worker with --data-dir",
                            paths[i], o->ndata_dirs ? "not under --data-dir" : "no --data-dir");
    return RT_OK;
}

bool rt_data_guard_mentions(const char *spec, const char *detail)
{
    char paths[MAX_PATHS][PATH_MAX];
    int n = spec_paths(spec, paths);
    if (n < 0)
        return false;
    if (n == 0) /* the default data: its directory is this worker's */
        return strstr(detail, "fashion-mnist") || strstr(detail, "ubyte");
    for (int i = 0; i < n; i++)
        if (paths[i][0] && strstr(detail, paths[i]))
            return true;
    return false;
}
