/* The `ec` kind's compute (ec.h): moe's layer (moe.c) built with the [ec]
 * configuration; the experts' expert-choice gate is experts_gate.c's. */
#include "moe/ec.h"
#include "moe/moe_state.h"

static int ec_build(layer *l, const model_dims *dims, int max_seq)
{
    return moe_build_with(l, dims, max_seq, ec_cfg);
}

/* expert-choice: the experts' picks read back (shuffle, replay); no random
 * or no-op policy (the choices are the experts', not the tokens') */
const kind_ops ec_ops = MOE_OPS(ec_kind, ec_build,
                                1u << ROUTE_LEARNED | 1u << ROUTE_SHUFFLE | 1u << ROUTE_REPLAY,
                                1u << ROUTE_LEARNED);
