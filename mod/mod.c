/* Mixture-of-Depths (Raposo et al. 2024, Sec. 3): per sequence, a router
 * scores every token of the residual stream; the k = floor(capacity S) best
 * take the block, the rest are copied through (Eq. 1):
 *     x_i <- x_i + g(r_i) (Block(X~) - X~)_i   for i in the selected set,
 * where the block runs on the k selected rows only (attention among them,
 * causal by original position, RoPE with original positions), so its work
 * really shrinks.  Top-k over the sequence is not causal, so for sampling
 * (Sec. 3.5) a causal rule decides per token: the sign of the router logit
 * trained toward top-k membership by an auxiliary BCE (`causal = aux`), or
 * of a small predictor on stop-gradient input (`causal = predictor`). */
#include "mod/mod.h"

#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"
#include "core/model/block.h"
#include "core/rng/pcg32.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum router_kind { ROUTER_LEARNED, ROUTER_RANDOM };
enum gate_kind { GATE_RAW, GATE_SIGMOID };
enum causal_kind { CAUSAL_AUX, CAUSAL_PREDICTOR, CAUSAL_NONE };

/* Random-router streams: pcg32_keyed(seed, MOD_RANDOM_KEY + layer, step, sequence). */
#define MOD_RANDOM_KEY 0x524e4400u

typedef struct mod_cfg {
    int router, gate, causal;
    double capacity, aux_weight;
    int k;
    int t_router, t_pred, t_block; /* first tensor index of each part, -1 if absent */
} mod_cfg;

typedef struct mod_state {
    mod_cfg cfg;
    int max_seq;
    float *r;           /* [rows] router scores */
    float *pa, *ph;     /* [rows][64] predictor pre-activation and hidden */
    float *pl;          /* [rows] predictor logits */
    unsigned char *z;   /* [rows] top-k membership */
    unsigned char *c;   /* [rows] causal decision */
    int *scratch;       /* [S] */
    int n_sel, nseq;
    int *sel;           /* [rows] row index of each selected row, by sequence */
    int *seq_start;     /* [max_seq+1] */
    int32_t *pos;       /* [rows] original positions of the selected rows */
    float *gate;        /* [rows] g(r) of the selected rows */
    int cap_rows;
    long cap_probs;
    float *xs, *h, *ys; /* [cap_rows][d] gathered input, after attention, block output */
    attn_cache attn;
    mlp_cache mlp;
    double sums[6];     /* tp fp fn tn of the causal rule against top-k; causal taken; tokens */
    kv_cache kv;        /* decoding */
    mlp_cache mlp1;
    float *dec;         /* [2d + 2*64] decoding scratch */
} mod_state;

static const char *const mod_keys[] = { "capacity", "router", "gate", "causal", "aux_weight",
                                        NULL };
static const char *const mod_stat_names[] = { "accuracy", "precision", "recall",
                                              "causal_capacity", "topk_capacity", NULL };

int mod_k(double capacity, int seq_len)
{
    /* floor in double, to the letter of MODEL.md (0.29 x 100 gives 28) */
    int k = (int)floor(capacity * seq_len);
    return k < 1 ? 1 : (k > seq_len ? seq_len : k);
}

static int parse_choice(const char *v, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(v, names[i]))
            return i;
    return -1;
}

static const char *const router_names[] = { "learned", "random", NULL };
static const char *const gate_names[] = { "raw", "sigmoid", NULL };
static const char *const causal_names[] = { "aux", "predictor", "none", NULL };

static mod_cfg mod_parse(const layer_spec *s, const model_dims *dims)
{
    mod_cfg c = {
        .router = parse_choice(s->router, router_names),
        .gate = parse_choice(s->gate, gate_names),
        .causal = parse_choice(s->causal, causal_names),
        .capacity = s->capacity,
        .aux_weight = s->aux_weight,
        .k = mod_k(s->capacity, dims->seq_len),
    };
    int t = 0;
    c.t_router = c.router == ROUTER_LEARNED ? t++ : -1;
    /* the random router is the ablation control: no parameters, gate 1, and
     * its own causal rule (threshold at the capacity's normal quantile) */
    c.t_pred = c.router == ROUTER_LEARNED && c.causal == CAUSAL_PREDICTOR ? t : -1;
    if (c.t_pred >= 0)
        t += 4;
    c.t_block = t;
    return c;
}

