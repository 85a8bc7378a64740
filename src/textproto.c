/* textproto.c — protobuf text format into protobuf-c structs (textproto.h).
 *
 * Every value is stored through the field's descriptor: its offset in the
 * struct, its quantifier (has_ flag or element count), its type. The message
 * is kept consistent after each store (an array grows before its count), so
 * protobuf_c_message_free_unpacked frees a half-read message on error. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "status.h"
#include "textproto.h"

#define MAX_DEPTH 64
#define MAX_WORD 128

struct tp {
    const char *p, *end;
    const char *file;
    int line;
    int field_line; /* where the field being read starts */
};

/* The value of one field before it is stored. */
union value {
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f;
    double d;
    protobuf_c_boolean b;
    char *s;
    ProtobufCBinaryData bin;
    ProtobufCMessage *msg;
};

static int fail(const struct tp *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const struct tp *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return rt_error(RT_ERR_FORMAT, "%s:%d: %s", t->file, t->line, buf);
}

static int peek(struct tp *t)
{
    while (t->p < t->end) {
        char c = *t->p;
        if (c == '\n') {
            t->line++;
            t->p++;
        } else if (c == '#') {
            while (t->p < t->end && *t->p != '\n')
                t->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            t->p++;
        } else {
            return (unsigned char)c;
        }
    }
    return EOF;
}

static bool word_char(const struct tp *t, const char *start)
{
    char c = *t->p;
    if (isalnum((unsigned char)c) || c == '_' || c == '.')
        return true;
    /* a sign leads a number or follows its exponent */
    return (c == '-' || c == '+') && (t->p == start || t->p[-1] == 'e' || t->p[-1] == 'E');
}

/* An identifier or the text of a number; "" when none starts here. */
static int word(struct tp *t, char buf[MAX_WORD])
{
    peek(t);
    const char *start = t->p;
    while (t->p < t->end && word_char(t, start))
        t->p++;
    size_t n = (size_t)(t->p - start);
    if (n >= MAX_WORD)
        return fail(t, "'%.20s...' is too long for a name or a number", start);
    memcpy(buf, start, n);
    buf[n] = '\0';
    return RT_OK;
}

static const char *describe(int c, char buf[8])
{
    if (c == EOF)
        return "the end of the file";
    if (isprint(c))
        snprintf(buf, 8, "'%c'", c);
    else
        snprintf(buf, 8, "\\x%02x", (unsigned)c & 0xffu);
    return buf;
}

static int escape(struct tp *t, char *out, size_t *n)
{
    static const char from[] = "ntr\\'\"abfv?", to[] = "\n\t\r\\'\"\a\b\f\v?";
    char c = *t->p++;
    const char *k = strchr(from, c);
    if (c && k) {
        out[(*n)++] = to[k - from];
        return RT_OK;
    }
    int base = c == 'x' ? 16 : (c >= '0' && c <= '7') ? 8 : 0, max = base == 16 ? 2 : 3;
    if (!base)
        return fail(t, "unknown escape '\\%c' in a string", c ? c : '0');
    unsigned v = base == 8 ? (unsigned)(c - '0') : 0;
    for (int i = base == 8 ? 1 : 0; i < max && t->p < t->end; i++) {
        int d = *t->p;
        int dv = isdigit(d) ? d - '0' : (base == 16 && isxdigit(d)) ? tolower(d) - 'a' + 10 : -1;
        if (dv < 0 || dv >= base)
            break;
        v = v * (unsigned)base + (unsigned)dv;
        t->p++;
    }
    if (v > 255)
        return fail(t, "escape '\\%o' is larger than a byte", v);
    out[(*n)++] = (char)v;
    return RT_OK;
}

/* One or more adjacent quoted strings, joined; *out is malloc'ed. */
static int string_value(struct tp *t, char **out, size_t *len)
{
    size_t cap = (size_t)(t->end - t->p) + 1, n = 0;
    char *s = malloc(cap);
    if (!s)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", t->file);
    int rc = RT_OK;
    while (rc == RT_OK && (peek(t) == '"' || peek(t) == '\'')) {
        char q = *t->p++;
        while (rc == RT_OK && t->p < t->end && *t->p != q && *t->p != '\n') {
            if (*t->p == '\\' && t->p + 1 < t->end) {
                t->p++;
                rc = escape(t, s, &n);
            } else {
                s[n++] = *t->p++;
            }
        }
        if (rc == RT_OK && (t->p >= t->end || *t->p != q))
            rc = fail(t, "string not closed before the end of the line");
        t->p++;
    }
    if (rc < 0) {
        free(s);
        return rc;
    }
    s[n] = '\0';
    *out = s;
    *len = n;
    return RT_OK;
}

