/* train_config.c — the options of a training run: defaults, parsing from
 * flags and from the model file's [train] section (one validation path for
 * both), the help table, and the form sent to workers. All of it comes from
 * one list, options.def. */
#include "config.h"

#include "train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "status.h"

/* ---- the table ------------------------------------------------------------
 * options.def, expanded into one descriptor per option that the parser, the
 * printer and the look-ups walk; the defaults are generated code. */

enum opt_type { OPT_FLOAT, OPT_FLOAT_GT, OPT_INT, OPT_LONG, OPT_U64, OPT_BOOL, OPT_STR, OPT_ENUM };
enum opt_workers { OPT_WORKERS, OPT_IF_SET, OPT_LOCAL };

struct option {
    const char *usage; /* "--weight-decay F" */
    enum opt_type type;
    enum opt_workers workers;
    size_t offset, size;      /* of the field in struct rt_train_config */
    double lo, hi;            /* FLOAT, FLOAT_GT */
    long ilo, ihi;            /* INT, LONG (exact, unlike a double) */
    const char *const *names; /* ENUM, NULL-terminated */
};

#define RT_NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define FIELD(f) (((struct rt_train_config *)0)->f)

/* Per type: whether a field has its C type (a compile-time check of the
 * table), how its default is set, and which range it has. */
#define OPT_IS_FLOAT(x) _Generic((x), float: 1, default: 0)
#define OPT_IS_FLOAT_GT OPT_IS_FLOAT
#define OPT_IS_INT(x) _Generic((x), int: 1, default: 0)
#define OPT_IS_LONG(x) _Generic((x), long: 1, default: 0)
#define OPT_IS_U64(x) _Generic((x), uint64_t: 1, default: 0)
#define OPT_IS_BOOL(x) _Generic((x), bool: 1, default: 0)
#define OPT_IS_STR(x) _Generic((x), char *: sizeof(x) > sizeof(char *), default: 0)
#define OPT_IS_ENUM(x) _Generic((x), float: 0, bool: 0, default: sizeof(x) == sizeof(int))

#define OPT_ASSIGN(f, d) ((f) = (d))
#define OPT_DEFAULT_FLOAT OPT_ASSIGN
#define OPT_DEFAULT_FLOAT_GT OPT_ASSIGN
#define OPT_DEFAULT_INT OPT_ASSIGN
#define OPT_DEFAULT_LONG OPT_ASSIGN
#define OPT_DEFAULT_U64 OPT_ASSIGN
#define OPT_DEFAULT_BOOL OPT_ASSIGN
#define OPT_DEFAULT_ENUM OPT_ASSIGN
#define OPT_DEFAULT_STR(f, d) snprintf(f, sizeof f, "%s", d)

#define OPT_REAL(a, b) .lo = (a), .hi = (b)
#define OPT_INTEGER(a, b) .ilo = (a), .ihi = (b)
#define OPT_NONE(a, b) .ilo = 0
#define OPT_RANGE_FLOAT OPT_REAL
#define OPT_RANGE_FLOAT_GT OPT_REAL
#define OPT_RANGE_INT OPT_INTEGER
#define OPT_RANGE_LONG OPT_INTEGER
#define OPT_RANGE_U64 OPT_NONE
#define OPT_RANGE_BOOL OPT_NONE
#define OPT_RANGE_STR OPT_NONE
#define OPT_RANGE_ENUM OPT_NONE

