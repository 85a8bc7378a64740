/* safetensors.c — the safetensors file format (F32 tensors only).
 *
 * Layout (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian header length N, N bytes of UTF-8 JSON, then the data. The
 * JSON maps each tensor name to {"dtype", "shape", "data_offsets": [b, e]}
 * (byte offsets into the data) and may hold "__metadata__", a map of strings.
 *
 * The writer pads the header with spaces so the data starts 8-byte aligned,
 * which lets numpy, PyTorch and our reader use the floats in place.
 *
 * The reader trusts nothing: a checkpoint may be truncated by a full disk,
 * copied half-way or come from another program, and a bad file must end in
 * an RT_ERR_FORMAT that names the file and the problem, never in a crash or
 * in weights read from the wrong bytes. It enforces the spec's rules: the
 * header fits the file, the JSON is valid and has no duplicate keys, every
 * shape matches its byte range, and the ranges tile the data exactly (no
 * overlaps, no holes, no trailing bytes). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "checkpoint.h"
#include "status.h"

#define ST_TAG 0x53414654u  /* "SAFT" */
#define ST_DEAD 0xdeadbeefu /* poisoned on destroy */

/* The format's own limit on the header, which also bounds what a hostile
 * header length can make us parse. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

struct st_entry {
    char *name;
    int ndim;
    int64_t dims[4];
    uint64_t begin, end; /* byte range in the data section */
    const float *data;
};

struct rt_st_file {
    uint32_t tag;
    unsigned char *raw; /* the whole file */
    float *packed;      /* an aligned, native-endian copy of the data, when needed */
    int nt;
    struct st_entry *t; /* in header order */
    int nmeta;
    char **keys, **values;
};

/* ---- helpers -------------------------------------------------------------- */

static bool host_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void swap4(void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++, b += 4) {
        unsigned char t0 = b[0], t1 = b[1];
        b[0] = b[3];
        b[1] = b[2];
        b[2] = t1;
        b[3] = t0;
    }
}

/* RT_ERR_FORMAT with "path: what is wrong". */
static int bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rt_error(RT_ERR_FORMAT, "%s: %s", path, msg);
}

static int io_error(const char *path, const char *what, int err)
{
    return rt_error(err == ENOENT ? RT_ERR_NOTFOUND : RT_ERR_IO, "%s: %s: %s", path, what,
                    strerror(err));
}

/* ---- writing ----------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Floats go out little-endian whatever the host; a big-endian host swaps
 * through a small bounce buffer rather than touching the caller's data. */
static int write_floats(int fd, const float *x, size_t n)
{
    if (host_little_endian())
        return write_all(fd, x, n * sizeof(float));
    float chunk[1024];
    while (n > 0) {
        size_t k = n < 1024 ? n : 1024;
        memcpy(chunk, x, k * sizeof(float));
        swap4(chunk, k);
        if (write_all(fd, chunk, k * sizeof(float)) < 0)
            return -1;
        x += k;
        n -= k;
    }
    return 0;
}

static int64_t tensor_count(const struct rt_st_tensor *t)
{
    int64_t c = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0 || (t->dims[d] > 0 && c > INT64_MAX / 4 / t->dims[d]))
            return -1;
        c *= t->dims[d];
    }
    return c;
}

/* What the caller hands in comes from our own code, but a name clash or a bad
 * shape would write a file that no reader accepts: refuse it up front. */