static int mod_validate(const layer_spec *s, const model_dims *dims, char *err, int err_len)
{
    mod_cfg c = mod_parse(s, dims);
    if (!(s->capacity > 0.0 && s->capacity <= 1.0))
        snprintf(err, (size_t)err_len, "capacity %g: expected a value in (0, 1]", s->capacity);
    else if (c.router < 0)
        snprintf(err, (size_t)err_len, "router '%s': expected learned or random", s->router);
    else if (c.gate < 0)
        snprintf(err, (size_t)err_len, "gate '%s': expected raw or sigmoid", s->gate);
    else if (c.causal < 0)
        snprintf(err, (size_t)err_len, "causal '%s': expected aux, predictor or none",
                 s->causal);
    else
        return 0;
    return -EINVAL;
}

static tensor_desc tdesc(const char *name, int ndim, int s0, int s1, tensor_init init, float std)
{
    tensor_desc t;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.ndim = ndim;
    t.shape[0] = s0;
    t.shape[1] = s1;
    t.init = init;
    t.init_std = std;
    t.decay = ndim == 2; /* weight decay on matrices only */
    return t;
}

static int mod_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    mod_cfg c = mod_parse(s, dims);
    int d = dims->d_model, n = c.t_block;
    if (out) {
        if (max < n + BLOCK_TENSORS)
            return -EINVAL;
        if (c.t_router >= 0)
            out[c.t_router] = tdesc("router", 1, d, 0, INIT_NORMAL, 0.02f);
        if (c.t_pred >= 0) {
            out[c.t_pred + 0] = tdesc("pred_w1", 2, d, MOD_PRED_HIDDEN, INIT_NORMAL, 0.02f);
            out[c.t_pred + 1] = tdesc("pred_b1", 1, MOD_PRED_HIDDEN, 0, INIT_ZEROS, 0.0f);
            out[c.t_pred + 2] = tdesc("pred_w2", 1, MOD_PRED_HIDDEN, 0, INIT_NORMAL, 0.02f);
            out[c.t_pred + 3] = tdesc("pred_b2", 1, 1, 0, INIT_ZEROS, 0.0f);
        }
        block_tensors(out + n, dims, true);
    }
    return n + BLOCK_TENSORS;
}

static void free_block_buffers(mod_state *s)
{
    free(s->xs);
    free(s->h);
    free(s->ys);
    free_attn_cache(&s->attn);
    free_mlp_cache(&s->mlp);
    s->xs = s->h = s->ys = NULL;
    s->cap_rows = 0;
    s->cap_probs = 0;
}

/* The block's buffers grow to what a batch needs: k rows a sequence in
 * training, whatever the causal rule takes in evaluation. */
static int ensure_rows(mod_state *s, const model_dims *dims, int rows, long probs)
{
    if (rows <= s->cap_rows && probs <= s->cap_probs)
        return 0;
    if (rows < s->cap_rows)
        rows = s->cap_rows;
    if (probs < s->cap_probs)
        probs = s->cap_probs;
    free_block_buffers(s);
    size_t rd = (size_t)(rows ? rows : 1) * dims->d_model;
    s->xs = malloc(rd * sizeof(float));
    s->h = malloc(rd * sizeof(float));
    s->ys = malloc(rd * sizeof(float));
    if (!s->xs || !s->h || !s->ys || build_attn_cache(&s->attn, dims, rows ? rows : 1,
                                                      probs ? probs : 1) ||
        build_mlp_cache(&s->mlp, dims, rows ? rows : 1, dims->d_ff)) {
        free_block_buffers(s);
        return -ENOMEM;
    }
    s->cap_rows = rows;
    s->cap_probs = probs;
    return 0;
}

static void mod_free(layer *l)
{
    mod_state *s = l->state;
    if (!s)
        return;
    free_block_buffers(s);
    free(s->r);
    free(s->pa);
    free(s->ph);
    free(s->pl);
    free(s->z);
    free(s->c);
    free(s->scratch);
    free(s->sel);
    free(s->seq_start);
    free(s->pos);
    free(s->gate);
    free_kv_cache(&s->kv);
    free_mlp_cache(&s->mlp1);
    free(s->dec);
    free(s);
    l->state = NULL;
}

