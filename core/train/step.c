#include "core/train/step.h"

#include "core/comm/comm.h"

#include <math.h>
#include <string.h>

int train_step(model *m, const shard_plan *sp, mode_ctx *ctx, const batch *b,
               const optim_cfg *oc, long step, const step_hooks *h, step_out *o)
{
    memset(o, 0, sizeof(*o));
    double t0 = mode_now(), comm0 = ctx->timers[PHASE_COMM];
    fwd_result r;
    model_zero_grad(m);
    int rc = model_forward(m, ctx, b, FWD_TRAIN, &r);
    if (!rc)
        rc = model_backward(m, ctx, b);
    if (rc) {
        o->failed = "forward/backward";
        return rc;
    }
    if (h && h->after_backward && (rc = h->after_backward(h->user, rc)))
        return rc;
    double tc = mode_now(), comm_layers = ctx->timers[PHASE_COMM] - comm0;
    double sums[4] = { r.ce_sum, r.aux_loss, r.side_loss, r.flops_executed };
    rc = comm_fault(ctx->comm, "grad-allreduce");
    if (!rc)
        rc = shard_reduce_grads(sp, ctx, m);
    if (!rc)
        rc = comm_allreduce_sum_double(ctx->comm, sums, 4);
    mode_time_add(ctx, PHASE_COMM, tc);
    /* all communication of the step: the experts' all-to-alls inside the
     * layers and the gradient all-reduce; compute is the rest of forward
     * and backward */
    o->comm_s = ctx->timers[PHASE_COMM] - comm0;
    o->compute_s = tc - t0 - comm_layers;
    if (rc) {
        o->failed = sp->zero ? "the gradient reduce-scatter" : "the gradient all-reduce";
        return rc;
    }
    o->ce_sum = sums[0];
    o->aux = sums[1];
    o->side = sums[2];
    o->flops_executed = sums[3];
    o->ce = sums[0] / ((double)b->global_seqs * m->dims.seq_len);
    o->loss = o->ce + sums[1];
    o->lr = lr_at(oc, step);
    /* the norm (with its one-number all-reduce) belongs to the update */
    double to = mode_now();
    if ((rc = shard_grad_norm(sp, ctx, m, &o->norm))) {
        o->failed = "the gradient norm's all-reduce";
        return rc;
    }
    bool update = true;
    if (h && h->before_update && (rc = h->before_update(h->user, o, &update)))
        return rc;
    if (update) {
        clip_grad_norm(m->grads, m->n_params, o->norm, oc->clip);
        if ((rc = shard_adamw(sp, ctx, m, oc, step + 1, o->lr))) {
            o->failed = "the parameters' all-gather";
            return rc;
        }
        o->updated = true;
    }
    model_step_end(m, update);
    mode_time_add(ctx, PHASE_OPTIMIZER, to);
    return 0;
}
