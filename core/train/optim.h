/* AdamW with decoupled weight decay on matrices only, linear warm-up then
 * cosine decay to 10% of the peak rate, global-norm gradient clipping.  All
 * three walk the model's flat buffers. */
#ifndef MODE_CORE_TRAIN_OPTIM_H
#define MODE_CORE_TRAIN_OPTIM_H

#include "core/config/config.h"
#include "core/model/keys.h"
#include "core/model/model.h"

#include <stdbool.h>

#define LR_FLOOR 0.1 /* cosine decays to this share of the peak rate */

typedef struct optim_cfg {
    double lr;           /* peak learning rate */
    long warmup;         /* steps of linear warm-up */
    long total_steps;    /* the cosine reaches LR_FLOOR * lr here */
    double weight_decay; /* decoupled, matrices only */
    double beta1, beta2, eps;
    double clip;         /* global-norm clip; <= 0 disables */
    bool shard;          /* ZeRO stage 1 over the data-parallel ranks (docs/sharding.md) */
    bool overlap;        /* the gradient sums started during the backward (docs/sharding.md) */
    long bucket_kb;      /* a gradient bucket's least size */
} optim_cfg;

/* The [optim] section's keys (optim.c declares them, with their defaults):
 * a key group whose struct is optim_cfg (total_steps is no key: the run's
 * planned steps). */
extern const key_group optim_group;
/* The optimizer of a config: its [optim] values, total_steps = run.steps
 * (the trainer sets the planned steps). */
optim_cfg optim_of_config(const run_config *c);

/* Learning rate of 0-based step: lr (step+1)/warmup during warm-up, then
 * lr (f + (1-f)(1 + cos(pi t))/2) with t the share of the remaining steps done. */
double lr_at(const optim_cfg *c, long step);

/* L2 norm of the whole gradient buffer (double accumulation, in vector
 * lanes). */
double grad_global_norm(const float *g, size_t n);
/* Scale the gradients so their norm is at most clip; returns the factor used. */
float clip_grad_norm(float *g, size_t n, double norm, double clip);

/* One AdamW update with the model's gradients, on the elements whose
 * moments this rank keeps (all of them unless sharded: model_tensor moff,
 * mlo, mcount); t is the 1-based update count (for the bias corrections).  p: a pool to split the parameters on (NULL:
 * one thread; element by element, so the result is the same). */
struct thread_pool;
void adamw_update(struct thread_pool *p, model *m, const optim_cfg *c, long t, double lr);

#endif
