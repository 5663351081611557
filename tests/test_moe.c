/* Tests of the `moe` and `integrated` layer kinds (MODEL.md "Layer kinds"):
 *   a. finite-difference gradients of `dense, moe` and `dense, integrated`
 *      models, routing held fixed, top_k 1 and 2, with and without dropping,
 *      balance and z losses on (and checked on their own);
 *   b. capacity and dropping on hand-made routings (position order, first
 *      choice before second, capacity_factor 0, the no-op never dropped,
 *      ties to the lower index, experts_capacity());
 *   c. tokens sent to the no-op (or dropped) get exactly no MLP update;
 *   d. `integrated` whose no-op is never chosen equals `moe` on the same
 *      weights;
 *   e. FLOPs: executed (as routed) and nominal counts;
 *   f. decoding with the KV cache gives the causal-mode logits (with drops);
 *   g. the layer is causal (admission in position order);
 *   h. the per-step statistics.
 * Everything runs without MPI (one rank: the all-to-all is a copy).
 *
 * An independent reference of the routing (gate_reference) recomputes the
 * gate from the layer's input: h through block.h's attention sublayer, then
 * RMSNorm_mlp, logits, softmax and top-k in double, and the admission rule
 * of MODEL.md written out again (admit_reference).  The record hook's
 * "experts" array is checked against it on random models as well as on the
 * hand-made ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/block.h"
#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "moe/moe.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const layer_kind *const kinds[] = { &dense_kind, &moe_kind, &integrated_kind, NULL };

/* ------------------------------------------------------------------ */
/* Layer specs                                                          */

typedef struct moecfg {
    const char *kind; /* "moe" | "integrated" */
    int experts, top_k;
    double cf;        /* capacity_factor */
    int d_ff;         /* expert d_ff */
    double bw, zw;    /* balance_weight, z_weight */
} moecfg;

static layer_spec dense_spec(void)
{
    layer_spec s;
    layer_spec_defaults(&s);
    snprintf(s.kind, sizeof(s.kind), "dense");
    return s;
}

static layer_spec moe_spec(const moecfg *c)
{
    layer_spec s;
    layer_spec_defaults(&s);
    snprintf(s.kind, sizeof(s.kind), "%s", c->kind);
    s.experts = c->experts;
    s.top_k = c->top_k;
    s.capacity_factor = c->cf;
    s.expert_d_ff = c->d_ff;
    s.balance_weight = c->bw;
    s.z_weight = c->zw;
    return s;
}

static bool is_integrated(const moecfg *c)
{
    return !strcmp(c->kind, "integrated");
}

/* MODEL.md: ceil(capacity_factor * top_k * S / E); 0 means no dropping. */
static int capacity_formula(double cf, int top_k, int S, int E)
{
    return cf <= 0.0 ? INT32_MAX : (int)ceil(cf * top_k * S / E);
}

/* ------------------------------------------------------------------ */
/* Routing records through the kind's record hook                       */

#define MAX_SLOTS 4096

typedef struct routing {
    int nseq, S, K, n; /* n = nseq * S * K slots */
    int has_experts, has_weights;
    int32_t experts[MAX_SLOTS]; /* chosen column, -1 when dropped */
    float weights[MAX_SLOTS];   /* p of the chosen column */
} routing;

