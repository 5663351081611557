/* The `drop` kind's state, shared by its description (drop_kind.c) and its
 * compute (drop.c).  Private to mod/. */
#ifndef MODE_MOD_DROP_STATE_H
#define MODE_MOD_DROP_STATE_H

#include "mod/router.h"

enum { DROP_LINEAR, DROP_CONSTANT, DROP_SCHEDULE_COUNT };
enum { DROP_SEQUENCE, DROP_TOKEN, DROP_UNIT_COUNT };

/* The [drop] keys' values. */
typedef struct drop_params {
    double p;        /* the drop probability: of the last layer (linear) or of every one */
    int schedule;    /* DROP_LINEAR | DROP_CONSTANT */
    int unit;        /* DROP_SEQUENCE | DROP_TOKEN */
    bool rescale;    /* kept updates / (1 - p_l) in training (else x (1 - p_l) in evaluation) */
    bool prune;      /* evaluation and sampling skip this layer */
    int prune_every; /* evaluation and sampling skip layer l when (l + 1) % n == 0; 0: none */
} drop_params;

typedef struct drop_state {
    mod_router rt;      /* the rows that run the block, and their scales (router.h) */
    routed_rows rows;
    double sums[2];     /* kept rows, rows */
    kv_cache kv;
    mlp_cache mlp1;
    float *dec;         /* [2d] */
} drop_state;

static inline const drop_params *drop_params_of(const layer_spec *s)
{
    return (const drop_params *)(const void *)s->params;
}

/* p_l of layer l of L. */
double drop_probability(const drop_params *p, int l, int L);
/* Whether evaluation and sampling skip layer l. */
bool drop_pruned(const drop_params *p, int l);
/* The container's parameters: no router tensor. */
mod_router_params drop_router_params(void);

#endif
