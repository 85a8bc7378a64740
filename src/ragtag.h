/* ragtag.h — the public API of libragtag in one include:
 *   #include <ragtag/ragtag.h>
 * Errors: status.h. Compute: backend.h. Models: model.h. Data: data.h.
 * Optimisers: optim.h. Checkpoints: checkpoint.h. Training: train.h. */
#ifndef RAGTAG_H
#define RAGTAG_H

#include "status.h"
#include "backend.h"
#include "model.h"
#include "data.h"
#include "optim.h"
#include "checkpoint.h"
#include "train.h"

#endif
