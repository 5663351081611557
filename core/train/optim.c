#include "core/train/optim.h"

#include "core/util/pool.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define O(f) offsetof(optim_cfg, f)
static const kind_key optim_keys[] = {
    { "lr", KEY_REAL, O(lr), "0.001", 0, KEY_NO_MAX, KEY_MIN_OPEN, NULL,
      "peak learning rate (AdamW)", 0 },
    { "warmup", KEY_LONG, O(warmup), "20", 0, KEY_NO_MAX, 0, NULL,
      "steps of linear warm-up; then a cosine to 10% of the peak at the last step", 0 },
    { "weight_decay", KEY_REAL, O(weight_decay), "0.1", 0, KEY_NO_MAX, 0, NULL,
      "decoupled weight decay, on matrices only", 0 },
    { "beta1", KEY_REAL, O(beta1), "0.9", 0, 1, KEY_MAX_OPEN, NULL, "AdamW's first moment", 0 },
    { "beta2", KEY_REAL, O(beta2), "0.95", 0, 1, KEY_MAX_OPEN, NULL, "AdamW's second moment", 0 },
    { "eps", KEY_REAL, O(eps), "1e-08", 0, KEY_NO_MAX, KEY_MIN_OPEN, NULL, "AdamW's epsilon", 0 },
    { "clip", KEY_REAL, O(clip), "1", 0, KEY_NO_MAX, 0, NULL,
      "global gradient-norm clip; 0 disables it", 0 },
    { "shard", KEY_BOOL, O(shard), "false", 0, 0, 0, NULL,
      "keep each rank's 1/P of the shared tensors' Adam moments (ZeRO stage 1): gradients "
      "reduce-scattered, parameters all-gathered; losses within float rounding of unsharded", 0 },
    { "overlap", KEY_BOOL, O(overlap), "true", 0, 0, 0, NULL,
      "sum the shared gradients in buckets started as the backward finishes each layer, "
      "overlapping the layers below; the same bits as false (both sum in rank order); with "
      "shard = true the reduce-scatter waits for the backward", 0 },
    { "bucket_kb", KEY_LONG, O(bucket_kb), "1024", 1, 1L << 30, 0, NULL,
      "a gradient bucket closes at the first layer's end past this many KiB of shared "
      "gradients (the buckets, like the sums, do not change the bits)", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef O

const key_group optim_group = {
    .section = "optim", .keys = optim_keys, .size = sizeof(optim_cfg), .check = NULL,
};

optim_cfg optim_of_config(const run_config *c)
{
    optim_cfg o;
    const void *v = config_group(c, &optim_group);
    if (v)
        memcpy(&o, v, sizeof(o));
    else
        key_group_defaults(&optim_group, &o);
    o.total_steps = c->steps;
    return o;
}

double lr_at(const optim_cfg *c, long step)
{
    if (step < c->warmup)
        return c->lr * (double)(step + 1) / (double)c->warmup;
    long left = c->total_steps - c->warmup;
    double t = left > 0 ? (double)(step - c->warmup) / (double)left : 1.0;
    if (t > 1.0)
        t = 1.0;
    return c->lr * (LR_FLOOR + (1.0 - LR_FLOOR) * 0.5 * (1.0 + cos(3.14159265358979323846 * t)));
}

double grad_global_norm(const float *g, size_t n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * (double)g[i];
    return sqrt(s);
}

float clip_grad_norm(float *g, size_t n, double norm, double clip)
{
    if (clip <= 0.0 || norm <= clip || !(norm > 0.0))
        return 1.0f;
    float f = (float)(clip / norm);
    for (size_t i = 0; i < n; i++)
        g[i] *= f;
    return f;
}

typedef struct adam_job {
    model *m;
    float b1, b2, eps, step, rs_bc2, decay;
} adam_job;

/* Elements [b, e) of the moment buffers, tensor by tensor (the decay is
 * the tensor's); each moment's parameter and gradient at the tensor's
 * offset + mlo on.  Unsharded, moff = offset and mlo = 0: the flat
 * buffers' elements [b, e). */
static void adam_range(void *arg, long b, long e)
{
    const adam_job *j = arg;
    const model *m = j->m;
    float b1 = j->b1, b2 = j->b2, eps = j->eps, step = j->step, rs_bc2 = j->rs_bc2;
    for (int ti = 0; ti < m->n_tensors; ti++) {
        const model_tensor *mt = &m->tensors[ti];
        long off = (long)mt->moff;
        long lo = off > b ? off : b, hi = off + mt->mcount < e ? off + mt->mcount : e;
        if (lo >= hi)
            continue;
        long at = (long)mt->offset + mt->mlo + (lo - off);
        float *p = m->params + at, *g = m->grads + at;
        float *mm = m->adam_m + lo, *vv = m->adam_v + lo;
        float decay = mt->desc.decay ? j->decay : 0.0f;
        float st = mt->desc.lr_scale > 0.0f ? step * mt->desc.lr_scale : step;
        for (long i = 0; i < hi - lo; i++) {
            float gi = g[i];
            mm[i] = b1 * mm[i] + (1.0f - b1) * gi;
            vv[i] = b2 * vv[i] + (1.0f - b2) * gi * gi;
            float denom = sqrtf(vv[i]) * rs_bc2 + eps;
            /* decoupled decay (Loshchilov & Hutter): p -= lr wd p */
            p[i] -= decay * p[i] + st * mm[i] / denom;
        }
    }
}

void adamw_update(struct thread_pool *p, model *m, const optim_cfg *c, long t, double lr)
{
    /* Fold the bias corrections into the step size and epsilon:
     * mhat / (sqrt(vhat) + eps) = (m / bc1) / (sqrt(v / bc2) + eps). */
    float bc1 = (float)(1.0 - pow(c->beta1, (double)t));
    float bc2 = (float)(1.0 - pow(c->beta2, (double)t));
    adam_job j = { .m = m, .b1 = (float)c->beta1, .b2 = (float)c->beta2, .eps = (float)c->eps,
                   .step = (float)lr / bc1, .rs_bc2 = 1.0f / sqrtf(bc2),
                   .decay = (float)(lr * c->weight_decay) };
    pool_for(p, (long)m->n_moments, 1L << 16, adam_range, &j);
}
