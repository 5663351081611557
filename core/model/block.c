#include "core/model/block.h"

#include "core/kernels/attention.h"
#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"
#include "core/kernels/parallel.h"
#include "core/util/ctx.h"
#include "core/util/pool.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void row_set_fill_whole(int *seq_start, int32_t *pos, int nseq, int S)
{
    for (int b = 0; b <= nseq; b++)
        seq_start[b] = b * S;
    for (int j = 0; j < nseq * S; j++)
        pos[j] = j % S;
}

double attn_cache_bytes(const model_dims *dims, long cap_rows)
{
    /* u q k v att [rows][d], rstd [rows], lse [H rows] */
    return 4.0 * (double)cap_rows * (5.0 * dims->d_model + 1.0 + dims->n_heads);
}

double ffn_cache_bytes(long cap_rows, int f)
{
    return 4.0 * 3.0 * (double)cap_rows * f; /* a1 a3 g [rows][f] */
}

double mlp_cache_bytes(const model_dims *dims, long cap_rows, int f)
{
    /* m [rows][d], rstd [rows], then the ffn's */
    return 4.0 * (double)cap_rows * (dims->d_model + 1.0) + ffn_cache_bytes(cap_rows, f);
}

int build_attn_cache(attn_cache *c, const model_dims *dims, int cap_rows)
{
    memset(c, 0, sizeof(*c));
    size_t rd = (size_t)cap_rows * dims->d_model;
    c->cap_rows = cap_rows;
    c->u = malloc(rd * sizeof(float));
    c->rstd = malloc((size_t)cap_rows * sizeof(float));
    c->q = malloc(rd * sizeof(float));
    c->k = malloc(rd * sizeof(float));
    c->v = malloc(rd * sizeof(float));
    c->att = malloc(rd * sizeof(float));
    c->lse = malloc((size_t)cap_rows * dims->n_heads * sizeof(float));
    if (!c->u || !c->rstd || !c->q || !c->k || !c->v || !c->att || !c->lse) {
        free_attn_cache(c);
        return -ENOMEM;
    }
    return 0;
}

void free_attn_cache(attn_cache *c)
{
    free(c->u);
    free(c->rstd);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->lse);
    memset(c, 0, sizeof(*c));
}

int build_ffn_cache(ffn_cache *c, int cap_rows, int f)
{
    memset(c, 0, sizeof(*c));
    size_t rf = (size_t)cap_rows * f;
    c->cap_rows = cap_rows;
    c->f = f;
    if (rf == 0) /* no SwiGLU: an mlp_cache that holds the norm only */
        return 0;
    c->a1 = malloc(rf * sizeof(float));
    c->a3 = malloc(rf * sizeof(float));
    c->g = malloc(rf * sizeof(float));
    if (!c->a1 || !c->a3 || !c->g) {
        free_ffn_cache(c);
        return -ENOMEM;
    }
    return 0;
}

void free_ffn_cache(ffn_cache *c)
{
    free(c->a1);
    free(c->a3);
    free(c->g);
    memset(c, 0, sizeof(*c));
}

int build_mlp_cache(mlp_cache *c, const model_dims *dims, int cap_rows, int f)
{
    memset(c, 0, sizeof(*c));
    c->m = malloc((size_t)cap_rows * dims->d_model * sizeof(float));
    c->rstd = malloc((size_t)cap_rows * sizeof(float));
    if (!c->m || !c->rstd || build_ffn_cache(&c->ffn, cap_rows, f)) {
        free_mlp_cache(c);
        return -ENOMEM;
    }
    return 0;
}

void free_mlp_cache(mlp_cache *c)
{
    free(c->m);
    free(c->rstd);
    free_ffn_cache(&c->ffn);
    memset(c, 0, sizeof(*c));
}

