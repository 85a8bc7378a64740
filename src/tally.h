/* tally.h — what a step counts, in a form that travels with its gradient.
 *
 * A step's loss sum, correct answers and samples, and the count, sum and
 * sum of squares of its samples' dataset indices (the check that every
 * sample is used once per epoch). A sync step appends them to the gradient
 * as RT_TALLY_FLOATS floats, so the ring's sum gives every worker the
 * batch's counts at no extra message, and a worker lost mid-epoch takes no
 * counts with it. The integers are cut into 4-bit digits: a digit summed
 * over a batch of at most 2^20 samples stays below 2^24, where float sums
 * are exact in any order. Not installed. */
#ifndef RT_TALLY_H
#define RT_TALLY_H

#include <stdint.h>

#define RT_TALLY_FLOATS 27 /* loss, correct, seen, 8 digits of i, 16 of i*i */

struct rt_tally {
    double loss;      /* sum of the samples' losses */
    long correct;     /* samples classified right */
    long seen;        /* samples */
    uint64_t ib[8];   /* sums of the 4-bit digits of the samples' indices */
    uint64_t qb[16];  /* ... and of their squares */
};

/* One sample of dataset index idx. */
void rt_tally_add_index(struct rt_tally *t, uint32_t idx);
/* t to RT_TALLY_FLOATS floats, and back (after they were summed). */
void rt_tally_encode(const struct rt_tally *t, float *out);
void rt_tally_decode(const float *in, struct rt_tally *t);
/* t += u. */
void rt_tally_add(struct rt_tally *t, const struct rt_tally *u);
/* t as RT_TALLY_FLOATS doubles (for an f64 sum: exact at any size), and back. */
void rt_tally_to_f64(const struct rt_tally *t, double *out);
void rt_tally_from_f64(const double *in, struct rt_tally *t);
/* The count, sum and sum of squares of the indices. */
void rt_tally_used(const struct rt_tally *t, double used[3]);

#endif
