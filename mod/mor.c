/* Mixture-of-Recursions (mor.h, docs/kinds/mor.md).  Step r = 1..R of a
 * sequence, with x^(0) the layer's input and A_0 every position:
 *     s_i = x_i^(r-1) . w_r for i in A_{r-1};
 *     T_r = the k_r largest s_i of A_{r-1} (training, top-k evaluation; ties
 *           to the lower position), or { i in A_{r-1} : s_i > 0 } (causal);
 *     x_i^(r) = x_i^(r-1) + sigmoid(s_i) (Block(X~) - X~)_i for i in T_r,
 *           X~ = x^(r-1)[T_r], the block's attention among T_r only;
 *     A_r = T_r;
 * the layer's output is x^(R).  One block's weights for every step. */
#include "mod/mor.h"
#include "mod/mod.h"
#include "mod/mor_state.h"

#include "core/kernels/matmul.h"
#include "core/model/block.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mor_free(layer *l)
{
    mor_state *s = l->state;
    if (!s)
        return;
    for (int r = 0; r < MOR_MAX_STEPS; r++) {
        free_routed_rows(&s->step[r].rows);
        free_mod_router(&s->step[r].rt);
        free(s->step[r].xin);
        free_kv_cache(&s->kv[r]);
    }
    free(s->depth);
    free(s->dx);
    free_mlp_cache(&s->mlp1);
    free(s->dec);
    free(s);
    l->state = NULL;
}

static int mor_build(layer *l, const model_dims *dims, int max_seq)
{
    mor_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    const mor_params *p = mor_params_of(&l->spec);
    s->R = p->recursions;
    size_t rows = (size_t)max_seq * dims->seq_len, rd = rows * dims->d_model;
    mod_router_params rp = mor_router_params();
    int rc = !(s->depth = malloc(rows * sizeof(int32_t))) ||
             !(s->dx = malloc(2 * rd * sizeof(float)));
    for (int r = 0; !rc && r < s->R; r++) {
        mor_step *st = &s->step[r];
        rc = build_mod_router(&st->rt, &rp, dims, max_seq) ||
             !(st->xin = malloc(rd * sizeof(float))) ||
             routed_rows_ensure(&st->rows, dims, dims->d_ff,
                                max_seq * mor_k(p, r + 1, dims->seq_len));
    }
    if (rc) {
        mor_free(l);
        return -ENOMEM;
    }
    return 0;
}

