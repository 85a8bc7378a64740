/* half.h — 16-bit floats (IEEE binary16 "fp16" and bfloat16) to and from
 * float, bit for bit the same on every machine.
 *
 * Used where gradients travel compressed (--compress, docs/cluster.md):
 * the core rounds a worker's float gradient to 16 bits, the ring adds 16-bit
 * elements (to float, add, round back), every rank widens the result. All of
 * it is integer work plus, for fp16 subnormals, one float addition in the
 * default rounding mode: the same bits on every rank and compiler, with or
 * without hardware half support.
 *
 * Rounding is to nearest, ties to even. fp16: values from 65520 on become
 * infinity; below 2^-14 subnormals, below 2^-25 zero (signed). Infinities
 * stay infinities; every NaN becomes one quiet NaN (0x7e00, bf16 0x7fc0):
 * the sign and payload of a NaN that an addition makes differ between
 * CPUs, compilers and vector units, and replicas must not. bfloat16 keeps
 * float's exponent range, so only the mantissa is rounded. */
#ifndef RT_HALF_H
#define RT_HALF_H

#include <stddef.h>
#include <stdint.h>

uint16_t rt_f32_to_f16(float f);
float rt_f16_to_f32(uint16_t h);
uint16_t rt_f32_to_bf16(float f);
float rt_bf16_to_f32(uint16_t h);

/* The same over arrays, with the CPU's F16C (fp16) and AVX2 (bfloat16)
 * instructions where it has them (the same bits: IEEE rounding to nearest
 * even, and the one NaN), so a rank with them and one without agree. */
void rt_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);
void rt_f16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void rt_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void rt_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/* dst[i] = 16-bit sum of dst[i] and src[i] (widened, added in float,
 * rounded back): the ring's reduction of compressed elements. */
void rt_f16_add(uint16_t *dst, const uint16_t *src, size_t n);
void rt_bf16_add(uint16_t *dst, const uint16_t *src, size_t n);

#endif
