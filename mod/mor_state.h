/* The `mor` kind's state, shared by its description (mor_kind.c) and its
 * compute (mor.c).  Private to mod/. */
#ifndef MODE_MOD_MOR_STATE_H
#define MODE_MOD_MOR_STATE_H

#include "mod/router.h"

enum { MOR_MAX_STEPS = 8 };
enum { MOR_LINEAR, MOR_GEOMETRIC, MOR_SCHEDULE_COUNT };

/* The [mor] keys' values. */
typedef struct mor_params {
    int recursions;    /* R */
    int schedule;      /* MOR_LINEAR | MOR_GEOMETRIC */
    double capacity;   /* geometric: the share kept at each step after the first */
    double aux_weight; /* the causal rule's BCE */
} mor_params;

/* One recursion step: its selected rows (router.h's container) and the
 * block on them. */
typedef struct mor_step {
    mod_router rt;      /* r: the step's scores; z: eligible; c: the causal rule's take */
    routed_rows rows;
    float *xin;         /* [rows][d] the stream entering the step */
} mor_step;

typedef struct mor_state {
    int R;
    mor_step step[MOR_MAX_STEPS];
    int32_t *depth;     /* [rows] steps each token took */
    float *dx;          /* [rows][d] backward: the stream's gradient between steps */
    double sums[MOR_MAX_STEPS + 2]; /* tokens at each step, tokens, sequences */
    kv_cache kv[MOR_MAX_STEPS];     /* decoding, one a step */
    mlp_cache mlp1;
    float *dec;         /* [3d] */
} mor_state;

static inline const mor_params *mor_params_of(const layer_spec *s)
{
    return (const mor_params *)(const void *)s->params;
}

/* k_r, the tokens of a sequence of S that step r (1-based) keeps. */
int mor_k(const mor_params *p, int r, int S);
mod_router_params mor_router_params(void);

#endif
