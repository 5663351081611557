/* Expert-parallel training state.  Every rank stores every parameter (a
 * checkpoint is one file), but with P <= E ranks only the rank that computes
 * expert e has a gradient for it: the others' is zero.  So, per step, the
 * shared tensors are summed over all ranks, each rank's own expert slices
 * are not communicated at all, the gradient norm adds each expert once, and
 * AdamW updates the shared tensors and the rank's own experts only.  The
 * other ranks' copies of an expert (and of its Adam moments) go stale until
 * shard_sync() copies every expert from its rank to all, which a checkpoint
 * does first.  With P > E (groups that each compute every expert), or one
 * rank, nothing is sharded: one all-reduce of everything, as before.
 *
 * The result is what the all-reduce of zero-padded expert gradients gave,
 * without moving the zeros and without E/P-fold repeated updates. */
#ifndef MODE_CORE_TRAIN_SHARD_H
#define MODE_CORE_TRAIN_SHARD_H

#include "core/model/model.h"
#include "core/train/optim.h"
#include "core/util/ctx.h"

#include <stdbool.h>

typedef struct span {
    long offset, count; /* into the flat buffers */
    int root;           /* expert slices: the rank that keeps it current */
} span;

typedef struct shard_plan {
    bool sharded;      /* false: one all-reduce and one update of everything */
    int n_shared;
    span *shared;      /* summed over all ranks (adjacent ones merged) */
    int n_own;
    span *own;         /* this rank's expert slices */
    int n_update;
    span *update;      /* shared and own, in buffer order: what AdamW updates */
    int n_slices;
    span *slices;      /* every expert slice, with its rank (for shard_sync) */
} shard_plan;

int build_shard_plan(shard_plan **out, const model *m, const mode_ctx *ctx);
void free_shard_plan(shard_plan **p);

/* Sum the gradients over the ranks that share them. */
int shard_reduce_grads(const shard_plan *p, mode_ctx *ctx, model *m);
/* The L2 norm of the whole (reduced) gradient; the same on every rank. */
int shard_grad_norm(const shard_plan *p, mode_ctx *ctx, const model *m, double *norm);
/* AdamW (adamw_update's rule) on the spans this rank keeps current. */
void shard_adamw(const shard_plan *p, mode_ctx *ctx, model *m, const optim_cfg *c, long t,
                 double lr);
/* Copy every expert slice (parameters and both moments) from its rank to
 * all; collective. */
int shard_sync(const shard_plan *p, mode_ctx *ctx, model *m);

#endif
