/* samples.c — how a data set holds its pixels, and the floats the model
 * sees of them.
 *
 * Pixels are kept as the file stores them: bytes where the file's values
 * are bytes, floats otherwise (data.h). A byte becomes a float only when a
 * batch is gathered, through a 256-entry table built with the same float
 * expressions that scaling and normalising a float copy in place used, so
 * the numbers reaching the model are the same bits either way: the
 * compact storage changes the memory, never the training. */
#include "data.h"
#include "shards.h"
#include "status.h"

#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RT_PIXELS_AVX2 1
#endif
#include <stdlib.h>
#include <string.h>

/* ---- bytes to the model's floats ---------------------------------------------------- */

/* dst[k] = ((float)s[k] / 255 - sub) / div, 8 bytes at a time: the same
 * correctly rounded operations as the table's, so the same bits (lut_check
 * makes sure). A table look-up a byte bound the prefetch thread's gather
 * (lenet at 2 threads: 47 us a batch of 64, taken from the compute threads);
 * this runs at 2/3 of its time. */
#ifdef RT_PIXELS_AVX2
/* The first n / 8 * 8 bytes; returns how many it did. */
__attribute__((target("avx2"))) static size_t affine_bytes_avx2(const uint8_t *s, size_t n,
                                                                float sub, float div, float *dst)
{
    const __m256 k255 = _mm256_set1_ps(255.0f), vs = _mm256_set1_ps(sub),
                 vd = _mm256_set1_ps(div);
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(s + k));
        __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
        _mm256_storeu_ps(dst + k, _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(v, k255), vs), vd));
    }
    return k;
}
#endif

static bool have_avx2(void)
{
#ifdef RT_PIXELS_AVX2
    static int avx2 = -1;
    if (avx2 < 0)
        avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
    return avx2 == 1;
#else
    return false;
#endif
}

/* n bytes of pixels to floats: by arithmetic where the table allows it and
 * the CPU has AVX2, else through the table. */
static void bytes_to_floats(const rt_dataset *ds, const uint8_t *s, size_t n, float *dst)
{
    size_t k = 0;
#ifdef RT_PIXELS_AVX2
    if (ds->lut_affine && have_avx2())
        k = affine_bytes_avx2(s, n, ds->lut_sub, ds->lut_div, dst);
#endif
    for (; k < n; k++) /* the rest (all of it without the fast path) by the table */
        dst[k] = ds->lut[s[k]];
}

/* The arithmetic path is kept only where it gives the table's bits for
 * every byte value. */
static void lut_check(rt_dataset *ds)
{
    if (!ds->lut_affine)
        return;
    uint8_t all[256];
    float got[256];
    for (int v = 0; v < 256; v++)
        all[v] = (uint8_t)v;
    bytes_to_floats(ds, all, 256, got);
    ds->lut_affine = memcmp(got, ds->lut, sizeof got) == 0;
}

/* The table of a set that is not normalised yet: v / 255, as the readers
 * computed it for each pixel before sets were kept as bytes. */
static void lut_scaled(rt_dataset *ds)
{
    for (int v = 0; v < 256; v++)
        ds->lut[v] = (float)v / 255.0f;
    ds->lut_affine = true; /* (v / 255 - 0) / 1: the same bits */
    ds->lut_sub = 0.0f;
    ds->lut_div = 1.0f;
    lut_check(ds);
}

static rt_dataset *dataset_alloc(int n, int c, int h, int w, size_t value_size)
{
    if (n < 0 || c <= 0 || h <= 0 || w <= 0) {
        rt_error(RT_ERR_SHAPE, "impossible data set shape: %d images of %dx%dx%d", n, c, h, w);
        return NULL;
    }
    size_t per, total, bytes;
    if (__builtin_mul_overflow((size_t)c, (size_t)h, &per) ||
        __builtin_mul_overflow(per, (size_t)w, &per) ||
        __builtin_mul_overflow(per, (size_t)n, &total) ||
        __builtin_mul_overflow(total, value_size, &bytes)) {
        rt_error(RT_ERR_SHAPE, "data set too large: %d images of %dx%dx%d", n, c, h, w);
        return NULL;
    }
    rt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        goto fail;
    /* At least one element, so that an empty set still has valid pointers. */
    void *x = malloc(bytes ? bytes : value_size);
    if (value_size == 1)
        ds->u8 = x;
    else
        ds->f32 = x;
    ds->y = malloc(n ? (size_t)n * sizeof(int32_t) : sizeof(int32_t));
    if (!x || !ds->y)
        goto fail_arrays;
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    lut_scaled(ds);
    return ds;

fail_arrays:
    free(ds->y);
    free(x);
    free(ds);
fail:
    rt_error(RT_ERR_NOMEM, "out of memory for %d images of %dx%dx%d (%.1f MiB)", n, c, h, w,
             (double)bytes / (1024.0 * 1024.0));
    return NULL;
}

rt_dataset *rt_dataset_new(int n, int c, int h, int w)
{
    return dataset_alloc(n, c, h, w, sizeof(float));
}

rt_dataset *rt_dataset_new_u8(int n, int c, int h, int w)
{
    return dataset_alloc(n, c, h, w, 1);
}

