/* Staged MoDE (Raposo et al. 2024, Sec. 4.3; MODEL.md `staged`): MoD routing
 * (mod/router.c) of a whole block (mod/routed.c), whose block is attention
 * among the selected rows followed by the MoE MLP on those rows only (the
 * inner op below):
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
    free_routed_block(&s->blk);
    free_mod_router(&s->rt);
    free_experts(&s->ex);
    free(s->block);
    free(s);
    l->state = NULL;
}

/* The experts' capacity over the k rows MoD selects in a sequence (in
 * training, the capacity schedule's k at the step), in forward mode
 * `mode` (decoding: FWD_EVAL_CAUSAL). */
static int nominal_capacity(const staged_state *s, const fwd_args *a, int mode)
{
    int k = mod_router_k(&s->rt.cfg, a->dims->seq_len, mode == FWD_TRAIN, a->step);
    return experts_capacity_in(&s->ec, k, mode);
}

/* The routed block's second half (routed.h): h's RMSNorm into the experts,
 * Y = h + sum_e p_e SwiGLU_e(m).  w: the norm, then the gate and experts. */
static int inner_forward(routed_block *b, const fwd_args *a, float *const *w)
{
    staged_state *s = b->self;
    routed_rows *rr = &b->rows;
    int n = b->set.n_sel, d = a->dims->d_model;
    double t0 = mode_now();
    rmsnorm_forward_pool(a->mm.pool, rr->mlp.m, rr->mlp.rstd, rr->h, w[0], n, d);
    memcpy(rr->ys, rr->h, (size_t)n * d * sizeof(float));
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    row_set rs = routed_row_set(&b->set);
    return experts_forward(s->ex, a, rr->ys, rr->mlp.m, &rs, w + 1, nominal_capacity(s, a, a->mode));
}

static int inner_backward(routed_block *b, const fwd_args *a, float *const *w, float *const *dw,
                          const routed_ws *v)
{
    staged_state *s = b->self;
    routed_rows *rr = &b->rows;
    int n = b->set.n_sel, d = a->dims->d_model;
    size_t nd = (size_t)n * d;
    row_set rs = routed_row_set(&b->set);
    memcpy(v->dh, v->dys, nd * sizeof(float)); /* Y = h + experts: the residual path */
    memset(v->dmm, 0, nd * sizeof(float));
    int rc = experts_backward(s->ex, a, v->dmm, v->dys, rr->mlp.m, &rs, w + 1, dw + 1);
    if (rc)
        return rc;
    double t0 = mode_now();
    rmsnorm_backward_pool(a->mm.pool, v->dh, dw[0], v->dmm, rr->h, w[0], rr->mlp.rstd, n, d);
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    return 0;
}

static int inner_decode(routed_block *b, const fwd_args *a, float *const *w, float *ys,
                        const float *h, int32_t pos)
{
    staged_state *s = b->self;
    int d = a->dims->d_model;
    float rstd, *m = b->dec + 2 * (size_t)d; /* routed_decode's third row */
    rmsnorm_forward(m, &rstd, h, w[0], 1, d);
    memcpy(ys, h, (size_t)d * sizeof(float));
    int rc = experts_decode(s->ex, a, ys, m, w + 1, nominal_capacity(s, a, FWD_EVAL_CAUSAL), pos);
    return rc < 0 ? rc : 0;
}

static int inner_decode_rows(routed_block *b, const fwd_args *a, float *const *w, float *ys,
                             const float *h, const int *lane, int n, int32_t pos)
{
    staged_state *s = b->self;
    int d = a->dims->d_model;
    float *m = b->lanes.u; /* free after attention */
    rmsnorm_forward(m, b->lanes.rstd, h, w[0], n, d);
    memcpy(ys, h, (size_t)n * d * sizeof(float));
    return experts_decode_rows(s->ex, a, ys, m, w + 1, nominal_capacity(s, a, FWD_EVAL_CAUSAL),
                               lane, n, pos);
}

static int inner_decode_lanes(routed_block *b, const model_dims *dims, int lanes)
{
    (void)dims;
    staged_state *s = b->self;
    return experts_decode_lanes(s->ex, lanes);
}