static size_t value_size(ProtobufCType type)
{
    switch (type) {
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
        return sizeof(int64_t);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    default: /* 32-bit integers, float, enum */
        return sizeof(int32_t);
    }
}

static bool has_flag(const ProtobufCFieldDescriptor *fd)
{
    return fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->type != PROTOBUF_C_TYPE_STRING &&
           fd->type != PROTOBUF_C_TYPE_MESSAGE && !(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF);
}

static bool already_set(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd)
{
    const char *base = (const char *)m;
    if (has_flag(fd))
        return *(const protobuf_c_boolean *)(base + fd->quantifier_offset);
    if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)(base + fd->quantifier_offset) == fd->id;
    if (fd->type == PROTOBUF_C_TYPE_STRING) {
        const char *s = *(char *const *)(base + fd->offset);
        return s && s != fd->default_value;
    }
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
        return *(void *const *)(base + fd->offset) != NULL;
    return false; /* required scalars: no record of being set */
}

/* Store *v (value_size bytes): appended to a repeated field, else set once. */
static int store(struct tp *t, ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd,
                 const union value *v)
{
    char *base = (char *)m;
    size_t sz = value_size(fd->type);
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t *n = (size_t *)(base + fd->quantifier_offset);
        void **arr = (void **)(base + fd->offset);
        void *grown = realloc(*arr, (*n + 1) * sz);
        if (!grown)
            return rt_error(RT_ERR_NOMEM, "%s: out of memory", t->file);
        memcpy((char *)grown + *n * sz, v, sz);
        *arr = grown;
        (*n)++;
        return RT_OK;
    }
    if (already_set(m, fd)) {
        t->line = t->field_line; /* reading the value may have gone past its line */
        return fail(t, "'%s' is given twice (it is not a repeated field of %s)", fd->name,
                    m->descriptor->name);
    }
    memcpy(base + fd->offset, v, sz);
    if (has_flag(fd))
        *(protobuf_c_boolean *)(base + fd->quantifier_offset) = 1;
    else if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)(base + fd->quantifier_offset) = fd->id;
    return RT_OK;
}

static int integer(struct tp *t, const ProtobufCFieldDescriptor *fd, const char *w,
                   union value *v)
{
    bool is_signed = fd->type == PROTOBUF_C_TYPE_INT32 || fd->type == PROTOBUF_C_TYPE_SINT32 ||
                     fd->type == PROTOBUF_C_TYPE_SFIXED32 || fd->type == PROTOBUF_C_TYPE_INT64 ||
                     fd->type == PROTOBUF_C_TYPE_SINT64 || fd->type == PROTOBUF_C_TYPE_SFIXED64;
    bool wide = value_size(fd->type) == 8;
    char *end;
    errno = 0;
    long long s = 0;
    unsigned long long u = 0;
    if (is_signed)
        s = strtoll(w, &end, 0);
    else
        u = w[0] == '-' ? (errno = ERANGE, 0) : strtoull(w, &end, 0);
    if (!w[0] || (errno != ERANGE && *end))
        return fail(t, "%s: '%s' is not an integer", fd->name, w);
    if (errno == ERANGE || (is_signed && !wide && (s < INT32_MIN || s > INT32_MAX)) ||
        (!is_signed && !wide && u > UINT32_MAX))
        return fail(t, "%s: %s is out of range (%s %d-bit integer)", fd->name, w,
                    is_signed ? "a signed" : "an unsigned", wide ? 64 : 32);
    if (is_signed && wide)
        v->i64 = s;
    else if (is_signed)
        v->i32 = (int32_t)s;
    else if (wide)
        v->u64 = u;
    else
        v->u32 = (uint32_t)u;
    return RT_OK;
}