static float sigm(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

/* x . w in one order, the same in the forward and in decoding (a sum in
 * another order could flip a score near 0, and the decision with it). */
static float score(const float *x, const float *w, int d)
{
    float acc = 0.0f;
    for (int e = 0; e < d; e++)
        acc += x[e] * w[e];
    return acc;
}

static double bce(float s, int z)
{
    double x = (double)s;
    return fmax(x, 0.0) + log1p(exp(-fabs(x))) - (z ? x : 0.0);
}

/* Step r's selection: rt->c[i] = 1 for i in T_r (rt->z holds A_{r-1}), the
 * container's rows and gates. */
static void select_step(mor_step *st, const mor_params *p, int r, const fwd_args *a)
{
    mod_router *rt = &st->rt;
    int S = a->seq_len;
    rt->n_sel = 0;
    rt->nseq = a->nseq;
    rt->sum_sq = 0;
    for (int b = 0; b < a->nseq; b++) {
        unsigned char *z = rt->z + (size_t)b * S, *take = rt->c + (size_t)b * S;
        const float *sc = rt->r + (size_t)b * S;
        int eligible = 0;
        for (int i = 0; i < S; i++)
            eligible += z[i];
        if (a->mode == FWD_EVAL_CAUSAL) {
            for (int i = 0; i < S; i++)
                take[i] = z[i] && sc[i] > 0.0f;
        } else {
            int k = mor_k(p, r + 1, S);
            k = k < eligible ? k : eligible;
            float *tmp = rt->dr; /* backward's buffer, free in the forward */
            for (int i = 0; i < S; i++)
                tmp[i] = z[i] ? sc[i] : -HUGE_VALF;
            mod_topk(take, tmp, S, k, rt->scratch);
        }
        rt->seq_start[b] = rt->n_sel;
        for (int i = 0; i < S; i++) {
            if (!take[i])
                continue;
            rt->sel[rt->n_sel] = b * S + i;
            rt->pos[rt->n_sel] = i;
            rt->gate[rt->n_sel] = sigm(sc[i]);
            rt->n_sel++;
        }
        long ns = rt->n_sel - rt->seq_start[b];
        rt->sum_sq += ns * ns;
    }
    rt->seq_start[a->nseq] = rt->n_sel;
}

static int mor_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    mor_state *s = l->state;
    const mor_params *p = mor_params_of(&l->spec);
    const model_dims *dm = a->dims;
    int d = dm->d_model, S = a->seq_len, n = a->nseq * S, R = s->R;
    size_t nd = (size_t)n * d;
    attn_weights aw = attn_weights_at(l->w + 1);
    ffn_weights fw = ffn_weights_at(l->w + 1 + BLOCK_ATTN_TENSORS + 1);
    const float *norm = l->w[1 + BLOCK_ATTN_TENSORS];
    bool train = a->mode == FWD_TRAIN;
    double aux = 0.0;
    memset(s->sums, 0, sizeof(s->sums));
    memcpy(s->step[0].xin, x, nd * sizeof(float));
    for (int i = 0; i < n; i++) {
        s->step[0].rt.z[i] = 1;
        s->depth[i] = 0;
    }
    for (int r = 0; r < R; r++) {
        mor_step *st = &s->step[r];
        mod_router *rt = &st->rt;
        float *out = r + 1 < R ? s->step[r + 1].xin : y;
        /* the step's scores on its eligible rows only */
        long eligible = 0;
        const float *wr = l->w[0] + (size_t)r * d;
        for (int i = 0; i < n; i++) {
            rt->r[i] = 0.0f;
            if (!rt->z[i])
                continue;
            rt->r[i] = score(st->xin + (size_t)i * d, wr, d);
            eligible++;
        }
        flops_add(2.0 * (double)eligible * d);
        select_step(st, p, r, a);
        int rc = routed_rows_ensure(&st->rows, dm, dm->d_ff, rt->n_sel);
        if (rc)
            return rc;
        mod_router_gather(rt, st->rows.xs, st->xin, d);
        row_set rs = { .n = rt->n_sel, .nseq = a->nseq, .seq_start = rt->seq_start,
                       .pos = rt->pos };
        if (rt->n_sel) {
            attn_forward(&st->rows.attn, st->rows.h, st->rows.xs, &rs, &aw, a);
            mlp_forward(&a->mm, &st->rows.mlp, st->rows.ys, st->rows.h, rt->n_sel, norm, &fw, d,
                        dm->d_ff);
        }
        mod_router_scatter(rt, out, st->xin, st->rows.ys, st->rows.xs, n, d);
        if (a->flops_executed)
            *a->flops_executed += 2.0 * (double)eligible * d +
                                  mod_block_flops(dm, rt->n_sel, rt->sum_sq);
        for (int i = 0; i < n; i++) {
            s->depth[i] += rt->c[i];
            if (train && rt->z[i])
                aux += bce(rt->r[i], rt->c[i]);
        }
        s->sums[r] = rt->n_sel;
        if (r + 1 < R) /* A_r = T_r */
            memcpy(s->step[r + 1].rt.z, rt->c, (size_t)n);
    }
    s->sums[R] = n;
    s->sums[R + 1] = a->nseq;
    if (train && a->aux_loss)
        *a->aux_loss += p->aux_weight * aux / S * (double)a->seq_scale;
    return 0;
}

static int mor_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    mor_state *s = l->state;
    const mor_params *p = mor_params_of(&l->spec);
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len, R = s->R;
    size_t nd = (size_t)n * d;
    attn_weights aw = attn_weights_at(l->w + 1), daw = attn_weights_at(l->dw + 1);
    ffn_weights fw = ffn_weights_at(l->w + 1 + BLOCK_ATTN_TENSORS + 1);
    ffn_weights dfw = ffn_weights_at(l->dw + 1 + BLOCK_ATTN_TENSORS + 1);
    const float *norm = l->w[1 + BLOCK_ATTN_TENSORS];
    float *dnorm = l->dw[1 + BLOCK_ATTN_TENSORS];
    float bscale = (float)(a->seq_scale / a->seq_len);
    const float *dout = dy;
    for (int r = R - 1; r >= 0; r--) {
        mor_step *st = &s->step[r];
        mod_router *rt = &st->rt;
        int ns = rt->n_sel;
        /* the stream's gradient into step r's input: the layer's dx at the
         * first step, else one of two buffers */
        float *din = r == 0 ? dx : s->dx + (size_t)(r & 1) * nd;
        if (r > 0)
            memset(din, 0, nd * sizeof(float));
        routed_ws v;
        buf_plan wp = buf_carving(a->ws);
        routed_ws_layout(&wp, &v, dm, dm->d_ff, ns, mor_k(p, 1, a->seq_len));
        mod_router_scatter_backward(rt, v.dys, v.dgate, din, dout, st->rows.ys, st->rows.xs, n, d);
        if (ns) {
            row_set rs = { .n = ns, .nseq = rt->nseq, .seq_start = rt->seq_start,
                           .pos = rt->pos };
            memset(v.dh, 0, (size_t)ns * d * sizeof(float));
            mlp_backward(&a->mm, v.dh, dnorm, &dfw, v.dys, st->rows.h, &st->rows.mlp, ns, norm,
                         &fw, d, dm->d_ff, v.sub);
            memset(v.dxs, 0, (size_t)ns * d * sizeof(float));
            attn_backward(v.dxs, &daw, v.dh, st->rows.xs, &st->rows.attn, &rs, &aw, a, v.sub);
            mod_router_gather_backward(rt, din, v.dxs, v.dys, d);
        }
        /* the scores: the gate's gradient on the kept rows, the causal
         * rule's BCE on the eligible ones; s = x w_r */
        float *ds = rt->dr;
        memset(ds, 0, (size_t)n * sizeof(float));
        for (int j = 0; j < ns; j++) {
            float g = rt->gate[j];
            ds[rt->sel[j]] += v.dgate[j] * g * (1.0f - g);
        }
        for (int i = 0; i < n; i++)
            if (rt->z[i])
                ds[i] += (float)p->aux_weight * bscale * (sigm(rt->r[i]) - (float)rt->c[i]);
        matmul(l->dw[0] + (size_t)r * d, 1, st->xin, d, true, ds, 1, false, d, 1, n, 1.0f);
        matmul(din, d, ds, 1, false, l->w[0] + (size_t)r * d, d, false, n, d, 1, 1.0f);
        dout = din;
    }
    return 0;
}

