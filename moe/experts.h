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

#include "moe/experts_gate.h"
#include "moe/experts_kind.h"

#include "core/model/block.h"

#include <stdbool.h>
#include <stdint.h>


/* The experts of layer (its index in the stack keys their random streams). */
int build_experts(experts **out, const experts_cfg *c, const model_dims *dims, int layer_index);
void free_experts(experts **ex);


/* y[n][d] += sum over kept assignments of p_e SwiGLU_e(m); m[n][d] is the
 * normalised input.  capacity: per expert and per sequence.  Adds the
 * balance and z losses to a->aux_loss (FWD_TRAIN) and the executed FLOPs.
 * Every rank must call it (it talks to the others) whenever one does. */
int experts_forward(experts *ex, const fwd_args *a, float *y, const float *m, const row_set *rs,
                    float *const *w, int capacity);
/* dm[n][d] += ..., dw += ..., given dy (the gradient of y). */
int experts_backward(experts *ex, const fwd_args *a, float *dm, const float *dy, const float *m,
                     const row_set *rs, float *const *w, float *const *dw);

/* Decoding, one row at a time, in a model that holds every expert (built
 * for one rank): y[d] += ...; the admission counters run over the sequence
 * since the last reset, so the capacity rule matches the forward pass.
 * Returns the first choice's column (E = the no-op), -EINVAL in a model
 * whose experts are spread over ranks. */
void experts_decode_reset(experts *ex);
int experts_decode(experts *ex, const fwd_args *a, float *y, const float *m, float *const *w,
                   int capacity, int32_t pos);

/* Batched decoding (core/model/lanes.h): experts_decode_lanes() sizes the
 * state of `lanes` lanes and resets their counters; experts_decode_rows()
 * is experts_decode on row i of m[n][d], lane lane[i]'s token at pos (its
 * own counters; its token and sequence a->tokens[lane[i]], a->seq0 +
 * lane[i] for the hash and random routers), each expert's rows one
 * product: y[n][d] += ...  Not for expert-choice (-ENOTSUP). */
int experts_decode_lanes(experts *ex, int lanes);
int experts_decode_rows(experts *ex, const fwd_args *a, float *y, const float *m,
                        float *const *w, int capacity, const int *lane, int n, int32_t pos);
/* Row `row`'s first choice in the last experts_decode_rows (E: the no-op). */
int experts_decode_first(const experts *ex, int row);

/* The balancing bias after an optimizer step and the statistics of a
 * training forward: experts_gate.h. */

/* Routing record of the last forward: chosen columns [n][top_k] (int32, -1
 * for a dropped assignment), gate weights [n][top_k]. */
const int32_t *experts_choices(const experts *ex);
const float *experts_weights(const experts *ex);


#endif
