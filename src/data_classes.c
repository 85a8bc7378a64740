/* data_classes.c — --classes: the images of some labels only, renumbered
 * (docs/data.md). Filtering happens in place, before --limit and the
 * validation split, so "--classes 5-9 --limit 1000" is the first 1,000
 * images of those labels. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "status.h"

/* One item, "N" or "N-M", into map (label -> new number); *k counts. */
static int class_item(const char *spec, const char *item, int classes, int *map, int *k)
{
    char *end;
    errno = 0;
    long a = strtol(item, &end, 10), b = a;
    bool ok = item[0] >= '0' && item[0] <= '9' && !errno;
    if (ok && *end == '-') {
        const char *s = end + 1;
        ok = *s >= '0' && *s <= '9';
        b = strtol(s, &end, 10);
        ok = ok && !errno;
    }
    if (!ok || *end || a > b)
        return rt_error(RT_ERR_CONFIG, "--classes %s: '%s' is not a label or a range of labels "
                                       "(accepted: 3, 0-4, 5,7,9)", spec, item);
    if (b >= classes)
        return rt_error(RT_ERR_CONFIG, "--classes %s: label %ld is not in the data set (its "
                                       "labels are 0 to %d)", spec, b, classes - 1);
    for (long v = a; v <= b; v++) {
        if (map[v] >= 0)
            return rt_error(RT_ERR_CONFIG, "--classes %s: label %ld is listed twice", spec, v);
        map[v] = (*k)++;
    }
    return RT_OK;
}

int rt_data_classes_parse(const char *spec, int classes, int *map, int *kept)
{
    RT_ASSERT(spec && map && kept && classes > 0);
    for (int i = 0; i < classes; i++)
        map[i] = -1;
    *kept = 0;
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", spec) >= (int)sizeof buf)
        return rt_error(RT_ERR_CONFIG, "--classes: the list is too long");
    for (char *it = buf, *next; it; it = next) {
        next = strchr(it, ',');
        if (next)
            *next++ = '\0';
        RT_TRY(class_item(spec, it, classes, map, kept));
    }
    if (*kept == 0)
        return rt_error(RT_ERR_CONFIG, "--classes '%s' names no label", spec);
    return RT_OK;
}

void rt_dataset_keep_classes(rt_dataset *ds, const int *map, int kept)
{
    size_t bytes = rt_dataset_sample_values(ds) * rt_dataset_value_size(ds);
    char *x = ds->u8 ? (char *)ds->u8 : (char *)ds->f32;
    long a = 0;
    for (long i = 0; i < ds->n; i++) {
        int to = map[ds->y[i]];
        if (to < 0)
            continue;
        if (a != i)
            memmove(x + (size_t)a * bytes, x + (size_t)i * bytes, bytes);
        ds->y[a++] = to;
    }
    ds->n = (int)a;
    ds->classes = kept;
}
