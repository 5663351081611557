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
    free_routed_block(&s->blk);
    free_mod_router(&s->rt);
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
    if (rc || !s->dr ||
        build_routed_block(&s->blk, &routed_dense, NULL, dims, max_seq, dims->seq_len)) {
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
    int S = a->seq_len, n = a->nseq * S;
    double t0 = mode_now();
    /* the per-token rule in every mode: the router's causal selection */
    int rc = mod_router_forward(rt, &s->blk.set, l->w, l->index, a, x, ROUTER_TAKE_CAUSAL);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    if (rc || (rc = routed_forward(&s->blk, l->w + s->t_block, a, y, x)))
        return rc;
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
    s->sums[0] = s->blk.set.n_sel;
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
    const float *dgate;
    int rc = routed_backward(&s->blk, l->w + s->t_block, l->dw + s->t_block, a, dx, dy, &dgate);
    if (!rc)
        mod_router_backward_extra(&s->rt, &s->blk.set, l->w, l->dw, a, dx, x, dgate, s->dr);
    return rc;
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
    return routed_decode_begin(&s->blk, dims, max_len);
}

static int tcmod_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    tcmod_state *s = l->state;
    return mod_router_decode(&s->rt, &s->blk, l->w, s->t_block, l->index, a, y, x, pos);
}

static int tcmod_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    tcmod_state *s = l->state;
    return mod_router_decode_kv(&s->rt, &s->blk, l->w, s->t_block, l->index, a, x, pos);
}

static int tcmod_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    tcmod_state *s = l->state;
    return routed_decode_lanes(&s->blk, dims, max_len, lanes);
}

static int tcmod_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n,
                          int32_t pos, unsigned char *taken)
{
    tcmod_state *s = l->state;
    return mod_router_decode_rows(&s->rt, &s->blk, l->w, s->t_block, l->index, a, y, x, n, pos,
                                  taken);
}

const kind_ops tcmod_ops = {
    .kind = &tcmod_kind,
    .build = tcmod_build,
    .free = tcmod_free,
    .forward = tcmod_forward,
    .backward = tcmod_backward,
    .decode_begin = tcmod_decode_begin,
    .decode = tcmod_decode,
    .decode_lanes = tcmod_decode_lanes,
    .decode_rows = tcmod_decode_rows,
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
