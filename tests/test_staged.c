/* Tests of the `staged` layer kind (staged MoDE, MODEL.md "Layer kinds"): the
 * `mod` routing of a whole block whose block is attention among the selected
 * rows followed by the `moe` MLP on those rows, with the expert capacity
 * counted on the nominal k = max(1, floor(capacity S)).
 *   1. finite-difference gradients of `dense, staged` models (learned router
 *      with sigmoid/raw gates and aux/none/predictor causal rules, the random
 *      router; top_k 1 and 2, with and without dropping), routing held fixed;
 *   2. at capacity 1 with the random router (gate 1) the layer is the `moe`
 *      layer on the same weights (logits, record, losses, gradients); with a
 *      learned router and the sigmoid gate it is x + sigmoid(r) (moe(x) - x);
 *   3. expert capacity on a hand-made routing: ceil(cf top_k k / E) on the
 *      nominal k, in top-k and in causal mode alike;
 *   4. decoding with the KV cache gives the causal-mode logits and decisions;
 *      causal mode is causal;
 *   5. FLOPs: nominal and executed counts;
 *   6. the per-step statistics.
 * Everything runs without MPI (one rank).
 *
 * An independent reference (stage_ref) recomputes the experts' routing from
 * the layer's input and a row selection: x + Attn(x) among the selected rows
 * (block.h's attention sublayer), then RMSNorm_mlp, gate logits, softmax and
 * top-k in double, and MODEL.md's admission rule written out again.  The
 * record hook's "experts" array ([nseq][S][top_k]: the column, -1 dropped, -2
 * the row skipped the block) is checked against it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/block.h"
#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "mod/mod.h"
#include "moe/moe.h"
#include "moe/staged.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const layer_kind *const kinds[] = { &dense_kind,      &mod_kind,    &moe_kind,
                                           &integrated_kind, &staged_kind, NULL };

/* ------------------------------------------------------------------ */
/* Layer specs                                                          */

typedef struct stcfg {
    double capacity;
    const char *router, *gate, *causal;
    double aux_weight;
    int experts, top_k;
    double cf;     /* capacity_factor */
    int d_ff;      /* expert d_ff */
    double bw, zw; /* balance_weight, z_weight */
} stcfg;

static layer_spec dense_spec(void)
{
    layer_spec s;
    layer_spec_defaults(&s);
    snprintf(s.kind, sizeof(s.kind), "dense");
    return s;
}

/* kind "staged", or "moe" with the same expert settings */
static layer_spec layer_of(const stcfg *c, const char *kind)
{
    layer_spec s;
    layer_spec_defaults(&s);
    snprintf(s.kind, sizeof(s.kind), "%s", kind);
    s.capacity = c->capacity;
    snprintf(s.router, sizeof(s.router), "%s", c->router);
    snprintf(s.gate, sizeof(s.gate), "%s", c->gate);
    snprintf(s.causal, sizeof(s.causal), "%s", c->causal);
    s.aux_weight = c->aux_weight;
    s.experts = c->experts;
    s.top_k = c->top_k;
    s.capacity_factor = c->cf;
    s.expert_d_ff = c->d_ff;
    s.balance_weight = c->bw;
    s.z_weight = c->zw;
    return s;
}

static bool is_learned(const stcfg *c)
{
    return !strcmp(c->router, "learned");
}

static bool has_pred(const stcfg *c)
{
    return is_learned(c) && !strcmp(c->causal, "predictor");
}

/* MODEL.md: k = max(1, floor(capacity S)); the expert capacity per sequence
 * is ceil(cf top_k k / E) on that nominal k; cf 0: no dropping. */
static int nominal_k(const stcfg *c, int S)
{
    int k = (int)floor(c->capacity * S);
    return k < 1 ? 1 : k;
}

static int nominal_capacity(const stcfg *c, int S)
{
    return c->cf <= 0.0 ? INT32_MAX : (int)ceil(c->cf * c->top_k * nominal_k(c, S) / c->experts);
}

/* ------------------------------------------------------------------ */
/* Routing records through the kind's record hook                       */

#define MAX_ROWS 1024
#define MAX_SLOTS 2048

enum { HAS_SELECTED = 1, HAS_SCORES = 2, HAS_CAUSAL = 4, HAS_PRED = 8, HAS_EXPERTS = 16,
       HAS_WEIGHTS = 32 };

typedef struct routing {
    int nseq, S, K, n, nk; /* n = nseq S rows, nk = n K slots */
    unsigned has;
    unsigned char selected[MAX_ROWS], causal[MAX_ROWS];
    float scores[MAX_ROWS], pred_prob[MAX_ROWS];
    int32_t experts[MAX_SLOTS]; /* column; -1 dropped; -2 the row skipped the block */
    float weights[MAX_SLOTS];
} routing;

static int routing_put(record_sink *s, const char *name, int type, int ndim,
                       const unsigned long long *dims, const void *data)
{
    routing *r = s->user;
    if (ndim < 2 || ndim > 3 || dims[0] != (unsigned long long)r->nseq ||
        dims[1] != (unsigned long long)r->S || (ndim == 3 && dims[2] != (unsigned long long)r->K))
        return -1;
    size_t n = (size_t)r->n, nk = (size_t)r->nk;
    if (ndim == 2 && type == RECORD_UINT8 && !strcmp(name, "selected")) {
        memcpy(r->selected, data, n);
        r->has |= HAS_SELECTED;
    } else if (ndim == 2 && type == RECORD_UINT8 && !strcmp(name, "causal")) {
        memcpy(r->causal, data, n);
        r->has |= HAS_CAUSAL;
    } else if (ndim == 2 && type == RECORD_FLOAT && !strcmp(name, "scores")) {
        memcpy(r->scores, data, n * sizeof(float));
        r->has |= HAS_SCORES;
    } else if (ndim == 2 && type == RECORD_FLOAT && !strcmp(name, "pred_prob")) {
        memcpy(r->pred_prob, data, n * sizeof(float));
        r->has |= HAS_PRED;
    } else if (ndim == 3 && type == RECORD_INT32 && !strcmp(name, "experts")) {
        memcpy(r->experts, data, nk * sizeof(int32_t));
        r->has |= HAS_EXPERTS;
    } else if (ndim == 3 && type == RECORD_FLOAT && !strcmp(name, "weights")) {
        memcpy(r->weights, data, nk * sizeof(float));
        r->has |= HAS_WEIGHTS;
    } else {
        return -1;
    }
    return 0;
}

static routing *routing_new(void)
{
    routing *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    return r;
}

/* The record of layer l after the last forward over nseq sequences (a moe
 * layer records experts and weights only). */
static void read_routing(model *m, int l, int nseq, routing *out)
{
    layer *ly = &m->layers[l];
    fwd_args a = { .dims = &m->dims, .nseq = nseq, .seq_len = m->dims.seq_len };
    record_sink sink = { .put = routing_put, .user = out };
    out->nseq = nseq;
    out->S = m->dims.seq_len;
    out->K = ly->spec.top_k;
    out->n = nseq * out->S;
    out->nk = out->n * out->K;
    assert_true(out->nk <= MAX_SLOTS);
    out->has = 0;
    assert_non_null(ly->kind->record);
    assert_int_equal(ly->kind->record(ly, &a, &sink), 0);
    unsigned need = HAS_EXPERTS | HAS_WEIGHTS;
    if (ly->kind == &staged_kind)
        need |= HAS_SELECTED | HAS_SCORES | HAS_CAUSAL;
    assert_int_equal(out->has & need, need);
}

static int count_value(const routing *r, int32_t v)
{
    int c = 0;
    for (int i = 0; i < r->nk; i++)
        c += r->experts[i] == v;
    return c;
}

static int count_kept(const routing *r)
{
    int c = 0;
    for (int i = 0; i < r->nk; i++)
        c += r->experts[i] >= 0;
    return c;
}

/* ------------------------------------------------------------------ */
/* Fixtures                                                             */

typedef struct fixture {
    model *m;
    uint16_t *tokens;
    batch b;
    mode_ctx ctx;
} fixture;

