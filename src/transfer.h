/* transfer.h — a run that starts from another model: --init (tensors of a
 * safetensors file, by name and shape) and --freeze (layers kept fixed).
 * docs/transfer.md. Not installed. */
#ifndef RT_TRANSFER_H
#define RT_TRANSFER_H

#include "model.h"
#include "optim.h"
#include "train.h"

/* Where the log lines go (a reporter's line, a coordinator's note). */
typedef int (*rt_note_fn)(void *arg, const char *line);

/* Load every tensor of `path` whose name and shape match one of m's
 * (parameters and batch-norm state); the others keep their values. Says
 * what was loaded and what was skipped, and why, through note. An
 * unreadable or malformed file is an error naming it; so is a file of
 * which no tensor fits. */
int rt_transfer_init(const char *path, rt_model *m, rt_note_fn note, void *arg);

/* A run's --freeze and --init on a model fresh from rt_model_init; says
 * which layers are frozen (`note` may be NULL: silent). */
int rt_transfer_prepare(rt_model *m, const struct rt_train_config *c, rt_note_fn note,
                        void *arg);

/* An optimiser for m's trainable parameters only (frozen layers get no
 * state): rt_optim_new_spans over rt_model_trainable_spans. */
rt_optim *rt_optim_new_trainable(rt_dev *d, const struct rt_optim_config *c, const rt_model *m);

#endif
