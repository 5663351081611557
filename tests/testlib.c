/* Helpers shared by the model-level cmocka tests: see testlib.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testlib.h"

#include <errno.h>

#include "core/model/block.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Double-precision comparisons                                         */

double tl_rel_err(double a, double b)
{
    double den = fmax(fabs(a), fabs(b));
    return den > 0.0 ? fabs(a - b) / den : 0.0;
}

void tl_max_diff(const float *a, const float *b, size_t n, double *abs_out, double *rel_out)
{
    double mx = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)b[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    }
    *abs_out = diff;
    *rel_out = diff / fmax(mx, 1e-30);
}

double tl_rows_shift(const float *a, const float *b, int rows, int V)
{
    double worst = 0.0;
    for (int r = 0; r < rows; r++) {
        double diff, rel;
        tl_max_diff(a + (size_t)r * V, b + (size_t)r * V, (size_t)V, &diff, &rel);
        if (!(rel <= worst))
            worst = rel;
    }
    return worst;
}

void tl_assert_below(double x, double bound, bool or_equal, const char *x_expr,
                     const char *bound_expr, const char *file, int line)
{
    if (or_equal ? x <= bound : x < bound)
        return;
    print_message("%s = %.6e is not %s %s = %.6e\n", x_expr, x, or_equal ? "<=" : "<", bound_expr,
                  bound);
    _fail(file, line);
}

void tl_assert_rel(double a, double b, double tol, const char *a_expr, const char *b_expr,
                   const char *file, int line)
{
    double e = tl_rel_err(a, b);
    if (e < tol)
        return;
    print_message("%s = %.12e and %s = %.12e differ by %.3e relative, not < %.3e\n", a_expr, a,
                  b_expr, b, e, tol);
    _fail(file, line);
}

/* ------------------------------------------------------------------ */
/* Layer specs and model dimensions                                     */

/* The kind called name in table, failing the test when it has none. */
static const layer_kind *tl_kind(const kind_ops *const *table, const char *name)
{
    const kind_ops *o = kind_ops_lookup(table, name);
    if (!o)
        fail_msg("no kind '%s' in the test's table", name);
    return o->kind;
}

layer_spec tl_spec(const kind_ops *const *table, const char *kind)
{
    layer_spec s;
    layer_spec_init(&s, tl_kind(table, kind));
    return s;
}

int tl_key(const layer *ly, const char *key)
{
    double v;
    if (layer_spec_number(&ly->spec, ly->kind, key, &v))
        fail_msg("layer %d (%s) has no key '%s'", ly->index, ly->kind->name, key);
    return (int)v;
}

void tl_set(layer_spec *s, const kind_ops *const *table, const char *key, const char *value)
{
    char why[256];
    int rc = layer_spec_set(s, tl_kind(table, s->kind), key, value, why, sizeof(why));
    if (rc)
        fail_msg("%s %s = %s: %s", s->kind, key, value, rc == -ENOENT ? "no such key" : why);
}

static void tl_setf(layer_spec *s, const kind_ops *const *table, const char *key, double v)
{
    char text[64];
    snprintf(text, sizeof(text), "%.17g", v);
    tl_set(s, table, key, text);
}

void tl_spec_routed(layer_spec *s, const kind_ops *const *table, double capacity,
                    const char *router, const char *gate, const char *causal, double aux_weight)
{
    tl_setf(s, table, "capacity", capacity);
    tl_set(s, table, "router", router);
    tl_set(s, table, "gate", gate);
    tl_set(s, table, "causal", causal);
    tl_setf(s, table, "aux_weight", aux_weight);
}

void tl_spec_experts(layer_spec *s, const kind_ops *const *table, int experts, int top_k,
                     double capacity_factor, int d_ff, double balance_weight, double z_weight)
{
    tl_setf(s, table, "experts", experts);
    tl_setf(s, table, "top_k", top_k);
    tl_setf(s, table, "capacity_factor", capacity_factor);
    tl_setf(s, table, "d_ff", d_ff);
    tl_setf(s, table, "balance_weight", balance_weight);
    tl_setf(s, table, "z_weight", z_weight);
}