static void make(fixture *f, model_dims dims, const layer_spec *specs, int nseq, uint64_t seed)
{
    char err[256] = "";
    memset(f, 0, sizeof(*f));
    int rc = build_model(&f->m, &dims, specs, kinds, nseq, err, sizeof(err));
    if (rc)
        print_message("build_model: %s\n", err);
    assert_int_equal(rc, 0);
    model_init(f->m, seed);
    f->tokens = malloc((size_t)nseq * (dims.seq_len + 1) * sizeof(uint16_t));
    assert_non_null(f->tokens);
    pcg32 r;
    pcg32_seed(&r, seed, 7);
    for (int i = 0; i < nseq * (dims.seq_len + 1); i++)
        f->tokens[i] = (uint16_t)pcg32_bounded(&r, (uint32_t)dims.vocab);
    f->b = (batch){ .tokens = f->tokens, .nseq = nseq, .step = 0, .seq0 = 0, .global_seqs = nseq };
    f->ctx.size = 1; /* comm NULL: one rank */
    f->ctx.seed = seed;
}

static void unmake(fixture *f)
{
    free_model(&f->m);
    free(f->tokens);
}

/* As test_mod.c and test_moe.c: normal-init tensors x mult (std 0.02 -> 0.2
 * for mult 10), gains 1 + 0.3 N(0,1), biases 0.3 N(0,1), so every gradient is
 * well above float32 noise. */
static void scale_weights(model *m, float mult, uint64_t seed)
{
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        float *p = m->params + mt->offset;
        pcg32 r;
        pcg32_seed(&r, seed, (uint64_t)t);
        for (long i = 0; i < mt->numel; i++) {
            switch (mt->desc.init) {
            case INIT_NORMAL: p[i] *= mult; break;
            case INIT_ONES: p[i] = 1.0f + 0.3f * pcg32_normal(&r); break;
            case INIT_ZEROS: p[i] = 0.3f * pcg32_normal(&r); break;
            }
        }
    }
}

static const model_tensor *tensor_at(const model *m, const char *path)
{
    const model_tensor *t = model_find_tensor(m, path);
    if (!t)
        print_message("no tensor %s\n", path);
    assert_non_null(t);
    return t;
}

static float *param_at(model *m, const char *path)
{
    return m->params + tensor_at(m, path)->offset;
}

/* Scale layer l's tensor name when the layer has it. */
static void scale_if(model *m, int l, const char *name, float mult)
{
    char path[MODE_TENSOR_PATH];
    snprintf(path, sizeof(path), "layers/%d/%s", l, name);
    const model_tensor *t = model_find_tensor(m, path);
    for (long i = 0; t && i < t->numel; i++)
        m->params[t->offset + i] *= mult;
}

static void fill_at(model *m, const char *path, float v)
{
    const model_tensor *t = tensor_at(m, path);
    for (long i = 0; i < t->numel; i++)
        m->params[t->offset + i] = v;
}

/* Copy every tensor of src that dst has under the same path; the count. */
static int copy_by_name(model *dst, const model *src)
{
    int copied = 0;
    for (int t = 0; t < dst->n_tensors; t++) {
        const model_tensor *dt = &dst->tensors[t];
        const model_tensor *st = model_find_tensor(src, dt->path);
        if (!st)
            continue;
        assert_int_equal(st->numel, dt->numel);
        memcpy(dst->params + dt->offset, src->params + st->offset,
               (size_t)dt->numel * sizeof(float));
        copied++;
    }
    return copied;
}

static double rel_err(double a, double b)
{
    double den = fmax(fabs(a), fabs(b));
    return den > 0.0 ? fabs(a - b) / den : 0.0;
}

/* max |a - b| and that over max |b| */
static void max_diff(const float *a, const float *b, size_t n, double *abs_out, double *rel_out)
{
    double mx = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)b[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    }
    *abs_out = diff;
    *rel_out = diff / fmax(mx, 1e-30);
}

static model_dims small_dims(int n_layers, int seq_len)
{
    model_dims d = { .vocab = 23, .d_model = 16, .n_heads = 2, .d_head = 8, .d_ff = 24,
                     .n_layers = n_layers, .seq_len = seq_len };
    return d;
}

static void forward(fixture *f, fwd_mode mode, fwd_result *r)
{
    fwd_result tmp;
    assert_int_equal(model_forward(f->m, &f->ctx, &f->b, mode, r ? r : &tmp), 0);
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* ------------------------------------------------------------------ */
/* The reference routing of the experts                                 */

typedef struct stage_ref {
    int nseq, S, K, E, nsel;
    int *row, *ss;   /* [nsel] row of each selected row; [nseq+1] */
    int32_t *pos;    /* [nsel] original positions */
    float *h;        /* [nsel][d] x + Attn(x) among the selected rows */
    double *p, *lse; /* [nsel][E] softmax of RMSNorm_mlp(h) Wg (double); [nsel] */
    int32_t *col;    /* [nsel][K] top_k columns before capacity, ties to the lower index */
    double min_gap;  /* min over rows and k <= K of the k-th largest logit minus the (k+1)-th */
} stage_ref;

static void ref_free(stage_ref *g)
{
    free(g->row);
    free(g->ss);
    free(g->pos);
    free(g->h);
    free(g->p);
    free(g->lse);
    free(g->col);
    memset(g, 0, sizeof(*g));
}

/* Layer l (staged) after the last forward over nseq sequences, with the rows
 * take[nseq*S] taking the block: its input is m->resid's layer l slice. */
static void ref_build(model *m, int l, int nseq, const unsigned char *take, stage_ref *g)
{
    const model_dims *dm = &m->dims;
    const layer *ly = &m->layers[l];
    int S = dm->seq_len, d = dm->d_model, n = nseq * S;
    memset(g, 0, sizeof(*g));
    g->nseq = nseq;
    g->S = S;
    g->K = ly->spec.top_k;
    g->E = ly->spec.experts;
    int E = g->E, K = g->K;
    g->row = malloc((size_t)n * sizeof(int));
    g->ss = malloc((size_t)(nseq + 1) * sizeof(int));
    g->pos = malloc((size_t)n * sizeof(int32_t));
    g->h = malloc((size_t)n * d * sizeof(float));
    g->p = malloc((size_t)n * E * sizeof(double));
    g->lse = malloc((size_t)n * sizeof(double));
    g->col = malloc((size_t)n * K * sizeof(int32_t));
    float *xs = malloc((size_t)n * d * sizeof(float));
    assert_true(g->row && g->ss && g->pos && g->h && g->p && g->lse && g->col && xs);
    const float *x = m->resid + (size_t)l * n * d;
    long sq = 0;
    for (int b = 0; b < nseq; b++) {
        g->ss[b] = g->nsel;
        for (int i = 0; i < S; i++) {
            if (!take[b * S + i])
                continue;
            g->row[g->nsel] = b * S + i;
            g->pos[g->nsel] = i;
            memcpy(xs + (size_t)g->nsel * d, x + (size_t)(b * S + i) * d,
                   (size_t)d * sizeof(float));
            g->nsel++;
        }
        long ns = g->nsel - g->ss[b];
        sq += ns * ns;
    }
    g->ss[nseq] = g->nsel;
    char path[MODE_TENSOR_PATH];
#define LW(name) (snprintf(path, sizeof(path), "layers/%d/%s", l, name), param_at(m, path))
    attn_cache c;
    assert_int_equal(build_attn_cache(&c, dm, g->nsel > 0 ? g->nsel : 1,
                                      sq > 0 ? sq * dm->n_heads : 1),
                     0);
    attn_weights aw = { .norm = LW("attn_norm"), .wq = LW("wq"), .wk = LW("wk"), .wv = LW("wv"),
                        .wo = LW("wo") };
    row_set rs = { .n = g->nsel, .nseq = nseq, .seq_start = g->ss, .pos = g->pos };
    fwd_args a = { .dims = dm, .rope = m->rope, .mode = FWD_EVAL_TOPK, .nseq = nseq,
                   .seq_len = S, .seq_scale = 1.0f };
    if (g->nsel > 0)
        attn_forward(&c, g->h, xs, &rs, &aw, &a);
    free_attn_cache(&c);
    free(xs);
    const float *gain = LW("mlp_norm"), *wg = LW("gate");
#undef LW
    g->min_gap = HUGE_VAL;
    double lg[64];
    for (int j = 0; j < g->nsel; j++) {
        const float *hr = g->h + (size_t)j * d;
        double ms = 0.0;
        for (int q = 0; q < d; q++)
            ms += (double)hr[q] * (double)hr[q];
        double rstd = 1.0 / sqrt(ms / d + 1e-5);
        for (int e = 0; e < E; e++)
            lg[e] = 0.0;
        for (int q = 0; q < d; q++) {
            double mq = (double)hr[q] * rstd * (double)gain[q];
            for (int e = 0; e < E; e++)
                lg[e] += mq * (double)wg[(size_t)q * E + e];
        }
        double mx = lg[0], s = 0.0;
        for (int e = 1; e < E; e++)
            mx = fmax(mx, lg[e]);
        for (int e = 0; e < E; e++)
            s += exp(lg[e] - mx);
        g->lse[j] = mx + log(s);
        for (int e = 0; e < E; e++)
            g->p[(size_t)j * E + e] = exp(lg[e] - g->lse[j]);
        int32_t *cl = g->col + (size_t)j * K;
        unsigned long long used = 0;
        for (int k = 0; k <= K && k < E; k++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!(used >> e & 1ull) && (best < 0 || lg[e] > lg[best]))
                    best = e;
            if (k > 0) /* the order of the first K+1 columns is the routing */
                g->min_gap = fmin(g->min_gap, lg[cl[k - 1]] - lg[best]);
            if (k == K)
                break;
            cl[k] = best;
            used |= 1ull << best;
        }
    }
}

