/* The `tcmod` kind's state (token-choice MoD), shared by its description
 * (tcmod_kind.c) and its compute (tcmod.c).  Private to mod/. */
#ifndef MODE_MOD_TCMOD_STATE_H
#define MODE_MOD_TCMOD_STATE_H

#include "mod/routed.h"
#include "mod/router.h"

/* The [tcmod] keys' values. */
typedef struct tcmod_params {
    double capacity; /* the share of tokens the penalty keeps the block's take near */
    double penalty;  /* its weight */
    double sharpness; /* k: the penalty's share is the mean of sigmoid(k r) */
} tcmod_params;

typedef struct tcmod_state {
    mod_router rt;      /* scores and the per-token rule (router.h) */
    int t_block;        /* first block tensor (after the router) */
    routed_block blk;   /* the block on the selected rows (routed.h) */
    float *dr;          /* [rows] the penalty's gradient on the scores */
    double sums[5];     /* taken, tokens, penalty, sum of sigmoid(r), sequences */
} tcmod_state;

static inline const tcmod_params *tcmod_params_of(const layer_spec *s)
{
    return (const tcmod_params *)(const void *)s->params;
}

/* The router's own parameters: learned scores, sigmoid gate, the threshold
 * 0 as the rule (router.h's causal rule "none"), capacity the target. */
mod_router_params tcmod_router_params(const tcmod_params *p);

#endif
