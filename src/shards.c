/* shards.c — reading a set of shards (shards.h): opened with every header
 * checked against the index, then a record at a time with pread, each
 * record's CRC-32 checked as it is read. Nothing of the set is held in
 * memory but one descriptor and a few numbers per shard. */
#include "shards-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "status.h"

#define SHARDS_TAG 0x53485244u /* "SHRD" */
#define SHARDS_DEAD 0xdeadbeefu

struct shard {
    char path[4200];
    int fd;
    uint32_t count, crc;
    long first; /* the set's index of its first record */
};

struct rt_shards {
    uint32_t tag;
    int refs; /* sets sharing these files (train and its validation part) */
    atomic_long reads; /* records read: what a worker's share cost it */
    struct rt_shards_info info;
    size_t per, rec; /* pixel bytes, record bytes */
    struct shard *s;
};

static size_t record_bytes(size_t per) { return 4 + per + 4; }

/* The header of shard sh against the index: each field named with its
 * offset when it differs. */
static int check_header(const struct shard *sh, const struct rt_shard_index *ix, size_t rec)
{
    uint8_t h[RT_SHARD_HEADER];
    struct stat st;
    if (fstat(sh->fd, &st) != 0)
        return rt_error(RT_ERR_IO, "%s: %s", sh->path, strerror(errno));
    uint64_t want = RT_SHARD_HEADER + (uint64_t)sh->count * rec;
    ssize_t got = st.st_size >= RT_SHARD_HEADER ? pread(sh->fd, h, sizeof h, 0) : 0;
    if (got != (ssize_t)sizeof h)
        return rt_error(RT_ERR_FORMAT, "%s: truncated at offset %lld: a shard starts with a "
                                       "%d-byte header", sh->path, (long long)st.st_size,
                        RT_SHARD_HEADER);
    if (memcmp(h, RT_SHARD_MAGIC, 8) != 0)
        return rt_error(RT_ERR_FORMAT, "%s: offset 0: not a ragtag shard (bad magic)", sh->path);
    uint32_t v = rt_get_u32(h + 8);
    if (v != RT_SHARD_VERSION)
        return rt_error(RT_ERR_FORMAT, "%s: offset 8: shard version %u, this ragtag reads %u",
                        sh->path, v, RT_SHARD_VERSION);
    const uint32_t shape[3] = {(uint32_t)ix->c, (uint32_t)ix->h, (uint32_t)ix->w};
    for (int i = 0; i < 3; i++)
        if (rt_get_u32(h + 12 + 4 * i) != shape[i])
            return rt_error(RT_ERR_FORMAT, "%s: offset %d: record shape %ux%ux%u, the index says "
                                           "%dx%dx%d", sh->path, 12 + 4 * i, rt_get_u32(h + 12),
                            rt_get_u32(h + 16), rt_get_u32(h + 20), ix->c, ix->h, ix->w);
    if (rt_get_u32(h + 24) != RT_SHARD_LABEL_INT32)
        return rt_error(RT_ERR_FORMAT, "%s: offset 24: label type %u (only 1, int32, exists)",
                        sh->path, rt_get_u32(h + 24));
    if (rt_get_u32(h + 28) != sh->count)
        return rt_error(RT_ERR_FORMAT, "%s: offset 28: %u records, the index says %u", sh->path,
                        rt_get_u32(h + 28), sh->count);
    if ((uint64_t)st.st_size != want)
        return rt_error(RT_ERR_FORMAT, "%s: %s at offset %lld: %u records of %zu bytes end at "
                                       "offset %llu", sh->path,
                        (uint64_t)st.st_size < want ? "truncated" : "trailing bytes",
                        (long long)((uint64_t)st.st_size < want ? st.st_size : (off_t)want),
                        sh->count, rec, (unsigned long long)want);
    return RT_OK;
}

static int open_shards(const char *dir, const struct rt_shard_index *ix,
                       const struct rt_shard_set *set, rt_shards *s)
{
    long first = 0;
    for (int i = 0; i < set->nshards; i++) {
        const struct rt_shard_entry *e = &ix->shards[set->first + i];
        struct shard *sh = &s->s[i];
        snprintf(sh->path, sizeof sh->path, "%s/%s", dir, e->name);
        sh->count = e->count;
        sh->crc = e->crc;
        sh->first = first;
        first += e->count;
        sh->fd = open(sh->path, O_RDONLY | O_CLOEXEC);
        if (sh->fd < 0)
            return rt_error(errno == ENOENT ? RT_ERR_NOTFOUND : RT_ERR_IO,
                            "%s: %s (listed at %s/%s:%d)", sh->path, strerror(errno), dir,
                            RT_SHARDS_INDEX, e->line);
        RT_TRY(check_header(sh, ix, s->rec));
    }
    return RT_OK;
}

