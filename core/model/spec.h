/* What a model is made of: its sizes, one spec per layer (a row of the
 * layer-spec table), and the descriptors of the tensors each layer owns. */
#ifndef MODE_CORE_MODEL_SPEC_H
#define MODE_CORE_MODEL_SPEC_H

#include <stdbool.h>

#define MODE_MAX_LAYERS 256
#define MODE_NAME_LEN 48
#define MODE_MAX_LAYER_TENSORS 32 /* a layer's tensors, at most */

typedef struct model_dims {
    int vocab;    /* V */
    int d_model;  /* d */
    int n_heads;  /* H */
    int d_head;   /* dh = d / H */
    int d_ff;     /* dense MLP hidden width */
    int n_layers; /* L */
    int seq_len;  /* S */
    /* Expert parallelism: the ranks the experts are spread over and this
     * rank's index among them (0, 0 or 1, 0: one rank holds every expert).
     * A rank allocates, updates and saves only its experts (experts_first,
     * experts_local); everything else is whole on every rank. */
    int ranks, rank;
    /* [optim] shard (docs/sharding.md): this rank keeps the Adam moments of
     * its 1/ranks of the shared tensors only (build_model lays them out) */
    bool shard_optim;
} model_dims;

/* One layer: its kind (a row of the layer-spec table) and the kind's own
 * typed parameters, the values of its keys (core/model/keys.h).  Core
 * copies and stores them through the kind's key declarations and never
 * reads them: only the kind knows their layout (its kind_group offsets). */
#define MODE_PARAMS_BYTES 256
typedef struct layer_spec {
    char kind[MODE_NAME_LEN];
    _Alignas(16) unsigned char params[MODE_PARAMS_BYTES];
} layer_spec;

typedef enum tensor_init {
    INIT_NORMAL, /* N(0, std) */
    INIT_ONES,   /* norm gains */
    INIT_ZEROS,  /* biases */
} tensor_init;

typedef struct tensor_desc {
    char name[MODE_NAME_LEN]; /* MODEL.md checkpoint name within its group */
    int ndim;
    int shape[3];
    tensor_init init;
    float init_std;
    bool decay; /* AdamW weight decay applies (matrices only) */
    /* AdamW's step for this tensor as a multiple of the learning rate (0:
     * 1, as every tensor): MoD's fitted threshold moves faster than the
     * weights ([mod] threshold_lr, docs/kinds/mod-schedule.md) */
    float lr_scale;
    /* Moved by a rule of its kind (kind_ops.step_end), not by a gradient:
     * backward leaves its gradient zero, so AdamW leaves it (with decay
     * off) where the rule puts it */
    bool no_grad;
    /* shape[0] counts experts, placed on ranks by expert parallelism
     * (experts_held): the ranks that compute expert e alone keep slice e
     * current in training (core/train/shard.h) */
    bool expert_dim;
    /* Upcycling (--init-from a checkpoint without this tensor): the name,
     * in the same layer's group, of the tensor it starts from ("w1": the
     * dense MLP's), copied into every expert and cut to this tensor's
     * hidden width (model.h: model_upcycle); "" for none: a fresh start. */
    char upcycle_from[MODE_NAME_LEN];
} tensor_desc;

/* Expert parallelism's placement, which the kinds with experts route tokens by:
 * with P <= E ranks, rank r computes experts [r E/P, (r+1) E/P) (E % P == 0);
 * with P > E, the ranks form P/E groups of E, and rank r computes expert
 * r mod E for its group's tokens (P % E == 0). */
static inline bool experts_held(int E, int P, int rank, int e)
{
    return P <= E ? e / (E / P) == rank : rank % E == e;
}

/* The experts a rank holds: [experts_first, experts_first + experts_local);
 * with P > E each rank holds one, the group of E ranks all of them once. */
static inline int experts_first(int E, int P, int rank)
{
    return P <= 1 ? 0 : P <= E ? rank * (E / P) : rank % E;
}

static inline int experts_local(int E, int P)
{
    return P <= 1 ? E : P <= E ? E / P : 1;
}

/* The widest d_model and d_ff (the model's and each expert's): 2^20, so a
 * tensor's element count (experts x d_model x d_ff) stays far inside a
 * long, and a row's inside an int. */
#define MODE_MAX_WIDTH 1048576

static inline long tensor_numel(const tensor_desc *t)
{
    long n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* A tensor descriptor: shape s0 x s1 x s2 (trailing zeros for fewer
 * dimensions); weight decay on matrices only (ndim >= 2). */
tensor_desc make_tensor_desc(const char *name, int ndim, int s0, int s1, int s2,
                             tensor_init init, float std);

#endif