static int check_write_args(const char *path, const struct rt_st_tensor *t, int nt,
                            const struct rt_st_meta *meta, int nmeta)
{
    if (nt < 0 || nmeta < 0 || (nt > 0 && !t) || (nmeta > 0 && !meta))
        return rt_error(RT_ERR_ARG, "%s: bad tensor or metadata list", path);
    for (int i = 0; i < nt; i++) {
        if (!t[i].name || !t[i].name[0] || strcmp(t[i].name, "__metadata__") == 0)
            return rt_error(RT_ERR_ARG, "%s: tensor %d has an empty or reserved name", path, i);
        if (t[i].ndim < 0 || t[i].ndim > 4)
            return rt_error(RT_ERR_ARG, "%s: tensor '%s' has %d dimensions (0 to 4 allowed)",
                            path, t[i].name, t[i].ndim);
        int64_t c = tensor_count(&t[i]);
        if (c < 0)
            return rt_error(RT_ERR_ARG, "%s: tensor '%s' has a negative or huge shape", path,
                            t[i].name);
        if (c > 0 && !t[i].data)
            return rt_error(RT_ERR_ARG, "%s: tensor '%s' has no data", path, t[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return rt_error(RT_ERR_ARG, "%s: tensor name '%s' appears twice", path,
                                t[i].name);
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value)
            return rt_error(RT_ERR_ARG, "%s: metadata entry %d is NULL", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(meta[i].key, meta[j].key) == 0)
                return rt_error(RT_ERR_ARG, "%s: metadata key '%s' appears twice", path,
                                meta[i].key);
    }
    return RT_OK;
}

/* The header JSON in tensor order, offsets packed back to back. */
static json_object *build_header(const struct rt_st_tensor *t, int nt,
                                 const struct rt_st_meta *meta, int nmeta)
{
    json_object *root = json_object_new_object();
    if (!root)
        return NULL;
    if (nmeta > 0) {
        json_object *md = json_object_new_object();
        if (!md || json_object_object_add(root, "__metadata__", md) < 0)
            goto fail_root;
        for (int i = 0; i < nmeta; i++) {
            json_object *v = json_object_new_string(meta[i].value);
            if (!v || json_object_object_add(md, meta[i].key, v) < 0)
                goto fail_root;
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        uint64_t bytes = (uint64_t)tensor_count(&t[i]) * sizeof(float);
        json_object *e = json_object_new_object();
        if (!e || json_object_object_add(root, t[i].name, e) < 0)
            goto fail_root;
        json_object *shape = json_object_new_array();
        json_object *offs = json_object_new_array();
        if (!shape || !offs) {
            json_object_put(shape);
            json_object_put(offs);
            goto fail_root;
        }
        json_object_object_add(e, "dtype", json_object_new_string("F32"));
        json_object_object_add(e, "shape", shape);
        json_object_object_add(e, "data_offsets", offs);
        for (int d = 0; d < t[i].ndim; d++)
            json_object_array_add(shape, json_object_new_int64(t[i].dims[d]));
        json_object_array_add(offs, json_object_new_int64((int64_t)off));
        json_object_array_add(offs, json_object_new_int64((int64_t)(off + bytes)));
        off += bytes;
    }
    return root;

fail_root:
    json_object_put(root);
    return NULL;
}

/* "dir/name" -> "dir" and "name"; "name" -> "." and "name". */
static int split_path(const char *path, char **dir, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        *dir = strdup(".");
        *base = path;
    } else {
        size_t len = slash == path ? 1 : (size_t)(slash - path);
        *dir = strndup(path, len);
        *base = slash + 1;
    }
    if (!*dir)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    if (!**base)
        return rt_error(RT_ERR_ARG, "%s: not a file name", path);
    return RT_OK;
}

/* Makes the rename durable. Some filesystems cannot fsync a directory
 * (EINVAL): there is nothing more to do on those. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc < 0 && err != EINVAL) {
        errno = err;
        return -1;
    }
    return 0;
}

/* Creates a fresh temporary file next to `path` (same directory, hence same
 * filesystem, so rename is atomic). O_EXCL with a pid and a counter rather
 * than mkstemp, so the file gets the usual 0666 & ~umask mode. */
static int open_temp(const char *dir, const char *base, char *tmp, size_t tmpsize)
{
    static _Atomic unsigned counter;
    for (int tries = 0; tries < 100; tries++) {
        snprintf(tmp, tmpsize, "%s/.%s.tmp.%ld.%u", dir, base, (long)getpid(), counter++);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

int rt_safetensors_can_write(const char *path)
{
    RT_ASSERT(path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return rt_error(RT_ERR_IO, "%s: a directory, not a file name", path);
    char *dir = NULL;
    const char *base = NULL;
    int rc = split_path(path, &dir, &base);
    if (rc < 0) {
        free(dir);
        return rc;
    }
    size_t tmpsize = strlen(dir) + strlen(base) + 64;
    char *tmp = malloc(tmpsize);
    int fd = tmp ? open_temp(dir, base, tmp, tmpsize) : -1;
    if (!tmp)
        rc = rt_error(RT_ERR_NOMEM, "out of memory");
    else if (fd < 0)
        rc = rt_error(RT_ERR_IO, "%s: cannot create a file in %s: %s", path, dir,
                      strerror(errno));
    else {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    free(dir);
    return rc;
}

int rt_safetensors_write(const char *path, const struct rt_st_tensor *t, int nt,
                         const struct rt_st_meta *meta, int nmeta)
{
    RT_ASSERT(path);
    int rc = check_write_args(path, t, nt, meta, nmeta);
    if (rc < 0)
        return rc;

    char *dir = NULL;
    const char *base = NULL;
    rc = split_path(path, &dir, &base);
    if (rc < 0)
        goto free_dir;

    json_object *root = build_header(t, nt, meta, nmeta);
    if (!root) {
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory building the header", path);
        goto free_dir;
    }
    const char *json =
        json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!json) {
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory building the header", path);
        goto free_json;
    }
    size_t jlen = strlen(json);
    size_t hlen = (jlen + 7) / 8 * 8; /* 8 + hlen is a multiple of 8: aligned data */
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    static const char spaces[8] = "        ";

    size_t tmpsize = strlen(dir) + strlen(base) + 64;
    char *tmp = malloc(tmpsize);
    if (!tmp) {
        rc = rt_error(RT_ERR_NOMEM, "out of memory");
        goto free_json;
    }
    int fd = open_temp(dir, base, tmp, tmpsize);
    if (fd < 0) {
        rc = rt_error(RT_ERR_IO, "%s: cannot create a temporary file in %s: %s", path, dir,
                      strerror(errno));
        goto free_tmp;
    }

    const char *step = "writing";
    bool ok = write_all(fd, prefix, 8) == 0 && write_all(fd, json, jlen) == 0 &&
              write_all(fd, spaces, hlen - jlen) == 0;
    for (int i = 0; ok && i < nt; i++)
        ok = write_floats(fd, t[i].data, (size_t)tensor_count(&t[i])) == 0;
    if (ok && fsync(fd) < 0) {
        ok = false;
        step = "fsync";
    }
    int err = errno;
    if (close(fd) < 0 && ok) {
        ok = false;
        step = "closing";
        err = errno;
    }
    if (ok && rename(tmp, path) < 0) {
        ok = false;
        step = "renaming the temporary file over it";
        err = errno;
    }
    if (!ok) {
        rc = rt_error(RT_ERR_IO, "%s: %s: %s (the previous file, if any, is unchanged)", path,
                      step, strerror(err));
        unlink(tmp);
        goto free_tmp;
    }
    if (sync_dir(dir) < 0) {
        rc = rt_error(RT_ERR_IO, "%s: written, but syncing directory %s failed: %s", path, dir,
                      strerror(errno));
        goto free_tmp;
    }
    rc = RT_OK;

free_tmp:
    free(tmp);
free_json:
    json_object_put(root);
free_dir:
    free(dir);
    return rc;
}

/* ---- reading ----------------------------------------------------------------- */

static int read_file(const char *path, unsigned char **out, size_t *size)
{
    int rc = RT_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return io_error(path, "cannot open", errno);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = io_error(path, "cannot stat", errno);
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = rt_error(RT_ERR_IO, "%s: not a regular file", path);
        goto close_fd;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) {
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
        goto close_fd;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = io_error(path, "read failed", errno);
            goto free_buf;
        }
        if (r == 0)
            break; /* shrank while we read: judged below as truncated */
        got += (size_t)r;
    }
    *out = buf;
    *size = got;
    goto close_fd;

free_buf:
    free(buf);
close_fd:
    close(fd);
    return rc;
}

/* json-c keeps the last of duplicate keys silently. Count the keys in the
 * text (a string followed by ':' in valid JSON) and in the parsed tree: a
 * difference means some key appeared twice. */
static long count_keys_text(const char *s, size_t n)
{
    long keys = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '"')
            continue;
        size_t j = i + 1;
        while (j < n && s[j] != '"')
            j += s[j] == '\\' ? 2 : 1;
        size_t k = j + 1;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r'))
            k++;
        if (k < n && s[k] == ':')
            keys++;
        i = j;
    }
    return keys;
}

