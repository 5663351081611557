/* What a model of a layer-spec table costs, from the kinds' descriptions
 * alone (their rows of layer_kind: keys, tensors, FLOPs, state sizes):
 * nominal FLOPs and memory, counted without building or running anything.
 * mode-exp plan, flops and sweep, the config's budgets and mode-analyze use
 * these; analysis links no compute (tests/analysis/links.sh). */
#ifndef MODE_CORE_MODEL_PLAN_H
#define MODE_CORE_MODEL_PLAN_H

#include "core/model/kind.h"
#include "core/model/spec.h"

#include <stdbool.h>

/* MODEL.md "FLOPs": a training step costs 3 x its forward (the backward
 * computes two products for each of the forward's). */
#define MODE_TRAIN_FLOPS_PER_FORWARD 3.0

/* The LM head's forward FLOPs for one sequence: 2 S d V. */
double model_head_flops_per_seq(const model_dims *dims);
/* The one count of nominal forward FLOPs of one sequence (MODEL.md): the LM
 * head, then layer l of kind kinds[l] and spec specs[l] for l < n (into
 * per_layer[l] when not NULL), summed in that order. */
/* The same in training at step (layer_kind.flops_at); *steady: the first
 * step from which every layer's are its nominal ones. */
double stack_flops_per_seq_at(const model_dims *dims, int n, const layer_spec *specs,
                              const layer_kind *const *kinds, long step, long *steady);
double stack_flops_per_seq(const model_dims *dims, int n, const layer_spec *specs,
                           const layer_kind *const *kinds, double *per_layer);
/* What a model of these dims (ranks and rank placing the experts) takes on
 * one rank, in bytes, counted from the kind table without allocating
 * anything (mode-exp plan).  shard_optim: [optim] shard, the shared
 * tensors' moments spread over the ranks (model_shard_optim). */
typedef struct model_memory {
    double shared;      /* the shared tensors' parameters, gradients and both moments */
    double shared_optim; /* of which the moments: 1/P of them when sharded */
    double experts;     /* the same for this rank's experts */
    double activations; /* the residual stream, logits, the layers' caches and buffers */
    double work;        /* backward work space, the comm buffers the kinds keep, the
                         * gradient sums' (unsharded, P > 1) */
    double params_all;  /* parameters of the whole model, every expert (count) */
} model_memory;
int model_plan_memory(model_memory *out, const model_dims *dims, const layer_spec *specs,
                      const layer_kind *const *table, int max_seq, bool shard_optim, char *err,
                      int err_len);

#endif
