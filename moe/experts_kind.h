/* The experts' description (experts_kind.c): the [moe] keys and their
 * values, the configuration a kind derives from them, and what follows
 * from the shapes alone (tensors, nominal FLOPs, bytes, statistics'
 * columns).  The compute is experts.h's. */
#ifndef MODE_MOE_EXPERTS_KIND_H
#define MODE_MOE_EXPERTS_KIND_H

#include "core/model/kind.h"

#include <stdbool.h>

/* Experts a layer may have (the no-op aside): the gate's columns are a
 * plain loop, the dispatch a counting sort, nothing assumes a word of bits
 * per expert. */
#define MOE_MAX_EXPERTS 4096

/* [moe] router: how a token's columns are chosen (experts_kind.c names
 * them in this order). */
enum { MOE_ROUTER_LEARNED, MOE_ROUTER_RANDOM, MOE_ROUTER_HASH, MOE_ROUTER_COUNT };
/* [moe] score: the gate's probabilities from its logits. */
enum { MOE_SCORE_SOFTMAX, MOE_SCORE_SIGMOID, MOE_SCORE_COUNT };
/* [moe] balance_scope: what the balance loss's load fractions count over. */
enum { MOE_SCOPE_SEQUENCE, MOE_SCOPE_BATCH, MOE_SCOPE_COUNT };

/* The counterfactual policies token-choice experts take (kind_ops.routes),
 * with the no-op's two for integrated; in decoding no shuffle nor replay
 * (no book of the sequence being generated). */
#define EXPERTS_ROUTES                                                                          \
    (1u << ROUTE_LEARNED | 1u << ROUTE_RANDOM | 1u << ROUTE_SHUFFLE | 1u << ROUTE_REPLAY)
#define EXPERTS_NOOP_ROUTES (1u << ROUTE_NOOP_NONE | 1u << ROUTE_NOOP_ALL)
#define EXPERTS_DECODE_ROUTES (1u << ROUTE_LEARNED | 1u << ROUTE_RANDOM)

/* The [moe] keys' values (experts_kind.c declares them: experts_group),
 * read by moe, integrated and staged. */
typedef struct experts_params {
    int experts;            /* E, real experts */
    int top_k;
    double capacity_factor; /* 0: no dropping */
    int d_ff;               /* per expert; 0: the model's d_ff */
    double balance_weight, z_weight;
    int router;             /* MOE_ROUTER_* */
    int score;              /* MOE_SCORE_* */
    bool renormalize;       /* the chosen columns' weights divided by their sum */
    int balance_scope;      /* MOE_SCOPE_* */
    double bias_rate;       /* u of auxiliary-loss-free balancing; 0: no bias */
    int shared_experts;     /* experts every token goes through */
    int granularity;        /* m: each expert split into m, top_k m times */
    double eval_capacity_factor; /* < 0: capacity_factor */
} experts_params;
extern const key_group experts_group; /* [moe] */

/* The [ec] keys' values (the `ec` kind: expert-choice experts). */
typedef struct ec_params {
    int experts;
    double capacity_factor; /* c: each expert takes max(1, floor(c S / E)) tokens */
    int d_ff;
    double aux_weight;      /* the causal rule's BCE */
} ec_params;
extern const key_group ec_group; /* [ec] */

typedef struct experts_cfg {
    int experts;      /* E, real experts */
    bool noop;        /* one more gate column: the no-op expert (integrated MoDE) */
    int top_k;
    double capacity_factor; /* 0: no dropping */
    int d_ff;         /* per expert */
    double balance_weight, z_weight;
    int router;       /* MOE_ROUTER_*: the gate tensor exists for learned only */
    bool expert_choice; /* each expert takes its top tokens (the `ec` kind): top_k = E slots,
                         * slot e expert e's pick; capacity_factor is Zhou et al.'s c */
    double aux_weight;  /* ec: the causal rule's BCE weight */
    int score;          /* MOE_SCORE_* */
    bool renormalize;
    int balance_scope;  /* MOE_SCOPE_* */
    double bias_rate;   /* > 0: the expert_bias tensor, nudged after each step */
    int shared;         /* shared experts, each d_ff wide: one SwiGLU shared * d_ff wide */
    double eval_capacity_factor; /* evaluation and decoding's; < 0: capacity_factor's */
    double noop_bias;   /* integrated: added to the no-op column's score for the choice */
} experts_cfg;

/* Gate columns: E, or E+1 with the no-op. */
static inline int experts_columns(const experts_cfg *c)
{
    return c->experts + (c->noop ? 1 : 0);
}

/* The experts' configuration from the [moe] keys (noop: integrated's no-op
 * column); the checks between its values and what the kind adds (err). */
experts_cfg experts_cfg_of(const experts_params *p, const model_dims *dims, bool noop);
int experts_validate(const experts_params *p, bool noop, int model_d_ff, char *err, int err_len);
/* The `ec` kind's configuration from its [ec] keys. */
experts_cfg ec_cfg_of(const ec_params *p, const model_dims *dims);

/* ceil(capacity_factor * top_k * rows / E), or INT32_MAX without dropping;
 * expert-choice: the tokens each expert takes, max(1, floor(cf rows / E)).
 * experts_capacity_in: the same in forward mode `mode` (fwd_mode; decoding
 * counts as evaluation): eval_capacity_factor outside training when set. */
int experts_capacity(const experts_cfg *c, int rows_per_seq);
int experts_capacity_in(const experts_cfg *c, int rows_per_seq, int mode);

typedef struct experts experts; /* activations and buffers (experts_state.h) */

/* The bytes the experts keep for rows token rows a step (mode-exp plan):
 * the gate's per-row buffers, the dispatch's (kept assignments) and, on the
 * expert side, as many received rows as this rank sends (balanced routing;
 * a capacity factor bounds the busiest expert at cf times that), their
 * SwiGLU caches and backward work space for this rank's experts. */
double experts_bytes(const experts_cfg *c, const model_dims *dims, long rows);

/* Tensor descriptors: gate [d][N] (router learned only), experts_w1
 * [E][d][f], experts_w3 [E][d][f], experts_w2 [E][f][d], then expert_bias
 * [E] (bias_rate > 0; zeros, no gradient, no decay: the balancing rule
 * moves it) and shared_w1 [d][s f], shared_w3 [d][s f], shared_w2 [s f][d]
 * (shared experts).  Returns the count; out may be NULL. */
int experts_tensors(tensor_desc *out, const experts_cfg *c, const model_dims *dims);
/* Where among them: the gate (-1 without), experts_w1 (w3, w2 follow),
 * expert_bias (-1 without), shared_w1 (-1 without; w3, w2 follow). */
typedef struct experts_slots {
    int gate, w1, bias, shared;
} experts_slots;
experts_slots experts_tensor_slots(const experts_cfg *c);

/* Statistics' counts: sums (tokens kept per column (N), dropped
 * assignments, balance loss, z-loss, router entropy, ...) and columns. */
int experts_stat_sums_count(const experts_cfg *c);
int experts_stat_cols_count(const experts_cfg *c);

/* Nominal forward FLOPs for rows_per_seq rows of one sequence: the gate
 * (learned router only) and every assignment at a real expert (MODEL.md:
 * no-op charged as real). */
double experts_flops(const experts_cfg *c, const model_dims *dims, long rows_per_seq);

#endif