model_dims tl_small_dims(int n_layers, int seq_len)
{
    model_dims d = { .vocab = 23, .d_model = 16, .n_heads = 2, .d_head = 8, .d_ff = 24,
                     .n_layers = n_layers, .seq_len = seq_len };
    return d;
}

int tl_capacity(double capacity_factor, int top_k, int rows, int E)
{
    return capacity_factor <= 0.0 ? INT32_MAX : (int)ceil(capacity_factor * top_k * rows / E);
}

/* ------------------------------------------------------------------ */
/* Fixtures                                                             */

void tl_draw_tokens(token_t *t, int n, uint64_t seed, int V)
{
    pcg32 r;
    pcg32_seed(&r, seed, 7);
    for (int i = 0; i < n; i++)
        t[i] = (token_t)pcg32_bounded(&r, (uint32_t)V);
}

void tl_make(tl_fixture *f, const kind_ops *const *kinds, model_dims dims,
             const layer_spec *specs, int nseq, uint64_t seed)
{
    char err[256] = "";
    layer_spec defaults[MODE_MAX_LAYERS];
    memset(f, 0, sizeof(*f));
    if (!specs) {
        assert_in_range(dims.n_layers, 1, MODE_MAX_LAYERS);
        for (int l = 0; l < dims.n_layers; l++)
            layer_spec_init(&defaults[l], &dense_kind);
        specs = defaults;
    }
    int rc = build_model(&f->m, &dims, specs, kinds, nseq, err, sizeof(err));
    if (rc)
        print_message("build_model: %s\n", err);
    assert_int_equal(rc, 0);
    model_init(f->m, seed);
    f->tokens = malloc((size_t)nseq * (dims.seq_len + 1) * sizeof(token_t));
    assert_non_null(f->tokens);
    tl_draw_tokens(f->tokens, nseq * (dims.seq_len + 1), seed, dims.vocab);
    f->b = (batch){ .tokens = f->tokens, .nseq = nseq, .step = 0, .seq0 = 0, .global_seqs = nseq };
    f->ctx.size = 1; /* comm NULL: one rank */
    f->ctx.seed = seed;
}

void tl_unmake(tl_fixture *f)
{
    free_model(&f->m);
    free(f->tokens);
}

void tl_scale_weights(model *m, float mult, uint64_t seed)
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

static const model_tensor *find(const model *m, int l, const char *name, char *path)
{
    if (l < 0)
        snprintf(path, MODE_TENSOR_PATH, "%s", name);
    else
        snprintf(path, MODE_TENSOR_PATH, "layers/%d/%s", l, name);
    return model_find_tensor(m, path);
}

const model_tensor *tl_tensor(const model *m, int l, const char *name)
{
    char path[MODE_TENSOR_PATH];
    const model_tensor *t = find(m, l, name, path);
    if (!t)
        print_message("no tensor %s\n", path);
    assert_non_null(t);
    return t;
}

float *tl_param(model *m, int l, const char *name)
{
    return m->params + tl_tensor(m, l, name)->offset;
}

void tl_fill(model *m, int l, const char *name, float v)
{
    const model_tensor *t = tl_tensor(m, l, name);
    for (long i = 0; i < t->numel; i++)
        m->params[t->offset + i] = v;
}

static void scale_slice(model *m, const model_tensor *t, float mult)
{
    for (long i = 0; i < t->numel; i++)
        m->params[t->offset + i] *= mult;
}

void tl_scale(model *m, int l, const char *name, float mult)
{
    scale_slice(m, tl_tensor(m, l, name), mult);
}

bool tl_scale_if(model *m, int l, const char *name, float mult)
{
    char path[MODE_TENSOR_PATH];
    const model_tensor *t = find(m, l, name, path);
    if (t)
        scale_slice(m, t, mult);
    return t != NULL;
}

double tl_grad_norm(const model *m, int l, const char *name)
{
    const model_tensor *t = tl_tensor(m, l, name);
    double s = 0.0;
    for (long i = 0; i < t->numel; i++)
        s += (double)m->grads[t->offset + i] * (double)m->grads[t->offset + i];
    return sqrt(s);
}

