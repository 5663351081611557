/* The routing half of Mixture-of-Depths (Raposo et al. 2024, Sec. 3),
 * shared by the `mod` and `tcmod` kinds and staged MoDE: per sequence a
 * router scores every token of the residual stream, the k = floor(capacity
 * S) best form the selected set (ties to the lower position), and a causal
 * rule decides per token when top-k over the sequence cannot be used (Sec.
 * 3.5).  `drop` and `mor` use its container of selected rows (gather,
 * scatter, their backward) with choices of their own; expert routing
 * (moe/experts_gate.c) its top-k. */
#ifndef MODE_MOD_ROUTER_H
#define MODE_MOD_ROUTER_H

#include "core/model/block.h"
#include "core/model/kind.h"
#include "mod/routed.h"

#include <stdint.h>

/* The choices of the [mod] keys, in the order of their names (router_kind.c
 * names them once, by these values). */
enum { ROUTER_LEARNED, ROUTER_RANDOM, ROUTER_COUNT };
enum { GATE_RAW, GATE_SIGMOID, GATE_COUNT };
enum { CAUSAL_AUX, CAUSAL_PREDICTOR, CAUSAL_NONE, CAUSAL_THRESHOLD, CAUSAL_COUNT };
enum { SCHEDULE_NONE, SCHEDULE_LINEAR, SCHEDULE_COSINE, SCHEDULE_COUNT };

/* The counterfactual policies depth routing takes (kind_ops.routes). */
#define MOD_ROUTES                                                                              \
    (1u << ROUTE_LEARNED | 1u << ROUTE_RANDOM | 1u << ROUTE_BOTTOM | 1u << ROUTE_SHUFFLE |     \
     1u << ROUTE_REPLAY)
/* ... and in decoding (no count of the sequence's decisions ahead). */
#define MOD_DECODE_ROUTES (1u << ROUTE_LEARNED | 1u << ROUTE_RANDOM)

/* Hidden width of the causal predictor (MODEL.md: d -> 64 -> 1). */
#define MOD_PRED_HIDDEN 64

/* The [mod] keys' values (router_kind.c declares them: mod_router_group),
 * read by mod and staged. */
typedef struct mod_router_params {
    double capacity;   /* share of the sequence that takes the block, (0, 1] */
    int router;        /* ROUTER_* */
    int gate;          /* GATE_* */
    int causal;        /* CAUSAL_* */
    double aux_weight;
    double causal_threshold; /* the causal rule's threshold on the score (learned router) */
    int capacity_schedule;   /* SCHEDULE_*: training's capacity from 1 down to capacity */
    long schedule_steps;     /* the steps the schedule takes to reach capacity */
    double threshold_lr;     /* the fitted threshold's step, times the learning rate */
} mod_router_params;
extern const key_group mod_router_group; /* [mod] */

typedef struct mod_router_cfg {
    int router, gate, causal;
    double capacity, aux_weight, threshold;
    double threshold_lr;  /* tau's AdamW step as a multiple of the learning rate */
    int k;                /* top-k's k at capacity (evaluation; training after the schedule) */
    int max_k;            /* the largest k of any step (S under a schedule) */
    int schedule;         /* SCHEDULE_* */
    long schedule_steps;
    int t_router, t_pred; /* tensor index within the router's tensors, -1 if absent */
    int t_thr;            /* the fitted threshold (causal = threshold), -1 if absent */
    int n_tensors;        /* router (learned) + the predictor's four or the threshold */
} mod_router_cfg;

/* The router's own state: scores, decisions and the predictor's; the rows
 * they select go to a routed set (routed.h) that the caller owns. */
typedef struct mod_router {
    mod_router_cfg cfg;
    void *block;        /* the buffers below, one allocation (mod_router_layout) */
    int max_seq;
    float *r;           /* [rows] router scores */
    float *pa, *ph;     /* [rows][64] predictor pre-activation and hidden */
    float *pl;          /* [rows] predictor logits */
    unsigned char *z;   /* [rows] top-k membership */
    unsigned char *c;   /* [rows] causal decision */
    int *scratch;       /* [S] */
    float *dr, *dpa;    /* backward work: [rows], [rows][64] */
    double sums[6];     /* tp fp fn tn of the causal rule against top-k; causal taken; tokens */
} mod_router;

/* Which decisions form the selected set: those of the forward's mode
 * (MoD: top-k in training and FWD_EVAL_TOPK, the causal rule in
 * FWD_EVAL_CAUSAL), or the causal rule in every mode (tcmod: a token's
 * decision never depends on another's; then no losses or statistics in
 * training, and a counterfactual book's decisions are read as "causal"). */
enum { ROUTER_TAKE_MODE, ROUTER_TAKE_CAUSAL };

/* k = max(1, floor(capacity * S)). */
int mod_k(double capacity, int seq_len);
/* z[i] = 1 for the k largest scores of n (ties to the lower position). */
void mod_topk(unsigned char *z, const float *scores, int n, int k, int *scratch);
/* Training's capacity at step (0-based) under the schedule: 1 at step 0,
 * capacity from schedule_steps on (docs/kinds/mod-schedule.md). */
