/* rng.h — ragtag's one seeded random generator (xoshiro256**, seeded with
 * splitmix64), so runs repeat bit for bit on every machine. */
#ifndef RT_RNG_H
#define RT_RNG_H

#include <stdint.h>

typedef struct rt_rng {
    uint64_t s[4];
} rt_rng;

/* Seed from a seed and a stream number (e.g. epoch, layer index), so that
 * independent uses never share a sequence. */
void rt_rng_seed(rt_rng *r, uint64_t seed, uint64_t stream);
uint64_t rt_rng_next(rt_rng *r);
/* Uniform in [0,1). */
double rt_rng_uniform(rt_rng *r);
/* Uniform integer in [0, n). n > 0. */
uint64_t rt_rng_below(rt_rng *r, uint64_t n);
/* Standard normal (Box-Muller). */
double rt_rng_normal(rt_rng *r);

#endif
