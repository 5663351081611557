/* Mixture-of-Recursions (mor.h, docs/kinds/mor.md).  Step r = 1..R of a
 * sequence, with x^(0) the layer's input and A_0 every position:
 *     s_i = x_i^(r-1) . w_r for i in A_{r-1};
 *     T_r = the k_r largest s_i of A_{r-1} (training, top-k evaluation; ties
 *           to the lower position), or { i in A_{r-1} : s_i > 0 } (causal);
 *     x_i^(r) = x_i^(r-1) + sigmoid(s_i) (Block(X~) - X~)_i for i in T_r,
 *           X~ = x^(r-1)[T_r], the block's attention among T_r only;
 *     A_r = T_r;
 * the layer's output is x^(R).  One block's weights for every step: each
 * step a routed block (routed.c) on the rows its selector chose
 * (select_steps.c). */
#include "mod/mor.h"
#include "mod/mor_state.h"

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
        free_routed_block(&s->step[r].blk);
        free_select_steps(&s->step[r].sel);
        free(s->step[r].xin);
    }
    free(s->depth);
    free(s->dx);
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
    int S = dims->seq_len;
    s->R = p->recursions;
    size_t rows = (size_t)max_seq * S, rd = rows * dims->d_model;
    int rc = !(s->depth = malloc(rows * sizeof(int32_t))) ||
             !(s->dx = malloc(2 * rd * sizeof(float)));
    for (int r = 0; !rc && r < s->R; r++) {
        mor_step *st = &s->step[r];
        rc = build_select_steps(&st->sel, max_seq, S) || !(st->xin = malloc(rd * sizeof(float))) ||
             build_routed_block(&st->blk, &routed_dense, NULL, dims, max_seq, mor_k(p, r + 1, S));
    }
    if (rc) {
        mor_free(l);
        return -ENOMEM;
    }
    return 0;
}

static int mor_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    mor_state *s = l->state;
    const mor_params *p = mor_params_of(&l->spec);
    int d = a->dims->d_model, S = a->seq_len, n = a->nseq * S, R = s->R;
    bool train = a->mode == FWD_TRAIN;
    double aux = 0.0;
    memset(s->sums, 0, sizeof(s->sums));
    memcpy(s->step[0].xin, x, (size_t)n * d * sizeof(float));
    for (int i = 0; i < n; i++) {
        s->step[0].sel.elig[i] = 1;
        s->depth[i] = 0;
    }
    for (int r = 0; r < R; r++) {
        mor_step *st = &s->step[r];
        float *out = r + 1 < R ? s->step[r + 1].xin : y;
        long eligible = select_steps_score(&st->sel, st->xin, l->w[0] + (size_t)r * d, n, d);
        select_steps_choose(&st->sel, &st->blk.set, mor_k(p, r + 1, S),
                            a->mode == FWD_EVAL_CAUSAL, a->nseq, S);
        int rc = routed_forward(&st->blk, l->w + 1, a, out, st->xin);
        if (rc)
            return rc;
        if (a->flops_executed)
            *a->flops_executed += 2.0 * (double)eligible * d;
        for (int i = 0; i < n; i++)
            s->depth[i] += st->sel.take[i];
        if (train)
            select_steps_bce(&st->sel, n, &aux);
        s->sums[r] = st->blk.set.n_sel;
        if (r + 1 < R) /* A_r = T_r */
            memcpy(s->step[r + 1].sel.elig, st->sel.take, (size_t)n);
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
    int d = a->dims->d_model, n = a->nseq * a->seq_len, R = s->R;
    size_t nd = (size_t)n * d;
    float bscale = (float)(a->seq_scale / a->seq_len);
    const float *dout = dy;
    for (int r = R - 1; r >= 0; r--) {
        mor_step *st = &s->step[r];
        /* the stream's gradient into step r's input: the layer's dx at the
         * first step, else one of two buffers */
        float *din = r == 0 ? dx : s->dx + (size_t)(r & 1) * nd;
        if (r > 0)
            memset(din, 0, nd * sizeof(float));
        const float *dgate;
        int rc = routed_backward(&st->blk, l->w + 1, l->dw + 1, a, din, dout, &dgate);
        if (rc)
            return rc;
        select_steps_backward(&st->sel, &st->blk.set, dgate, p->aux_weight, bscale, st->xin,
                              l->w[0] + (size_t)r * d, l->dw[0] + (size_t)r * d, din, n, d);
        dout = din;
    }
    return 0;
}

static int mor_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const mor_state *s = l->state;
    /* the first step's decisions and scores (what the depth tools read),
     * and how many steps each token took */
    route_decision d = { .nseq = a->nseq, .seq_len = a->seq_len, .selected = s->step[0].sel.take,
                         .scores = s->step[0].sel.s, .depth = s->depth };
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
    for (int r = 0; r < s->R; r++) {
        int rc = routed_decode_begin(&s->step[r].blk, dims, max_len);
        if (rc)
            return rc;
    }
    return 0;
}

static int mor_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    mor_state *s = l->state;
    int d = a->dims->d_model, taken = 0;
    memcpy(y, x, (size_t)d * sizeof(float));
    for (int r = 0; r < s->R; r++) {
        float g;
        if (!select_steps_decide(y, l->w[0] + (size_t)r * d, d, &g))
            break; /* inactive from here on: no later step, no K/V there */
        int rc = routed_decode(&s->step[r].blk, l->w + 1, a, y, y, pos, g);
        if (rc)
            return rc;
        taken++;
    }
    return taken; /* the recursions this token ran */
}

static int mor_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    mor_state *s = l->state;
    for (int r = 0; r < s->R; r++) {
        int rc = routed_decode_lanes(&s->step[r].blk, dims, max_len, lanes);
        if (rc)
            return rc;
    }
    return 0;
}

/* mor_decode on n lanes at once: at each step the lanes still recursing
 * decide by the causal rule, and those that go on run the step's block
 * together; a lane that stops runs no later step (taken[i]: its steps). */
static int mor_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n,
                           int32_t pos, unsigned char *taken)
{
    mor_state *s = l->state;
    size_t d = (size_t)a->dims->d_model;
    if (n > MODE_MAX_LANES)
        return -EINVAL;
    unsigned char take[MODE_MAX_LANES];
    float g[MODE_MAX_LANES];
    memcpy(y, x, (size_t)n * d * sizeof(float));
    for (int i = 0; i < n; i++) {
        take[i] = 1;
        taken[i] = 0;
    }
    for (int r = 0; r < s->R; r++) {
        int going = 0;
        for (int i = 0; i < n; i++) {
            take[i] = take[i] && select_steps_decide(y + i * d, l->w[0] + (size_t)r * d, (int)d,
                                                     &g[i]);
            going += take[i];
            taken[i] += take[i];
        }
        if (!going)
            break;
        int rc = routed_decode_rows(&s->step[r].blk, l->w + 1, a, y, y, n, pos, take, g);
        if (rc)
            return rc;
    }
    return 0;
}

const kind_ops mor_ops = {
    .kind = &mor_kind,
    .build = mor_build,
    .free = mor_free,
    .forward = mor_forward,
    .backward = mor_backward,
    .decode_begin = mor_decode_begin,
    .decode = mor_decode,
    .decode_lanes = mor_decode_lanes,
    .decode_rows = mor_decode_rows,
    .record = mor_record,
    .stat_count = mor_stat_count,
    .stat_name = mor_stat_name,
    .stat_sums = mor_stat_sums,
    .stat_columns = mor_stat_columns,
    .routes = 1u << ROUTE_LEARNED,
    .decode_routes = 1u << ROUTE_LEARNED,
};