static int mod_build(layer *l, const model_dims *dims, int max_seq)
{
    int S = dims->seq_len;
    size_t rows = (size_t)max_seq * S;
    mod_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    s->cfg = mod_parse(&l->spec, dims);
    s->max_seq = max_seq;
    s->r = malloc(rows * sizeof(float));
    s->pl = malloc(rows * sizeof(float));
    s->z = malloc(rows);
    s->c = malloc(rows);
    s->scratch = malloc((size_t)S * sizeof(int));
    s->sel = malloc(rows * sizeof(int));
    s->seq_start = malloc((size_t)(max_seq + 1) * sizeof(int));
    s->pos = malloc(rows * sizeof(int32_t));
    s->gate = malloc(rows * sizeof(float));
    if (s->cfg.t_pred >= 0) {
        s->pa = malloc(rows * MOD_PRED_HIDDEN * sizeof(float));
        s->ph = malloc(rows * MOD_PRED_HIDDEN * sizeof(float));
    }
    int k = s->cfg.k;
    if (!s->r || !s->pl || !s->z || !s->c || !s->scratch || !s->sel || !s->seq_start ||
        !s->pos || !s->gate || (s->cfg.t_pred >= 0 && (!s->pa || !s->ph)) ||
        ensure_rows(s, dims, max_seq * k, (long)max_seq * dims->n_heads * k * k)) {
        mod_free(l);
        return -ENOMEM;
    }
    return 0;
}

static long mod_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    mod_cfg c = mod_parse(spec, dims);
    long rows = (long)max_seq * dims->seq_len, sel = (long)max_seq * c.k;
    long a = attn_ws_floats(dims, (int)sel, c.k), m = mlp_ws_floats(dims, (int)sel, dims->d_ff);
    /* dys dxs dh, the sublayers, dr, and the predictor's two hidden grads */
    return 3 * sel * dims->d_model + (a > m ? a : m) + rows + 2 * rows * MOD_PRED_HIDDEN;
}

typedef struct topk_ctx {
    const float *scores;
} topk_ctx;

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
    double xd = x;
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
    linear_forward(pa, x, w1, n, d, MOD_PRED_HIDDEN, 0.0f);
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

static double block_flops(const model_dims *dims, long rows, long sum_sq)
{
    return attn_flops_rows(dims, rows, sum_sq) + ffn_flops_rows(dims->d_model, dims->d_ff, rows);
}

static double router_flops(const mod_cfg *c, const model_dims *dims)
{
    double S = dims->seq_len, d = dims->d_model;
    double f = c->router == ROUTER_LEARNED ? 2.0 * S * d : 0.0;
    if (c->t_pred >= 0)
        f += 2.0 * S * (d * MOD_PRED_HIDDEN + MOD_PRED_HIDDEN);
    return f;
}

static double mod_flops(const layer_spec *spec, const model_dims *dims)
{
    mod_cfg c = mod_parse(spec, dims);
    return router_flops(&c, dims) + block_flops(dims, c.k, (long)c.k * c.k);
}

/* Scores, top-k membership and the causal decision of every row. */
static void route(mod_state *s, const layer *l, const fwd_args *a, const float *x)
{
    const mod_cfg *c = &s->cfg;
    int S = a->seq_len, d = a->dims->d_model, n = a->nseq * S;
    if (c->router == ROUTER_LEARNED)
        linear_forward(s->r, x, l->w[c->t_router], n, d, 1, 0.0f);
    else
        for (int b = 0; b < a->nseq; b++)
            random_scores(s->r + (size_t)b * S, a->ctx ? a->ctx->seed : 0, l->index, a->step,
                          a->seq0 + b, S);
    if (c->t_pred >= 0)
        predictor_forward(s->pa, s->ph, s->pl, x, l->w + c->t_pred, n, d);
    for (int b = 0; b < a->nseq; b++)
        mod_topk(s->z + (size_t)b * S, s->r + (size_t)b * S, S, c->k, s->scratch);
    /* the causal rule: sign of the router logit (aux, none), of the
     * predictor's logit, or the random score above the capacity quantile */
    float thr = c->router == ROUTER_RANDOM ? (float)mod_normal_quantile(1.0 - c->capacity) : 0.0f;
    const float *sc = c->t_pred >= 0 ? s->pl : s->r;
    for (int i = 0; i < n; i++)
        s->c[i] = sc[i] > thr;
}