static int routing_put(record_sink *s, const char *name, int type, int ndim,
                       const unsigned long long *dims, const void *data)
{
    routing *r = s->user;
    if (ndim != 3 || dims[0] != (unsigned long long)r->nseq ||
        dims[1] != (unsigned long long)r->S || dims[2] != (unsigned long long)r->K)
        return -1;
    if (dims[0] * dims[1] * dims[2] > MAX_SLOTS)
        return -1;
    if (!strcmp(name, "experts") && type == RECORD_INT32) {
        memcpy(r->experts, data, (size_t)r->n * sizeof(int32_t));
        r->has_experts = 1;
    } else if (!strcmp(name, "weights") && type == RECORD_FLOAT) {
        memcpy(r->weights, data, (size_t)r->n * sizeof(float));
        r->has_weights = 1;
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

/* The routing of layer l after the last forward over nseq sequences. */
static void read_routing(model *m, int l, int nseq, routing *out)
{
    layer *ly = &m->layers[l];
    fwd_args a = { .dims = &m->dims, .nseq = nseq, .seq_len = m->dims.seq_len };
    record_sink sink = { .put = routing_put, .user = out };
    out->nseq = nseq;
    out->S = m->dims.seq_len;
    out->K = ly->spec.top_k;
    out->n = nseq * out->S * out->K;
    out->has_experts = out->has_weights = 0;
    assert_non_null(ly->kind->record);
    assert_int_equal(ly->kind->record(ly, &a, &sink), 0);
    assert_true(out->has_experts && out->has_weights);
}

static int count_value(const routing *r, int32_t v)
{
    int c = 0;
    for (int i = 0; i < r->n; i++)
        c += r->experts[i] == v;
    return c;
}

/* Kept assignments at real experts (0 <= e < E). */
static int count_real(const routing *r, int E)
{
    int c = 0;
    for (int i = 0; i < r->n; i++)
        c += r->experts[i] >= 0 && r->experts[i] < E;
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

/* As test_model.c and test_mod.c: normal-init tensors x mult (std 0.02 ->
 * 0.2 for mult 10), gains 1 + 0.3 N(0,1), so every gradient is well above
 * float32 noise. */
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

static const model_tensor *tensor_of(const model *m, int l, const char *name)
{
    char path[MODE_TENSOR_PATH];
    if (l < 0)
        snprintf(path, sizeof(path), "%s", name);
    else
        snprintf(path, sizeof(path), "layers/%d/%s", l, name);
    const model_tensor *t = model_find_tensor(m, path);
    if (!t)
        print_message("no tensor %s\n", path);
    assert_non_null(t);
    return t;
}

static float *param(model *m, int l, const char *name)
{
    return m->params + tensor_of(m, l, name)->offset;
}

static void fill_tensor(model *m, int l, const char *name, float v)
{
    const model_tensor *t = tensor_of(m, l, name);
    for (long i = 0; i < t->numel; i++)
        m->params[t->offset + i] = v;
}

static void scale_tensor(model *m, int l, const char *name, float mult)
{
    const model_tensor *t = tensor_of(m, l, name);
    for (long i = 0; i < t->numel; i++)
        m->params[t->offset + i] *= mult;
}

/* Copy every tensor of src that dst has under the same path and shape. */
static void copy_by_name(model *dst, const model *src, const char *skip)
{
    for (int t = 0; t < dst->n_tensors; t++) {
        const model_tensor *dt = &dst->tensors[t];
        if (skip && strstr(dt->path, skip))
            continue;
        const model_tensor *st = model_find_tensor(src, dt->path);
        if (!st)
            continue;
        assert_int_equal(st->numel, dt->numel);
        memcpy(dst->params + dt->offset, src->params + st->offset, (size_t)dt->numel * sizeof(float));
    }
}

static double rel_err(double a, double b)
{
    double den = fmax(fabs(a), fabs(b));
    return den > 0.0 ? fabs(a - b) / den : 0.0;
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

/* ------------------------------------------------------------------ */
/* The reference routing                                                */

typedef struct gate_ref {
    int n, N, K, E, S, nseq;
    bool noop;
    float *h;       /* [n][d] x + Attn(x), through block.h's attn_forward */
    double *logits; /* [n][N] RMSNorm_mlp(h) Wg, in double */
    double *p;      /* [n][N] softmax */
    double *lse;    /* [n] */
    int32_t *col;   /* [n][K] top_k columns before capacity, ties to the lower index */
    double min_gap; /* min over rows and k <= K of the k-th largest logit minus the (k+1)-th */
} gate_ref;

static void gate_ref_free(gate_ref *g)
{
    free(g->h);
    free(g->logits);
    free(g->p);
    free(g->lse);
    free(g->col);
    memset(g, 0, sizeof(*g));
}

/* The gate of layer l (moe or integrated) after the last forward over nseq
 * sequences: its input is m->resid's layer l slice. */
static void gate_reference(model *m, int l, int nseq, gate_ref *g)
{
    const model_dims *dm = &m->dims;
    const layer *ly = &m->layers[l];
    int S = dm->seq_len, d = dm->d_model, n = nseq * S;
    memset(g, 0, sizeof(*g));
    g->nseq = nseq;
    g->S = S;
    g->n = n;
    g->noop = ly->kind == &integrated_kind;
    g->E = ly->spec.experts;
    g->N = g->E + (g->noop ? 1 : 0);
    g->K = ly->spec.top_k;
    int N = g->N, K = g->K;
    g->h = malloc((size_t)n * d * sizeof(float));
    g->logits = malloc((size_t)n * N * sizeof(double));
    g->p = malloc((size_t)n * N * sizeof(double));
    g->lse = malloc((size_t)n * sizeof(double));
    g->col = malloc((size_t)n * K * sizeof(int32_t));
    int *ss = malloc((size_t)(nseq + 1) * sizeof(int));
    int32_t *pos = malloc((size_t)n * sizeof(int32_t));
    assert_true(g->h && g->logits && g->p && g->lse && g->col && ss && pos);
    for (int b = 0; b <= nseq; b++)
        ss[b] = b * S;
    for (int j = 0; j < n; j++)
        pos[j] = j % S;
    attn_cache c;
    assert_int_equal(build_attn_cache(&c, dm, n, (long)nseq * dm->n_heads * S * S), 0);
    attn_weights aw = { .norm = param(m, l, "attn_norm"), .wq = param(m, l, "wq"),
                        .wk = param(m, l, "wk"), .wv = param(m, l, "wv"), .wo = param(m, l, "wo") };
    row_set rs = { .n = n, .nseq = nseq, .seq_start = ss, .pos = pos };
    fwd_args a = { .dims = dm, .rope = m->rope, .mode = FWD_EVAL_TOPK, .nseq = nseq,
                   .seq_len = S, .seq_scale = 1.0f };
    attn_forward(&c, g->h, m->resid + (size_t)l * n * d, &rs, &aw, &a);
    free_attn_cache(&c);
    free(ss);
    free(pos);

    const float *gain = param(m, l, "mlp_norm"), *wg = param(m, l, "gate");
    g->min_gap = HUGE_VAL;
    for (int i = 0; i < n; i++) {
        const float *hr = g->h + (size_t)i * d;
        double ms = 0.0;
        for (int j = 0; j < d; j++)
            ms += (double)hr[j] * (double)hr[j];
        double rstd = 1.0 / sqrt(ms / d + 1e-5);
        double *lg = g->logits + (size_t)i * N, *p = g->p + (size_t)i * N;
        for (int e = 0; e < N; e++)
            lg[e] = 0.0;
        for (int j = 0; j < d; j++) {
            double mj = (double)hr[j] * rstd * (double)gain[j];
            for (int e = 0; e < N; e++)
                lg[e] += mj * (double)wg[(size_t)j * N + e];
        }
        double mx = lg[0], s = 0.0;
        for (int e = 1; e < N; e++)
            mx = fmax(mx, lg[e]);
        for (int e = 0; e < N; e++)
            s += exp(lg[e] - mx);
        g->lse[i] = mx + log(s);
        for (int e = 0; e < N; e++)
            p[e] = exp(lg[e] - g->lse[i]);
        int32_t *cl = g->col + (size_t)i * K;
        unsigned long long used = 0;
        for (int k = 0; k <= K && k < N; k++) {
            int best = -1;
            for (int e = 0; e < N; e++)
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

/* MODEL.md's admission: per sequence, in position order, first choice
 * before second, at most capacity per real expert; the no-op never drops. */
static void admit_reference(const gate_ref *g, int capacity, int32_t *choice)
{
    int count[65];
    for (int b = 0; b < g->nseq; b++) {
        memset(count, 0, sizeof(count));
        for (int i = b * g->S; i < (b + 1) * g->S; i++) {
            for (int k = 0; k < g->K; k++) {
                int e = g->col[(size_t)i * g->K + k];
                bool keep = (g->noop && e == g->E) || count[e] < capacity;
                count[e] += keep;
                choice[(size_t)i * g->K + k] = keep ? e : -1;
            }
        }
    }
}

/* The record against the reference: choices, and weights (p of the chosen
 * column, kept or dropped).  Returns the largest weight error. */
static double check_record(const gate_ref *g, const routing *r, int capacity, const char *label)
{
    int32_t *want = malloc((size_t)r->n * sizeof(int32_t));
    assert_non_null(want);
    assert_int_equal(r->n, g->n * g->K);
    admit_reference(g, capacity, want);
    double werr = 0.0;
    for (int i = 0; i < r->n; i++) {
        if (r->experts[i] != want[i])
            print_message("[%s] row %d slot %d: record %d, reference %d (column %d)\n", label,
                          i / g->K, i % g->K, r->experts[i], want[i], g->col[i]);
        assert_int_equal(r->experts[i], want[i]);
        double p = g->p[(size_t)(i / g->K) * g->N + g->col[i]];
        werr = fmax(werr, fabs((double)r->weights[i] - p));
    }
    if (werr > 2e-5)
        print_message("[%s] recorded weights differ from the reference p by %.2e\n", label, werr);
    assert_true(werr <= 2e-5);
    free(want);
    return werr;
}

/* Switch balance loss of one sequence over all N columns, z (sum of lse^2)
 * and entropy, from the reference. */
static void aux_reference(const gate_ref *g, int b, double *bl, double *zsum, double *ent)
{
    int N = g->N, K = g->K, S = g->S;
    *bl = *zsum = *ent = 0.0;
    for (int e = 0; e < N; e++) {
        double chosen = 0.0, meanp = 0.0;
        for (int i = b * S; i < (b + 1) * S; i++) {
            meanp += g->p[(size_t)i * N + e] / S;
            for (int k = 0; k < K; k++)
                chosen += g->col[(size_t)i * K + k] == e;
        }
        *bl += chosen / ((double)S * K) * meanp;
    }
    *bl *= N;
    for (int i = b * S; i < (b + 1) * S; i++) {
        *zsum += g->lse[i] * g->lse[i];
        for (int e = 0; e < N; e++) {
            double p = g->p[(size_t)i * N + e];
            *ent -= p > 0.0 ? p * log(p) : 0.0;
        }
    }
}

/* ------------------------------------------------------------------ */
/* a. Finite-difference gradients                                        */

/* J = ce_sum / n_positions + aux_loss from a FWD_TRAIN forward. */
static double J_of(fixture *f, fwd_result *res)
{
    fwd_result r;
    forward(f, FWD_TRAIN, &r);
    if (res)
        *res = r;
    return r.ce_sum / (double)r.n_positions + r.aux_loss;
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
    int layer;               /* the moe/integrated layer */
    const routing *base;     /* its record at the base point */
    const int32_t *base_col; /* its columns before capacity (reference) */
    int aux_only;            /* J = aux_loss alone */
} fd_env;

/* J at p0 + s u (restricted to [off, off+n)); *same is cleared when the
 * routing (the record, or the columns before capacity, which the balance
 * loss counts) differs from the base. */
static double J_at(const fd_env *env, size_t off, size_t n, const float *p0, const float *u,
                   double s, int *same)
{
    fixture *f = env->f;
    float *p = f->m->params + off;
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((double)p0[i] + s * (double)u[i]);
    fwd_result r;
    double J = J_of(f, &r);
    if (env->aux_only)
        J = r.aux_loss;
    routing *tmp = routing_new();
    read_routing(f->m, env->layer, f->b.nseq, tmp);
    if (memcmp(tmp->experts, env->base->experts, (size_t)env->base->n * sizeof(int32_t)))
        *same = 0;
    gate_ref g;
    gate_reference(f->m, env->layer, f->b.nseq, &g);
    if (memcmp(g.col, env->base_col, (size_t)g.n * g.K * sizeof(int32_t)))
        *same = 0;
    gate_ref_free(&g);
    free(tmp);
    memcpy(p, p0, n * sizeof(float));
    return J;
}

/* Directional derivative along a random u within [off, off+n) (times
 * mask[i] when mask is not NULL) against <grad, u>, routing held fixed:
 * when a perturbed evaluation changes it, another direction is drawn (up to
 * 8 tries).  Directions with |<grad,u>| < 0.5 |grad| are redrawn first (they
 * measure rounding noise).  *e2, *e4: relative errors of the 2nd- and
 * 4th-order central differences. */
static void check_direction(const fd_env *env, size_t off, size_t n, const float *grad,
                            const float *mask, pcg32 *r, double h, double *e2, double *e4,
                            double *an_out, int *tries_out)
{
    fixture *f = env->f;
    float *p = f->m->params + off;
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
        jp = J_at(env, off, n, p0, u, h, &same);
        jm = J_at(env, off, n, p0, u, -h, &same);
        jp2 = J_at(env, off, n, p0, u, 2 * h, &same);
        jm2 = J_at(env, off, n, p0, u, -2 * h, &same);
        ok = same;
    }
    assert_memory_equal(p, p0, n * sizeof(float));
    free(u);
    free(p0);
    if (!ok)
        print_message("routing changed in all %d directions\n", tries);
    assert_true(ok);
    double fd2 = (jp - jm) / (2.0 * h);
    double fd4 = (8.0 * (jp - jm) - (jp2 - jm2)) / (12.0 * h);
    *e2 = rel_err(fd2, an);
    *e4 = rel_err(fd4, an);
    *an_out = an;
    *tries_out = tries;
}

/* Step h = 2e-3 along N(0,1) directions (weights ~0.2, gains ~1), the
 * 4th-order difference within 5e-3 relative of <grad, u>, as test_mod.c
 * (measured: mostly 1e-5 to 5e-4, printed).  The gate moves its logits by
 * about h sqrt(d) |u| ~ 1e-2 at 2h, so the seeds are chosen with the top-k
 * margin (printed: the smallest gap between a row's k-th and (k+1)-th
 * largest logit, k <= K: the order of the first choices matters too) well above that: the best of seeds 1..2999 for each
 * configuration, 0.12 to 0.27.  A direction that flips a decision anyway is
 * redrawn. */
#define FD_STEP 2e-3
#define FD_TOL 5e-3
/* All parameters at once move the gate's input through every tensor: a
 * quarter of the step keeps the routing (the derivative along it is large,
 * ~1, so rounding noise stays ~1e-5 relative). */
#define FD_STEP_ALL 5e-4

static const char *const aux_tensors[] = { "tok_emb", "layers/0/wv", "layers/1/wq",
                                           "layers/1/mlp_norm", "layers/1/gate" };

static void fd_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 12;
    model_dims dims = small_dims(2, S);
    layer_spec specs[2] = { dense_spec(), moe_spec(mc) };
    fixture f;
    make(&f, dims, specs, nseq, seed);
    scale_weights(f.m, 10.0f, seed + 1);
    fwd_result r0;
    double J0 = train_grad(&f, &r0);
    routing *base = routing_new();
    read_routing(f.m, 1, nseq, base);
    gate_ref g;
    gate_reference(f.m, 1, nseq, &g);
    int E = mc->experts, cap = capacity_formula(mc->cf, mc->top_k, S, E);
    check_record(&g, base, cap, label);
    int dropped = count_value(base, -1), noop = is_integrated(mc) ? count_value(base, E) : 0;
    print_message("[%s] J = %.6f (ce %.6f, aux %.4e); capacity %d: %d of %d assignments dropped, "
                  "%d to the no-op; top-k margin %.4f\n",
                  label, J0, r0.ce_sum / (double)r0.n_positions, r0.aux_loss,
                  cap == INT32_MAX ? -1 : cap, dropped, base->n, noop, g.min_gap);
    assert_true(r0.aux_loss > 0.0);
    assert_true(mc->cf > 0.0 ? dropped > 0 : dropped == 0);
    if (is_integrated(mc))
        assert_true(noop > 0 && noop < base->n);
    for (int e = 0; e < E; e++) /* every expert computes something: its gradient is checked */
        assert_true(count_value(base, e) > 0);

    pcg32 r;
    pcg32_seed(&r, seed, 5);
    fd_env env = { .f = &f, .layer = 1, .base = base, .base_col = g.col, .aux_only = 0 };
    double worst = 0.0, an, e2, e4;
    int tries;
    for (int t = 0; t < f.m->n_tensors; t++) {
        const model_tensor *mt = &f.m->tensors[t];
        check_direction(&env, mt->offset, (size_t)mt->numel, f.m->grads + mt->offset, NULL, &r,
                        FD_STEP, &e2, &e4, &an, &tries);
        print_message("[%s] grad %-20s rel err %.2e (2nd order %.2e)  <g,u> = %+.4e%s\n", label,
                      mt->path, e4, e2, an, tries > 1 ? "  (redrawn)" : "");
        assert_true(fabs(an) > 1e-4);
        assert_true(e4 < FD_TOL);
        worst = fmax(worst, e4);
    }
    check_direction(&env, 0, f.m->n_params, f.m->grads, NULL, &r, FD_STEP_ALL, &e2, &e4, &an,
                    &tries);
    print_message("[%s] all parameters at once: rel err %.2e (2nd order %.2e); worst tensor %.2e\n",
                  label, e4, e2, worst);
    assert_true(e4 < FD_TOL);

    /* The auxiliary losses on their own: the gradient of balance_weight *
     * balance (then z_weight * z) is the difference of the gradients of two
     * models that differ only in that weight (the routing does not depend on
     * it), checked against finite differences of aux_loss alone.  The CE
     * gradient would otherwise hide a wrong aux gradient. */
    for (int which = 0; which < 2; which++) {
        moecfg c0 = *mc, c1 = *mc;
        c0.bw = c0.zw = 0.0;
        if (which == 0)
            c1.zw = 0.0;
        else
            c1.bw = 0.0;
        layer_spec s0[2] = { dense_spec(), moe_spec(&c0) }, s1[2] = { dense_spec(), moe_spec(&c1) };
        fixture f0, f1;
        make(&f0, dims, s0, nseq, seed);
        make(&f1, dims, s1, nseq, seed);
        assert_int_equal(f0.m->n_params, f.m->n_params);
        assert_int_equal(f1.m->n_params, f.m->n_params);
        memcpy(f0.m->params, f.m->params, f.m->n_params * sizeof(float));
        memcpy(f1.m->params, f.m->params, f.m->n_params * sizeof(float));
        fwd_result ra, rb;
        train_grad(&f0, &ra);
        train_grad(&f1, &rb);
        assert_true(ra.aux_loss == 0.0);
        assert_true(rb.aux_loss > 0.0);
        float *ga = malloc(f.m->n_params * sizeof(float));
        assert_non_null(ga);
        for (size_t i = 0; i < f.m->n_params; i++)
            ga[i] = (float)((double)f1.m->grads[i] - (double)f0.m->grads[i]);
        /* the experts and the head never see the auxiliary losses */
        const char *untouched[] = { "layers/1/experts_w1", "layers/1/experts_w3",
                                    "layers/1/experts_w2", "final_norm" };
        for (int i = 0; i < 4; i++) {
            const model_tensor *mt = model_find_tensor(f.m, untouched[i]);
            assert_non_null(mt);
            for (long j = 0; j < mt->numel; j++)
                assert_true(ga[mt->offset + j] == 0.0f);
        }
        fd_env aenv = { .f = &f1, .layer = 1, .base = base, .base_col = g.col, .aux_only = 1 };
        const char *what = which == 0 ? "balance" : "z-loss";
        for (size_t i = 0; i < sizeof(aux_tensors) / sizeof(aux_tensors[0]); i++) {
            const model_tensor *mt = model_find_tensor(f.m, aux_tensors[i]);
            assert_non_null(mt);
            check_direction(&aenv, mt->offset, (size_t)mt->numel, ga + mt->offset, NULL, &r,
                            FD_STEP, &e2, &e4, &an, &tries);
            print_message("[%s] %s alone (aux %.4e): grad %-18s rel err %.2e  <g,u> = %+.4e%s\n",
                          label, what, rb.aux_loss, mt->path, e4, an,
                          tries > 1 ? "  (redrawn)" : "");
            assert_true(fabs(an) > 1e-6);
            assert_true(e4 < FD_TOL);
        }
        check_direction(&aenv, 0, f.m->n_params, ga, NULL, &r, FD_STEP_ALL, &e2, &e4, &an,
                        &tries);
        print_message("[%s] %s alone, all parameters: rel err %.2e\n", label, what, e4);
        assert_true(e4 < FD_TOL);
        free(ga);
        unmake(&f0);
        unmake(&f1);
    }
    gate_ref_free(&g);
    free(base);
    unmake(&f);
}

static void test_gradients_moe(void **state)
{
    moecfg c = { "moe", 4, 1, 0.0, 20, 0.1, 0.05 };
    fd_case("moe top1 cf0", &c, 232);
    c.cf = 0.5;
    fd_case("moe top1 cf0.5", &c, 232);
    c.top_k = 2;
    c.cf = 0.0;
    fd_case("moe top2 cf0", &c, 256);
    c.cf = 0.5;
    fd_case("moe top2 cf0.5", &c, 256);
}

static void test_gradients_integrated(void **state)
{
    moecfg c = { "integrated", 4, 1, 0.0, 20, 0.1, 0.05 };
    fd_case("integrated top1 cf0", &c, 1599);
    c.cf = 0.5;
    fd_case("integrated top1 cf0.5", &c, 1599);
    c.top_k = 2;
    c.cf = 0.0;
    fd_case("integrated top2 cf0", &c, 2892);
    c.cf = 0.5;
    fd_case("integrated top2 cf0.5", &c, 2892);
}

/* ------------------------------------------------------------------ */
/* b. Capacity and dropping on hand-made routings                        */

/* A one-layer model whose routing is a function of the token alone:
 * Wo = 0 makes Attn(x) = att Wo = 0 exactly, so h = x = tok_emb[v];
 * tok_emb[v] = e_v (one-hot, v < d) and mlp_norm = 1 give
 * m = e_v / sqrt(1/d + 1e-5), so token v's gate logits are row v of Wg
 * times that constant (the other rows add exact zeros). */
static void handmade(fixture *f, const moecfg *mc, int nseq)
{
    model_dims dims = small_dims(1, 12);
    layer_spec s = moe_spec(mc);
    make(f, dims, &s, nseq, 900);
    scale_weights(f->m, 10.0f, 901);
    fill_tensor(f->m, 0, "wo", 0.0f);
    fill_tensor(f->m, 0, "mlp_norm", 1.0f);
    fill_tensor(f->m, 0, "gate", 0.0f);
    fill_tensor(f->m, -1, "tok_emb", 0.0f);
    float *emb = param(f->m, -1, "tok_emb");
    for (int v = 0; v < dims.d_model; v++)
        emb[(size_t)v * dims.d_model + v] = 1.0f;
    for (int i = 0; i < nseq * (dims.seq_len + 1); i++)
        f->tokens[i] = 0;
}

/* Token v's preferences: Wg[v][0..N-1]. */
static void set_prefs(fixture *f, int v, const float *row, int N)
{
    float *wg = param(f->m, 0, "gate");
    memcpy(wg + (size_t)v * N, row, (size_t)N * sizeof(float));
}

/* Sequence s's S input tokens from a string of digits. */
static void set_seq(fixture *f, int s, const char *toks)
{
    int S = f->m->dims.seq_len;
    assert_int_equal((int)strlen(toks), S);
    for (int i = 0; i < S; i++)
        f->tokens[(size_t)s * (S + 1) + i] = (uint16_t)(toks[i] - '0');
}

/* Run the hand-made model in every mode and compare the record with want
 * ([nseq][S][K]); the weights with the softmax of the constructed logits. */
static void expect_routing(fixture *f, const int32_t *want, const char *label)
{
    model *m = f->m;
    int S = m->dims.seq_len, d = m->dims.d_model, nseq = f->b.nseq;
    const layer *ly = &m->layers[0];
    int K = ly->spec.top_k, N = ly->spec.experts + (ly->kind == &integrated_kind ? 1 : 0);
    const float *wg = param(m, 0, "gate");
    double c = 1.0 / sqrt(1.0 / d + 1e-5);
    routing *r = routing_new();
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        forward(f, (fwd_mode)mode, NULL);
        read_routing(m, 0, nseq, r);
        int bad = 0;
        for (int i = 0; i < r->n; i++) {
            if (r->experts[i] != want[i]) {
                if (bad++ < 8)
                    print_message("[%s] mode %d: seq %d pos %d slot %d: record %d, expected %d\n",
                                  label, mode, i / (S * K), i / K % S, i % K, r->experts[i],
                                  want[i]);
            }
        }
        assert_int_equal(bad, 0);
        /* the recorded weight of every slot, kept or dropped, is p of its column */
        for (int i = 0; i < nseq * S; i++) {
            int v = f->tokens[(size_t)(i / S) * (S + 1) + i % S];
            double lg[65], mx = -HUGE_VAL, s = 0.0;
            for (int e = 0; e < N; e++) {
                lg[e] = c * (double)wg[(size_t)v * N + e];
                mx = fmax(mx, lg[e]);
            }
            for (int e = 0; e < N; e++)
                s += exp(lg[e] - mx);
            for (int k = 0; k < K; k++) {
                int e = want[(size_t)i * K + k];
                if (e < 0)
                    continue;
                double p = exp(lg[e] - mx) / s;
                assert_true(fabs((double)r->weights[(size_t)i * K + k] - p) < 1e-6);
            }
        }
    }
    print_message("[%s] routing as constructed in training, top-k and causal modes\n", label);
    free(r);
}

static void test_capacity(void **state)
{
    /* experts_capacity: ceil(cf top_k rows / E), with the no-op not counted */
    experts_cfg ec = { .experts = 4, .top_k = 1, .capacity_factor = 1.25, .d_ff = 8 };
    assert_int_equal(experts_capacity(&ec, 12), 4);  /* 3.75 */
    ec.noop = true;
    assert_int_equal(experts_capacity(&ec, 12), 4);  /* over E, not E + 1 (3 = ceil(2.5)) */
    ec.noop = false;
    ec.capacity_factor = 1.0;
    assert_int_equal(experts_capacity(&ec, 12), 3);  /* exactly 3: not rounded up */
    ec.top_k = 2;
    ec.capacity_factor = 0.3;
    assert_int_equal(experts_capacity(&ec, 12), 2);  /* 1.8 */
    ec.capacity_factor = 0.0;
    assert_int_equal(experts_capacity(&ec, 12), INT32_MAX);
    ec.experts = 3;
    ec.capacity_factor = 2.0;
    assert_int_equal(experts_capacity(&ec, 10), 14); /* 13.33 */
    ec.experts = 8;
    ec.top_k = 1;
    ec.capacity_factor = 1.0;
    assert_int_equal(experts_capacity(&ec, 8), 1);
    assert_int_equal(experts_capacity(&ec, 1), 1);   /* 0.125 -> 1 */
    ec.capacity_factor = 0.01;
    assert_int_equal(experts_capacity(&ec, 64), 1);  /* 0.08 -> 1 */
    ec.experts = 64;
    ec.top_k = 8;
    ec.capacity_factor = 1.25;
    assert_int_equal(experts_capacity(&ec, 1024), 160);

    const int nseq = 3, S = 12;
    fixture f;
    /* B1: moe, top 1, capacity ceil(1 * 12 / 4) = 3.  Token 1 prefers
     * expert 2, token 2 expert 0.  The first 3 positions of each expert
     * keep it, per sequence (the counters restart with each sequence). */
    {
        moecfg mc = { "moe", 4, 1, 1.0, 8, 0.01, 0.001 };
        handmade(&f, &mc, nseq);
        float a[4] = { 0, 0, 1, 0 }, b[4] = { 1, 0, 0, 0 };
        set_prefs(&f, 1, a, 4);
        set_prefs(&f, 2, b, 4);
        set_seq(&f, 0, "111111111111");
        set_seq(&f, 1, "121212121212");
        set_seq(&f, 2, "222222111111");
        const int32_t want[3 * 12] = {
            2, 2, 2, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            2, 0, 2, 0, 2, 0, -1, -1, -1, -1, -1, -1,
            0, 0, 0, -1, -1, -1, 2, 2, 2, -1, -1, -1,
        };
        expect_routing(&f, want, "moe top1 capacity 3");
        unmake(&f);
    }
    /* B2: moe, top 2, cf 0.3: capacity ceil(0.3 * 2 * 12 / 4) = 2.  Token 1
     * prefers (0, 1), token 2 (1, 0), token 3 (2, 1).  Sequence 0 is
     * 1 1 2 2 ...: positions 0 and 1 fill experts 0 and 1 with their first
     * AND second choices, so position 2's first choice (1) is dropped: the
     * rule is position order, not "all first choices before any second". */
    {
        moecfg mc = { "moe", 4, 2, 0.3, 8, 0.01, 0.001 };
        handmade(&f, &mc, nseq);
        float a[4] = { 2, 1, 0, 0 }, b[4] = { 1, 2, 0, 0 }, c[4] = { 0, 1, 2, 0 };
        set_prefs(&f, 1, a, 4);
        set_prefs(&f, 2, b, 4);
        set_prefs(&f, 3, c, 4);
        set_seq(&f, 0, "112222222222");
        set_seq(&f, 1, "211111111111");
        set_seq(&f, 2, "133133333333");
        const int32_t want[3 * 12 * 2] = {
            0, 1,  0, 1,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            1, 0,  0, 1,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            0, 1,  2, 1,  2, -1,  0, -1,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        };
        expect_routing(&f, want, "moe top2 capacity 2");
        unmake(&f);
    }
    /* B3: capacity_factor 0 keeps everything, even when every token picks
     * the same expert(s). */
    for (int K = 1; K <= 2; K++) {
        moecfg mc = { "moe", 4, K, 0.0, 8, 0.01, 0.001 };
        handmade(&f, &mc, nseq);
        float a[4] = { 0, 1, 0, 2 };
        set_prefs(&f, 1, a, 4);
        for (int s = 0; s < nseq; s++)
            set_seq(&f, s, "111111111111");
        int32_t want[3 * 12 * 2];
        for (int i = 0; i < nseq * S; i++) {
            want[i * K] = 3;
            if (K == 2)
                want[i * K + 1] = 1;
        }
        expect_routing(&f, want, K == 1 ? "moe top1 cf 0" : "moe top2 cf 0");
        unmake(&f);
    }
    /* B4: integrated (E 4, the no-op is column 4), top 1, cf 0.4: capacity
     * ceil(0.4 * 12 / 4) = 2 (over E; over the 5 columns it would be 1).
     * Token 1 prefers the no-op, token 2 expert 2.  Every no-op choice is
     * kept, however many. */
    {
        moecfg mc = { "integrated", 4, 1, 0.4, 8, 0.01, 0.001 };
        handmade(&f, &mc, nseq);
        float z[5] = { 0, 0, 0, 0, 3 }, a[5] = { 0, 0, 1, 0, 0 };
        set_prefs(&f, 1, z, 5);
        set_prefs(&f, 2, a, 5);
        set_seq(&f, 0, "111111111111");
        set_seq(&f, 1, "212121212121");
        set_seq(&f, 2, "111111222222");
        const int32_t want[3 * 12] = {
            4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
            2, 4, 2, 4, -1, 4, -1, 4, -1, 4, -1, 4,
            4, 4, 4, 4, 4, 4, 2, 2, -1, -1, -1, -1,
        };
        expect_routing(&f, want, "integrated top1 capacity 2");
        unmake(&f);
    }
    /* B5: integrated, top 2, cf 0.25: capacity ceil(0.25 * 2 * 12 / 4) = 2.
     * Token 1 prefers (no-op, expert 0), token 2 (expert 0, no-op). */
    {
        moecfg mc = { "integrated", 4, 2, 0.25, 8, 0.01, 0.001 };
        handmade(&f, &mc, nseq);
        float z[5] = { 1, 0, 0, 0, 3 }, a[5] = { 3, 0, 0, 0, 1 };
        set_prefs(&f, 1, z, 5);
        set_prefs(&f, 2, a, 5);
        set_seq(&f, 0, "111111111111");
        set_seq(&f, 1, "222222222222");
        set_seq(&f, 2, "212121212121");
        const int32_t want[3 * 12 * 2] = {
            4, 0,  4, 0,  4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1,
            0, 4,  0, 4,  -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4,
            0, 4,  4, 0,  -1, 4, 4, -1, -1, 4, 4, -1, -1, 4, 4, -1, -1, 4, 4, -1, -1, 4, 4, -1,
        };
        expect_routing(&f, want, "integrated top2 capacity 2");
        unmake(&f);
    }
    /* B6: ties go to the lower index.  All-zero rows (equal logits): top 1
     * takes expert 0 (not the no-op), top 2 experts 0 and 1.  Token 1 has
     * logits (1, 3, 3, 0 | 3): experts 1 then 2 (the no-op's tie loses).
     * Token 2 has (0, 0, 0, 2 | 2): expert 3 before the no-op. */
    for (int K = 1; K <= 2; K++) {
        for (int integ = 0; integ < 2; integ++) {
            moecfg mc = { integ ? "integrated" : "moe", 4, K, 0.0, 8, 0.01, 0.001 };
            int N = 4 + integ;
            handmade(&f, &mc, nseq);
            float a[5] = { 1, 3, 3, 0, 3 }, b[5] = { 0, 0, 0, 2, 2 };
            set_prefs(&f, 1, a, N);
            set_prefs(&f, 2, b, N);
            set_seq(&f, 0, "000000000000");
            set_seq(&f, 1, "111111111111");
            set_seq(&f, 2, "222222222222");
            int32_t want[3 * 12 * 2];
            for (int i = 0; i < S; i++) {
                want[(0 * S + i) * K] = 0;
                want[(1 * S + i) * K] = 1;
                want[(2 * S + i) * K] = 3;
                if (K == 2) {
                    want[(0 * S + i) * K + 1] = 1;
                    want[(1 * S + i) * K + 1] = 2;
                    want[(2 * S + i) * K + 1] = integ ? 4 : 0;
                }
            }
            char label[64];
            snprintf(label, sizeof(label), "ties, %s top%d", mc.kind, K);
            expect_routing(&f, want, label);
            /* equal logits: p = 1/N exactly as recorded */
            routing *r = routing_new();
            forward(&f, FWD_EVAL_TOPK, NULL);
            read_routing(f.m, 0, nseq, r);
            for (int i = 0; i < S * K; i++)
                assert_true(fabs((double)r->weights[i] - 1.0 / N) < 1e-7);
            free(r);
            unmake(&f);
        }
    }
}

/* ------------------------------------------------------------------ */
/* c. The no-op (and a dropped assignment) adds exactly nothing          */

/* Rows whose every assignment is the no-op or dropped leave the layer as
 * h = x + Attn(x), bit for bit; the others move.  On random models. */
static void noop_rows_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 12;
    model_dims dims = small_dims(2, S);
    layer_spec specs[2] = { dense_spec(), moe_spec(mc) };
    fixture f;
    make(&f, dims, specs, nseq, seed);
    scale_weights(f.m, 10.0f, seed + 1);
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        forward(&f, (fwd_mode)mode, NULL);
        routing *r = routing_new();
        read_routing(f.m, 1, nseq, r);
        gate_ref g;
        gate_reference(f.m, 1, nseq, &g);
        check_record(&g, r, capacity_formula(mc->cf, mc->top_k, S, mc->experts), label);
        int d = dims.d_model, K = mc->top_k, n = nseq * S, still = 0, moved = 0, noop_rows = 0;
        const float *y = f.m->resid + (size_t)2 * n * d;
        for (int i = 0; i < n; i++) {
            bool none = true, has_noop = false;
            for (int k = 0; k < K; k++) {
                int e = r->experts[i * K + k];
                none &= e < 0 || e == mc->experts;
                has_noop |= e == mc->experts;
            }
            bool same = !memcmp(y + (size_t)i * d, g.h + (size_t)i * d, (size_t)d * sizeof(float));
            if (none) {
                if (!same)
                    print_message("[%s] row %d: no real assignment kept, yet y != h\n", label, i);
                assert_true(same);
                still++;
                noop_rows += has_noop;
            } else {
                assert_false(same);
                moved++;
            }
        }
        if (mode == 0)
            print_message("[%s] %d rows with no kept real assignment (%d of them at the no-op) "
                          "equal h bit for bit; %d rows moved\n", label, still, noop_rows, moved);
        assert_true(still > 0 && moved > 0);
        if (is_integrated(mc))
            assert_true(noop_rows > 0);
        gate_ref_free(&g);
        free(r);
    }
    unmake(&f);
}

/* A one-layer model where h_0 = x_0 = 3 for every row: column 0 of Wo is
 * zero (so Attn(x) has component 0 equal to 0) and tok_emb[:,0] = 3.  With
 * mlp_norm[0] = 1, m_0 = 3 / rms(h) > 0 for every token: the gate's row 0
 * is a lever of known sign on every column. */
static void lever_model(fixture *f, const moecfg *mc, int nseq, uint64_t seed)
{
    model_dims dims = small_dims(1, 12);
    layer_spec s = moe_spec(mc);
    make(f, dims, &s, nseq, seed);
    scale_weights(f->m, 10.0f, seed + 1);
    int d = dims.d_model;
    float *wo = param(f->m, 0, "wo"), *emb = param(f->m, -1, "tok_emb");
    for (int i = 0; i < d; i++)
        wo[(size_t)i * d] = 0.0f;
    for (int v = 0; v < dims.vocab; v++)
        emb[(size_t)v * d] = 3.0f;
    param(f->m, 0, "mlp_norm")[0] = 1.0f;
}

static void max_logit_diff(const float *a, const float *b, size_t n, double *abs_out,
                           double *rel_out)
{
    double mx = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)b[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    }
    *abs_out = diff;
    *rel_out = diff / fmax(mx, 1e-30);
}

static void test_noop_exact(void **state)
{
    /* random models: rows left alone are exactly h */
    moecfg c = { "integrated", 4, 1, 0.5, 20, 0.1, 0.05 };
    noop_rows_case("integrated top1 cf0.5", &c, 401);
    c.top_k = 2;
    noop_rows_case("integrated top2 cf0.5", &c, 402);
    moecfg cm = { "moe", 4, 2, 0.5, 20, 0.1, 0.05 };
    noop_rows_case("moe top2 cf0.5 (dropped rows)", &cm, 403);

    /* every token to the no-op: the real columns of the gate are zero (their
     * logits are exactly 0) and the no-op's is m_0 Wg[0][E] = m_0 > 0. */
    const int nseq = 3, S = 12, E = 4, d = 16, V = 23;
    for (int K = 1; K <= 2; K++) {
        moecfg mi = { "integrated", E, K, 0.5, 20, 0.1, 0.05 };
        fixture fi;
        lever_model(&fi, &mi, nseq, 410);
        fill_tensor(fi.m, 0, "gate", 0.0f);
        param(fi.m, 0, "gate")[E] = 1.0f; /* Wg[0][E] */
        fwd_result res;
        forward(&fi, FWD_TRAIN, &res);
        routing *r = routing_new();
        read_routing(fi.m, 0, nseq, r);
        /* top 1: all no-op; top 2: the no-op then expert 0 (a tie at 0, lower
         * index), which capacity ceil(0.5 * 2 * 12 / 4) = 3 cuts to the first
         * three positions */
        int n = nseq * S;
        for (int i = 0; i < n; i++) {
            assert_int_equal(r->experts[i * K], E);
            if (K == 2)
                assert_int_equal(r->experts[i * K + 1], i % S < 3 ? 0 : -1);
        }
        gate_ref g;
        gate_reference(fi.m, 0, nseq, &g);
        const float *y = fi.m->resid + (size_t)n * d;
        if (K == 1) {
            /* the layer is the attention sublayer alone, bit for bit */
            assert_memory_equal(y, g.h, (size_t)n * d * sizeof(float));
            /* and equals a moe layer on the same weights whose experts' W2
             * are zero (its MLP output is exactly 0) */
            moecfg mm = { "moe", E, 1, 0.5, 20, 0.1, 0.05 };
            fixture fm;
            lever_model(&fm, &mm, nseq, 410);
            copy_by_name(fm.m, fi.m, "/gate");
            fill_tensor(fm.m, 0, "experts_w2", 0.0f);
            memcpy(fm.tokens, fi.tokens, (size_t)nseq * (S + 1) * sizeof(uint16_t));
            fwd_result rm;
            forward(&fm, FWD_TRAIN, &rm);
            assert_memory_equal(fm.m->resid + (size_t)n * d, y, (size_t)n * d * sizeof(float));
            assert_memory_equal(fm.m->logits, fi.m->logits, (size_t)n * V * sizeof(float));
            /* executed: attention, gate and head, no expert FLOPs */
            double want = nseq * (2.0 * (4.0 * S * d * d + 2.0 * S * S * d) + 2.0 * S * d * (E + 1) +
                                  2.0 * S * d * V);
            print_message("all tokens at the no-op: y = h bit for bit; = moe with W2 = 0; "
                          "executed FLOPs %.6e (expected %.6e)\n", res.flops_executed, want);
            assert_true(rel_err(res.flops_executed, want) < 1e-12);
            unmake(&fm);
        } else {
            /* only the first three rows of each sequence move */
            for (int i = 0; i < n; i++) {
                bool same = !memcmp(y + (size_t)i * d, g.h + (size_t)i * d, (size_t)d * sizeof(float));
                assert_true(same == (i % S >= 3));
            }
        }
        gate_ref_free(&g);
        free(r);
        unmake(&fi);
    }
}

/* ------------------------------------------------------------------ */
/* d. integrated, no-op never chosen, equals moe                         */

/* The lever model again, with Wg[0][E] = -200 and Wg[j][E] = 0 for j > 0:
 * the no-op's logit is -200 m_0 with m_0 = 3 / rms(h) (checked >= 0.5
 * below, so the logit is <= -100), while the real logits are a few units:
 * p_noop = exp(-100 - ...) underflows to exactly 0 in float, lse (in
 * double) does not see it, so every real p_e, and so every output, is that
 * of `moe` with the first E gate columns.  What can differ is the float
 * rounding of the gate product (E+1 columns against E): tolerance 1e-5. */
static void integrated_vs_moe_case(int K, double cf, uint64_t seed)
{
    const int nseq = 3, S = 12, E = 4, d = 16, V = 23, n = nseq * S;
    moecfg mi = { "integrated", E, K, cf, 20, 0.1, 0.05 }, mm = mi;
    mm.kind = "moe";
    fixture fi, fm;
    lever_model(&fi, &mi, nseq, seed);
    lever_model(&fm, &mm, nseq, seed);
    float *gi = param(fi.m, 0, "gate");
    for (int j = 0; j < d; j++)
        gi[(size_t)j * (E + 1) + E] = j == 0 ? -200.0f : 0.0f;
    copy_by_name(fm.m, fi.m, "/gate");
    float *gm = param(fm.m, 0, "gate");
    for (int j = 0; j < d; j++)
        for (int e = 0; e < E; e++)
            gm[(size_t)j * E + e] = gi[(size_t)j * (E + 1) + e];
    memcpy(fm.tokens, fi.tokens, (size_t)nseq * (S + 1) * sizeof(uint16_t));

    fwd_result ri, rm;
    forward(&fi, FWD_TRAIN, &ri);
    forward(&fm, FWD_TRAIN, &rm);
    gate_ref g;
    gate_reference(fi.m, 0, nseq, &g);
    double max_pnoop = 0.0, min_m0 = HUGE_VAL;
    for (int i = 0; i < n; i++) {
        max_pnoop = fmax(max_pnoop, g.p[(size_t)i * (E + 1) + E]);
        min_m0 = fmin(min_m0, -g.logits[(size_t)i * (E + 1) + E] / 200.0);
    }
    routing *a = routing_new(), *b = routing_new();
    read_routing(fi.m, 0, nseq, a);
    read_routing(fm.m, 0, nseq, b);
    check_record(&g, a, capacity_formula(cf, K, S, E), "integrated vs moe");
    assert_int_equal(count_value(a, E), 0);
    assert_memory_equal(a->experts, b->experts, (size_t)a->n * sizeof(int32_t));
    double werr = 0.0;
    for (int i = 0; i < a->n; i++)
        werr = fmax(werr, fabs((double)a->weights[i] - (double)b->weights[i]));
    double la, lr, ya, yr;
    max_logit_diff(fi.m->logits, fm.m->logits, (size_t)n * V, &la, &lr);
    max_logit_diff(fi.m->resid + (size_t)n * d, fm.m->resid + (size_t)n * d, (size_t)n * d, &ya, &yr);
    int dropped = count_value(a, -1);
    print_message("[integrated vs moe, top%d cf %.2f] min m_0 %.3f, max p_noop %.2e; %d dropped; "
                  "weights differ by %.2e, layer output by %.2e (rel %.2e), logits by %.2e (rel %.2e)\n",
                  K, cf, min_m0, max_pnoop, dropped, werr, ya, yr, la, lr);
    assert_true(min_m0 >= 0.5);
    assert_true(max_pnoop < 1e-30);
    assert_true(cf > 0.0 ? dropped > 0 : dropped == 0);
    assert_true(werr < 1e-6);
    assert_true(yr < 1e-5);
    assert_true(lr < 1e-5);

    /* the statistics: same counts (the no-op's column 0), balance over N
     * columns (so (E+1)/E times moe's with the same frac and meanP), the same
     * z-loss and entropy */
    int ni = 0, nm = 0;
    double si[16], sm[16], ci[16], cmo[16];
    int cols_i = integrated_kind.stat_count(&fi.m->layers[0], &ni);
    int cols_m = moe_kind.stat_count(&fm.m->layers[0], &nm);
    assert_int_equal(cols_i, cols_m + 1);
    integrated_kind.stat_sums(&fi.m->layers[0], si);
    moe_kind.stat_sums(&fm.m->layers[0], sm);
    integrated_kind.stat_columns(&fi.m->layers[0], si, ci);
    moe_kind.stat_columns(&fm.m->layers[0], sm, cmo);
    for (int e = 0; e < E; e++)
        assert_true(ci[e] == cmo[e]);
    assert_true(ci[E] == 0.0);          /* tokens_noop */
    assert_true(ci[E + 1] == cmo[E]);   /* dropped */
    assert_true(rel_err(ci[E + 2], cmo[E + 1] * (E + 1) / E) < 1e-5); /* balance */
    assert_true(rel_err(ci[E + 3], cmo[E + 2]) < 1e-5);               /* z */
    assert_true(rel_err(ci[E + 4], cmo[E + 3]) < 1e-5);               /* entropy */

    /* FLOPs: the one extra gate column, 2 S d per sequence */
    layer_spec si_spec = moe_spec(&mi), sm_spec = moe_spec(&mm);
    model_dims dims = small_dims(1, S);
    assert_true(fabs(integrated_kind.flops(&si_spec, &dims) - moe_kind.flops(&sm_spec, &dims) -
                     2.0 * S * d) < 1e-6);
    assert_true(fabs(ri.flops_executed - rm.flops_executed - nseq * 2.0 * S * d) < 1e-6);
    free(a);
    free(b);
    gate_ref_free(&g);
    unmake(&fi);
    unmake(&fm);
}

static void test_integrated_equals_moe(void **state)
{
    integrated_vs_moe_case(1, 0.0, 501);
    integrated_vs_moe_case(1, 0.4, 502); /* capacity 2 (1 if it were over E + 1 columns) */
    integrated_vs_moe_case(2, 0.0, 503);
    integrated_vs_moe_case(2, 0.4, 504); /* capacity 3 (2 over E + 1) */
}

/* ------------------------------------------------------------------ */
/* e. FLOPs                                                             */

static double attn_hand(double S, double d)
{
    return 2.0 * (4.0 * S * d * d + 2.0 * S * S * d);
}

static void flops_case(const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 12;
    const double d = 16, ff = 24, V = 23, fe = mc->d_ff;
    int E = mc->experts, N = E + (is_integrated(mc) ? 1 : 0), K = mc->top_k;
    model_dims dims = small_dims(2, S);
    layer_spec specs[2] = { dense_spec(), moe_spec(mc) };
    double dense = attn_hand(S, d) + 6.0 * S * d * ff, head = 2.0 * S * d * V;
    /* nominal: attention on S rows, the gate, every assignment at a real
     * expert (the no-op charged as one) */
    double nominal = attn_hand(S, d) + 2.0 * S * d * N + (double)S * K * 6.0 * d * fe;
    const layer_kind *kind = is_integrated(mc) ? &integrated_kind : &moe_kind;
    assert_true(rel_err(kind->flops(&specs[1], &dims), nominal) < 1e-12);
    experts_cfg ec = moe_experts_cfg(&specs[1], &dims, is_integrated(mc));
    assert_true(rel_err(experts_flops(&ec, &dims, S), 2.0 * S * d * N + (double)S * K * 6.0 * d * fe) <
                1e-12);
    /* expert d_ff 0 means the model's */
    layer_spec s0 = specs[1];
    s0.expert_d_ff = 0;
    assert_true(rel_err(kind->flops(&s0, &dims),
                        attn_hand(S, d) + 2.0 * S * d * N + (double)S * K * 6.0 * d * ff) < 1e-12);

    fixture f;
    make(&f, dims, specs, nseq, seed);
    scale_weights(f.m, 10.0f, seed + 1);
    double per_layer[2];
    assert_true(rel_err(model_flops_per_seq(f.m, per_layer), dense + nominal + head) < 1e-12);
    assert_true(rel_err(per_layer[1], nominal) < 1e-12);
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result res;
        forward(&f, (fwd_mode)mode, &res);
        routing *r = routing_new();
        read_routing(f.m, 1, nseq, r);
        int kept = count_real(r, E);
        double want = nseq * (dense + head + attn_hand(S, d)) + 2.0 * nseq * S * d * N +
                      kept * 6.0 * d * fe;
        if (mode == 0)
            print_message("[%s top%d cf %.2f] executed %.6e, expected %.6e: %d of %d assignments "
                          "at real experts (nominal %.6e)\n",
                          mc->kind, K, mc->cf, res.flops_executed, want, kept, nseq * S * K,
                          nseq * (dense + nominal + head));
        assert_true(rel_err(res.flops_executed, want) < 1e-12);
        assert_true(kept < nseq * S * K); /* else executed = nominal and nothing is told apart */
        free(r);
    }
    unmake(&f);
}

