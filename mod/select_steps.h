/* A selector of rows by recursion steps (Mixture-of-Recursions, Bae et al.
 * 2025; mor.c, docs/kinds/mor.md), one per step r: the rows still
 * recursing (A_{r-1}) are scored by s_i = x_i . w_r, and those that take the
 * step (T_r) are the k_r best of them (training, top-k evaluation; ties to
 * the lower position) or those with s_i > 0 (the causal rule), each with
 * gate sigmoid(s_i).  In training the causal rule learns top-k's decisions
 * by a BCE on every eligible row. */
#ifndef MODE_MOD_SELECT_STEPS_H
#define MODE_MOD_SELECT_STEPS_H

#include "core/model/kind.h"
#include "mod/routed.h"

#include <stdbool.h>

typedef struct select_steps {
    void *block;          /* the buffers below, one allocation */
    float *s;             /* [rows] the step's scores (0 off the eligible rows) */
    unsigned char *elig;  /* [rows] A_{r-1}: the rows still recursing */
    unsigned char *take;  /* [rows] T_r */
    float *ds;            /* [rows] backward: the scores' gradient */
    float *tmp;           /* [S] top-k's scores, the ineligible rows at -inf */
    int *heap;            /* [S] top-k's heap */
} select_steps;

/* The buffers for max_seq sequences of S (layout and bytes:
 * select_steps_kind.c). */
void select_steps_layout(buf_plan *p, select_steps *st, int max_seq, int S);
int build_select_steps(select_steps *st, int max_seq, int S);
void free_select_steps(select_steps *st);
double select_steps_bytes(int max_seq, int S);

/* x . w in one order, the same in the forward and in decoding (a sum in
 * another order could flip a score near 0, and the decision with it). */
float select_steps_score_row(const float *x, const float *w, int d);
/* Decoding, the causal rule on one row x[d]: 1 when s > 0 (its gate
 * sigmoid(s) in *gate), else 0. */
int select_steps_decide(const float *x, const float *w, int d, float *gate);
/* s_i for the eligible rows of x[n][d] with the step's router w[d];
 * returns how many rows were eligible. */
long select_steps_score(select_steps *st, const float *x, const float *w, int n, int d);
/* T_r into take and set: the k best eligible rows of each sequence, or
 * (causal) those with s_i > 0. */
void select_steps_choose(select_steps *st, routed_set *set, int k, bool causal, int nseq, int S);
/* *aux += the causal rule's BCE(s_i, take_i) over the eligible rows, in
 * row order. */
void select_steps_bce(const select_steps *st, int n, double *aux);
/* The scores' gradient: dgate[j] through the set's gates, and the BCE's
 * (weight aux_weight, scale bscale) on the eligible rows; then
 * dw += x^T ds and dx += ds w^T for s = x w. */
void select_steps_backward(select_steps *st, const routed_set *set, const float *dgate,
                           double aux_weight, float bscale, const float *x, const float *w,
                           float *dw, float *dx, int n, int d);

#endif