static int floating(struct tp *t, const ProtobufCFieldDescriptor *fd, char *w, union value *v)
{
    const char *n = w + (w[0] == '-' || w[0] == '+');
    double d;
    if (!strcasecmp(n, "inf") || !strcasecmp(n, "infinity"))
        d = w[0] == '-' ? -INFINITY : INFINITY;
    else if (!strcasecmp(n, "nan"))
        d = NAN;
    else {
        size_t len = strlen(w);
        if (len > 1 && (w[len - 1] == 'f' || w[len - 1] == 'F') && !strchr(w, 'x'))
            w[len - 1] = '\0';
        char *end;
        errno = 0;
        d = strtod(w, &end);
        if (!w[0] || *end)
            return fail(t, "%s: '%s' is not a number", fd->name, w);
        if (fd->type == PROTOBUF_C_TYPE_FLOAT && fabs(d) > FLT_MAX)
            return fail(t, "%s: %s is out of range for a float", fd->name, w);
    }
    if (fd->type == PROTOBUF_C_TYPE_FLOAT)
        v->f = (float)d;
    else
        v->d = d;
    return RT_OK;
}

static int enumeration(struct tp *t, const ProtobufCFieldDescriptor *fd, const char *w,
                       union value *v)
{
    const ProtobufCEnumDescriptor *ed = fd->descriptor;
    const ProtobufCEnumValue *ev;
    if (isdigit((unsigned char)w[0]) || w[0] == '-') {
        char *end;
        long n = strtol(w, &end, 0);
        ev = *end || n < INT32_MIN || n > INT32_MAX ? NULL
                                                   : protobuf_c_enum_descriptor_get_value(ed, (int)n);
    } else {
        ev = protobuf_c_enum_descriptor_get_value_by_name(ed, w);
    }
    if (ev) {
        v->i32 = ev->value;
        return RT_OK;
    }
    char names[256] = "";
    size_t len = 0;
    for (unsigned i = 0; i < ed->n_values && len < sizeof names - 8; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                ed->values[i].name);
    return fail(t, "%s: '%s' is not a %s (accepted: %s)", fd->name, w, ed->name, names);
}

static int scalar(struct tp *t, const ProtobufCFieldDescriptor *fd, union value *v)
{
    if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_BYTES) {
        if (peek(t) != '"' && peek(t) != '\'')
            return fail(t, "%s takes a quoted string", fd->name);
        char *s = NULL;
        size_t len = 0;
        RT_TRY(string_value(t, &s, &len));
        if (fd->type == PROTOBUF_C_TYPE_BYTES) {
            v->bin.data = (uint8_t *)s;
            v->bin.len = len;
        } else {
            v->s = s;
        }
        return RT_OK;
    }
    char w[MAX_WORD];
    RT_TRY(word(t, w));
    if (!w[0]) {
        char d[8];
        return fail(t, "%s: expected a value, found %s", fd->name, describe(peek(t), d));
    }
    switch (fd->type) {
    case PROTOBUF_C_TYPE_FLOAT: case PROTOBUF_C_TYPE_DOUBLE:
        return floating(t, fd, w, v);
    case PROTOBUF_C_TYPE_ENUM:
        return enumeration(t, fd, w, v);
    case PROTOBUF_C_TYPE_BOOL:
        if (!strcmp(w, "true") || !strcmp(w, "True") || !strcmp(w, "t") || !strcmp(w, "1"))
            v->b = 1;
        else if (!strcmp(w, "false") || !strcmp(w, "False") || !strcmp(w, "f") || !strcmp(w, "0"))
            v->b = 0;
        else
            return fail(t, "%s: '%s' is not a boolean (true or false)", fd->name, w);
        return RT_OK;
    default:
        return integer(t, fd, w, v);
    }
}

static int fields(struct tp *t, ProtobufCMessage *m, int close, int open_line, int depth);

/* A nested message `{ ... }` or `< ... >`, stored before it is filled. */
static int message(struct tp *t, ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd,
                   int depth)
{
    int c = peek(t);
    if (c != '{' && c != '<') {
        char d[8];
        return fail(t, "%s is a message: expected '{', found %s", fd->name, describe(c, d));
    }
    if (depth >= MAX_DEPTH)
        return fail(t, "messages nested more than %d deep", MAX_DEPTH);
    t->p++;
    const ProtobufCMessageDescriptor *md = fd->descriptor;
    union value v = {.msg = malloc(md->sizeof_message)};
    if (!v.msg)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", t->file);
    protobuf_c_message_init(md, v.msg);
    int rc = store(t, m, fd, &v);
    if (rc < 0) {
        free(v.msg);
        return rc;
    }
    return fields(t, v.msg, c == '{' ? '}' : '>', t->line, depth + 1);
}

