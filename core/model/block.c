#include "core/model/block.h"

#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_time(const fwd_args *a, timer_phase p, double t0)
{
    if (a && a->ctx)
        a->ctx->timers[p] += mode_now() - t0;
}

void row_set_fill_whole(int *seq_start, int32_t *pos, int nseq, int S)
{
    for (int b = 0; b <= nseq; b++)
        seq_start[b] = b * S;
    for (int j = 0; j < nseq * S; j++)
        pos[j] = j % S;
}

int build_attn_cache(attn_cache *c, const model_dims *dims, int cap_rows, long cap_probs)
{
    memset(c, 0, sizeof(*c));
    size_t rd = (size_t)cap_rows * dims->d_model;
    c->cap_rows = cap_rows;
    c->cap_probs = cap_probs;
    c->u = malloc(rd * sizeof(float));
    c->rstd = malloc((size_t)cap_rows * sizeof(float));
    c->q = malloc(rd * sizeof(float));
    c->k = malloc(rd * sizeof(float));
    c->v = malloc(rd * sizeof(float));
    c->att = malloc(rd * sizeof(float));
    c->probs = malloc((size_t)cap_probs * sizeof(float));
    if (!c->u || !c->rstd || !c->q || !c->k || !c->v || !c->att || !c->probs) {
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
    free(c->probs);
    memset(c, 0, sizeof(*c));
}

int build_ffn_cache(ffn_cache *c, int cap_rows, int f)
{
    memset(c, 0, sizeof(*c));
    size_t rf = (size_t)cap_rows * f;
    c->cap_rows = cap_rows;
    c->f = f;
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
    return 4L * n * dims->d_model + (long)max_seq_rows * max_seq_rows;
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
    rmsnorm_forward(c->u, c->rstd, x, w->norm, n, d);
    linear_forward(c->q, c->u, w->wq, n, d, d, 0.0f);
    linear_forward(c->k, c->u, w->wk, n, d, d, 0.0f);
    linear_forward(c->v, c->u, w->wv, n, d, d, 0.0f);
    rope_forward(c->q, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    rope_forward(c->k, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    add_time(a, PHASE_MATMUL, t0);
    t0 = mode_now();
    long off = 0;
    for (int s = 0; s < rs->nseq; s++) {
        int r0 = rs->seq_start[s], ns = rs->seq_start[s + 1] - r0;
        if (ns == 0)
            continue;
        size_t o = (size_t)r0 * d;
        attention_forward(c->att + o, c->probs + off, c->q + o, c->k + o, c->v + o, ns,
                          dm->n_heads, dm->d_head, d);
        off += (long)dm->n_heads * ns * ns;
    }
    add_time(a, PHASE_ATTENTION, t0);
    t0 = mode_now();
    memcpy(h, x, (size_t)n * d * sizeof(float));
    linear_forward(h, c->att, w->wo, n, d, d, 1.0f);
    add_time(a, PHASE_MATMUL, t0);
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
    linear_backward(datt, dw->wo, dh, c->att, w->wo, n, d, d, 0.0f);
    add_time(a, PHASE_MATMUL, t0);
    t0 = mode_now();
    memset(dq, 0, 3 * nd * sizeof(float));
    long off = 0;
    for (int s = 0; s < rs->nseq; s++) {
        int r0 = rs->seq_start[s], ns = rs->seq_start[s + 1] - r0;
        if (ns == 0)
            continue;
        size_t o = (size_t)r0 * d;
        attention_backward(dq + o, dk + o, dv + o, scratch, datt + o, c->q + o, c->k + o,
                           c->v + o, c->probs + off, ns, dm->n_heads, dm->d_head, d);
        off += (long)dm->n_heads * ns * ns;
    }
    add_time(a, PHASE_ATTENTION, t0);
    t0 = mode_now();
    rope_backward(dq, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    rope_backward(dk, rs->pos, a->rope, n, dm->n_heads, dm->d_head);
    float *du = datt; /* datt is spent: reuse it for d u */
    linear_backward(du, dw->wq, dq, c->u, w->wq, n, d, d, 0.0f);
    linear_backward(du, dw->wk, dk, c->u, w->wk, n, d, d, 1.0f);
    linear_backward(du, dw->wv, dv, c->u, w->wv, n, d, d, 1.0f);
    rmsnorm_backward(dx, dw->norm, du, x, w->norm, c->rstd, n, d);
    add_time(a, PHASE_MATMUL, t0);
}

void ffn_forward(ffn_cache *c, float *out, const float *m, int n, const ffn_weights *w,
                 int d, int f, float beta)
{
    linear_forward(c->a1, m, w->w1, n, d, f, 0.0f);
    linear_forward(c->a3, m, w->w3, n, d, f, 0.0f);
    swiglu_forward(c->g, c->a1, c->a3, (long)n * f);
    linear_forward(out, c->g, w->w2, n, f, d, beta);
}

void ffn_backward(float *dm, const ffn_weights *dw, const float *dout, const float *m,
                  const ffn_cache *c, int n, const ffn_weights *w, int d, int f, float *ws)
{
    size_t nf = (size_t)n * f;
    float *dg = ws, *da1 = ws + nf, *da3 = ws + 2 * nf;
    linear_backward(dg, dw->w2, dout, c->g, w->w2, n, f, d, 0.0f);
    memset(da1, 0, 2 * nf * sizeof(float));
    swiglu_backward(da1, da3, dg, c->a1, c->a3, (long)nf);
    linear_backward(dm, dw->w1, da1, m, w->w1, n, d, f, 1.0f);
    linear_backward(dm, dw->w3, da3, m, w->w3, n, d, f, 1.0f);
}

void mlp_forward(mlp_cache *c, float *y, const float *h, int n, const float *norm,
                 const ffn_weights *w, int d, int f)
{
    rmsnorm_forward(c->m, c->rstd, h, norm, n, d);
    memcpy(y, h, (size_t)n * d * sizeof(float));
    ffn_forward(&c->ffn, y, c->m, n, w, d, f, 1.0f);
}

void mlp_backward(float *dh, float *dnorm, const ffn_weights *dw, const float *dy,
                  const float *h, const mlp_cache *c, int n, const float *norm,
                  const ffn_weights *w, int d, int f, float *ws)
{
    size_t nd = (size_t)n * d;
    float *dm = ws;
    for (size_t i = 0; i < nd; i++)
        dh[i] += dy[i];
    memset(dm, 0, nd * sizeof(float));
    ffn_backward(dm, dw, dy, c->m, &c->ffn, n, w, d, f, ws + nd);
    rmsnorm_backward(dh, dnorm, dm, h, norm, c->rstd, n, d);
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

int attn_decode(kv_cache *c, float *h, const float *x, int32_t pos, const attn_weights *w,
                const fwd_args *a)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model, dh = dm->d_head, n = c->n;
    if (n >= c->cap || (n > 0 && c->pos[n - 1] >= pos))
        return -EINVAL;
    float *k = c->k + (size_t)n * d, *v = c->v + (size_t)n * d;
    rmsnorm_forward(c->u, &c->rstd, x, w->norm, 1, d);
    linear_forward(c->q, c->u, w->wq, 1, d, d, 0.0f);
    linear_forward(k, c->u, w->wk, 1, d, d, 0.0f);
    linear_forward(v, c->u, w->wv, 1, d, d, 0.0f);
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
    linear_forward(h, c->att, w->wo, 1, d, d, 1.0f);
    return 0;
}
