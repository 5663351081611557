/* Checkpoints (HDF5): MODEL.md's tensor names at the root and under
 * layers/l/, each layer group with its `kind` and hyper-parameters as
 * attributes; the root with the resolved config and the model sizes; the
 * Adam moments under optim/m/ and optim/v/ with the same paths; the step.
 * Every random draw is keyed by (seed, step, ...), so seed and step are the
 * whole RNG state.  Written atomically: a crash leaves the previous file. */
#ifndef MODE_CORE_IO_CHECKPOINT_H
#define MODE_CORE_IO_CHECKPOINT_H

#include "core/model/model.h"

#include <stdbool.h>

typedef struct ckpt_meta {
    long step;      /* optimizer updates done */
    uint64_t seed;
    char *config;   /* malloc'd resolved INI text */
} ckpt_meta;

int checkpoint_save(const char *path, const model *m, const char *config_text, long step,
                    uint64_t seed, char *err, int err_len);
/* Read the metadata (config text, step, seed) to rebuild the model. */
int checkpoint_read_meta(const char *path, ckpt_meta *meta, char *err, int err_len);
void ckpt_meta_clear(ckpt_meta *meta);
/* Fill m's parameters (and the Adam moments when with_optim) from path; every
 * tensor must exist with the model's shape. */
int checkpoint_load(const char *path, model *m, bool with_optim, char *err, int err_len);

#endif
