/* A selector of rows by Bernoulli draws (stochastic depth, Huang et al.
 * 2016; LayerDrop, Fan et al. 2020), for the `drop` kind: in training a
 * draw per sequence (a dropped one costs nothing) or per token (every row
 * runs, a dropped one with gate 0); in evaluation and decoding every row,
 * or none when the layer is pruned.  The gate is the update's scale. */
#ifndef MODE_MOD_SELECT_DRAWS_H
#define MODE_MOD_SELECT_DRAWS_H

#include "core/model/kind.h"
#include "mod/routed.h"

#include <stdbool.h>

typedef struct draws_rule {
    double p;       /* the layer's drop probability in training */
    bool per_token; /* a draw per token, else per sequence */
    bool rescale;   /* kept updates / (1 - p) in training, else x (1 - p) in evaluation */
    bool pruned;    /* evaluation and decoding skip the layer */
} draws_rule;

/* The rows of the batch that run the block, and their scales, into set;
 * returns how many of them were kept (a non-zero scale). */
double select_draws(routed_set *set, const draws_rule *r, const fwd_args *a, int layer_index);
/* Decoding: 1 with the row's scale in *gate, or 0 when the layer is pruned. */
int select_draws_decide(const draws_rule *r, float *gate);

#endif
