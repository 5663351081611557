/* Self-speculative greedy decoding (LayerSkip, Elhoushi et al. 2024;
 * docs/speculative.md): the first E + 1 layers and exit point E's head
 * draft K tokens, the whole model verifies them position by position from
 * the draft's layer-E state, the longest agreeing prefix and the whole
 * model's correction are kept, and the rejected positions' keys and values
 * are rolled back.  The tokens equal greedy decoding by the whole model. */
#ifndef MODE_EXPERIMENTS_SPECULATIVE_H
#define MODE_EXPERIMENTS_SPECULATIVE_H

#include "core/model/model.h"

typedef struct spec_stats {
    long rounds;       /* draft-verify rounds */
    long drafted;      /* draft tokens proposed */
    long accepted;     /* of them, equal to the whole model's token */
    double flops;      /* products run for the generated tokens (matmul.h's count) */
    double seconds;    /* from the step whose logits give the first new token */
} spec_stats;

/* The layer of --speculative's value: E (an exit point) or "auto" (the
 * deepest exit point before the last layer); -1 with why[] when the
 * model or the value does not allow it. */
int spec_exit_layer(const model *m, const char *value, char *why, int why_len);

/* Generate n tokens after prompt[plen] into out[n], greedily: draft > 0,
 * self-speculative with exit point E and draft tokens a round; draft == 0,
 * the whole model a token at a time (the reference, and --bench's plain
 * side).  Calls model_decode_begin itself.  0, or negative with err. */
int spec_generate(model *m, mode_ctx *ctx, const token_t *prompt, long plen, long n, int E,
                  int draft, token_t *out, spec_stats *st, char *err, int err_len);

#endif
