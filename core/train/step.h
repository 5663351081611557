/* One training step (forward, backward, the gradients' reduction over the
 * ranks, the global norm, clipping, AdamW), the one that training
 * (trainer.c) and mode-exp bench both run.  Collective. */
#ifndef MODE_CORE_TRAIN_STEP_H
#define MODE_CORE_TRAIN_STEP_H

#include "core/model/model.h"
#include "core/train/optim.h"
#include "core/train/shard.h"

#include <stdbool.h>

typedef struct step_out {
    double ce_sum, aux, side, flops_executed; /* this step's forward, summed over the ranks */
    double ce, loss, norm, lr;                /* mean CE, CE + aux, gradient norm, rate */
    double comm_s, compute_s;                 /* all its communication; the rest of forward
                                                 and backward */
    bool updated;                             /* clipped and AdamW applied */
    /* on failure: what failed, inside the step where other ranks may wait
     * in a collective ("forward/backward", "the gradient all-reduce", "the
     * gradient norm's all-reduce"), or NULL when a hook stopped it */
    const char *failed;
} step_out;

/* The caller's say at the step's two agreement points: after backward
 * (rc: backward's outcome on this rank; a non-zero return stops the step
 * there), and before the update, given the finite or not loss and norm
 * (update: whether to apply it; non-zero stops).  NULL: update always. */
typedef struct step_hooks {
    int (*after_backward)(void *user, int rc);
    int (*before_update)(void *user, const step_out *o, bool *update);
    void *user;
} step_hooks;

/* Step step (0-based; the update is number step + 1) on batch b: zero the
 * gradients, forward and backward, reduce them (sp), all-reduce the
 * losses, the norm; then, unless a hook says no, clip to oc->clip and
 * AdamW at lr_at(oc, step). */
int train_step(model *m, const shard_plan *sp, mode_ctx *ctx, const batch *b,
               const optim_cfg *oc, long step, const step_hooks *h, step_out *o);

#endif
