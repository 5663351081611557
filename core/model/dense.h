/* The `dense` kind's state and its layouts, shared by its description
 * (dense_kind.c: bytes for mode-exp plan, work space) and its compute
 * (dense.c: build, backward).  Private to core/model. */
#ifndef MODE_CORE_MODEL_DENSE_H
#define MODE_CORE_MODEL_DENSE_H

#include "core/model/block.h"
#include "core/model/lanes.h"

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
    decode_lanes lanes; /* batched decoding (lanes.h) */
    /* Cross-Layer Attention (cla.c, docs/kinds/cla.md): a reader computes
     * queries alone; attn.k, v and kv_read are its group's first layer's
     * (kv unused), and dk_read, dv_read [rows][d] its buffers for the
     * group's d k, d v (the top reader's serve the group). */
    bool reader;
    kv_cache *kv_read;
    float *dk_read, *dv_read;
} dense_state;

/* The buffers of batches of max_seq sequences (a reader's: no k, v, and
 * the buffers of the group's gradients). */
void dense_layout(buf_plan *p, dense_state *s, const model_dims *dims, int max_seq, bool reader);
/* What dense_layout lays out, in bytes (the state_bytes of dense, and of
 * cla as a reader). */
double dense_layout_bytes(const model_dims *dims, int max_seq, bool reader);
/* The work space of dense.c's passes, the kinds' ws_floats for dense, cla
 * and attnres (the same passes). */
long dense_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq);
/* dense's nominal FLOPs a sequence (MODEL.md): attention and the MLP on S rows. */
double dense_flops(const layer_spec *spec, const model_dims *dims, int li);

/* The compute both dense and cla run (dense.c): the views of the layer's
 * tensors (a reader's have no wk, wv) and the passes. */
void dense_views(const layer *l, float *const *t, attn_weights *aw, float **mlp_norm,
                 ffn_weights *fw);
int dense_build_as(layer *l, const model_dims *dims, int max_seq, bool reader);
void dense_free(layer *l);
int dense_forward(layer *l, const fwd_args *a, float *y, const float *x);
int dense_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x);
int dense_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos);
/* Batched decoding (lanes.h), the reader's too (cla.c: its lanes read its
 * group's first layer's caches). */
int dense_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n, int32_t pos,
                      unsigned char *taken);

/* The reader's tensors: attn_norm wq wo mlp_norm w1 w3 w2. */
enum { CLA_TENSORS = BLOCK_TENSORS - 2 };

/* Backward's work space for n rows: dh, then the sublayers' share. */
typedef struct dense_ws {
    float *dh;  /* [n][d] */
    float *sub; /* attn_backward's or mlp_backward's, the larger */
} dense_ws;
void dense_ws_layout(buf_plan *p, dense_ws *w, const model_dims *dims, int n);

#endif
