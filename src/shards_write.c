/* shards_write.c — writing a shard directory (shards.h): records streamed
 * into shards of equal size, each written under a temporary name, synced
 * and renamed when complete; the index last, the same way. A writer holds
 * one record's buffer and one open file: any size of set can be packed by
 * a producer that streams its records. */
#include "shards-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "status.h"

#define WRITER_TAG 0x53485257u /* "SHRW" */

struct rt_shards_writer {
    uint32_t tag;
    char dir[4096];
    struct rt_shard_index ix; /* what is written so far */
    size_t per, rec;
    uint8_t *buf;
    /* the set being written */
    long set_left;   /* records still to come */
    long shard_left; /* records still to come in the open shard */
    int shards_left;
    FILE *f;
    char tmp[4200];
    uLong crc;
};

rt_shards_writer *rt_shards_writer_new(const char *dir, int c, int h, int w, int classes)
{
    if (c <= 0 || h <= 0 || w <= 0 || classes <= 0 || (long long)c * h * w > (1LL << 28)) {
        rt_error(RT_ERR_SHAPE, "cannot pack records of %dx%dx%d with %d classes", c, h, w, classes);
        return NULL;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        rt_error(RT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
        return NULL;
    }
    char index[4200];
    snprintf(index, sizeof index, "%s/%s", dir, RT_SHARDS_INDEX);
    /* an old index would vouch for shards this writer replaces */
    if (unlink(index) != 0 && errno != ENOENT) {
        rt_error(RT_ERR_IO, "%s: cannot remove the old index: %s", index, strerror(errno));
        return NULL;
    }
    rt_shards_writer *wr = calloc(1, sizeof *wr);
    if (!wr || snprintf(wr->dir, sizeof wr->dir, "%s", dir) >= (int)sizeof wr->dir) {
        free(wr);
        rt_error(RT_ERR_NOMEM, "cannot start writing shards in %s", dir);
        return NULL;
    }
    wr->ix.c = c;
    wr->ix.h = h;
    wr->ix.w = w;
    wr->ix.classes = classes;
    wr->per = (size_t)c * h * w;
    wr->rec = 4 + wr->per + 4;
    if (!(wr->buf = malloc(wr->rec))) {
        free(wr);
        rt_error(RT_ERR_NOMEM, "out of memory for a record of %zu bytes", (size_t)c * h * w);
        return NULL;
    }
    wr->tag = WRITER_TAG;
    return wr;
}

/* Flush, sync and close a temporary file, then rename it to `final`. */
static int close_synced(FILE **fp, const char *tmp, const char *final)
{
    FILE *f = *fp;
    *fp = NULL;
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, final) != 0)
        return rt_error(RT_ERR_IO, "%s: cannot write: %s", final, strerror(errno));
    return RT_OK;
}