static long count_keys_tree(json_object *o)
{
    long keys = 0;
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, k, v) {
            (void)k;
            keys += 1 + count_keys_tree(v);
        }
    } else if (json_object_is_type(o, json_type_array)) {
        size_t n = json_object_array_length(o);
        for (size_t i = 0; i < n; i++)
            keys += count_keys_tree(json_object_array_get_idx(o, i));
    }
    return keys;
}

/* A non-negative JSON integer. */
static bool json_u64(json_object *o, uint64_t *out)
{
    if (!json_object_is_type(o, json_type_int))
        return false;
    int64_t v = json_object_get_int64(o);
    if (v < 0 || v == INT64_MAX) /* INT64_MAX: json-c's saturation of bigger values */
        return false;
    *out = (uint64_t)v;
    return true;
}

static int parse_metadata(const char *path, json_object *md, rt_st_file *f)
{
    if (!json_object_is_type(md, json_type_object))
        return bad(path, "\"__metadata__\" is not a JSON object");
    int n = json_object_object_length(md);
    f->keys = calloc((size_t)n + 1, sizeof *f->keys);
    f->values = calloc((size_t)n + 1, sizeof *f->values);
    if (!f->keys || !f->values)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
    json_object_object_foreach(md, k, v) {
        if (!json_object_is_type(v, json_type_string))
            return bad(path, "metadata value of \"%s\" is not a string", k);
        f->keys[f->nmeta] = strdup(k);
        f->values[f->nmeta] = strdup(json_object_get_string(v));
        if (!f->keys[f->nmeta] || !f->values[f->nmeta])
            return rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
        f->nmeta++;
    }
    return RT_OK;
}

