/* cfg.c — the model file's syntax (see cfg.h and docs/model-format.md). */
#include "config.h"

#include "cfg.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* Longest line echoed back in a message, so one huge line cannot push the
 * position out of the error buffer. */
#define ECHO_MAX 60

static char *dup_range(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Trim [*b, *e) of blanks on both ends. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && isspace((unsigned char)**b))
        (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

static int add_section(struct rt_cfg *c, const char *name, size_t n, int line)
{
    if (c->count == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        void *p = realloc(c->sections, (size_t)cap * sizeof *c->sections);
        if (!p)
            return rt_error(RT_ERR_NOMEM, "%s: out of memory", c->file);
        c->sections = p;
        c->cap = cap;
    }
    struct rt_cfg_section *s = &c->sections[c->count];
    memset(s, 0, sizeof *s);
    s->name = dup_range(name, n);
    if (!s->name)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", c->file);
    s->line = line;
    c->count++;
    return RT_OK;
}

static int add_entry(struct rt_cfg *c, struct rt_cfg_section *s, const char *k, size_t kn,
                     const char *v, size_t vn, int line)
{
    for (int i = 0; i < s->count; i++)
        if (strlen(s->entries[i].key) == kn && memcmp(s->entries[i].key, k, kn) == 0)
            return rt_error(RT_ERR_CONFIG,
                            "%s:%d: duplicate key '%.*s' in [%s] (first set at line %d; "
                            "each key may appear once per section)",
                            c->file, line, (int)kn, k, s->name, s->entries[i].line);
    if (s->count == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        void *p = realloc(s->entries, (size_t)cap * sizeof *s->entries);
        if (!p)
            return rt_error(RT_ERR_NOMEM, "%s: out of memory", c->file);
        s->entries = p;
        s->cap = cap;
    }
    struct rt_cfg_entry *e = &s->entries[s->count];
    memset(e, 0, sizeof *e);
    e->key = dup_range(k, kn);
    e->value = dup_range(v, vn);
    e->line = line;
    s->count++; /* counted before the check so destroy frees what was made */
    if (!e->key || !e->value)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", c->file);
    return RT_OK;
}

static bool valid_name(const char *b, const char *e)
{
    if (b == e)
        return false;
    for (const char *p = b; p < e; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.')
            return false;
    return true;
}

static int parse_line(struct rt_cfg *c, const char *b, const char *e, int line)
{
    const char *hash = memchr(b, '#', (size_t)(e - b));
    if (hash)
        e = hash;
    trim(&b, &e);
    if (b == e)
        return RT_OK;
    int len = (int)(e - b);
    if (*b == '[') {
        if (e[-1] != ']')
            return rt_error(RT_ERR_CONFIG, "%s:%d: '%.*s': a section header is '[name]'",
                            c->file, line, len > ECHO_MAX ? ECHO_MAX : len, b);
        const char *nb = b + 1, *ne = e - 1;
        trim(&nb, &ne);
        if (!valid_name(nb, ne))
            return rt_error(RT_ERR_CONFIG,
                            "%s:%d: '%.*s': bad section name (letters, digits, '_')",
                            c->file, line, len > ECHO_MAX ? ECHO_MAX : len, b);
        return add_section(c, nb, (size_t)(ne - nb), line);
    }
    const char *eq = memchr(b, '=', (size_t)(e - b));
    if (!eq)
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: '%.*s': expected 'key = value' or '[section]'", c->file,
                        line, len > ECHO_MAX ? ECHO_MAX : len, b);
    const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;
    trim(&kb, &ke);
    trim(&vb, &ve);
    if (!valid_name(kb, ke))
        return rt_error(RT_ERR_CONFIG, "%s:%d: '%.*s': bad key (letters, digits, '_')",
                        c->file, line, len > ECHO_MAX ? ECHO_MAX : len, b);
    if (vb == ve)
        return rt_error(RT_ERR_CONFIG, "%s:%d: key '%.*s' has no value (write key = value)",
                        c->file, line, (int)(ke - kb), kb);
    if (c->count == 0)
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: '%.*s' before any section (the file starts with [net])",
                        c->file, line, len > ECHO_MAX ? ECHO_MAX : len, b);
    return add_entry(c, &c->sections[c->count - 1], kb, (size_t)(ke - kb), vb,
                     (size_t)(ve - vb), line);
}

int rt_cfg_parse(const char *text, const char *file, struct rt_cfg **out)
{
    int rc = RT_ERR_NOMEM;
    *out = NULL;
    struct rt_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", file);
    c->file = strdup(file);
    if (!c->file) {
        rt_error(RT_ERR_NOMEM, "%s: out of memory", file);
        goto fail;
    }
    int line = 1;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        const char *e = nl ? nl : p + strlen(p);
        if ((rc = parse_line(c, p, e, line)) < 0)
            goto fail;
        c->last_line = line;
        if (!nl)
            break;
        p = nl + 1;
        line++;
    }
    *out = c;
    return RT_OK;
