/* shards-impl.h — what the shard reader and writer share: the index as
 * parsed, and the little-endian header. Not for the rest of the core. */
#ifndef RT_SHARDS_IMPL_H
#define RT_SHARDS_IMPL_H

#include "shards.h"

#define RT_SHARD_NAME 64
#define RT_SHARD_SETS 4

struct rt_shard_entry {
    char name[RT_SHARD_NAME];
    uint32_t count, crc;
    int line; /* in the index */
};

struct rt_shard_set {
    char name[64];
    long n, sum;
    int declared, nshards, first; /* shards[first .. first + nshards - 1] */
    int line;
};

struct rt_shard_index {
    int c, h, w, classes;
    float mean, std;
    int nsets;
    struct rt_shard_set sets[RT_SHARD_SETS];
    int nshards, cap;
    struct rt_shard_entry *shards;
};

int rt_shard_index_read(const char *dir, struct rt_shard_index *ix);
void rt_shard_index_free(struct rt_shard_index *ix);
const struct rt_shard_set *rt_shard_index_set(const struct rt_shard_index *ix, const char *name);

static inline void rt_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t rt_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
