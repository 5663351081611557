/* The `drop` kind's state, shared by its description (drop_kind.c) and its
 * compute (drop.c).  Private to mod/. */
#ifndef MODE_MOD_DROP_STATE_H
#define MODE_MOD_DROP_STATE_H

#include "mod/routed.h"

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
    routed_block blk;   /* the block on the rows the draws run, their scales the gates */
    double sums[2];     /* kept rows, rows */
} drop_state;

static inline const drop_params *drop_params_of(const layer_spec *s)
{
    return (const drop_params *)(const void *)s->params;
}

/* p_l of layer l of L. */
double drop_probability(const drop_params *p, int l, int L);
/* Whether evaluation and sampling skip layer l. */
bool drop_pruned(const drop_params *p, int l);

#endif
