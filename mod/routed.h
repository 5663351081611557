/* The routed block, written once for every kind that runs a block on some
 * rows of the stream (mod, tcmod, drop, mor, staged; Raposo et al. 2024,
 * Eq. 1):
 *     X~ = x[T];  h = X~ + Attn(X~);  Y = inner(h);
 *     x_i <- x_i + g_i (Y - X~)_i   for i in T,
 * attention among T only (causal by original position, RoPE with original
 * positions).  A selector (router.c's top-k and causal rule, select_draws.c,
 * select_steps.c) fills the routed set T with each row's position and gate
 * g_i; the inner op is the block's second half, the dense MLP
 * (routed_dense, here) or the experts (moe/staged.c). */
#ifndef MODE_MOD_ROUTED_H
#define MODE_MOD_ROUTED_H

#include "core/model/block.h"
#include "core/model/lanes.h"
#include "core/model/kind.h"

#include <stdbool.h>
#include <stdint.h>

/* The rows that take the block, in sequence order: row index, original
 * position and gate value of each, where each sequence's rows start. */
typedef struct routed_set {
    int n_sel, nseq;
    long sum_sq;        /* sum over sequences of (selected rows)^2 */
    int *sel;           /* [rows] row index of each selected row, by sequence */
    int *seq_start;     /* [max_seq+1] */
    int32_t *pos;       /* [rows] original positions of the selected rows */
    float *gate;        /* [rows] g of the selected rows */
} routed_set;

/* Filling a set: begin, then per sequence in order add its rows and close
 * it with routed_set_next_seq. */
void routed_set_begin(routed_set *s);
void routed_set_add(routed_set *s, int row, int32_t pos, float gate);
void routed_set_next_seq(routed_set *s);

/* The block's data movement (Eq. 1):
 * gather: xs[j] = x[sel[j]];  scatter: y = x, y[sel[j]] += g_j (ys - xs)[j];
 * scatter_backward: dys = g dy[sel], dgate = <dy[sel], ys - xs> (dx's
 * identity path is added too); gather_backward: dx[sel[j]] += dxs - dys. */
void routed_gather(const routed_set *s, float *xs, const float *x, int d);
void routed_scatter(const routed_set *s, float *y, const float *x, const float *ys,
                    const float *xs, int n_rows, int d);
void routed_scatter_backward(const routed_set *s, float *dys, float *dgate, float *dx,
                             const float *dy, const float *ys, const float *xs, int n_rows, int d);
void routed_gather_backward(const routed_set *s, float *dx, const float *dxs, const float *dys,
                            int d);
/* The set as attention's rows. */
row_set routed_row_set(const routed_set *s);

/* The block's buffers on its selected rows, grown to what a batch needs and
 * never shrunk: k rows a sequence in training, whatever the causal rule
 * takes in evaluation.  f is the MLP's hidden width; 0 for staged, whose
 * MLP is the experts, so that mlp holds the norm's m and rstd only. */
typedef struct routed_rows {
    int cap_rows;
    void *block;        /* the buffers below, one allocation (routed_rows_layout) */
    float *xs, *h, *ys; /* [cap_rows][d] gathered input, after attention, block output */
    attn_cache attn;
    mlp_cache mlp;
} routed_rows;

/* The backward work space for sel selected rows (of at most k a sequence):
 * the scatter's and the gather's gradients, then the sublayers' share (the
 * larger of attention's and the MLP's; f 0: the MLP is the experts, which
 * keep their own). */
typedef struct routed_ws {
    float *dys, *dxs, *dh; /* [sel][d] */
    float *dmm;            /* [sel][d] the experts' input gradient (f 0), else NULL */
    float *dgate;          /* [sel] */
    float *sub;            /* attn_backward's or mlp_backward's */
} routed_ws;
void routed_ws_layout(buf_plan *p, routed_ws *w, const model_dims *dims, int f, long sel,
                      int k);
long routed_ws_floats(const model_dims *dims, int f, long sel, int k);

/* The buffers' layouts (buf.h): the set's for max_seq sequences, the
 * rows' for rows rows. */
void routed_set_layout(buf_plan *p, routed_set *s, int max_seq, int S);
void routed_rows_layout(buf_plan *p, routed_rows *r, const model_dims *dims, int f, int rows);

typedef struct routed_block routed_block;

/* The block's second half, after attention: ys[n][d] from h[n][d] on the
 * set's rows.  w: the block's tensors from the norm on (the norm, then the
 * MLP's or the experts' tensors). */
