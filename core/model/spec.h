/* What a model is made of: its sizes, one spec per layer (a row of the
 * layer-spec table), and the descriptors of the tensors each layer owns. */
#ifndef MODE_CORE_MODEL_SPEC_H
#define MODE_CORE_MODEL_SPEC_H

#include <stdbool.h>

#define MODE_MAX_LAYERS 256
#define MODE_NAME_LEN 48

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
} model_dims;

/* Hyper-parameters of one layer.  The kind decides which of them it reads
 * (layer_kind.keys); they live here as plain values so that core can parse,
 * validate and store them without knowing the kinds that use them. */
typedef struct layer_spec {
    char kind[MODE_NAME_LEN];
    /* routed blocks (mod, staged) */
    double capacity;       /* share of the sequence that takes the block, (0, 1] */
    char router[16];       /* learned | random */
    char gate[16];         /* raw | sigmoid */
    char causal[16];       /* aux | predictor | none */
    double aux_weight;
    /* experts (moe, integrated, staged) */
    int experts;           /* E, real experts */
    int top_k;
    double capacity_factor;
    int expert_d_ff;       /* moe.d_ff */
    double balance_weight;
    double z_weight;
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
    /* shape[0] counts experts, placed on ranks by expert parallelism
     * (experts_held): the ranks that compute expert e alone keep slice e
     * current in training (core/train/shard.h) */
    bool expert_dim;
} tensor_desc;

/* Expert parallelism's placement, which moe/experts.c routes tokens by:
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

/* The spec every kind starts from: the config's defaults. */
void layer_spec_defaults(layer_spec *s);



/* A layer hyper-parameter by its config key ("capacity", "router", "d_ff"
 * for expert_d_ff, ...): strings through *str, numbers through *num.
 * Returns 0, or -ENOENT for a name that is not a layer key. */
int layer_spec_get(const layer_spec *s, const char *key, double *num, const char **str);
#endif
