/* wire.c — MessagePack control messages: writer, structural scan, envelope
 * and field checks, run ids, the rate-limited log of dropped messages. */
#include "config.h"

#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "status.h"

#define WIRE_MAX_OBJECTS 65536 /* per message: bounds msgpack-c's zone */
#define WIRE_MAX_MAP 256       /* entries per map (duplicate check is quadratic) */

/* ---- writer --------------------------------------------------------------------- */

static int writer_sink(void *data, const char *buf, size_t len)
{
    rt_wire_writer *w = data;
    if (w->oom)
        return -1;
    if (w->len + len > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + len)
            cap *= 2;
        char *p = realloc(w->data, cap);
        if (!p) {
            w->oom = true;
            return -1;
        }
        w->data = p;
        w->cap = cap;
    }
    memcpy(w->data + w->len, buf, len);
    w->len += len;
    return 0;
}

void rt_wire_writer_init(rt_wire_writer *w)
{
    memset(w, 0, sizeof *w);
    msgpack_packer_init(&w->pk, w, writer_sink);
}

void rt_wire_writer_free(rt_wire_writer *w)
{
    free(w->data);
    memset(w, 0, sizeof *w);
}

void rt_wire_raw_str(rt_wire_writer *w, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(&w->pk, n);
    msgpack_pack_str_body(&w->pk, s, n);
}

void rt_wire_raw_uint(rt_wire_writer *w, uint64_t v) { msgpack_pack_uint64(&w->pk, v); }
void rt_wire_raw_f64(rt_wire_writer *w, double v) { msgpack_pack_double(&w->pk, v); }
void rt_wire_raw_map(rt_wire_writer *w, int n) { msgpack_pack_map(&w->pk, (size_t)n); }
void rt_wire_raw_array(rt_wire_writer *w, int n) { msgpack_pack_array(&w->pk, (size_t)n); }

static void key(rt_wire_writer *w, const char *k)
{
    w->written++;
    rt_wire_raw_str(w, k);
}

void rt_wire_begin(rt_wire_writer *w, const char *run, const char *type, int nfields)
{
    RT_ASSERT(nfields >= 0);
    w->len = 0;
    w->oom = false;
    w->declared = nfields;
    w->written = 0;
    msgpack_pack_map(&w->pk, (size_t)nfields + 3);
    rt_wire_raw_str(w, "v");
    msgpack_pack_uint64(&w->pk, RT_WIRE_VERSION);
    rt_wire_raw_str(w, "run");
    rt_wire_raw_str(w, run ? run : "");
    rt_wire_raw_str(w, "type");
    rt_wire_raw_str(w, type);
}

void rt_wire_put_uint(rt_wire_writer *w, const char *k, uint64_t v)
{
    key(w, k);
    msgpack_pack_uint64(&w->pk, v);
}

void rt_wire_put_int(rt_wire_writer *w, const char *k, int64_t v)
{
    key(w, k);
    msgpack_pack_int64(&w->pk, v);
}

void rt_wire_put_f64(rt_wire_writer *w, const char *k, double v)
{
    key(w, k);
    msgpack_pack_double(&w->pk, v);
}

void rt_wire_put_bool(rt_wire_writer *w, const char *k, bool v)
{
    key(w, k);
    if (v)
        msgpack_pack_true(&w->pk);
    else
        msgpack_pack_false(&w->pk);
}

void rt_wire_put_str(rt_wire_writer *w, const char *k, const char *s)
{
    key(w, k);
    rt_wire_raw_str(w, s);
}

void rt_wire_put_bin(rt_wire_writer *w, const char *k, const void *p, size_t n)
{
    key(w, k);
    msgpack_pack_bin(&w->pk, n);
    msgpack_pack_bin_body(&w->pk, p, n);
}

void rt_wire_put_key(rt_wire_writer *w, const char *k) { key(w, k); }

void rt_wire_raw_int(rt_wire_writer *w, int64_t v) { msgpack_pack_int64(&w->pk, v); }

void rt_wire_put_map(rt_wire_writer *w, const char *k, int n)
{
    key(w, k);
    msgpack_pack_map(&w->pk, (size_t)n);
}

void rt_wire_put_array(rt_wire_writer *w, const char *k, int n)
{
    key(w, k);
    msgpack_pack_array(&w->pk, (size_t)n);
}

int rt_wire_end(rt_wire_writer *w)
{
    RT_ASSERT(w->written == w->declared);
    if (w->oom)
        return rt_error(RT_ERR_NOMEM, "out of memory encoding a message");
    return RT_OK;
}

/* ---- structural scan ------------------------------------------------------------ */

static uint64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* One pass with an explicit stack of "values still owed" per level. A
 * container may not promise more values than bytes remain (every value
 * takes at least one byte), so nothing downstream allocates more than the
 * message could describe. */
