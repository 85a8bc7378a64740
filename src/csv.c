/* csv.c — labelled images as CSV, one image a line: the label, then c*h*w
 * pixel values 0..255 (Dist-Keras' mnist.csv, Kaggle's digit files). For
 * c > 1 the pixels are taken channel by channel (planar, as in CIFAR-10's
 * binary files). A first line whose first field is not a number is a header
 * and skipped; empty lines are skipped; anything else that is not a whole
 * row of numbers in range is an error naming file:line. Integer pixels
 * are kept as bytes; a file with any fraction is kept as floats. */
#include "data.h"
#include "status.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LABEL 255

static const char *skip_blank(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* Parse one field at p: a number, blanks around it allowed, ending at ',' or
 * the end of the line. Returns where it ends, or NULL if it is not a number.
 * Plain integers (nearly every field of an image CSV) skip strtod. */
static const char *parse_field(const char *p, double *v)
{
    const char *s = skip_blank(p), *start = s;
    if (*s >= '0' && *s <= '9') {
        long acc = 0;
        int nd = 0;
        while (*s >= '0' && *s <= '9' && nd < 9) {
            acc = acc * 10 + (*s - '0');
            s++;
            nd++;
        }
        if (!(*s >= '0' && *s <= '9') && *s != '.' && *s != 'e' && *s != 'E') {
            *v = (double)acc;
            goto tail;
        }
    }
    char *end;
    double d = strtod(start, &end);
    if (end == start || !isfinite(d)) /* strtod takes "nan" and "inf" */
        return NULL;
    *v = d;
    s = end;
tail:
    s = skip_blank(s);
    return (*s == ',' || *s == '\0') ? s : NULL;
}

/* The field starting at p, shortened, for a message. */
static const char *field_text(const char *p, char *buf, size_t bufsz)
{
    size_t n = strcspn(p, ",");
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n >= bufsz) /* bufsz is a few dozen bytes */
        snprintf(buf, bufsz, "%.*s...", (int)(bufsz - 4), p);
    else
        snprintf(buf, bufsz, "%.*s", (int)n, p);
    return buf;
}

static long count_fields(const char *line)
{
    long n = 1;
    for (const char *s = line; *s; s++)
        n += *s == ',';
    return n;
}

/* Parse one data line into row[0..per-1] (the values as written) and
 * *label. */
static int parse_line(const char *path, long lineno, const char *line, size_t per, double *row,
                      int32_t *label)
{
    char txt[40];
    const char *p = line;
    double v;
    long fields = (long)per + 1;
    for (long f = 0; f < fields; f++) {
        const char *end = parse_field(p, &v);
        if (!end) {
            if (*skip_blank(p) == '\0' || *skip_blank(p) == ',')
                return rt_error(RT_ERR_FORMAT, "%s:%ld: field %ld is empty", path, lineno, f + 1);
            return rt_error(RT_ERR_FORMAT, "%s:%ld: field %ld ('%s') is not a number", path,
                            lineno, f + 1, field_text(skip_blank(p), txt, sizeof txt));
        }
        if (f == 0) {
            if (v < 0 || v > MAX_LABEL || v != floor(v))
                return rt_error(RT_ERR_FORMAT, "%s:%ld: label '%s' is not an integer in 0..%d",
                                path, lineno, field_text(skip_blank(p), txt, sizeof txt),
                                MAX_LABEL);
            *label = (int32_t)v;
        } else {
            if (v < 0 || v > 255)
                return rt_error(RT_ERR_FORMAT, "%s:%ld: field %ld: pixel value '%s' is not in 0..255",
                                path, lineno, f + 1, field_text(skip_blank(p), txt, sizeof txt));
            row[f - 1] = v;
        }
        bool last = f + 1 == fields;
        if (*end == '\0' && !last)
            return rt_error(RT_ERR_FORMAT,
                            "%s:%ld: expected %ld fields (a label and %zu pixels), found %ld", path,
                            lineno, fields, per, f + 1);
        if (*end == ',' && last)
            return rt_error(RT_ERR_FORMAT,
                            "%s:%ld: expected %ld fields (a label and %zu pixels), found %ld", path,
                            lineno, fields, per, fields + count_fields(end + 1));
        p = end + 1;
    }
    return RT_OK;
}

