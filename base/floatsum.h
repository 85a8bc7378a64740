/* floatsum.h — elementwise sums of float and double buffers, for the
 * collectives (the ring's add of a received chunk, the in-place sum of a
 * host's gradients).
 *
 * Why here: compiled at -O2 those loops ran one float an instruction
 * (GCC 12 vectorises at -O2 only loops whose trip count it knows); these
 * run the widest vectors the CPU has, picked at load time. Every element is
 * one add per source, in the order given, so the bits are those of the
 * scalar loop on any CPU: replicas stay identical across machines. */
#ifndef RT_FLOATSUM_H
#define RT_FLOATSUM_H

#include <stddef.h>

/* d[i] += s[i], i < n; d and s do not overlap. */
void rt_f32_add(float *d, const float *s, size_t n);
void rt_f64_add(double *d, const double *s, size_t n);

/* d[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ..., i < n, over nsrc >= 1
 * sources; d may be one of them (each element is read before it is
 * written), no other overlap. */
void rt_f32_sum_sources(float *d, const float *const *src, int nsrc, size_t n);

#endif
