/* The `attnres` kind's description (attention residual, docs/kinds/
 * attnres.md): a dense block whose attention probabilities mix the layer
 * below's, A_l = alpha A_{l-1} + (1 - alpha) softmax(q k^T / sqrt(dh)),
 * kept for backward and for the layer above.  Its compute is attnres.c. */
#include "core/model/attnres_kind.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(attnres_params) <= MODE_PARAMS_BYTES, "attnres's keys fit a layer_spec");

#define P(f) offsetof(attnres_params, f)
static const kind_key attnres_keys[] = {
    { "alpha", KEY_REAL, P(alpha), "0.5", 0, 1, KEY_MAX_OPEN, NULL,
      "the share of the layer below's probabilities in this layer's (learn_alpha false)", 0 },
    { "learn_alpha", KEY_BOOL, P(learn_alpha), "false", 0, 0, 0, NULL,
      "alpha = sigmoid(alpha_logit), a tensor of the layer starting at 0 (alpha 0.5), "
      "instead of the key alpha", 0 },
    { "max_mib", KEY_REAL, P(max_mib), "64", 0, KEY_NO_MAX, KEY_MIN_OPEN, NULL,
      "MiB one sequence's kept probabilities may take a layer (3 H S^2 floats: A, P, dA); "
      "a longer context is refused", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

const key_group attnres_group = {
    .section = "attnres", .keys = attnres_keys, .size = sizeof(attnres_params),
};

static const kind_group attnres_groups[] = {
    { &attnres_group, 0 },
    { NULL, 0 },
};

int attnres_n_tensors(const attnres_params *p)
{
    return BLOCK_TENSORS + (p->learn_alpha ? 1 : 0);
}

double attnres_seq_floats(const model_dims *dims)
{
    return 3.0 * dims->n_heads * (double)dims->seq_len * dims->seq_len;
}

static int attnres_validate(const layer_spec *spec, const model_dims *dims, char *err,
                            int err_len)
{
    const attnres_params *p = attnres_params_of(spec);
    double mib = attnres_seq_floats(dims) * sizeof(float) / (1024.0 * 1024.0);
    if (mib > p->max_mib) {
        snprintf(err, (size_t)err_len,
                 "[attnres] max_mib = %g: a sequence's kept probabilities take %.1f MiB a layer "
                 "(3 H S^2 floats, H = %d, S = %d); expected a shorter seq_len or a larger "
                 "max_mib",
                 p->max_mib, mib, dims->n_heads, dims->seq_len);
        return -EINVAL;
    }
    return 0;
}

void attnres_layout(buf_plan *p, attnres_state *s, const model_dims *dims, int max_seq)
{
    size_t sq = (size_t)max_seq * dims->n_heads * dims->seq_len * dims->seq_len;
    s->a = BUF_FLOATS(p, sq);
    s->p = BUF_FLOATS(p, sq);
    s->da = BUF_FLOATS(p, sq);
    s->dalpha = BUF_DOUBLES(p, (size_t)max_seq * dims->n_heads);
}

static int attnres_tensors(const layer_spec *spec, const model_dims *dims, tensor_desc *out,
                           int max)
{
    int n = attnres_n_tensors(attnres_params_of(spec));
    if (!out)
        return n;
    if (max < n)
        return -EINVAL;
    block_tensors(out, dims, true);
    if (n > BLOCK_TENSORS)
        out[BLOCK_TENSORS] = make_tensor_desc("alpha_logit", 1, 1, 0, 0, INIT_ZEROS, 0.0f);
    return n;
}

static double attnres_state_bytes(const layer_spec *spec, const model_dims *dims, int li,
                                  int max_seq)
{
    (void)spec, (void)li;
    dense_state d;
    attnres_state s;
    buf_plan p = buf_counting(BUF_ALIGN);
    dense_layout(&p, &d, dims, max_seq, false);
    attnres_layout(&p, &s, dims, max_seq);
    return (double)p.used;
}

/* dense's, and the mix: 3 H S^2 (alpha a, (1 - alpha) p, their sum) */
static double attnres_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    long S = dims->seq_len;
    return dense_flops(spec, dims, li) + 3.0 * dims->n_heads * (double)S * S;
}

const layer_kind attnres_kind = {
    .name = "attnres",
    .groups = attnres_groups,
    .validate = attnres_validate,
    .tensors = attnres_tensors,
    .flops = attnres_flops,
    .state_bytes = attnres_state_bytes,
    .ws_floats = dense_ws_floats,
};