static int parse_tensor(const char *path, const char *name, json_object *o, uint64_t data_len,
                        struct st_entry *e)
{
    if (!json_object_is_type(o, json_type_object))
        return bad(path, "tensor '%s': entry is not a JSON object", name);
    json_object *dtype = NULL, *shape = NULL, *offs = NULL;
    json_object_object_foreach(o, k, v) {
        if (strcmp(k, "dtype") == 0)
            dtype = v;
        else if (strcmp(k, "shape") == 0)
            shape = v;
        else if (strcmp(k, "data_offsets") == 0)
            offs = v;
        else
            return bad(path, "tensor '%s': unknown key \"%s\"", name, k);
    }
    if (!dtype || !shape || !offs)
        return bad(path, "tensor '%s': missing \"%s\"", name,
                   !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!json_object_is_type(dtype, json_type_string))
        return bad(path, "tensor '%s': dtype is not a string", name);
    if (strcmp(json_object_get_string(dtype), "F32") != 0)
        return bad(path, "tensor '%s': dtype %s is not supported (ragtag reads F32 only)", name,
                   json_object_get_string(dtype));

    if (!json_object_is_type(shape, json_type_array))
        return bad(path, "tensor '%s': shape is not an array", name);
    size_t nd = json_object_array_length(shape);
    if (nd > 4)
        return bad(path, "tensor '%s': %zu dimensions (ragtag handles at most 4)", name, nd);
    e->ndim = (int)nd;
    uint64_t count = 1;
    for (size_t d = 0; d < nd; d++) {
        uint64_t dim;
        if (!json_u64(json_object_array_get_idx(shape, d), &dim))
            return bad(path, "tensor '%s': shape[%zu] is not a non-negative integer", name, d);
        if (dim > 0 && count > (uint64_t)INT64_MAX / 4 / dim)
            return bad(path, "tensor '%s': shape is impossibly large", name);
        count *= dim;
        e->dims[d] = (int64_t)dim;
    }

