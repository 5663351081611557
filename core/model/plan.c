#include "core/model/plan.h"

#include "core/data/token.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

double model_head_flops_per_seq(const model_dims *dims)
{
    return 2.0 * (double)dims->seq_len * dims->d_model * dims->vocab;
}

double stack_flops_per_seq(const model_dims *dims, int n, const layer_spec *specs,
                           const layer_kind *const *kinds, double *per_layer)
{
    double total = model_head_flops_per_seq(dims);
    for (int l = 0; l < n; l++) {
        double f = kinds[l]->flops(&specs[l], dims, l);
        if (per_layer)
            per_layer[l] = f;
        total += f;
    }
    return total;
}

double stack_flops_per_seq_at(const model_dims *dims, int n, const layer_spec *specs,
                              const layer_kind *const *kinds, long step, long *steady)
{
    double total = model_head_flops_per_seq(dims);
    *steady = 0;
    for (int l = 0; l < n; l++) {
        long from = 0;
        total += kinds[l]->flops_at ? kinds[l]->flops_at(&specs[l], dims, step, &from)
                                    : kinds[l]->flops(&specs[l], dims, l);
        if (from > *steady)
            *steady = from;
    }
    return total;
}

int model_plan_memory(model_memory *out, const model_dims *dims_in, const layer_spec *specs,
                      const layer_kind *const *table, int max_seq, bool shard_optim, char *err,
                      int err_len)
{
    memset(out, 0, sizeof(*out));
    model_dims dims = *dims_in;
    if (dims.ranks < 1) {
        dims.ranks = 1;
        dims.rank = 0;
    }
    int L = dims.n_layers, S = dims.seq_len, d = dims.d_model, V = dims.vocab;
    double rows = (double)max_seq * S, ws = 0.0;
    /* tok_emb and final_norm, shared */
    double shared = (double)V * d + d, experts = 0.0;
    out->params_all = shared;
    for (int l = 0; l < L; l++) {
        const layer_kind *k = layer_kind_lookup(table, specs[l].kind);
        if (!k) {
            snprintf(err, (size_t)err_len, "layer %d: unknown kind '%s'", l, specs[l].kind);
            return -EINVAL;
        }
        if (k->validate && k->validate(&specs[l], &dims, err, err_len))
            return -EINVAL;
        tensor_desc descs[MODE_MAX_LAYER_TENSORS];
        int n = k->tensors(&specs[l], &dims, descs, MODE_MAX_LAYER_TENSORS);
        for (int t = 0; t < n; t++) {
            double numel = (double)tensor_numel(&descs[t]);
            out->params_all += numel;
            if (descs[t].expert_dim) {
                int E = descs[t].shape[0];
                experts += numel / E * experts_local(E, dims.ranks);
            } else {
                shared += numel;
            }
        }
        out->activations += k->state_bytes ? k->state_bytes(&specs[l], &dims, l, max_seq) : 0.0;
        double w = (double)k->ws_floats(&specs[l], &dims, max_seq);
        ws = w > ws ? w : ws;
    }
    /* parameters, gradients and both Adam moments, 4 bytes each */
    int P = shard_optim ? dims.ranks : 1; /* each rank 1/P of each run, to an element */
    out->shared_optim = 8.0 * shared / P;
    out->shared = 8.0 * shared + out->shared_optim;
    out->experts = 16.0 * experts;
    /* build_model's own: the residual stream's L+1 copies, its gradient's
     * two, RMSNorm_final's output and rstd, the logits, inputs and targets,
     * the RoPE table */
    out->activations += 4.0 * rows * ((L + 1.0) * d + 2.0 * d + d + 1.0 + V) +
                        2.0 * rows * sizeof(token_t) + 4.0 * S * dims.d_head;
    /* what the layers of a kind share (layer_kind shared_bytes), once a kind */
    for (int l = 0; l < L; l++) {
        const layer_kind *k = layer_kind_lookup(table, specs[l].kind);
        int first = 0;
        while (strcmp(specs[first].kind, specs[l].kind))
            first++;
        if (k->shared_bytes && first == l)
            out->activations += k->shared_bytes(&specs[l], &dims, max_seq);
    }
    out->work = 4.0 * ws;
    /* unsharded over P > 1 ranks: the pieces the gradient sums receive
     * (docs/gradient-sums.md), (P - 1) / P of the shared gradients */
    if (!shard_optim && dims.ranks > 1)
        out->work += 4.0 * shared * (dims.ranks - 1.0) / dims.ranks;
    return 0;
}
