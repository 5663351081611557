/* Tests of the `staged` layer kind (staged MoDE, MODEL.md "Layer kinds"): the
 * `mod` routing of a whole block whose block is attention among the selected
 * rows followed by the `moe` MLP on those rows, with the expert capacity
 * counted on the nominal k = max(1, floor(capacity S)).
 *   1. the predictor's stop-gradient, beside finite-difference gradients of
 *      a `dense, staged` model with the predictor, routing held fixed (the
 *      other routers, gates and causal rules, and top_k 2 through
 *      granularity 2: tests/test_kinds.c, the contract);
 *   2. at capacity 1 with the random router (gate 1) the layer is the `moe`
 *      layer on the same weights (logits, record, losses, gradients); with a
 *      learned router and the sigmoid gate it is x + sigmoid(r) (moe(x) - x);
 *   3. expert capacity on a hand-made routing: ceil(cf top_k k / E) on the
 *      nominal k, in top-k and in causal mode alike;
 *   4. (causality and decoding with the KV cache: the contract,
 *      tests/test_kinds.c, over every router and causal rule);
 *   5. FLOPs: nominal and executed counts;
 *   6. the per-step statistics.
 * Everything runs without MPI (one rank).
 *
 * An independent reference (testlib.h's tl_gate_ref) recomputes the experts'
 * routing from the layer's input and a row selection: x + Attn(x) among the
 * selected rows (block.h's attention sublayer), then RMSNorm_mlp, gate
 * logits, softmax and top-k in double, and MODEL.md's admission rule written
 * out again.  The record hook's "experts" array ([nseq][S][top_k]: the
 * column, -1 dropped, -2 the row skipped the block) is checked against it. */
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
#include "testlib.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kind_ops *const kinds[] = { &dense_ops,      &mod_ops,    &moe_ops,
                                         &integrated_ops, &staged_ops, NULL };

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

/* kind "staged", or "moe" with the same expert settings */
static layer_spec layer_of(const stcfg *c, const char *kind)
{
    layer_spec s = tl_spec(kinds, kind);
    if (!strcmp(kind, "staged")) /* moe has no [mod] keys */
        tl_spec_routed(&s, kinds, c->capacity, c->router, c->gate, c->causal, c->aux_weight);
    tl_spec_experts(&s, kinds, c->experts, c->top_k, c->cf, c->d_ff, c->bw, c->zw);
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
    return tl_capacity(c->cf, c->top_k, nominal_k(c, S), c->experts);
}

/* ------------------------------------------------------------------ */
/* Fixtures, routing records, the reference routing                     */

static void make(tl_fixture *f, model_dims dims, const layer_spec *specs, int nseq, uint64_t seed)
{
    tl_make(f, kinds, dims, specs, nseq, seed);
}

/* [dense, staged] over 3 sequences of 12 tokens, the weights scaled up. */
static void dense_staged(tl_fixture *f, const stcfg *c, uint64_t seed)
{
    layer_spec specs[2] = { tl_spec(kinds, "dense"), layer_of(c, "staged") };
    make(f, tl_small_dims(2, 12), specs, 3, seed);
    tl_scale_weights(f->m, 10.0f, seed + 1);
}

/* The record of layer l after the last forward over nseq sequences: experts
 * and weights; a staged layer also selected, scores, causal (and pred_prob
 * with the predictor), a moe layer nothing else. */
static void read_routing(model *m, int l, int nseq, tl_routing *out)
{
    bool staged = m->layers[l].kind == &staged_kind;
    tl_read_routing(m, l, nseq, out, TL_EXPERT_RECORD | (staged ? TL_ROUTER_RECORD : 0),
                    staged ? TL_PRED : 0);
}