static int mor_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const mor_state *s = l->state;
    /* the first step's decisions and scores (what the depth tools read),
     * and how many steps each token took */
    route_decision d = { .nseq = a->nseq, .seq_len = a->seq_len, .selected = s->step[0].rt.c,
                         .scores = s->step[0].rt.r, .depth = s->depth };
    return route_decision_record(&d, sink);
}

static int mor_stat_count(const layer *l, int *n_sums)
{
    const mor_state *s = l->state;
    *n_sums = s->R + 2;
    return s->R + 1;
}

static void mor_stat_name(const layer *l, int col, char *buf, int len)
{
    const mor_state *s = l->state;
    if (col < s->R)
        snprintf(buf, (size_t)len, "step_%d_share", col + 1);
    else
        snprintf(buf, (size_t)len, "mean_depth");
}

static void mor_stat_sums(const layer *l, double *sums)
{
    const mor_state *s = l->state;
    memcpy(sums, s->sums, (size_t)(s->R + 2) * sizeof(double));
}

static void mor_stat_columns(const layer *l, const double *m, double *cols)
{
    const mor_state *s = l->state;
    double tokens = m[s->R], depth = 0.0;
    for (int r = 0; r < s->R; r++) {
        cols[r] = tokens > 0 ? m[r] / tokens : 0.0;
        depth += cols[r];
    }
    cols[s->R] = depth;
}

static int mor_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    mor_state *s = l->state;
    if (!s->dec) {
        s->dec = malloc(3 * (size_t)dims->d_model * sizeof(float));
        if (!s->dec || build_mlp_cache(&s->mlp1, dims, 1, dims->d_ff))
            return -ENOMEM;
    }
    for (int r = 0; r < s->R; r++) {
        int rc = kv_cache_begin(&s->kv[r], dims, max_len);
        if (rc)
            return rc;
    }
    return 0;
}

static int mor_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    mor_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model, taken = 0;
    attn_weights aw = attn_weights_at(l->w + 1);
    ffn_weights fw = ffn_weights_at(l->w + 1 + BLOCK_ATTN_TENSORS + 1);
    float *h = s->dec, *ys = h + d;
    memcpy(y, x, (size_t)d * sizeof(float));
    for (int r = 0; r < s->R; r++) {
        float sc = score(y, l->w[0] + (size_t)r * d, d);
        if (!(sc > 0.0f))
            break; /* inactive from here on: no later step, no K/V there */
        int rc = attn_decode(&s->kv[r], h, y, pos, &aw, a);
        if (rc)
            return rc;
        mlp_forward(&a->mm, &s->mlp1, ys, h, 1, l->w[1 + BLOCK_ATTN_TENSORS], &fw, d,
                    dm->d_ff);
        float g = sigm(sc);
        for (int e = 0; e < d; e++)
            y[e] += g * (ys[e] - y[e]);
        taken++;
    }
    return taken; /* the recursions this token ran */
}

const kind_ops mor_ops = {
    .kind = &mor_kind,
    .build = mor_build,
    .free = mor_free,
    .forward = mor_forward,
    .backward = mor_backward,
    .decode_begin = mor_decode_begin,
    .decode = mor_decode,
    .record = mor_record,
    .stat_count = mor_stat_count,
    .stat_name = mor_stat_name,
    .stat_sums = mor_stat_sums,
    .stat_columns = mor_stat_columns,
    .routes = 1u << ROUTE_LEARNED,
    .decode_routes = 1u << ROUTE_LEARNED,
};
