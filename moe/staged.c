/* Staged MoDE (Raposo et al. 2024, Sec. 4.3; MODEL.md `staged`): MoD routing
 * of a whole block, whose block is attention among the selected rows
 * followed by the MoE MLP on those rows only:
 *     X~ = x[T];  h = X~ + Attn(X~);  Y = h + sum_e p_e SwiGLU_e(RMSNorm(h));
 *     x_i <- x_i + g(r_i) (Y - X~)_i   for i in T.
 * Expert capacity counts the nominal k = max(1, floor(capacity S)) rows, in
 * top-k and causal mode alike, so causal mode never depends on the future. */
#include "moe/staged.h"
#include "moe/staged_state.h"

#include "core/kernels/ops.h"
#include "core/kernels/parallel.h"
#include "core/model/block.h"
#include "core/util/ctx.h"
#include "mod/router.h"
#include "moe/moe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void staged_free(layer *l)
{
    staged_state *s = l->state;
    if (!s)
        return;
    free_routed_rows(&s->rows);
    free_mod_router(&s->rt);
    free_experts(&s->ex);
    free(s->block);
    free_kv_cache(&s->kv);
    free(s);
    l->state = NULL;
}

static int staged_build(layer *l, const model_dims *dims, int max_seq)
{
    staged_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    const staged_params *sp = staged_params_of(&l->spec);
    s->ec = experts_cfg_of(&sp->experts, dims, false);
    int rc = build_mod_router(&s->rt, &sp->router, dims, max_seq);
    s->t_attn = s->rt.cfg.n_tensors;
    s->t_norm = s->t_attn + BLOCK_ATTN_TENSORS;
    s->t_gate = s->t_norm + 1;
    int k = s->rt.cfg.k;
    buf_plan p = buf_counting(BUF_ALIGN);
    staged_layout(&p, s, dims, max_seq);
    if (rc || buf_alloc(&p, &s->block) || build_experts(&s->ex, &s->ec, dims, l->index) ||
        routed_rows_ensure(&s->rows, dims, 0, max_seq * k)) {
        staged_free(l);
        return -ENOMEM;
    }
    staged_layout(&p, s, dims, max_seq);
    return 0;
}

/* The experts' capacity over the k rows MoD selects in a sequence, in
 * forward mode `mode` (decoding: FWD_EVAL_CAUSAL). */
static int nominal_capacity(const staged_state *s, int mode)
{
    return experts_capacity_in(&s->ec, s->rt.cfg.k, mode);
}

static int staged_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    staged_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    double t0 = mode_now();
    int rc = mod_router_forward(rt, l->w, l->index, a, x);
    if (rc)
        return rc;
    rc = routed_rows_ensure(&s->rows, dm, 0, rt->n_sel);
    if (rc)
        return rc;
    mod_router_gather(rt, s->rows.xs, x, d);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    row_set rs = { .n = rt->n_sel, .nseq = a->nseq, .seq_start = rt->seq_start, .pos = rt->pos };
    attn_weights aw = attn_weights_at(l->w + s->t_attn);
    attn_forward(&s->rows.attn, s->rows.h, s->rows.xs, &rs, &aw, a);
    t0 = mode_now();
    rmsnorm_forward_pool(a->mm.pool, s->rows.mlp.m, s->rows.mlp.rstd, s->rows.h, l->w[s->t_norm],
                         rt->n_sel, d);
    memcpy(s->rows.ys, s->rows.h, (size_t)rt->n_sel * d * sizeof(float));
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    rc = experts_forward(s->ex, a, s->rows.ys, s->rows.mlp.m, &rs, l->w + s->t_gate,
                         nominal_capacity(s, a->mode));
    if (rc)
        return rc;
    mod_router_scatter(rt, y, x, s->rows.ys, s->rows.xs, n, d);
    if (a->flops_executed)
        *a->flops_executed += attn_flops_rows(dm, rt->n_sel, rt->sum_sq);
    return 0;
}

static int staged_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    staged_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len, ns = rt->n_sel;
    size_t nd = (size_t)ns * d;
    routed_ws v;
    buf_plan wp = buf_carving(a->ws);
    routed_ws_layout(&wp, &v, dm, 0, ns, rt->cfg.k);
    float *dys = v.dys, *dh = v.dh, *dmm = v.dmm, *dxs = v.dxs, *dgate = v.dgate, *sub = v.sub;
    mod_router_scatter_backward(rt, dys, dgate, dx, dy, s->rows.ys, s->rows.xs, n, d);
    row_set rs = { .n = ns, .nseq = rt->nseq, .seq_start = rt->seq_start, .pos = rt->pos };
    memcpy(dh, dys, nd * sizeof(float)); /* Y = h + experts: the residual path */
    memset(dmm, 0, nd * sizeof(float));
    int rc = experts_backward(s->ex, a, dmm, dys, s->rows.mlp.m, &rs, l->w + s->t_gate,
                              l->dw + s->t_gate);
    if (rc)
        return rc;
    double t0 = mode_now();
    rmsnorm_backward_pool(a->mm.pool, dh, l->dw[s->t_norm], dmm, s->rows.h, l->w[s->t_norm],
                          s->rows.mlp.rstd, ns, d);
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    attn_weights aw = attn_weights_at(l->w + s->t_attn), daw = attn_weights_at(l->dw + s->t_attn);
    memset(dxs, 0, nd * sizeof(float));
    attn_backward(dxs, &daw, dh, s->rows.xs, &s->rows.attn, &rs, &aw, a, sub);
    mod_router_gather_backward(rt, dx, dxs, dys, d);
    mod_router_backward(rt, l->w, l->dw, a, dx, x, dgate);
    return 0;
}

