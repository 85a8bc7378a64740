/* wire.h — ragtag's wire format.
 *
 * Every control message is ONE MessagePack map whose first three entries
 * are the envelope:
 *     "v"    protocol version (RT_WIRE_VERSION)
 *     "run"  the run id (32 hex digits; "" only in a worker's first hello)
 *     "type" what the message is ("hello", "job", "chunk", ...)
 * followed by the type's own fields. Tensor payloads never go into
 * MessagePack: they follow as separate raw little-endian frames.
 *
 * Decoding is two passes. rt_wire_scan() walks the raw bytes first and
 * refuses anything msgpack-c would turn into a large allocation (a 5-byte
 * "array of 4 billion" header), nesting deeper than RT_WIRE_MAX_DEPTH,
 * extension types and trailing bytes; only then msgpack-c builds objects
 * in a reused zone. Getters check type and range of every field they read;
 * a missing, mistyped or out-of-range field is RT_ERR_FORMAT naming it.
 * Unknown extra keys are allowed (a newer peer may add fields) but must be
 * well-formed; duplicate keys are refused.
 *
 * Nothing here ever aborts on bad input: callers log the detail through an
 * rt_wire_droplog (rate-limited) and drop the message. */
#ifndef RT_WIRE_H
#define RT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define RT_WIRE_VERSION 1
#define RT_WIRE_MAX_DEPTH 6
#define RT_RUN_ID_LEN 32            /* hex digits */
#define RT_WIRE_MAX_CONTROL (1u << 20) /* a control map (without tensor frames) */

/* ---- writing ---------------------------------------------------------------- */

/* A growing buffer packed by msgpack-c. Reuse one writer: rt_wire_begin
 * resets it without freeing, so a step loop never allocates. */
typedef struct rt_wire_writer {
    char *data;
    size_t len, cap;
    bool oom;
    int declared, written; /* fields promised by begin / written since */
    msgpack_packer pk;
} rt_wire_writer;

void rt_wire_writer_init(rt_wire_writer *w);
void rt_wire_writer_free(rt_wire_writer *w);

/* Start a map of the envelope plus `nfields` fields of the caller's. */
void rt_wire_begin(rt_wire_writer *w, const char *run, const char *type, int nfields);
void rt_wire_put_uint(rt_wire_writer *w, const char *key, uint64_t v);
void rt_wire_put_int(rt_wire_writer *w, const char *key, int64_t v);
void rt_wire_put_f64(rt_wire_writer *w, const char *key, double v);
void rt_wire_put_bool(rt_wire_writer *w, const char *key, bool v);
void rt_wire_put_str(rt_wire_writer *w, const char *key, const char *s);
void rt_wire_put_bin(rt_wire_writer *w, const char *key, const void *p, size_t n);
/* Nested containers: put the key, then exactly `n` values / pairs with the
 * raw packers below (each nested map entry counts as one field written only
 * at the top level, i.e. the key call counts, its contents do not). */
/* A key whose value the caller then writes with the raw packers. */
void rt_wire_put_key(rt_wire_writer *w, const char *key);
void rt_wire_put_map(rt_wire_writer *w, const char *key, int n);
void rt_wire_put_array(rt_wire_writer *w, const char *key, int n);
void rt_wire_raw_map(rt_wire_writer *w, int n);
void rt_wire_raw_array(rt_wire_writer *w, int n);
void rt_wire_raw_str(rt_wire_writer *w, const char *s);
void rt_wire_raw_uint(rt_wire_writer *w, uint64_t v);
void rt_wire_raw_f64(rt_wire_writer *w, double v);
void rt_wire_raw_int(rt_wire_writer *w, int64_t v);
/* Finish: RT_OK, or RT_ERR_NOMEM when a write failed. Asserts that exactly
 * the declared number of fields was written (a bug otherwise). */
int rt_wire_end(rt_wire_writer *w);

/* ---- reading ---------------------------------------------------------------- */

