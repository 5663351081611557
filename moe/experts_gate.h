/* The experts' routing (experts_gate.c): the balancing bias and the
 * statistics the kinds use (through experts.h), then what experts.c's
 * forward, backward and decode call of it (private to moe/). */
#ifndef MODE_MOE_EXPERTS_GATE_H
#define MODE_MOE_EXPERTS_GATE_H

#include "moe/experts_kind.h"

#include "core/model/block.h"

#include <stdbool.h>
#include <stdint.h>

/* After an optimizer step (every rank, the same loads): the balancing
 * bias moved against each expert's load error over the step's global
 * batch (when updated), the loads reset.  Nothing without bias_rate. */
void experts_step_end(experts *ex, float *const *w, bool updated);

/* Statistics of the last FWD_TRAIN forward (their counts: experts_kind.h):
 * sums (add over ranks) and their columns. */
void experts_stat_name(const experts_cfg *c, int col, char *buf, int len);
void experts_stat_sums(const experts *ex, double *sums);
void experts_stat_columns(const experts_cfg *c, const double *sums, double *cols);

/* Token choice: gate, top-k and capacity for one row set; fills probs,
 * lse, col, choice, weight; statistics and auxiliary losses in training
 * (with the global batch's load summed over the ranks: every rank's
 * training forward calls it).  w: the experts' tensors (the gate and the
 * bias read from it). */
int experts_gate(experts *ex, const fwd_args *a, const float *m, const row_set *rs,
                 float *const *w, int capacity);
/* Expert choice (docs/kinds/ec.md): each expert the capacity tokens of a
 * sequence of highest probability; wg: the gate. */
int experts_ec_gate(experts *ex, const fwd_args *a, const float *m, const row_set *rs,
                    const float *wg, int capacity);
/* Decoding's routing of one row m[d] (sequence seq, position pos): the
 * logits in p[N] and their log-sum-exp, the choices and their weights in
 * ex->dec_col and ex->dec_weight, with evaluation's row policies. */
void experts_gate_token(experts *ex, const fwd_args *a, float *p, float *lse, const float *m,
                        float *const *w, long seq, int32_t pos);
/* The log-sum-exp of the logits l[N]: the gate's, expert choice's and
 * decoding's one rule. */
float experts_lse(const float *l, int N);
/* The balance loss's load fraction of column e in the rows [r0, r1) of
 * one sequence: its own (Switch), or the global batch's. */
double experts_load_frac(const experts *ex, int e, int r0, int r1);

#endif
