/* Expert-parallel training state.  A rank stores the shared tensors whole
 * and only its own experts (model_dims ranks and rank, core/model/spec.h):
 * their parameters, gradients and both Adam moments.  Per step:
 *   - the shared tensors' gradients are summed over all ranks;
 *   - with P <= E ranks, an expert's gradient is whole on its one rank
 *     already (the all-to-alls brought it every token routed to it): not
 *     communicated at all;
 *   - with P > E (groups of E ranks, each holding every expert once), the
 *     replicas of expert e (the ranks r with r mod E = e) sum their
 *     gradients among themselves, over a communicator of their own;
 *   - the gradient norm counts the shared part once and each expert once;
 *   - AdamW updates everything a rank holds.
 * With one rank, or no expert layer, it is one all-reduce of everything.
 * Sharded ([optim] shard, docs/sharding.md): each shared run is
 * reduce-scattered instead, the norm sums each rank's pieces, AdamW updates
 * the pieces whose moments the rank keeps, and the parameters are
 * all-gathered. */
#ifndef MODE_CORE_TRAIN_SHARD_H
#define MODE_CORE_TRAIN_SHARD_H

#include "core/model/model.h"
#include "core/train/optim.h"
#include "core/util/ctx.h"

#include <stdbool.h>

struct comm;
struct comm_sum;


/* The replicas of the experts of one expert count E (P > E), summed over
 * their own communicator. */
typedef struct replica_set {
    int E;
    struct comm *comm; /* the ranks holding this rank's expert of the E */
    int n;
    span *spans;
} replica_set;

typedef struct shard_plan {
    /* unsharded, P > 1: the shared gradients summed in rank order
     * (comm_sum), in runs by layer from the top, gathered in buckets of
     * about SHARD_BUCKET_FLOATS; ready[l] the runs whose gradients are final
     * once layer l's backward is done (the bucket it closes and those
     * above); tok_emb and final_norm last.  A bucket closes at the first
     * layer boundary past bucket floats ([optim] bucket_kb) */
    struct comm_sum *sum;
    int *ready; /* [n_layers] */
    int n_shared;
    span *shared;      /* summed over all ranks (model_shared_spans) */
    bool zero;         /* sharded: this rank keeps piece rank of each shared run */
    int *counts;       /* sharded: [n_shared][P] the pieces' lengths */
    int n_own;
    span *own;         /* expert slices whose norm this rank counts */
    int n_sets;
    replica_set *sets; /* P > E: expert slices summed among replicas */
} shard_plan;

/* Collective (sub-communicators for P > E).  Sharded when m was built so
 * (m->optim_shards > 1).  bucket: floats a gradient bucket holds at least
 * before it closes (at a layer's end). */
int build_shard_plan(shard_plan **out, const model *m, mode_ctx *ctx, long bucket);
void free_shard_plan(shard_plan **p);

/* Sum the gradients over the ranks that share them (what shard_layer_done
 * started, finished). */
int shard_reduce_grads(const shard_plan *p, mode_ctx *ctx, model *m);
/* During the backward, after layer l's (backward_hook): the buckets that are
 * final start their sums, and the sums in flight are moved on.  Unsharded
 * only (the reduce-scatter of a sharded optimizer waits for the end). */
int shard_layer_done(const shard_plan *p, int l);
/* The L2 norm of the whole (reduced) gradient; the same on every rank. */
int shard_grad_norm(const shard_plan *p, mode_ctx *ctx, const model *m, double *norm);
/* AdamW (adamw_update's rule) on everything this rank keeps moments of;
 * sharded, then the parameters all-gathered (collective). */
int shard_adamw(const shard_plan *p, mode_ctx *ctx, model *m, const optim_cfg *c, long t,
                 double lr);

#endif