/* The experts count their own FLOPs: no .flops. */
static const routed_inner staged_inner = {
    .mlp = false,
    .forward = inner_forward,
    .backward = inner_backward,
    .decode = inner_decode,
    .decode_rows = inner_decode_rows,
    .decode_lanes = inner_decode_lanes,
};

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
    buf_plan p = buf_counting(BUF_ALIGN);
    staged_layout(&p, s, dims, max_seq);
    if (rc || buf_alloc(&p, &s->block) || build_experts(&s->ex, &s->ec, dims, l->index) ||
        build_routed_block(&s->blk, &staged_inner, s, dims, max_seq, s->rt.cfg.max_k)) {
        staged_free(l);
        return -ENOMEM;
    }
    staged_layout(&p, s, dims, max_seq);
    return 0;
}

static int staged_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    staged_state *s = l->state;
    double t0 = mode_now();
    int rc = mod_router_forward(&s->rt, &s->blk.set, l->w, l->index, a, x, ROUTER_TAKE_MODE);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return rc ? rc : routed_forward(&s->blk, l->w + s->t_attn, a, y, x);
}

static int staged_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    staged_state *s = l->state;
    const float *dgate;
    int rc = routed_backward(&s->blk, l->w + s->t_attn, l->dw + s->t_attn, a, dx, dy, &dgate);
    if (!rc)
        mod_router_backward(&s->rt, &s->blk.set, l->w, l->dw, a, dx, x, dgate);
    return rc;
}

static int staged_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const staged_state *s = l->state;
    const routed_set *set = &s->blk.set;
    int K = s->ec.top_k;
    long n = (long)a->nseq * a->seq_len;
    /* experts of the rows that took the block; -2 for rows that skipped it */
    for (long i = 0; i < n * K; i++) {
        s->rec_experts[i] = -2;
        s->rec_weights[i] = 0.0f;
    }
    const int32_t *ch = experts_choices(s->ex);
    const float *wt = experts_weights(s->ex);
    for (int j = 0; j < set->n_sel; j++) {
        memcpy(s->rec_experts + (size_t)set->sel[j] * K, ch + (size_t)j * K, K * sizeof(int32_t));
        memcpy(s->rec_weights + (size_t)set->sel[j] * K, wt + (size_t)j * K, K * sizeof(float));
    }
    route_decision d = { .n_slots = K, .experts = s->rec_experts, .weights = s->rec_weights };
    return mod_router_record(&s->rt, a, &d, sink);
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
    return routed_decode_begin(&s->blk, dims, max_len);
}

static int staged_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    staged_state *s = l->state;
    return mod_router_decode(&s->rt, &s->blk, l->w, s->t_attn, l->index, a, y, x, pos);
}

static void staged_step_end(layer *l, bool updated)
{
    staged_state *s = l->state;
    experts_step_end(s->ex, l->w + s->t_attn + BLOCK_ATTN_TENSORS + 1, updated);
}

static int staged_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    staged_state *s = l->state;
    return routed_decode_lanes(&s->blk, dims, max_len, lanes);
}

static int staged_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n,
                          int32_t pos, unsigned char *taken)
{
    staged_state *s = l->state;
    return mod_router_decode_rows(&s->rt, &s->blk, l->w, s->t_attn, l->index, a, y, x, n, pos,
                                  taken);
}

const kind_ops staged_ops = {
    .kind = &staged_kind,
    .build = staged_build,
    .free = staged_free,
    .forward = staged_forward,
    .backward = staged_backward,
    .decode_begin = staged_decode_begin,
    .decode = staged_decode,
    .decode_lanes = staged_decode_lanes,
    .decode_rows = staged_decode_rows,
    .record = staged_record,
    .stat_count = staged_stat_count,
    .stat_name = staged_stat_name,
    .stat_sums = staged_stat_sums,
    .stat_columns = staged_stat_columns,
    .routes = MOD_ROUTES | EXPERTS_ROUTES,
    .decode_routes = MOD_DECODE_ROUTES | EXPERTS_DECODE_ROUTES,
    .step_end = staged_step_end,
};