#define RT_OPTION(usage, type, field, def, lo, hi, names, workers, help)                      \
    _Static_assert(OPT_IS_##type(FIELD(field)), "options.def: " usage ": not a " #type " field");
#include "options.def"
#undef RT_OPTION

static const struct option s_options[] = {
#define RT_OPTION(usage_, type_, field_, def_, lo_, hi_, names_, workers_, help_)             \
    {.usage = usage_, .type = OPT_##type_, .workers = OPT_##workers_,                          \
     .offset = offsetof(struct rt_train_config, field_), .size = sizeof FIELD(field_),         \
     OPT_RANGE_##type_(lo_, hi_), .names = names_},
#include "options.def"
#undef RT_OPTION
};
#define N_OPTIONS ((int)(sizeof s_options / sizeof s_options[0]))
_Static_assert(sizeof s_options / sizeof s_options[0] <= RT_TRAIN_OPTIONS_MAX,
               "options.def has more options than RT_TRAIN_OPTIONS_MAX");

const char *const rt_train_option_help[] = {
#define RT_OPTION(usage, type, field, def, lo, hi, names, workers, help) usage, help,
#include "options.def"
#undef RT_OPTION
    NULL, NULL,
};

void rt_train_config_defaults(struct rt_train_config *c)
{
    memset(c, 0, sizeof *c);
    rt_optim_config_defaults(&c->optim); /* its fields that are no options */
#define RT_OPTION(usage, type, field, def, ...) OPT_DEFAULT_##type(c->field, def);
#include "options.def"
#undef RT_OPTION
}

/* An option's key: its flag without the dashes, '_' for '-'. */
static void normalise_key(char *dst, size_t n, const char *key)
{
    size_t i = 0;
    for (; key[i] && i + 1 < n; i++)
        dst[i] = key[i] == '-' ? '_' : key[i];
    dst[i] = '\0';
}

static const char *option_key(const struct option *o, char *key, size_t n)
{
    size_t len = strcspn(o->usage + 2, " ");
    RT_ASSERT(len < n);
    char flag[64];
    snprintf(flag, sizeof flag, "%.*s", (int)len, o->usage + 2);
    normalise_key(key, n, flag);
    return key;
}

/* The option named `key` ('-' or '_'), or NULL. */
static const struct option *option_find(const char *key)
{
    char want[64], k[64];
    normalise_key(want, sizeof want, key);
    for (int i = 0; i < N_OPTIONS; i++)
        if (!strcmp(want, option_key(&s_options[i], k, sizeof k)))
            return &s_options[i];
    return NULL;
}

bool rt_train_config_known(const char *key) { return option_find(key) != NULL; }

bool rt_train_config_is_bool(const char *key)
{
    const struct option *o = option_find(key);
    return o && o->type == OPT_BOOL;
}

bool rt_train_config_is_sent(const char *key)
{
    const struct option *o = option_find(key);
    return o && o->workers != OPT_LOCAL;
}

/* ---- from text ------------------------------------------------------------ */

static int bad_value(const char *where, const char *key, const char *value, const char *accepted)
{
    return rt_error(RT_ERR_CONFIG, "%s: %s: '%s' is not accepted (expected %s)", where, key,
                    value, accepted);
}

/* What a number option accepts, in words. */
static const char *accepted_range(char *acc, size_t n, double lo, double hi, bool lo_open)
{
    if (hi >= 1e300)
        snprintf(acc, n, "a number %s %g", lo_open ? ">" : ">=", lo);
    else
        snprintf(acc, n, "a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
    return acc;
}

/* A float option's value, its bounds checked on the float: the
 * job carries a float as 9 digits (--clip-norm 1e30 as 1.00000002e+30),
 * which as a double may lie past a bound that the float itself meets; and
 * a value that rounds to an open bound (--lr 1e-46 is 0 as a float) is
 * refused, not taken as "not given". */
static int parse_float(const char *where, const char *key, const char *s, double lo, double hi,
                       bool lo_open, float *out)
{
    char *end, acc[128];
    double d = strtod(s, &end);
    float f = (float)d, flo = (float)lo, fhi = (float)hi;
    /* strtod's ERANGE is not checked: a value below a float's range rounds
     * to 0, which the bounds then judge (not above an open 0) */
    if (end == s || *end || !isfinite(d) || !isfinite(f) || f < flo || f > fhi ||
        (lo_open && f == flo))
        return bad_value(where, key, s, accepted_range(acc, sizeof acc, lo, hi, lo_open));
    *out = f;
    return RT_OK;
}

static int parse_long(const char *where, const char *key, const char *s, long lo, long hi,
                      long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) {
        char acc[96];
        snprintf(acc, sizeof acc, "an integer from %ld to %ld", lo, hi);
        return bad_value(where, key, s, acc);
    }
    *out = v;
    return RT_OK;
}

static int parse_u64(const char *where, const char *key, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || errno || s[0] == '-')
        return bad_value(where, key, s, "a non-negative integer");
    *out = v;
    return RT_OK;
}

static int parse_bool(const char *where, const char *key, const char *s, bool *out)
{
    if (!strcmp(s, "1") || !strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
        *out = true;
    else if (!strcmp(s, "0") || !strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
        *out = false;
    else
        return bad_value(where, key, s, "1/0, true/false, yes/no or on/off");
    return RT_OK;
}

/* An enum's names, "a, b or c" when none matches. */
static int parse_enum(const char *where, const char *key, const char *s,
                      const char *const *names, int *out)
{
    char acc[128] = "";
    for (int i = 0; names[i]; i++) {
        if (!strcmp(s, names[i])) {
            *out = i;
            return RT_OK;
        }
        size_t n = strlen(acc);
        snprintf(acc + n, sizeof acc - n, "%s%s", i == 0 ? "" : names[i + 1] ? ", " : " or ",
                 names[i]);
    }
    return bad_value(where, key, s, acc);
}

static int set_str(char *dst, size_t n, const char *where, const char *key, const char *v)
{
    if (!*v || strlen(v) >= n)
        return bad_value(where, key, v, "a non-empty value shorter than the limit");
    snprintf(dst, n, "%s", v);
    return RT_OK;
}

/* Set the field at p (of option o, named key in messages) from text v. */
static int option_parse(const struct option *o, void *p, const char *key, const char *v,
                        const char *where)
{
    long l = 0;
    switch (o->type) {
    case OPT_FLOAT:
    case OPT_FLOAT_GT:
        RT_TRY(parse_float(where, key, v, o->lo, o->hi, o->type == OPT_FLOAT_GT, (float *)p));
        return RT_OK;
    case OPT_INT:
    case OPT_LONG:
        RT_TRY(parse_long(where, key, v, o->ilo, o->ihi, &l));
        if (o->type == OPT_INT)
            *(int *)p = (int)l;
        else
            *(long *)p = l;
        return RT_OK;
    case OPT_U64:
        return parse_u64(where, key, v, p);
    case OPT_BOOL:
        return parse_bool(where, key, v, p);
    case OPT_STR:
        return set_str(p, o->size, where, key, v);
    case OPT_ENUM:
        return parse_enum(where, key, v, o->names, p);
    }
    RT_ASSERT(!"an option type");
    return RT_ERR_CONFIG;
}

int rt_train_config_set(struct rt_train_config *c, const char *key_in, const char *v,
                        const char *where)
{
    const struct option *o = option_find(key_in);
    if (!o)
        return rt_error(RT_ERR_CONFIG,
                        "%s: unknown training option '%s' (see ragtag train --help)", where,
                        key_in);
    char key[64];
    return option_parse(o, (char *)c + o->offset, option_key(o, key, sizeof key), v, where);
}

/* Merge the model file's [train] section into c. */
static int apply_model_options(struct rt_train_config *c, const rt_model *m)
{
    for (int i = 0; i < rt_model_train_option_count(m); i++) {
        struct rt_train_option o = rt_model_train_option(m, i);
        char where[1100];
        snprintf(where, sizeof where, "%s:%d", o.file, o.line);
        RT_TRY(rt_train_config_set(c, o.key, o.value, where));
    }
    return RT_OK;
}

int rt_train_config_from_model(struct rt_train_config *c, const char *model_path)
{
    rt_dev *dev = rt_dev_open("cpu", 0, 1);
    if (!dev)
        return RT_ERR_DEVICE;
    rt_model *m = rt_model_load(model_path, dev, 1);
    int rc = m ? apply_model_options(c, m) : RT_ERR_CONFIG;
    if (rc == RT_OK && c->base_batch == 0)
        c->base_batch = c->batch; /* the batch the file's lr goes with (--lr-scale) */
    if (m)
        snprintf(c->model_path, sizeof c->model_path, "%s", model_path);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    return rc;
}

/* ---- to text: the job sent to workers ------------------------------------- */

static int enum_count(const struct option *o)
{
    int n = 0;
    while (o->names[n])
        n++;
    return n;
}

const char *rt_train_mode_name(enum rt_dist_mode m)
{
    const struct option *o = option_find("mode");
    return (int)m >= 0 && (int)m < enum_count(o) ? o->names[m] : o->names[0];
}

/* Whether an IF_SET option is set: above 0. */
static bool option_is_set(const struct option *o, const void *p)
{
    switch (o->type) {
    case OPT_FLOAT:
    case OPT_FLOAT_GT:
        return *(const float *)p > 0.0f;
    case OPT_INT:
        return *(const int *)p > 0;
    case OPT_LONG:
        return *(const long *)p > 0;
    case OPT_STR:
        return *(const char *)p != '\0';
    default:
        return true;
    }
}

/* The field at p as text that option_parse reads back exactly: in v (n
 * bytes), or the field itself for a string. */
static int option_text(const struct option *o, const void *p, const char *key, char *v, size_t n,
                       const char **text)
{
    *text = v;
    switch (o->type) {
    case OPT_FLOAT:
    case OPT_FLOAT_GT:
        snprintf(v, n, "%.9g", (double)*(const float *)p); /* strtod + (float) gives it back */
        return RT_OK;
    case OPT_INT:
        snprintf(v, n, "%d", *(const int *)p);
        return RT_OK;
    case OPT_LONG:
        snprintf(v, n, "%ld", *(const long *)p);
        return RT_OK;
    case OPT_U64:
        snprintf(v, n, "%llu", (unsigned long long)*(const uint64_t *)p);
        return RT_OK;
    case OPT_BOOL:
        snprintf(v, n, "%d", *(const bool *)p ? 1 : 0);
        return RT_OK;
    case OPT_STR:
        *text = p;
        return RT_OK;
    case OPT_ENUM: {
        int e = *(const int *)p;
        if (e < 0 || e >= enum_count(o))
            return rt_error(RT_ERR_CONFIG, "%s: %d is not one of its values", key, e);
        *text = o->names[e];
        return RT_OK;
    }
    }
    RT_ASSERT(!"an option type");
    return RT_ERR_CONFIG;
}

int rt_train_config_each(const struct rt_train_config *c,
                         int (*fn)(void *arg, const char *key, const char *value), void *arg)
{
    for (int i = 0; i < N_OPTIONS; i++) {
        const struct option *o = &s_options[i];
        const void *p = (const char *)c + o->offset;
        if (o->workers == OPT_LOCAL || (o->workers == OPT_IF_SET && !option_is_set(o, p)))
            continue;
        char key[64], v[64];
        const char *text;
        option_key(o, key, sizeof key);
        RT_TRY(option_text(o, p, key, v, sizeof v, &text));
        RT_TRY(fn(arg, key, text));
    }
    return RT_OK;
}
