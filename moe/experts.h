/* Token-choice experts in place of a block's MLP (MODEL.md `moe`, and the
 * no-op column of `integrated`), over any set of rows grouped by sequence so
 * that staged MoDE can run them on the rows MoD selected.
 *
 * Expert parallelism: with P ranks and E experts, rank r computes E/P of
 * them (P <= E), or, with P > E, the ranks form P/E groups of E and each
 * computes one expert for the tokens of its group.  A token's row travels
 * to its expert's rank and back with one all-to-all routine (comm_alltoallv,
 * counts exchanged first), in the forward pass (dispatch, combine) and the
 * backward pass (their gradients).  A rank stores only the experts it
 * computes (model_dims ranks and rank: experts_first, experts_local): their
 * weights, gradients and Adam moments; the tensors' views hold those experts
 * alone, local expert l being expert first + l. */
#ifndef MODE_MOE_EXPERTS_H
#define MODE_MOE_EXPERTS_H

#include "core/model/block.h"
#include "core/model/kind.h"

#include <stdbool.h>
#include <stdint.h>

/* Experts a layer may have (the no-op aside): the gate's columns are a
 * plain loop, the dispatch a counting sort, nothing assumes a word of bits
 * per expert. */
#define MOE_MAX_EXPERTS 4096

typedef struct experts_cfg {
    int experts;      /* E, real experts */
    bool noop;        /* one more gate column: the no-op expert (integrated MoDE) */
    int top_k;
    double capacity_factor; /* 0: no dropping */
    int d_ff;         /* per expert */
    double balance_weight, z_weight;
} experts_cfg;

/* Gate columns: E, or E+1 with the no-op. */
static inline int experts_columns(const experts_cfg *c)
{
    return c->experts + (c->noop ? 1 : 0);
}

/* ceil(capacity_factor * top_k * rows / E), or INT32_MAX without dropping. */
int experts_capacity(const experts_cfg *c, int rows_per_seq);

typedef struct experts experts; /* activations and buffers, opaque */

int build_experts(experts **out, const experts_cfg *c, const model_dims *dims);
/* The bytes the experts keep for rows token rows a step (mode-exp plan):
 * the gate's per-row buffers, the dispatch's (kept assignments) and, on the
 * expert side, as many received rows as this rank sends (balanced routing;
 * a capacity factor bounds the busiest expert at cf times that), their
 * SwiGLU caches and backward work space for this rank's experts. */
double experts_bytes(const experts_cfg *c, const model_dims *dims, long rows);
void free_experts(experts **x);

/* Tensor descriptors: gate [d][N], experts_w1 [E][d][f], experts_w3 [E][d][f],
 * experts_w2 [E][f][d].  Returns the count (4); out may be NULL. */
int experts_tensors(tensor_desc *out, const experts_cfg *c, const model_dims *dims);
enum { EXPERTS_TENSORS = 4 };

/* y[n][d] += sum over kept assignments of p_e SwiGLU_e(m); m[n][d] is the
 * normalised input.  capacity: per expert and per sequence.  Adds the
 * balance and z losses to a->aux_loss (FWD_TRAIN) and the executed FLOPs.
 * Every rank must call it (it talks to the others) whenever one does. */
int experts_forward(experts *x, const fwd_args *a, float *y, const float *m, const row_set *rs,
                    float *const *w, int capacity);
/* dm[n][d] += ..., dw += ..., given dy (the gradient of y). */
int experts_backward(experts *x, const fwd_args *a, float *dm, const float *dy, const float *m,
                     const row_set *rs, float *const *w, float *const *dw);

/* Decoding, one row at a time, in a model that holds every expert (built
 * for one rank): y[d] += ...; the admission counters run over the sequence
 * since the last reset, so the capacity rule matches the forward pass.
 * Returns the first choice's column (E = the no-op), -EINVAL in a model
 * whose experts are spread over ranks. */
void experts_decode_reset(experts *x);
int experts_decode(experts *x, const fwd_args *a, float *y, const float *m, float *const *w,
                   int capacity);

/* Statistics of the last FWD_TRAIN forward: sums (add over ranks) and their
 * columns: tokens kept per column (N), dropped assignments, balance loss,
 * z-loss, router entropy. */
int experts_stat_sums_count(const experts_cfg *c);
int experts_stat_cols_count(const experts_cfg *c);
void experts_stat_name(const experts_cfg *c, int col, char *buf, int len);
void experts_stat_sums(const experts *x, double *sums);
void experts_stat_columns(const experts_cfg *c, const double *sums, double *cols);

/* Routing record of the last forward: chosen columns [n][top_k] (int32, -1
 * for a dropped assignment), gate weights [n][top_k]. */
const int32_t *experts_choices(const experts *x);
const float *experts_weights(const experts *x);

/* Nominal forward FLOPs for rows_per_seq rows of one sequence: the gate and
 * every assignment at a real expert (MODEL.md: no-op charged as real). */
double experts_flops(const experts_cfg *c, const model_dims *dims, long rows_per_seq);

#endif
