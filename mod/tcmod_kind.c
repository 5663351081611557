/* The `tcmod` kind's description (its compute: tcmod.c). */
#include "mod/tcmod.h"
#include "mod/mod.h"
#include "mod/tcmod_state.h"

#include <errno.h>
#include <stddef.h>

_Static_assert(sizeof(tcmod_params) <= MODE_PARAMS_BYTES, "tcmod's keys fit a layer_spec");

#define P(f) offsetof(tcmod_params, f)
static const kind_key tcmod_keys[] = {
    { "capacity", KEY_REAL, P(capacity), "0.125", 0, 1, KEY_MIN_OPEN, NULL,
      "the share of each sequence's tokens the penalty keeps the block's take near; each token "
      "takes the block when its router score r = x w_r passes 0 (token-choice)", 0 },
    { "penalty", KEY_REAL, P(penalty), "1", 0, KEY_NO_MAX, 0, NULL,
      "weight of the penalty (mean_i sigmoid(k r_i) - capacity)^2 per sequence in the training "
      "loss", 0 },
    { "sharpness", KEY_REAL, P(sharpness), "10", 1, 1000, 0, NULL,
      "k: the penalty's share of tokens is the mean of sigmoid(k r_i), near the share that "
      "passes 0 (with k = 1 the scores can all sink below 0 and meet the capacity in the mean)",
      0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

const key_group tcmod_group = {
    .section = "tcmod", .keys = tcmod_keys, .size = sizeof(tcmod_params), .check = NULL,
};

static const kind_group tcmod_groups[] = {
    { &tcmod_group, 0 },
    { NULL, 0 },
};

mod_router_params tcmod_router_params(const tcmod_params *p)
{
    mod_router_params r = { .capacity = p->capacity, .router = ROUTER_LEARNED,
                            .gate = GATE_SIGMOID, .causal = CAUSAL_NONE, .aux_weight = 0.0,
                            .causal_threshold = 0.0 };
    return r;
}

static int tcmod_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    mod_router_params rp = tcmod_router_params(tcmod_params_of(s));
    mod_router_cfg c = mod_router_parse(&rp, dims);
    int n = c.n_tensors;
    if (out) {
        if (max < n + BLOCK_TENSORS)
            return -EINVAL;
        mod_router_tensors(&c, dims, out);
        block_tensors(out + n, dims, true);
    }
    return n + BLOCK_TENSORS;
}

/* Every token may pass: the block's rows and work space for all S. */
static double tcmod_state_bytes(const layer_spec *spec, const model_dims *dims, int li, int max_seq)
{
    mod_router_params rp = tcmod_router_params(tcmod_params_of(spec));
    long rows = (long)max_seq * dims->seq_len;
    return mod_router_bytes(dims, &rp, max_seq) +
           routed_block_bytes(dims, dims->d_ff, max_seq, dims->seq_len) +
           (double)rows * sizeof(float);
}

static long tcmod_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    return routed_ws_floats(dims, dims->d_ff, (long)max_seq * dims->seq_len, dims->seq_len);
}

/* Nominal: the config cannot know how many tokens pass, so every token is
 * charged (the upper bound; with run.flops_count = executed the budget
 * counts what passed). */
static double tcmod_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    mod_router_params rp = tcmod_router_params(tcmod_params_of(spec));
    mod_router_cfg c = mod_router_parse(&rp, dims);
    long S = dims->seq_len;
    return mod_router_flops(&c, dims) + mod_block_flops(dims, S, S * S);
}

const layer_kind tcmod_kind = {
    .name = "tcmod",
    .groups = tcmod_groups,
    .tensors = tcmod_tensors,
    .flops = tcmod_flops,
    .state_bytes = tcmod_state_bytes,
    .ws_floats = tcmod_ws_floats,
    .decides = { .decides = DECIDES_TAKE, .share_key = "capacity" },
};