/* Structural check of raw bytes (see above). RT_OK or RT_ERR_FORMAT. */
int rt_wire_scan(const void *data, size_t len);

/* A decoded message. Keep one per socket and reuse it: the zone is cleared,
 * not freed, between messages. */
typedef struct rt_wire_msg {
    msgpack_zone zone;
    msgpack_object root;
    char type[32];
    char run[RT_RUN_ID_LEN + 1];
    uint64_t version;
} rt_wire_msg;

void rt_wire_msg_init(rt_wire_msg *m);
void rt_wire_msg_free(rt_wire_msg *m);

/* Decode and check the envelope: version must be RT_WIRE_VERSION; the run
 * must equal `run` unless `run` is NULL (accept any) — "" in the message
 * is only accepted when `allow_empty_run`. RT_ERR_FORMAT with a detail. */
int rt_wire_parse(rt_wire_msg *m, const void *data, size_t len, const char *run,
                  bool allow_empty_run);

/* A map inside a message (the root, or a nested map). */
typedef const msgpack_object *rt_wire_map;
static inline rt_wire_map rt_wire_root(const rt_wire_msg *m) { return &m->root; }

bool rt_wire_has(rt_wire_map m, const char *key);
int rt_wire_get_uint(rt_wire_map m, const char *key, uint64_t lo, uint64_t hi, uint64_t *out);
int rt_wire_get_int(rt_wire_map m, const char *key, int64_t lo, int64_t hi, int64_t *out);
/* Any finite number within [lo, hi] (integers are accepted). */
int rt_wire_get_f64(rt_wire_map m, const char *key, double lo, double hi, double *out);
/* Like get_f64 but NaN is allowed (metrics that do not exist yet). */
int rt_wire_get_f64_or_nan(rt_wire_map m, const char *key, double lo, double hi, double *out);
int rt_wire_get_bool(rt_wire_map m, const char *key, bool *out);
/* A string of at most cap-1 bytes without NUL, copied and terminated.
 * `min` is the shortest accepted length. */
int rt_wire_get_str(rt_wire_map m, const char *key, size_t min, char *out, size_t cap);
/* Binary or string data up to `max` bytes, borrowed from the message. */
int rt_wire_get_bin(rt_wire_map m, const char *key, size_t max, const void **p, size_t *n);
int rt_wire_get_map(rt_wire_map m, const char *key, rt_wire_map *out);
/* An array of at most `max` entries. */
int rt_wire_get_array(rt_wire_map m, const char *key, size_t max, const msgpack_object **items,
                      size_t *n);
/* Element i of an array as a map / a string. */
int rt_wire_item_map(const msgpack_object *items, size_t i, const char *what, rt_wire_map *out);
int rt_wire_item_str(const msgpack_object *items, size_t i, const char *what, char *out,
                     size_t cap);
int rt_wire_item_uint(const msgpack_object *items, size_t i, const char *what, uint64_t hi,
                      uint64_t *out);

/* ---- run ids ---------------------------------------------------------------- */

/* 32 random hex digits (getrandom). */
void rt_wire_new_run_id(char out[RT_RUN_ID_LEN + 1]);
bool rt_wire_run_id_valid(const char *s);

/* ---- logging dropped messages ----------------------------------------------- */

/* At most a burst of lines per interval; the rest are counted and summed
 * up in the next line, so a flood of garbage cannot flood the log. */
typedef struct rt_wire_droplog {
    const char *who;       /* "coord", "worker 2", ... */
    double window_start;
    int in_window;
    long suppressed;
    long total;
} rt_wire_droplog;

void rt_wire_droplog_init(rt_wire_droplog *d, const char *who);
/* Log "ragtag: [who] dropped a message from PEER: WHY". */
void rt_wire_drop(rt_wire_droplog *d, const char *peer, const char *why);
/* At the end: one line for what the rate limit kept quiet, if anything. */
void rt_wire_droplog_flush(rt_wire_droplog *d);

#endif
