/* cifar.c — CIFAR-10's binary version: files of 3073-byte records, one
 * label byte (0..9) then 3072 pixel bytes, 1024 red, 1024 green, 1024 blue,
 * each 32x32 row-major: exactly NCHW, so pixels copy straight across. */
#include "data.h"
#include "status.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SIDE 32
#define PIXELS (3 * SIDE * SIDE)
#define RECORD (1 + PIXELS)
#define CLASSES 10
#define STAGE_RECORDS 512 /* 1.5 MiB reads */

static int open_error(const char *path)
{
    if (errno == ENOENT)
        return rt_error(RT_ERR_NOTFOUND, "%s: no such file", path);
    return rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
}

/* The number of records in `path`, checked against its size: a file that is
 * not a whole number of records was cut short (or is not CIFAR-10). */
static int count_records(const char *path, long long *records)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return open_error(path);
    struct stat st;
    int rc = RT_OK;
    if (fstat(fileno(f), &st) != 0)
        rc = rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = rt_error(RT_ERR_IO, "%s: not a regular file", path);
    else if (st.st_size == 0)
        rc = rt_error(RT_ERR_FORMAT, "%s: empty file (truncated at offset 0)", path);
    else if (st.st_size % RECORD != 0)
        rc = rt_error(RT_ERR_FORMAT,
                      "%s: truncated at offset %lld: record %lld has %lld of its %d bytes",
                      path, (long long)st.st_size, (long long)(st.st_size / RECORD) + 1,
                      (long long)(st.st_size % RECORD), RECORD);
    *records = (long long)st.st_size / RECORD;
    fclose(f);
    return rc;
}

/* Read `records` records of `path` into ds from sample `first`. */
static int read_file(const char *path, long long records, rt_dataset *ds, long long first,
                     unsigned char *stage)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return open_error(path);
    int rc = RT_OK;
    long long done = 0;
    while (done < records) {
        size_t want = records - done < STAGE_RECORDS ? (size_t)(records - done) : STAGE_RECORDS;
        size_t got = fread(stage, 1, want * RECORD, f);
        if (got != want * RECORD) {
            long long off = done * RECORD + (long long)got;
            if (ferror(f))
                rc = rt_error(RT_ERR_IO, "%s: read error at offset %lld: %s", path, off,
                              strerror(errno));
            else /* the file shrank since we measured it */
                rc = rt_error(RT_ERR_FORMAT, "%s: truncated at offset %lld, in record %lld", path,
                              off, off / RECORD + 1);
            goto out;
        }
        for (size_t r = 0; r < want; r++) {
            const unsigned char *rec = stage + r * RECORD;
            long long i = first + done + (long long)r;
            if (rec[0] >= CLASSES) {
                rc = rt_error(RT_ERR_FORMAT,
                              "%s: label %u at offset %lld is not a CIFAR-10 class (0..9)", path,
                              rec[0], (done + (long long)r) * RECORD);
                goto out;
            }
            ds->y[i] = rec[0];
            memcpy(ds->u8 + (size_t)i * PIXELS, rec + 1, PIXELS);
        }
        done += (long long)want;
    }
out:
    fclose(f);
    return rc;
}

int rt_dataset_read_cifar10(const char *const *paths, int npaths, rt_dataset **out)
{
    RT_ASSERT(paths && npaths > 0 && out);
    *out = NULL;
    long long total = 0;
    long long *counts = calloc((size_t)npaths, sizeof *counts);
    unsigned char *stage = malloc((size_t)STAGE_RECORDS * RECORD);
    rt_dataset *ds = NULL;
    int rc;
    if (!counts || !stage) {
        rc = rt_error(RT_ERR_NOMEM, "out of memory reading %s", paths[0]);
        goto out;
    }
    /* Sizes first: one allocation for all files, and a cut file fails
     * before seconds of reading. */
    for (int i = 0; i < npaths; i++) {
        if ((rc = count_records(paths[i], &counts[i])) < 0)
            goto out;
        total += counts[i];
    }
    if (total > INT_MAX) {
        rc = rt_error(RT_ERR_FORMAT, "%s...: %lld records are more than ragtag holds", paths[0],
                      total);
        goto out;
    }
    if (!(ds = rt_dataset_new_u8((int)total, 3, SIDE, SIDE))) {
        rc = RT_ERR_NOMEM;
        goto out;
    }
    long long first = 0;
    for (int i = 0; i < npaths; i++) {
        if ((rc = read_file(paths[i], counts[i], ds, first, stage)) < 0)
            goto out;
        first += counts[i];
    }
    ds->classes = CLASSES;
    snprintf(ds->name, sizeof ds->name, "%s", paths[0]);
    *out = ds;
    ds = NULL;
    rc = RT_OK;
out:
    rt_dataset_destroy(&ds);
    free(stage);
    free(counts);
    return rc;
}