/* MODEL.md's admission on the selected rows: per sequence in position order,
 * first choice before second, at most capacity per expert; -2 elsewhere. */
static void admit_reference(const stage_ref *g, int capacity, int32_t *want)
{
    int K = g->K;
    for (int i = 0; i < g->nseq * g->S * K; i++)
        want[i] = -2;
    for (int b = 0; b < g->nseq; b++) {
        int count[64] = { 0 };
        for (int j = g->ss[b]; j < g->ss[b + 1]; j++) {
            for (int k = 0; k < K; k++) {
                int e = g->col[(size_t)j * K + k];
                bool keep = count[e] < capacity;
                count[e] += keep;
                want[(size_t)g->row[j] * K + k] = keep ? e : -1;
            }
        }
    }
}

/* The record against the reference: choices, and weights (p of the chosen
 * column, kept or dropped; 0 for skipped rows). */
static void check_record(const stage_ref *g, const routing *r, int capacity, const char *label)
{
    int32_t want[MAX_SLOTS];
    int K = g->K;
    assert_int_equal(r->nk, g->nseq * g->S * K);
    admit_reference(g, capacity, want);
    int bad = 0;
    for (int i = 0; i < r->nk; i++) {
        if (r->experts[i] != want[i] && bad++ < 8)
            print_message("[%s] seq %d pos %d slot %d: record %d, reference %d\n", label,
                          i / K / g->S, i / K % g->S, i % K, r->experts[i], want[i]);
    }
    assert_int_equal(bad, 0);
    double werr = 0.0;
    for (int j = 0; j < g->nsel; j++)
        for (int k = 0; k < K; k++) {
            double p = g->p[(size_t)j * g->E + g->col[(size_t)j * K + k]];
            werr = fmax(werr, fabs((double)r->weights[(size_t)g->row[j] * K + k] - p));
        }
    if (werr > 2e-5)
        print_message("[%s] recorded weights differ from the reference p by %.2e\n", label, werr);
    assert_true(werr <= 2e-5);
}

/* Switch balance loss of sequence b over its selected rows, and the sums of
 * lse^2 and of the gate entropy; returns the rows. */
static int aux_reference(const stage_ref *g, int b, double *bl, double *zsum, double *ent)
{
    int E = g->E, K = g->K, r0 = g->ss[b], r1 = g->ss[b + 1], nb = r1 - r0;
    *bl = *zsum = *ent = 0.0;
    for (int e = 0; e < E && nb > 0; e++) {
        double chosen = 0.0, meanp = 0.0;
        for (int j = r0; j < r1; j++) {
            meanp += g->p[(size_t)j * E + e] / nb;
            for (int k = 0; k < K; k++)
                chosen += g->col[(size_t)j * K + k] == e;
        }
        *bl += chosen / ((double)nb * K) * meanp;
    }
    *bl *= E;
    for (int j = r0; j < r1; j++) {
        *zsum += g->lse[j] * g->lse[j];
        for (int e = 0; e < E; e++) {
            double p = g->p[(size_t)j * E + e];
            *ent -= p > 0.0 ? p * log(p) : 0.0;
        }
    }
    return nb;
}

/* Per sequence: the k-th best router score minus the (k+1)-th (min over
 * sequences); how far the top-k selection is from flipping. */
static double router_gap(const routing *r, int k)
{
    double gap = HUGE_VAL;
    for (int b = 0; b < r->nseq && k < r->S; b++) {
        double lo_in = HUGE_VAL, hi_out = -HUGE_VAL;
        for (int i = 0; i < r->S; i++) {
            double sc = (double)r->scores[b * r->S + i];
            if (r->selected[b * r->S + i])
                lo_in = fmin(lo_in, sc);
            else
                hi_out = fmax(hi_out, sc);
        }
        gap = fmin(gap, lo_in - hi_out);
    }
    return gap;
}

/* ------------------------------------------------------------------ */
/* 1. Finite-difference gradients                                       */

/* J = ce_sum / n_positions + aux_loss + side_loss from a FWD_TRAIN forward.
 * As in test_mod.c: the predictor reads stop-gradient(x), so backward gives
 * d(ce + aux)/d theta for every tensor and d side/d theta for the
 * predictor's own tensors only (side_loss's dependence on x is deliberately
 * dropped).  The differences are taken of J without side_loss for the
 * model's tensors and with it for the predictor's (ce and aux never depend
 * on those). */
static double J_of(fixture *f, fwd_result *res)
{
    fwd_result r;
    forward(f, FWD_TRAIN, &r);
    if (res)
        *res = r;
    return r.ce_sum / (double)r.n_positions + r.aux_loss + r.side_loss;
}

static double train_grad(fixture *f, fwd_result *res)
{
    model_zero_grad(f->m);
    double J = J_of(f, res);
    assert_int_equal(model_backward(f->m, &f->ctx, &f->b), 0);
    return J;
}

typedef struct fd_env {
    fixture *f;
    int layer;             /* the staged layer */
    const routing *base;   /* its record at the base point */
    const int32_t *base_col; /* the reference's columns before capacity at the base point */
} fd_env;

typedef struct fd_out {
    double e2, e4, an, fd4;
    int tries;
} fd_out;

/* J (with side_loss when with_side) at p0 + s u on [off, off+n); *same is
 * cleared when the routing differs from the base: the selected rows, the
 * record's experts, or the columns before capacity (which the balance loss
 * counts even when dropped). */
static double J_at(const fd_env *env, size_t off, size_t n, const float *p0, const float *u,
                   double s, int with_side, int *same)
{
    fixture *f = env->f;
    float *p = f->m->params + off;
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((double)p0[i] + s * (double)u[i]);
    fwd_result r;
    double J = J_of(f, &r) - (with_side ? 0.0 : r.side_loss);
    routing *tmp = routing_new();
    read_routing(f->m, env->layer, f->b.nseq, tmp);
    if (memcmp(tmp->selected, env->base->selected, (size_t)tmp->n) ||
        memcmp(tmp->experts, env->base->experts, (size_t)tmp->nk * sizeof(int32_t))) {
        *same = 0;
    } else {
        stage_ref g;
        ref_build(f->m, env->layer, f->b.nseq, tmp->selected, &g);
        if (memcmp(g.col, env->base_col, (size_t)g.nsel * g.K * sizeof(int32_t)))
            *same = 0;
        ref_free(&g);
    }
    free(tmp);
    memcpy(p, p0, n * sizeof(float));
    return J;
}