int rt_wire_scan(const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t pos = 0;
    uint64_t owed[RT_WIRE_MAX_DEPTH + 1];
    int depth = 0;
    long objects = 0;
    owed[0] = 1;
    while (depth >= 0) {
        if (owed[depth] == 0) {
            depth--;
            continue;
        }
        owed[depth]--;
        if (pos >= len)
            return rt_error(RT_ERR_FORMAT, "truncated at byte %zu", pos);
        if (++objects > WIRE_MAX_OBJECTS)
            return rt_error(RT_ERR_FORMAT, "more than %d values", WIRE_MAX_OBJECTS);
        unsigned b = p[pos++];
        uint64_t skip = 0, count = 0;
        bool container = false, map = false;
        int hdr = 0;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixint, nil, bool */
        } else if (b >= 0x80 && b <= 0x8f) {
            container = map = true;
            count = b & 0x0f;
        } else if (b >= 0x90 && b <= 0x9f) {
            container = true;
            count = b & 0x0f;
        } else if (b >= 0xa0 && b <= 0xbf) {
            skip = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4: case 0xd9: hdr = 1; break;        /* bin8 / str8 */
            case 0xc5: case 0xda: hdr = 2; break;        /* bin16 / str16 */
            case 0xc6: case 0xdb: hdr = 4; break;        /* bin32 / str32 */
            case 0xca: skip = 4; break;                  /* float32 */
            case 0xcb: skip = 8; break;                  /* float64 */
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xdc: container = true; hdr = 2; break; /* array16 */
            case 0xdd: container = true; hdr = 4; break; /* array32 */
            case 0xde: container = map = true; hdr = 2; break;
            case 0xdf: container = map = true; hdr = 4; break;
            default:
                return rt_error(RT_ERR_FORMAT, "byte %zu: type 0x%02x is not accepted "
                                               "(extension or reserved)", pos - 1, b);
            }
            if (hdr) {
                if (len - pos < (size_t)hdr)
                    return rt_error(RT_ERR_FORMAT, "truncated length at byte %zu", pos);
                uint64_t v = be(p + pos, hdr);
                pos += hdr;
                if (container)
                    count = v;
                else
                    skip = v;
            }
        }
        if (container) {
            uint64_t values = map ? 2 * count : count;
            if (map && count > WIRE_MAX_MAP)
                return rt_error(RT_ERR_FORMAT, "map of %llu entries (at most %d)",
                                (unsigned long long)count, WIRE_MAX_MAP);
            if (values > len - pos)
                return rt_error(RT_ERR_FORMAT, "container of %llu values in %zu remaining bytes",
                                (unsigned long long)values, len - pos);
            if (values) {
                if (depth + 1 > RT_WIRE_MAX_DEPTH)
                    return rt_error(RT_ERR_FORMAT, "nested deeper than %d", RT_WIRE_MAX_DEPTH);
                owed[++depth] = values;
            }
        } else {
            if (skip > len - pos)
                return rt_error(RT_ERR_FORMAT, "truncated value at byte %zu", pos);
            pos += skip;
        }
    }
    if (pos != len)
        return rt_error(RT_ERR_FORMAT, "%zu trailing bytes after the message", len - pos);
    return RT_OK;
}

/* ---- decoded messages -------------------------------------------------------------- */

void rt_wire_msg_init(rt_wire_msg *m)
{
    memset(m, 0, sizeof *m);
    if (!msgpack_zone_init(&m->zone, MSGPACK_ZONE_CHUNK_SIZE))
        RT_ASSERT(!"msgpack_zone_init");
}

void rt_wire_msg_free(rt_wire_msg *m) { msgpack_zone_destroy(&m->zone); }

static bool key_is(const msgpack_object *k, const char *s)
{
    size_t n = strlen(s);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, s, n) == 0;
}

/* Every map key a string, none twice. */
static int check_map(const msgpack_object *o)
{
    const msgpack_object_map *mp = &o->via.map;
    for (uint32_t i = 0; i < mp->size; i++) {
        const msgpack_object *k = &mp->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR)
            return rt_error(RT_ERR_FORMAT, "a map key is not a string");
        for (uint32_t j = 0; j < i; j++) {
            const msgpack_object *kj = &mp->ptr[j].key;
            if (kj->via.str.size == k->via.str.size &&
                memcmp(kj->via.str.ptr, k->via.str.ptr, k->via.str.size) == 0)
                return rt_error(RT_ERR_FORMAT, "key '%.*s' appears twice",
                                (int)(k->via.str.size > 40 ? 40 : k->via.str.size),
                                k->via.str.ptr);
        }
    }
    return RT_OK;
}

