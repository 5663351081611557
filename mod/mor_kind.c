/* The `mor` kind's description (its compute: mor.c). */
#include "core/util/num.h"
#include "mod/mor.h"
#include "mod/mod.h"
#include "mod/mor_state.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>

_Static_assert(sizeof(mor_params) <= MODE_PARAMS_BYTES, "mor's keys fit a layer_spec");

static const char *const schedules[] = { [MOR_LINEAR] = "linear", [MOR_GEOMETRIC] = "geometric",
                                         NULL };

#define P(f) offsetof(mor_params, f)
static const kind_key mor_keys[] = {
    { "recursions", KEY_INT, P(recursions), "3", 1, MOR_MAX_STEPS, 0, NULL,
      "R, how many times the layer's one block may be applied", 0 },
    { "schedule", KEY_CHOICE, P(schedule), "linear", 0, 0, 0, schedules,
      "the tokens step r keeps: linear, max(1, floor(S (R - r + 1) / R)) (every token at the "
      "first step, the paper's); geometric, max(1, floor(S capacity^(r - 1)))", 0 },
    { "capacity", KEY_REAL, P(capacity), "0.5", 0, 1, KEY_MIN_OPEN, NULL,
      "geometric schedule: the share of the sequence kept at each step after the first", 0 },
    { "aux_weight", KEY_REAL, P(aux_weight), "0.01", 0, KEY_NO_MAX, 0, NULL,
      "weight of the causal rule's BCE of sigmoid(s) against being kept, at every step", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

const key_group mor_group = {
    .section = "mor", .keys = mor_keys, .size = sizeof(mor_params), .check = NULL,
};

static const kind_group mor_groups[] = {
    { &mor_group, 0 },
    { NULL, 0 },
};

int mor_k(const mor_params *p, int r, int S)
{
    double share = p->schedule == MOR_LINEAR
                       ? (double)(p->recursions - r + 1) / (double)p->recursions
                       : pow(p->capacity, (double)(r - 1));
    return num_floor_int(share * S, 1, S > 1 ? S : 1);
}

static int mor_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    const mor_params *p = mor_params_of(s);
    if (out) {
        if (max < 1 + BLOCK_TENSORS)
            return -EINVAL;
        out[0] = make_tensor_desc("routers", 2, p->recursions, dims->d_model, 0, INIT_NORMAL,
                                  0.02f);
        block_tensors(out + 1, dims, true);
    }
    return 1 + BLOCK_TENSORS;
}

static double mor_state_bytes(const layer_spec *spec, const model_dims *dims, int li, int max_seq)
{
    const mor_params *p = mor_params_of(spec);
    double rows = (double)max_seq * dims->seq_len, b = 2.0 * rows * 4.0 * dims->d_model;
    for (int r = 1; r <= p->recursions; r++)
        b += select_steps_bytes(max_seq, dims->seq_len) + 4.0 * rows * dims->d_model +
             routed_block_bytes(dims, dims->d_ff, max_seq, mor_k(p, r, dims->seq_len));
    return b;
}

static long mor_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    int k = mor_k(mor_params_of(spec), 1, dims->seq_len); /* the largest step */
    return routed_ws_floats(dims, dims->d_ff, (long)max_seq * k, k);
}

/* Nominal: step r's router on the tokens step r - 1 kept, its block on k_r. */
static double mor_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    const mor_params *p = mor_params_of(spec);
    long S = dims->seq_len, prev = S;
    double f = 0.0;
    for (int r = 1; r <= p->recursions; r++) {
        long k = mor_k(p, r, (int)S);
        k = k < prev ? k : prev;
        f += 2.0 * prev * dims->d_model + mod_block_flops(dims, k, k * k);
        prev = k;
    }
    return f;
}

const layer_kind mor_kind = {
    .name = "mor",
    .groups = mor_groups,
    .tensors = mor_tensors,
    .flops = mor_flops,
    .state_bytes = mor_state_bytes,
    .ws_floats = mor_ws_floats,
    .decides = { .decides = DECIDES_TAKE | DECIDES_DEPTH, .share_key = "capacity",
                 .most_key = "recursions" },
};
