/* Causal multi-head attention that keeps no n x n matrix: the FlashAttention
 * scheme (Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact
 * Attention with IO-Awareness"; the loop orders of FlashAttention-2, Dao
 * 2023, Algorithms 1 and 2), on CPU.  Forward beside backward; outputs
 * first, then inputs, then sizes.
 *
 * The rows are n rows of ONE sequence whose original positions increase
 * with the row index, so row j may attend to row m iff m <= j (a routed
 * layer passes a subset in position order).  q, k, v, out are rows of width d = n_heads*dh
 * with leading dimension ld (a caller may pass views); scores are scaled by
 * 1/sqrt(dh) (MODEL.md).
 *
 * The rows are cut into tiles of ATTN_ROWS and the keys into tiles of
 * ATTN_KEYS.  The forward runs an online softmax over the key tiles of each
 * row tile and keeps, for backward, one log-sum-exp per row and head
 * (lse[n_heads][n]); the backward recomputes each tile's probabilities
 * from it.  Tiles above the diagonal are skipped in both passes, and so is
 * the work above the diagonal inside a tile that crosses it (to 8 x 32
 * register tiles).  Memory is linear in n: the scratch below, one per
 * (sequence, head) task at a time.  MODEL.md still counts the full n x n
 * products.
 *
 * Every tile has a shape fixed by (n, dh) alone and is computed by the same
 * code whichever thread runs it, so a head's result is the same bits at any
 * thread count.  The products are the kernel's own register-tiled loops,
 * not sgemm: OpenBLAS's kernel set does not enter attention's bits. */
#ifndef MODE_CORE_KERNELS_ATTENTION_H
#define MODE_CORE_KERNELS_ATTENTION_H

/* Rows and keys of a tile.  With d_head 64 a (row tile, key tile) pair's
 * operands and its two score tiles take under 200 KiB, in Zen 4's 1 MiB L2.
 * At the bench shape (S 256, d_head 64) 64 x 128 measured 2-6% faster than
 * the other shapes tried (rows x keys): 64 x 64, 128 x 128, 32 x 128,
 * 32 x 64, 128 x 64 and 64 x 32. */
#define ATTN_ROWS 64
#define ATTN_KEYS 128

/* Floats of scratch that one head's forward or backward needs for n rows
 * of head width dh (the backward's, the larger). */
long attention_scratch_floats(int n, int dh);
/* The forward's alone. */
long attention_fwd_scratch_floats(int n, int dh);

/* Head h: out[n][ld] (that head's dh columns) and lse[n] (that head's
 * log-sum-exp of the scaled scores, per row) from q, k, v [n][ld];
 * scratch[attention_fwd_scratch_floats(n, dh)]. */
void attention_forward_head(float *out, float *lse, float *scratch, const float *q,
                            const float *k, const float *v, int n, int h, int dh, int ld);
/* dq, dk, dv [n][ld] += (head h's columns), given dout [n][ld], the
 * forward's out [n][ld] and lse[n], and q, k, v [n][ld];
 * scratch[attention_scratch_floats(n, dh)]. */
void attention_backward_head(float *dq, float *dk, float *dv, float *scratch,
                             const float *dout, const float *out, const float *q,
                             const float *k, const float *v, const float *lse, int n, int h,
                             int dh, int ld);

/* Every head in turn: lse[n_heads][n]. */
void attention_forward(float *out, float *lse, float *scratch, const float *q, const float *k,
                       const float *v, int n, int n_heads, int dh, int ld);
void attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                        const float *out, const float *q, const float *k, const float *v,
                        const float *lse, int n, int n_heads, int dh, int ld);

#endif