double mod_capacity_at(int schedule, long schedule_steps, double capacity, long step);
/* Top-k's k at step: in training the schedule's, else c->k. */
int mod_router_k(const mod_router_cfg *c, int seq_len, bool training, long step);
/* The pinball (quantile) loss rho_q(u) = u (q - [u < 0]) of u = r - tau at
 * level q, and its derivative in tau ([u < 0] - q). */
double mod_pinball(double u, double q);
double mod_pinball_dtau(double u, double q);
/* Phi^-1(p), the standard normal quantile. */
double mod_normal_quantile(double p);

/* The router's configuration from its keys' values. */
mod_router_cfg mod_router_parse(const mod_router_params *p, const model_dims *dims);
/* The router's tensors (router, pred_w1, pred_b1, pred_w2, pred_b2 as the
 * config asks); returns the count; out may be NULL. */
int mod_router_tensors(const mod_router_cfg *c, const model_dims *dims, tensor_desc *out);
/* Nominal forward FLOPs of the router and predictor for one sequence. */
double mod_router_flops(const mod_router_cfg *c, const model_dims *dims);

/* The router's buffers for max_seq sequences (buf.h); build allocates them
 * in one block, mode-exp plan counts them (mod_router_bytes). */
void mod_router_layout(buf_plan *p, mod_router *rt, const model_dims *dims, int max_seq);
int build_mod_router(mod_router *rt, const mod_router_params *params, const model_dims *dims,
                     int max_seq);
void free_mod_router(mod_router *rt);

/* Scores, top-k membership and causal decisions of every row of x[nseq*S][d];
 * into set, the rows that take the block (take: ROUTER_TAKE_*) with the
 * gate value of each.  In training also the aux and predictor losses and
 * the statistics.  w: the router's tensors.  Adds the router's FLOPs to
 * a->flops_executed.  In evaluation, a counterfactual plan (a->route)
 * replaces the decisions in place; -ENOENT when its book lacks them. */
int mod_router_forward(mod_router *rt, routed_set *set, float *const *w, int layer_index,
                       const fwd_args *a, const float *x, int take);
/* Given dgate[j] = d loss / d g of the set's row j: the router's and the
 * predictor's gradients, and dx += the router's input gradient. */
void mod_router_backward(mod_router *rt, const routed_set *set, float *const *w,
                         float *const *dw, const fwd_args *a, float *dx, const float *x,
                         const float *dgate);
/* The same with dr_extra[rows] (a kind's own loss on the scores; NULL:
 * none) added to the scores' gradient before the router's products. */
void mod_router_backward_extra(mod_router *rt, const routed_set *set, float *const *w,
                               float *const *dw, const fwd_args *a, float *dx, const float *x,
                               const float *dgate, const float *dr_extra);
/* Decoding: does the row x[d] at position pos take the block?  1 yes (its
 * gate value in *gate), 0 no, negative on error.  Under ROUTE_RANDOM each
 * token takes it with probability capacity (keyed by window and position). */
int mod_router_decide(const mod_router *rt, float *const *w, int layer_index, const fwd_args *a,
                      const float *x, int32_t pos, float *gate);
/* Decoding a routed block behind the router (mod, tcmod, staged): y = x
 * and 0 where mod_router_decide skips the row, else y = routed_decode's
 * and 1; negative on error.  w: the layer's tensors, the router's first,
 * the block's from t_block. */
int mod_router_decode(const mod_router *rt, routed_block *b, float *const *w, int t_block,
                      int layer_index, const fwd_args *a, float *y, const float *x, int32_t pos);
/* Batched decoding (kind.h decode_rows): each of the n rows (row i lane
 * i's token, every lane at pos) decided as mod_router_decode decides a
 * sequence's row, with lane i as its sequence for the draws; the taking
 * rows through the block together; taken[i] as mod_router_decode returns. */
int mod_router_decode_rows(const mod_router *rt, routed_block *b, float *const *w, int t_block,
                           int layer_index, const fwd_args *a, float *y, const float *x, int n,
                           int32_t pos, unsigned char *taken);
/* A token frozen at an exit point (kind.h decode_kv): where the router
 * takes it, only its keys and values into the block's cache (1), else 0;
 * negative on error. */
int mod_router_decode_kv(const mod_router *rt, routed_block *b, float *const *w, int t_block,
                         int layer_index, const fwd_args *a, const float *x, int32_t pos);

/* The router's decisions (selected, scores, causal, pred_prob) into d, and
 * d with whatever else the caller put in it through the sink. */
int mod_router_record(const mod_router *rt, const fwd_args *a, route_decision *d,
                      record_sink *sink);
int mod_router_stat_count(int *n_sums);
void mod_router_stat_name(int col, char *buf, int len);
void mod_router_stat_columns(const double *sums, double *cols);

/* The bytes of build_mod_router's buffers for max_seq sequences (mode-exp
 * plan). */
double mod_router_bytes(const model_dims *dims, const mod_router_params *params, int max_seq);

#endif