    if (!json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2)
        return bad(path, "tensor '%s': data_offsets is not an array of two integers", name);
    if (!json_u64(json_object_array_get_idx(offs, 0), &e->begin) ||
        !json_u64(json_object_array_get_idx(offs, 1), &e->end))
        return bad(path, "tensor '%s': data_offsets are not non-negative integers", name);
    if (e->begin > e->end)
        return bad(path, "tensor '%s': data_offsets [%llu, %llu] run backwards", name,
                   (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_len)
        return bad(path,
                   "tensor '%s': data_offsets [%llu, %llu] run past the end of the data "
                   "(%llu bytes; the file may be truncated)",
                   name, (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)data_len);
    if (e->end - e->begin != count * 4)
        return bad(path,
                   "tensor '%s': shape holds %llu floats (%llu bytes) but data_offsets "
                   "span %llu bytes",
                   name, (unsigned long long)count, (unsigned long long)(count * 4),
                   (unsigned long long)(e->end - e->begin));
    return RT_OK;
}

static int cmp_range(const void *a, const void *b)
{
    const struct st_entry *x = *(const struct st_entry *const *)a;
    const struct st_entry *y = *(const struct st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* The spec asks the byte ranges to tile the data: no overlap (two tensors
 * sharing bytes), no hole, nothing after the last tensor. */
static int check_tiling(const char *path, rt_st_file *f, uint64_t data_len)
{
    int rc = RT_OK;
    const struct st_entry **order = malloc(((size_t)f->nt + 1) * sizeof *order);
    if (!order)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < f->nt; i++)
        order[i] = &f->t[i];
    qsort(order, (size_t)f->nt, sizeof *order, cmp_range);
    uint64_t pos = 0;
    const struct st_entry *prev = NULL;
    for (int i = 0; i < f->nt; i++) {
        const struct st_entry *e = order[i];
        if (e->begin < pos) {
            rc = bad(path, "tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
                     prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
                     e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
            goto free_order;
        }
        if (e->begin > pos) {
            rc = bad(path, "data bytes [%llu, %llu) belong to no tensor",
                     (unsigned long long)pos, (unsigned long long)e->begin);
            goto free_order;
        }
        pos = e->end;
        prev = e;
    }
    if (pos != data_len)
        rc = bad(path, "the data has %llu bytes but the tensors cover only %llu",
                 (unsigned long long)data_len, (unsigned long long)pos);
free_order:
    free(order);
    return rc;
}

/* Points each tensor at its floats. In place when they are aligned and the
 * host is little-endian (always, for files we wrote); otherwise through one
 * aligned native-endian copy. */
static int place_data(const char *path, rt_st_file *f, unsigned char *data, uint64_t data_len)
{
    bool in_place = host_little_endian();
    for (int i = 0; i < f->nt && in_place; i++)
        in_place = ((uintptr_t)(data + f->t[i].begin)) % _Alignof(float) == 0;
    if (in_place) {
        for (int i = 0; i < f->nt; i++)
            f->t[i].data = (const float *)(void *)(data + f->t[i].begin);
        return RT_OK;
    }
    f->packed = malloc(data_len ? data_len : 1);
    if (!f->packed)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
    memcpy(f->packed, data, data_len);
    if (!host_little_endian())
        swap4(f->packed, data_len / 4);
    /* Tiling makes every begin a sum of multiples of 4. */
    for (int i = 0; i < f->nt; i++)
        f->t[i].data = f->packed + f->t[i].begin / 4;
    return RT_OK;
}

static int parse_file(const char *path, rt_st_file *f, size_t size)
{
    unsigned char *raw = f->raw;
    if (size < 8)
        return bad(path, "%zu bytes: too short for the 8-byte header length (truncated?)",
                   size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | raw[i];
    if (hlen > size - 8)
        return bad(path, "header length %llu runs past the end of the file (%zu bytes; truncated?)",
                   (unsigned long long)hlen, size);
    if (hlen > ST_MAX_HEADER)
        return bad(path, "header length %llu exceeds the format's limit of %u bytes",
                   (unsigned long long)hlen, ST_MAX_HEADER);
    const char *text = (const char *)raw + 8;
    if (hlen == 0 || text[0] != '{')
        return bad(path, "header does not start with '{' (not a safetensors file?)");
    if (memchr(text, '\0', hlen))
        return bad(path, "header contains a NUL byte");

    int rc = RT_OK;
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
    int flags = JSON_TOKENER_STRICT;
#ifdef JSON_TOKENER_VALIDATE_UTF8
    flags |= JSON_TOKENER_VALIDATE_UTF8;
#endif
    json_tokener_set_flags(tok, flags);
    json_object *root = json_tokener_parse_ex(tok, text, (int)hlen);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root) {
        if (jerr == json_tokener_continue)
            rc = bad(path, "header JSON ends early (at byte %llu)", (unsigned long long)hlen);
        else
            rc = bad(path, "header JSON invalid at byte %zu: %s", end,
                     json_tokener_error_desc(jerr));
        return rc;
    }
    if (end != hlen) {
        rc = bad(path, "header has trailing bytes after the JSON (at byte %zu)", end);
        goto put_root;
    }
    if (!json_object_is_type(root, json_type_object)) {
        rc = bad(path, "header JSON is not an object");
        goto put_root;
    }
    if (count_keys_text(text, hlen) != count_keys_tree(root)) {
        rc = bad(path, "header JSON repeats a key (tensor names and fields must be unique)");
        goto put_root;
    }

    uint64_t data_len = size - 8 - hlen;
    int n = json_object_object_length(root);
    f->t = calloc((size_t)n + 1, sizeof *f->t);
    if (!f->t) {
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
        goto put_root;
    }
    json_object_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            rc = parse_metadata(path, val, f);
        } else {
            struct st_entry *e = &f->t[f->nt];
            e->name = strdup(key);
            if (!e->name) {
                rc = rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
                goto put_root;
            }
            f->nt++;
            rc = parse_tensor(path, key, val, data_len, e);
        }
        if (rc < 0)
            goto put_root;
    }
    rc = check_tiling(path, f, data_len);
    if (rc < 0)
        goto put_root;
    rc = place_data(path, f, raw + 8 + hlen, data_len);

put_root:
    json_object_put(root);
    return rc;
}

int rt_safetensors_read(const char *path, rt_st_file **out)
{
    RT_ASSERT(path && out);
    *out = NULL;
    rt_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    f->tag = ST_TAG;
    size_t size = 0;
    int rc = read_file(path, &f->raw, &size);
    if (rc < 0)
        goto destroy_file;
    rc = parse_file(path, f, size);
    if (rc < 0)
        goto destroy_file;
    *out = f;
    return RT_OK;

destroy_file:
    rt_st_file_destroy(&f);
    return rc;
}

void rt_st_file_destroy(rt_st_file **fp)
{
    if (!fp || !*fp)
        return;
    rt_st_file *f = *fp;
    RT_ASSERT(f->tag == ST_TAG);
    for (int i = 0; i < f->nt; i++)
        free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->keys[i]);
        free(f->values[i]);
    }
    /* a partly parsed metadata entry may hold one of the pair */
    if (f->keys && f->keys[f->nmeta])
        free(f->keys[f->nmeta]);
    if (f->values && f->values[f->nmeta])
        free(f->values[f->nmeta]);
    free(f->keys);
    free(f->values);
    free(f->packed);
    free(f->raw);
    f->tag = ST_DEAD;
    free(f);
    *fp = NULL;
}

