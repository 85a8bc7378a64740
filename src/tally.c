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

void rt_tally_add(struct rt_tally *t, const struct rt_tally *u)
{
    t->loss += u->loss;
    t->correct += u->correct;
    t->seen += u->seen;
    for (int k = 0; k < 8; k++)
        t->ib[k] += u->ib[k];
    for (int k = 0; k < 16; k++)
        t->qb[k] += u->qb[k];
}

/* Doubles hold every count exactly (each digit sum stays below 2^53). */
void rt_tally_to_f64(const struct rt_tally *t, double *out)
{
    out[0] = t->loss;
    out[1] = (double)t->correct;
    out[2] = (double)t->seen;
    for (int k = 0; k < 8; k++)
        out[3 + k] = (double)t->ib[k];
    for (int k = 0; k < 16; k++)
        out[11 + k] = (double)t->qb[k];
}

void rt_tally_from_f64(const double *in, struct rt_tally *t)
{
    t->loss = in[0];
    t->correct = lrint(in[1]);
    t->seen = lrint(in[2]);
    for (int k = 0; k < 8; k++)
        t->ib[k] = (uint64_t)llrint(in[3 + k]);
    for (int k = 0; k < 16; k++)
        t->qb[k] = (uint64_t)llrint(in[11 + k]);
}