int tl_copy_by_name(model *dst, const model *src, const char *skip)
{
    int copied = 0;
    for (int t = 0; t < dst->n_tensors; t++) {
        const model_tensor *dt = &dst->tensors[t];
        if (skip && strstr(dt->path, skip))
            continue;
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

/* ------------------------------------------------------------------ */
/* Forward, loss, gradient                                              */

void tl_forward(tl_fixture *f, fwd_mode mode, fwd_result *r)
{
    fwd_result tmp;
    assert_int_equal(model_forward(f->m, &f->ctx, &f->b, mode, r ? r : &tmp), 0);
}

double tl_loss(tl_fixture *f, fwd_mode mode, fwd_result *res)
{
    fwd_result r;
    tl_forward(f, mode, &r);
    if (res)
        *res = r;
    return r.ce_sum / (double)r.n_positions + r.aux_loss + r.side_loss;
}

double tl_train_grad(tl_fixture *f, fwd_result *res)
{
    model_zero_grad(f->m);
    double J = tl_loss(f, FWD_TRAIN, res);
    assert_int_equal(model_backward(f->m, &f->ctx, &f->b), 0);
    return J;
}

/* ------------------------------------------------------------------ */
/* Routing records                                                      */

static int routing_put(record_sink *s, const char *name, int type, int ndim,
                       const unsigned long long *dims, const void *data)
{
    tl_routing *r = s->user;
    if (ndim < 2 || ndim > 3 || dims[0] != (unsigned long long)r->nseq ||
        dims[1] != (unsigned long long)r->S || (ndim == 3 && dims[2] != (unsigned long long)r->K))
        return -1;
    size_t n = (size_t)r->n, nk = (size_t)r->nk;
    if (ndim == 2 ? n > TL_MAX_ROWS : nk > TL_MAX_SLOTS)
        return -1;
    if (ndim == 2 && type == RECORD_UINT8 && !strcmp(name, "selected")) {
        memcpy(r->selected, data, n);
        r->has |= TL_SELECTED;
    } else if (ndim == 2 && type == RECORD_UINT8 && !strcmp(name, "causal")) {
        memcpy(r->causal, data, n);
        r->has |= TL_CAUSAL;
    } else if (ndim == 2 && type == RECORD_FLOAT && !strcmp(name, "scores")) {
        memcpy(r->scores, data, n * sizeof(float));
        r->has |= TL_SCORES;
    } else if (ndim == 2 && type == RECORD_FLOAT && !strcmp(name, "pred_prob")) {
        memcpy(r->pred_prob, data, n * sizeof(float));
        r->has |= TL_PRED;
    } else if (ndim == 3 && type == RECORD_INT32 && !strcmp(name, "experts")) {
        memcpy(r->experts, data, nk * sizeof(int32_t));
        r->has |= TL_EXPERTS;
    } else if (ndim == 3 && type == RECORD_FLOAT && !strcmp(name, "weights")) {
        memcpy(r->weights, data, nk * sizeof(float));
        r->has |= TL_WEIGHTS;
    } else {
        return -1;
    }
    return 0;
}

tl_routing *tl_routing_new(void)
{
    tl_routing *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    return r;
}

void tl_read_routing(model *m, int l, int nseq, tl_routing *out, unsigned need, unsigned allow)
{
    layer *ly = &m->layers[l];
    fwd_args a = { .dims = &m->dims, .nseq = nseq, .seq_len = m->dims.seq_len };
    record_sink sink = { .put = routing_put, .user = out };
    out->nseq = nseq;
    out->S = m->dims.seq_len;
    out->K = layer_key(ly->kind, "top_k", NULL) ? tl_key(ly, "top_k") : 1;
    out->n = nseq * out->S;
    out->nk = out->n * out->K;
    out->has = 0;
    assert_true(out->n <= TL_MAX_ROWS);
    assert_non_null(ly->ops->record);
    assert_int_equal(ly->ops->record(ly, &a, &sink), 0);
    assert_int_equal(out->has & need, need);
    assert_int_equal(out->has & ~(need | allow), 0);
}

int tl_count_value(const tl_routing *r, int32_t v)
{
    int c = 0;
    for (int i = 0; i < r->nk; i++)
        c += r->experts[i] == v;
    return c;
}

/* Whether the arrays named in what (TL_SELECTED, TL_EXPERTS) are equal. */
static bool routing_same(const tl_routing *a, const tl_routing *b, unsigned what)
{
    assert_true(a->n == b->n && a->nk == b->nk);
    if ((what & TL_SELECTED) && memcmp(a->selected, b->selected, (size_t)b->n))
        return false;
    if ((what & TL_EXPERTS) && memcmp(a->experts, b->experts, (size_t)b->nk * sizeof(int32_t)))
        return false;
    return true;
}

double tl_router_gap(const tl_routing *r, int k)
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
/* Causality and decoding                                               */

void tl_redraw_after(tl_fixture *f, const token_t *keep, int sq, int t, pcg32 *r)
{
    int S = f->m->dims.seq_len;
    memcpy(f->tokens, keep, (size_t)f->b.nseq * (S + 1) * sizeof(token_t));
    token_t *tok = f->tokens + (size_t)sq * (S + 1);
    for (int j = t + 1; j <= S; j++)
        tok[j] = (token_t)pcg32_bounded(r, (uint32_t)f->m->dims.vocab);
}

void tl_check_causal(tl_fixture *f, fwd_mode mode, int l, unsigned need, unsigned allow,
                     unsigned hold, uint64_t seed, const char *label, const char *what)
{
    model *m = f->m;
    const int nseq = f->b.nseq, S = m->dims.seq_len, V = m->dims.vocab, sq = 1;
    size_t nt = (size_t)nseq * (S + 1);
    assert_true(nseq > sq);
    token_t *keep = malloc(nt * sizeof(token_t));
    tl_routing *rb = tl_routing_new(), *rn = tl_routing_new();
    assert_non_null(keep);
    memcpy(keep, f->tokens, nt * sizeof(token_t));
    tl_forward(f, mode, NULL);
    float *l0 = tl_logits_copy(f);
    tl_read_routing(m, l, nseq, rb, need, allow);
    assert_true(tl_count_value(rb, -1) > 0);
    const int K = rb->K;
    pcg32 r;
    pcg32_seed(&r, seed, 3);
    int checks = 0, later_changed = 0;
    double worst = 0.0;
    for (int t = 0; t < S - 1; t++) {
        for (int trial = 0; trial < 3; trial++) {
            tl_redraw_after(f, keep, sq, t, &r);
            tl_forward(f, mode, NULL);
            tl_read_routing(m, l, nseq, rn, need, allow);
            for (int s = 0; s < nseq; s++) {
                int upto = s == sq ? t + 1 : S; /* rows that must not move */
                size_t o = (size_t)s * S * V;
                double shift = tl_rows_shift(m->logits + o, l0 + o, upto, V);
                worst = fmax(worst, shift);
                if (!(shift <= TL_CAUSAL_TOL)) {
                    print_message("[%s] seq %d moved below t = %d by %.2e of its largest "
                                  "logit\n", label, s, t, shift);
                    fail();
                }
                if (hold & TL_CAUSAL)
                    assert_memory_equal(rn->causal + s * S, rb->causal + s * S, (size_t)upto);
                size_t ro = (size_t)s * S * K;
                if (hold & TL_EXPERTS)
                    assert_memory_equal(rn->experts + ro, rb->experts + ro,
                                        (size_t)upto * K * sizeof(int32_t));
            }
            later_changed += memcmp(rn->experts + (size_t)(sq * S + t + 1) * K,
                                    rb->experts + (size_t)(sq * S + t + 1) * K,
                                    (size_t)(S - t - 1) * K * sizeof(int32_t)) != 0;
            checks++;
        }
    }
    print_message("[%s] %s: %d changes of later tokens, earlier logits within %.1e (moved "
                  "%.1e at most) and routing the same; later routing of layer %d changed in "
                  "%d of them\n", label, what, checks, TL_CAUSAL_TOL, worst, l, later_changed);
    assert_true(later_changed > checks / 2);
    memcpy(f->tokens, keep, nt * sizeof(token_t));
    free(l0);
    free(keep);
    free(rb);
    free(rn);
}

float *tl_logits_copy(const tl_fixture *f)
{
    size_t n = (size_t)f->b.nseq * f->m->dims.seq_len * f->m->dims.vocab;
    float *l = malloc(n * sizeof(float));
    assert_non_null(l);
    memcpy(l, f->m->logits, n * sizeof(float));
    return l;
}

double tl_decode_pass(tl_fixture *f, const float *ref, unsigned char *taken, double *worst_abs,
                      const char *label)
{
    model *m = f->m;
    const int S = m->dims.seq_len, V = m->dims.vocab, L = m->dims.n_layers;
    float *logits = malloc((size_t)V * sizeof(float));
    assert_non_null(logits);
    double worst = 0.0;
    *worst_abs = 0.0;
    assert_int_equal(model_decode_begin(m, S), 0);
    for (int pos = 0; pos < S; pos++) {
        assert_int_equal(model_decode_step(m, &f->ctx, f->tokens[pos], pos, logits,
                                           taken ? taken + (size_t)pos * L : NULL),
                         0);
        double diff, rel;
        tl_max_diff(logits, ref + (size_t)pos * V, (size_t)V, &diff, &rel);
        worst = fmax(worst, rel);
        *worst_abs = fmax(*worst_abs, diff);
        if (rel >= 1e-4)
            print_message("[%s] position %d: decode differs by %.2e relative\n", label, pos, rel);
        assert_true(rel < 1e-4);
    }
    free(logits);
    return worst;
}

/* ------------------------------------------------------------------ */
/* The reference routing of the experts                                 */

void tl_gate_ref_free(tl_gate_ref *g)
{
    free(g->row);
    free(g->ss);
    free(g->pos);
    free(g->h);
    free(g->logits);
    free(g->p);
    free(g->lse);
    free(g->col);
    memset(g, 0, sizeof(*g));
}

/* h = x + Attn(x) on the selected rows xs, through block.h's attention
 * sublayer with layer l's weights. */
static void attn_reference(model *m, int l, tl_gate_ref *g, const float *xs)
{
    const model_dims *dm = &m->dims;
    attn_cache c;
    assert_int_equal(build_attn_cache(&c, dm, g->nsel > 0 ? g->nsel : 1), 0);
    float *ws = malloc((size_t)attn_ws_floats(dm, 0, 0) * sizeof(float));
    assert_non_null(ws);
    attn_weights aw = { .norm = tl_param(m, l, "attn_norm"), .wq = tl_param(m, l, "wq"),
                        .wk = tl_param(m, l, "wk"), .wv = tl_param(m, l, "wv"),
                        .wo = tl_param(m, l, "wo") };
    row_set rs = { .n = g->nsel, .nseq = g->nseq, .seq_start = g->ss, .pos = g->pos };
    fwd_args a = { .dims = dm, .rope = m->rope, .mode = FWD_EVAL_TOPK, .nseq = g->nseq,
                   .seq_len = g->S, .seq_scale = 1.0f, .ws = ws };
    if (g->nsel > 0)
        attn_forward(&c, g->h, xs, &rs, &aw, &a);
    free_attn_cache(&c);
    free(ws);
}

/* Row j's logits, softmax, lse, top-K columns and the gap of the first K+1. */
static void gate_row(tl_gate_ref *g, int j, int d, const float *gain, const float *wg)
{
    int N = g->N, K = g->K;
    const float *hr = g->h + (size_t)j * d;
    double ms = 0.0;
    for (int q = 0; q < d; q++)
        ms += (double)hr[q] * (double)hr[q];
    double rstd = 1.0 / sqrt(ms / d + 1e-5);
    double *lg = g->logits + (size_t)j * N, *p = g->p + (size_t)j * N;
    for (int e = 0; e < N; e++)
        lg[e] = 0.0;
    for (int q = 0; q < d; q++) {
        double mq = (double)hr[q] * rstd * (double)gain[q];
        for (int e = 0; e < N; e++)
            lg[e] += mq * (double)wg[(size_t)q * N + e];
    }
    double mx = lg[0], s = 0.0;
    for (int e = 1; e < N; e++)
        mx = fmax(mx, lg[e]);
    for (int e = 0; e < N; e++)
        s += exp(lg[e] - mx);
    g->lse[j] = mx + log(s);
    for (int e = 0; e < N; e++)
        p[e] = exp(lg[e] - g->lse[j]);
    int32_t *cl = g->col + (size_t)j * K;
    for (int k = 0; k <= K && k < N; k++) {
        int best = -1;
        for (int e = 0; e < N; e++) {
            bool used = false; /* one of the columns chosen before */
            for (int q = 0; q < k && q < K; q++)
                used |= cl[q] == e;
            if (!used && (best < 0 || lg[e] > lg[best]))
                best = e;
        }
        if (k > 0) /* the order of the first K+1 columns is the routing */
            g->min_gap = fmin(g->min_gap, lg[cl[k - 1]] - lg[best]);
        if (k == K)
            break;
        cl[k] = best;
    }
}

void tl_gate_ref_build(model *m, int l, int nseq, const unsigned char *take, bool noop,
                       tl_gate_ref *g)
{
    const model_dims *dm = &m->dims;
    const layer *ly = &m->layers[l];
    int S = dm->seq_len, d = dm->d_model, n = nseq * S;
    memset(g, 0, sizeof(*g));
    g->nseq = nseq;
    g->S = S;
    g->K = tl_key(ly, "top_k");
    g->E = tl_key(ly, "experts");
    g->noop = noop;
    g->N = g->E + (noop ? 1 : 0);
    int N = g->N, K = g->K;
    assert_in_range(N, 1, 4097);
    g->row = malloc((size_t)n * sizeof(int));
    g->ss = malloc((size_t)(nseq + 1) * sizeof(int));
    g->pos = malloc((size_t)n * sizeof(int32_t));
    g->h = malloc((size_t)n * d * sizeof(float));
    g->logits = malloc((size_t)n * N * sizeof(double));
    g->p = malloc((size_t)n * N * sizeof(double));
    g->lse = malloc((size_t)n * sizeof(double));
    g->col = malloc((size_t)n * K * sizeof(int32_t));
    float *xs = take ? malloc((size_t)n * d * sizeof(float)) : NULL;
    assert_true(g->row && g->ss && g->pos && g->h && g->logits && g->p && g->lse && g->col &&
                (xs || !take));
    const float *x = m->resid + (size_t)l * n * d;
    for (int b = 0; b < nseq; b++) {
        g->ss[b] = g->nsel;
        for (int i = 0; i < S; i++) {
            if (take && !take[b * S + i])
                continue;
            g->row[g->nsel] = b * S + i;
            g->pos[g->nsel] = i;
            if (xs)
                memcpy(xs + (size_t)g->nsel * d, x + (size_t)(b * S + i) * d,
                       (size_t)d * sizeof(float));
            g->nsel++;
        }
    }
    g->ss[nseq] = g->nsel;
    attn_reference(m, l, g, xs ? xs : x);
    free(xs);
    const float *gain = tl_param(m, l, "mlp_norm"), *wg = tl_param(m, l, "gate");
    g->min_gap = HUGE_VAL;
    for (int j = 0; j < g->nsel; j++)
        gate_row(g, j, d, gain, wg);
}

/* MODEL.md's admission on the selected rows: per sequence in position
 * order, first choice before second, at most capacity per real expert, the
 * no-op never dropped; -2 for rows not selected.  want: [nseq S K]. */
static void admit_reference(const tl_gate_ref *g, int capacity, int32_t *want)
{
    int K = g->K;
    for (int i = 0; i < g->nseq * g->S * K; i++)
        want[i] = -2;
    int *count = malloc((size_t)g->N * sizeof(int));
    assert_non_null(count);
    for (int b = 0; b < g->nseq; b++) {
        memset(count, 0, (size_t)g->N * sizeof(int));
        for (int j = g->ss[b]; j < g->ss[b + 1]; j++) {
            for (int k = 0; k < K; k++) {
                int e = g->col[(size_t)j * K + k];
                bool keep = (g->noop && e == g->E) || count[e] < capacity;
                count[e] += keep;
                want[(size_t)g->row[j] * K + k] = keep ? e : -1;
            }
        }
    }
    free(count);
}

double tl_check_record(const tl_gate_ref *g, const tl_routing *r, int capacity,
                       const char *label)
{
    int K = g->K;
    assert_int_equal(r->nk, g->nseq * g->S * K);
    int32_t *want = malloc((size_t)r->nk * sizeof(int32_t));
    assert_non_null(want);
    admit_reference(g, capacity, want);
    int bad = 0;
    for (int i = 0; i < r->nk; i++) {
        if (r->experts[i] != want[i] && bad++ < 8)
            print_message("[%s] seq %d pos %d slot %d: record %d, reference %d\n", label,
                          i / K / g->S, i / K % g->S, i % K, r->experts[i], want[i]);
    }
    free(want);
    assert_int_equal(bad, 0);
    double werr = 0.0;
    for (int j = 0; j < g->nsel; j++)
        for (int k = 0; k < K; k++) {
            double p = g->p[(size_t)j * g->N + g->col[(size_t)j * K + k]];
            werr = fmax(werr, fabs((double)r->weights[(size_t)g->row[j] * K + k] - p));
        }
    if (werr > 2e-5)
        print_message("[%s] recorded weights differ from the reference p by %.2e\n", label, werr);
    assert_at_most(werr, 2e-5);
    return werr;
}

/* Sequence b's balance loss, and its sums of lse^2 and entropy; its rows. */
static int aux_of_sequence(const tl_gate_ref *g, int b, double *bl, double *zsum, double *ent)
{
    int N = g->N, K = g->K, r0 = g->ss[b], r1 = g->ss[b + 1], nb = r1 - r0;
    *bl = *zsum = *ent = 0.0;
    for (int e = 0; e < N && nb > 0; e++) {
        double chosen = 0.0, meanp = 0.0;
        for (int j = r0; j < r1; j++) {
            meanp += g->p[(size_t)j * N + e] / nb;
            for (int k = 0; k < K; k++)
                chosen += g->col[(size_t)j * K + k] == e;
        }
        *bl += chosen / ((double)nb * K) * meanp;
    }
    *bl *= N;
    for (int j = r0; j < r1; j++) {
        *zsum += g->lse[j] * g->lse[j];
        for (int e = 0; e < N; e++) {
            double p = g->p[(size_t)j * N + e];
            *ent -= p > 0.0 ? p * log(p) : 0.0;
        }
    }
    return nb;
}

void tl_aux_reference(const tl_gate_ref *g, double *bl, double *z, double *ent)
{
    double rows = 0.0;
    *bl = *z = *ent = 0.0;
    for (int b = 0; b < g->nseq; b++) {
        double bb, zz, ee;
        rows += aux_of_sequence(g, b, &bb, &zz, &ee);
        *bl += bb / g->nseq;
        *z += zz;
        *ent += ee;
    }
    *z /= rows;
    *ent /= rows;
}

void tl_check_stats_kept(tl_fixture *f, int l, fwd_mode mode, const double *sums, int n_sums)
{
    const layer *ly = &f->m->layers[l];
    int S = f->m->dims.seq_len;
    for (int i = 0; i < f->b.nseq * (S + 1); i++)
        f->tokens[i] = (token_t)((f->tokens[i] + 7) % f->m->dims.vocab);
    fwd_result re;
    tl_forward(f, mode, &re);
    assert_true(re.aux_loss == 0.0);
    double *now = calloc((size_t)n_sums, sizeof(double));
    assert_non_null(now);
    ly->ops->stat_sums(ly, now);
    assert_memory_equal(sums, now, (size_t)n_sums * sizeof(double));
    free(now);
}

/* ------------------------------------------------------------------ */
/* Finite-difference gradients                                          */

bool tl_record_same(const tl_fd_env *env, tl_routing *scratch)
{
    tl_read_routing(env->f->m, env->layer, env->f->b.nseq, scratch, env->need, env->allow);
    return routing_same(scratch, env->base, env->hold);
}

/* J at p0 + s u (restricted to [off, off+n)); *same is cleared when the
 * routing differs from the base. */
static double J_at(const tl_fd_env *env, size_t off, size_t n, const float *p0, const float *u,
                   double s, tl_routing *scratch, int *same)
{
    float *p = env->f->m->params + off;
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((double)p0[i] + s * (double)u[i]);
    fwd_result r;
    double J = tl_loss(env->f, FWD_TRAIN, &r);
    if (env->aux_only)
        J = r.aux_loss;
    else if (!env->with_side)
        J -= r.side_loss;
    if (env->same && !env->same(env, scratch))
        *same = 0;
    memcpy(p, p0, n * sizeof(float));
    return J;
}

void tl_fd_check(const tl_fd_env *env, size_t off, size_t n, const float *mask, pcg32 *r,
                 double h, tl_fd_out *o)
{
    float *p = env->f->m->params + off;
    const float *grad = env->grad + off;
    float *u = malloc(n * sizeof(float)), *p0 = malloc(n * sizeof(float));
    tl_routing *scratch = env->same ? tl_routing_new() : NULL;
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
        /* <g,u> ~ N(0, |g|^2): a direction nearly orthogonal to the gradient
         * measures only rounding noise, so draw again below 0.5 |g| */
        if (fabs(an) < 0.5 * gn)
            continue;
        tries++;
        int same = 1;
        jp = J_at(env, off, n, p0, u, h, scratch, &same);
        jm = J_at(env, off, n, p0, u, -h, scratch, &same);
        jp2 = J_at(env, off, n, p0, u, 2 * h, scratch, &same);
        jm2 = J_at(env, off, n, p0, u, -2 * h, scratch, &same);
        ok = same;
    }
    assert_memory_equal(p, p0, n * sizeof(float));
    free(u);
    free(p0);
    free(scratch);
    if (!ok)
        print_message("routing changed in all %d directions\n", tries);
    assert_true(ok);
    double fd2 = (jp - jm) / (2.0 * h);
    o->fd4 = (8.0 * (jp - jm) - (jp2 - jm2)) / (12.0 * h);
    o->e2 = tl_rel_err(fd2, an);
    o->e4 = tl_rel_err(o->fd4, an);
    o->an = an;
    o->tries = tries;
}

double tl_fd_tensors(tl_fd_env *env, const char *label, pcg32 *r, double h, double h_all,
                     double tol)
{
    model *m = env->f->m;
    float *mask = calloc(m->n_params, sizeof(float));
    assert_non_null(mask);
    double worst = 0.0;
    tl_fd_out o;
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        int is_pred = strstr(mt->path, "/pred_") != NULL;
        for (long i = 0; i < mt->numel; i++)
            mask[mt->offset + i] = is_pred ? 0.0f : 1.0f;
        env->with_side = is_pred;
        tl_fd_check(env, mt->offset, (size_t)mt->numel, NULL, r, h, &o);
        print_message("[%s] grad %-20s rel err %.2e (2nd order %.2e)  <g,u> = %+.4e%s\n", label,
                      mt->path, o.e4, o.e2, o.an, o.tries > 1 ? "  (redrawn)" : "");
        /* the check means something only if the gradient is there */
        assert_true(fabs(o.an) > 1e-4);
        assert_below(o.e4, tol);
        worst = fmax(worst, o.e4);
    }
    /* every tensor but the predictor's at once (J without side_loss) */
    env->with_side = 0;
    tl_fd_check(env, 0, m->n_params, mask, r, h_all, &o);
    print_message("[%s] all parameters at once: rel err %.2e (2nd order %.2e); worst tensor %.2e\n",
                  label, o.e4, o.e2, worst);
    assert_below(o.e4, tol);
    free(mask);
    return worst;
}

