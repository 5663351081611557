/* Token-choice Mixture-of-Depths (tcmod.h, docs/kinds/tcmod.md):
 *     r_i = x_i w_r;  T = { i : r_i > 0 };  X~ = x[T];
 *     x_i <- x_i + sigmoid(r_i) (Block(X~) - X~)_i   for i in T,
 * attention among T (causal by original position), and in training the
 * penalty weight * mean over sequences of (mean_i sigmoid(k r_i) - capacity)^2.
 * The selection is MoD's causal rule "none" (router.c), used here in every
 * mode: a token's decision never depends on another token. */
#include "mod/tcmod.h"
#include "mod/mod.h"
#include "mod/tcmod_state.h"

#include "core/model/block.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tcmod_free(layer *l)
{
    tcmod_state *s = l->state;
    if (!s)
        return;
    free_routed_rows(&s->rows);
    free_mod_router(&s->rt);
    free_block_decode(&s->kv, &s->mlp1, &s->dec);
    free(s->dr);
    free(s);
    l->state = NULL;
}

static int tcmod_build(layer *l, const model_dims *dims, int max_seq)
{
    tcmod_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    mod_router_params rp = tcmod_router_params(tcmod_params_of(&l->spec));
    int rc = build_mod_router(&s->rt, &rp, dims, max_seq);
    s->t_block = s->rt.cfg.n_tensors;
    s->dr = malloc((size_t)max_seq * dims->seq_len * sizeof(float));
    if (rc || !s->dr || routed_rows_ensure(&s->rows, dims, dims->d_ff, max_seq * dims->seq_len)) {
        tcmod_free(l);
        return -ENOMEM;
    }
    return 0;
}

static float sigm(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

static int tcmod_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    tcmod_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, S = a->seq_len, n = a->nseq * S;
    double t0 = mode_now();
    /* the per-token rule in every mode: the router's causal selection */
    fwd_args b = *a;
    b.mode = FWD_EVAL_CAUSAL;
    if (a->mode == FWD_TRAIN)
        b.route = NULL;
    int rc = mod_router_forward(rt, l->w, l->index, &b, x);
    if (rc || (rc = routed_rows_ensure(&s->rows, dm, dm->d_ff, rt->n_sel)))
        return rc;
    mod_router_gather(rt, s->rows.xs, x, d);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    row_set rs = { .n = rt->n_sel, .nseq = a->nseq, .seq_start = rt->seq_start, .pos = rt->pos };
    attn_weights aw = attn_weights_at(l->w + s->t_block);
    ffn_weights fw = ffn_weights_at(l->w + s->t_block + BLOCK_ATTN_TENSORS + 1);
    attn_forward(&s->rows.attn, s->rows.h, s->rows.xs, &rs, &aw, a);
    t0 = mode_now();
    mlp_forward(&a->mm, &s->rows.mlp, s->rows.ys, s->rows.h, rt->n_sel,
                l->w[s->t_block + BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    mod_router_scatter(rt, y, x, s->rows.ys, s->rows.xs, n, d);
    if (a->flops_executed)
        *a->flops_executed += mod_block_flops(dm, rt->n_sel, rt->sum_sq);
    if (a->mode != FWD_TRAIN)
        return 0;
    /* the penalty and its gradient on the scores; the statistics */
    const tcmod_params *p = tcmod_params_of(&l->spec);
    double pen = 0.0, sig = 0.0;
    float k = (float)p->sharpness;
    memset(s->sums, 0, sizeof(s->sums));
    for (int q = 0; q < a->nseq; q++) {
        double m = 0.0;
        for (int i = 0; i < S; i++)
            m += (double)sigm(k * rt->r[(size_t)q * S + i]);
        m /= S;
        double dev = m - p->capacity;
        pen += dev * dev;
        sig += m * S;
        float g = (float)(p->penalty * 2.0 * dev / S * (double)a->seq_scale) * k;
        for (int i = 0; i < S; i++) {
            float sv = sigm(k * rt->r[(size_t)q * S + i]);
            s->dr[(size_t)q * S + i] = g * sv * (1.0f - sv);
        }
    }
    s->sums[0] = rt->n_sel;
    s->sums[1] = n;
    s->sums[2] = pen;
    s->sums[3] = sig;
    s->sums[4] = a->nseq;
    if (a->aux_loss)
        *a->aux_loss += p->penalty * pen * (double)a->seq_scale;
    return 0;
}

static int tcmod_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    tcmod_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len, ns = rt->n_sel;
    size_t nd = (size_t)ns * d;
    routed_ws v;
    buf_plan wp = buf_carving(a->ws);
    routed_ws_layout(&wp, &v, dm, dm->d_ff, ns, a->seq_len);
    mod_router_scatter_backward(rt, v.dys, v.dgate, dx, dy, s->rows.ys, s->rows.xs, n, d);
    row_set rs = { .n = ns, .nseq = rt->nseq, .seq_start = rt->seq_start, .pos = rt->pos };
    attn_weights aw = attn_weights_at(l->w + s->t_block);
    attn_weights daw = attn_weights_at(l->dw + s->t_block);
    ffn_weights fw = ffn_weights_at(l->w + s->t_block + BLOCK_ATTN_TENSORS + 1);
    ffn_weights dfw = ffn_weights_at(l->dw + s->t_block + BLOCK_ATTN_TENSORS + 1);
    memset(v.dh, 0, nd * sizeof(float));
    mlp_backward(&a->mm, v.dh, l->dw[s->t_block + BLOCK_ATTN_TENSORS], &dfw, v.dys, s->rows.h,
                 &s->rows.mlp, ns, l->w[s->t_block + BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff, v.sub);
    memset(v.dxs, 0, nd * sizeof(float));
    attn_backward(v.dxs, &daw, v.dh, s->rows.xs, &s->rows.attn, &rs, &aw, a, v.sub);
    mod_router_gather_backward(rt, dx, v.dxs, v.dys, d);
    mod_router_backward_extra(rt, l->w, l->dw, a, dx, x, v.dgate, s->dr);
    return 0;
}

static int tcmod_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const tcmod_state *s = l->state;
    /* the tokens that took the block (the per-token rule), the same
     * decisions under the causal rule's name (they are causal), the scores */
    route_decision d = { .nseq = a->nseq, .seq_len = a->seq_len, .selected = s->rt.c,
                         .causal = s->rt.c, .scores = s->rt.r };
    return route_decision_record(&d, sink);
}

static const char *const stat_names[] = { "take_share", "penalty", "mean_sigmoid" };

static int tcmod_stat_count(const layer *l, int *n_sums)
{
    *n_sums = 5;
    return 3;
}

static void tcmod_stat_name(const layer *l, int col, char *buf, int len)
{
    snprintf(buf, (size_t)len, "%s", stat_names[col]);
}

static void tcmod_stat_sums(const layer *l, double *sums)
{
    const tcmod_state *s = l->state;
    memcpy(sums, s->sums, sizeof(s->sums));
}

static void tcmod_stat_columns(const layer *l, const double *m, double *cols)
{
    /* m: taken, tokens, penalty (summed over sequences), sum sigmoid, sequences */
    cols[0] = m[1] > 0 ? m[0] / m[1] : 0.0;
    cols[1] = m[4] > 0 ? m[2] / m[4] : 0.0;
    cols[2] = m[1] > 0 ? m[3] / m[1] : 0.0;
}

static int tcmod_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    tcmod_state *s = l->state;
    return block_decode_begin(&s->kv, &s->mlp1, &s->dec, 2 * dims->d_model, dims, max_len);
}