/* Make room for one more row, doubling so that growth costs O(n) in all. */
static int grow(rt_dataset *ds, long *cap, size_t per, const char *path)
{
    if (ds->n < *cap)
        return RT_OK;
    if (ds->n == INT_MAX)
        return rt_error(RT_ERR_FORMAT, "%s: more than %d rows", path, INT_MAX);
    long ncap = *cap ? *cap * 2 : 64;
    if (ncap > INT_MAX)
        ncap = INT_MAX;
    size_t vs = rt_dataset_value_size(ds);
    void *x = realloc(ds->u8 ? (void *)ds->u8 : (void *)ds->f32, (size_t)ncap * per * vs);
    if (!x)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory after %d rows", path, ds->n);
    if (ds->u8)
        ds->u8 = x;
    else
        ds->f32 = x;
    int32_t *y = realloc(ds->y, (size_t)ncap * sizeof(int32_t));
    if (!y)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory after %d rows", path, ds->n);
    ds->y = y;
    *cap = ncap;
    return RT_OK;
}

/* Row ds->n of the set from the values as written: bytes while every value
 * so far is an integer 0..255, else the set becomes floats (v / 255, what
 * the byte table gives for bytes) for good. -0 is not a byte: its float
 * keeps its sign. `cap` rows are allocated. */
static int store_row(rt_dataset *ds, long cap, size_t per, const double *row, const char *path)
{
    if (ds->u8) {
        uint8_t *dst = ds->u8 + (size_t)ds->n * per;
        size_t k = 0;
        while (k < per && row[k] == floor(row[k]) && !signbit(row[k])) {
            dst[k] = (uint8_t)row[k];
            k++;
        }
        if (k == per)
            return RT_OK;
        if (rt_dataset_widen(ds, cap) < 0)
            return rt_error_wrap(RT_ERR_NOMEM, "%s", path);
    }
    float *dst = ds->f32 + (size_t)ds->n * per;
    for (size_t k = 0; k < per; k++)
        dst[k] = (float)row[k] / 255.0f;
    return RT_OK;
}

int rt_dataset_read_csv(const char *path, int c, int h, int w, rt_dataset **out)
{
    RT_ASSERT(path && out && c > 0 && h > 0 && w > 0);
    *out = NULL;
    int rc;
    char *line = NULL;
    size_t linecap = 0;
    rt_dataset *ds = NULL;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return rt_error(RT_ERR_NOTFOUND, "%s: no such file", path);
        return rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
    }
    double *row = malloc((size_t)c * h * w * sizeof *row);
    if (!row) {
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory for a row of %dx%dx%d values", path, h, w, c);
        goto out;
    }
    if (!(ds = rt_dataset_new_u8(0, c, h, w))) {
        rc = RT_ERR_NOMEM;
        goto out;
    }
    size_t per = (size_t)c * h * w;
    long cap = 0, lineno = 0; /* rt_dataset_new(0, ...) left room for no row */
    bool first = true;
    int maxlabel = -1;
    ssize_t len;
    errno = 0;
    while ((len = getline(&line, &linecap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if ((size_t)len != strlen(line)) {
            rc = rt_error(RT_ERR_FORMAT, "%s:%ld: a NUL byte (a binary file?)", path, lineno);
            goto out;
        }
        if (*skip_blank(line) == '\0')
            continue;
        double v;
        if (first && !parse_field(line, &v)) {
            first = false; /* a header line: label,pixel0,pixel1,... */
            continue;
        }
        first = false;
        if ((rc = grow(ds, &cap, per, path)) < 0)
            goto out;
        if ((rc = parse_line(path, lineno, line, per, row, &ds->y[ds->n])) < 0 ||
            (rc = store_row(ds, cap, per, row, path)) < 0)
            goto out;
        if (ds->y[ds->n] > maxlabel)
            maxlabel = ds->y[ds->n];
        ds->n++;
    }
    if (ferror(f)) {
        rc = rt_error(RT_ERR_IO, "%s:%ld: read error: %s", path, lineno + 1, strerror(errno));
        goto out;
    }
    if (ds->n == 0) {
        rc = rt_error(RT_ERR_FORMAT, "%s:%ld: no data rows", path, lineno);
        goto out;
    }
    /* Give back the unused half of the last doubling. */
    void *x = realloc(ds->u8 ? (void *)ds->u8 : (void *)ds->f32,
                      (size_t)ds->n * per * rt_dataset_value_size(ds));
    if (x && ds->u8)
        ds->u8 = x;
    else if (x)
        ds->f32 = x;
    ds->classes = maxlabel + 1;
    snprintf(ds->name, sizeof ds->name, "%s", path);
    *out = ds;
    ds = NULL;
    rc = RT_OK;
out:
    rt_dataset_destroy(&ds);
    free(row);
    free(line);
    fclose(f);
    return rc;
}
