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

/* row[n] = softmax(scale * row), in place (exp by vexpf): what decoding
 * with the KV cache runs for one new row (attention over many rows is
 * core/kernels/attention.h). */
void softmax_scaled(float *row, int n, float scale);

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
