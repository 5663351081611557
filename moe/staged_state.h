/* The `staged` kind's state, shared by its description (staged_kind.c) and
 * its compute (staged.c).  Private to moe/. */
#ifndef MODE_MOE_STAGED_STATE_H
#define MODE_MOE_STAGED_STATE_H

#include "mod/routed.h"
#include "mod/router.h"
#include "moe/experts_kind.h"

/* staged's parameters: the [mod] keys and the [moe] keys. */
typedef struct staged_params {
    mod_router_params router;
    experts_params experts;
} staged_params;

static inline const staged_params *staged_params_of(const layer_spec *s)
{
    return (const staged_params *)(const void *)s->params;
}

typedef struct staged_state {
    void *block;           /* rec_experts, rec_weights: one allocation (staged_layout) */
    mod_router rt;
    experts_cfg ec;
    experts *ex;           /* the experts' state (experts.c) */
    int t_attn;            /* the block's first tensor (then the norm, the gate, experts) */
    routed_block blk;      /* the block on the selected rows; rows.mlp: the experts' norm */
    int32_t *rec_experts;  /* [rows][top_k] record buffers */
    float *rec_weights;
} staged_state;

void staged_layout(buf_plan *p, staged_state *s, const model_dims *dims, int max_seq);

#endif