int rt_shards_open(const char *dir, const char *set, rt_shards **out)
{
    *out = NULL;
    struct rt_shard_index ix;
    RT_TRY(rt_shard_index_read(dir, &ix));
    const struct rt_shard_set *st = rt_shard_index_set(&ix, set);
    if (!st) {
        rt_shard_index_free(&ix);
        return RT_OK;
    }
    rt_shards *s = calloc(1, sizeof *s);
    if (s)
        s->s = calloc((size_t)st->nshards, sizeof *s->s);
    if (!s || !s->s) {
        free(s);
        rt_shard_index_free(&ix);
        return rt_error(RT_ERR_NOMEM, "out of memory opening %s", dir);
    }
    s->tag = SHARDS_TAG;
    s->refs = 1;
    s->info = (struct rt_shards_info){.c = ix.c, .h = ix.h, .w = ix.w, .classes = ix.classes,
                                      .mean = ix.mean, .std = ix.std, .n = st->n,
                                      .nshards = st->nshards};
    s->per = (size_t)ix.c * ix.h * ix.w;
    s->rec = record_bytes(s->per);
    for (int i = 0; i < st->nshards; i++)
        s->s[i].fd = -1;
    int rc = open_shards(dir, &ix, st, s);
    rt_shard_index_free(&ix);
    if (rc < 0) {
        rt_shards_close(&s);
        return rc;
    }
    *out = s;
    return RT_OK;
}

void rt_shards_close(rt_shards **sp)
{
    if (!sp || !*sp)
        return;
    rt_shards *s = *sp;
    RT_ASSERT(s->tag == SHARDS_TAG && s->refs > 0);
    *sp = NULL;
    if (--s->refs > 0)
        return;
    for (int i = 0; i < s->info.nshards; i++)
        if (s->s[i].fd >= 0)
            close(s->s[i].fd);
    free(s->s);
    s->tag = SHARDS_DEAD;
    free(s);
}

long rt_shards_reads(const rt_shards *s)
{
    RT_ASSERT(s && s->tag == SHARDS_TAG);
    return atomic_load_explicit(&((rt_shards *)s)->reads, memory_order_relaxed);
}

rt_shards *rt_shards_ref(rt_shards *s)
{
    RT_ASSERT(s && s->tag == SHARDS_TAG && s->refs > 0);
    s->refs++;
    return s;
}

const struct rt_shards_info *rt_shards_info(const rt_shards *s)
{
    RT_ASSERT(s && s->tag == SHARDS_TAG);
    return &s->info;
}

/* The shard holding record rec: the last whose first record is <= rec. */
static const struct shard *find(const rt_shards *s, long rec)
{
    int lo = 0, hi = s->info.nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->s[mid].first <= rec)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &s->s[lo];
}

/* One record in buf (rec bytes): its CRC and its label checked. */
static int check_record(const rt_shards *s, const struct shard *sh, long j, const uint8_t *buf,
                        int32_t *label)
{
    unsigned long off = RT_SHARD_HEADER + (unsigned long)j * s->rec;
    uint32_t want = rt_get_u32(buf + 4 + s->per);
    uint32_t got = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, (uInt)(4 + s->per));
    if (got != want)
        return rt_error(RT_ERR_FORMAT, "%s: record %ld at offset %lu: checksum mismatch (stored "
                                       "%08x, computed %08x): the shard is corrupt",
                        sh->path, j, off, want, got);
    int32_t y = (int32_t)rt_get_u32(buf);
    if (y < 0 || y >= s->info.classes)
        return rt_error(RT_ERR_FORMAT, "%s: record %ld at offset %lu: label %d outside 0..%d",
                        sh->path, j, off, y, s->info.classes - 1);
    *label = y;
    return RT_OK;
}

size_t rt_shards_record_size(const rt_shards *s)
{
    RT_ASSERT(s && s->tag == SHARDS_TAG);
    return s->rec;
}

void rt_shards_prefetch(const rt_shards *s, long rec)
{
    RT_ASSERT(s && s->tag == SHARDS_TAG && rec >= 0 && rec < s->info.n);
    const struct shard *sh = find(s, rec);
    off_t off = RT_SHARD_HEADER + (off_t)(rec - sh->first) * (off_t)s->rec;
    (void)posix_fadvise(sh->fd, off, (off_t)s->rec, POSIX_FADV_WILLNEED);
}

