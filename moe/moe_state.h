/* The `moe` and `integrated` kinds' state, shared by their description
 * (moe_kind.c) and their compute (moe.c).  Private to moe/. */
#ifndef MODE_MOE_MOE_STATE_H
#define MODE_MOE_MOE_STATE_H

#include "moe/experts_kind.h"

/* Their parameters: the [moe] keys, and integrated's [integrated] key. */
typedef struct moe_params {
    experts_params experts;
    double noop_bias; /* integrated: added to the no-op column's score for the choice */
} moe_params;

static inline const moe_params *moe_params_of(const layer_spec *s)
{
    return (const moe_params *)(const void *)s->params;
}

typedef struct moe_state {
    void *block;       /* the buffers below, one allocation (moe_layout) */
    experts_cfg ec;
    attn_cache attn;
    float *h;          /* [rows][d] x + Attn(x) */
    float *m, *rstd;   /* [rows][d], [rows]: RMSNorm_mlp(h) */
    int *seq_start;    /* [max_seq+1] */
    int32_t *pos;      /* [rows] */
    float *dec;        /* [3d] */
    experts *ex;       /* the experts' state (experts.c) */
    int nseq;
    kv_cache kv;       /* decoding */
} moe_state;

void moe_layout(buf_plan *p, moe_state *s, const model_dims *dims, int max_seq);
/* The experts' configuration of a layer of kind k (moe, integrated, ec). */
experts_cfg moe_cfg_of(const layer_spec *s, const layer_kind *k, const model_dims *dims);

/* Backward's work space: dh and dm, then attention's share (the experts
 * keep their own). */
typedef struct moe_ws {
    float *dh, *dm; /* [rows][d] */
    float *sub;
} moe_ws;
void moe_ws_layout(buf_plan *p, moe_ws *w, const model_dims *dims, int rows);

enum { T_MLP_NORM = BLOCK_ATTN_TENSORS, T_GATE = BLOCK_ATTN_TENSORS + 1 };

#endif
