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
} exit_state;

static inline const exit_params *exit_params_of(const layer_spec *s)
{
    return (const exit_params *)(const void *)s->params;
}

void exit_layout(buf_plan *p, exit_state *s, const model_dims *dims, int max_seq);

#endif