int rt_shards_read(const rt_shards *s, long rec, uint8_t *buf, const uint8_t **pixels,
                   int32_t *label)
{
    RT_ASSERT(s && s->tag == SHARDS_TAG && rec >= 0 && rec < s->info.n);
    const struct shard *sh = find(s, rec);
    long j = rec - sh->first;
    off_t off = RT_SHARD_HEADER + (off_t)j * (off_t)s->rec;
    ssize_t got = pread(sh->fd, buf, s->rec, off);
    atomic_fetch_add_explicit(&((rt_shards *)s)->reads, 1, memory_order_relaxed);
    if (got != (ssize_t)s->rec)
        return rt_error(got < 0 ? RT_ERR_IO : RT_ERR_FORMAT, "%s: record %ld at offset %lld: %s",
                        sh->path, j, (long long)off,
                        got < 0 ? strerror(errno) : "truncated (the file shrank after it was opened)");
    RT_TRY(check_record(s, sh, j, buf, label));
    *pixels = buf + 4;
    return RT_OK;
}

/* One shard, start to end: the file's CRC and each record's. */
static int verify_shard(const rt_shards *s, const struct shard *sh, uint8_t *buf, size_t cap,
                        uint64_t *bytes)
{
    size_t per_read = cap / s->rec;
    uint8_t head[RT_SHARD_HEADER];
    if (pread(sh->fd, head, sizeof head, 0) != (ssize_t)sizeof head)
        return rt_error(RT_ERR_IO, "%s: cannot read its header", sh->path);
    uLong crc = crc32(crc32(0L, Z_NULL, 0), head, sizeof head);
    for (long j = 0; j < (long)sh->count;) {
        long k = (long)sh->count - j < (long)per_read ? (long)sh->count - j : (long)per_read;
        off_t off = RT_SHARD_HEADER + (off_t)j * (off_t)s->rec;
        ssize_t got = pread(sh->fd, buf, (size_t)k * s->rec, off);
        if (got != (ssize_t)((size_t)k * s->rec))
            return rt_error(RT_ERR_FORMAT, "%s: truncated at offset %lld", sh->path,
                            (long long)(off + (got > 0 ? got : 0)));
        for (long i = 0; i < k; i++) {
            int32_t y;
            const uint8_t *r = buf + (size_t)i * s->rec;
            RT_TRY(check_record(s, sh, j + i, r, &y));
            crc = crc32(crc, r, (uInt)(4 + s->per));
        }
        j += k;
    }
    if ((uint32_t)crc != sh->crc)
        return rt_error(RT_ERR_FORMAT, "%s: the file's CRC-32 is %08x, the index says %08x",
                        sh->path, (uint32_t)crc, sh->crc);
    *bytes += RT_SHARD_HEADER + (uint64_t)sh->count * s->rec;
    return RT_OK;
}

int rt_shards_verify(const rt_shards *s, uint64_t *bytes)
{
    RT_ASSERT(s && s->tag == SHARDS_TAG);
    *bytes = 0;
    size_t cap = s->rec > ((size_t)1 << 20) ? s->rec : (size_t)1 << 20;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return rt_error(RT_ERR_NOMEM, "out of memory verifying shards");
    int rc = RT_OK;
    for (int i = 0; i < s->info.nshards && rc == RT_OK; i++)
        rc = verify_shard(s, &s->s[i], buf, cap, bytes);
    free(buf);
    return rc;
}

int rt_shards_peek(const char *dir, const char *set, long *n, uint64_t *file_bytes)
{
    struct rt_shard_index ix;
    RT_TRY(rt_shard_index_read(dir, &ix));
    const struct rt_shard_set *st = rt_shard_index_set(&ix, set);
    *n = st ? st->n : 0;
    size_t rec = record_bytes((size_t)ix.c * ix.h * ix.w);
    *file_bytes = st ? (uint64_t)st->nshards * RT_SHARD_HEADER + (uint64_t)st->n * rec : 0;
    rt_shard_index_free(&ix);
    return RT_OK;
}

int rt_shards_files(const char *dir, char (*names)[64], int max, int *n)
{
    struct rt_shard_index ix;
    RT_TRY(rt_shard_index_read(dir, &ix));
    int rc = RT_OK;
    if (ix.nshards + 1 > max)
        rc = rt_error(RT_ERR_CONFIG, "%s holds %d shards, and a data manifest (coord "
                                     "--serve-data) lists at most %d: pack with fewer --shards, "
                                     "or give the workers a copy and --data-dir",
                      dir, ix.nshards, max - 1);
    for (int i = 0; rc == RT_OK && i <= ix.nshards; i++)
        snprintf(names[i], 64, "%s", i ? ix.shards[i - 1].name : RT_SHARDS_INDEX);
    *n = rc == RT_OK ? ix.nshards + 1 : 0;
    rt_shard_index_free(&ix);
    return rc;
}