fail:
    rt_cfg_destroy(&c);
    return rc;
}

void rt_cfg_destroy(struct rt_cfg **cp)
{
    if (!cp || !*cp)
        return;
    struct rt_cfg *c = *cp;
    for (int i = 0; i < c->count; i++) {
        struct rt_cfg_section *s = &c->sections[i];
        for (int j = 0; j < s->count; j++) {
            free(s->entries[j].key);
            free(s->entries[j].value);
        }
        free(s->entries);
        free(s->name);
    }
    free(c->sections);
    free(c->file);
    free(c);
    *cp = NULL;
}

struct rt_cfg_entry *rt_cfg_find(struct rt_cfg_section *s, const char *key)
{
    for (int i = 0; i < s->count; i++)
        if (strcmp(s->entries[i].key, key) == 0) {
            s->entries[i].used = true;
            return &s->entries[i];
        }
    return NULL;
}

int rt_cfg_int(const struct rt_cfg *c, struct rt_cfg_section *s, const char *key,
               bool required, int def, int lo, int hi, int *out)
{
    struct rt_cfg_entry *e = rt_cfg_find(s, key);
    if (!e) {
        if (required)
            return rt_error(RT_ERR_CONFIG,
                            "%s:%d: [%s] needs '%s' (a whole number from %d to %d)", c->file,
                            s->line, s->name, key, lo, hi);
        *out = def;
        return RT_OK;
    }
    char *end;
    errno = 0;
    long v = strtol(e->value, &end, 10);
    if (end == e->value || *end != '\0')
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: [%s] %s = %s: not a whole number (accepted: %d to %d)",
                        c->file, e->line, s->name, key, e->value, lo, hi);
    if (errno == ERANGE || v < lo || v > hi)
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: [%s] %s = %s: out of range (accepted: %d to %d)", c->file,
                        e->line, s->name, key, e->value, lo, hi);
    *out = (int)v;
    return RT_OK;
}

int rt_cfg_float(const struct rt_cfg *c, struct rt_cfg_section *s, const char *key,
                 bool required, float def, double lo, double hi, bool hi_open, float *out)
{
    char range[96];
    snprintf(range, sizeof range, "a number >= %g and %s %g", lo, hi_open ? "<" : "<=", hi);
    struct rt_cfg_entry *e = rt_cfg_find(s, key);
    if (!e) {
        if (required)
            return rt_error(RT_ERR_CONFIG, "%s:%d: [%s] needs '%s' (%s)", c->file, s->line,
                            s->name, key, range);
        *out = def;
        return RT_OK;
    }
    char *end;
    double v = strtod(e->value, &end);
    if (end == e->value || *end != '\0' || !isfinite(v))
        return rt_error(RT_ERR_CONFIG, "%s:%d: [%s] %s = %s: not a number (accepted: %s)",
                        c->file, e->line, s->name, key, e->value, range);
    if (v < lo || v > hi || (hi_open && v >= hi))
        return rt_error(RT_ERR_CONFIG, "%s:%d: [%s] %s = %s: out of range (accepted: %s)",
                        c->file, e->line, s->name, key, e->value, range);
    *out = (float)v;
    return RT_OK;
}

int rt_cfg_choice(const struct rt_cfg *c, struct rt_cfg_section *s, const char *key,
                  const char *const *names, int def, int *out)
{
    struct rt_cfg_entry *e = rt_cfg_find(s, key);
    if (!e) {
        *out = def;
        return RT_OK;
    }
    char list[256] = "";
    for (int i = 0; names[i]; i++) {
        if (strcmp(e->value, names[i]) == 0) {
            *out = i;
            return RT_OK;
        }
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    return rt_error(RT_ERR_CONFIG, "%s:%d: [%s] %s = %s: unknown value (accepted: %s)",
                    c->file, e->line, s->name, key, e->value, list);
}

/* Is `key` a whole item of the comma-separated list `accepted`? */
static bool in_list(const char *accepted, const char *key)
{
    size_t kn = strlen(key);
    const char *p = accepted;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *q = p;
        while (*q && *q != ',')
            q++;
        const char *qe = q;
        while (qe > p && qe[-1] == ' ')
            qe--;
        if ((size_t)(qe - p) == kn && memcmp(p, key, kn) == 0)
            return true;
        p = q;
    }
    return false;
}

int rt_cfg_check_keys(const struct rt_cfg *c, const struct rt_cfg_section *s,
                      const char *accepted)
{
    for (int i = 0; i < s->count; i++)
        if (!in_list(accepted, s->entries[i].key))
            return rt_error(RT_ERR_CONFIG, "%s:%d: unknown key '%s' in [%s] (accepted: %s)",
                            c->file, s->entries[i].line, s->entries[i].key, s->name,
                            *accepted ? accepted : "no keys");
    return RT_OK;
}
