/* The `exit` kind's state, shared by its description (exit_kind.c) and its
 * compute (exit.c).  Private to mod/. */
#ifndef MODE_MOD_EXIT_STATE_H
#define MODE_MOD_EXIT_STATE_H

#include "core/model/kind.h"

#include <stdbool.h>

enum { EXIT_MAX, EXIT_ENTROPY, EXIT_DIVERGENCE, EXIT_CONFIDENCE_COUNT };

/* The [exit] keys' values. */
typedef struct exit_params {
    double weight;    /* the exit's cross-entropy in the training loss */
    int confidence;   /* EXIT_MAX | EXIT_ENTROPY | EXIT_DIVERGENCE */
    double threshold; /* max p above it, entropy or divergence below it: the token leaves */
} exit_params;

typedef struct exit_state {
    void *block;
    float *u, *rstd;     /* [rows][d], [rows] RMSNorm_exit(x) */
    float *logits;       /* [rows][V] (training: d loss / d logits after the forward) */
    float *logp;         /* [rows][V] evaluation: log-probabilities (the next exit's divergence) */
    unsigned char *left; /* [rows] evaluation: tokens that left here */
    float *conf;         /* [rows] their confidence measure */
    double sums[2];      /* the exit's CE summed, its tokens */
    float *dec;          /* [d + 2 V] decoding: u, logits, log-probabilities */
    int rows;            /* the rows above: a forward's, and batched decoding's most lanes */
    /* What the stack's exit points share (layer.shared, exit_shared_bytes),
     * for the rows of a forward or the one of a decoding step: active[i] is
     * 1 while token i is in the stack; the exit point that takes it out
     * clears it and writes its head input (its normed state u_i) into
     * head_in[i]; the first exit point (lead) then keeps the token's row
     * frozen through the later layers and gives the head head_in's row
     * (exit_stack).  Unused in training. */
    float *head_in;          /* [rows][d] */
    unsigned char *active;   /* [rows] */
    /* Found when the stack is built (STACK_BUILT) */
    const struct exit_state *prev; /* the previous exit point's state, or NULL */
    bool lead;                     /* the first exit point of the stack */
    const float *tok_emb;          /* [V][d] the tied head */
    float *dtok_emb;               /* [V][d] its gradient */
    const token_t *targets;        /* [rows] the forward's next tokens */
} exit_state;

static inline const exit_params *exit_params_of(const layer_spec *s)
{
    return (const exit_params *)(const void *)s->params;
}

void exit_layout(buf_plan *p, exit_state *s, const model_dims *dims, int max_seq);
/* The shared block's layout: head_in, then active. */
void exit_shared_layout(exit_state *s, void *shared, const model_dims *dims, int max_seq);

#endif