static void test_flops(void **state)
{
    moecfg c = { "moe", 4, 1, 0.5, 20, 0.1, 0.05 };
    flops_case(&c, 601);
    c.top_k = 2;
    flops_case(&c, 602);
    c.kind = "integrated";
    flops_case(&c, 603);
    c.top_k = 1;
    c.cf = 0.0; /* no drops: only the no-op saves */
    flops_case(&c, 604);
}

/* ------------------------------------------------------------------ */
/* f. Decoding                                                          */

/* [X, dense, X] with X the moe kind, weights scaled up and the gate more so
 * (std 1) so routing depends on content. */
static void routed_model(fixture *f, const moecfg *mc, int nseq, int S, uint64_t seed)
{
    model_dims dims = small_dims(3, S);
    layer_spec specs[3] = { moe_spec(mc), dense_spec(), moe_spec(mc) };
    make(f, dims, specs, nseq, seed);
    scale_weights(f->m, 10.0f, seed + 1);
    scale_tensor(f->m, 0, "gate", 5.0f);
    scale_tensor(f->m, 2, "gate", 5.0f);
}

static void decode_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int S = 16, V = 23, E = mc->experts, K = mc->top_k;
    fixture f;
    routed_model(&f, mc, 1, S, seed);
    fwd_result res;
    forward(&f, FWD_EVAL_CAUSAL, &res);
    float *ref = malloc((size_t)S * V * sizeof(float));
    assert_non_null(ref);
    memcpy(ref, f.m->logits, (size_t)S * V * sizeof(float));
    routing *rt[3] = { routing_new(), NULL, routing_new() };
    int cap = capacity_formula(mc->cf, K, S, E), drops = 0, noops = 0;
    for (int l = 0; l < 3; l += 2) {
        read_routing(f.m, l, 1, rt[l]);
        gate_ref g;
        gate_reference(f.m, l, 1, &g);
        check_record(&g, rt[l], cap, label);
        gate_ref_free(&g);
        drops += count_value(rt[l], -1);
        noops += is_integrated(mc) ? count_value(rt[l], E) : 0;
    }
    assert_true(drops > 0);
    if (is_integrated(mc))
        assert_true(noops > 0);

    float logits[23];
    unsigned char taken[3];
    double worst = 0.0, worst_abs = 0.0;
    assert_int_equal(model_decode_begin(f.m, S), 0);
    for (int pos = 0; pos < S; pos++) {
        assert_int_equal(model_decode_step(f.m, &f.ctx, f.tokens[pos], pos, logits, taken), 0);
        double diff, rel;
        max_logit_diff(logits, ref + (size_t)pos * V, (size_t)V, &diff, &rel);
        worst = fmax(worst, rel);
        worst_abs = fmax(worst_abs, diff);
        if (rel >= 1e-4)
            print_message("[%s] position %d: decode differs by %.2e relative\n", label, pos, rel);
        assert_true(rel < 1e-4);
        assert_int_equal(taken[1], 1);
        /* moe.c: "took the block" when the first choice is a real expert */
        for (int l = 0; l < 3; l += 2)
            assert_int_equal(taken[l], rt[l]->experts[pos * K] != E);
    }
    print_message("[%s] decode vs causal forward: max rel err %.2e (max abs %.2e); %d dropped "
                  "assignments, %d at the no-op, over 2 layers\n",
                  label, worst, worst_abs, drops, noops);
    /* a second pass after decode_begin: the admission counters restart */
    assert_int_equal(model_decode_begin(f.m, S), 0);
    for (int pos = 0; pos < S; pos++) {
        assert_int_equal(model_decode_step(f.m, &f.ctx, f.tokens[pos], pos, logits, NULL), 0);
        double diff, rel;
        max_logit_diff(logits, ref + (size_t)pos * V, (size_t)V, &diff, &rel);
        assert_true(rel < 1e-4);
    }
    free(ref);
    free(rt[0]);
    free(rt[2]);
    unmake(&f);
}

