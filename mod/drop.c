/* Stochastic depth / LayerDrop (drop.h, docs/kinds/drop.md): a dense block
 * whose rows are MoD's gathered rows (router.h's container, no router): in
 * training the kept sequences' rows (unit = sequence: the dropped ones cost
 * nothing) or every row with a kept/dropped scale (unit = token); in
 * evaluation every row, or none when the layer is pruned.
 *     x_i <- x_i + s_i (Block(X~) - X~)_i,
 * s_i = 1 / (1 - p_l) or 1 kept (rescale true or false), 0 dropped, and in
 * evaluation 1 or 1 - p_l. */
#include "mod/drop.h"
#include "mod/drop_state.h"
#include "mod/mod.h"

#include "core/model/block.h"
#include "core/rng/pcg32.h"
#include "core/rng/streams.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void drop_free(layer *l)
{
    drop_state *s = l->state;
    if (!s)
        return;
    free_routed_rows(&s->rows);
    free_mod_router(&s->rt);
    free_block_decode(&s->kv, &s->mlp1, &s->dec);
    free(s);
    l->state = NULL;
}

static int drop_build(layer *l, const model_dims *dims, int max_seq)
{
    drop_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    mod_router_params rp = drop_router_params();
    if (build_mod_router(&s->rt, &rp, dims, max_seq) ||
        routed_rows_ensure(&s->rows, dims, dims->d_ff, max_seq * dims->seq_len)) {
        drop_free(l);
        return -ENOMEM;
    }
    return 0;
}

/* Whether a draw keeps unit u of the step (training): u >= p. */
static bool kept(uint64_t seed, int layer_index, long step, uint64_t unit, double p)
{
    pcg32 g;
    pcg32_keyed(&g, seed, PCG_KEY_DROP + (uint64_t)layer_index, (uint64_t)step, unit);
    return (double)pcg32_uniform(&g) >= p;
}

/* The rows that run the block and their scales. */
static void select_rows(drop_state *s, const layer *l, const fwd_args *a)
{
    const drop_params *p = drop_params_of(&l->spec);
    mod_router *rt = &s->rt;
    int S = a->seq_len;
    double pl = drop_probability(p, l->index, a->dims->n_layers);
    bool train = a->mode == FWD_TRAIN;
    uint64_t seed = a->ctx ? a->ctx->seed : 0;
    float scale = train ? (p->rescale ? (float)(1.0 / (1.0 - pl)) : 1.0f)
                        : (p->rescale ? 1.0f : (float)(1.0 - pl));
    bool pruned = !train && drop_pruned(p, l->index);
    rt->n_sel = 0;
    rt->nseq = a->nseq;
    rt->sum_sq = 0;
    s->sums[0] = 0.0;
    s->sums[1] = (double)a->nseq * S;
    for (int b = 0; b < a->nseq; b++) {
        rt->seq_start[b] = rt->n_sel;
        uint64_t seq = (uint64_t)(a->seq0 + b);
        bool run = !pruned && (!train || p->unit == DROP_TOKEN || kept(seed, l->index, a->step,
                                                                        seq, pl));
        for (int i = 0; run && i < S; i++) {
            bool on = !train || p->unit == DROP_SEQUENCE ||
                      kept(seed, l->index, a->step, seq * (uint64_t)S + (uint64_t)i, pl);
            rt->sel[rt->n_sel] = b * S + i;
            rt->pos[rt->n_sel] = i;
            rt->gate[rt->n_sel] = on ? scale : 0.0f;
            rt->n_sel++;
            s->sums[0] += on;
        }
        long ns = rt->n_sel - rt->seq_start[b];
        rt->sum_sq += ns * ns;
    }
    rt->seq_start[a->nseq] = rt->n_sel;
}

static int drop_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    drop_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    select_rows(s, l, a);
    int rc = routed_rows_ensure(&s->rows, dm, dm->d_ff, rt->n_sel);
    if (rc)
        return rc;
    mod_router_gather(rt, s->rows.xs, x, d);
    row_set rs = { .n = rt->n_sel, .nseq = a->nseq, .seq_start = rt->seq_start, .pos = rt->pos };
    attn_weights aw = attn_weights_at(l->w);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    if (rt->n_sel) {
        attn_forward(&s->rows.attn, s->rows.h, s->rows.xs, &rs, &aw, a);
        mlp_forward(&a->mm, &s->rows.mlp, s->rows.ys, s->rows.h, rt->n_sel,
                    l->w[BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff);
    }
    mod_router_scatter(rt, y, x, s->rows.ys, s->rows.xs, n, d);
    if (a->flops_executed)
        *a->flops_executed += mod_block_flops(dm, rt->n_sel, rt->sum_sq);
    return 0;
}

