#include "core/train/shard.h"

#include "core/comm/comm.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

/* Append [offset, offset + count) to list, merged with the last span when
 * adjacent. */
static void push(span *list, int *n, long offset, long count)
{
    if (*n > 0) {
        span *last = &list[*n - 1];
        if (last->offset + last->count == offset) {
            last->count += count;
            return;
        }
    }
    list[(*n)++] = (span){ offset, count };
}

void free_shard_plan(shard_plan **pp)
{
    shard_plan *p = *pp;
    if (!p)
        return;
    for (int i = 0; i < p->n_sets; i++) {
        comm_free(&p->sets[i].comm);
        free(p->sets[i].spans);
    }
    free(p->sets);
    comm_sum_free(&p->sum);
    free(p->ready);
    free(p->shared);
    free(p->counts);
    free(p->own);
    free(p);
    *pp = NULL;
}

/* The replica set of expert count E, made when first needed: every rank
 * meets the same tensors in the same order, so the splits are collective
 * in lockstep. */
static replica_set *replicas_of(shard_plan *p, mode_ctx *ctx, int E, int most, int *rc)
{
    for (int i = 0; i < p->n_sets; i++)
        if (p->sets[i].E == E)
            return &p->sets[i];
    replica_set *rs = &p->sets[p->n_sets];
    rs->E = E;
    rs->spans = malloc((size_t)most * sizeof(span));
    *rc = comm_split(ctx ? ctx->comm : NULL, ctx ? ctx->rank % E : 0, &rs->comm);
    if (!rs->spans && !*rc)
        *rc = -ENOMEM;
    p->n_sets++;
    return rs;
}

/* Append [offset, offset + count) to the open bucket's runs (from first),
 * merged with a run it touches on either side. */
static void bucket_push(long *off, long *cnt, int *n, int first, long offset, long count)
{
    for (int i = first; i < *n; i++) {
        if (off[i] + cnt[i] == offset && cnt[i] + count <= (1L << 30)) {
            cnt[i] += count;
            return;
        }
        if (offset + count == off[i] && cnt[i] + count <= (1L << 30)) {
            off[i] = offset;
            cnt[i] += count;
            return;
        }
    }
    off[*n] = offset;
    cnt[(*n)++] = count;
}

/* The unsharded plan's buckets (shard_plan sum, ready): the shared tensors
 * of layer L - 1 down to 0, then the rest; fixed by the shapes alone. */
static int plan_buckets(shard_plan *p, const model *m, mode_ctx *ctx, long bucket)
{
    int L = m->dims.n_layers, most = 0, n = 0, first = 0, rc = 0;
    for (int i = 0; i < m->n_tensors; i++)
        most += (int)(m->tensors[i].numel >> 30) + 1;
    long *off = malloc((size_t)most * sizeof(long)), *cnt = malloc((size_t)most * sizeof(long));
    p->ready = malloc((size_t)(L > 0 ? L : 1) * sizeof(int));
    if (!off || !cnt || !p->ready) {
        free(off);
        free(cnt);
        return -ENOMEM;
    }
    long open = 0;
    for (int l = L - 1; l >= -1; l--) {
        for (int i = 0; i < m->n_tensors; i++) {
            const model_tensor *t = &m->tensors[i];
            if (t->layer != l || (t->desc.expert_dim && m->dims.ranks > 1) || t->numel == 0)
                continue;
            for (long at = 0; at < t->numel; at += 1L << 30) {
                long k = t->numel - at < (1L << 30) ? t->numel - at : 1L << 30;
                bucket_push(off, cnt, &n, first, (long)t->offset + at, k);
                open += k;
            }
        }
        if (l >= 0 && (open >= bucket || l == 0)) { /* the bucket closes */
            first = n;
            open = 0;
        }
        if (l >= 0)
            p->ready[l] = first;
    }
    rc = comm_sum_make(ctx ? ctx->comm : NULL, m->grads, off, cnt, n, &p->sum);
    free(off);
    free(cnt);
    return rc;
}