void tl_check_side_stop_gradient(tl_fd_env *env, int l, const fwd_result *r0, pcg32 *r, double h,
                                 double tol, const char *label)
{
    tl_fixture *f = env->f;
    /* forward side */
    float *p = tl_param(f->m, l, "pred_w1");
    float keep = p[3];
    p[3] += 0.5f;
    fwd_result r1;
    tl_loss(f, FWD_TRAIN, &r1);
    p[3] = keep;
    assert_true(r1.ce_sum == r0->ce_sum);
    assert_true(r1.aux_loss == r0->aux_loss);
    assert_true(r1.side_loss != r0->side_loss);
    /* backward side: the same direction, J with and without side_loss */
    const model_tensor *emb = tl_tensor(f->m, -1, "tok_emb");
    tl_fd_out full, main_only;
    pcg32 r2 = *r;
    env->with_side = 1;
    tl_fd_check(env, emb->offset, (size_t)emb->numel, NULL, r, h, &full);
    env->with_side = 0;
    tl_fd_check(env, emb->offset, (size_t)emb->numel, NULL, &r2, h, &main_only);
    print_message("[%s] d/du along tok_emb: J %+.4e, J - side %+.4e, backward %+.4e\n", label,
                  full.fd4, main_only.fd4, main_only.an);
    assert_below(main_only.e4, tol);
    assert_true(fabs(full.fd4 - main_only.fd4) > 1e-3 * fabs(main_only.an));
}