/* Directional derivative along a random u within [off, off+n) (times mask[i]
 * when mask is not NULL) against <grad, u>, routing held fixed: when a
 * perturbed evaluation changes it, another direction is drawn (up to 8
 * tries).  Directions with |<grad,u>| < 0.5 |grad| are redrawn first (they
 * measure rounding noise).  e2, e4: relative errors of the 2nd- and 4th-order
 * central differences. */
static void check_direction(const fd_env *env, size_t off, size_t n, const float *mask,
                            int with_side, pcg32 *r, double h, fd_out *o)
{
    fixture *f = env->f;
    float *p = f->m->params + off;
    const float *grad = f->m->grads + off;
    float *u = malloc(n * sizeof(float)), *p0 = malloc(n * sizeof(float));
    assert_true(u && p0);
    memcpy(p0, p, n * sizeof(float));
    int tries = 0, ok = 0, draws = 0;
    double an = 0.0, jp = 0, jm = 0, jp2 = 0, jm2 = 0, gn = 0.0;
    for (size_t i = 0; i < n; i++) {
        double gi = (double)grad[i] * (mask ? (double)mask[i] : 1.0);
        gn += gi * gi;
    }
    gn = sqrt(gn);
    while (!ok && tries < 8 && draws < 64) {
        draws++;
        an = 0.0;
        for (size_t i = 0; i < n; i++) {
            u[i] = pcg32_normal(r) * (mask ? mask[i] : 1.0f);
            an += (double)u[i] * (double)grad[i];
        }
        if (fabs(an) < 0.5 * gn)
            continue;
        tries++;
        int same = 1;
        jp = J_at(env, off, n, p0, u, h, with_side, &same);
        jm = J_at(env, off, n, p0, u, -h, with_side, &same);
        jp2 = J_at(env, off, n, p0, u, 2 * h, with_side, &same);
        jm2 = J_at(env, off, n, p0, u, -2 * h, with_side, &same);
        ok = same;
    }
    assert_memory_equal(p, p0, n * sizeof(float));
    free(u);
    free(p0);
    if (!ok)
        print_message("routing changed in all %d directions\n", tries);
    assert_true(ok);
    double fd2 = (jp - jm) / (2.0 * h);
    o->fd4 = (8.0 * (jp - jm) - (jp2 - jm2)) / (12.0 * h);
    o->e2 = rel_err(fd2, an);
    o->e4 = rel_err(o->fd4, an);
    o->an = an;
    o->tries = tries;
}

/* Step h = 2e-3 along N(0,1) directions (weights ~0.2, gains ~1) and the
 * 4th-order difference within 5e-3 relative of <grad, u>, as test_mod.c and
 * test_moe.c.  Routing moves with the router scores (top-k over the
 * sequence) and the gate logits (top-k over the experts) by ~1e-2 at 2h:
 * the seeds are the best of 1..3000 for the smaller of the two margins
 * (printed: 0.09 to 0.33), with drops where cf > 0 and every expert used,
 * and a direction that flips a decision anyway is redrawn.  All
 * parameters at once: a quarter of the step. */
#define FD_STEP 2e-3
#define FD_TOL 5e-3
#define FD_STEP_ALL 5e-4

/* The dense + staged model of the gradient checks, its record and reference
 * at the base point; returns J. */
static double fd_setup(fixture *f, const stcfg *c, uint64_t seed, routing *base, stage_ref *g,
                       fwd_result *r0)
{
    const int nseq = 3, S = 12;
    model_dims dims = small_dims(2, S);
    layer_spec specs[2] = { dense_spec(), layer_of(c, "staged") };
    make(f, dims, specs, nseq, seed);
    scale_weights(f->m, 10.0f, seed + 1);
    double J0 = train_grad(f, r0);
    read_routing(f->m, 1, nseq, base);
    ref_build(f->m, 1, nseq, base->selected, g);
    return J0;
}

static void fd_case(const char *label, const stcfg *c, uint64_t seed)
{
    const int nseq = 3, S = 12, E = c->experts, k = nominal_k(c, S);
    fixture f;
    routing *base = routing_new();
    stage_ref g;
    fwd_result r0;
    double J0 = fd_setup(&f, c, seed, base, &g, &r0);
    for (int b = 0; b < nseq; b++) {
        int cnt = 0;
        for (int i = 0; i < S; i++)
            cnt += base->selected[b * S + i];
        assert_int_equal(cnt, k);
    }
    int cap = nominal_capacity(c, S);
    check_record(&g, base, cap, label);
    int dropped = count_value(base, -1);
    double rgap = is_learned(c) ? router_gap(base, k) : HUGE_VAL;
    print_message("[%s] J = %.6f (ce %.6f, aux %.4e, side %.4e); expert capacity %d: %d of %d "
                  "assignments dropped; margins: router %.4f, gate %.4f\n",
                  label, J0, r0.ce_sum / (double)r0.n_positions, r0.aux_loss, r0.side_loss,
                  cap == INT32_MAX ? -1 : cap, dropped, nseq * k * c->top_k, rgap, g.min_gap);
    assert_true(r0.aux_loss > 0.0);
    assert_true(has_pred(c) ? r0.side_loss > 0.0 : r0.side_loss == 0.0);
    assert_true((model_find_tensor(f.m, "layers/1/router") != NULL) == is_learned(c));
    assert_true((model_find_tensor(f.m, "layers/1/pred_w1") != NULL) == has_pred(c));
    assert_true(c->cf > 0.0 ? dropped > 0 : dropped == 0);
    for (int e = 0; e < E; e++) /* every expert computes something: its gradient is checked */
        assert_true(count_value(base, e) > 0);

    pcg32 r;
    pcg32_seed(&r, seed, 5);
    fd_env env = { .f = &f, .layer = 1, .base = base, .base_col = g.col };
    float *mask = calloc(f.m->n_params, sizeof(float));
    assert_non_null(mask);
    double worst = 0.0;
    fd_out o;
    for (int t = 0; t < f.m->n_tensors; t++) {
        const model_tensor *mt = &f.m->tensors[t];
        int is_pred = strstr(mt->path, "/pred_") != NULL;
        for (long i = 0; i < mt->numel; i++)
            mask[mt->offset + i] = is_pred ? 0.0f : 1.0f;
        check_direction(&env, mt->offset, (size_t)mt->numel, NULL, is_pred, &r, FD_STEP, &o);
        print_message("[%s] grad %-20s rel err %.2e (2nd order %.2e)  <g,u> = %+.4e%s\n", label,
                      mt->path, o.e4, o.e2, o.an, o.tries > 1 ? "  (redrawn)" : "");
        assert_true(fabs(o.an) > 1e-4);
        assert_true(o.e4 < FD_TOL);
        worst = fmax(worst, o.e4);
    }
    /* every tensor but the predictor's at once (J without side_loss) */
    check_direction(&env, 0, f.m->n_params, mask, 0, &r, FD_STEP_ALL, &o);
    print_message("[%s] all parameters at once: rel err %.2e (2nd order %.2e); worst tensor %.2e\n",
                  label, o.e4, o.e2, worst);
    assert_true(o.e4 < FD_TOL);
    free(mask);

    if (has_pred(c)) {
        /* stop-gradient, forward side: the predictor changes neither the CE
         * nor the aux loss, to the bit */
        float *p = param_at(f.m, "layers/1/pred_w1");
        float keep = p[3];
        p[3] += 0.5f;
        fwd_result r1;
        J_of(&f, &r1);
        p[3] = keep;
        assert_true(r1.ce_sum == r0.ce_sum);
        assert_true(r1.aux_loss == r0.aux_loss);
        assert_true(r1.side_loss != r0.side_loss);
        /* backward side: side_loss does depend on tok_emb, but backward's
         * tok_emb gradient is that of ce + aux alone */
        const model_tensor *emb = tensor_at(f.m, "tok_emb");
        pcg32 r2 = r;
        fd_out full, main_only;
        check_direction(&env, emb->offset, (size_t)emb->numel, NULL, 1, &r, FD_STEP, &full);
        check_direction(&env, emb->offset, (size_t)emb->numel, NULL, 0, &r2, FD_STEP, &main_only);
        print_message("[%s] d/du along tok_emb: J %+.4e, J - side %+.4e, backward %+.4e\n", label,
                      full.fd4, main_only.fd4, main_only.an);
        assert_true(main_only.e4 < FD_TOL);
        assert_true(fabs(full.fd4 - main_only.fd4) > 1e-3 * fabs(main_only.an));
    }
    ref_free(&g);
    free(base);
    unmake(&f);
}

