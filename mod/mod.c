/* Mixture-of-Depths (Raposo et al. 2024, Sec. 3): the router (router.c)
 * picks k = floor(capacity S) tokens per sequence; the block runs on those k
 * rows only (attention among them, causal by original position, RoPE with
 * original positions), so its work really shrinks, and the rest are copied
 * through (Eq. 1):
 *     x_i <- x_i + g(r_i) (Block(X~) - X~)_i   for i in the selected set. */
#include "mod/mod.h"
#include "mod/mod_state.h"

#include "core/model/block.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mod_free(layer *l)
{
    mod_state *s = l->state;
    if (!s)
        return;
    free_routed_rows(&s->rows);
    free_mod_router(&s->rt);
    free_block_decode(&s->kv, &s->mlp1, &s->dec);
    free(s);
    l->state = NULL;
}

static int mod_build(layer *l, const model_dims *dims, int max_seq)
{
    mod_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    int rc = build_mod_router(&s->rt, &mod_params_of(&l->spec)->router, dims, max_seq);
    s->t_block = s->rt.cfg.n_tensors;
    int k = s->rt.cfg.k;
    if (rc || routed_rows_ensure(&s->rows, dims, dims->d_ff, max_seq * k)) {
        mod_free(l);
        return -ENOMEM;
    }
    return 0;
}

static int mod_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    mod_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    double t0 = mode_now();
    int rc = mod_router_forward(rt, l->w, l->index, a, x);
    if (rc)
        return rc;
    rc = routed_rows_ensure(&s->rows, dm, dm->d_ff, rt->n_sel);
    if (rc)
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

    t0 = mode_now();
    mod_router_scatter(rt, y, x, s->rows.ys, s->rows.xs, n, d);
    if (a->flops_executed)
        *a->flops_executed += mod_block_flops(dm, rt->n_sel, rt->sum_sq);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

static int mod_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    mod_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len, ns = rt->n_sel;
    size_t nd = (size_t)ns * d;
    routed_ws v;
    buf_plan wp = buf_carving(a->ws);
    routed_ws_layout(&wp, &v, dm, dm->d_ff, ns, rt->cfg.k);
    float *dys = v.dys, *dxs = v.dxs, *dh = v.dh, *dgate = v.dgate, *sub = v.sub;
    double t0 = mode_now();
    mod_router_scatter_backward(rt, dys, dgate, dx, dy, s->rows.ys, s->rows.xs, n, d);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);

    row_set rs = { .n = ns, .nseq = rt->nseq, .seq_start = rt->seq_start, .pos = rt->pos };
    attn_weights aw = attn_weights_at(l->w + s->t_block);
    attn_weights daw = attn_weights_at(l->dw + s->t_block);
    ffn_weights fw = ffn_weights_at(l->w + s->t_block + BLOCK_ATTN_TENSORS + 1);
    ffn_weights dfw = ffn_weights_at(l->dw + s->t_block + BLOCK_ATTN_TENSORS + 1);
    t0 = mode_now();
    memset(dh, 0, nd * sizeof(float));
    mlp_backward(&a->mm, dh, l->dw[s->t_block + BLOCK_ATTN_TENSORS], &dfw, dys, s->rows.h,
                 &s->rows.mlp, ns, l->w[s->t_block + BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff, sub);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    memset(dxs, 0, nd * sizeof(float));
    attn_backward(dxs, &daw, dh, s->rows.xs, &s->rows.attn, &rs, &aw, a, sub);

    t0 = mode_now();
    mod_router_gather_backward(rt, dx, dxs, dys, d);
    mod_router_backward(rt, l->w, l->dw, a, dx, x, dgate);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

static int mod_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const mod_state *s = l->state;
    route_decision d = { 0 };
    return mod_router_record(&s->rt, a, &d, sink);
}

static int mod_stat_count(const layer *l, int *n_sums)
{
    return mod_router_stat_count(n_sums);
}

static void mod_stat_name(const layer *l, int col, char *buf, int len)
{
    mod_router_stat_name(col, buf, len);
}

static void mod_stat_sums(const layer *l, double *sums)
{
    const mod_state *s = l->state;
    memcpy(sums, s->rt.sums, sizeof(s->rt.sums));
}

static void mod_stat_columns(const layer *l, const double *sums, double *cols)
{
    mod_router_stat_columns(sums, cols);
}

static int mod_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    mod_state *s = l->state;
    return block_decode_begin(&s->kv, &s->mlp1, &s->dec, 2 * dims->d_model, dims, max_len);
}

static int mod_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    mod_state *s = l->state;
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

/* A frozen token (it left at an exit point): its keys and values where the
 * router would take it. */
static int mod_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    mod_state *s = l->state;
    return mod_router_decode_kv(&s->rt, &s->kv, l->w, l->w + s->t_block, l->index, a, x, pos);
}

const kind_ops mod_ops = {
    .kind = &mod_kind,
    .build = mod_build,
    .free = mod_free,
    .forward = mod_forward,
    .backward = mod_backward,
    .decode_begin = mod_decode_begin,
    .decode = mod_decode,
    .decode_kv = mod_decode_kv,
    .record = mod_record,
    .stat_count = mod_stat_count,
    .stat_name = mod_stat_name,
    .stat_sums = mod_stat_sums,
    .routes = MOD_ROUTES,
    .decode_routes = MOD_DECODE_ROUTES,
    .stat_columns = mod_stat_columns,
};
