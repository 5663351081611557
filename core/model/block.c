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
    if (ns > 0 && c->core)
        c->core->fwd(c->core, c, t / j->n_heads, t % j->n_heads, j->rs->seq_start[t / j->n_heads],
                     ns);
    else if (ns > 0)
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
    if (ns > 0 && c->core)
        c->core->bwd(c->core, c, t / j->n_heads, t % j->n_heads, j->rs->seq_start[t / j->n_heads],
                     ns, j->dq, j->dk, j->dv, j->datt);
    else if (ns > 0)
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


void attn_forward(attn_cache *c, float *h, const float *x, const row_set *rs,
                  const attn_weights *w, const fwd_args *a)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = rs->n;
    double t0 = mode_now();
    rmsnorm_forward_pool(a->mm.pool, c->u, c->rstd, x, w->norm, n, d);
    linear_forward(&a->mm, c->q, c->u, w->wq, n, d, d, 0.0f);
    if (w->wk) { /* else a reader: c->k, c->v are its group's first layer's */
        linear_forward(&a->mm, c->k, c->u, w->wk, n, d, d, 0.0f);
        linear_forward(&a->mm, c->v, c->u, w->wv, n, d, d, 0.0f);
    }
    rope_forward_pool(a->mm.pool, c->q, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    if (w->wk)
        rope_forward_pool(a->mm.pool, c->k, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    t0 = mode_now();
    attn_job job = { .c = c, .rs = rs, .n_heads = dm->n_heads, .dh = dm->d_head, .d = d,
                     .scratch = a->ws,
                     .scratch_floats = attention_fwd_scratch_floats(max_seq_rows(rs), dm->d_head) };
    pool_run(a->mm.pool, rs->nseq * dm->n_heads, attn_forward_task, &job);
    /* QK^T and PV over all heads, the full n_s x n_s of each sequence as
     * MODEL.md counts them (the kernel skips the masked half) */
    double sq = 0.0;
    for (int s = 0; s < rs->nseq; s++) {
        double ns = rs->seq_start[s + 1] - rs->seq_start[s];
        sq += ns * ns;
    }
    flops_add(4.0 * sq * d);
    mode_time_add(a->ctx, PHASE_ATTENTION, t0);
    t0 = mode_now();
    memcpy(h, x, (size_t)n * d * sizeof(float));
    linear_forward(&a->mm, h, c->att, w->wo, n, d, d, 1.0f);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
}

void attn_backward(float *dx, const attn_weights *dw, const float *dh, const float *x,
                   const attn_cache *c, const row_set *rs, const attn_weights *w,
                   const fwd_args *a, float *ws)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = rs->n;
    size_t nd = (size_t)n * d;
    attn_ws v;
    buf_plan wp = buf_carving(ws);
    attn_ws_layout(&wp, &v, dm, n, max_seq_rows(rs));
    float *datt = v.datt, *dq = v.dq, *dk = v.dk, *dv = v.dv;
    double t0 = mode_now();
    for (size_t i = 0; i < nd; i++)
        dx[i] += dh[i]; /* the residual path */
    linear_backward(&a->mm, datt, dw->wo, dh, c->att, w->wo, n, d, d, 0.0f);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    t0 = mode_now();
    memset(dq, 0, 3 * nd * sizeof(float));
    attn_job job = { .c = c, .rs = rs, .n_heads = dm->n_heads, .dh = dm->d_head, .d = d,
                     .dq = dq, .dk = dk, .dv = dv, .scratch = v.scratch, .datt = datt,
                     .scratch_floats = v.scratch_floats };
    pool_run(a->mm.pool, rs->nseq * dm->n_heads, attn_backward_task, &job);
    mode_time_add(a->ctx, PHASE_ATTENTION, t0);
    t0 = mode_now();
    if (!w->wk) { /* a reader: its k, v's gradients go to its group's first layer */
        for (size_t i = 0; i < nd; i++) {
            c->dk_read[i] = c->dkv_first ? dk[i] : c->dk_read[i] + dk[i];
            c->dv_read[i] = c->dkv_first ? dv[i] : c->dv_read[i] + dv[i];
        }
    } else if (c->dk_read) { /* a first layer: its readers' share, complete (top-down) */
        for (size_t i = 0; i < nd; i++) {
            dk[i] += c->dk_read[i];
            dv[i] += c->dv_read[i];
        }
    }
    rope_backward_pool(a->mm.pool, dq, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    float *du = datt; /* datt is spent: reuse it for d u */
    linear_backward(&a->mm, du, dw->wq, dq, c->u, w->wq, n, d, d, 0.0f);
    if (w->wk) {
        rope_backward_pool(a->mm.pool, dk, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
        linear_backward(&a->mm, du, dw->wk, dk, c->u, w->wk, n, d, d, 1.0f);
        linear_backward(&a->mm, du, dw->wv, dv, c->u, w->wv, n, d, d, 1.0f);
    }
    rmsnorm_backward_pool(a->mm.pool, dx, dw->norm, du, x, w->norm, c->rstd, n, d);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
}

void ffn_forward(const matmul_exec *x, ffn_cache *c, float *out, const float *m, int n,
                 const ffn_weights *w, int d, int f, float beta)
{
    linear_forward(x, c->a1, m, w->w1, n, d, f, 0.0f);
    linear_forward(x, c->a3, m, w->w3, n, d, f, 0.0f);
    swiglu_forward_pool(x ? x->pool : NULL, c->g, c->a1, c->a3, (long)n * f);
    linear_forward(x, out, c->g, w->w2, n, f, d, beta);
}

void ffn_backward(const matmul_exec *x, float *dm, const ffn_weights *dw, const float *dout,
                  const float *m, const ffn_cache *c, int n, const ffn_weights *w, int d, int f,
                  float *ws)
{
    size_t nf = (size_t)n * f;
    ffn_ws v;
    buf_plan wp = buf_carving(ws);
    ffn_ws_layout(&wp, &v, n, f);
    linear_backward(x, v.dg, dw->w2, dout, c->g, w->w2, n, f, d, 0.0f);
    swiglu_backward_pool(x ? x->pool : NULL, v.da1, v.da3, v.dg, c->a1, c->a3, (long)nf);
    linear_backward(x, dm, dw->w1, v.da1, m, w->w1, n, d, f, 0.0f);
    linear_backward(x, dm, dw->w3, v.da3, m, w->w3, n, d, f, 1.0f);
}

void mlp_forward(const matmul_exec *x, mlp_cache *c, float *y, const float *h, int n,
                 const float *norm, const ffn_weights *w, int d, int f)
{
    rmsnorm_forward_pool(x ? x->pool : NULL, c->m, c->rstd, h, norm, n, d);
    memcpy(y, h, (size_t)n * d * sizeof(float));
    ffn_forward(x, &c->ffn, y, c->m, n, w, d, f, 1.0f);
}

void mlp_backward(const matmul_exec *x, float *dh, float *dnorm, const ffn_weights *dw,
                  const float *dy, const float *h, const mlp_cache *c, int n, const float *norm,
                  const ffn_weights *w, int d, int f, float *ws)
{
    size_t nd = (size_t)n * d;
    mlp_ws v;
    buf_plan wp = buf_carving(ws);
    mlp_ws_layout(&wp, &v, &(model_dims){ .d_model = d }, n, f);
    for (size_t i = 0; i < nd; i++)
        dh[i] += dy[i];
    ffn_backward(x, v.dm, dw, dy, c->m, &c->ffn, n, w, d, f, v.ffn.dg);
    rmsnorm_backward_pool(x ? x->pool : NULL, dh, dnorm, v.dm, h, norm, c->rstd, n, d);
}



static int build_kv_cache(kv_cache *c, const model_dims *dims, int cap)
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

void kv_cache_truncate(kv_cache *c, int32_t pos)
{
    while (c->n > 0 && c->pos[c->n - 1] >= pos)
        c->n--;
}

int block_decode_begin(kv_cache *kv, mlp_cache *mlp1, float **scratch, int scratch_floats,
                       const model_dims *dims, int max_len)
{
    if (kv->cap < max_len) { /* first use, or a longer sequence */
        free_mlp_cache(mlp1);
        free(*scratch);
        *scratch = malloc((size_t)scratch_floats * sizeof(float));
        if (!*scratch || build_mlp_cache(mlp1, dims, 1, dims->d_ff))
            return -ENOMEM;
    }
    return kv_cache_begin(kv, dims, max_len);
}

void free_block_decode(kv_cache *kv, mlp_cache *mlp1, float **scratch)
{
    free_kv_cache(kv);
    free_mlp_cache(mlp1);
    free(*scratch);
    *scratch = NULL;
}

void kv_cache_slide(kv_cache *c, int32_t pos, int S, int d)
{
    int drop = 0;
    while (drop < c->n && c->pos[drop] <= pos - S)
        drop++;
    if (drop == 0)
        return;
    int keep = c->n - drop;
    memmove(c->k, c->k + (size_t)drop * d, (size_t)keep * d * sizeof(float));
    memmove(c->v, c->v + (size_t)drop * d, (size_t)keep * d * sizeof(float));
    memmove(c->pos, c->pos + drop, (size_t)keep * sizeof(int32_t));
    c->n = keep;
}

/* One query row against the cached rows: plain loops, not sgemm, whose
 * packing of K and V for a 1 x n x d_head product cost more than the
 * product (decoding 64 sequences at once spent 40% of its time packing).
 * The heads go in groups of as many as sc holds (sc_floats / n): a group's
 * scores in one pass over the cached rows, then its P V in one more, so
 * that all heads at once read each row of K and V once, whole. */
void kv_cache_attend(const kv_cache *c, float *att, const float *q, const model_dims *dm,
                     float *sc, long sc_floats)
{
    int d = dm->d_model, dh = dm->d_head, H = dm->n_heads, n = c->n;
    float scale = 1.0f / sqrtf((float)dh);
    int group = n > 0 ? (int)(sc_floats / n) : H;
    group = group < 1 ? 1 : group > H ? H : group;
    for (int h0 = 0; h0 < H; h0 += group) {
        int h1 = h0 + group < H ? h0 + group : H;
        /* scores against every cached row (all earlier, and itself) */
        for (int j = 0; j < n; j++) {
            const float *kj = c->k + (size_t)j * d;
            for (int hd = h0; hd < h1; hd++) {
                const float *qh = q + hd * dh, *kh = kj + hd * dh;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int e = 0; e < dh; e++)
                    s += qh[e] * kh[e];
                sc[(size_t)(hd - h0) * n + j] = s;
            }
        }
        for (int hd = h0; hd < h1; hd++)
            softmax_scaled(sc + (size_t)(hd - h0) * n, n, scale);
        for (int e = h0 * dh; e < h1 * dh; e++)
            att[e] = 0.0f;
        for (int j = 0; j < n; j++) {
            const float *vj = c->v + (size_t)j * d;
            for (int hd = h0; hd < h1; hd++) {
                float p = sc[(size_t)(hd - h0) * n + j], *ah = att + hd * dh;
                const float *vh = vj + hd * dh;
#pragma omp simd
                for (int e = 0; e < dh; e++)
                    ah[e] += p * vh[e];
            }
        }
    }
}

int attn_decode_kv(kv_cache *c, const float *x, int32_t pos, const attn_weights *w,
                   const fwd_args *a)
{
    const model_dims *dm = a->dims;
    kv_cache_slide(c, pos, dm->seq_len, dm->d_model);
    int d = dm->d_model, n = c->n;
    if (n >= c->cap || (n > 0 && c->pos[n - 1] >= pos))
        return -EINVAL;
    float *k = c->k + (size_t)n * d, *v = c->v + (size_t)n * d;
    rmsnorm_forward(c->u, &c->rstd, x, w->norm, 1, d);
    linear_forward(NULL, k, c->u, w->wk, 1, d, d, 0.0f);
    linear_forward(NULL, v, c->u, w->wv, 1, d, d, 0.0f);
    rope_forward(k, &pos, a->rope, 1, dm->n_heads, dm->d_head);
    c->pos[n] = pos;
    c->n = n + 1;
    return 0;
}

int attn_decode(kv_cache *c, float *h, const float *x, int32_t pos, const attn_weights *w,
                const fwd_args *a)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model, dh = dm->d_head, n = c->n;
    if (!w->wk) { /* a reader: the first layer has slid the cache and added this row */
        if (n == 0 || c->pos[n - 1] != pos)
            return -EINVAL;
    } else {
        kv_cache_slide(c, pos, dm->seq_len, d);
        n = c->n;
        if (n >= c->cap || (n > 0 && c->pos[n - 1] >= pos))
            return -EINVAL;
    }
    rmsnorm_forward(c->u, &c->rstd, x, w->norm, 1, d);
    linear_forward(NULL, c->q, c->u, w->wq, 1, d, d, 0.0f);
    rope_forward(c->q, &pos, a->rope, 1, dm->n_heads, dh);
    if (w->wk) {
        float *k = c->k + (size_t)n * d, *v = c->v + (size_t)n * d;
        linear_forward(NULL, k, c->u, w->wk, 1, d, d, 0.0f);
        linear_forward(NULL, v, c->u, w->wv, 1, d, d, 0.0f);
        rope_forward(k, &pos, a->rope, 1, dm->n_heads, dh);
        c->pos[n] = pos;
        c->n = ++n;
    }
    if (c->core) {
        float scale = 1.0f / sqrtf((float)dh);
        for (int hd = 0; hd < dm->n_heads; hd++) {
            /* scores against every cached row (all earlier, and itself) */
            matmul(c->scores, n, c->q + hd * dh, d, false, c->k + hd * dh, d, true, 1, n, dh,
                   0.0f);
            c->core->decode(c->core, c, 0, hd, n, scale);
        }
    } else {
        kv_cache_attend(c, c->att, c->q, dm, c->scores, c->cap);
    }
    memcpy(h, x, (size_t)d * sizeof(float));
    linear_forward(NULL, h, c->att, w->wo, 1, d, d, 1.0f);
    return 0;
}
