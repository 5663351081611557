/* The pieces of a transformer block (MODEL.md "Dense pieces"), written for an
 * arbitrary set of rows grouped by sequence, so that a kind can run the block
 * on the rows it selects only, or put its own sublayer where the MLP was.
 *   attention sublayer:  h = x + Attn(x)
 *   MLP sublayer:        y = h + FFN(RMSNorm_mlp(h))
 *   FFN (SwiGLU):        out = (silu(m W1) * (m W3)) W2       */
#ifndef MODE_CORE_MODEL_BLOCK_H
#define MODE_CORE_MODEL_BLOCK_H

#include "core/model/kind.h"
#include "core/model/spec.h"

#include <stdint.h>

/* n rows, grouped into nseq runs: sequence s owns rows
 * [seq_start[s], seq_start[s+1]); pos[j] is row j's original position, and
 * positions increase within a sequence. */
typedef struct row_set {
    int n;
    int nseq;
    const int *seq_start; /* [nseq+1] */
    const int32_t *pos;   /* [n] */
} row_set;

/* Every row of nseq whole sequences of S rows: seq_start[b] = b S (nseq+1
 * entries), pos[j] = j mod S (nseq S entries). */
void row_set_fill_whole(int *seq_start, int32_t *pos, int nseq, int S);

typedef struct attn_weights {
    float *norm;           /* [d] */
    float *wq, *wk, *wv;   /* [d][d]; wk = wv = NULL: a Cross-Layer Attention
                            * reader, whose cache holds another layer's k, v */
    float *wo;             /* [d][d] */
} attn_weights;

typedef struct ffn_weights {
    float *w1, *w3; /* [d][f] */
    float *w2;      /* [f][d] */
} ffn_weights;

/* An attention that keeps its probabilities (attnres.c, docs/kinds/
 * attnres.md): when an attn_cache (kv_cache in decoding) points at one,
 * each (sequence, head) task runs fwd / bwd instead of the FlashAttention
 * kernel, on the head's columns of the sequence's rows r0 .. r0 + ns - 1
 * (bwd adds into dq, dk, dv); decoding's head runs decode after the
 * scores (c->scores[0 .. n-1] = q k_j) in place of softmax and P V, for
 * the sequence `lane` (0 when one sequence decodes; batched decoding's
 * lane, lanes.h), whose own state it keeps. */
struct attn_cache;
struct kv_cache;
typedef struct attn_core {
    void (*fwd)(const struct attn_core *core, const struct attn_cache *c, int seq, int head,
                int r0, int ns);
    void (*bwd)(const struct attn_core *core, const struct attn_cache *c, int seq, int head,
                int r0, int ns, float *dq, float *dk, float *dv, const float *datt);
    void (*decode)(const struct attn_core *core, struct kv_cache *c, int lane, int head, int n,
                   float scale);
} attn_core;

/* Activations kept for backward, for up to cap_rows rows: linear in the
 * rows, since attention keeps one log-sum-exp per row and head instead of
 * its probabilities (core/kernels/attention.h). */
typedef struct attn_cache {
    int cap_rows;
    void *block;  /* the allocation when built on its own (build_attn_cache), else NULL */
    float *u;     /* [rows][d] RMSNorm_attn(x) */
    float *rstd;  /* [rows] */
    float *q, *k, *v; /* [rows][d] after RoPE (q, k) */
    float *att;   /* [rows][d] heads concatenated, before Wo */
    float *lse;   /* [H rows]: sequence s's [H][n_s] from H seq_start[s] */
    /* Cross-Layer Attention (docs/kinds/cla.md): d loss / d k and d v
     * (after RoPE) from the layers that read this layer's keys and values
     * [rows][d], NULL when none do.  A reader (attn_weights wk NULL: its k
     * and v are its group's first layer's) adds its own into them, or
     * writes them when it is the group's top reader (dkv_first: its
     * backward runs first); the first layer adds them to its own. */
    float *dk_read, *dv_read;
    bool dkv_first;
    const attn_core *core; /* NULL: the FlashAttention kernel */
} attn_cache;

typedef struct ffn_cache {
    int cap_rows, f;
    void *block;    /* the allocation when built on its own, else NULL */
    float *a1, *a3; /* [rows][f] m W1, m W3 */
    float *g;       /* [rows][f] silu(a1) * a3 */
} ffn_cache;

