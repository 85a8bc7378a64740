/* datashare.h — shipping a data set from the coordinator to workers
 * (`ragtag coord --serve-data`), cached on the worker by content hash.
 *
 * The coordinator lists the files its data spec reads (rt_data_files) with
 * their sizes and SHA-256 and sends that manifest in the job. A worker
 * looks each hash up in its cache (CACHE/data/SHA256), fetches only what it
 * lacks, checks size and hash of what arrives before keeping it, and opens
 * the set through a directory of links named as the reader expects
 * (CACHE/sets/ID/train-images-idx3-ubyte.gz -> ../../data/SHA256). A second
 * run with the same data transfers nothing. */
#ifndef RT_DATASHARE_H
#define RT_DATASHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "data.h"
#include "wire.h"

#define RT_DATA_MAX_FILE_BYTES ((uint64_t)16 << 30)
#define RT_DATA_CHUNK ((size_t)1 << 20) /* bytes per "file" message */

struct rt_data_manifest {
    struct rt_data_files files; /* kind, names, (coordinator's) paths, spec suffix */
    uint64_t size[RT_DATA_MAX_FILES];
    char sha[RT_DATA_MAX_FILES][65];
};

/* Coordinator: list and hash the files of `spec`. */
int rt_manifest_build(const char *spec, struct rt_data_manifest *m);
/* As the message field "data" (one field). */
void rt_manifest_put(rt_wire_writer *w, const struct rt_data_manifest *m);
/* Worker: decode and check (names, kinds, hashes, sizes, suffix). */
int rt_manifest_get(rt_wire_map root, struct rt_data_manifest *m);

/* The cache directory: `dir` when given, else $RAGTAG_CACHE_DIR,
 * $XDG_CACHE_HOME/ragtag, ~/.cache/ragtag or /tmp/ragtag-cache-UID;
 * created when missing. */
int rt_cache_dir(const char *dir, char *out, size_t cap);
bool rt_cache_has(const char *cache, const char *sha, uint64_t size);

/* A file arriving in order, chunk by chunk, into a temporary file. */
typedef struct rt_cache_file rt_cache_file;
rt_cache_file *rt_cache_file_begin(const char *cache, const char *sha, uint64_t size);
int rt_cache_file_write(rt_cache_file *f, uint64_t off, const void *p, size_t n);
bool rt_cache_file_complete(const rt_cache_file *f);
/* Check size and SHA-256, then move it in place. Destroys f either way. */
int rt_cache_file_finish(rt_cache_file **f);
void rt_cache_file_abort(rt_cache_file **f);

/* A spec opening the cached files under their reader names. */
int rt_cache_spec(const char *cache, const struct rt_data_manifest *m, char *spec, size_t cap);

#endif
