/* Routing for `mod` and staged MoDE (see router.h). */
#include "mod/router.h"

#include "core/kernels/matmul.h"
#include "core/rng/pcg32.h"
#include "core/rng/streams.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Random-router streams: pcg32_keyed(seed, MOD_RANDOM_KEY + layer, step, sequence). */
#define MOD_RANDOM_KEY PCG_KEY_ROUTING

static const char *const stat_names[] = { "accuracy", "precision", "recall", "causal_capacity",
                                          "topk_capacity" };

void free_mod_router(mod_router *rt)
{
    free(rt->block);
    memset(rt, 0, sizeof(*rt));
}

int build_mod_router(mod_router *rt, const mod_router_params *params, const model_dims *dims,
                     int max_seq)
{
    memset(rt, 0, sizeof(*rt));
    rt->cfg = mod_router_parse(params, dims);
    buf_plan p = buf_counting(BUF_ALIGN);
    mod_router_layout(&p, rt, dims, max_seq);
    if (buf_alloc(&p, &rt->block))
        return -ENOMEM;
    mod_router_layout(&p, rt, dims, max_seq);
    return 0;
}

/* Insertion-friendly comparison for the top-k: larger score first, then the
 * lower position (MODEL.md's tie rule). */
static int better(const float *r, int a, int b)
{
    return r[a] > r[b] || (r[a] == r[b] && a < b);
}