static float gate_of(const mod_cfg *c, float r)
{
    if (c->router == ROUTER_RANDOM)
        return 1.0f;
    return c->gate == GATE_RAW ? r : sigmoidf(r);
}

static int mod_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    mod_state *s = l->state;
    const mod_cfg *c = &s->cfg;
    const model_dims *dm = a->dims;
    int S = a->seq_len, d = dm->d_model, n = a->nseq * S;
    double t0 = mode_now();
    route(s, l, a, x);
    const unsigned char *take = a->mode == FWD_EVAL_CAUSAL ? s->c : s->z;
    long sum_sq = 0;
    s->n_sel = 0;
    s->nseq = a->nseq;
    for (int b = 0; b < a->nseq; b++) {
        s->seq_start[b] = s->n_sel;
        for (int i = 0; i < S; i++) {
            int row = b * S + i;
            if (!take[row])
                continue;
            s->sel[s->n_sel] = row;
            s->pos[s->n_sel] = i;
            s->gate[s->n_sel] = gate_of(c, s->r[row]);
            s->n_sel++;
        }
        long ns = s->n_sel - s->seq_start[b];
        sum_sq += ns * ns;
    }
    s->seq_start[a->nseq] = s->n_sel;
    int rc = ensure_rows(s, dm, s->n_sel, sum_sq * dm->n_heads);
    if (rc)
        return rc;
    for (int j = 0; j < s->n_sel; j++)
        memcpy(s->xs + (size_t)j * d, x + (size_t)s->sel[j] * d, (size_t)d * sizeof(float));
    if (a->ctx)
        a->ctx->timers[PHASE_ROUTING] += mode_now() - t0;

    row_set rs = { .n = s->n_sel, .nseq = a->nseq, .seq_start = s->seq_start, .pos = s->pos };
    attn_weights aw = attn_weights_at(l->w + c->t_block);
    ffn_weights fw = ffn_weights_at(l->w + c->t_block + BLOCK_ATTN_TENSORS + 1);
    attn_forward(&s->attn, s->h, s->xs, &rs, &aw, a);
    mlp_forward(&s->mlp, s->ys, s->h, s->n_sel, l->w[c->t_block + BLOCK_ATTN_TENSORS], &fw, d,
                dm->d_ff);

    t0 = mode_now();
    memcpy(y, x, (size_t)n * d * sizeof(float));
    for (int j = 0; j < s->n_sel; j++) {
        float *yr = y + (size_t)s->sel[j] * d;
        const float *ys = s->ys + (size_t)j * d, *xs = s->xs + (size_t)j * d;
        float g = s->gate[j];
        for (int e = 0; e < d; e++)
            yr[e] += g * (ys[e] - xs[e]);
    }
    if (a->mode == FWD_TRAIN) {
        double aux = 0.0, side = 0.0;
        memset(s->sums, 0, sizeof(s->sums));
        for (int i = 0; i < n; i++) {
            if (c->router == ROUTER_LEARNED && c->causal == CAUSAL_AUX)
                aux += bce_logit(s->r[i], s->z[i]);
            if (c->t_pred >= 0)
                side += bce_logit(s->pl[i], s->z[i]);
            s->sums[(s->c[i] ? 0 : 2) + (s->z[i] ? 0 : 1)] += 1.0; /* tp fp fn tn */
            s->sums[4] += s->c[i];
        }
        s->sums[5] = n;
        if (a->aux_loss)
            *a->aux_loss += c->aux_weight * aux / S * (double)a->seq_scale;
        if (a->side_loss)
            *a->side_loss += side / S * (double)a->seq_scale;
    }
    if (a->flops_executed)
        *a->flops_executed += a->nseq * router_flops(c, dm) + block_flops(dm, s->n_sel, sum_sq);
    if (a->ctx)
        a->ctx->timers[PHASE_ROUTING] += mode_now() - t0;
    return 0;
}