static int one_value(struct tp *t, ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd,
                     int depth)
{
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
        return message(t, m, fd, depth);
    union value v = {0};
    RT_TRY(scalar(t, fd, &v));
    int rc = store(t, m, fd, &v);
    if (rc < 0 && fd->type == PROTOBUF_C_TYPE_STRING)
        free(v.s);
    else if (rc < 0 && fd->type == PROTOBUF_C_TYPE_BYTES)
        free(v.bin.data);
    return rc;
}

/* `[a, b, ...]` for a repeated field. */
static int list(struct tp *t, ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd, int depth)
{
    if (fd->label != PROTOBUF_C_LABEL_REPEATED)
        return fail(t, "%s is not a repeated field of %s: a list is not accepted", fd->name,
                    m->descriptor->name);
    t->p++;
    if (peek(t) == ']') {
        t->p++;
        return RT_OK;
    }
    for (;;) {
        RT_TRY(one_value(t, m, fd, depth));
        int c = peek(t);
        t->p++;
        if (c == ']')
            return RT_OK;
        if (c != ',') {
            char d[8];
            t->p--;
            return fail(t, "in the list of %s: expected ',' or ']', found %s", fd->name,
                        describe(c, d));
        }
    }
}

static int field(struct tp *t, ProtobufCMessage *m, int depth)
{
    char name[MAX_WORD];
    RT_TRY(word(t, name));
    t->field_line = t->line;
    if (!name[0] || !(isalpha((unsigned char)name[0]) || name[0] == '_')) {
        char d[8];
        return fail(t, "expected a field name of %s, found %s", m->descriptor->name,
                    name[0] ? name : describe(peek(t), d));
    }
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    if (!fd && strlen(name) + 1 < sizeof name) {
        /* a field renamed with a '_' for protobuf-c (a member named `base`) */
        strcat(name, "_");
        fd = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
        name[strlen(name) - 1] = '\0';
    }
    if (!fd)
        return fail(t, "unknown field '%s' in %s", name, m->descriptor->name);
    int c = peek(t);
    bool colon = c == ':';
    if (colon) {
        t->p++;
        c = peek(t);
    }
    int rc;
    if (c == '[')
        rc = list(t, m, fd, depth);
    else if (!colon && fd->type != PROTOBUF_C_TYPE_MESSAGE)
        return fail(t, "expected ':' after %s", name);
    else
        rc = one_value(t, m, fd, depth);
    if (rc == RT_OK && (peek(t) == ',' || peek(t) == ';'))
        t->p++;
    return rc;
}

/* Fields up to `close` ('}' or '>'), or to the end of the text when 0. */
static int fields(struct tp *t, ProtobufCMessage *m, int close, int open_line, int depth)
{
    for (;;) {
        int c = peek(t);
        if (c == EOF) {
            if (!close)
                return RT_OK;
            t->line = open_line;
            return fail(t, "'%c' opened here (%s) is never closed", close == '}' ? '{' : '<',
                        m->descriptor->name);
        }
        if (c == close) {
            t->p++;
            return RT_OK;
        }
        if (c == '[')
            return fail(t, "extensions and Any fields ('[...]') are not supported");
        if (c == '}' || c == '>')
            return fail(t, "unexpected '%c' (nothing to close here)", c);
        RT_TRY(field(t, m, depth));
    }
}

int rt_textproto_parse(const char *text, size_t len, const char *file,
                       const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
    *out = NULL;
    ProtobufCMessage *m = malloc(desc->sizeof_message);
    if (!m)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", file);
    protobuf_c_message_init(desc, m);
    struct tp t = {.p = text, .end = text + len, .file = file, .line = 1};
    int rc = fields(&t, m, 0, 1, 0);
    if (rc == RT_OK && !protobuf_c_message_check(m))
        rc = rt_error(RT_ERR_FORMAT, "%s: a required field of %s or of a message inside it is "
                                     "missing", file, desc->name);
    if (rc < 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    return RT_OK;
}
