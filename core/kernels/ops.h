/* Element-wise and row-wise operations of the model, forward beside backward
 * (MODEL.md, "Dense pieces").  Outputs first, then inputs, then sizes; the
 * shape of every pointer is in the comment.  Backward functions ADD into the
 * gradients they are given (inputs' and parameters' alike), so a residual
 * stream's gradient can be accumulated from several branches. */
#ifndef MODE_CORE_KERNELS_OPS_H
#define MODE_CORE_KERNELS_OPS_H

#include "core/data/token.h"

#include <stdint.h>

#define RMSNORM_EPS 1e-5f
#define ROPE_BASE 10000.0

/* y = x / sqrt(mean(x^2) + eps) * g.  y[n][d], rstd[n] (saved for backward),
 * x[n][d], g[d].  y may alias x. */
void rmsnorm_forward(float *y, float *rstd, const float *x, const float *g, int n, int d);
/* dx[n][d] += ..., dg[d] += ..., from dy[n][d], x[n][d], g[d], rstd[n]. */
void rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                      const float *rstd, int n, int d);
/* Its two halves: the rows' dx (row by row), and dg (a sum over rows). */
void rmsnorm_backward_dx(float *dx, const float *dy, const float *x, const float *g,
                         const float *rstd, int n, int d);
void rmsnorm_backward_dg(float *dg, const float *dy, const float *x, const float *rstd, int n,
                         int d);

/* RoPE, half-split convention (MODEL.md): cos/sin of p * base^(-2i/dh) for
 * positions 0..max_pos-1 and i < dh/2, computed in double once. */
typedef struct rope_table {
    int max_pos, half;
    float *cos; /* [max_pos][half] */
    float *sin; /* [max_pos][half] */
} rope_table;
int build_rope_table(rope_table **out, int max_pos, int dh);
void free_rope_table(rope_table **t);
/* Rotate in place every head of x[n][n_heads*dh]; row j sits at original
 * position pos[j] (< max_pos). */
void rope_forward(float *x, const int32_t *pos, const rope_table *t, int n, int n_heads, int dh);
/* The transpose (inverse) rotation, applied in place to a gradient. */
void rope_backward(float *dx, const int32_t *pos, const rope_table *t, int n, int n_heads, int dh);

/* g = silu(a) * b, element-wise over count values.  g[count], a, b[count]. */
void swiglu_forward(float *g, const float *a, const float *b, long count);
/* da = dg * b * silu'(a), db = dg * silu(a): written, not added (they are
 * the gradients of the hidden activations, which nothing else feeds). */
void swiglu_backward(float *da, float *db, const float *dg, const float *a, const float *b,
                     long count);

/* row[n] = softmax(scale * row), in place (exp by vexpf). */
void softmax_scaled(float *row, int n, float scale);

/* Causal multi-head attention among n rows of ONE sequence whose original
 * positions increase with the row index (so row j may attend to row m iff
 * m <= j; MoD passes a subset in position order).  q, k, v, out are rows of
 * width d = n_heads*dh (leading dimension ld, so a caller may pass views).
 * probs[n_heads][n][n] keeps the softmax for backward (entries above the
 * diagonal are 0).  Scores are scaled by 1/sqrt(dh).
 *
 * Causal attention skips the blocks above the diagonal: rows [r0, r1) only
 * ever attend to columns [0, r1), so each block of ATTN_BLOCK rows multiplies
 * against the first r1 keys and values only (5/8 of the work at n = 4
 * blocks).  MODEL.md still counts the full n x n products. */
#define ATTN_BLOCK 64
void attention_forward(float *out, float *probs, const float *q, const float *k, const float *v,
                       int n, int n_heads, int dh, int ld);
/* dq, dk, dv [n][ld] += ...; scratch[attention_scratch_floats(n)] is work
 * space. */
void attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                        const float *q, const float *k, const float *v, const float *probs,
                        int n, int n_heads, int dh, int ld);
/* The same for head h alone (p is that head's probs[n][n]): what the heads
 * of a sequence run in parallel. */
void attention_forward_head(float *out, float *p, const float *q, const float *k,
                            const float *v, int n, int h, int dh, int ld);
void attention_backward_head(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                             const float *q, const float *k, const float *v, const float *p,
                             int n, int h, int dh, int ld);
static inline long attention_scratch_floats(int n)
{
    return (long)(n < ATTN_BLOCK ? n : ATTN_BLOCK) * n;
}

/* x[n][d] = tok_emb[tokens[i]]. */
void embedding_forward(float *x, const float *tok_emb, const token_t *tokens, int n, int d);
/* dtok_emb[V][d] += dx rows. */
void embedding_backward(float *dtok_emb, const float *dx, const token_t *tokens, int n, int d);

/* Softmax cross-entropy of logits[n][V] against targets[n].  Returns the SUM
 * of the n losses (double).  When dlogits is not NULL it receives (not adds)
 * scale * (softmax - onehot); dlogits may alias logits. */
double cross_entropy(float *dlogits, const float *logits, const token_t *targets, int n, int V,
                     float scale);

#endif