static int count_kept(const tl_routing *r)
{
    int c = 0;
    for (int i = 0; i < r->nk; i++)
        c += r->experts[i] >= 0;
    return c;
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* The reference (testlib.h's tl_gate_ref) of layer l (staged) after the last
 * forward over nseq sequences, with the rows take[nseq*S] taking the block. */
static void ref_build(model *m, int l, int nseq, const unsigned char *take, tl_gate_ref *g)
{
    tl_gate_ref_build(m, l, nseq, take, false, g);
}

/* ------------------------------------------------------------------ */
/* 1. Finite-difference gradients                                       */

/* J = ce_sum / n_positions + aux_loss + side_loss from a FWD_TRAIN forward.
 * As in test_mod.c: the predictor reads stop-gradient(x), so backward gives
 * d(ce + aux)/d theta for every tensor and d side/d theta for the
 * predictor's own tensors only (side_loss's dependence on x is deliberately
 * dropped).  The differences are taken of J without side_loss for the
 * model's tensors and with it for the predictor's (ce and aux never depend
 * on those): tl_fd_tensors.
 *
 * The routing at a perturbed point must be the base point's: the selected
 * rows, the record's experts, and the reference's columns before capacity
 * (env->user, which the balance loss counts even when dropped). */
static bool same_routing(const tl_fd_env *env, tl_routing *scratch)
{
    if (!tl_record_same(env, scratch))
        return false;
    tl_gate_ref g;
    ref_build(env->f->m, env->layer, env->f->b.nseq, scratch->selected, &g);
    bool same = !memcmp(g.col, env->user, (size_t)g.nsel * g.K * sizeof(int32_t));
    tl_gate_ref_free(&g);
    return same;
}

/* Step h = 2e-3 along N(0,1) directions (weights ~0.2, gains ~1) and the
 * 4th-order difference within 5e-3 relative of <grad, u>, as test_mod.c and
 * test_moe.c.  Routing moves with the router scores (top-k over the
 * sequence) and the gate logits (top-k over the experts) by ~1e-2 at 2h:
 * the seeds are the best of 1..3000 for the smaller of the two margins
 * (printed: 0.09 to 0.33), with drops where cf > 0 and every expert used,
 * and a direction that flips a decision anyway is redrawn.  All
 * parameters at once: a quarter of the step. */
#define FD_STEP_ALL 5e-4

/* The dense + staged model of the gradient checks, its record and reference
 * at the base point; returns J. */
static double fd_setup(tl_fixture *f, const stcfg *c, uint64_t seed, tl_routing *base,
                       tl_gate_ref *g, fwd_result *r0)
{
    dense_staged(f, c, seed);
    double J0 = tl_train_grad(f, r0);
    read_routing(f->m, 1, 3, base);
    ref_build(f->m, 1, 3, base->selected, g);
    return J0;
}

static void fd_case(const char *label, const stcfg *c, uint64_t seed)
{
    const int nseq = 3, S = 12, E = c->experts, k = nominal_k(c, S);
    tl_fixture f;
    tl_routing *base = tl_routing_new();
    tl_gate_ref g;
    fwd_result r0;
    double J0 = fd_setup(&f, c, seed, base, &g, &r0);
    for (int b = 0; b < nseq; b++) {
        int cnt = 0;
        for (int i = 0; i < S; i++)
            cnt += base->selected[b * S + i];
        assert_int_equal(cnt, k);
    }
    int cap = nominal_capacity(c, S);
    tl_check_record(&g, base, cap, label);
    int dropped = tl_count_value(base, -1);
    double rgap = is_learned(c) ? tl_router_gap(base, k) : HUGE_VAL;
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
        assert_true(tl_count_value(base, e) > 0);

    pcg32 r;
    pcg32_seed(&r, seed, 5);
    tl_fd_env env = { .f = &f, .grad = f.m->grads, .same = same_routing, .layer = 1,
                      .need = TL_EXPERT_RECORD | TL_ROUTER_RECORD, .allow = TL_PRED,
                      .hold = TL_SELECTED | TL_EXPERTS, .base = base, .user = g.col };
    tl_fd_tensors(&env, label, &r, TL_FD_STEP, FD_STEP_ALL, TL_FD_TOL);

    if (has_pred(c)) {
        /* stop-gradient: the predictor changes neither the CE nor the aux
         * loss, to the bit; side_loss does depend on tok_emb, but backward's
         * tok_emb gradient is that of ce + aux alone */
        tl_check_side_stop_gradient(&env, 1, &r0, &r, TL_FD_STEP, TL_FD_TOL, label);
    }
    tl_gate_ref_free(&g);
    free(base);
    tl_unmake(&f);
}

static void test_gradients_sigmoid_predictor(void **state)
{
    stcfg c = { 0.5, "learned", "sigmoid", "predictor", 0.3, 4, 1, 1.0, 20, 0.1, 0.05 };
    fd_case("learned sigmoid predictor, top1 cf1", &c, 700);
}

/* ------------------------------------------------------------------ */
/* 2. Capacity 1: the moe layer                                         */

/* dense + staged and dense + moe on the same weights (every tensor of the
 * staged layer copied by name from the moe one). */
static void pair(tl_fixture *fs, tl_fixture *fm, const stcfg *c, int nseq, uint64_t seed)
{
    model_dims dims = tl_small_dims(2, 12);
    layer_spec ss[2] = { tl_spec(kinds, "dense"), layer_of(c, "staged") };
    layer_spec sm[2] = { tl_spec(kinds, "dense"), layer_of(c, "moe") };
    make(fs, dims, ss, nseq, seed);
    make(fm, dims, sm, nseq, seed);
    tl_scale_weights(fs->m, 10.0f, seed + 1);
    tl_scale_weights(fm->m, 10.0f, seed + 1);
    tl_scale_if(fm->m, 1, "gate", 3.0f); /* content-dependent routing, with drops */
    tl_scale_if(fs->m, 1, "router", 5.0f);
    assert_int_equal(tl_copy_by_name(fs->m, fm->m, NULL), fm->m->n_tensors);
    memcpy(fs->tokens, fm->tokens, (size_t)nseq * (dims.seq_len + 1) * sizeof(token_t));
}

/* The random router (gate 1, no parameters) at capacity 1: every row takes
 * the block (in causal mode too: the threshold is Phi^-1(0)), the expert
 * capacity is counted on k = S like moe's, and the layer is moe's. */
static void cap1_random_case(const char *label, int top_k, double cf, uint64_t seed)
{
    const int nseq = 3, S = 12, d = 16, V = 23, n = nseq * S;
    stcfg c = { 1.0, "random", "sigmoid", "aux", 0.3, 4, top_k, cf, 20, 0.1, 0.05 };
    tl_fixture fs, fm;
    pair(&fs, &fm, &c, nseq, seed);
    assert_int_equal(fs.m->n_tensors, fm.m->n_tensors);
    assert_int_equal(fs.m->n_params, fm.m->n_params);
    tl_routing *rs = tl_routing_new(), *rm = tl_routing_new();
    int drops = 0;
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result a, b;
        tl_forward(&fs, (fwd_mode)mode, &a);
        tl_forward(&fm, (fwd_mode)mode, &b);
        read_routing(fs.m, 1, nseq, rs);
        read_routing(fm.m, 1, nseq, rm); /* moe puts experts and weights only */
        for (int i = 0; i < n; i++)
            assert_true(rs->selected[i] == 1 && rs->causal[i] == 1);
        assert_memory_equal(rs->experts, rm->experts, (size_t)rs->nk * sizeof(int32_t));
        double wd, wr, yd, yr, ld, lr;
        tl_max_diff(rs->weights, rm->weights, (size_t)rs->nk, &wd, &wr);
        tl_max_diff(fs.m->resid + (size_t)2 * n * d, fm.m->resid + (size_t)2 * n * d, (size_t)n * d,
                 &yd, &yr);
        tl_max_diff(fs.m->logits, fm.m->logits, (size_t)n * V, &ld, &lr);
        drops = tl_count_value(rs, -1);
        print_message("[%s] mode %d: %d dropped; staged - moe: weights %.2e, layer output %.2e "
                      "(rel %.2e), logits %.2e (rel %.2e); ce %.9g vs %.9g, aux %.9g vs %.9g\n",
                      label, mode, drops, wd, yd, yr, ld, lr, a.ce_sum, b.ce_sum, a.aux_loss,
                      b.aux_loss);
        assert_true(wd == 0.0);
        assert_true(yr <= 1e-6);
        assert_true(lr <= 1e-6);
        assert_true(tl_rel_err(a.ce_sum, b.ce_sum) <= 1e-6);
        assert_true(tl_rel_err(a.aux_loss, b.aux_loss) <= 1e-6);
        assert_true(mode == FWD_TRAIN ? a.aux_loss > 0.0 : a.aux_loss == 0.0);
        assert_true(cf > 0.0 ? drops > 0 : drops == 0);
    }
    tl_train_grad(&fs, NULL);
    tl_train_grad(&fm, NULL);
    double worst = 0.0;
    for (int t = 0; t < fs.m->n_tensors; t++) {
        const model_tensor *st = &fs.m->tensors[t], *mt = tl_tensor(fm.m, -1, st->path);
        double gd, gr;
        tl_max_diff(fs.m->grads + st->offset, fm.m->grads + mt->offset, (size_t)st->numel, &gd, &gr);
        if (gr > 1e-5)
            print_message("[%s] grad %s differs by %.2e relative\n", label, st->path, gr);
        assert_true(gr <= 1e-5);
        worst = fmax(worst, gr);
    }
    print_message("[%s] gradients: worst tensor differs by %.2e relative (of its max)\n", label,
                  worst);
    free(rs);
    free(rm);
    tl_unmake(&fs);
    tl_unmake(&fm);
}

/* A learned router with the sigmoid gate at capacity 1: every row takes the
 * block, x <- x + sigmoid(r) (moe(x) - x) with r = x . w_r; in training the
 * aux loss adds aux_weight mean BCE(sigmoid(r), 1) to moe's. */
static void cap1_learned_case(uint64_t seed)
{
    const int nseq = 3, S = 12, d = 16, n = nseq * S;
    stcfg c = { 1.0, "learned", "sigmoid", "aux", 0.3, 4, 2, 1.0, 20, 0.1, 0.05 };
    tl_fixture fs, fm;
    pair(&fs, &fm, &c, nseq, seed);
    const float *wr = tl_param(fs.m, 1, "router");
    tl_routing *rs = tl_routing_new(), *rm = tl_routing_new();
    for (int mode = 0; mode < 2; mode++) {
        fwd_result a, b;
        tl_forward(&fs, (fwd_mode)mode, &a);
        tl_forward(&fm, (fwd_mode)mode, &b);
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
        assert_rel_below(a.aux_loss, mode == FWD_TRAIN ? aux_want : 0.0, 1e-5);
    }
    free(rs);
    free(rm);
    tl_unmake(&fs);
    tl_unmake(&fm);
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
    model_dims dims = tl_small_dims(1, S);
    layer_spec spec = layer_of(&c, "staged");
    tl_fixture f;
    make(&f, dims, &spec, nseq, 300);
    tl_scale_weights(f.m, 10.0f, 301);
    float *wo = tl_param(f.m, 0, "wo"), *emb = tl_param(f.m, -1, "tok_emb");
    for (int i = 0; i < d; i++)
        wo[(size_t)i * d] = 0.0f;
    for (int v = 0; v < dims.vocab; v++) {
        emb[(size_t)v * d] = 3.0f;
        emb[(size_t)v * d + 1] = (float)(v - 11.5) / 10.0f;
    }
    tl_fill(f.m, 0, "router", 0.0f);
    tl_param(f.m, 0, "router")[1] = 1.0f;
    tl_param(f.m, 0, "mlp_norm")[0] = 1.0f;
    tl_fill(f.m, 0, "gate", 0.0f);
    tl_param(f.m, 0, "gate")[0] = 1.0f;
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
            f.tokens[s * (S + 1) + i] = (token_t)toks[s][i];
    tl_routing *r = tl_routing_new();
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result res;
        tl_forward(&f, (fwd_mode)mode, &res);
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
        tl_gate_ref g;
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
        tl_gate_ref_free(&g);
        if (mode == FWD_TRAIN) {
            double sums[64];
            staged_ops.stat_sums(&f.m->layers[0], sums);
            assert_true(sums[6] == 6.0 && sums[7] == 0.0 && sums[8] == 0.0 && sums[9] == 0.0);
            assert_true(sums[10] == 12.0); /* dropped */
        }
    }
    free(r);
    tl_unmake(&f);
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
    model_dims dims = tl_small_dims(2, S);
    layer_spec specs[2] = { tl_spec(kinds, "dense"), layer_of(c, "staged") };
    double router = is_learned(c) ? 2.0 * S * d : 0.0;
    if (has_pred(c))
        router += 2.0 * S * (64.0 * d + 64.0);
    double nominal = router + attn_hand(k, d) + 2.0 * k * d * E + (double)k * K * 6.0 * d * fe;
    double dense = attn_hand(S, d) + 6.0 * S * d * ff, head = 2.0 * S * d * V;
    assert_rel_below(staged_kind.flops(&specs[1], &dims, 1), nominal, 1e-12);
    tl_fixture f;
    dense_staged(&f, c, seed);
    tl_scale_if(f.m, 1, "gate", 3.0f);
    tl_scale_if(f.m, 1, "pred_w1", 5.0f); /* the predictor's causal rule takes some rows */
    tl_scale_if(f.m, 1, "pred_w2", 5.0f);
    double per_layer[2];
    assert_rel_below(model_flops_per_seq(f.m, per_layer), dense + nominal + head, 1e-12);
    assert_rel_below(per_layer[1], nominal, 1e-12);
    tl_routing *r = tl_routing_new();
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result res;
        tl_forward(&f, (fwd_mode)mode, &res);
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
        assert_rel_below(res.flops_executed, want, 1e-12);
        if (mode == FWD_EVAL_CAUSAL)
            assert_true(off_k > 0 && nsel > 0); /* else causal mode would not be told apart */
        else
            assert_true(nsel == nseq * k && kept < nsel * K); /* drops: executed < nominal */
    }
    free(r);
    tl_unmake(&f);
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
    tl_fixture f;
    dense_staged(&f, c, seed);
    tl_scale_if(f.m, 1, "gate", 3.0f);
    const layer *ly = &f.m->layers[1];
    const kind_ops *kd = ly->ops;
    assert_true(kd->kind == &staged_kind);
    int n_sums = 0;
    assert_int_equal(kd->stat_count(ly, &n_sums), 5 + E + 5); /* ... router_entropy, maxvio */
    assert_int_equal(n_sums, 6 + E + 6 + E);
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
    tl_forward(&f, FWD_TRAIN, &res);
    tl_routing *r = tl_routing_new();
    read_routing(f.m, 1, nseq, r);
    tl_gate_ref g;
    ref_build(f.m, 1, nseq, r->selected, &g);
    tl_check_record(&g, r, nominal_capacity(c, S), label);
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
        assert_true(xs[e] == tl_count_value(r, e));
    assert_true(xs[E] == tl_count_value(r, -1));
    assert_true(xs[E + 4] == nseq * k);
    assert_true(xs[E + 5] == nseq);
    double kept_total = xs[E];
    for (int e = 0; e < E; e++)
        kept_total += xs[e];
    assert_true(kept_total == nseq * k * K);
    kd->stat_columns(ly, sums, cols);
    double bl, z, ent, bce = 0.0;
    tl_aux_reference(&g, &bl, &z, &ent);
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
    assert_rel_below(xc[E + 1], bl, 1e-5);
    assert_rel_below(xc[E + 2], z, 1e-5);
    assert_rel_below(xc[E + 3], ent, 1e-5);
    assert_rel_below(res.aux_loss, aux_want, 1e-5);
    /* an evaluation forward (other tokens) leaves the training statistics */
    tl_check_stats_kept(&f, 1, FWD_EVAL_CAUSAL, sums, n_sums);
    tl_gate_ref_free(&g);
    free(r);
    tl_unmake(&f);
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
        cmocka_unit_test(test_gradients_sigmoid_predictor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