static const msgpack_object *find(rt_wire_map m, const char *key)
{
    if (!m || m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (key_is(&m->via.map.ptr[i].key, key))
            return &m->via.map.ptr[i].val;
    return NULL;
}

bool rt_wire_has(rt_wire_map m, const char *key) { return find(m, key) != NULL; }

static int missing(const char *key) { return rt_error(RT_ERR_FORMAT, "field '%s' is missing", key); }

static int mistyped(const char *key, const char *want)
{
    return rt_error(RT_ERR_FORMAT, "field '%s' is not %s", key, want);
}

int rt_wire_get_uint(rt_wire_map m, const char *key, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return mistyped(key, "a non-negative integer");
    if (o->via.u64 < lo || o->via.u64 > hi)
        return rt_error(RT_ERR_FORMAT, "field '%s' = %llu is outside [%llu, %llu]", key,
                        (unsigned long long)o->via.u64, (unsigned long long)lo,
                        (unsigned long long)hi);
    *out = o->via.u64;
    return RT_OK;
}

int rt_wire_get_int(rt_wire_map m, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return rt_error(RT_ERR_FORMAT, "field '%s' is too large", key);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return mistyped(key, "an integer");
    }
    if (v < lo || v > hi)
        return rt_error(RT_ERR_FORMAT, "field '%s' = %lld is outside [%lld, %lld]", key,
                        (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return RT_OK;
}

static int get_number(rt_wire_map m, const char *key, double lo, double hi, bool nan_ok,
                      double *out)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    double v;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        v = o->via.f64;
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        v = (double)o->via.u64;
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        v = (double)o->via.i64;
        break;
    default:
        return mistyped(key, "a number");
    }
    if (isnan(v) && nan_ok) {
        *out = v;
        return RT_OK;
    }
    if (!isfinite(v) || v < lo || v > hi)
        return rt_error(RT_ERR_FORMAT, "field '%s' = %g is outside [%g, %g]", key, v, lo, hi);
    *out = v;
    return RT_OK;
}

int rt_wire_get_f64(rt_wire_map m, const char *key, double lo, double hi, double *out)
{
    return get_number(m, key, lo, hi, false, out);
}

int rt_wire_get_f64_or_nan(rt_wire_map m, const char *key, double lo, double hi, double *out)
{
    return get_number(m, key, lo, hi, true, out);
}

int rt_wire_get_bool(rt_wire_map m, const char *key, bool *out)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return mistyped(key, "a boolean");
    *out = o->via.boolean;
    return RT_OK;
}

static int copy_str(const msgpack_object *o, const char *what, size_t min, char *out, size_t cap)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return mistyped(what, "a string");
    size_t n = o->via.str.size;
    if (n >= cap || n < min)
        return rt_error(RT_ERR_FORMAT, "field '%s' has %zu bytes (accepted: %zu to %zu)", what, n,
                        min, cap - 1);
    if (memchr(o->via.str.ptr, '\0', n))
        return rt_error(RT_ERR_FORMAT, "field '%s' contains a NUL byte", what);
    memcpy(out, o->via.str.ptr, n);
    out[n] = '\0';
    return RT_OK;
}

int rt_wire_get_str(rt_wire_map m, const char *key, size_t min, char *out, size_t cap)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    return copy_str(o, key, min, out, cap);
}

int rt_wire_get_bin(rt_wire_map m, const char *key, size_t max, const void **p, size_t *n)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    if (o->type == MSGPACK_OBJECT_BIN) {
        *p = o->via.bin.ptr;
        *n = o->via.bin.size;
    } else if (o->type == MSGPACK_OBJECT_STR) {
        *p = o->via.str.ptr;
        *n = o->via.str.size;
    } else {
        return mistyped(key, "binary data");
    }
    if (*n > max)
        return rt_error(RT_ERR_FORMAT, "field '%s' has %zu bytes (at most %zu)", key, *n, max);
    return RT_OK;
}

int rt_wire_get_map(rt_wire_map m, const char *key, rt_wire_map *out)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    if (o->type != MSGPACK_OBJECT_MAP)
        return mistyped(key, "a map");
    RT_TRY(check_map(o));
    *out = o;
    return RT_OK;
}

int rt_wire_get_array(rt_wire_map m, const char *key, size_t max, const msgpack_object **items,
                      size_t *n)
{
    const msgpack_object *o = find(m, key);
    if (!o)
        return missing(key);
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return mistyped(key, "an array");
    if (o->via.array.size > max)
        return rt_error(RT_ERR_FORMAT, "field '%s' has %u entries (at most %zu)", key,
                        o->via.array.size, max);
    *items = o->via.array.ptr;
    *n = o->via.array.size;
    return RT_OK;
}

int rt_wire_item_map(const msgpack_object *items, size_t i, const char *what, rt_wire_map *out)
{
    if (items[i].type != MSGPACK_OBJECT_MAP)
        return rt_error(RT_ERR_FORMAT, "entry %zu of '%s' is not a map", i, what);
    RT_TRY(check_map(&items[i]));
    *out = &items[i];
    return RT_OK;
}