rt_dataset *rt_dataset_new_shards(struct rt_shards **sh, uint32_t **map, long n)
{
    RT_ASSERT(sh && *sh && map && n >= 0 && n <= rt_shards_info(*sh)->n);
    const struct rt_shards_info *in = rt_shards_info(*sh);
    rt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) {
        rt_error(RT_ERR_NOMEM, "out of memory for a set of shards");
        return NULL;
    }
    ds->n = (int)n;
    ds->c = in->c;
    ds->h = in->h;
    ds->w = in->w;
    ds->classes = in->classes;
    ds->shards = *sh;
    ds->map = *map;
    *sh = NULL;
    *map = NULL;
    lut_scaled(ds);
    return ds;
}

void rt_dataset_destroy(rt_dataset **ds)
{
    if (!ds || !*ds)
        return;
    rt_shards_close(&(*ds)->shards);
    free((*ds)->map);
    free((*ds)->u8);
    free((*ds)->f32);
    free((*ds)->y);
    free(*ds);
    *ds = NULL;
}

size_t rt_dataset_sample_values(const rt_dataset *ds)
{
    return (size_t)ds->c * (size_t)ds->h * (size_t)ds->w;
}

size_t rt_dataset_value_size(const rt_dataset *ds)
{
    RT_ASSERT(ds && (ds->u8 != NULL) + (ds->f32 != NULL) + (ds->shards != NULL) == 1);
    return ds->f32 ? sizeof(float) : 1;
}

size_t rt_dataset_bytes(const rt_dataset *ds)
{
    if (ds->shards) /* on disk: in memory only its map */
        return ds->map ? (size_t)ds->n * sizeof(uint32_t) : 0;
    return (size_t)ds->n * (rt_dataset_sample_values(ds) * rt_dataset_value_size(ds) +
                            sizeof(int32_t));
}

float rt_dataset_value(const rt_dataset *ds, size_t i)
{
    RT_ASSERT(!ds->shards && i < (size_t)ds->n * rt_dataset_sample_values(ds));
    return ds->u8 ? ds->lut[ds->u8[i]] : ds->f32[i];
}

/* One sample's floats: a table look-up per byte, or a copy. */
static void sample_out(const rt_dataset *ds, size_t j, size_t per, float *dst)
{
    if (ds->u8) {
        bytes_to_floats(ds, ds->u8 + j * per, per, dst);
    } else {
        memcpy(dst, ds->f32 + j * per, per * sizeof(float));
    }
}

/* The record of sample j of a set kept in shards. */
static long record_of(const rt_dataset *ds, const uint32_t *idx, long first, long i)
{
    long j = idx ? (long)idx[i] : first + i;
    RT_ASSERT(j >= 0 && j < ds->n);
    return ds->map ? (long)ds->map[j] : ds->base + j;
}

/* Samples idx[i] (or first + i without idx) from shards: a record at a
 * time, through the table like bytes in memory. The kernel is told of
 * the batch's records first, so that reads from disk overlap. */
static int shard_samples(const rt_dataset *ds, const uint32_t *idx, long first, long n,
                         float *dst, int32_t *y)
{
    size_t per = rt_dataset_sample_values(ds);
    uint8_t *buf = malloc(rt_shards_record_size(ds->shards));
    if (!buf)
        return rt_error(RT_ERR_NOMEM, "out of memory reading %s", ds->name);
    for (long i = 0; i < n; i++)
        rt_shards_prefetch(ds->shards, record_of(ds, idx, first, i));
    int rc = RT_OK;
    for (long i = 0; i < n; i++) {
        const uint8_t *px;
        int32_t label;
        if ((rc = rt_shards_read(ds->shards, record_of(ds, idx, first, i), buf, &px, &label)) < 0)
            break;
        bytes_to_floats(ds, px, per, dst + (size_t)i * per);
        if (y)
            y[i] = label;
    }
    free(buf);
    return rc;
}

int rt_dataset_rows(const rt_dataset *ds, long first, long n, float *dst, int32_t *y)
{
    RT_ASSERT(ds && first >= 0 && n >= 0 && first + n <= ds->n && (dst || n == 0));
    if (ds->shards)
        return shard_samples(ds, NULL, first, n, dst, y);
    size_t per = rt_dataset_sample_values(ds);
    for (long i = 0; i < n; i++)
        sample_out(ds, (size_t)(first + i), per, dst + (size_t)i * per);
    if (y)
        memcpy(y, ds->y + first, (size_t)n * sizeof *y);
    return RT_OK;
}

/* A sample's bytes into the cache ahead of its turn: rows picked at random
 * from tens of MB miss every cache, and the hardware prefetcher only finds a
 * row's lines once it walks them (a batch's gather: 31 -> 21 us). */
static void prefetch_row(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
}