typedef struct routed_inner {
    bool mlp; /* the rows keep the dense MLP's caches (width d_ff); false: the op its own */
    int (*forward)(routed_block *b, const fwd_args *a, float *const *w);
    /* dh = d loss / d h given v->dys (dh is the op's to set); adds into dw */
    int (*backward)(routed_block *b, const fwd_args *a, float *const *w, float *const *dw,
                    const routed_ws *v);
    /* FLOPs of the op on rows rows, beyond what it counts itself */
    double (*flops)(const model_dims *dims, long rows);
    /* decoding one row: ys[d] from h[d] at position pos */
    int (*decode)(routed_block *b, const fwd_args *a, float *const *w, float *ys, const float *h,
                  int32_t pos);
    /* batched decoding (lanes.h): ys[n][d] from h[n][d], row i lane
     * lane[i]'s; NULL: the block decodes one sequence at a time */
    int (*decode_rows)(routed_block *b, const fwd_args *a, float *const *w, float *ys,
                       const float *h, const int *lane, int n, int32_t pos);
    /* sizes the op's own batched-decoding state for `lanes` lanes (NULL: none) */
    int (*decode_lanes)(routed_block *b, const model_dims *dims, int lanes);
} routed_inner;

/* The dense MLP (MODEL.md's block): mod, tcmod, drop, mor. */
extern const routed_inner routed_dense;

struct routed_block {
    const routed_inner *inner;
    void *self;         /* the inner op's own state (staged: its experts) */
    int f;              /* the rows' MLP width: d_ff, or 0 (inner->mlp false) */
    int seq_rows;       /* the most rows of a sequence in training (the work space's k) */
    routed_set set;     /* filled by the kind's selector before routed_forward */
    void *set_block;    /* the set's buffers, one allocation */
    routed_rows rows;
    kv_cache kv;        /* decoding */
    mlp_cache mlp1;     /* decoding, the dense inner's */
    float *dec;         /* [3d] decoding: h, ys, the inner's scratch */
    decode_lanes lanes; /* batched decoding */
};

/* A block for max_seq sequences whose rows start at max_seq seq_rows. */
int build_routed_block(routed_block *b, const routed_inner *inner, void *self,
                       const model_dims *dims, int max_seq, int seq_rows);
void free_routed_block(routed_block *b);
/* The bytes of build_routed_block's buffers (mode-exp plan). */
double routed_block_bytes(const model_dims *dims, int f, int max_seq, int seq_rows);

/* y[n][d] from x[n][d] (n = a->nseq * a->seq_len) through the block on the
 * set's rows; w: the block's tensors (attention's first).  Adds the block's
 * FLOPs to a->flops_executed. */
int routed_forward(routed_block *b, float *const *w, const fwd_args *a, float *y,
                   const float *x);
/* dx += the block's input gradient given dy (the identity path included),
 * dw += its weight gradients; *dgate: [n_sel] d loss / d g of each selected
 * row, for the selector's backward (it lives in a->ws until the next carve). */
int routed_backward(routed_block *b, float *const *w, float *const *dw, const fwd_args *a,
                    float *dx, const float *dy, const float **dgate);
/* FLOPs of the block on the set's rows. */
double routed_flops(const routed_block *b, const model_dims *dims);

/* Decoding: the caches for max_len positions, emptied. */
int routed_decode_begin(routed_block *b, const model_dims *dims, int max_len);
/* One row x[d] at position pos that takes the block with gate g:
 * y = x + g (Block(x) - x); y may be x. */
int routed_decode(routed_block *b, float *const *w, const fwd_args *a, float *y, const float *x,
                  int32_t pos, float g);
/* Batched decoding (core/model/lanes.h): the caches of `lanes` lanes for
 * max_len positions, emptied; -ENOTSUP when the inner op has no batched
 * decoding. */
int routed_decode_lanes(routed_block *b, const model_dims *dims, int max_len, int lanes);
/* Row i of x[n][d] is lane i's token at position pos; take[i] (and gate
 * g[i]) as a selector decided: the taking rows, gathered, run the block
 * together (y = x + g (Block(x) - x)), the others pass (y = x). */
int routed_decode_rows(routed_block *b, float *const *w, const fwd_args *a, float *y,
                       const float *x, int n, int32_t pos, const unsigned char *take,
                       const float *g);
/* Only the row's keys and values into the cache, as routed_decode would add
 * them (a token frozen at an exit point, kind.h decode_kv). */
int routed_decode_kv(routed_block *b, float *const *w, const fwd_args *a, const float *x,
                     int32_t pos);

#endif
