/* ckpt_dir.c — the checkpoint directory of a run: made when missing, and
 * cleared of the temporary files of writes that a killed process left
 * behind (safetensors.c writes DIR/.NAME.tmp.PID.N, then renames it). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "status.h"

/* The writer's pid of a name ".BASE.tmp.PID.N", or 0 when it is not one. */
static long temp_writer(const char *name)
{
    const char *t = name[0] == '.' ? strstr(name, ".tmp.") : NULL;
    if (!t)
        return 0;
    char *end;
    long pid = strtol(t + 5, &end, 10);
    if (pid <= 0 || *end != '.')
        return 0;
    strtoul(end + 1, &end, 10);
    return *end == '\0' && end[-1] != '.' ? pid : 0;
}

/* Whether the process that wrote it is gone (then nobody will rename it). */
static bool writer_gone(long pid)
{
    return pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int rt_checkpoint_dir_open(const char *dir, int *removed)
{
    *removed = 0;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return rt_error(RT_ERR_IO, "cannot create checkpoint directory %s: %s", dir,
                        strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return rt_error(RT_ERR_IO, "checkpoint directory %s exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d)
        return rt_error(RT_ERR_IO, "cannot read checkpoint directory %s: %s", dir,
                        strerror(errno));
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        long pid = temp_writer(e->d_name);
        if (!pid || !writer_gone(pid))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            (*removed)++;
    }
    closedir(d);
    return RT_OK;
}