static void test_decode(void **state)
{
    moecfg c = { "moe", 4, 1, 0.5, 20, 0.1, 0.05 };
    decode_case("moe top1 cf0.5", &c, 701);
    c.top_k = 2;
    decode_case("moe top2 cf0.5", &c, 702);
    c.kind = "integrated";
    decode_case("integrated top2 cf0.5", &c, 703);
    c.top_k = 1;
    decode_case("integrated top1 cf0.5", &c, 704);
}

/* ------------------------------------------------------------------ */
/* g. Causality                                                          */

static void causal_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 16, V = 23, sq = 1, K = mc->top_k;
    fixture f;
    routed_model(&f, mc, nseq, S, seed);
    size_t nl = (size_t)nseq * S * V;
    float *l0 = malloc(nl * sizeof(float));
    uint16_t *keep = malloc((size_t)nseq * (S + 1) * sizeof(uint16_t));
    routing *rb = routing_new(), *rn = routing_new();
    assert_true(l0 && keep);
    memcpy(keep, f.tokens, (size_t)nseq * (S + 1) * sizeof(uint16_t));
    forward(&f, FWD_EVAL_TOPK, NULL);
    memcpy(l0, f.m->logits, nl * sizeof(float));
    read_routing(f.m, 2, nseq, rb);
    assert_true(count_value(rb, -1) > 0);
    pcg32 r;
    pcg32_seed(&r, seed, 3);
    int checks = 0, later_changed = 0;
    double worst = 0.0;
    for (int t = 0; t < S - 1; t++) {
        for (int trial = 0; trial < 3; trial++) {
            memcpy(f.tokens, keep, (size_t)nseq * (S + 1) * sizeof(uint16_t));
            uint16_t *tok = f.tokens + (size_t)sq * (S + 1);
            for (int j = t + 1; j <= S; j++)
                tok[j] = (uint16_t)pcg32_bounded(&r, (uint32_t)V);
            forward(&f, FWD_EVAL_TOPK, NULL);
            read_routing(f.m, 2, nseq, rn);
            for (int s = 0; s < nseq; s++) {
                int upto = s == sq ? t + 1 : S;
                size_t o = (size_t)s * S * V;
                double diff, rel;
                max_logit_diff(f.m->logits + o, l0 + o, (size_t)upto * V, &diff, &rel);
                worst = fmax(worst, diff);
                if (diff != 0.0)
                    print_message("[%s] seq %d changed below t = %d by %.2e\n", label, s, t, diff);
                assert_true(diff == 0.0);
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
    print_message("[%s] top-k mode is causal: %d changes of later tokens, earlier logits and "
                  "routing bit-identical; later routing of layer 2 changed in %d of them\n",
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
    moecfg c = { "moe", 4, 1, 0.5, 20, 0.1, 0.05 };
    causal_case("moe top1 cf0.5", &c, 801);
    c.top_k = 2;
    causal_case("moe top2 cf0.5", &c, 802);
    c.kind = "integrated";
    causal_case("integrated top2 cf0.5", &c, 803);
}

/* ------------------------------------------------------------------ */
/* h. Statistics                                                        */

static void stats_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 12, E = mc->experts, K = mc->top_k;
    const int N = E + (is_integrated(mc) ? 1 : 0);
    model_dims dims = small_dims(2, S);
    layer_spec specs[2] = { dense_spec(), moe_spec(mc) };
    fixture f;
    make(&f, dims, specs, nseq, seed);
    scale_weights(f.m, 10.0f, seed + 1);
    scale_tensor(f.m, 1, "gate", 3.0f);
    const layer *ly = &f.m->layers[1];
    const layer_kind *k = ly->kind;
    assert_non_null(k->stat_count);
    int n_sums = 0;
    assert_int_equal(k->stat_count(ly, &n_sums), N + 4);
    assert_int_equal(n_sums, N + 6);
    char name[64], want_name[64];
    for (int c = 0; c < N + 4; c++) {
        k->stat_name(ly, c, name, sizeof(name));
        if (c < E)
            snprintf(want_name, sizeof(want_name), "tokens_%d", c);
        else if (c < N)
            snprintf(want_name, sizeof(want_name), "tokens_noop");
        else
            snprintf(want_name, sizeof(want_name), "%s",
                     (const char *[]){ "dropped", "balance_loss", "z_loss", "router_entropy" }[c - N]);
        assert_string_equal(name, want_name);
    }

    fwd_result res;
    forward(&f, FWD_TRAIN, &res);
    routing *r = routing_new();
    read_routing(f.m, 1, nseq, r);
    gate_ref g;
    gate_reference(f.m, 1, nseq, &g);
    check_record(&g, r, capacity_formula(mc->cf, K, S, E), label);
    double sums[70], cols[70];
    k->stat_sums(ly, sums);
    for (int e = 0; e < N; e++)
        assert_true(sums[e] == count_value(r, e));
    assert_true(sums[N] == count_value(r, -1));
    assert_true(sums[N + 4] == nseq * S);
    assert_true(sums[N + 5] == nseq);
    k->stat_columns(ly, sums, cols);
    double bl = 0.0, z = 0.0, ent = 0.0;
    for (int b = 0; b < nseq; b++) {
        double bb, zz, ee;
        aux_reference(&g, b, &bb, &zz, &ee);
        bl += bb / nseq;
        z += zz / (nseq * S);
        ent += ee / (nseq * S);
    }
    for (int e = 0; e <= N; e++)
        assert_true(cols[e] == sums[e]);
    print_message("[%s] statistics: kept", label);
    for (int e = 0; e < N; e++)
        print_message(" %g", cols[e]);
    print_message(", dropped %g; balance %.6f (ref %.6f), z %.6f (ref %.6f), entropy %.6f "
                  "(ref %.6f); aux %.6e\n",
                  cols[N], cols[N + 1], bl, cols[N + 2], z, cols[N + 3], ent, res.aux_loss);
    assert_true(cols[N] > 0.0);
    assert_true(rel_err(cols[N + 1], bl) < 1e-5);
    assert_true(rel_err(cols[N + 2], z) < 1e-5);
    assert_true(rel_err(cols[N + 3], ent) < 1e-5);
    /* the training loss carries bw * balance + zw * z, averaged over sequences */
    assert_true(rel_err(res.aux_loss, mc->bw * bl + mc->zw * z) < 1e-5);
    /* an evaluation forward (other tokens) leaves the training statistics */
    for (int i = 0; i < nseq * (S + 1); i++)
        f.tokens[i] = (uint16_t)((f.tokens[i] + 7) % dims.vocab);
    fwd_result re;
    forward(&f, FWD_EVAL_TOPK, &re);
    assert_true(re.aux_loss == 0.0);
    double sums2[70];
    k->stat_sums(ly, sums2);
    assert_memory_equal(sums, sums2, (size_t)n_sums * sizeof(double));
    gate_ref_free(&g);
    free(r);
    unmake(&f);
}

static void test_stats(void **state)
{
    moecfg c = { "moe", 4, 1, 0.5, 20, 0.1, 0.05 };
    stats_case("moe top1 cf0.5", &c, 901);
    c.top_k = 2;
    stats_case("moe top2 cf0.5", &c, 902);
    c.kind = "integrated";
    stats_case("integrated top2 cf0.5", &c, 903);
    c.top_k = 1;
    c.experts = 3;
    stats_case("integrated E3 top1 cf0.5", &c, 904);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_noop_exact),
        cmocka_unit_test(test_integrated_equals_moe),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_gradients_moe),
        cmocka_unit_test(test_gradients_integrated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
