/* The `mod` layer kind: Mixture-of-Depths (Raposo et al. 2024), expert-choice
 * routing of a whole block per sequence (MODEL.md "Layer kinds"). */
#ifndef MODE_MOD_MOD_H
#define MODE_MOD_MOD_H

#include "core/model/kind.h"

extern const layer_kind mod_kind;

/* Hidden width of the causal predictor (MODEL.md: d -> 64 -> 1). */
#define MOD_PRED_HIDDEN 64

/* k = max(1, floor(capacity * S)). */
int mod_k(double capacity, int seq_len);

/* The top-k of one sequence (ties to the lower position): z[i] = 1 for the
 * k largest scores[i], else 0. */
void mod_topk(unsigned char *z, const float *scores, int n, int k, int *scratch);

/* Phi^-1(p), the standard normal quantile (for the random router's causal
 * threshold). */
double mod_normal_quantile(double p);

#endif
