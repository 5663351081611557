/* The `ec` kind's description (its compute: ec.c): the [ec] keys
 * (experts_kind.c) give its experts' configuration; its tensors, FLOPs and
 * buffers are moe's (moe_kind.c) for that configuration. */
#include "moe/ec.h"
#include "moe/moe_state.h"

#include <stddef.h>

_Static_assert(sizeof(ec_params) <= MODE_PARAMS_BYTES, "ec's keys fit a layer_spec");

static const kind_group ec_groups[] = {
    { &ec_group, 0 },
    { NULL, 0 },
};

experts_cfg ec_cfg(const layer_spec *s, const model_dims *dims)
{
    return ec_cfg_of((const ec_params *)(const void *)s->params, dims);
}

static int ec_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    return moe_tensors_of(s, dims, out, max, ec_cfg);
}

static double ec_state_bytes(const layer_spec *spec, const model_dims *dims, int li, int max_seq)
{
    return moe_state_bytes_of(spec, dims, max_seq, ec_cfg);
}

static double ec_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    return moe_flops_of(spec, dims, ec_cfg);
}

const layer_kind ec_kind = {
    .name = "ec",
    .groups = ec_groups,
    .tensors = ec_tensors,
    .flops = ec_flops,
    .state_bytes = ec_state_bytes,
    .ws_floats = moe_ws_floats,
    .decides = { .decides = DECIDES_EXPERTS, .experts_key = "experts" },
};