int rt_wire_item_str(const msgpack_object *items, size_t i, const char *what, char *out,
                     size_t cap)
{
    return copy_str(&items[i], what, 0, out, cap);
}

int rt_wire_item_uint(const msgpack_object *items, size_t i, const char *what, uint64_t hi,
                      uint64_t *out)
{
    if (items[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER || items[i].via.u64 > hi)
        return rt_error(RT_ERR_FORMAT, "entry %zu of '%s' is not an integer in [0, %llu]", i,
                        what, (unsigned long long)hi);
    *out = items[i].via.u64;
    return RT_OK;
}

int rt_wire_parse(rt_wire_msg *m, const void *data, size_t len, const char *run,
                  bool allow_empty_run)
{
    if (len == 0)
        return rt_error(RT_ERR_FORMAT, "empty message");
    if (len > RT_WIRE_MAX_CONTROL)
        return rt_error(RT_ERR_FORMAT, "control message of %zu bytes (at most %u)", len,
                        RT_WIRE_MAX_CONTROL);
    RT_TRY(rt_wire_scan(data, len));
    msgpack_zone_clear(&m->zone);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack(data, len, &off, &m->zone, &m->root);
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len)
        return rt_error(RT_ERR_FORMAT, "not a MessagePack value (msgpack-c: %d)", (int)ur);
    if (m->root.type != MSGPACK_OBJECT_MAP)
        return rt_error(RT_ERR_FORMAT, "not a MessagePack map");
    RT_TRY(check_map(&m->root));
    uint64_t v;
    const msgpack_object *vo = find(&m->root, "v");
    if (!vo)
        return missing("v");
    if (vo->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return mistyped("v", "a protocol version");
    v = vo->via.u64;
    if (v != RT_WIRE_VERSION)
        return rt_error(RT_ERR_FORMAT, "protocol version %llu (this ragtag speaks %d)",
                        (unsigned long long)v, RT_WIRE_VERSION);
    m->version = v;
    RT_TRY(rt_wire_get_str(&m->root, "type", 1, m->type, sizeof m->type));
    RT_TRY(rt_wire_get_str(&m->root, "run", 0, m->run, sizeof m->run));
    if (m->run[0] && !rt_wire_run_id_valid(m->run))
        return rt_error(RT_ERR_FORMAT, "run id '%s' is not %d hex digits", m->run, RT_RUN_ID_LEN);
    if (!m->run[0] && !allow_empty_run)
        return rt_error(RT_ERR_FORMAT, "'%s' message without a run id", m->type);
    if (run && m->run[0] && strcmp(run, m->run) != 0)
        return rt_error(RT_ERR_FORMAT, "'%s' message of a foreign run %.8s… (ours: %.8s…)",
                        m->type, m->run, run);
    return RT_OK;
}

/* ---- run ids ------------------------------------------------------------------------ */

void rt_wire_new_run_id(char out[RT_RUN_ID_LEN + 1])
{
    unsigned char r[RT_RUN_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t k = getrandom(r + got, sizeof r - got, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            /* No getrandom: time and pid still make runs distinct. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
            for (size_t i = got; i < sizeof r; i++) {
                z = z * 6364136223846793005ull + 1442695040888963407ull;
                r[i] = (unsigned char)(z >> 56);
            }
            break;
        }
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

bool rt_wire_run_id_valid(const char *s)
{
    size_t n = strlen(s);
    if (n != RT_RUN_ID_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* ---- dropped messages ------------------------------------------------------------------ */

#define DROP_BURST 5
#define DROP_WINDOW 10.0

void rt_wire_droplog_init(rt_wire_droplog *d, const char *who)
{
    memset(d, 0, sizeof *d);
    d->who = who;
}

void rt_wire_drop(rt_wire_droplog *d, const char *peer, const char *why)
{
    double now = rt_now();
    d->total++;
    if (now - d->window_start > DROP_WINDOW) {
        if (d->suppressed)
            fprintf(stderr, "ragtag: [%s] dropped %ld more bad messages in the last %.0f s\n",
                    d->who, d->suppressed, now - d->window_start);
        d->window_start = now;
        d->in_window = 0;
        d->suppressed = 0;
    }
    if (d->in_window < DROP_BURST) {
        d->in_window++;
        fprintf(stderr, "ragtag: [%s] dropped a message from %s: %s\n", d->who,
                peer && peer[0] ? peer : "an unknown peer", why);
    } else {
        d->suppressed++;
    }
}

void rt_wire_droplog_flush(rt_wire_droplog *d)
{
    if (d->suppressed)
        fprintf(stderr, "ragtag: [%s] dropped %ld more bad messages (%ld in all)\n", d->who,
                d->suppressed, d->total);
    d->suppressed = 0;
}
