/* mode-exp sample's pieces shared by one sequence and --batch B (batched
 * decoding, core/model/lanes.h): the sampler, the logits' check, the
 * routed layers' report, and the batched generation itself. */
#ifndef MODE_EXPERIMENTS_SAMPLE_BATCH_H
#define MODE_EXPERIMENTS_SAMPLE_BATCH_H

#include "core/config/config.h"
#include "core/data/tokenizer.h"
#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "experiments/cli.h"

#include <stdbool.h>

/* Next token from logits[V]: greedy at temperature 0, else softmax(l / T)
 * over the top_k most likely (all when top_k <= 0), drawn with rng; p[V]
 * scratch. */
int sample_token(const float *logits, int V, double temperature, long top_k, pcg32 *rng,
                 double *p);
/* 0 when logits[V] at position pos are finite, else -ERANGE with err. */
int check_logits(const float *logits, int V, int32_t pos, char *err, int err_len);
/* The per-layer lines after generation: how many of `ran` tokens took each
 * routed layer's block (took[l]), read from the kinds' declarations. */
void print_layer_shares(const run_config *cfg, const long *took, long ran);

/* sample --batch B (B > 1): B sequences from the prompt decoded together,
 * lane 0 drawing as a sequence alone does (the same seed's stream), lane
 * i > 0 from its own; prints each sequence, the FLOPs a generated token and
 * the routed layers' shares; with c->bench R, R more rounds of B sequences
 * timed.  0, or 1 after a message. */
int sample_batched(model *m, mode_ctx *ctx, const cli *c, int B, const token_t *prompt,
                   long plen, bool ids, tokenizer *tk, const run_config *cfg);

#endif