static void test_gradients_sigmoid_aux(void **state)
{
    stcfg c = { 0.5, "learned", "sigmoid", "aux", 0.3, 4, 1, 0.0, 20, 0.1, 0.05 };
    fd_case("learned sigmoid aux, top1 cf0", &c, 2503);
}

static void test_gradients_raw_none(void **state)
{
    stcfg c = { 0.5, "learned", "raw", "none", 0.3, 4, 2, 1.0, 20, 0.1, 0.05 };
    fd_case("learned raw none, top2 cf1", &c, 700);
}

static void test_gradients_sigmoid_predictor(void **state)
{
    stcfg c = { 0.5, "learned", "sigmoid", "predictor", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    fd_case("learned sigmoid predictor, top1 cf1", &c, 700);
}

static void test_gradients_random(void **state)
{
    stcfg c = { 0.5, "random", "sigmoid", "aux", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    fd_case("random, top1 cf1", &c, 1792);
}

/* ------------------------------------------------------------------ */
/* 2. Capacity 1: the moe layer                                         */

/* dense + staged and dense + moe on the same weights (every tensor of the
 * staged layer copied by name from the moe one). */
static void pair(fixture *fs, fixture *fm, const stcfg *c, int nseq, uint64_t seed)
{
    model_dims dims = small_dims(2, 12);
    layer_spec ss[2] = { dense_spec(), layer_of(c, "staged") };
    layer_spec sm[2] = { dense_spec(), layer_of(c, "moe") };
    make(fs, dims, ss, nseq, seed);
    make(fm, dims, sm, nseq, seed);
    scale_weights(fs->m, 10.0f, seed + 1);
    scale_weights(fm->m, 10.0f, seed + 1);
    scale_if(fm->m, 1, "gate", 3.0f); /* content-dependent routing, with drops */
    scale_if(fs->m, 1, "router", 5.0f);
    assert_int_equal(copy_by_name(fs->m, fm->m), fm->m->n_tensors);
    memcpy(fs->tokens, fm->tokens, (size_t)nseq * (dims.seq_len + 1) * sizeof(uint16_t));
}

/* The random router (gate 1, no parameters) at capacity 1: every row takes
 * the block (in causal mode too: the threshold is Phi^-1(0)), the expert
 * capacity is counted on k = S like moe's, and the layer is moe's. */
static void cap1_random_case(const char *label, int top_k, double cf, uint64_t seed)
{
    const int nseq = 3, S = 12, d = 16, V = 23, n = nseq * S;
    stcfg c = { 1.0, "random", "sigmoid", "aux", 0.3, 4, top_k, cf, 20, 0.1, 0.05 };
    fixture fs, fm;
    pair(&fs, &fm, &c, nseq, seed);
    assert_int_equal(fs.m->n_tensors, fm.m->n_tensors);
    assert_int_equal(fs.m->n_params, fm.m->n_params);
    routing *rs = routing_new(), *rm = routing_new();
    int drops = 0;
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result a, b;
        forward(&fs, (fwd_mode)mode, &a);
        forward(&fm, (fwd_mode)mode, &b);
        read_routing(fs.m, 1, nseq, rs);
        read_routing(fm.m, 1, nseq, rm); /* moe puts experts and weights only */
        for (int i = 0; i < n; i++)
            assert_true(rs->selected[i] == 1 && rs->causal[i] == 1);
        assert_memory_equal(rs->experts, rm->experts, (size_t)rs->nk * sizeof(int32_t));
        double wd, wr, yd, yr, ld, lr;
        max_diff(rs->weights, rm->weights, (size_t)rs->nk, &wd, &wr);
        max_diff(fs.m->resid + (size_t)2 * n * d, fm.m->resid + (size_t)2 * n * d, (size_t)n * d,
                 &yd, &yr);
        max_diff(fs.m->logits, fm.m->logits, (size_t)n * V, &ld, &lr);
        drops = count_value(rs, -1);
        print_message("[%s] mode %d: %d dropped; staged - moe: weights %.2e, layer output %.2e "
                      "(rel %.2e), logits %.2e (rel %.2e); ce %.9g vs %.9g, aux %.9g vs %.9g\n",
                      label, mode, drops, wd, yd, yr, ld, lr, a.ce_sum, b.ce_sum, a.aux_loss,
                      b.aux_loss);
        assert_true(wd == 0.0);
        assert_true(yr <= 1e-6);
        assert_true(lr <= 1e-6);
        assert_true(rel_err(a.ce_sum, b.ce_sum) <= 1e-6);
        assert_true(rel_err(a.aux_loss, b.aux_loss) <= 1e-6);
        assert_true(mode == FWD_TRAIN ? a.aux_loss > 0.0 : a.aux_loss == 0.0);
        assert_true(cf > 0.0 ? drops > 0 : drops == 0);
    }
    train_grad(&fs, NULL);
    train_grad(&fm, NULL);
    double worst = 0.0;
    for (int t = 0; t < fs.m->n_tensors; t++) {
        const model_tensor *st = &fs.m->tensors[t], *mt = tensor_at(fm.m, st->path);
        double gd, gr;
        max_diff(fs.m->grads + st->offset, fm.m->grads + mt->offset, (size_t)st->numel, &gd, &gr);
        if (gr > 1e-5)
            print_message("[%s] grad %s differs by %.2e relative\n", label, st->path, gr);
        assert_true(gr <= 1e-5);
        worst = fmax(worst, gr);
    }
    print_message("[%s] gradients: worst tensor differs by %.2e relative (of its max)\n", label,
                  worst);
    free(rs);
    free(rm);
    unmake(&fs);
    unmake(&fm);
}

/* A learned router with the sigmoid gate at capacity 1: every row takes the
 * block, x <- x + sigmoid(r) (moe(x) - x) with r = x . w_r; in training the
 * aux loss adds aux_weight mean BCE(sigmoid(r), 1) to moe's. */
static void cap1_learned_case(uint64_t seed)
{
    const int nseq = 3, S = 12, d = 16, n = nseq * S;
    stcfg c = { 1.0, "learned", "sigmoid", "aux", 0.3, 4, 2, 1.0, 20, 0.1, 0.05 };
    fixture fs, fm;
    pair(&fs, &fm, &c, nseq, seed);
    const float *wr = param_at(fs.m, "layers/1/router");
    routing *rs = routing_new(), *rm = routing_new();
    for (int mode = 0; mode < 2; mode++) {
        fwd_result a, b;
        forward(&fs, (fwd_mode)mode, &a);
        forward(&fm, (fwd_mode)mode, &b);
        read_routing(fs.m, 1, nseq, rs);
        read_routing(fm.m, 1, nseq, rm);
        assert_memory_equal(rs->experts, rm->experts, (size_t)rs->nk * sizeof(int32_t));
        const float *x = fs.m->resid + (size_t)n * d, *ys = fs.m->resid + (size_t)2 * n * d;
        const float *ym = fm.m->resid + (size_t)2 * n * d;
        assert_memory_equal(x, fm.m->resid + (size_t)n * d, (size_t)n * d * sizeof(float));
        double worst = 0.0, gmin = 1.0, gmax = 0.0, moved = 0.0, bce = 0.0;
        for (int i = 0; i < n; i++) {
            double rr = 0.0;
            for (int q = 0; q < d; q++)
                rr += (double)x[(size_t)i * d + q] * (double)wr[q];
            double g = sigmoid(rr);
            gmin = fmin(gmin, g);
            gmax = fmax(gmax, g);
            bce += log1p(exp(-rr)); /* BCE(sigmoid(r), 1) */
            assert_true(rs->selected[i] == 1);
            for (int q = 0; q < d; q++) {
                size_t o = (size_t)i * d + q;
                double want = (double)x[o] + g * ((double)ym[o] - (double)x[o]);
                worst = fmax(worst, fabs((double)ys[o] - want) / fmax(1.0, fabs(want)));
                moved = fmax(moved, fabs((double)ym[o] - (double)x[o]));
            }
        }
        double aux_want = b.aux_loss + c.aux_weight * bce / n;
        print_message("[learned sigmoid, capacity 1, mode %d] max rel diff from x + sigmoid(r) "
                      "(moe(x) - x) %.2e; gates in [%.3f, %.3f]; moe moves x by up to %.2f; aux "
                      "%.9g, expected %.9g\n",
                      mode, worst, gmin, gmax, moved, a.aux_loss,
                      mode == FWD_TRAIN ? aux_want : 0.0);
        assert_true(worst < 1e-5);
        assert_true(gmax - gmin > 0.3 && moved > 0.1);
        assert_true(rel_err(a.aux_loss, mode == FWD_TRAIN ? aux_want : 0.0) < 1e-5);
    }
    free(rs);
    free(rm);
    unmake(&fs);
    unmake(&fm);
}

static void test_capacity1_is_moe(void **state)
{
    cap1_random_case("random, capacity 1, top2 cf1", 2, 1.0, 21);
    cap1_random_case("random, capacity 1, top1 cf0.5", 1, 0.5, 22);
    cap1_random_case("random, capacity 1, top2 cf0", 2, 0.0, 23);
    cap1_learned_case(24);
}

/* ------------------------------------------------------------------ */
/* 3. Expert capacity on the nominal k                                  */

/* One staged layer (capacity 0.5: k = 6 of 12; E 4, top_k 1, cf 1: expert
 * capacity ceil(1 * 1 * 6 / 4) = 2) whose routing is a function of the
 * token: tok_emb[v] has component 0 equal to 3 and component 1 equal to
 * (v - 11.5) / 10, the router is e_1 (r = x_1, positive for v >= 12, the
 * causal rule), column 0 of Wo is zero (so h_0 = x_0 = 3) and the gate is
 * zero but for Wg[0][0] = 1: every selected row's logits are (m_0 > 0, 0, 0,
 * 0), expert 0 for all.  Expected per sequence, by position: '0' expert 0
 * kept, 'x' dropped, '.' skipped the block. */
static void test_nominal_capacity(void **state)
{
    const int nseq = 3, S = 12, d = 16, E = 4, n = nseq * S;
    stcfg c = { 0.5, "learned", "sigmoid", "aux", 0.3, E, 1, 1.0, 8, 0.1, 0.05 };
    assert_int_equal(nominal_capacity(&c, S), 2);
    model_dims dims = small_dims(1, S);
    layer_spec spec = layer_of(&c, "staged");
    fixture f;
    make(&f, dims, &spec, nseq, 300);
    scale_weights(f.m, 10.0f, 301);
    float *wo = param_at(f.m, "layers/0/wo"), *emb = param_at(f.m, "tok_emb");
    for (int i = 0; i < d; i++)
        wo[(size_t)i * d] = 0.0f;
    for (int v = 0; v < dims.vocab; v++) {
        emb[(size_t)v * d] = 3.0f;
        emb[(size_t)v * d + 1] = (float)(v - 11.5) / 10.0f;
    }
    fill_at(f.m, "layers/0/router", 0.0f);
    param_at(f.m, "layers/0/router")[1] = 1.0f;
    param_at(f.m, "layers/0/mlp_norm")[0] = 1.0f;
    fill_at(f.m, "layers/0/gate", 0.0f);
    param_at(f.m, "layers/0/gate")[0] = 1.0f;
    /* sequence 0: 9 positive scores (causal mode takes 9 rows: a capacity
     * recounted on them would be 3); sequence 1: 3 (it would be 1);
     * sequence 2: 12 (it would be 3) */
    const int toks[3][12] = { { 20, 3, 13, 22, 5, 14, 19, 12, 8, 15, 21, 16 },
                              { 4, 18, 2, 7, 13, 9, 1, 17, 6, 10, 0, 11 },
                              { 22, 12, 21, 13, 20, 14, 19, 15, 18, 16, 17, 12 } };
    const char *want_topk[3] = { "0..0..x..xxx", ".0..0x.x.x.x", "0.0.x.x.x.x." };
    const char *want_causal[3] = { "0.0x.xxx.xxx", ".0..0..x....", "00xxxxxxxxxx" };
    for (int s = 0; s < nseq; s++)
        for (int i = 0; i < S; i++)
            f.tokens[s * (S + 1) + i] = (uint16_t)toks[s][i];
    routing *r = routing_new();
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result res;
        forward(&f, (fwd_mode)mode, &res);
        read_routing(f.m, 0, nseq, r);
        const char *const *want = mode == FWD_EVAL_CAUSAL ? want_causal : want_topk;
        const unsigned char *take = mode == FWD_EVAL_CAUSAL ? r->causal : r->selected;
        int bad = 0;
        for (int i = 0; i < n; i++) {
            char w = want[i / S][i % S];
            int32_t e = w == '0' ? 0 : w == 'x' ? -1 : -2;
            assert_int_equal(r->causal[i], toks[i / S][i % S] >= 12);
            assert_int_equal(take[i], w != '.');
            if (r->experts[i] != e && bad++ < 8)
                print_message("mode %d: seq %d pos %d: record %d, expected %d\n", mode, i / S,
                              i % S, r->experts[i], e);
        }
        assert_int_equal(bad, 0);
        /* the rows: skipped ones are copied; dropped ones get the gated
         * attention sublayer alone, x + g (h - x); kept ones more */
        stage_ref g;
        ref_build(f.m, 0, nseq, take, &g);
        const float *x = f.m->resid, *y = f.m->resid + (size_t)n * d;
        double dropped_err = 0.0, kept_min = HUGE_VAL;
        for (int j = 0; j < g.nsel; j++) {
            int i = g.row[j];
            double gate = sigmoid((double)r->scores[i]), diff = 0.0;
            for (int q = 0; q < d; q++) {
                size_t o = (size_t)i * d + q;
                double hq = (double)g.h[(size_t)j * d + q];
                double want_y = (double)x[o] + gate * (hq - (double)x[o]);
                diff = fmax(diff, fabs((double)y[o] - want_y));
            }
            if (r->experts[i] == -1)
                dropped_err = fmax(dropped_err, diff);
            else
                kept_min = fmin(kept_min, diff);
        }
        for (int i = 0; i < n; i++)
            if (!take[i])
                assert_memory_equal(y + (size_t)i * d, x + (size_t)i * d,
                                    (size_t)d * sizeof(float));
        print_message("[nominal capacity, mode %d] 2 kept per sequence; dropped rows = "
                      "x + g (h - x) within %.2e; kept rows move by at least %.2e more\n",
                      mode, dropped_err, kept_min);
        assert_true(dropped_err < 1e-5);
        assert_true(kept_min > 1e-3);
        ref_free(&g);
        if (mode == FWD_TRAIN) {
            double sums[64];
            staged_kind.stat_sums(&f.m->layers[0], sums);
            assert_true(sums[6] == 6.0 && sums[7] == 0.0 && sums[8] == 0.0 && sums[9] == 0.0);
            assert_true(sums[10] == 12.0); /* dropped */
        }
    }
    free(r);
    unmake(&f);
}

