/* The `mor` kind's state, shared by its description (mor_kind.c) and its
 * compute (mor.c).  Private to mod/. */
#ifndef MODE_MOD_MOR_STATE_H
#define MODE_MOD_MOR_STATE_H

#include "mod/routed.h"
#include "mod/select_steps.h"

enum { MOR_MAX_STEPS = 8 };
enum { MOR_LINEAR, MOR_GEOMETRIC, MOR_SCHEDULE_COUNT };

/* The [mor] keys' values. */
typedef struct mor_params {
    int recursions;    /* R */
    int schedule;      /* MOR_LINEAR | MOR_GEOMETRIC */
    double capacity;   /* geometric: the share kept at each step after the first */
    double aux_weight; /* the causal rule's BCE */
} mor_params;

/* One recursion step: its selector and the block on the rows it chose. */
typedef struct mor_step {
    select_steps sel;   /* s: the step's scores; elig: A_{r-1}; take: T_r */
    routed_block blk;
    float *xin;         /* [rows][d] the stream entering the step */
} mor_step;

typedef struct mor_state {
    int R;
    mor_step step[MOR_MAX_STEPS];
    int32_t *depth;     /* [rows] steps each token took */
    float *dx;          /* [rows][d] backward: the stream's gradient between steps */
    double sums[MOR_MAX_STEPS + 2]; /* tokens at each step, tokens, sequences */
} mor_state;

static inline const mor_params *mor_params_of(const layer_spec *s)
{
    return (const mor_params *)(const void *)s->params;
}

/* k_r, the tokens of a sequence of S that step r (1-based) keeps. */
int mor_k(const mor_params *p, int r, int S);

#endif
