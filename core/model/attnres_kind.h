/* The `attnres` kind's keys and state (attention residual, docs/kinds/
 * attnres.md), shared by its description (attnres_kind.c) and its compute
 * (attnres.c).  Private to core/model. */
#ifndef MODE_CORE_MODEL_ATTNRES_KIND_H
#define MODE_CORE_MODEL_ATTNRES_KIND_H

#include "core/model/dense.h"

typedef struct attnres_params {
    double alpha;     /* the fixed mix (learn_alpha false) */
    bool learn_alpha; /* alpha = sigmoid(alpha_logit), a tensor of the layer */
    double max_mib;   /* the most one sequence's kept probabilities may take a layer */
} attnres_params;

extern const key_group attnres_group;

static inline const attnres_params *attnres_params_of(const layer_spec *spec)
{
    return (const attnres_params *)spec->params;
}

/* The tensors: dense's nine, then alpha_logit [1] when learned. */
int attnres_n_tensors(const attnres_params *p);

/* One sequence's kept floats a layer: A and P (forward), dA (backward). */
double attnres_seq_floats(const model_dims *dims);

/* What the layer keeps beside its dense_state (whose attn.core and kv.core
 * point at core, the first member). */
typedef struct attnres_state {
    attn_core core;
    void *block;
    float *a;      /* [max_seq][H][S][S] A_l, the mixed probabilities (j <= i) */
    float *p;      /* [max_seq][H][S][S] softmax(q k^T / sqrt(dh)) */
    float *da;     /* [max_seq][H][S][S] d loss / d A_l from the layer above, then the total */
    double *dalpha; /* [max_seq][H] backward's d loss / d alpha, a task each */
    const struct attnres_state *prev; /* the layer below when it is attnres: A_{l-1} */
    bool above;    /* the layer above is attnres: it writes da */
    float alpha;   /* this pass's mix (1 - alpha of P; alpha of A_{l-1}) */
    int H, S, dh, d;
    /* decoding: this position's A row over the cached positions, a
     * sequence each ([lanes][H][cap]; lane 0 when one sequence decodes) */
    float *arow;
    int arow_cap, arow_lanes;
} attnres_state;

void attnres_layout(buf_plan *p, attnres_state *s, const model_dims *dims, int max_seq);

#endif
