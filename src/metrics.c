/* metrics.c — JSON Lines writer for --metrics. Hand-written: the objects are
 * flat maps of numbers and short strings, and each line must be flushed. */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

struct rt_metrics {
    FILE *f;
    char path[1024];
    int fields;
    int outer; /* the fields of the line around a nested object */
};

rt_metrics *rt_metrics_open(const char *path)
{
    rt_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->f = fopen(path, "a");
    if (!m->f) {
        rt_error(RT_ERR_IO, "cannot open metrics file %s: %s", path, strerror(errno));
        free(m);
        return NULL;
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    return m;
}

void rt_metrics_close(rt_metrics **mp)
{
    if (!mp || !*mp)
        return;
    fclose((*mp)->f);
    free(*mp);
    *mp = NULL;
}

static void put_key(rt_metrics *m, const char *key)
{
    fprintf(m->f, "%s\"%s\": ", m->fields++ ? ", " : "", key);
}

void rt_metrics_begin(rt_metrics *m)
{
    m->fields = 0;
    fputc('{', m->f);
}

void rt_metrics_str(rt_metrics *m, const char *key, const char *value)
{
    put_key(m, key);
    fputc('"', m->f);
    for (const char *p = value; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\')
            fprintf(m->f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(m->f, "\\u%04x", ch);
        else
            fputc(ch, m->f);
    }
    fputc('"', m->f);
}

void rt_metrics_num(rt_metrics *m, const char *key, double value)
{
    put_key(m, key);
    if (isfinite(value))
        fprintf(m->f, "%.6g", value);
    else
        fputs("null", m->f);
}

void rt_metrics_int(rt_metrics *m, const char *key, long value)
{
    put_key(m, key);
    fprintf(m->f, "%ld", value);
}

int rt_metrics_end(rt_metrics *m)
{
    fputs("}\n", m->f);
    if (fflush(m->f) != 0)
        return rt_error(RT_ERR_IO, "writing metrics file %s: %s", m->path, strerror(errno));
    return RT_OK;
}

void rt_metrics_map_begin(rt_metrics *m, const char *key)
{
    put_key(m, key);
    fputc('{', m->f);
    m->outer = m->fields;
    m->fields = 0;
}

void rt_metrics_map_end(rt_metrics *m)
{
    fputc('}', m->f);
    m->fields = m->outer;
}
