/* half.c — 16-bit floats (see half.h). The fp16 rounding is F. Giesen's
 * "float_to_half_fast3_rtne" (public domain): integer rounding for normal
 * results, one float addition of a magic constant for subnormal ones. */
#include "config.h"

#include "half.h"

#include <stdbool.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HALF_X86 1
#endif

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t rt_f32_to_f16(float f)
{
    const uint32_t f32_inf = 255u << 23, f16_overflow = (127u + 16u) << 23;
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t u = bits(f);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint32_t o;
    if (u > f32_inf)                   /* NaN: the one quiet NaN (see half.h) */
        return 0x7e00u;
    if (u >= f16_overflow) {           /* 65536 and above, infinity */
        o = 0x7c00u;
    } else if (u < (113u << 23)) {     /* below 2^-14: subnormal or zero */
        /* the magic addend puts the 10 mantissa bits at the bottom; the
         * float addition rounds to nearest even */
        o = bits(from_bits(u) + from_bits(denorm_magic)) - denorm_magic;
    } else {
        uint32_t odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd; /* rebias, round half to even */
        o = u >> 13;                   /* a carry out of 65504 gives 0x7c00: infinity */
    }
    return (uint16_t)(o | (sign >> 16));
}

float rt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        /* m x 2^-24: exact in float */
        float v = (float)m * 0x1p-24f;
        return from_bits(bits(v) | sign);
    }
    if (e == 31)
        return from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    return from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t rt_f32_to_bf16(float f)
{
    uint32_t u = bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0u; /* NaN: the one quiet NaN, never rounded into infinity */
    u += 0x7fffu + ((u >> 16) & 1u);         /* half to even; overflow gives infinity */
    return (uint16_t)(u >> 16);
}

float rt_bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

#ifdef HALF_X86
/* F16C rounds as the scalar code does; only NaN differs (it keeps payload
 * and sign): every NaN becomes the scalar code's one quiet NaN. */
__attribute__((target("avx,f16c"))) static inline __m128i narrow8(__m256 v)
{
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
    return _mm_or_si128(_mm_andnot_si128(nan, h), _mm_and_si128(nan, _mm_set1_epi16(0x7e00)));
}

__attribute__((target("avx,f16c"))) static size_t f16c_narrow(uint16_t *d, const float *s,
                                                               size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), narrow8(_mm256_loadu_ps(s + i)));
    return i;
}

__attribute__((target("avx,f16c"))) static size_t f16c_widen(float *d, const uint16_t *s,
                                                              size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    return i;
}

__attribute__((target("avx,f16c"))) static size_t f16c_add(uint16_t *d, const uint16_t *s,
                                                            size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(d + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm_storeu_si128((__m128i *)(d + i), narrow8(_mm256_add_ps(a, b)));
    }
    return i;
}

static bool have_f16c(void)
{
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}
#endif

void rt_f32_to_f16_n(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
#ifdef HALF_X86
    if (have_f16c())
        i = f16c_narrow(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = rt_f32_to_f16(src[i]);
}

void rt_f16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
#ifdef HALF_X86
    if (have_f16c())
        i = f16c_widen(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = rt_f16_to_f32(src[i]);
}

/* bfloat16 over arrays: with AVX2 8 at a time, the same integer rounding
 * as rt_f32_to_bf16 (so the same bits): the ring adds every compressed
 * element it receives, and the scalar loop cost ~15-45 ns an element (a
 * seedcnn step of 4 workers: 0.8 M additions a rank), against ~0.2 ns. */
#ifdef HALF_X86
__attribute__((target("avx2"))) static inline __m256i bf16_round8(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
    r = _mm256_srli_epi32(r, 16);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
}

/* 16 floats to 16 bfloat16s in order (packus works per 128-bit lane) */
__attribute__((target("avx2"))) static inline void bf16_store16(uint16_t *d, __m256 a, __m256 b)
{
    __m256i p = _mm256_packus_epi32(bf16_round8(a), bf16_round8(b));
    _mm256_storeu_si256((__m256i *)d, _mm256_permute4x64_epi64(p, 0xd8));
}

__attribute__((target("avx2"))) static inline __m256 bf16_load8(const uint16_t *s)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

__attribute__((target("avx2"))) static size_t avx2_bf16_narrow(uint16_t *d, const float *s,
                                                               size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        bf16_store16(d + i, _mm256_loadu_ps(s + i), _mm256_loadu_ps(s + i + 8));
    return i;
}

__attribute__((target("avx2"))) static size_t avx2_bf16_widen(float *d, const uint16_t *s,
                                                              size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, bf16_load8(s + i));
    return i;
}

__attribute__((target("avx2"))) static size_t avx2_bf16_add(uint16_t *d, const uint16_t *s,
                                                            size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_add_ps(bf16_load8(d + i), bf16_load8(s + i));
        __m256 b = _mm256_add_ps(bf16_load8(d + i + 8), bf16_load8(s + i + 8));
        bf16_store16(d + i, a, b);
    }
    return i;
}

static bool have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#endif

void rt_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
#ifdef HALF_X86
    if (have_avx2())
        i = avx2_bf16_narrow(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = rt_f32_to_bf16(src[i]);
}

void rt_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
#ifdef HALF_X86
    if (have_avx2())
        i = avx2_bf16_widen(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = rt_bf16_to_f32(src[i]);
}

void rt_f16_add(uint16_t *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
#ifdef HALF_X86
    if (have_f16c())
        i = f16c_add(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = rt_f32_to_f16(rt_f16_to_f32(dst[i]) + rt_f16_to_f32(src[i]));
}

void rt_bf16_add(uint16_t *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
#ifdef HALF_X86
    if (have_avx2())
        i = avx2_bf16_add(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = rt_f32_to_bf16(rt_bf16_to_f32(dst[i]) + rt_bf16_to_f32(src[i]));
}