/* ------------------------------------------------------------------ */
/* 4. Decoding and causality                                            */

/* [staged, dense, staged], weights scaled up, routers, predictors and gates
 * more so (std 1) so that routing depends on content. */
static void routed_model(fixture *f, const stcfg *c, int nseq, int S, uint64_t seed)
{
    model_dims dims = small_dims(3, S);
    layer_spec specs[3] = { layer_of(c, "staged"), dense_spec(), layer_of(c, "staged") };
    make(f, dims, specs, nseq, seed);
    scale_weights(f->m, 10.0f, seed + 1);
    for (int l = 0; l < 3; l += 2) {
        scale_if(f->m, l, "router", 5.0f);
        scale_if(f->m, l, "pred_w1", 5.0f);
        scale_if(f->m, l, "pred_w2", 5.0f);
        scale_if(f->m, l, "gate", 5.0f);
    }
}

static void decode_case(const char *label, const stcfg *c, uint64_t seed)
{
    const int S = 16, V = 23;
    fixture f;
    routed_model(&f, c, 1, S, seed);
    forward(&f, FWD_EVAL_CAUSAL, NULL);
    float *ref = malloc((size_t)S * V * sizeof(float));
    assert_non_null(ref);
    memcpy(ref, f.m->logits, (size_t)S * V * sizeof(float));
    routing *rt[3] = { routing_new(), NULL, routing_new() };
    int drops = 0, ntaken = 0;
    for (int l = 0; l < 3; l += 2) {
        read_routing(f.m, l, 1, rt[l]);
        /* the causal-mode record: the causal rows, capacity on the nominal k */
        stage_ref g;
        ref_build(f.m, l, 1, rt[l]->causal, &g);
        check_record(&g, rt[l], nominal_capacity(c, S), label);
        ref_free(&g);
        drops += count_value(rt[l], -1);
        for (int i = 0; i < S; i++)
            ntaken += rt[l]->causal[i];
    }
    assert_true(drops > 0);
    assert_true(ntaken > 0 && ntaken < 2 * S);

    float logits[23];
    unsigned char taken[3];
    double worst = 0.0, worst_abs = 0.0;
    /* twice: after decode_begin the caches and the admission counters restart */
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(model_decode_begin(f.m, S), 0);
        for (int pos = 0; pos < S; pos++) {
            assert_int_equal(model_decode_step(f.m, &f.ctx, f.tokens[pos], pos, logits, taken), 0);
            double diff, rel;
            max_diff(logits, ref + (size_t)pos * V, (size_t)V, &diff, &rel);
            worst = fmax(worst, rel);
            worst_abs = fmax(worst_abs, diff);
            if (rel >= 1e-4)
                print_message("[%s] position %d: decode differs by %.2e relative\n", label, pos,
                              rel);
            assert_true(rel < 1e-4);
            assert_int_equal(taken[1], 1);
            for (int l = 0; l < 3; l += 2)
                assert_int_equal(taken[l], rt[l]->causal[pos]);
        }
    }
    print_message("[%s] decode vs causal forward: max rel err %.2e (max abs %.2e); %d of %d rows "
                  "taken, %d assignments dropped, over 2 layers\n",
                  label, worst, worst_abs, ntaken, 2 * S, drops);
    free(ref);
    free(rt[0]);
    free(rt[2]);
    unmake(&f);
}

