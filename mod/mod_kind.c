/* The `mod` kind's description (its compute: mod.c). */
#include "mod/mod.h"
#include "mod/mod_state.h"

#include <errno.h>
#include <stddef.h>

_Static_assert(sizeof(mod_params) <= MODE_PARAMS_BYTES, "mod's keys fit a layer_spec");

static const kind_group mod_groups[] = {
    { &mod_router_group, offsetof(mod_params, router) },
    { NULL, 0 },
};

static int mod_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    mod_router_cfg c = mod_router_parse(&mod_params_of(s)->router, dims);
    int n = c.n_tensors;
    if (out) {
        if (max < n + BLOCK_TENSORS)
            return -EINVAL;
        mod_router_tensors(&c, dims, out);
        block_tensors(out + n, dims, true);
    }
    return n + BLOCK_TENSORS;
}

static double mod_state_bytes(const layer_spec *spec, const model_dims *dims, int li, int max_seq)
{
    const mod_router_params *rp = &mod_params_of(spec)->router;
    int k = mod_router_parse(rp, dims).max_k;
    /* the router's buffers, and the block on k rows of each sequence (top-k:
     * exactly k, the schedule's first steps all S; the causal rule of an
     * evaluation may take more) */
    return mod_router_bytes(dims, rp, max_seq) + routed_block_bytes(dims, dims->d_ff, max_seq, k);
}

static long mod_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    int k = mod_router_parse(&mod_params_of(spec)->router, dims).max_k;
    return routed_ws_floats(dims, dims->d_ff, (long)max_seq * k, k);
}

double mod_block_flops(const model_dims *dims, long rows, long sum_sq)
{
    return attn_flops_rows(dims, rows, sum_sq) + ffn_flops_rows(dims->d_model, dims->d_ff, rows);
}

static double mod_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    mod_router_cfg c = mod_router_parse(&mod_params_of(spec)->router, dims);
    return mod_router_flops(&c, dims) + mod_block_flops(dims, c.k, (long)c.k * c.k);
}

/* Training's under the capacity schedule: the block on the step's k rows. */
static double mod_flops_at(const layer_spec *spec, const model_dims *dims, long step,
                           long *steady)
{
    mod_router_cfg c = mod_router_parse(&mod_params_of(spec)->router, dims);
    int k = mod_router_k(&c, dims->seq_len, true, step);
    *steady = c.schedule == SCHEDULE_NONE ? 0 : c.schedule_steps;
    return mod_router_flops(&c, dims) + mod_block_flops(dims, k, (long)k * k);
}

const layer_kind mod_kind = {
    .name = "mod",
    .groups = mod_groups,
    .tensors = mod_tensors,
    .flops = mod_flops,
    .flops_at = mod_flops_at,
    .state_bytes = mod_state_bytes,
    .ws_floats = mod_ws_floats,
    .decides = { .decides = DECIDES_TAKE, .share_key = "capacity" },
};
