/* freeze.c — frozen layers: which layers --freeze names, and which parts
 * of the parameter buffer stay trainable (docs/transfer.md). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "optim.h"
#include "status.h"

/* The layer called `name`, or -1. */
static int layer_by_name(const rt_model *m, const char *name)
{
    for (int i = 0; i < rt_model_layer_count(m); i++)
        if (strcmp(rt_model_layer_const(m, i)->name, name) == 0)
            return i;
    return -1;
}

/* "N" or "N-M", 1-based; false when `item` is not of that form. */
static bool parse_range(const char *item, long *a, long *b)
{
    char *end;
    if (*item < '0' || *item > '9')
        return false;
    errno = 0;
    *a = strtol(item, &end, 10);
    *b = *a;
    if (*end == '-') {
        const char *s = end + 1;
        if (*s < '0' || *s > '9')
            return false;
        *b = strtol(s, &end, 10);
    }
    return !errno && *end == '\0';
}

static int freeze_item(rt_model *m, const char *item, const char *where)
{
    int L = rt_model_layer_count(m);
    long a, b;
    if (parse_range(item, &a, &b)) {
        if (a < 1 || b > L || a > b)
            return rt_error(RT_ERR_CONFIG,
                            "%s: '%s' is not a range of layers (accepted: numbers from 1 to %d, "
                            "as in the layer names: conv1 is layer 1; ranges low-high)",
                            where, item, L);
        for (long i = a; i <= b; i++)
            rt_model_layer(m, (int)i - 1)->frozen = true;
        return RT_OK;
    }
    int i = layer_by_name(m, item);
    if (i < 0) {
        char names[512] = "";
        for (int k = 0; k < L; k++) {
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "",
                     rt_model_layer_const(m, k)->name);
        }
        return rt_error(RT_ERR_CONFIG,
                        "%s: no layer '%s' in the model (its layers: %s; or numbers and "
                        "ranges such as 1-4)", where, item, names);
    }
    rt_model_layer(m, i)->frozen = true;
    return RT_OK;
}

int rt_model_freeze(rt_model *m, const char *spec, const char *where)
{
    RT_ASSERT(m && spec && where);
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", spec) >= (int)sizeof buf)
        return rt_error(RT_ERR_CONFIG, "%s: the list of layers is too long", where);
    int items = 0;
    for (char *it = buf, *next; it; it = next) {
        next = strchr(it, ',');
        if (next)
            *next++ = '\0';
        while (*it == ' ')
            it++;
        size_t n = strlen(it);
        while (n && it[n - 1] == ' ')
            it[--n] = '\0';
        if (!n)
            return rt_error(RT_ERR_CONFIG, "%s: '%s' has an empty item", where, spec);
        RT_TRY(freeze_item(m, it, where));
        items++;
    }
    if (!items)
        return rt_error(RT_ERR_CONFIG, "%s: '%s' names no layer", where, spec);
    return RT_OK;
}

bool rt_model_layer_frozen(const rt_model *m, int layer)
{
    return rt_model_layer_const(m, layer)->frozen;
}

static bool trainable(const struct rt_layer *l) { return l->params > 0 && !l->frozen; }

int rt_model_lowest_trainable(const rt_model *m)
{
    int L = rt_model_layer_count(m);
    for (int i = 0; i < L; i++)
        if (trainable(rt_model_layer_const(m, i)))
            return i;
    return L - 1;
}

size_t rt_model_trainable_from(const rt_model *m)
{
    int L = rt_model_layer_count(m);
    for (int i = 0; i < L; i++)
        if (trainable(rt_model_layer_const(m, i)))
            return rt_model_layer_const(m, i)->param_off;
    return rt_model_param_count(m);
}

size_t rt_model_trainable_count(const rt_model *m)
{
    size_t n = 0;
    for (int i = 0; i < rt_model_layer_count(m); i++)
        if (trainable(rt_model_layer_const(m, i)))
            n += rt_model_layer_const(m, i)->params;
    return n;
}

int rt_model_trainable_spans(const rt_model *m, struct rt_span *spans, int cap)
{
    int n = 0;
    for (int i = 0; i < rt_model_layer_count(m); i++) {
        const struct rt_layer *l = rt_model_layer_const(m, i);
        if (!trainable(l))
            continue;
        if (n && spans[n - 1].off + spans[n - 1].len == l->param_off) {
            spans[n - 1].len += l->params;
            continue;
        }
        RT_ASSERT(n < cap);
        spans[n++] = (struct rt_span){l->param_off, l->params};
    }
    return n;
}

void rt_model_frozen_text(const rt_model *m, char *buf, size_t n)
{
    size_t len = 0, count = 0;
    buf[0] = '\0';
    for (int i = 0; i < rt_model_layer_count(m); i++) {
        const struct rt_layer *l = rt_model_layer_const(m, i);
        if (!l->frozen)
            continue;
        count += l->params;
        if (len < n)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", l->name);
    }
    if (!len)
        snprintf(buf, n, "none");
    else if (len < n)
        snprintf(buf + len, n - len, " (%zu parameters)", count);
}
