/* shards_index.c — the text index of a shard directory (shards.h): read
 * line by line, every value checked, errors as index:LINE. */
#include "shards-impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

void rt_shard_index_free(struct rt_shard_index *ix)
{
    free(ix->shards);
    memset(ix, 0, sizeof *ix);
}

/* A shard's name: a plain file name in the directory, never a path. */
static bool plain_name(const char *s)
{
    if (!*s || *s == '.' || strlen(s) >= RT_SHARD_NAME)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '-' || *s == '_'))
            return false;
    return true;
}

static int bad(const char *path, int line, const char *what, const char *text)
{
    return rt_error(RT_ERR_FORMAT, "%s:%d: %s (the line reads '%.80s')", path, line, what, text);
}

static int add_shard(struct rt_shard_index *ix, const char *path, int line, const char *text)
{
    char name[128];
    unsigned long count, crc;
    int used = 0;
    if (ix->nsets == 0)
        return bad(path, line, "a shard before any 'set' line", text);
    struct rt_shard_set *set = &ix->sets[ix->nsets - 1];
    if (sscanf(text, "shard %127s %lu %lx%n", name, &count, &crc, &used) != 3 ||
        text[used] != '\0' || count == 0 || count > UINT32_MAX || crc > UINT32_MAX)
        return bad(path, line, "expected 'shard NAME COUNT CRC32' (a count above 0, a hex CRC)",
                   text);
    if (!plain_name(name))
        return bad(path, line, "a shard name must be a plain file name (letters, digits, . - _)",
                   text);
    if (set->nshards == set->declared)
        return bad(path, line, "more shards than its 'set' line declares", text);
    if (ix->nshards == ix->cap) {
        int cap = ix->cap ? 2 * ix->cap : 16;
        struct rt_shard_entry *s = realloc(ix->shards, (size_t)cap * sizeof *s);
        if (!s)
            return rt_error(RT_ERR_NOMEM, "out of memory reading %s", path);
        ix->shards = s;
        ix->cap = cap;
    }
    struct rt_shard_entry *e = &ix->shards[ix->nshards++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->count = (uint32_t)count;
    e->crc = (uint32_t)crc;
    e->line = line;
    set->nshards++;
    set->sum += (long)count;
    return RT_OK;
}

static int add_set(struct rt_shard_index *ix, const char *path, int line, const char *text)
{
    char name[64];
    long n;
    int ns, used = 0;
    if (sscanf(text, "set %63s %ld %d%n", name, &n, &ns, &used) != 3 || text[used] != '\0' ||
        n <= 0 || n > (long)UINT32_MAX || ns <= 0 || ns > RT_SHARDS_MAX || ns > n)
        return bad(path, line, "expected 'set NAME RECORDS SHARDS' (1 <= SHARDS <= RECORDS, at "
                               "most 4096 shards)", text);
    if (ix->nsets == RT_SHARD_SETS)
        return bad(path, line, "too many sets (train and test at most)", text);
    for (int i = 0; i < ix->nsets; i++)
        if (!strcmp(ix->sets[i].name, name))
            return bad(path, line, "a set listed twice", text);
    struct rt_shard_set *s = &ix->sets[ix->nsets++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->n = n;
    s->declared = ns;
    s->first = ix->nshards;
    s->line = line;
    return RT_OK;
}

/* The lines before the sets: fixed keys in a fixed order. */
static int header_line(struct rt_shard_index *ix, const char *path, int line, const char *text)
{
    int used = 0, v = 0;
    char word[64];
    switch (line) {
    case 1:
        if (sscanf(text, "ragtag-shards %d%n", &v, &used) != 1 || text[used])
            return bad(path, line, "not a ragtag shard index (expected 'ragtag-shards 1')", text);
        if (v != (int)RT_SHARD_VERSION)
            return bad(path, line, "index version not read by this ragtag (it reads 1)", text);
        return RT_OK;
    case 2:
        if (sscanf(text, "shape %d %d %d%n", &ix->c, &ix->h, &ix->w, &used) != 3 || text[used] ||
            ix->c <= 0 || ix->h <= 0 || ix->w <= 0 || ix->c > 65536 || ix->h > 65536 ||
            ix->w > 65536 || (long long)ix->c * ix->h * ix->w > (1LL << 28))
            return bad(path, line, "expected 'shape C H W' (positive, at most 2^28 values)", text);
        return RT_OK;
    case 3:
        if (sscanf(text, "label %63s%n", word, &used) != 1 || text[used] || strcmp(word, "int32"))
            return bad(path, line, "expected 'label int32' (the only label type)", text);
        return RT_OK;
    case 4:
        if (sscanf(text, "classes %d%n", &ix->classes, &used) != 1 || text[used] ||
            ix->classes < 1 || ix->classes > 1 << 20)
            return bad(path, line, "expected 'classes K' (1 <= K <= 2^20)", text);
        return RT_OK;
    case 5:
    case 6: {
        float *dst = line == 5 ? &ix->mean : &ix->std;
        const char *key = line == 5 ? "mean" : "std";
        size_t k = strlen(key);
        char *end = NULL;
        errno = 0;
        if (strncmp(text, key, k) || text[k] != ' ')
            return bad(path, line, line == 5 ? "expected 'mean HEXFLOAT'" : "expected 'std HEXFLOAT'",
                       text);
        *dst = strtof(text + k + 1, &end);
        if (errno || end == text + k + 1 || *end || !isfinite(*dst) ||
            (line == 6 && !(*dst > 0.0f)))
            return bad(path, line, "not a finite number (std must be above 0)", text);
        return RT_OK;
    }
    }
    return RT_OK;
}

/* Each set's shards add up to its records, and their count to its line. */
static int check_sets(const struct rt_shard_index *ix, const char *path)
{
    if (ix->nsets == 0)
        return rt_error(RT_ERR_FORMAT, "%s: no 'set' line: the index lists no data", path);
    for (int i = 0; i < ix->nsets; i++) {
        const struct rt_shard_set *s = &ix->sets[i];
        if (s->nshards != s->declared || s->sum != s->n)
            return rt_error(RT_ERR_FORMAT,
                            "%s:%d: set %s declares %ld records in %d shards, but its shard "
                            "lines add up to %ld records in %d shards",
                            path, s->line, s->name, s->n, s->declared, s->sum, s->nshards);
    }
    for (int i = 0; i < ix->nshards; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(ix->shards[i].name, ix->shards[j].name))
                return rt_error(RT_ERR_FORMAT, "%s:%d: shard %s is listed twice (line %d)", path,
                                ix->shards[i].line, ix->shards[i].name, ix->shards[j].line);
    return RT_OK;
}

int rt_shard_index_read(const char *dir, struct rt_shard_index *ix)
{
    memset(ix, 0, sizeof *ix);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, RT_SHARDS_INDEX);
    FILE *f = fopen(path, "r");
    if (!f)
        return rt_error(errno == ENOENT ? RT_ERR_NOTFOUND : RT_ERR_IO,
                        "%s: %s (a shard directory is made by 'ragtag pack')", path,
                        strerror(errno));
    char text[512];
    int line = 0, rc = RT_OK;
    while (rc == RT_OK && fgets(text, sizeof text, f)) {
        line++;
        size_t k = strlen(text);
        if (k == sizeof text - 1 && text[k - 1] != '\n') {
            rc = bad(path, line, "line too long", text);
            break;
        }
        while (k && (text[k - 1] == '\n' || text[k - 1] == '\r'))
            text[--k] = '\0';
        if (line <= 6)
            rc = header_line(ix, path, line, text);
        else if (!strncmp(text, "set ", 4))
            rc = add_set(ix, path, line, text);
        else if (!strncmp(text, "shard ", 6))
            rc = add_shard(ix, path, line, text);
        else
            rc = bad(path, line, "expected a 'set' or 'shard' line", text);
    }
    if (rc == RT_OK && ferror(f))
        rc = rt_error(RT_ERR_IO, "%s: read error after line %d", path, line);
    fclose(f);
    if (rc == RT_OK && line < 6)
        rc = rt_error(RT_ERR_FORMAT, "%s: truncated after line %d (expected the lines "
                                     "ragtag-shards, shape, label, classes, mean, std, then sets)",
                      path, line);
    if (rc == RT_OK)
        rc = check_sets(ix, path);
    if (rc < 0)
        rt_shard_index_free(ix);
    return rc;
}

const struct rt_shard_set *rt_shard_index_set(const struct rt_shard_index *ix, const char *name)
{
    for (int i = 0; i < ix->nsets; i++)
        if (!strcmp(ix->sets[i].name, name))
            return &ix->sets[i];
    return NULL;
}
