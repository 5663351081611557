/* The `staged` kind's description (its compute: staged.c). */
#include "moe/staged.h"
#include "moe/staged_state.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(staged_params) <= MODE_PARAMS_BYTES, "staged's keys fit a layer_spec");

static const kind_group staged_groups[] = {
    { &mod_router_group, offsetof(staged_params, router) },
    { &experts_group, offsetof(staged_params, experts) },
    { NULL, 0 },
};

void staged_layout(buf_plan *p, staged_state *s, const model_dims *dims, int max_seq)
{
    size_t rk = (size_t)max_seq * dims->seq_len * s->ec.top_k;
    s->rec_experts = BUF_I32(p, rk);
    s->rec_weights = BUF_FLOATS(p, rk);
}

static int staged_validate(const layer_spec *s, const model_dims *dims, char *err, int err_len)
{
    return experts_validate(&staged_params_of(s)->experts, false, dims->d_ff, err, err_len);
}

static int staged_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    const staged_params *sp = staged_params_of(s);
    mod_router_cfg rc = mod_router_parse(&sp->router, dims);
    experts_cfg ec = experts_cfg_of(&sp->experts, dims, false);
    int n = rc.n_tensors + BLOCK_ATTN_TENSORS + 1 + experts_tensors(NULL, &ec, dims);
    if (!out)
        return n;
    if (max < n)
        return -EINVAL;
    mod_router_tensors(&rc, dims, out);
    tensor_desc block[BLOCK_TENSORS];
    block_tensors(block, dims, true);
    memcpy(out + rc.n_tensors, block, (BLOCK_ATTN_TENSORS + 1) * sizeof(tensor_desc));
    experts_tensors(out + rc.n_tensors + BLOCK_ATTN_TENSORS + 1, &ec, dims);
    return n;
}

static double staged_state_bytes(const layer_spec *spec, const model_dims *dims, int li,
                                 int max_seq)
{
    const staged_params *sp = staged_params_of(spec);
    int k = mod_router_parse(&sp->router, dims).max_k; /* the schedule's first steps: S */
    staged_state s = { .ec = experts_cfg_of(&sp->experts, dims, false) };
    long sel = (long)max_seq * k; /* top-k: k rows of each sequence */
    buf_plan p = buf_counting(BUF_ALIGN);
    staged_layout(&p, &s, dims, max_seq);
    /* the router, the records' buffers, the block on the selected rows
     * (its MLP the experts) */
    return mod_router_bytes(dims, &sp->router, max_seq) + (double)p.used +
           routed_block_bytes(dims, 0, max_seq, k) + experts_bytes(&s.ec, dims, sel);
}

static long staged_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    int k = mod_router_parse(&staged_params_of(spec)->router, dims).max_k;
    return routed_ws_floats(dims, 0, (long)max_seq * k, k);
}

/* Training's at step under the capacity schedule (steady: from which
 * step they are staged_flops'), the block on the step's k rows. */
static double staged_flops_at(const layer_spec *spec, const model_dims *dims, long step,
                              long *steady)
{
    const staged_params *sp = staged_params_of(spec);
    mod_router_cfg rc = mod_router_parse(&sp->router, dims);
    experts_cfg ec = experts_cfg_of(&sp->experts, dims, false);
    int k = mod_router_k(&rc, dims->seq_len, step >= 0, step);
    *steady = rc.schedule == SCHEDULE_NONE ? 0 : rc.schedule_steps;
    return mod_router_flops(&rc, dims) + attn_flops_rows(dims, k, (long)k * k) +
           experts_flops(&ec, dims, k);
}

static double staged_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    long steady;
    return staged_flops_at(spec, dims, -1, &steady); /* evaluation's: k at capacity */
}

const layer_kind staged_kind = {
    .name = "staged",
    .groups = staged_groups,
    .validate = staged_validate,
    .tensors = staged_tensors,
    .flops = staged_flops,
    .flops_at = staged_flops_at,
    .state_bytes = staged_state_bytes,
    .ws_floats = staged_ws_floats,
    .decides = { .decides = DECIDES_TAKE | DECIDES_EXPERTS, .share_key = "capacity",
                 .experts_key = "experts", .split_key = "granularity" },
};