static int tcmod_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    tcmod_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model;
    float g, *h = s->dec, *ys = h + d;
    int take = mod_router_decide(&s->rt, l->w, l->index, a, x, pos, &g);
    if (take <= 0) {
        memcpy(y, x, (size_t)d * sizeof(float));
        return take;
    }
    attn_weights aw = attn_weights_at(l->w + s->t_block);
    ffn_weights fw = ffn_weights_at(l->w + s->t_block + BLOCK_ATTN_TENSORS + 1);
    int rc = attn_decode(&s->kv, h, x, pos, &aw, a);
    if (rc)
        return rc;
    mlp_forward(&a->mm, &s->mlp1, ys, h, 1, l->w[s->t_block + BLOCK_ATTN_TENSORS], &fw, d,
                dm->d_ff);
    for (int e = 0; e < d; e++)
        y[e] = x[e] + g * (ys[e] - x[e]);
    return 1;
}

static int tcmod_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    tcmod_state *s = l->state;
    return mod_router_decode_kv(&s->rt, &s->kv, l->w, l->w + s->t_block, l->index, a, x, pos);
}

const kind_ops tcmod_ops = {
    .kind = &tcmod_kind,
    .build = tcmod_build,
    .free = tcmod_free,
    .forward = tcmod_forward,
    .backward = tcmod_backward,
    .decode_begin = tcmod_decode_begin,
    .decode = tcmod_decode,
    .decode_kv = tcmod_decode_kv,
    .record = tcmod_record,
    .stat_count = tcmod_stat_count,
    .stat_name = tcmod_stat_name,
    .stat_sums = tcmod_stat_sums,
    .stat_columns = tcmod_stat_columns,
    /* random (as many tokens as passed), shuffle, replay: the depth
     * decisions of the mode; bottom would need the scores' order */
    .routes = 1u << ROUTE_LEARNED | 1u << ROUTE_RANDOM | 1u << ROUTE_SHUFFLE | 1u << ROUTE_REPLAY,
    .decode_routes = MOD_DECODE_ROUTES,
};