static int drop_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    drop_state *s = l->state;
    mod_router *rt = &s->rt;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len, ns = rt->n_sel;
    size_t nd = (size_t)ns * d;
    routed_ws v;
    buf_plan wp = buf_carving(a->ws);
    routed_ws_layout(&wp, &v, dm, dm->d_ff, ns, a->seq_len);
    mod_router_scatter_backward(rt, v.dys, v.dgate, dx, dy, s->rows.ys, s->rows.xs, n, d);
    if (!ns)
        return 0;
    row_set rs = { .n = ns, .nseq = rt->nseq, .seq_start = rt->seq_start, .pos = rt->pos };
    attn_weights aw = attn_weights_at(l->w), daw = attn_weights_at(l->dw);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    ffn_weights dfw = ffn_weights_at(l->dw + BLOCK_ATTN_TENSORS + 1);
    memset(v.dh, 0, nd * sizeof(float));
    mlp_backward(&a->mm, v.dh, l->dw[BLOCK_ATTN_TENSORS], &dfw, v.dys, s->rows.h, &s->rows.mlp,
                 ns, l->w[BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff, v.sub);
    memset(v.dxs, 0, nd * sizeof(float));
    attn_backward(v.dxs, &daw, v.dh, s->rows.xs, &s->rows.attn, &rs, &aw, a, v.sub);
    mod_router_gather_backward(rt, dx, v.dxs, v.dys, d);
    return 0;
}

static int drop_stat_count(const layer *l, int *n_sums)
{
    *n_sums = 2;
    return 1;
}

static void drop_stat_name(const layer *l, int col, char *buf, int len)
{
    snprintf(buf, (size_t)len, "kept_share");
}

static void drop_stat_sums(const layer *l, double *sums)
{
    const drop_state *s = l->state;
    memcpy(sums, s->sums, sizeof(s->sums));
}

static void drop_stat_columns(const layer *l, const double *m, double *cols)
{
    cols[0] = m[1] > 0 ? m[0] / m[1] : 0.0;
}

static int drop_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    drop_state *s = l->state;
    return block_decode_begin(&s->kv, &s->mlp1, &s->dec, 2 * dims->d_model, dims, max_len);
}

static int drop_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    drop_state *s = l->state;
    const drop_params *p = drop_params_of(&l->spec);
    const model_dims *dm = a->dims;
    int d = dm->d_model;
    if (drop_pruned(p, l->index)) {
        memcpy(y, x, (size_t)d * sizeof(float));
        return 0;
    }
    float g = p->rescale ? 1.0f
                         : (float)(1.0 - drop_probability(p, l->index, dm->n_layers));
    float *h = s->dec, *ys = h + d;
    attn_weights aw = attn_weights_at(l->w);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    int rc = attn_decode(&s->kv, h, x, pos, &aw, a);
    if (rc)
        return rc;
    mlp_forward(&a->mm, &s->mlp1, ys, h, 1, l->w[BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff);
    for (int e = 0; e < d; e++)
        y[e] = x[e] + g * (ys[e] - x[e]);
    return 1;
}

static int drop_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    drop_state *s = l->state;
    if (drop_pruned(drop_params_of(&l->spec), l->index))
        return 0;
    attn_weights aw = attn_weights_at(l->w);
    return attn_decode_kv(&s->kv, x, pos, &aw, a);
}

const kind_ops drop_ops = {
    .kind = &drop_kind,
    .build = drop_build,
    .free = drop_free,
    .forward = drop_forward,
    .backward = drop_backward,
    .decode_begin = drop_decode_begin,
    .decode = drop_decode,
    .decode_kv = drop_decode_kv,
    .stat_count = drop_stat_count,
    .stat_name = drop_stat_name,
    .stat_sums = drop_stat_sums,
    .stat_columns = drop_stat_columns,
};
