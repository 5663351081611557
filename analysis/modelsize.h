/* What a run's model is, without the model: its parameters and nominal
 * FLOPs (MODEL.md "FLOPs"), from what the run file records (/model, written
 * by the trainer) or, for run files older than those records, counted from
 * the config through the kind table's tensors() and flops() rows.  Nothing
 * of the model is ever allocated, so a config far too large for this
 * machine (d_model 8192, 64 layers, 64 experts) is analysed in a few MiB. */
#ifndef MODE_ANALYSIS_MODELSIZE_H
#define MODE_ANALYSIS_MODELSIZE_H

#include "analysis/runinfo.h"
#include "core/config/config.h"
#include "core/model/kind.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct model_size {
    int64_t params;              /* every parameter, each expert counted */
    double forward_flops;        /* nominal forward FLOPs of one sequence: layers and head */
    double train_flops_per_step; /* nominal: 3 x forward x batch */
    bool recorded;               /* read from /model; false: counted from the config */
} model_size;

/* Count from the config: the embedding (V x d) and the final norm (d), each
 * layer's tensor descriptors (their shapes' products), each layer's flops()
 * and the head's.  -EINVAL with a message naming the layer for a kind the
 * table does not hold. */
int count_model_size(const run_config *c, const layer_kind *const *kinds, model_size *out,
                     char *err, int err_len);

/* A run's: /model/parameters and /model/forward_flops where the run file
 * has them (each checked against the config's layer count), else counted
 * from its config with the programs' kind table. */
int run_model_size(const run_info *ri, model_size *out, char *err, int err_len);

#endif
