/* Batched decoding (mode-exp sample --batch B): B independent sequences,
 * "lanes", decoded together, every lane at the same position each step.
 * A block keeps one key-value cache a lane and scratch for up to B rows, so
 * that a step's rows share the block's products (one n x d by d x d product
 * in place of n vector products) while each row attends to its own lane's
 * cache.  The maths of each row is kind.h decode()'s on that lane alone; the
 * products of n rows add in another order than a row's alone, so the logits
 * agree to float rounding, not to the bit (tests/model/test_lanes.c). */
#ifndef MODE_MODEL_LANES_H
#define MODE_MODEL_LANES_H

#include "core/model/block.h"

#define MODE_MAX_LANES 1024 /* the most sequences batched decoding steps at once */

typedef struct decode_lanes decode_lanes;
struct decode_lanes {
    int lanes;          /* caches, and the rows the scratch below holds */
    int f;              /* the MLP's hidden width (0: no MLP cache) */
    kv_cache *kv;       /* [lanes] */
    /* a Cross-Layer Attention reader: its group's first layer's lanes,
     * whose caches it reads (that layer has just added this step's rows)
     * and never adds to; NULL: kv */
    const struct decode_lanes *read_from;
    mlp_cache mlp;      /* rows */
    float *u, *q, *k, *v, *att, *h, *xs, *ys; /* [lanes][d] */
    float *rstd, *gate; /* [lanes] */
    float *sc;          /* [H][max_len] attention's scores, every head at once */
    long sc_floats;
    int32_t *pos;       /* [lanes] */
    int *lane;          /* [lanes] */
};

/* Size dl for `lanes` lanes of up to max_len positions each (growing it
 * only when larger) and empty every lane's cache; f: the MLP width its
 * rows run (0: none). */
int decode_lanes_begin(decode_lanes *dl, const model_dims *dims, int f, int max_len, int lanes);
/* A reader's: its scratch alone (one-row caches), read_from kept. */
int decode_lanes_begin_reader(decode_lanes *dl, const model_dims *dims, int f, int max_len,
                              int lanes);
void free_decode_lanes(decode_lanes *dl);

/* h[n][d] = x + Attn(x) for row i of x[n][d] as lane lane[i]'s token at
 * position pos (distinct lanes), its k and v joining that lane's cache:
 * attn_decode's maths row by row, the projections one product of n rows.
 * A reader (w->wk NULL) computes queries alone against dl->read_from's
 * caches.  An attention that keeps its probabilities (block.h attn_core,
 * set on the lanes' caches) runs head by head with the lane's index. */
int attn_decode_rows(decode_lanes *dl, float *h, const float *x, const int *lane, int n,
                     int32_t pos, const attn_weights *w, const fwd_args *a);

/* y[n][d] = Block(x) (attention, then RMSNorm and SwiGLU with the
 * residual) for the rows as attn_decode_rows. */
int block_decode_rows(decode_lanes *dl, float *y, const float *x, const int *lane, int n,
                      int32_t pos, const attn_weights *aw, const float *mlp_norm,
                      const ffn_weights *fw, const fwd_args *a);

/* Row i of a batched step as lane `lane`'s own sequence: its draws (a
 * random router's, the experts' random and counterfactual ones) keyed by
 * sequence a->seq0 + lane, as sequence lane's in a forward, and its token
 * a->tokens[lane] (the hash router's). */
fwd_args lane_args(const fwd_args *a, int lane);

/* The products' execution for decoding rows: fp32 (as decode()), on the
 * caller's pool (the same bits at any thread count, matmul.h). */
matmul_exec decode_rows_exec(const fwd_args *a);

#endif