static int mod_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    mod_state *s = l->state;
    const mod_cfg *c = &s->cfg;
    const model_dims *dm = a->dims;
    int S = a->seq_len, d = dm->d_model, n = a->nseq * S, ns = s->n_sel;
    size_t nd = (size_t)ns * d, rows = (size_t)s->max_seq * S;
    /* work space: dr, dpa (sized for the largest batch), then dys dxs dh for
     * the selected rows, then the sublayers' share */
    float *dr = a->ws, *dpa = dr + rows;
    float *dys = dpa + 2 * rows * MOD_PRED_HIDDEN, *dxs = dys + nd, *dh = dxs + nd, *sub = dh + nd;
    double t0 = mode_now();
    memset(dr, 0, (size_t)n * sizeof(float));
    for (long i = 0; i < (long)n * d; i++)
        dx[i] += dy[i]; /* every row's identity path */
    /* y_i = x_i + g_i (ys_i - xs_i): the block's output gradient is g dy, the
     * gate's is <dy, ys - xs> */
    for (int j = 0; j < ns; j++) {
        const float *dyr = dy + (size_t)s->sel[j] * d;
        const float *ys = s->ys + (size_t)j * d, *xs = s->xs + (size_t)j * d;
        float *o = dys + (size_t)j * d, g = s->gate[j], dg = 0.0f;
        for (int e = 0; e < d; e++) {
            o[e] = g * dyr[e];
            dg += dyr[e] * (ys[e] - xs[e]);
        }
        if (c->router == ROUTER_LEARNED)
            dr[s->sel[j]] += c->gate == GATE_RAW ? dg : dg * g * (1.0f - g);
    }
    if (a->ctx)
        a->ctx->timers[PHASE_ROUTING] += mode_now() - t0;

    row_set rs = { .n = ns, .nseq = s->nseq, .seq_start = s->seq_start, .pos = s->pos };
    attn_weights aw = attn_weights_at(l->w + c->t_block);
    attn_weights daw = attn_weights_at(l->dw + c->t_block);
    ffn_weights fw = ffn_weights_at(l->w + c->t_block + BLOCK_ATTN_TENSORS + 1);
    ffn_weights dfw = ffn_weights_at(l->dw + c->t_block + BLOCK_ATTN_TENSORS + 1);
    memset(dh, 0, nd * sizeof(float));
    mlp_backward(dh, l->dw[c->t_block + BLOCK_ATTN_TENSORS], &dfw, dys, s->h, &s->mlp, ns,
                 l->w[c->t_block + BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff, sub);
    memset(dxs, 0, nd * sizeof(float));
    attn_backward(dxs, &daw, dh, s->xs, &s->attn, &rs, &aw, a, sub);

    t0 = mode_now();
    /* D = Block(X~) - X~: the selected rows get the block's input gradient
     * minus the direct one */
    for (int j = 0; j < ns; j++) {
        float *o = dx + (size_t)s->sel[j] * d;
        const float *p = dxs + (size_t)j * d, *q = dys + (size_t)j * d;
        for (int e = 0; e < d; e++)
            o[e] += p[e] - q[e];
    }
    float bscale = (float)(a->seq_scale / S);
    if (c->router == ROUTER_LEARNED) {
        if (c->causal == CAUSAL_AUX)
            for (int i = 0; i < n; i++)
                dr[i] += (float)c->aux_weight * bscale * (sigmoidf(s->r[i]) - (float)s->z[i]);
        /* r = x w_r: dw_r += x^T dr, dx += dr w_r^T */
        const float *w = l->w[c->t_router];
        matmul(l->dw[c->t_router], 1, x, d, true, dr, 1, false, d, 1, n, 1.0f);
        matmul(dx, d, dr, 1, false, w, d, false, n, d, 1, 1.0f);
    }
    if (c->t_pred >= 0) {
        for (int i = 0; i < n; i++)
            dr[i] = bscale * (sigmoidf(s->pl[i]) - (float)s->z[i]);
        predictor_backward(l->dw + c->t_pred, dr, x, s->pa, s->ph, l->w + c->t_pred, n, d, dpa);
    }
    if (a->ctx)
        a->ctx->timers[PHASE_ROUTING] += mode_now() - t0;
    return 0;
}

static int mod_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const mod_state *s = l->state;
    unsigned long long dims[2] = { (unsigned long long)a->nseq, (unsigned long long)a->seq_len };
    long n = (long)a->nseq * a->seq_len;
    int rc = sink->put(sink, "selected", RECORD_UINT8, 2, dims, s->z);
    if (!rc)
        rc = sink->put(sink, "scores", RECORD_FLOAT, 2, dims, s->r);
    if (!rc)
        rc = sink->put(sink, "causal", RECORD_UINT8, 2, dims, s->c);
    if (!rc && s->cfg.t_pred >= 0) {
        float *p = malloc((size_t)n * sizeof(float));
        if (!p)
            return -ENOMEM;
        for (long i = 0; i < n; i++)
            p[i] = sigmoidf(s->pl[i]);
        rc = sink->put(sink, "pred_prob", RECORD_FLOAT, 2, dims, p);
        free(p);
    }
    return rc;
}

