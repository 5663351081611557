/* The `moe` and `integrated` kinds' compute (moe.h), which ec's (ec.c)
 * shares. */
#include "moe/moe.h"
#include "moe/moe_state.h"

#include "core/kernels/ops.h"
#include "core/kernels/parallel.h"
#include "core/model/block.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void moe_free(layer *l)
{
    moe_state *s = l->state;
    if (!s)
        return;
    free(s->block);
    free_experts(&s->ex);
    free_kv_cache(&s->kv);
    free_decode_lanes(&s->lanes);
    free(s);
    l->state = NULL;
}

int moe_build_with(layer *l, const model_dims *dims, int max_seq, moe_cfg_fn cfg)
{
    moe_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    s->ec = cfg(&l->spec, dims);
    buf_plan p = buf_counting(BUF_ALIGN);
    moe_layout(&p, s, dims, max_seq);
    if (buf_alloc(&p, &s->block) || build_experts(&s->ex, &s->ec, dims, l->index)) {
        moe_free(l);
        return -ENOMEM;
    }
    moe_layout(&p, s, dims, max_seq);
    row_set_fill_whole(s->seq_start, s->pos, max_seq, dims->seq_len);
    return 0;
}

int moe_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    moe_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    row_set rs = { .n = n, .nseq = a->nseq, .seq_start = s->seq_start, .pos = s->pos };
    attn_weights aw = attn_weights_at(l->w);
    attn_forward(&s->attn, s->h, x, &rs, &aw, a);
    double t0 = mode_now();
    rmsnorm_forward_pool(a->mm.pool, s->m, s->rstd, s->h, l->w[T_MLP_NORM], n, d);
    memcpy(y, s->h, (size_t)n * d * sizeof(float));
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    s->nseq = a->nseq;
    if (a->flops_executed)
        *a->flops_executed += a->nseq * attn_flops_rows(dm, a->seq_len, (long)a->seq_len * a->seq_len);
    return experts_forward(s->ex, a, y, s->m, &rs, l->w + T_GATE,
                           experts_capacity_in(&s->ec, a->seq_len, a->mode));
}

int moe_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    moe_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    size_t nd = (size_t)n * d;
    row_set rs = { .n = n, .nseq = a->nseq, .seq_start = s->seq_start, .pos = s->pos };
    moe_ws v;
    buf_plan wp = buf_carving(a->ws);
    moe_ws_layout(&wp, &v, dm, n);
    float *dh = v.dh, *dmm = v.dm;
    memcpy(dh, dy, nd * sizeof(float)); /* the residual path around the experts */
    memset(dmm, 0, nd * sizeof(float));
    int rc = experts_backward(s->ex, a, dmm, dy, s->m, &rs, l->w + T_GATE, l->dw + T_GATE);
    if (rc)
        return rc;
    double t0 = mode_now();
    rmsnorm_backward_pool(a->mm.pool, dh, l->dw[T_MLP_NORM], dmm, s->h, l->w[T_MLP_NORM], s->rstd,
                          n, d);
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    attn_weights aw = attn_weights_at(l->w), daw = attn_weights_at(l->dw);
    attn_backward(dx, &daw, dh, x, &s->attn, &rs, &aw, a, v.sub);
    return 0;
}

int moe_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    moe_state *s = l->state;
    experts_decode_reset(s->ex);
    return kv_cache_begin(&s->kv, dims, max_len);
}

int moe_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    moe_state *s = l->state;
    int d = a->dims->d_model;
    float *h = s->dec, *m = h + d, rstd;
    attn_weights aw = attn_weights_at(l->w);
    int rc = attn_decode(&s->kv, h, x, pos, &aw, a);
    if (rc)
        return rc;
    rmsnorm_forward(m, &rstd, h, l->w[T_MLP_NORM], 1, d);
    memcpy(y, h, (size_t)d * sizeof(float));
    int first = experts_decode(s->ex, a, y, m, l->w + T_GATE,
                               experts_capacity_in(&s->ec, a->seq_len, FWD_EVAL_CAUSAL), pos);
    if (first < 0)
        return first;
    /* "took the block": the first choice is a real expert (always, for moe) */
    return first < s->ec.experts ? 1 : 0;
}

int moe_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    moe_state *s = l->state;
    int rc = experts_decode_lanes(s->ex, lanes);
    return rc ? rc : decode_lanes_begin(&s->lanes, dims, 0, max_len, lanes);
}

int moe_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n, int32_t pos,
                    unsigned char *taken)
{
    moe_state *s = l->state;
    decode_lanes *dl = &s->lanes;
    int d = a->dims->d_model;
    if (n > dl->lanes)
        return -EINVAL;
    for (int i = 0; i < n; i++)
        dl->lane[i] = i;
    attn_weights aw = attn_weights_at(l->w);
    int rc = attn_decode_rows(dl, dl->h, x, dl->lane, n, pos, &aw, a);
    if (rc)
        return rc;
    rmsnorm_forward(dl->xs, dl->rstd, dl->h, l->w[T_MLP_NORM], n, d);
    memcpy(y, dl->h, (size_t)n * d * sizeof(float));
    rc = experts_decode_rows(s->ex, a, y, dl->xs, l->w + T_GATE,
                             experts_capacity_in(&s->ec, a->seq_len, FWD_EVAL_CAUSAL), dl->lane,
                             n, pos);
    if (rc)
        return rc;
    /* "took the block": the first choice is a real expert (always, for moe) */
    for (int i = 0; i < n; i++)
        taken[i] = experts_decode_first(s->ex, i) < s->ec.experts;
    return 0;
}

int moe_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const moe_state *s = l->state;
    route_decision d = { .nseq = a->nseq, .seq_len = a->seq_len, .n_slots = s->ec.top_k,
                         .experts = experts_choices(s->ex), .weights = experts_weights(s->ex) };
    return route_decision_record(&d, sink);
}

int moe_stat_count(const layer *l, int *n_sums)
{
    const moe_state *s = l->state;
    *n_sums = experts_stat_sums_count(&s->ec);
    return experts_stat_cols_count(&s->ec);
}

void moe_stat_name(const layer *l, int col, char *buf, int len)
{
    const moe_state *s = l->state;
    experts_stat_name(&s->ec, col, buf, len);
}

void moe_stat_sums(const layer *l, double *sums)
{
    const moe_state *s = l->state;
    experts_stat_sums(s->ex, sums);
}

void moe_stat_columns(const layer *l, const double *sums, double *cols)
{
    const moe_state *s = l->state;
    experts_stat_columns(&s->ec, sums, cols);
}

void moe_step_end(layer *l, bool updated)
{
    moe_state *s = l->state;
    experts_step_end(s->ex, l->w + T_GATE, updated);
}

static int moe_build(layer *l, const model_dims *dims, int max_seq)
{
    return moe_build_with(l, dims, max_seq, moe_cfg);
}

static int integrated_build(layer *l, const model_dims *dims, int max_seq)
{
    return moe_build_with(l, dims, max_seq, integrated_cfg);
}

const kind_ops moe_ops = MOE_OPS(moe_kind, moe_build, EXPERTS_ROUTES, EXPERTS_DECODE_ROUTES);
const kind_ops integrated_ops = MOE_OPS(integrated_kind, integrated_build,
                                        EXPERTS_ROUTES | EXPERTS_NOOP_ROUTES,
                                        EXPERTS_DECODE_ROUTES | EXPERTS_NOOP_ROUTES);