int rt_dataset_gather(const rt_dataset *ds, const uint32_t *idx, long n, float *dst, int32_t *y)
{
    RT_ASSERT(ds && n >= 0 && (dst || n == 0));
    if (ds->shards)
        return shard_samples(ds, idx, 0, n, dst, y);
    size_t per = rt_dataset_sample_values(ds);
    for (long i = 0; i < n; i++) {
        RT_ASSERT(idx[i] < (uint32_t)ds->n);
        if (ds->u8 && i + 2 < n) /* random rows: ask for the one after next now */
            prefetch_row(ds->u8 + (size_t)idx[i + 2] * per, per);
        sample_out(ds, idx[i], per, dst + (size_t)i * per);
        if (y)
            y[i] = ds->y[idx[i]];
    }
    return RT_OK;
}

void rt_dataset_slice(const rt_dataset *ds, long lo, long hi, rt_dataset *part)
{
    RT_ASSERT(ds && part && 0 <= lo && lo <= hi && hi <= ds->n);
    size_t off = (size_t)lo * rt_dataset_sample_values(ds);
    *part = *ds;
    part->n = (int)(hi - lo);
    if (ds->shards) {
        part->map = ds->map ? ds->map + lo : NULL;
        part->base = ds->base + lo;
        return;
    }
    if (ds->u8)
        part->u8 = ds->u8 + off;
    else
        part->f32 = ds->f32 + off;
    part->y = ds->y + lo;
}

int rt_dataset_widen(rt_dataset *ds, long room)
{
    RT_ASSERT(ds && room >= ds->n);
    if (!ds->u8)
        return RT_OK;
    size_t per = rt_dataset_sample_values(ds), total = (size_t)ds->n * per;
    float *f = malloc(room ? (size_t)room * per * sizeof(float) : sizeof(float));
    if (!f)
        return rt_error(RT_ERR_NOMEM, "out of memory widening %d images of %s to floats", ds->n,
                        ds->name[0] ? ds->name : "a data set");
    for (size_t i = 0; i < total; i++)
        f[i] = ds->lut[ds->u8[i]];
    free(ds->u8);
    ds->u8 = NULL;
    ds->f32 = f;
    return RT_OK;
}

/* One pass over the pixels in double, shifted by the first value so that
 * the sum of squares does not cancel; float sums would lose digits on 47
 * million pixels. Eight independent sums keep the adders busy. GET(i) is
 * the float value i: bytes go through the table, and the arithmetic is the
 * same as for floats, so the statistics are the same bits too. */
#define STATS_PASS(GET)                                                                            \
    do {                                                                                           \
        const double k = (GET(0));                                                                 \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) {                                                          \
                double d = (double)(GET(i + j)) - k;                                               \
                s[j] += d;                                                                         \
                q[j] += d * d;                                                                     \
            }                                                                                      \
        for (; i < n; i++) {                                                                       \
            double d = (double)(GET(i)) - k;                                                       \
            s[0] += d;                                                                             \
            q[0] += d * d;                                                                         \
        }                                                                                          \
        shift = k;                                                                                 \
    } while (0)

void rt_dataset_stats(const rt_dataset *ds, float *mean, float *std)
{
    RT_ASSERT(ds && mean && std && !ds->shards); /* shards carry theirs (shards.h) */
    size_t n = (size_t)ds->n * rt_dataset_sample_values(ds);
    if (n == 0) {
        *mean = 0.0f;
        *std = 0.0f;
        return;
    }
    double s[8] = {0}, q[8] = {0}, shift;
    if (ds->u8) {
        const uint8_t *x = ds->u8;
        const float *lut = ds->lut;
#define BYTE_VALUE(i) lut[x[(i)]]
        STATS_PASS(BYTE_VALUE);
#undef BYTE_VALUE
    } else {
        const float *x = ds->f32;
#define FLOAT_VALUE(i) x[(i)]
        STATS_PASS(FLOAT_VALUE);
#undef FLOAT_VALUE
    }
    double sum = 0.0, sq = 0.0;
    for (int j = 0; j < 8; j++) {
        sum += s[j];
        sq += q[j];
    }
    double m = sum / (double)n, var = sq / (double)n - m * m;
    *mean = (float)(shift + m);
    *std = (float)sqrt(var > 0.0 ? var : 0.0);
}

void rt_dataset_copy_lut(rt_dataset *dst, const rt_dataset *src)
{
    memcpy(dst->lut, src->lut, sizeof dst->lut);
    dst->lut_affine = src->lut_affine;
    dst->lut_sub = src->lut_sub;
    dst->lut_div = src->lut_div;
}

void rt_dataset_normalize(rt_dataset *ds, float mean, float std)
{
    RT_ASSERT(ds && std > 0.0f);
    if (ds->u8 || ds->shards) {
        for (int v = 0; v < 256; v++)
            ds->lut[v] = (ds->lut[v] - mean) / std;
        /* once: (v / 255 - 0) / 1 becomes (v / 255 - mean) / std */
        bool once = ds->lut_affine && ds->lut_sub == 0.0f && ds->lut_div == 1.0f;
        ds->lut_affine = once;
        ds->lut_sub = mean;
        ds->lut_div = std;
        lut_check(ds);
        return;
    }
    size_t total = (size_t)ds->n * rt_dataset_sample_values(ds);
    for (size_t i = 0; i < total; i++)
        ds->f32[i] = (ds->f32[i] - mean) / std;
}
