/* The `drop` kind's description (its compute: drop.c). */
#include "mod/drop.h"
#include "mod/drop_state.h"
#include "mod/mod.h"

#include <errno.h>
#include <stddef.h>

_Static_assert(sizeof(drop_params) <= MODE_PARAMS_BYTES, "drop's keys fit a layer_spec");

static const char *const schedules[] = { [DROP_LINEAR] = "linear", [DROP_CONSTANT] = "constant",
                                         NULL };
static const char *const units[] = { [DROP_SEQUENCE] = "sequence", [DROP_TOKEN] = "token", NULL };

#define P(f) offsetof(drop_params, f)
static const kind_key drop_keys[] = {
    { "p", KEY_REAL, P(p), "0.1", 0, 1, KEY_MAX_OPEN, NULL,
      "the drop probability in training: of the last layer, the others (l + 1) / L of it "
      "(schedule = linear), or of every layer (constant)", 0 },
    { "schedule", KEY_CHOICE, P(schedule), "linear", 0, 0, 0, schedules,
      "linear: p_l = p (l + 1) / L (Huang et al.); constant: p_l = p (LayerDrop)", 0 },
    { "unit", KEY_CHOICE, P(unit), "sequence", 0, 0, 0, units,
      "what a draw skips: a whole sequence's pass through the layer (its work saved), or one "
      "token's update (every token still computed: keys and values for the others)", 0 },
    { "rescale", KEY_BOOL, P(rescale), "true", 0, 0, 0, NULL,
      "true: a kept update is divided by 1 - p_l in training, evaluation runs it whole; false: "
      "training keeps it as is, evaluation multiplies it by 1 - p_l", 0 },
    { "prune", KEY_BOOL, P(prune), "false", 0, 0, 0, NULL,
      "evaluation and sampling skip this layer (its update and its work): set per layer "
      "([layer.N] prune = true) or as a dial (eval CKPT layer.3.prune=true)", 0 },
    { "prune_every", KEY_INT, P(prune_every), "0", 0, KEY_NO_MAX, 0, NULL,
      "evaluation and sampling skip the drop layers l with (l + 1) % n = 0; 0: none", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

const key_group drop_group = {
    .section = "drop", .keys = drop_keys, .size = sizeof(drop_params), .check = NULL,
};

static const kind_group drop_groups[] = {
    { &drop_group, 0 },
    { NULL, 0 },
};

double drop_probability(const drop_params *p, int l, int L)
{
    return p->schedule == DROP_CONSTANT ? p->p : p->p * (double)(l + 1) / (double)L;
}

bool drop_pruned(const drop_params *p, int l)
{
    return p->prune || (p->prune_every > 0 && (l + 1) % p->prune_every == 0);
}

static int drop_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    if (out) {
        if (max < BLOCK_TENSORS)
            return -EINVAL;
        block_tensors(out, dims, true);
    }
    return BLOCK_TENSORS;
}

static double drop_state_bytes(const layer_spec *spec, const model_dims *dims, int li, int max_seq)
{
    return routed_block_bytes(dims, dims->d_ff, max_seq, dims->seq_len);
}

static long drop_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    return routed_ws_floats(dims, dims->d_ff, (long)max_seq * dims->seq_len, dims->seq_len);
}

/* Nominal: the whole block (a drop saves only what its draws skip). */
static double drop_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    long S = dims->seq_len;
    return mod_block_flops(dims, S, S * S);
}

const layer_kind drop_kind = {
    .name = "drop",
    .groups = drop_groups,
    .tensors = drop_tensors,
    .flops = drop_flops,
    .state_bytes = drop_state_bytes,
    .ws_floats = drop_ws_floats,
    .decides = { .decides = DECIDES_DRAW }, /* Bernoulli skips, not recorded */
};