static int mod_stat_count(const layer *l, int *n_sums)
{
    *n_sums = 6;
    return 5;
}

static void mod_stat_name(const layer *l, int col, char *buf, int len)
{
    snprintf(buf, (size_t)len, "%s", mod_stat_names[col]);
}

static void mod_stat_sums(const layer *l, double *sums)
{
    const mod_state *s = l->state;
    memcpy(sums, s->sums, sizeof(s->sums));
}

static double ratio(double a, double b)
{
    return b > 0.0 ? a / b : 0.0;
}

static void mod_stat_columns(const layer *l, const double *m, double *cols)
{
    /* m: tp fp fn tn causal tokens */
    cols[0] = ratio(m[0] + m[3], m[5]);
    cols[1] = ratio(m[0], m[0] + m[1]);
    cols[2] = ratio(m[0], m[0] + m[2]);
    cols[3] = ratio(m[4], m[5]);
    cols[4] = ratio(m[0] + m[2], m[5]);
}

static int mod_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    mod_state *s = l->state;
    if (s->kv.cap < max_len) {
        free_kv_cache(&s->kv);
        free_mlp_cache(&s->mlp1);
        free(s->dec);
        s->dec = malloc((2 * (size_t)dims->d_model + 2 * MOD_PRED_HIDDEN + 2) * sizeof(float));
        if (!s->dec || build_kv_cache(&s->kv, dims, max_len) ||
            build_mlp_cache(&s->mlp1, dims, 1, dims->d_ff))
            return -ENOMEM;
    }
    s->kv.n = 0;
    return 0;
}

static int mod_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    mod_state *s = l->state;
    const mod_cfg *c = &s->cfg;
    const model_dims *dm = a->dims;
    int d = dm->d_model;
    float *h = s->dec, *ys = h + d, *pa = ys + d, *ph = pa + MOD_PRED_HIDDEN;
    float r, score;
    if (c->router == ROUTER_LEARNED) {
        linear_forward(&r, x, l->w[c->t_router], 1, d, 1, 0.0f);
    } else {
        /* the same stream as the full forward: draw pos+1 normals */
        float *buf = malloc(((size_t)pos + 1) * sizeof(float));
        if (!buf)
            return -ENOMEM;
        random_scores(buf, a->ctx ? a->ctx->seed : 0, l->index, a->step, a->seq0, pos + 1);
        r = buf[pos];
        free(buf);
    }
    score = r;
    if (c->t_pred >= 0)
        predictor_forward(pa, ph, &score, x, l->w + c->t_pred, 1, d);
    float thr = c->router == ROUTER_RANDOM ? (float)mod_normal_quantile(1.0 - c->capacity) : 0.0f;
    if (!(score > thr)) {
        memcpy(y, x, (size_t)d * sizeof(float));
        return 0;
    }
    attn_weights aw = attn_weights_at(l->w + c->t_block);
    ffn_weights fw = ffn_weights_at(l->w + c->t_block + BLOCK_ATTN_TENSORS + 1);
    int rc = attn_decode(&s->kv, h, x, pos, &aw, a);
    if (rc)
        return rc;
    mlp_forward(&s->mlp1, ys, h, 1, l->w[c->t_block + BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff);
    float g = gate_of(c, r);
    for (int e = 0; e < d; e++)
        y[e] = x[e] + g * (ys[e] - x[e]);
    return 1;
}

const layer_kind mod_kind = {
    .name = "mod",
    .keys = mod_keys,
    .validate = mod_validate,
    .tensors = mod_tensors,
    .build = mod_build,
    .free = mod_free,
    .ws_floats = mod_ws_floats,
    .forward = mod_forward,
    .backward = mod_backward,
    .flops = mod_flops,
    .decode_begin = mod_decode_begin,
    .decode = mod_decode,
    .record = mod_record,
    .stat_count = mod_stat_count,
    .stat_name = mod_stat_name,
    .stat_sums = mod_stat_sums,
    .stat_columns = mod_stat_columns,
};