typedef struct mlp_cache {
    void *block;  /* the allocation when built on its own, else NULL */
    float *m;     /* [rows][d] RMSNorm_mlp(h) */
    float *rstd;  /* [rows] */
    ffn_cache ffn;
} mlp_cache;

/* The caches' buffers for cap_rows rows, taken from a plan (buf.h): the
 * one description that an owner's build allocates with and mode-exp plan
 * counts.  (f = 0: an mlp_cache that holds the norm only.) */
void attn_cache_layout(buf_plan *p, attn_cache *c, const model_dims *dims, int cap_rows);
/* A reader's (Cross-Layer Attention): no k, v of its own (NULL: they are
 * pointed at its group's first layer's), the rest as attn_cache_layout. */
void attn_cache_layout_reader(buf_plan *p, attn_cache *c, const model_dims *dims, int cap_rows);
void ffn_cache_layout(buf_plan *p, ffn_cache *c, int cap_rows, int f);
void mlp_cache_layout(buf_plan *p, mlp_cache *c, const model_dims *dims, int cap_rows, int f);

/* A cache on its own: one allocation from its layout (free_* frees it). */
int build_attn_cache(attn_cache *c, const model_dims *dims, int cap_rows);
void free_attn_cache(attn_cache *c);
int build_ffn_cache(ffn_cache *c, int cap_rows, int f);
void free_ffn_cache(ffn_cache *c);
int build_mlp_cache(mlp_cache *c, const model_dims *dims, int cap_rows, int f);
void free_mlp_cache(mlp_cache *c);

/* Descriptors of a block's tensors, in checkpoint order: attn_norm wq wk wv wo
 * [mlp_norm w1 w3 w2 when with_mlp].  Returns the count (out may be NULL). */
int block_tensors(tensor_desc *out, const model_dims *dims, bool with_mlp);
enum { BLOCK_ATTN_TENSORS = 5, BLOCK_TENSORS = 9 };
/* Views of the tensors that block_tensors() described, starting at t[0]. */
attn_weights attn_weights_at(float *const *t);
ffn_weights ffn_weights_at(float *const *t); /* t[0] = w1, t[1] = w3, t[2] = w2 */

/* The work spaces of attn_backward, ffn_backward and mlp_backward for n
 * rows (sequences of at most max_seq_rows rows), carved from a plan
 * (buf.h) by the backward passes and counted by the *_ws_floats.
 * attn_ws_floats also covers attn_forward's scratch (sequences of up to
 * dims->seq_len rows, which the causal rule of a routed block can
 * select), which it takes from the start of a->ws. */
typedef struct attn_ws {
    float *datt, *dq, *dk, *dv; /* [n][d] */
    float *scratch;             /* one attention scratch per thread */
    long scratch_floats;        /* each */
} attn_ws;
typedef struct ffn_ws {
    float *dg, *da1, *da3;      /* [n][f] */
} ffn_ws;
typedef struct mlp_ws {
    float *dm;                  /* [n][d] */
    ffn_ws ffn;
} mlp_ws;
void attn_ws_layout(buf_plan *p, attn_ws *w, const model_dims *dims, int n, int max_seq_rows);
void ffn_ws_layout(buf_plan *p, ffn_ws *w, int n, int f);
void mlp_ws_layout(buf_plan *p, mlp_ws *w, const model_dims *dims, int n, int f);
long attn_ws_floats(const model_dims *dims, int n, int max_seq_rows);
long mlp_ws_floats(const model_dims *dims, int n, int f);

/* h[rows][d] = x + Attn(x).  h must not alias x; a->ws holds at least
 * attn_ws_floats(dims, 0, 0) floats (scratch).  A reader (w->wk NULL)
 * computes q alone and attends to the k, v its cache points at. */
void attn_forward(attn_cache *c, float *h, const float *x, const row_set *rs,
                  const attn_weights *w, const fwd_args *a);
/* dx += dh + (Attn's backward of dh); dw += ...  A reader's dk, dv go to
 * c->dk_read, dv_read; a first layer's c->dk_read, dv_read join its own. */
void attn_backward(float *dx, const attn_weights *dw, const float *dh, const float *x,
                   const attn_cache *c, const row_set *rs, const attn_weights *w,
                   const fwd_args *a, float *ws);

