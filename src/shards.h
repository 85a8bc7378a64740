/* shards.h — a data set on disk in shards, read a record at a time, so a
 * set larger than memory trains (docs/shards.md).
 *
 * A directory holds an `index` (text) and shard files. A shard is a
 * 32-byte header, then fixed-size records, all little-endian:
 *
 *   offset  0  magic "RTSHARD\n" (8 bytes)
 *           8  u32 version (1)
 *          12  u32 c, 16 u32 h, 20 u32 w   record shape (channels, rows, columns)
 *          24  u32 label type (1: int32)
 *          28  u32 records in this shard
 *          32  records: i32 label | c*h*w pixel bytes | u32 CRC-32 of label and pixels
 *
 * Pixels are bytes, as ragtag keeps them in memory (samples.c). The index
 * names the shards in order, with their record counts and each shard's
 * CRC-32 (of its header and its records' labels and pixels, without the
 * records' own CRCs: a CRC-32 over data followed by its own CRC is the
 * same for any data, so it would not tell two shards apart), and the
 * statistics the set is normalised with:
 *
 *   ragtag-shards 1
 *   shape C H W
 *   label int32
 *   classes K
 *   mean HEXFLOAT
 *   std HEXFLOAT
 *   set train N SHARDS
 *   shard train-00000.rts COUNT CRC32
 *   ...
 *   set test N SHARDS          (optional)
 *   shard test-00000.rts COUNT CRC32
 *
 * What is checked, and when: opening a set checks the index line by line
 * and every shard's size and header against it (magic, version, shape,
 * label type, count); every record read checks its own CRC-32 and its
 * label, so a corrupt byte is reported with the shard's name and the
 * record's offset the first time it is read, at the cost of a CRC-32 of
 * a few hundred bytes. The CRC-32 of a whole shard is checked by
 * rt_shards_verify (`ragtag pack --verify DIR`), which reads everything. */
#ifndef RT_SHARDS_H
#define RT_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RT_SHARD_MAGIC "RTSHARD\n"
#define RT_SHARD_VERSION 1u
#define RT_SHARD_HEADER 32
#define RT_SHARD_LABEL_INT32 1u
#define RT_SHARDS_INDEX "index"
#define RT_SHARDS_MAX 4096 /* shards per set: each is an open file while training */

/* One set (train or test) of a shard directory, open for reading. Reads
 * are pread: any number of threads may read at once. */
typedef struct rt_shards rt_shards;

struct rt_shards_info {
    int c, h, w, classes;
    float mean, std; /* of the packed training set, bit for bit */
    long n;          /* records of the set */
    int nshards;
};

/* Open set `set` of directory dir. RT_OK with *out NULL when the index has
 * no such set; an error naming the file (and line or offset) when the
 * index or a shard is malformed, truncated or inconsistent. */
int rt_shards_open(const char *dir, const char *set, rt_shards **out);
/* Closes when the last holder closes: rt_shards_ref adds a holder. */
void rt_shards_close(rt_shards **s);
rt_shards *rt_shards_ref(rt_shards *s);
const struct rt_shards_info *rt_shards_info(const rt_shards *s);
/* Record rec (0 <= rec < n) read into buf (rt_shards_record_size bytes)
 * and checked: *pixels points at its c*h*w bytes in buf. */
size_t rt_shards_record_size(const rt_shards *s);
int rt_shards_read(const rt_shards *s, long rec, uint8_t *buf, const uint8_t **pixels,
                   int32_t *label);
/* Ask the kernel to start reading record rec (posix_fadvise WILLNEED), so
 * that the reads of a batch from disk overlap instead of waiting in turn. */
void rt_shards_prefetch(const rt_shards *s, long rec);
/* Records read so far, by every holder and thread. */
long rt_shards_reads(const rt_shards *s);
/* Every byte of every shard: each file's CRC-32 against the index and
 * every record's own. *bytes gets what was read. */
int rt_shards_verify(const rt_shards *s, uint64_t *bytes);
/* The sizes of set `set` from the index alone (for memory estimates):
 * records and bytes of files; 0 records when the set is absent. */
int rt_shards_peek(const char *dir, const char *set, long *n, uint64_t *file_bytes);
/* The files of a shard directory, index first: names (under dir) into
 * names[i] (64 bytes each) up to max; *n gets the count. */
int rt_shards_files(const char *dir, char (*names)[64], int max, int *n);

/* Writing: sets one after the other, records in order, then the index.
 * Shards are written to temporary names and renamed when complete, the
 * index last: a directory with an index holds a whole set. */
typedef struct rt_shards_writer rt_shards_writer;
rt_shards_writer *rt_shards_writer_new(const char *dir, int c, int h, int w, int classes);
/* Begin set `set` of n records in nshards shards (as equal as can be). */
int rt_shards_writer_set(rt_shards_writer *wr, const char *set, long n, int nshards);
int rt_shards_writer_add(rt_shards_writer *wr, const uint8_t *pixels, int32_t label);
/* Every set complete: write the index (mean and std normalise the data). */
int rt_shards_writer_finish(rt_shards_writer *wr, float mean, float std);
/* Removes the shards of an unfinished writer. */
void rt_shards_writer_destroy(rt_shards_writer **wr);

#endif