int block_tensors(tensor_desc *out, const model_dims *dims, bool with_mlp)
{
    int d = dims->d_model, f = dims->d_ff;
    /* MODEL.md "Init": N(0, 0.02), the output projections N(0, 0.02/sqrt(2L)). */
    float out_std = 0.02f / sqrtf(2.0f * (float)dims->n_layers);
    tensor_desc t[BLOCK_TENSORS] = {
        make_tensor_desc("attn_norm", 1, d, 0, 0, INIT_ONES, 0.0f),
        make_tensor_desc("wq", 2, d, d, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("wk", 2, d, d, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("wv", 2, d, d, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("wo", 2, d, d, 0, INIT_NORMAL, out_std),
        make_tensor_desc("mlp_norm", 1, d, 0, 0, INIT_ONES, 0.0f),
        make_tensor_desc("w1", 2, d, f, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("w3", 2, d, f, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("w2", 2, f, d, 0, INIT_NORMAL, out_std),
    };
    int count = with_mlp ? BLOCK_TENSORS : BLOCK_ATTN_TENSORS;
    if (out)
        memcpy(out, t, (size_t)count * sizeof(tensor_desc));
    return count;
}

attn_weights attn_weights_at(float *const *t)
{
    attn_weights w = { .norm = t[0], .wq = t[1], .wk = t[2], .wv = t[3], .wo = t[4] };
    return w;
}

ffn_weights ffn_weights_at(float *const *t)
{
    ffn_weights w = { .w1 = t[0], .w3 = t[1], .w2 = t[2] };
    return w;
}

long attn_ws_floats(const model_dims *dims, int n, int max_seq_rows)
{
    /* backward: datt, dq, dk, dv, then one attention scratch per thread;
     * forward: one (smaller) scratch per thread */
    int dh = dims->d_head;
    long bwd = 4L * n * dims->d_model +
               POOL_MAX_THREADS * attention_scratch_floats(max_seq_rows, dh);
    long fwd = POOL_MAX_THREADS * attention_fwd_scratch_floats(dims->seq_len, dh);
    return bwd > fwd ? bwd : fwd;
}

/* Attention runs as one task per (sequence, head) of a row set, on the
 * context's pool: tasks write disjoint columns of disjoint rows, and each
 * worker has its own scratch. */
typedef struct attn_job {
    const attn_cache *c;
    const row_set *rs;
    int n_heads, dh, d;
    float *scratch;
    long scratch_floats;
    /* backward only */
    float *dq, *dk, *dv;
    const float *datt;
} attn_job;

/* Task t: sequence t / H, head t % H.  Its rows' count (0: nothing to do),
 * the offset of its first row in the d-wide buffers, and its lse[ns]. */
static int attn_task_rows(const attn_job *j, int t, size_t *o, float **lse)
{
    int s = t / j->n_heads, h = t % j->n_heads;
    int r0 = j->rs->seq_start[s], ns = j->rs->seq_start[s + 1] - r0;
    *o = (size_t)r0 * j->d;
    *lse = j->c->lse + (size_t)j->n_heads * r0 + (size_t)h * ns;
    return ns;
}

static void attn_forward_task(void *arg, int t, int worker)
{
    const attn_job *j = arg;
    const attn_cache *c = j->c;
    size_t o;
    float *lse;
    int ns = attn_task_rows(j, t, &o, &lse);
    if (ns > 0)
        attention_forward_head(c->att + o, lse, j->scratch + (size_t)worker * j->scratch_floats,
                               c->q + o, c->k + o, c->v + o, ns, t % j->n_heads, j->dh, j->d);
}

static void attn_backward_task(void *arg, int t, int worker)
{
    const attn_job *j = arg;
    const attn_cache *c = j->c;
    size_t o;
    float *lse;
    int ns = attn_task_rows(j, t, &o, &lse);
    if (ns > 0)
        attention_backward_head(j->dq + o, j->dk + o, j->dv + o,
                                j->scratch + (size_t)worker * j->scratch_floats, j->datt + o,
                                c->att + o, c->q + o, c->k + o, c->v + o, lse, ns,
                                t % j->n_heads, j->dh, j->d);
}

static int max_seq_rows(const row_set *rs)
{
    int max_ns = 0;
    for (int s = 0; s < rs->nseq; s++)
        if (rs->seq_start[s + 1] - rs->seq_start[s] > max_ns)
            max_ns = rs->seq_start[s + 1] - rs->seq_start[s];
    return max_ns;
}

long mlp_ws_floats(const model_dims *dims, int n, int f)
{
    return (long)n * dims->d_model + 3L * n * f;
}

void attn_forward(attn_cache *c, float *h, const float *x, const row_set *rs,
                  const attn_weights *w, const fwd_args *a)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = rs->n;
    double t0 = mode_now();
    rmsnorm_forward_pool(a->pool, c->u, c->rstd, x, w->norm, n, d);
    linear_forward(a->pool, c->q, c->u, w->wq, n, d, d, 0.0f);
    linear_forward(a->pool, c->k, c->u, w->wk, n, d, d, 0.0f);
    linear_forward(a->pool, c->v, c->u, w->wv, n, d, d, 0.0f);
    rope_forward_pool(a->pool, c->q, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    rope_forward_pool(a->pool, c->k, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    t0 = mode_now();
    attn_job job = { .c = c, .rs = rs, .n_heads = dm->n_heads, .dh = dm->d_head, .d = d,
                     .scratch = a->ws,
                     .scratch_floats = attention_fwd_scratch_floats(max_seq_rows(rs), dm->d_head) };
    pool_run(a->ctx ? a->ctx->pool : NULL, rs->nseq * dm->n_heads, attn_forward_task, &job);
    mode_time_add(a->ctx, PHASE_ATTENTION, t0);
    t0 = mode_now();
    memcpy(h, x, (size_t)n * d * sizeof(float));
    linear_forward(a->pool, h, c->att, w->wo, n, d, d, 1.0f);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
}

void attn_backward(float *dx, const attn_weights *dw, const float *dh, const float *x,
                   const attn_cache *c, const row_set *rs, const attn_weights *w,
                   const fwd_args *a, float *ws)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = rs->n;
    size_t nd = (size_t)n * d;
    float *datt = ws, *dq = ws + nd, *dk = ws + 2 * nd, *dv = ws + 3 * nd;
    float *scratch = ws + 4 * nd;
    double t0 = mode_now();
    for (size_t i = 0; i < nd; i++)
        dx[i] += dh[i]; /* the residual path */
    linear_backward(a->pool, datt, dw->wo, dh, c->att, w->wo, n, d, d, 0.0f);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    t0 = mode_now();
    memset(dq, 0, 3 * nd * sizeof(float));
    attn_job job = { .c = c, .rs = rs, .n_heads = dm->n_heads, .dh = dm->d_head, .d = d,
                     .dq = dq, .dk = dk, .dv = dv, .scratch = scratch, .datt = datt,
                     .scratch_floats = attention_scratch_floats(max_seq_rows(rs), dm->d_head) };
    pool_run(a->ctx ? a->ctx->pool : NULL, rs->nseq * dm->n_heads, attn_backward_task, &job);
    mode_time_add(a->ctx, PHASE_ATTENTION, t0);
    t0 = mode_now();
    rope_backward_pool(a->pool, dq, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    rope_backward_pool(a->pool, dk, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    float *du = datt; /* datt is spent: reuse it for d u */
    linear_backward(a->pool, du, dw->wq, dq, c->u, w->wq, n, d, d, 0.0f);
    linear_backward(a->pool, du, dw->wk, dk, c->u, w->wk, n, d, d, 1.0f);
    linear_backward(a->pool, du, dw->wv, dv, c->u, w->wv, n, d, d, 1.0f);
    rmsnorm_backward_pool(a->pool, dx, dw->norm, du, x, w->norm, c->rstd, n, d);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
}

void ffn_forward(thread_pool *p, ffn_cache *c, float *out, const float *m, int n,
                 const ffn_weights *w, int d, int f, float beta)
{
    linear_forward(p, c->a1, m, w->w1, n, d, f, 0.0f);
    linear_forward(p, c->a3, m, w->w3, n, d, f, 0.0f);
    swiglu_forward_pool(p, c->g, c->a1, c->a3, (long)n * f);
    linear_forward(p, out, c->g, w->w2, n, f, d, beta);
}

void ffn_backward(thread_pool *p, float *dm, const ffn_weights *dw, const float *dout,
                  const float *m, const ffn_cache *c, int n, const ffn_weights *w, int d, int f,
                  float *ws)
{
    size_t nf = (size_t)n * f;
    float *dg = ws, *da1 = ws + nf, *da3 = ws + 2 * nf;
    linear_backward(p, dg, dw->w2, dout, c->g, w->w2, n, f, d, 0.0f);
    swiglu_backward_pool(p, da1, da3, dg, c->a1, c->a3, (long)nf);
    linear_backward(p, dm, dw->w1, da1, m, w->w1, n, d, f, 0.0f);
    linear_backward(p, dm, dw->w3, da3, m, w->w3, n, d, f, 1.0f);
}

void mlp_forward(thread_pool *p, mlp_cache *c, float *y, const float *h, int n,
                 const float *norm, const ffn_weights *w, int d, int f)
{
    rmsnorm_forward_pool(p, c->m, c->rstd, h, norm, n, d);
    memcpy(y, h, (size_t)n * d * sizeof(float));
    ffn_forward(p, &c->ffn, y, c->m, n, w, d, f, 1.0f);
}

void mlp_backward(thread_pool *p, float *dh, float *dnorm, const ffn_weights *dw,
                  const float *dy, const float *h, const mlp_cache *c, int n, const float *norm,
                  const ffn_weights *w, int d, int f, float *ws)
{
    size_t nd = (size_t)n * d;
    float *dm = ws;
    for (size_t i = 0; i < nd; i++)
        dh[i] += dy[i];
    ffn_backward(p, dm, dw, dy, c->m, &c->ffn, n, w, d, f, ws + nd);
    rmsnorm_backward_pool(p, dh, dnorm, dm, h, norm, c->rstd, n, d);
}

double attn_flops_rows(const model_dims *dims, long n, long sum_sq_seq_rows)
{
    double d = dims->d_model;
    /* Wq Wk Wv Wo: 4 (n x d x d); QK^T and PV over all heads: 2 (n_s^2 d) */
    return 2.0 * (4.0 * (double)n * d * d + 2.0 * (double)sum_sq_seq_rows * d);
}

double ffn_flops_rows(int d, int f, long n)
{
    return 2.0 * 3.0 * (double)n * d * f;
}

int build_kv_cache(kv_cache *c, const model_dims *dims, int cap)
{
    memset(c, 0, sizeof(*c));
    size_t d = (size_t)dims->d_model;
    c->cap = cap;
    c->k = malloc((size_t)cap * d * sizeof(float));
    c->v = malloc((size_t)cap * d * sizeof(float));
    c->scores = malloc((size_t)cap * sizeof(float));
    c->u = malloc(3 * d * sizeof(float));
    c->pos = malloc((size_t)cap * sizeof(int32_t));
    if (!c->k || !c->v || !c->scores || !c->u || !c->pos) {
        free_kv_cache(c);
        return -ENOMEM;
    }
    c->q = c->u + d;
    c->att = c->u + 2 * d;
    return 0;
}

void free_kv_cache(kv_cache *c)
{
    free(c->k);
    free(c->v);
    free(c->scores);
    free(c->u);
    free(c->pos);
    memset(c, 0, sizeof(*c));
}

int kv_cache_begin(kv_cache *c, const model_dims *dims, int max_len)
{
    if (c->cap < max_len) {
        free_kv_cache(c);
        if (build_kv_cache(c, dims, max_len))
            return -ENOMEM;
    }
    c->n = 0;
    return 0;
}

int attn_decode(kv_cache *c, float *h, const float *x, int32_t pos, const attn_weights *w,
                const fwd_args *a)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model, dh = dm->d_head, n = c->n;
    if (n >= c->cap || (n > 0 && c->pos[n - 1] >= pos))
        return -EINVAL;
    float *k = c->k + (size_t)n * d, *v = c->v + (size_t)n * d;
    rmsnorm_forward(c->u, &c->rstd, x, w->norm, 1, d);
    linear_forward(NULL, c->q, c->u, w->wq, 1, d, d, 0.0f);
    linear_forward(NULL, k, c->u, w->wk, 1, d, d, 0.0f);
    linear_forward(NULL, v, c->u, w->wv, 1, d, d, 0.0f);
    rope_forward(c->q, &pos, a->rope, 1, dm->n_heads, dh);
    rope_forward(k, &pos, a->rope, 1, dm->n_heads, dh);
    c->pos[n] = pos;
    c->n = ++n;
    float scale = 1.0f / sqrtf((float)dh);
    for (int hd = 0; hd < dm->n_heads; hd++) {
        /* scores against every cached row (all earlier, and itself) */
        matmul(c->scores, n, c->q + hd * dh, d, false, c->k + hd * dh, d, true, 1, n, dh, 0.0f);
        softmax_scaled(c->scores, n, scale);
        matmul(c->att + hd * dh, d, c->scores, n, false, c->v + hd * dh, d, false, 1, dh, n, 0.0f);
    }
    memcpy(h, x, (size_t)d * sizeof(float));
    linear_forward(NULL, h, c->att, w->wo, 1, d, d, 1.0f);
    return 0;
}
