/* csv.c — labelled images as CSV, one image a line: the label, then c*h*w
 * pixel values 0..255 (Dist-Keras' mnist.csv, Kaggle's digit files). For
 * c > 1 the pixels are taken channel by channel (planar, as in CIFAR-10's
 * binary files). A first line whose first field is not a number is a header
 * and skipped; empty lines are skipped; anything else that is not a whole
 * row of numbers in range is an error naming file:line. */
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

/* Parse one data line into x[0..per-1] and *label. */
static int parse_line(const char *path, long lineno, const char *line, size_t per, float *x,
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
            x[f - 1] = (float)v / 255.0f;
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
    float *x = realloc(ds->x, (size_t)ncap * per * sizeof(float));
    if (!x)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory after %d rows", path, ds->n);
    ds->x = x;
    int32_t *y = realloc(ds->y, (size_t)ncap * sizeof(int32_t));
    if (!y)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory after %d rows", path, ds->n);
    ds->y = y;
    *cap = ncap;
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
    if (!(ds = rt_dataset_new(0, c, h, w))) {
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
        if ((rc = parse_line(path, lineno, line, per, ds->x + (size_t)ds->n * per,
                             &ds->y[ds->n])) < 0)
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
    float *x = realloc(ds->x, (size_t)ds->n * per * sizeof(float));
    if (x)
        ds->x = x;
    ds->classes = maxlabel + 1;
    snprintf(ds->name, sizeof ds->name, "%s", path);
    *out = ds;
    ds = NULL;
    rc = RT_OK;
out:
    rt_dataset_destroy(&ds);
    free(line);
    fclose(f);
    return rc;
}
