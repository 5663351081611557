/* Rows chosen by Bernoulli draws (select_draws.h). */
#include "mod/select_draws.h"

#include "core/rng/pcg32.h"
#include "core/rng/streams.h"
#include "core/util/ctx.h"

/* Whether a draw keeps unit u of the step (training): u >= p. */
static bool kept(uint64_t seed, int layer_index, long step, uint64_t unit, double p)
{
    pcg32 g;
    pcg32_keyed(&g, seed, PCG_KEY_DROP + (uint64_t)layer_index, (uint64_t)step, unit);
    return (double)pcg32_uniform(&g) >= p;
}

double select_draws(routed_set *set, const draws_rule *r, const fwd_args *a, int layer_index)
{
    int S = a->seq_len;
    bool train = a->mode == FWD_TRAIN;
    uint64_t seed = a->ctx ? a->ctx->seed : 0;
    float scale = train ? (r->rescale ? (float)(1.0 / (1.0 - r->p)) : 1.0f)
                        : (r->rescale ? 1.0f : (float)(1.0 - r->p));
    bool pruned = !train && r->pruned;
    double n_kept = 0.0;
    routed_set_begin(set);
    for (int b = 0; b < a->nseq; b++) {
        uint64_t seq = (uint64_t)(a->seq0 + b);
        bool run = !pruned &&
                   (!train || r->per_token || kept(seed, layer_index, a->step, seq, r->p));
        for (int i = 0; run && i < S; i++) {
            bool on = !train || !r->per_token ||
                      kept(seed, layer_index, a->step, seq * (uint64_t)S + (uint64_t)i, r->p);
            routed_set_add(set, b * S + i, i, on ? scale : 0.0f);
            n_kept += on;
        }
        routed_set_next_seq(set);
    }
    return n_kept;
}

int select_draws_decide(const draws_rule *r, float *gate)
{
    if (r->pruned)
        return 0;
    *gate = r->rescale ? 1.0f : (float)(1.0 - r->p);
    return 1;
}
