/* compress.c — 16-bit exchanges with error feedback (see compress.h). */
#include "config.h"

#include "compress.h"

#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "status.h"

enum rt_elem rt_compress_elem(enum rt_compress_kind k)
{
    return k == RT_COMPRESS_FP16 ? RT_ELEM_F16 : k == RT_COMPRESS_BF16 ? RT_ELEM_BF16
                                                                       : RT_ELEM_F32;
}

const char *rt_compress_name(enum rt_compress_kind k)
{
    return k == RT_COMPRESS_FP16 ? "fp16" : k == RT_COMPRESS_BF16 ? "bf16" : "none";
}

int rt_compress_init(struct rt_compress *z, enum rt_compress_kind k, size_t n, size_t ne)
{
    RT_ASSERT(k != RT_COMPRESS_NONE && ne <= n);
    memset(z, 0, sizeof *z);
    z->elem = rt_compress_elem(k);
    z->n = n;
    z->ne = ne;
    z->wire = calloc(n ? n : 1, sizeof *z->wire);
    z->err = calloc(ne ? ne : 1, sizeof *z->err);
    z->next = calloc(ne ? ne : 1, sizeof *z->next);
    if (!z->wire || !z->err || !z->next) {
        rt_compress_free(z);
        return rt_error(RT_ERR_NOMEM, "no memory for %s exchanges of %zu values",
                        rt_compress_name(k), n);
    }
    return RT_OK;
}

void rt_compress_free(struct rt_compress *z)
{
    free(z->wire);
    free(z->err);
    free(z->next);
    memset(z, 0, sizeof *z);
}

/* What rounding v to r lost; nothing when v overflowed to infinity or is
 * not a number (the sum shows it this step; the error buffer must not keep
 * it for every step after). */
static inline float carried(float v, float r)
{
    float d = v - r;
    return d - d == 0.0f ? d : 0.0f;
}

#define BLOCK 512 /* values rounded at a time (on the stack) */

void rt_compress_put(struct rt_compress *z, const float *x, size_t at, size_t count)
{
    RT_ASSERT(at <= z->ne && count <= z->ne - at);
    uint16_t *w = z->wire + at;
    const float *e = z->err + at;
    float *nx = z->next + at;
    bool f16 = z->elem == RT_ELEM_F16;
    float v[BLOCK], back[BLOCK];
    for (size_t b = 0; b < count; b += BLOCK) {
        size_t m = count - b < BLOCK ? count - b : BLOCK;
        for (size_t i = 0; i < m; i++)
            v[i] = x[b + i] + e[b + i];
        if (f16) {
            rt_f32_to_f16_n(w + b, v, m);
            rt_f16_to_f32_n(back, w + b, m);
        } else {
            rt_f32_to_bf16_n(w + b, v, m);
            rt_bf16_to_f32_n(back, w + b, m);
        }
        for (size_t i = 0; i < m; i++)
            nx[b + i] = carried(v[i], back[i]);
    }
}

void rt_compress_get(const struct rt_compress *z, float *x, size_t at, size_t count)
{
    RT_ASSERT(at <= z->n && count <= z->n - at);
    if (z->elem == RT_ELEM_F16)
        rt_f16_to_f32_n(x, z->wire + at, count);
    else
        rt_bf16_to_f32_n(x, z->wire + at, count);
}

void rt_compress_commit(struct rt_compress *z)
{
    float *t = z->err;
    z->err = z->next;
    z->next = t;
}

void rt_compress_reset(struct rt_compress *z)
{
    if (z->ne) {
        memset(z->err, 0, z->ne * sizeof *z->err);
        memset(z->next, 0, z->ne * sizeof *z->next);
    }
}
