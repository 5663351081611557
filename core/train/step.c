#include "core/train/step.h"

#include "core/comm/comm.h"

#include <math.h>
#include <string.h>

/* The overlapped reduction's hook (backward_hook): a layer's buckets start
 * as soon as its backward is done; the time in it is communication's. */
typedef struct overlap {
    const shard_plan *sp;
    mode_ctx *ctx;
    bool failed; /* the reduction, not the backward, failed */
} overlap;

static int overlap_layer_done(void *user, int l)
{
    overlap *v = user;
    double t0 = mode_now();
    int rc = comm_sum_started(v->sp->sum) ? 0 : comm_fault(v->ctx->comm, "grad-allreduce");
    if (!rc)
        rc = shard_layer_done(v->sp, l);
    mode_time_add(v->ctx, PHASE_COMM, t0);
    v->failed = rc != 0;
    return rc;
}

int train_step(model *m, const shard_plan *sp, mode_ctx *ctx, const batch *b,
               const optim_cfg *oc, long step, const step_hooks *h, step_out *o)
{
    memset(o, 0, sizeof(*o));
    double t0 = mode_now(), comm0 = ctx->timers[PHASE_COMM];
    fwd_result r;
    model_zero_grad(m);
    /* Overlapped: the shared gradients' sums start during the backward and
     * end in shard_reduce_grads, below; the same sums in the same order as
     * without (comm_sum): the same bits. */
    overlap v = { sp, ctx, false };
    backward_hook hook = { overlap_layer_done, &v };
    bool overlapped = oc->overlap && sp->sum;
    int rc = model_forward(m, ctx, b, FWD_TRAIN, &r);
    if (!rc)
        rc = model_backward_hooked(m, ctx, b, overlapped ? &hook : NULL);
    if (rc) {
        o->failed = v.failed ? (sp->zero ? "the gradient reduce-scatter" : "the gradient all-reduce")
                             : "forward/backward";
        return rc;
    }
    /* the sums in flight finish before any agreement: every rank has started
     * them all (a backward that failed on one rank ends the job above) */
    double tc = mode_now(), comm_layers = ctx->timers[PHASE_COMM] - comm0;
    rc = comm_sum_started(sp->sum) || !overlapped ? 0 : comm_fault(ctx->comm, "grad-allreduce");
    if (!rc && overlapped)
        rc = shard_reduce_grads(sp, ctx, m);
    mode_time_add(ctx, PHASE_COMM, tc);
    if (rc) {
        o->failed = "the gradient all-reduce";
        return rc;
    }
    if (h && h->after_backward && (rc = h->after_backward(h->user, rc)))
        return rc;
    double tr = mode_now();
    double sums[4] = { r.ce_sum, r.aux_loss, r.side_loss, r.flops_executed };
    if (!overlapped)
        rc = comm_fault(ctx->comm, "grad-allreduce");
    if (!rc && !overlapped)
        rc = shard_reduce_grads(sp, ctx, m);
    if (!rc)
        rc = comm_allreduce_sum_double(ctx->comm, sums, 4);
    mode_time_add(ctx, PHASE_COMM, tr);
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