int rt_st_count(const rt_st_file *f)
{
    RT_ASSERT(f && f->tag == ST_TAG);
    return f->nt;
}

static void entry_out(const struct st_entry *e, struct rt_st_tensor *out)
{
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->ndim = e->ndim;
    memcpy(out->dims, e->dims, sizeof out->dims);
    out->data = e->data;
}

int rt_st_get(const rt_st_file *f, int i, struct rt_st_tensor *out)
{
    RT_ASSERT(f && f->tag == ST_TAG && out);
    if (i < 0 || i >= f->nt)
        return rt_error(RT_ERR_ARG, "tensor index %d out of range (%d tensors)", i, f->nt);
    entry_out(&f->t[i], out);
    return RT_OK;
}

int rt_st_find(const rt_st_file *f, const char *name, struct rt_st_tensor *out)
{
    RT_ASSERT(f && f->tag == ST_TAG && name && out);
    for (int i = 0; i < f->nt; i++) {
        if (strcmp(f->t[i].name, name) == 0) {
            entry_out(&f->t[i], out);
            return RT_OK;
        }
    }
    return rt_error(RT_ERR_NOTFOUND, "no tensor named '%s'", name);
}

const char *rt_st_meta_get(const rt_st_file *f, const char *key)
{
    RT_ASSERT(f && f->tag == ST_TAG && key);
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->keys[i], key) == 0)
            return f->values[i];
    return NULL;
}
