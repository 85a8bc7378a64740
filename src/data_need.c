/* data_need.c — the memory a data spec will take once opened, told from
 * the files' headers and sizes without reading their pixels, so that a
 * worker in a small container can say it will not fit before it reads
 * 55 MB of images and is killed for it. */
#include "data.h"
#include "shards.h"
#include "status.h"

#include <string.h>
#include <sys/stat.h>

#define CIFAR_RECORD 3073 /* label + 3 x 32 x 32 bytes */

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0 ? (uint64_t)st.st_size : 0;
}

/* Samples and bytes per sample (pixels stored + the int32 label) of one
 * file; 0 samples for a label file. */
static int file_need(const struct rt_data_files *f, int i, uint64_t *n, uint64_t *per)
{
    const char *name = f->name[i], *path = f->path[i];
    *n = 0;
    *per = 0;
    if (!strcmp(f->kind, "cifar10")) {
        *n = file_size(path) / CIFAR_RECORD;
        *per = CIFAR_RECORD - 1 + sizeof(int32_t);
        return RT_OK;
    }
    if (!strcmp(f->kind, "csv")) {
        /* at least "v," for a pixel: half the file's bytes bound the pixels
         * kept as bytes (a CSV of fractions is kept as floats: 4x that) */
        *n = 1;
        *per = file_size(path) / 2;
        return RT_OK;
    }
    if (!strstr(name, "images"))
        return RT_OK;
    uint32_t d[3];
    RT_TRY(rt_idx_image_dims(path, d));
    *n = d[0];
    *per = (uint64_t)d[1] * d[2] + sizeof(int32_t);
    return RT_OK;
}

/* shards:DIR: the records stay on disk; memory holds the record maps of
 * a split (4 bytes a sample, train and validation) and nothing else that
 * grows with the set (the loader's permutation is the trainer's). */
static int shards_need(const char *dir, float val_frac, long limit, uint64_t *peak,
                       uint64_t *kept)
{
    long n;
    uint64_t bytes;
    RT_TRY(rt_shards_peek(dir, "train", &n, &bytes));
    if (limit > 0 && limit < n)
        n = limit;
    uint64_t maps = val_frac > 0.0f ? (uint64_t)n * sizeof(uint32_t) : 0;
    *peak = maps + (uint64_t)n; /* the split's marks, a byte a sample */
    *kept = maps;
    return RT_OK;
}

int rt_data_need(const char *spec, float val_frac, long limit, uint64_t *peak, uint64_t *kept)
{
    if (!strncmp(spec, "shards:", 7))
        return shards_need(spec + 7, val_frac, limit, peak, kept);
    struct rt_data_files f;
    RT_TRY(rt_data_files(spec, &f));
    uint64_t train_n = 0, train_per = 0, test = 0;
    for (int i = 0; i < f.n; i++) {
        uint64_t n, per;
        RT_TRY(file_need(&f, i, &n, &per));
        bool is_test = strstr(f.name[i], "t10k") || strstr(f.name[i], "test");
        if (is_test) {
            test += n * per;
        } else if (n) {
            train_n += n;
            train_per = per;
        }
    }
    /* CSV: train_n counts files, train_per their bound */
    uint64_t full = train_n * train_per;
    uint64_t n = limit > 0 && (uint64_t)limit < train_n ? (uint64_t)limit : train_n;
    uint64_t used = strcmp(f.kind, "csv") ? n * train_per : full;
    uint64_t val = (uint64_t)((double)val_frac * (double)used + 0.5);
    /* read whole, then cut to --limit in place; the split copies only the
     * validation part out (dataset.c) */
    *peak = full + test + val;
    *kept = used + test;
    return RT_OK;
}