/* out[n][d] = beta*out + SwiGLU(m).  x: how the products run (matmul.h);
 * the element-wise loops split on x->pool (x NULL: fp32, one thread). */
void ffn_forward(const matmul_exec *x, ffn_cache *c, float *out, const float *m, int n,
                 const ffn_weights *w, int d, int f, float beta);
/* dm[n][d] = ... (written, not added: every caller wants the MLP's input
 * gradient on its own), dw += ... given dout; ws holds 3 n f floats. */
void ffn_backward(const matmul_exec *x, float *dm, const ffn_weights *dw, const float *dout,
                  const float *m, const ffn_cache *c, int n, const ffn_weights *w, int d, int f,
                  float *ws);

/* y = h + FFN(RMSNorm_mlp(h)); norm[d]. */
void mlp_forward(const matmul_exec *x, mlp_cache *c, float *y, const float *h, int n,
                 const float *norm, const ffn_weights *w, int d, int f);
/* dh += dy + ... */
void mlp_backward(const matmul_exec *x, float *dh, float *dnorm, const ffn_weights *dw,
                  const float *dy, const float *h, const mlp_cache *c, int n, const float *norm,
                  const ffn_weights *w, int d, int f, float *ws);

/* Incremental decoding: the keys and values of the rows that took this
 * block so far, in position order. */
typedef struct kv_cache {
    int cap, n;
    float *k, *v;   /* [cap][d], after RoPE (k) */
    float *scores;  /* [cap] */
    float *u, *q, *att, rstd; /* one row of scratch */
    int32_t *pos;   /* [cap] original positions of the cached rows */
    const attn_core *core; /* NULL: softmax and P V (set after kv_cache_begin) */
} kv_cache;
void free_kv_cache(kv_cache *c);
/* Decoding past the context: the cache keeps the rows of the last S
 * positions (pos - S, pos], a sliding window; the oldest leave first. */
void kv_cache_slide(kv_cache *c, int32_t pos, int S, int d);
/* att[d] = softmax(q k^T / sqrt(d_head)) V per head over the c->n cached
 * rows (softmax and P V: a cache without an attn_core); sc: sc_floats of
 * scratch, at least c->n (H c->n: every head in one pass over the rows). */
void kv_cache_attend(const kv_cache *c, float *att, const float *q, const model_dims *dm,
                     float *sc, long sc_floats);
/* A new sequence of at most max_len rows: grow c when it is smaller, empty it. */
int kv_cache_begin(kv_cache *c, const model_dims *dims, int max_len);
/* Drop the cached rows at positions >= pos (a rolled-back draft). */
void kv_cache_truncate(kv_cache *c, int32_t pos);
/* A dense block's decoding state (dense, and the kinds that run one block
 * on the tokens they choose): its key-value cache, a one-row MLP cache and
 * scratch floats.  begin() sizes them for max_len positions (growing them
 * only for a longer sequence) and empties the cache; free() releases all. */
int block_decode_begin(kv_cache *kv, mlp_cache *mlp1, float **scratch, int scratch_floats,
                       const model_dims *dims, int max_len);
void free_block_decode(kv_cache *kv, mlp_cache *mlp1, float **scratch);
/* h[d] = x + Attn(x) for one new row at position pos, attending to the cached
 * rows and itself; its k and v join the cache.  The same maths as
 * attn_forward on the rows in the cache plus this one.  A reader (w->wk
 * NULL) passes its group's first layer's cache, which that layer's decode
 * has just given this row's k and v, and adds nothing to it. */
int attn_decode(kv_cache *c, float *h, const float *x, int32_t pos, const attn_weights *w,
                const fwd_args *a);
/* Only the row's k and v into the cache, as attn_decode would add them (a
 * token that left the stack at an exit point: later tokens attend to its
 * frozen state, CALM's copy). */
int attn_decode_kv(kv_cache *c, const float *x, int32_t pos, const attn_weights *w,
                   const fwd_args *a);

/* FLOPs of the pieces, for n rows in sequences of the given sizes. */
double attn_flops_rows(const model_dims *dims, long n, long sum_sq_seq_rows);
double ffn_flops_rows(int d, int f, long n);

#endif
