/* compress.h — 16-bit exchanges with error feedback (--compress fp16|bf16).
 *
 * A worker's float values x (its gradient in sync mode, its parameter change
 * in average mode) go to the network rounded to 16 bits. What the rounding
 * lost stays with the worker, in its own buffer, and is added to the next
 * step's values before they are rounded (error feedback, as in 1-bit SGD
 * and PowerSGD): summed over steps, what a worker sent tracks what it
 * computed within one rounding, so the model sees every gradient in the
 * end. The ring adds 16-bit elements (base/half.h) and every rank widens
 * the same sums to float: replicas stay bitwise identical.
 *
 * Not installed. */
#ifndef RT_COMPRESS_H
#define RT_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collective.h"
#include "train.h"

struct rt_compress {
    enum rt_elem elem; /* RT_ELEM_F16 or RT_ELEM_BF16 */
    size_t n;          /* elements of the wire buffer (the collective's whole length) */
    size_t ne;         /* elements with an error carried (the first ne) */
    uint16_t *wire;    /* what travels */
    float *err;        /* the rounding error carried into this step */
    float *next;       /* the one this step leaves (err once the step completed) */
};

/* The element type of a --compress kind (RT_ELEM_F32 for none). */
enum rt_elem rt_compress_elem(enum rt_compress_kind k);
const char *rt_compress_name(enum rt_compress_kind k);
/* A wire buffer of n elements, errors for the first ne of them (zero). */
int rt_compress_init(struct rt_compress *z, enum rt_compress_kind k, size_t n, size_t ne);
void rt_compress_free(struct rt_compress *z);
/* wire[at + i] = round(x[i] + err[at + i]), next[at + i] = what that
 * rounding lost, for i < count (at + count <= ne). */
void rt_compress_put(struct rt_compress *z, const float *x, size_t at, size_t count);
/* x[i] = wire[at + i] widened, for i < count. */
void rt_compress_get(const struct rt_compress *z, float *x, size_t at, size_t count);
/* The exchange completed: this step's errors are carried to the next. A
 * step that failed (the members changed) leaves err as it was, so the step
 * done again carries the same error once. */
void rt_compress_commit(struct rt_compress *z);
/* Forget the errors (a worker that took another's state). */
void rt_compress_reset(struct rt_compress *z);

#endif
