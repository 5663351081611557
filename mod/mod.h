/* The `mod` layer kind: Mixture-of-Depths (Raposo et al. 2024), expert-choice
 * routing of a whole block per sequence (MODEL.md "Layer kinds").  Its
 * description is mod_kind.c, its compute mod.c. */
#ifndef MODE_MOD_MOD_H
#define MODE_MOD_MOD_H

#include "core/model/kind.h"
#include "mod/router.h"

extern const layer_kind mod_kind;
extern const kind_ops mod_ops;

/* FLOPs of the block (attention, MLP) on rows rows in sequences whose row
 * counts square-sum to sum_sq. */
double mod_block_flops(const model_dims *dims, long rows, long sum_sq);

#endif