static int shard_begin(rt_shards_writer *wr)
{
    struct rt_shard_set *set = &wr->ix.sets[wr->ix.nsets - 1];
    long count = wr->set_left / wr->shards_left; /* the first shards get the remainder */
    if (wr->set_left % wr->shards_left)
        count++;
    if (wr->ix.nshards == wr->ix.cap) {
        int cap = wr->ix.cap ? 2 * wr->ix.cap : 16;
        struct rt_shard_entry *s = realloc(wr->ix.shards, (size_t)cap * sizeof *s);
        if (!s)
            return rt_error(RT_ERR_NOMEM, "out of memory writing shards");
        wr->ix.shards = s;
        wr->ix.cap = cap;
    }
    struct rt_shard_entry *e = &wr->ix.shards[wr->ix.nshards++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%.40s-%05d.rts", set->name, set->nshards);
    e->count = (uint32_t)count;
    set->nshards++;
    snprintf(wr->tmp, sizeof wr->tmp, "%s/%s.tmp", wr->dir, e->name);
    if (!(wr->f = fopen(wr->tmp, "wb")))
        return rt_error(RT_ERR_IO, "%s: cannot create: %s", wr->tmp, strerror(errno));
    uint8_t h[RT_SHARD_HEADER];
    memcpy(h, RT_SHARD_MAGIC, 8);
    const uint32_t v[6] = {RT_SHARD_VERSION, (uint32_t)wr->ix.c, (uint32_t)wr->ix.h,
                           (uint32_t)wr->ix.w, RT_SHARD_LABEL_INT32, (uint32_t)count};
    for (int i = 0; i < 6; i++)
        rt_put_u32(h + 8 + 4 * i, v[i]);
    if (fwrite(h, 1, sizeof h, wr->f) != sizeof h)
        return rt_error(RT_ERR_IO, "%s: cannot write: %s", wr->tmp, strerror(errno));
    wr->crc = crc32(crc32(0L, Z_NULL, 0), h, sizeof h);
    wr->shard_left = count;
    return RT_OK;
}

static int shard_end(rt_shards_writer *wr)
{
    struct rt_shard_entry *e = &wr->ix.shards[wr->ix.nshards - 1];
    e->crc = (uint32_t)wr->crc;
    char final[4200];
    snprintf(final, sizeof final, "%s/%s", wr->dir, e->name);
    wr->shards_left--;
    return close_synced(&wr->f, wr->tmp, final);
}

int rt_shards_writer_set(rt_shards_writer *wr, const char *set, long n, int nshards)
{
    RT_ASSERT(wr && wr->tag == WRITER_TAG && !wr->f && wr->set_left == 0);
    if (n <= 0 || n > (long)UINT32_MAX)
        return rt_error(RT_ERR_ARG, "set %s: %ld records (1 to 2^32-1 can be packed)", set, n);
    if (nshards <= 0 || nshards > RT_SHARDS_MAX)
        return rt_error(RT_ERR_ARG, "%d shards: 1 to %d can be written", nshards, RT_SHARDS_MAX);
    if (nshards > n)
        nshards = (int)n; /* never an empty shard */
    if (wr->ix.nsets == RT_SHARD_SETS || strlen(set) >= 40 || !set[0])
        return rt_error(RT_ERR_ARG, "cannot add a set named '%s'", set);
    struct rt_shard_set *s = &wr->ix.sets[wr->ix.nsets++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", set);
    s->n = n;
    s->declared = nshards;
    s->first = wr->ix.nshards;
    wr->set_left = n;
    wr->shards_left = nshards;
    return RT_OK;
}

int rt_shards_writer_add(rt_shards_writer *wr, const uint8_t *pixels, int32_t label)
{
    RT_ASSERT(wr && wr->tag == WRITER_TAG && wr->set_left > 0);
    if (label < 0 || label >= wr->ix.classes)
        return rt_error(RT_ERR_ARG, "label %d outside 0..%d", label, wr->ix.classes - 1);
    if (!wr->f)
        RT_TRY(shard_begin(wr));
    rt_put_u32(wr->buf, (uint32_t)label);
    memcpy(wr->buf + 4, pixels, wr->per);
    rt_put_u32(wr->buf + 4 + wr->per,
               (uint32_t)crc32(crc32(0L, Z_NULL, 0), wr->buf, (uInt)(4 + wr->per)));
    if (fwrite(wr->buf, 1, wr->rec, wr->f) != wr->rec)
        return rt_error(RT_ERR_IO, "%s: cannot write: %s", wr->tmp, strerror(errno));
    wr->crc = crc32(wr->crc, wr->buf, (uInt)(4 + wr->per)); /* shards.h: not the record's CRC */
    wr->set_left--;
    if (--wr->shard_left == 0)
        RT_TRY(shard_end(wr));
    return RT_OK;
}

int rt_shards_writer_finish(rt_shards_writer *wr, float mean, float std)
{
    RT_ASSERT(wr && wr->tag == WRITER_TAG);
    if (wr->set_left || wr->f || wr->ix.nsets == 0)
        return rt_error(RT_ERR_ARG, "the shards are not complete: %ld records still to come",
                        wr->set_left);
    if (!(std > 0.0f))
        return rt_error(RT_ERR_ARG, "a standard deviation of %g cannot normalise", (double)std);
    char tmp[4200], final[4200];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", wr->dir, RT_SHARDS_INDEX);
    snprintf(final, sizeof final, "%s/%s", wr->dir, RT_SHARDS_INDEX);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return rt_error(RT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    const struct rt_shard_index *ix = &wr->ix;
    /* %a: the statistics travel bit for bit */
    fprintf(f, "ragtag-shards %u\nshape %d %d %d\nlabel int32\nclasses %d\nmean %a\nstd %a\n",
            RT_SHARD_VERSION, ix->c, ix->h, ix->w, ix->classes, (double)mean, (double)std);
    for (int i = 0; i < ix->nsets; i++) {
        const struct rt_shard_set *s = &ix->sets[i];
        fprintf(f, "set %s %ld %d\n", s->name, s->n, s->nshards);
        for (int j = 0; j < s->nshards; j++) {
            const struct rt_shard_entry *e = &ix->shards[s->first + j];
            fprintf(f, "shard %s %u %08x\n", e->name, e->count, e->crc);
        }
    }
    return close_synced(&f, tmp, final);
}

void rt_shards_writer_destroy(rt_shards_writer **wp)
{
    if (!wp || !*wp)
        return;
    rt_shards_writer *wr = *wp;
    RT_ASSERT(wr->tag == WRITER_TAG);
    if (wr->f) {
        fclose(wr->f);
        unlink(wr->tmp);
    }
    rt_shard_index_free(&wr->ix);
    free(wr->buf);
    wr->tag = 0;
    free(wr);
    *wp = NULL;
}