int build_shard_plan(shard_plan **out, const model *m, mode_ctx *ctx, long bucket)
{
    int P = ctx ? ctx->size : 1, rank = ctx ? ctx->rank : 0, rc = 0;
    shard_plan *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->zero = m->optim_shards > 1 && m->optim_shards == P;
    long cap = p->zero ? MODEL_SPAN_CAP : LONG_MAX;
    int most = m->n_tensors + 1, n_spans = model_shared_spans(m, cap, NULL);
    p->shared = malloc((size_t)(n_spans + 1) * sizeof(span));
    p->own = malloc((size_t)most * sizeof(span));
    p->sets = calloc((size_t)most, sizeof(replica_set));
    if (!p->shared || !p->own || !p->sets) {
        free_shard_plan(&p);
        return -ENOMEM;
    }
    p->n_shared = model_shared_spans(m, cap, p->shared);
    if (p->zero) {
        p->counts = malloc((size_t)(n_spans + 1) * (size_t)P * sizeof(int));
        if (!p->counts) {
            free_shard_plan(&p);
            return -ENOMEM;
        }
        for (int i = 0; i < p->n_shared; i++)
            for (int r = 0; r < P; r++)
                p->counts[(size_t)i * P + r] = (int)span_piece(p->shared[i], P, r).count;
    }
    for (int i = 0; i < m->n_tensors && !rc; i++) {
        const model_tensor *t = &m->tensors[i];
        long off = (long)t->offset;
        int E = t->desc.shape[0];
        if (!t->desc.expert_dim || P == 1) {
            continue; /* shared: above */
        } else if (P <= E) { /* whole here: counted once, by this rank */
            push(p->own, &p->n_own, off, t->numel);
        } else { /* one of P/E replicas: summed among them, counted by group 0 */
            replica_set *rs = replicas_of(p, ctx, E, most, &rc);
            if (!rc)
                push(rs->spans, &rs->n, off, t->numel);
            if (rank < E)
                push(p->own, &p->n_own, off, t->numel);
        }
    }
    if (!rc && !p->zero && P > 1)
        rc = plan_buckets(p, m, ctx, bucket);
    if (rc) {
        free_shard_plan(&p);
        return rc;
    }
    *out = p;
    return 0;
}

int shard_layer_done(const shard_plan *p, int l)
{
    if (!p->sum)
        return 0;
    int rc = comm_sum_start(p->sum, p->ready[l]);
    return rc ? rc : comm_sum_progress(p->sum);
}

int shard_reduce_grads(const shard_plan *p, mode_ctx *ctx, model *m)
{
    comm *cm = ctx ? ctx->comm : NULL;
    int P = ctx ? ctx->size : 1;
    if (p->zero && comm_fault(cm, "grad-reduce-scatter"))
        return -EIO;
    for (int i = 0; i < p->n_shared && p->zero; i++) {
        float *g = m->grads + p->shared[i].offset;
        int rc = comm_reduce_scatter_sum_float(cm, g, p->counts + (size_t)i * P);
        if (rc)
            return rc;
    }
    int rc = comm_sum_finish(p->sum); /* unsharded: in rank order */
    if (rc)
        return rc;
    for (int s = 0; s < p->n_sets; s++) {
        const replica_set *rs = &p->sets[s];
        for (int i = 0; i < rs->n; i++) {
            rc = comm_allreduce_sum_float(rs->comm, m->grads + rs->spans[i].offset,
                                          (size_t)rs->spans[i].count);
            if (rc)
                return rc;
        }
    }
    return 0;
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
    /* the shared part is the same everywhere; each expert counts once */
    double shared = 0.0, own = 0.0;
    int P = ctx ? ctx->size : 1, rank = ctx ? ctx->rank : 0;
    for (int i = 0; i < p->n_shared && !p->zero; i++)
        shared += sum_squares(m->grads + p->shared[i].offset, p->shared[i].count);
    for (int i = 0; i < p->n_shared && p->zero; i++) { /* sharded: each rank its pieces */
        span pc = span_piece(p->shared[i], P, rank);
        own += sum_squares(m->grads + pc.offset, pc.count);
    }
    for (int i = 0; i < p->n_own; i++)
        own += sum_squares(m->grads + p->own[i].offset, p->own[i].count);
    int rc = p->n_own || (ctx && ctx->size > 1)
                 ? comm_allreduce_sum_double(ctx ? ctx->comm : NULL, &own, 1)
                 : 0;
    *norm = sqrt(shared + own);
    return rc;
}

int shard_adamw(const shard_plan *p, mode_ctx *ctx, model *m, const optim_cfg *c, long t,
                double lr)
{
    /* a rank updates what it keeps moments of (model_tensor mlo, mcount) */
    adamw_update(ctx ? ctx->pool : NULL, m, c, t, lr);
    if (!p->zero)
        return 0;
    comm *cm = ctx ? ctx->comm : NULL;
    int P = ctx ? ctx->size : 1;
    if (comm_fault(cm, "param-allgather"))
        return -EIO;
    for (int i = 0; i < p->n_shared; i++) {
        int rc = comm_allgather_float(cm, m->params + p->shared[i].offset,
                                      p->counts + (size_t)i * P);
        if (rc)
            return rc;
    }
    return 0;
}