static int staged_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const staged_state *s = l->state;
    const mod_router *rt = &s->rt;
    int K = s->ec.top_k;
    long n = (long)a->nseq * a->seq_len;
    /* experts of the rows that took the block; -2 for rows that skipped it */
    for (long i = 0; i < n * K; i++) {
        s->rec_experts[i] = -2;
        s->rec_weights[i] = 0.0f;
    }
    const int32_t *ch = experts_choices(s->ex);
    const float *wt = experts_weights(s->ex);
    for (int j = 0; j < rt->n_sel; j++) {
        memcpy(s->rec_experts + (size_t)rt->sel[j] * K, ch + (size_t)j * K, K * sizeof(int32_t));
        memcpy(s->rec_weights + (size_t)rt->sel[j] * K, wt + (size_t)j * K, K * sizeof(float));
    }
    route_decision d = { .top_k = K, .experts = s->rec_experts, .weights = s->rec_weights };
    return mod_router_record(rt, a, &d, sink);
}

static int staged_stat_count(const layer *l, int *n_sums)
{
    const staged_state *s = l->state;
    int rs, rcols = mod_router_stat_count(&rs);
    *n_sums = rs + experts_stat_sums_count(&s->ec);
    return rcols + experts_stat_cols_count(&s->ec);
}

static void staged_stat_name(const layer *l, int col, char *buf, int len)
{
    const staged_state *s = l->state;
    int rs, rcols = mod_router_stat_count(&rs);
    if (col < rcols)
        mod_router_stat_name(col, buf, len);
    else
        experts_stat_name(&s->ec, col - rcols, buf, len);
}

static void staged_stat_sums(const layer *l, double *sums)
{
    const staged_state *s = l->state;
    int rs;
    mod_router_stat_count(&rs);
    memcpy(sums, s->rt.sums, (size_t)rs * sizeof(double));
    experts_stat_sums(s->ex, sums + rs);
}

static void staged_stat_columns(const layer *l, const double *sums, double *cols)
{
    const staged_state *s = l->state;
    int rs, rcols = mod_router_stat_count(&rs);
    mod_router_stat_columns(sums, cols);
    experts_stat_columns(&s->ec, sums + rs, cols + rcols);
}

static int staged_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    staged_state *s = l->state;
    experts_decode_reset(s->ex);
    return kv_cache_begin(&s->kv, dims, max_len);
}

static int staged_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    staged_state *s = l->state;
    int d = a->dims->d_model;
    float g, rstd, *h = s->dec, *m = h + d, *ys = m + d;
    int take = mod_router_decide(&s->rt, l->w, l->index, a, x, pos, &g);
    if (take <= 0) {
        memcpy(y, x, (size_t)d * sizeof(float));
        return take;
    }
    attn_weights aw = attn_weights_at(l->w + s->t_attn);
    int rc = attn_decode(&s->kv, h, x, pos, &aw, a);
    if (rc)
        return rc;
    rmsnorm_forward(m, &rstd, h, l->w[s->t_norm], 1, d);
    memcpy(ys, h, (size_t)d * sizeof(float));
    if ((rc = experts_decode(s->ex, a, ys, m, l->w + s->t_gate,
                             nominal_capacity(s, FWD_EVAL_CAUSAL), pos)) < 0)
        return rc;
    for (int e = 0; e < d; e++)
        y[e] = x[e] + g * (ys[e] - x[e]);
    return 1;
}

static void staged_step_end(layer *l, bool updated)
{
    staged_state *s = l->state;
    experts_step_end(s->ex, l->w + s->t_gate, updated);
}

const kind_ops staged_ops = {
    .kind = &staged_kind,
    .build = staged_build,
    .free = staged_free,
    .forward = staged_forward,
    .backward = staged_backward,
    .decode_begin = staged_decode_begin,
    .decode = staged_decode,
    .record = staged_record,
    .stat_count = staged_stat_count,
    .stat_name = staged_stat_name,
    .stat_sums = staged_stat_sums,
    .stat_columns = staged_stat_columns,
    .routes = MOD_ROUTES | EXPERTS_ROUTES,
    .decode_routes = MOD_DECODE_ROUTES | EXPERTS_DECODE_ROUTES,
    .step_end = staged_step_end,
};
