/* tally.c — a step's counts as exact float sums (tally.h). */
#include "config.h"

#include "tally.h"

#include <math.h>

void rt_tally_add_index(struct rt_tally *t, uint32_t idx)
{
    uint64_t q = (uint64_t)idx * idx;
    for (int k = 0; k < 8; k++)
        t->ib[k] += (idx >> (4 * k)) & 15u;
    for (int k = 0; k < 16; k++)
        t->qb[k] += (q >> (4 * k)) & 15u;
}

void rt_tally_encode(const struct rt_tally *t, float *out)
{
    out[0] = (float)t->loss;
    out[1] = (float)t->correct;
    out[2] = (float)t->seen;
    for (int k = 0; k < 8; k++)
        out[3 + k] = (float)t->ib[k];
    for (int k = 0; k < 16; k++)
        out[11 + k] = (float)t->qb[k];
}

void rt_tally_decode(const float *in, struct rt_tally *t)
{
    t->loss = in[0];
    t->correct = lrintf(in[1]);
    t->seen = lrintf(in[2]);
    for (int k = 0; k < 8; k++)
        t->ib[k] = (uint64_t)llrintf(in[3 + k]);
    for (int k = 0; k < 16; k++)
        t->qb[k] = (uint64_t)llrintf(in[11 + k]);
}

void rt_tally_used(const struct rt_tally *t, double used[3])
{
    double s = 0.0, q = 0.0;
    for (int k = 7; k >= 0; k--)
        s = s * 16.0 + (double)t->ib[k];
    for (int k = 15; k >= 0; k--)
        q = q * 16.0 + (double)t->qb[k];
    used[0] = (double)t->seen;
    used[1] = s;
    used[2] = q;
}
