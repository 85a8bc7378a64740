/* evaluate.h — loss and accuracy of a model over a data set, in inference
 * mode, reusing its buffers across epochs (not installed). */
#ifndef RT_EVALUATE_H
#define RT_EVALUATE_H

#include <stdio.h>

#include "backend.h"
#include "data.h"
#include "model.h"

typedef struct rt_evaluator rt_evaluator;

/* Buffers for batches of `batch` images shaped like `shape_of`'s. */
rt_evaluator *rt_evaluator_new(rt_model *m, rt_dev *dev, int batch, const rt_dataset *shape_of);
void rt_evaluator_destroy(rt_evaluator **ev);
/* Call tick(arg) after each batch an evaluation computes (a worker's
 * liveness). */
void rt_evaluator_set_tick(rt_evaluator *ev, void (*tick)(void *arg), void *arg);

/* Write each evaluated image's logits to `f` as one CSV line of `classes`
 * values (%.9g: float32 round-trips exactly), in data order; NULL stops. */
void rt_evaluator_set_logits(rt_evaluator *ev, FILE *f);

/* Summed loss, correct predictions and count of images [lo, hi) of ds in
 * sums[0..2]; fills `confusion` (classes^2, rows true) when given. */
int rt_evaluator_sums(rt_evaluator *ev, const rt_dataset *ds, long lo, long hi, double *sums,
                      long *confusion);
/* Mean loss and accuracy from such sums (NaN for no images). */
void rt_evaluator_metrics(const double *sums, double *loss, double *acc);

/* The sample shape of the model must be the data's, and the data's labels
 * must fit the model's classes: RT_ERR_SHAPE saying which numbers disagree. */
int rt_model_check_data(const rt_model *m, const rt_dataset *ds, const char *model_path);

#endif