static void test_decode(void **state)
{
    stcfg aux = { 0.5, "learned", "sigmoid", "aux", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    stcfg pred = { 0.5, "learned", "sigmoid", "predictor", 0.3, 4, 2, 1.0, 20, 0.1, 0.05 };
    stcfg rnd = { 0.5, "random", "sigmoid", "aux", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    decode_case("learned aux top1", &aux, 41);
    decode_case("learned predictor top2", &pred, 42);
    decode_case("random top1", &rnd, 43);
}

/* Changing tokens after position t never moves a logit or a routing
 * decision at positions <= t in FWD_EVAL_CAUSAL mode (bit for bit). */
static void causal_case(const char *label, const stcfg *c, uint64_t seed)
{
    const int nseq = 3, S = 16, V = 23, sq = 1, K = c->top_k;
    fixture f;
    routed_model(&f, c, nseq, S, seed);
    size_t nl = (size_t)nseq * S * V;
    float *l0 = malloc(nl * sizeof(float));
    uint16_t *keep = malloc((size_t)nseq * (S + 1) * sizeof(uint16_t));
    routing *rb = routing_new(), *rn = routing_new();
    assert_true(l0 && keep);
    memcpy(keep, f.tokens, (size_t)nseq * (S + 1) * sizeof(uint16_t));
    forward(&f, FWD_EVAL_CAUSAL, NULL);
    memcpy(l0, f.m->logits, nl * sizeof(float));
    read_routing(f.m, 2, nseq, rb);
    assert_true(count_value(rb, -1) > 0);
    pcg32 r;
    pcg32_seed(&r, seed, 3);
    int checks = 0, later_changed = 0;
    for (int t = 0; t < S - 1; t++) {
        for (int trial = 0; trial < 3; trial++) {
            memcpy(f.tokens, keep, (size_t)nseq * (S + 1) * sizeof(uint16_t));
            uint16_t *tok = f.tokens + (size_t)sq * (S + 1);
            for (int j = t + 1; j <= S; j++)
                tok[j] = (uint16_t)pcg32_bounded(&r, (uint32_t)V);
            forward(&f, FWD_EVAL_CAUSAL, NULL);
            read_routing(f.m, 2, nseq, rn);
            for (int s = 0; s < nseq; s++) {
                int upto = s == sq ? t + 1 : S;
                size_t o = (size_t)s * S * V;
                if (memcmp(f.m->logits + o, l0 + o, (size_t)upto * V * sizeof(float))) {
                    print_message("[%s] seq %d changed below t = %d\n", label, s, t);
                    fail();
                }
                assert_memory_equal(rn->causal + s * S, rb->causal + s * S, (size_t)upto);
                size_t ro = (size_t)s * S * K;
                assert_memory_equal(rn->experts + ro, rb->experts + ro,
                                    (size_t)upto * K * sizeof(int32_t));
            }
            later_changed += memcmp(rn->experts + (size_t)(sq * S + t + 1) * K,
                                    rb->experts + (size_t)(sq * S + t + 1) * K,
                                    (size_t)(S - t - 1) * K * sizeof(int32_t)) != 0;
            checks++;
        }
    }
    print_message("[%s] causal mode: %d changes of later tokens, earlier logits and routing "
                  "bit-identical; later routing of layer 2 changed in %d of them\n",
                  label, checks, later_changed);
    assert_true(later_changed > checks / 2);
    free(l0);
    free(keep);
    free(rb);
    free(rn);
    unmake(&f);
}

static void test_causal(void **state)
{
    stcfg aux = { 0.5, "learned", "sigmoid", "aux", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    stcfg pred = { 0.5, "learned", "sigmoid", "predictor", 0.3, 4, 2, 1.0, 20, 0.1, 0.05 };
    stcfg rnd = { 0.5, "random", "sigmoid", "aux", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    causal_case("learned aux top1", &aux, 51);
    causal_case("learned predictor top2", &pred, 52);
    causal_case("random top1", &rnd, 53);
}

/* ------------------------------------------------------------------ */
/* 5. FLOPs                                                             */

static double attn_hand(double n, double d)
{
    return 2.0 * (4.0 * n * d * d + 2.0 * n * n * d);
}

static void flops_case(const char *label, const stcfg *c, uint64_t seed)
{
    const int nseq = 3, S = 12, E = c->experts, K = c->top_k, k = nominal_k(c, S);
    const double d = 16, ff = 24, V = 23, fe = c->d_ff;
    model_dims dims = small_dims(2, S);
    layer_spec specs[2] = { dense_spec(), layer_of(c, "staged") };
    double router = is_learned(c) ? 2.0 * S * d : 0.0;
    if (has_pred(c))
        router += 2.0 * S * (64.0 * d + 64.0);
    double nominal = router + attn_hand(k, d) + 2.0 * k * d * E + (double)k * K * 6.0 * d * fe;
    double dense = attn_hand(S, d) + 6.0 * S * d * ff, head = 2.0 * S * d * V;
    assert_true(rel_err(staged_kind.flops(&specs[1], &dims), nominal) < 1e-12);
    fixture f;
    make(&f, dims, specs, nseq, seed);
    scale_weights(f.m, 10.0f, seed + 1);
    scale_if(f.m, 1, "gate", 3.0f);
    scale_if(f.m, 1, "pred_w1", 5.0f); /* the predictor's causal rule takes some rows */
    scale_if(f.m, 1, "pred_w2", 5.0f);
    double per_layer[2];
    assert_true(rel_err(model_flops_per_seq(f.m, per_layer), dense + nominal + head) < 1e-12);
    assert_true(rel_err(per_layer[1], nominal) < 1e-12);
    routing *r = routing_new();
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result res;
        forward(&f, (fwd_mode)mode, &res);
        read_routing(f.m, 1, nseq, r);
        const unsigned char *take = mode == FWD_EVAL_CAUSAL ? r->causal : r->selected;
        double want = nseq * (dense + head + router);
        int nsel = 0, off_k = 0;
        for (int b = 0; b < nseq; b++) {
            int ns = 0;
            for (int i = 0; i < S; i++)
                ns += take[b * S + i];
            want += attn_hand(ns, d);
            nsel += ns;
            off_k += ns != k;
        }
        int kept = count_kept(r);
        want += 2.0 * nsel * d * E + kept * 6.0 * d * fe;
        print_message("[%s] mode %d: executed %.6e, expected %.6e: %d rows, %d of %d assignments "
                      "kept (nominal %.6e)\n",
                      label, mode, res.flops_executed, want, nsel, kept, nsel * K,
                      nseq * (dense + nominal + head));
        assert_true(rel_err(res.flops_executed, want) < 1e-12);
        if (mode == FWD_EVAL_CAUSAL)
            assert_true(off_k > 0 && nsel > 0); /* else causal mode would not be told apart */
        else
            assert_true(nsel == nseq * k && kept < nsel * K); /* drops: executed < nominal */
    }
    free(r);
    unmake(&f);
}

static void test_flops(void **state)
{
    stcfg aux = { 0.5, "learned", "sigmoid", "aux", 0.3, 4, 2, 1.0, 20, 0.1, 0.05 };
    stcfg pred = { 0.25, "learned", "sigmoid", "predictor", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    stcfg rnd = { 0.5, "random", "sigmoid", "aux", 0.3, 4, 1, 0.5, 20, 0.1, 0.05 };
    flops_case("learned aux top2 cf1", &aux, 61);
    flops_case("learned predictor top1 cf1", &pred, 62);
    flops_case("random top1 cf0.5", &rnd, 63);
}

/* ------------------------------------------------------------------ */
/* 6. Statistics                                                        */

static void stats_case(const char *label, const stcfg *c, uint64_t seed)
{
    const int nseq = 3, S = 12, E = c->experts, K = c->top_k, k = nominal_k(c, S), n = nseq * S;
    model_dims dims = small_dims(2, S);
    layer_spec specs[2] = { dense_spec(), layer_of(c, "staged") };
    fixture f;
    make(&f, dims, specs, nseq, seed);
    scale_weights(f.m, 10.0f, seed + 1);
    scale_if(f.m, 1, "gate", 3.0f);
    const layer *ly = &f.m->layers[1];
    const layer_kind *kd = ly->kind;
    assert_true(kd == &staged_kind);
    int n_sums = 0;
    assert_int_equal(kd->stat_count(ly, &n_sums), 5 + E + 4);
    assert_int_equal(n_sums, 6 + E + 6);
    static const char *const mod_names[] = { "accuracy", "precision", "recall", "causal_capacity",
                                             "topk_capacity" };
    static const char *const tail[] = { "dropped", "balance_loss", "z_loss", "router_entropy" };
    char name[64], want_name[64];
    for (int col = 0; col < 5 + E + 4; col++) {
        kd->stat_name(ly, col, name, sizeof(name));
        if (col < 5)
            snprintf(want_name, sizeof(want_name), "%s", mod_names[col]);
        else if (col < 5 + E)
            snprintf(want_name, sizeof(want_name), "tokens_%d", col - 5);
        else
            snprintf(want_name, sizeof(want_name), "%s", tail[col - 5 - E]);
        assert_string_equal(name, want_name);
    }

    fwd_result res;
    forward(&f, FWD_TRAIN, &res);
    routing *r = routing_new();
    read_routing(f.m, 1, nseq, r);
    stage_ref g;
    ref_build(f.m, 1, nseq, r->selected, &g);
    check_record(&g, r, nominal_capacity(c, S), label);
    double sums[64], cols[64];
    kd->stat_sums(ly, sums);
    /* the router's: tp fp fn tn of the causal rule against top-k, causal, tokens */
    double want_sums[6] = { 0, 0, 0, 0, 0, n };
    for (int i = 0; i < n; i++) {
        want_sums[(r->causal[i] ? 0 : 2) + (r->selected[i] ? 0 : 1)] += 1.0;
        want_sums[4] += r->causal[i];
    }
    for (int i = 0; i < 6; i++)
        assert_true(sums[i] == want_sums[i]);
    /* the experts': kept per expert and dropped over the selected rows,
     * then balance, z, entropy sums, selected rows, sequences */
    const double *xs = sums + 6;
    for (int e = 0; e < E; e++)
        assert_true(xs[e] == count_value(r, e));
    assert_true(xs[E] == count_value(r, -1));
    assert_true(xs[E + 4] == nseq * k);
    assert_true(xs[E + 5] == nseq);
    double kept_total = xs[E];
    for (int e = 0; e < E; e++)
        kept_total += xs[e];
    assert_true(kept_total == nseq * k * K);
    kd->stat_columns(ly, sums, cols);
    double bl = 0.0, z = 0.0, ent = 0.0, rows = 0.0, bce = 0.0;
    for (int b = 0; b < nseq; b++) {
        double bb, zz, ee;
        rows += aux_reference(&g, b, &bb, &zz, &ee);
        bl += bb / nseq;
        z += zz;
        ent += ee;
    }
    z /= rows;
    ent /= rows;
    for (int i = 0; i < n; i++) {
        double x = (double)r->scores[i];
        bce += fmax(x, 0.0) + log1p(exp(-fabs(x))) - (r->selected[i] ? x : 0.0);
    }
    double aux_want = c->bw * bl + c->zw * z +
                      (is_learned(c) && !strcmp(c->causal, "aux") ? c->aux_weight * bce / n : 0.0);
    const double *xc = cols + 5;
    print_message("[%s] statistics: accuracy %.3f precision %.3f recall %.3f causal %.3f "
                  "topk %.3f; kept",
                  label, cols[0], cols[1], cols[2], cols[3], cols[4]);
    for (int e = 0; e < E; e++)
        print_message(" %g", xc[e]);
    print_message(", dropped %g; balance %.6f (ref %.6f), z %.6f (ref %.6f), entropy %.6f (ref "
                  "%.6f); aux %.6e (ref %.6e)\n",
                  xc[E], xc[E + 1], bl, xc[E + 2], z, xc[E + 3], ent, res.aux_loss, aux_want);
    assert_true(fabs(cols[0] - (want_sums[0] + want_sums[3]) / n) < 1e-12);
    assert_true(fabs(cols[3] - want_sums[4] / n) < 1e-12);
    assert_true(fabs(cols[4] - (double)k / S) < 1e-12);
    for (int e = 0; e <= E; e++)
        assert_true(xc[e] == xs[e]);
    assert_true(xc[E] > 0.0);
    assert_true(rel_err(xc[E + 1], bl) < 1e-5);
    assert_true(rel_err(xc[E + 2], z) < 1e-5);
    assert_true(rel_err(xc[E + 3], ent) < 1e-5);
    assert_true(rel_err(res.aux_loss, aux_want) < 1e-5);
    /* an evaluation forward (other tokens) leaves the training statistics */
    for (int i = 0; i < nseq * (S + 1); i++)
        f.tokens[i] = (uint16_t)((f.tokens[i] + 7) % dims.vocab);
    fwd_result re;
    forward(&f, FWD_EVAL_CAUSAL, &re);
    assert_true(re.aux_loss == 0.0);
    double sums2[64];
    kd->stat_sums(ly, sums2);
    assert_memory_equal(sums, sums2, (size_t)n_sums * sizeof(double));
    ref_free(&g);
    free(r);
    unmake(&f);
}

static void test_stats(void **state)
{
    stcfg aux = { 0.5, "learned", "sigmoid", "aux", 0.3, 4, 2, 1.0, 20, 0.1, 0.05 };
    stcfg rnd = { 0.25, "random", "sigmoid", "aux", 0.3, 3, 1, 1.0, 20, 0.1, 0.05 };
    stats_case("learned aux top2 cf1", &aux, 71);
    stats_case("random E3 top1 cf1", &rnd, 72);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nominal_capacity),
        cmocka_unit_test(test_capacity1_is_moe),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_gradients_sigmoid_aux),
        cmocka_unit_test(test_gradients_raw_none),
        cmocka_unit_test(test_gradients_sigmoid_predictor),
        cmocka_unit_test(test_gradients_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
