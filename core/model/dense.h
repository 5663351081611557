/* The `dense` kind's state and its layouts, shared by its description
 * (dense_kind.c: bytes for mode-exp plan, work space) and its compute
 * (dense.c: build, backward).  Private to core/model. */
#ifndef MODE_CORE_MODEL_DENSE_H
#define MODE_CORE_MODEL_DENSE_H

#include "core/model/block.h"

typedef struct dense_state {
    void *block;     /* the buffers below, one allocation (dense_layout) */
    attn_cache attn;
    mlp_cache mlp;
    float *h;        /* [rows][d] x + Attn(x) */
    int *seq_start;  /* [max_seq+1] */
    int32_t *pos;    /* [rows] */
    int max_seq;
    kv_cache kv;      /* decoding */
    mlp_cache mlp1;   /* one row of MLP activations for decoding */
    float *h1;        /* [d] */
} dense_state;

/* The buffers of batches of max_seq sequences. */
void dense_layout(buf_plan *p, dense_state *s, const model_dims *dims, int max_seq);

/* Backward's work space for n rows: dh, then the sublayers' share. */
typedef struct dense_ws {
    float *dh;  /* [n][d] */
    float *sub; /* attn_backward's or mlp_backward's, the larger */
} dense_ws;
void dense_ws_layout(buf_plan *p, dense_ws *w, const model_dims *dims, int n);

#endif