static void sift_down(int *heap, int n, int i, const float *r)
{
    /* a min-heap of the k best so far under better(): the root is the worst */
    for (;;) {
        int l = 2 * i + 1, m = i;
        if (l < n && better(r, heap[m], heap[l]))
            m = l;
        if (l + 1 < n && better(r, heap[m], heap[l + 1]))
            m = l + 1;
        if (m == i)
            return;
        int t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

void mod_topk(unsigned char *z, const float *r, int n, int k, int *heap)
{
    /* O(n log k): keep the k best in a heap whose root is the worst of them */
    memset(z, 0, (size_t)n);
    if (k <= 0)
        return;
    if (k >= n) {
        memset(z, 1, (size_t)n);
        return;
    }
    for (int i = 0; i < k; i++)
        heap[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(heap, k, i, r);
    for (int i = k; i < n; i++) {
        if (better(r, i, heap[0])) {
            heap[0] = i;
            sift_down(heap, k, 0, r);
        }
    }
    for (int i = 0; i < k; i++)
        z[heap[i]] = 1;
}

double mod_normal_quantile(double p)
{
    /* bisection on Phi(x) = erfc(-x / sqrt 2) / 2: slow but exact enough,
     * and called once per forward */
    double lo = -40.0, hi = 40.0;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* BCE(sigmoid(x), z) = softplus(x) - z x, written to stay finite. */
static double bce_logit(float x, int z)
{
    double xd = (double)x;
    return fmax(xd, 0.0) + log1p(exp(-fabs(xd))) - (z ? xd : 0.0);
}

static void random_scores(float *r, uint64_t seed, int layer_index, long step, long seq, int n)
{
    pcg32 g;
    pcg32_keyed(&g, seed, MOD_RANDOM_KEY + (uint64_t)layer_index, (uint64_t)step, (uint64_t)seq);
    for (int i = 0; i < n; i++)
        r[i] = pcg32_normal(&g);
}

static void predictor_forward(float *pa, float *ph, float *pl, const float *x, float *const *w,
                              int n, int d)
{
    const float *w1 = w[0], *b1 = w[1], *w2 = w[2], *b2 = w[3];
    linear_forward(NULL, pa, x, w1, n, d, MOD_PRED_HIDDEN, 0.0f);
    flops_add(2.0 * n * MOD_PRED_HIDDEN); /* the hidden layer to the logit, below */
    for (int i = 0; i < n; i++) {
        float *a = pa + (size_t)i * MOD_PRED_HIDDEN, *hh = ph + (size_t)i * MOD_PRED_HIDDEN;
        float acc = b2[0];
        for (int j = 0; j < MOD_PRED_HIDDEN; j++) {
            a[j] += b1[j];
            hh[j] = a[j] * sigmoidf(a[j]);
            acc += hh[j] * w2[j];
        }
        pl[i] = acc;
    }
}

/* The predictor reads stop-gradient(x): its BCE reaches its own weights only. */
static void predictor_backward(float *const *dw, const float *dl, const float *x, const float *pa,
                               const float *ph, float *const *w, int n, int d, float *dpa)
{
    float *dw1 = dw[0], *db1 = dw[1], *dw2 = dw[2], *db2 = dw[3];
    const float *w2 = w[2];
    for (int i = 0; i < n; i++) {
        const float *a = pa + (size_t)i * MOD_PRED_HIDDEN, *hh = ph + (size_t)i * MOD_PRED_HIDDEN;
        float *da = dpa + (size_t)i * MOD_PRED_HIDDEN;
        db2[0] += dl[i];
        for (int j = 0; j < MOD_PRED_HIDDEN; j++) {
            float sg = sigmoidf(a[j]);
            dw2[j] += dl[i] * hh[j];
            da[j] = dl[i] * w2[j] * sg * (1.0f + a[j] * (1.0f - sg));
            db1[j] += da[j];
        }
    }
    matmul(dw1, MOD_PRED_HIDDEN, x, d, true, dpa, MOD_PRED_HIDDEN, false, d, MOD_PRED_HIDDEN, n,
           1.0f);
}

static float gate_of(const mod_router_cfg *c, float r)
{
    if (c->router == ROUTER_RANDOM)
        return 1.0f;
    return c->gate == GATE_RAW ? r : sigmoidf(r);
}

/* w: the router's tensors (the fitted threshold's, causal = threshold). */
static float causal_threshold(const mod_router_cfg *c, float *const *w)
{
    if (c->router == ROUTER_RANDOM)
        return (float)mod_normal_quantile(1.0 - c->capacity);
    return c->t_thr >= 0 ? w[c->t_thr][0] + (float)c->threshold : (float)c->threshold;
}

/* A counterfactual policy (route.h) in place of the learned decisions
 * take[S] of sequence b (window win): as many tokens as take holds, at
 * random or of the lowest router scores r; or the book's decisions. */
static int counterfactual(mod_router *rt, const fwd_args *a, int layer_index, int b,
                          unsigned char *take, const float *r, bool causal)
{
    const route_plan *p = a->route;
    int S = a->seq_len, m = 0;
    long win = a->window ? a->window[b] : a->seq0 + b;
    for (int i = 0; i < S; i++)
        m += take[i];
    if (p->policy == ROUTE_RANDOM) {
        /* the first m of a seeded Fisher-Yates shuffle of the positions */
        int *perm = rt->scratch;
        pcg32 g;
        pcg32_keyed(&g, p->seed, PCG_KEY_COUNTERFACTUAL + (uint64_t)layer_index, (uint64_t)win, 0);
        for (int i = 0; i < S; i++) {
            perm[i] = i;
            take[i] = 0;
        }
        for (int i = 0; i < m; i++) {
            int j = i + (int)pcg32_bounded(&g, (uint32_t)(S - i));
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            take[perm[i]] = 1;
        }
        return 0;
    }
    if (p->policy == ROUTE_BOTTOM) {
        float *neg = rt->dr; /* backward's buffer: free in evaluation */
        for (int i = 0; i < S; i++)
            neg[i] = -r[i];
        mod_topk(take, neg, S, m, rt->scratch);
        return 0;
    }
    if (p->policy == ROUTE_SHUFFLE || p->policy == ROUTE_REPLAY) {
        const char *name = causal ? "causal" : "selected";
        const float *src = route_source(p, layer_index, name, win, S, 0, 1);
        if (!src)
            return -ENOENT;
        for (int i = 0; i < S; i++)
            take[i] = src[i] != 0.0f; /* 0 or 1 (route_source) */
        return 0;
    }
    return -EINVAL;
}

int mod_router_forward(mod_router *rt, routed_set *set, float *const *w, int layer_index,
                       const fwd_args *a, const float *x, int take_rule)
{
    const mod_router_cfg *c = &rt->cfg;
    int S = a->seq_len, d = a->dims->d_model, n = a->nseq * S;
    if (c->router == ROUTER_LEARNED)
        /* NULL exec: the router stays in fp32 under precision = bf16 */
        linear_forward(NULL, rt->r, x, w[c->t_router], n, d, 1, 0.0f);
    else
        for (int b = 0; b < a->nseq; b++) /* keyed by the window in evaluation: any ranks */
            random_scores(rt->r + (size_t)b * S, a->ctx ? a->ctx->seed : 0, layer_index, a->step,
                          a->window ? a->window[b] : a->seq0 + b, S);
    if (c->t_pred >= 0)
        predictor_forward(rt->pa, rt->ph, rt->pl, x, w + c->t_pred, n, d);
    int k = mod_router_k(c, S, a->mode == FWD_TRAIN, a->step);
    for (int b = 0; b < a->nseq; b++)
        mod_topk(rt->z + (size_t)b * S, rt->r + (size_t)b * S, S, k, rt->scratch);
    /* the causal rule: sign of the router logit (aux, none), of the
     * predictor's logit, the router logit above the fitted threshold, or
     * the random score above the capacity quantile */
    float thr = causal_threshold(c, w);
    const float *sc = c->t_pred >= 0 ? rt->pl : rt->r;
    for (int i = 0; i < n; i++)
        rt->c[i] = sc[i] > thr;

    bool causal = take_rule == ROUTER_TAKE_CAUSAL || a->mode == FWD_EVAL_CAUSAL;
    unsigned char *take = causal ? rt->c : rt->z;
    if (a->mode != FWD_TRAIN && route_applies(a->route, layer_index))
        for (int b = 0; b < a->nseq; b++) {
            int rc = counterfactual(rt, a, layer_index, b, take + (size_t)b * S,
                                    rt->r + (size_t)b * S, causal);
            if (rc)
                return rc;
        }
    routed_set_begin(set);
    for (int b = 0; b < a->nseq; b++) {
        for (int i = 0; i < S; i++)
            if (take[b * S + i])
                routed_set_add(set, b * S + i, i, gate_of(c, rt->r[b * S + i]));
        routed_set_next_seq(set);
    }
    if (a->flops_executed)
        *a->flops_executed += a->nseq * mod_router_flops(c, a->dims);
    if (a->mode != FWD_TRAIN || take_rule == ROUTER_TAKE_CAUSAL)
        return 0;
    double aux = 0.0, side = 0.0;
    memset(rt->sums, 0, sizeof(rt->sums));
    for (int i = 0; i < n; i++) {
        if (c->router == ROUTER_LEARNED && c->causal == CAUSAL_AUX)
            aux += bce_logit(rt->r[i], rt->z[i]);
        if (c->t_pred >= 0)
            side += bce_logit(rt->pl[i], rt->z[i]);
        if (c->t_thr >= 0) /* tau at the (1 - capacity) quantile of stop-gradient(r) */
            side += mod_pinball((double)rt->r[i] - (double)w[c->t_thr][0], 1.0 - c->capacity);
        rt->sums[(rt->c[i] ? 0 : 2) + (rt->z[i] ? 0 : 1)] += 1.0; /* tp fp fn tn */
        rt->sums[4] += rt->c[i];
    }
    rt->sums[5] = n;
    if (a->aux_loss)
        *a->aux_loss += c->aux_weight * aux / S * (double)a->seq_scale;
    if (a->side_loss)
        *a->side_loss += side / S * (double)a->seq_scale;
    return 0;
}

void mod_router_backward(mod_router *rt, const routed_set *set, float *const *w,
                         float *const *dw, const fwd_args *a, float *dx, const float *x,
                         const float *dgate)
{
    mod_router_backward_extra(rt, set, w, dw, a, dx, x, dgate, NULL);
}

void mod_router_backward_extra(mod_router *rt, const routed_set *set, float *const *w,
                               float *const *dw, const fwd_args *a, float *dx, const float *x,
                               const float *dgate, const float *dr_extra)
{
    const mod_router_cfg *c = &rt->cfg;
    int S = a->seq_len, d = a->dims->d_model, n = a->nseq * S;
    float *dr = rt->dr;
    float bscale = (float)(a->seq_scale / S);
    if (c->router == ROUTER_LEARNED) {
        memset(dr, 0, (size_t)n * sizeof(float));
        for (int j = 0; j < set->n_sel; j++) {
            float g = set->gate[j];
            dr[set->sel[j]] += c->gate == GATE_RAW ? dgate[j] : dgate[j] * g * (1.0f - g);
        }
        if (c->causal == CAUSAL_AUX)
            for (int i = 0; i < n; i++)
                dr[i] += (float)c->aux_weight * bscale * (sigmoidf(rt->r[i]) - (float)rt->z[i]);
        for (int i = 0; dr_extra && i < n; i++)
            dr[i] += dr_extra[i];
        /* r = x w_r: dw_r += x^T dr, dx += dr w_r^T */
        matmul(dw[c->t_router], 1, x, d, true, dr, 1, false, d, 1, n, 1.0f);
        matmul(dx, d, dr, 1, false, w[c->t_router], d, false, n, d, 1, 1.0f);
    }
    if (c->t_pred >= 0) {
        for (int i = 0; i < n; i++)
            dr[i] = bscale * (sigmoidf(rt->pl[i]) - (float)rt->z[i]);
        predictor_backward(dw + c->t_pred, dr, x, rt->pa, rt->ph, w + c->t_pred, n, d, rt->dpa);
    }
    if (c->t_thr >= 0) {
        double g = 0.0, tau = (double)w[c->t_thr][0];
        for (int i = 0; i < n; i++)
            g += mod_pinball_dtau((double)rt->r[i] - tau, 1.0 - c->capacity);
        dw[c->t_thr][0] += bscale * (float)g;
    }
}

int mod_router_decide(const mod_router *rt, float *const *w, int layer_index, const fwd_args *a,
                      const float *x, int32_t pos, float *gate)
{
    const mod_router_cfg *c = &rt->cfg;
    int d = a->dims->d_model;
    float r, score;
    if (c->router == ROUTER_LEARNED) {
        linear_forward(NULL, &r, x, w[c->t_router], 1, d, 1, 0.0f);
    } else {
        /* the same stream as the full forward: draw pos+1 normals */
        float *buf = malloc(((size_t)pos + 1) * sizeof(float));
        if (!buf)
            return -ENOMEM;
        random_scores(buf, a->ctx ? a->ctx->seed : 0, layer_index, a->step,
                      a->window ? a->window[0] : a->seq0, pos + 1);
        r = buf[pos];
        free(buf);
    }
    score = r;
    if (c->t_pred >= 0) {
        float pa[MOD_PRED_HIDDEN], ph[MOD_PRED_HIDDEN];
        predictor_forward(pa, ph, &score, x, w + c->t_pred, 1, d);
    }
    *gate = gate_of(c, r);
    if (route_applies(a->route, layer_index) && a->route->policy == ROUTE_RANDOM) {
        /* decoding cannot count the sequence's decisions ahead: each token
         * takes the block with probability capacity, keyed by its position */
        pcg32 g;
        long win = a->window ? a->window[0] : a->seq0;
        pcg32_keyed(&g, a->route->seed, PCG_KEY_COUNTERFACTUAL + (uint64_t)layer_index,
                    (uint64_t)win, (uint64_t)pos + 1);
        return pcg32_uniform(&g) < (float)c->capacity;
    }
    if (route_applies(a->route, layer_index))
        return -EINVAL; /* the driver refuses other policies in decoding */
    return score > causal_threshold(c, w);
}

int mod_router_decode(const mod_router *rt, routed_block *b, float *const *w, int t_block,
                      int layer_index, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    float g;
    int take = mod_router_decide(rt, w, layer_index, a, x, pos, &g);
    if (take <= 0) {
        memcpy(y, x, (size_t)a->dims->d_model * sizeof(float));
        return take;
    }
    int rc = routed_decode(b, w + t_block, a, y, x, pos, g);
    return rc ? rc : 1;
}

int mod_router_decode_rows(const mod_router *rt, routed_block *b, float *const *w, int t_block,
                           int layer_index, const fwd_args *a, float *y, const float *x, int n,
                           int32_t pos, unsigned char *taken)
{
    size_t d = (size_t)a->dims->d_model;
    if (n > b->lanes.lanes || n > MODE_MAX_LANES)
        return -EINVAL;
    float gv[MODE_MAX_LANES];
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        fwd_args ai = lane_args(a, i); /* lane i is its own sequence */
        int take = mod_router_decide(rt, w, layer_index, &ai, x + i * d, pos, &gv[i]);
        if (take < 0)
            rc = take;
        else
            taken[i] = (unsigned char)take;
    }
    return rc ? rc : routed_decode_rows(b, w + t_block, a, y, x, n, pos, taken, gv);
}

int mod_router_decode_kv(const mod_router *rt, routed_block *b, float *const *w, int t_block,
                         int layer_index, const fwd_args *a, const float *x, int32_t pos)
{
    float g;
    int take = mod_router_decide(rt, w, layer_index, a, x, pos, &g);
    if (take <= 0)
        return take;
    int rc = routed_decode_kv(b, w + t_block, a, x, pos);
    return rc ? rc : 1;
}

int mod_router_record(const mod_router *rt, const fwd_args *a, route_decision *d,
                      record_sink *sink)
{
    long n = (long)a->nseq * a->seq_len;
    float *p = NULL;
    if (rt->cfg.t_pred >= 0) {
        p = malloc((size_t)n * sizeof(float));
        if (!p)
            return -ENOMEM;
        for (long i = 0; i < n; i++)
            p[i] = sigmoidf(rt->pl[i]);
    }
    d->nseq = a->nseq;
    d->seq_len = a->seq_len;
    d->selected = rt->z;
    d->scores = rt->r;
    d->causal = rt->c;
    d->pred_prob = p;
    int rc = route_decision_record(d, sink);
    free(p);
    return rc;
}

int mod_router_stat_count(int *n_sums)
{
    *n_sums = 6;
    return 5;
}

void mod_router_stat_name(int col, char *buf, int len)
{
    snprintf(buf, (size_t)len, "%s", stat_names[col]);
}

static double ratio(double a, double b)
{
    return b > 0.0 ? a / b : 0.0;
}

void mod_router_stat_columns(const double *m, double *cols)
{
    /* m: tp fp fn tn causal tokens */
    cols[0] = ratio(m[0] + m[3], m[5]);
    cols[1] = ratio(m[0], m[0] + m[1]);
    cols[2] = ratio(m[0], m[0] + m[2]);
    cols[3] = ratio(m[4], m[5]);
    cols[4] = ratio(m[0] + m[2], m[5]);
}
