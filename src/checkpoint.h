/* checkpoint.h — safetensors files, and checkpoints built on them.
 *
 * A checkpoint is one safetensors file: the model's tensors under their
 * names (numpy / PyTorch read them as-is), the optimiser state as tensors
 * named "optimizer.<state name>", and, in the string metadata, the training
 * position and the RNG seed. Writes go to a temporary file in the same
 * directory, are fsync'ed and renamed over the target (and the directory is
 * fsync'ed): a crash leaves the old file or the new one, never a torn one. */
#ifndef RT_CHECKPOINT_H
#define RT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"

/* ---- safetensors (F32 only, little-endian) ---------------------------------- */

struct rt_st_tensor {
    const char *name;
    int ndim;
    int64_t dims[4];
    const float *data; /* host memory, product(dims) floats */
};

struct rt_st_meta {
    const char *key, *value;
};

int rt_safetensors_write(const char *path, const struct rt_st_tensor *t, int nt,
                         const struct rt_st_meta *meta, int nmeta);
/* Whether rt_safetensors_write could make path now (a file can be created
 * in its directory; path is not a directory): asked before a run, so that
 * its --save fails at the start and not after the training. */
int rt_safetensors_can_write(const char *path);

typedef struct rt_st_file rt_st_file;
/* Reads and validates the whole file (header JSON, dtypes, offsets inside the
 * data, no overlaps); RT_ERR_FORMAT naming path and what is wrong. */
int rt_safetensors_read(const char *path, rt_st_file **out);
void rt_st_file_destroy(rt_st_file **f);
int rt_st_count(const rt_st_file *f);
/* i-th tensor (in file order); data points into the file's memory. */
int rt_st_get(const rt_st_file *f, int i, struct rt_st_tensor *out);
/* By name: RT_ERR_NOTFOUND when absent. */
int rt_st_find(const rt_st_file *f, const char *name, struct rt_st_tensor *out);
/* Metadata value or NULL. */
const char *rt_st_meta_get(const rt_st_file *f, const char *key);

/* ---- checkpoints ------------------------------------------------------------ */

/* Where training stands. */
struct rt_train_pos {
    long epoch;        /* epochs completed */
    long step;         /* optimiser steps completed */
    uint64_t seed;
    double best_metric; /* early stopping: best monitored value so far */
    long best_epoch;
    long bad_epochs;   /* epochs since the best */
};

/* Make the checkpoint directory when missing, and remove the temporary
 * files that writes killed midway left there (their writer process is gone:
 * no rename will ever come). *removed counts them. */
int rt_checkpoint_dir_open(const char *dir, int *removed);

/* Save model tensors (and optimiser state when o != NULL) and position. */
int rt_checkpoint_save(const char *path, const rt_model *m, const rt_optim *o,
                       const struct rt_train_pos *pos);
/* Load into an already-built model (names and shapes must match, else an
 * error naming the tensor); optimiser state and position when asked. */
int rt_checkpoint_load(const char *path, rt_model *m, rt_optim *o, struct rt_train_pos *pos);

#endif
