#include "core/train/shard.h"

#include "core/comm/comm.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* Append [offset, offset + count) to list, merged with the last span when
 * adjacent and of the same root. */
static void push(span *list, int *n, long offset, long count, int root)
{
    if (*n > 0) {
        span *last = &list[*n - 1];
        if (last->offset + last->count == offset && last->root == root) {
            last->count += count;
            return;
        }
    }
    list[(*n)++] = (span){ offset, count, root };
}

int build_shard_plan(shard_plan **out, const model *m, const mode_ctx *ctx)
{
    int P = ctx ? ctx->size : 1, rank = ctx ? ctx->rank : 0;
    /* at most one span per tensor, or one per expert slice */
    long most = 1;
    for (int i = 0; i < m->n_tensors; i++)
        most += m->tensors[i].desc.expert_dim ? m->tensors[i].desc.shape[0] : 1;
    shard_plan *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->shared = malloc((size_t)most * sizeof(span));
    p->own = malloc((size_t)most * sizeof(span));
    p->update = malloc((size_t)most * sizeof(span));
    p->slices = malloc((size_t)most * sizeof(span));
    if (!p->shared || !p->own || !p->update || !p->slices) {
        free_shard_plan(&p);
        return -ENOMEM;
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        long off = (long)t->offset;
        int E = t->desc.shape[0];
        if (!t->desc.expert_dim || P == 1 || P > E) {
            push(p->shared, &p->n_shared, off, t->numel, -1);
            push(p->update, &p->n_update, off, t->numel, -1);
            continue;
        }
        long slice = t->numel / E;
        for (int e = 0; e < E; e++) {
            int root = e / (E / P);
            push(p->slices, &p->n_slices, off + e * slice, slice, root);
            if (experts_held(E, P, rank, e)) {
                push(p->own, &p->n_own, off + e * slice, slice, rank);
                push(p->update, &p->n_update, off + e * slice, slice, -1);
            }
        }
    }
    p->sharded = p->n_slices > 0;
    *out = p;
    return 0;
}

void free_shard_plan(shard_plan **pp)
{
    shard_plan *p = *pp;
    if (!p)
        return;
    free(p->shared);
    free(p->own);
    free(p->update);
    free(p->slices);
    free(p);
    *pp = NULL;
}

int shard_reduce_grads(const shard_plan *p, mode_ctx *ctx, model *m)
{
    comm *cm = ctx ? ctx->comm : NULL;
    if (!p->sharded)
        return comm_allreduce_sum_float(cm, m->grads, m->n_params);
    for (int i = 0; i < p->n_shared; i++) {
        int rc = comm_allreduce_sum_float(cm, m->grads + p->shared[i].offset,
                                          (size_t)p->shared[i].count);
        if (rc)
            return rc;
    }
    return 0; /* each expert's gradient is whole on its own rank already */
}

static double sum_squares(const float *g, long n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (long i = 0; i < n; i++)
        s += (double)g[i] * (double)g[i];
    return s;
}

int shard_grad_norm(const shard_plan *p, mode_ctx *ctx, const model *m, double *norm)
{
    if (!p->sharded) {
        *norm = grad_global_norm(m->grads, m->n_params);
        return 0;
    }
    /* the shared part is the same everywhere; each expert counts once, on
     * its rank */
    double shared = 0.0, own = 0.0;
    for (int i = 0; i < p->n_shared; i++)
        shared += sum_squares(m->grads + p->shared[i].offset, p->shared[i].count);
    for (int i = 0; i < p->n_own; i++)
        own += sum_squares(m->grads + p->own[i].offset, p->own[i].count);
    int rc = comm_allreduce_sum_double(ctx ? ctx->comm : NULL, &own, 1);
    *norm = sqrt(shared + own);
    return rc;
}

void shard_adamw(const shard_plan *p, mode_ctx *ctx, model *m, const optim_cfg *c, long t,
                 double lr)
{
    for (int i = 0; i < p->n_update; i++)
        adamw_update_range(ctx ? ctx->pool : NULL, m, c, t, lr, p->update[i].offset,
                           p->update[i].count);
}

int shard_sync(const shard_plan *p, mode_ctx *ctx, model *m)
{
    comm *cm = ctx ? ctx->comm : NULL;
    float *bufs[3] = { m->params, m->adam_m, m->adam_v };
    for (int i = 0; i < p->n_slices; i++) {
        const span *s = &p->slices[i];
        for (int b = 0; b < 3; b++) {
            int rc = comm_bcast(cm, bufs[b] + s->offset, (size_t)s->count * sizeof(float),
                                s->root);
            if (rc)
                return rc;
        }
    }
    return 0;
}
