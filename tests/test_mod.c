/* Tests of the `mod` layer kind (MODEL.md "Layer kinds", Mixture-of-Depths):
 *   1. the predictor's stop-gradient, beside finite-difference gradients of
 *      a `dense, mod` model with the predictor, selection held fixed (the
 *      other routers, gates and causal rules: tests/test_kinds.c, the
 *      contract, over every choice of every key);
 *   2. mod_topk and mod_k (tie rule, bounds, an O(n^2) reference);
 *   3. causal mode is causal, top-k mode is not;
 *   4. sampling with the KV cache gives the causal-mode logits;
 *   5. FLOPs: nominal and executed counts (k rows; causal subsets);
 *   6. the random router (k per sequence, no parameters, gate 1, keyed
 *      streams, causal share close to the capacity);
 *   7. zero router weights with the sigmoid gate at capacity 1 are half a
 *      dense block. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "mod/mod.h"
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kind_ops *const kinds[] = { &dense_ops, &mod_ops, NULL };

/* ------------------------------------------------------------------ */
/* Layer specs, fixtures, routing records                               */

typedef struct modcfg {
    double capacity;
    const char *router, *gate, *causal;
    double aux_weight;
} modcfg;

static layer_spec mod_spec(const modcfg *c)
{
    layer_spec s = tl_spec(kinds, "mod");
    tl_spec_routed(&s, kinds, c->capacity, c->router, c->gate, c->causal, c->aux_weight);
    return s;
}

/* tl_make, with the run's seed (every PCG stream is keyed from it) another
 * function of seed than the init's. */
static void make(tl_fixture *f, model_dims dims, const layer_spec *specs, int nseq, uint64_t seed)
{
    tl_make(f, kinds, dims, specs, nseq, seed);
    f->ctx.seed = seed * 1000003u + 17u;
}

/* The routing of layer l after the last forward over nseq sequences:
 * selected, scores and causal, and pred_prob with the predictor. */
static void read_routing(model *m, int l, int nseq, tl_routing *out)
{
    tl_read_routing(m, l, nseq, out, TL_ROUTER_RECORD, TL_PRED);
}

/* ------------------------------------------------------------------ */
/* 1. Finite-difference gradients                                       */

/* J = ce_sum / n_positions + aux_loss + side_loss, from a FWD_TRAIN forward
 * (aux and side losses are only added in training mode).  The predictor reads
 * stop-gradient(x): backward gives d(ce + aux)/d theta for every tensor plus
 * d side/d theta for the predictor's own tensors only, although side_loss
 * does depend on x (and so on tok_emb and every earlier layer).  So the
 * finite differences are taken of J without side_loss for the model's
 * tensors, and of J with it for the predictor's (ce and aux never depend on
 * those): tl_fd_tensors.  The top-k selection of the mod layer is held
 * fixed: a direction that flips it is redrawn. */

/* Step h = 2e-3 along a random N(0,1) direction within each tensor (weights
 * are ~0.2, gains ~1), redrawn while |<grad, u>| < 0.5 |grad| (a direction
 * nearly orthogonal to the gradient measures only float32 rounding: J carries
 * ~1e-8 of it, i.e. ~2e-5 absolute on a derivative at this step).  The 4th-order
 * difference (8[J(h)-J(-h)] - [J(2h)-J(-2h)]) / (12h) must agree with
 * <grad, u> within 5e-3 relative, as test_model.c asks (the 2nd-order one,
 * printed too, is up to ~1e-2 off on some tensors from its O(h^2) term; over
 * 16 seeds per configuration the 4th-order error never exceeded 2.2e-3 at
 * this step, typically 1e-4 to 8e-4).  The whole parameter vector along one
 * direction, at the same step: 5e-3 too.  The seeds are picked so that the
 * top-k boundary (k-th minus (k+1)-th score, printed) is not within a step of
 * flipping. */

static void fd_case(const char *label, const modcfg *mc, uint64_t seed)
{
    model_dims dims = tl_small_dims(2, 12);
    layer_spec specs[2] = { tl_spec(kinds, "dense"), mod_spec(mc) };
    tl_fixture f;
    make(&f, dims, specs, 3, seed);
    tl_scale_weights(f.m, 10.0f, seed + 1);
    fwd_result r0;
    double J0 = tl_train_grad(&f, &r0);
    tl_routing *base = tl_routing_new();
    read_routing(f.m, 1, 3, base);
    int k = mod_k(mc->capacity, dims.seq_len);
    for (int b = 0; b < 3; b++) {
        int c = 0;
        for (int i = 0; i < dims.seq_len; i++)
            c += base->selected[b * dims.seq_len + i];
        assert_int_equal(c, k);
    }
    bool learned = !strcmp(mc->router, "learned");
    bool pred = learned && !strcmp(mc->causal, "predictor");
    bool aux = learned && !strcmp(mc->causal, "aux");
    print_message("[%s] J = %.6f (ce %.6f, aux %.3e, side %.3e)\n", label, J0,
                  r0.ce_sum / (double)r0.n_positions, r0.aux_loss, r0.side_loss);
    /* the extra losses are there exactly when the config asks for them */
    assert_true(aux ? r0.aux_loss > 0.0 : r0.aux_loss == 0.0);
    assert_true(pred ? r0.side_loss > 0.0 : r0.side_loss == 0.0);
    assert_true((model_find_tensor(f.m, "layers/1/router") != NULL) == learned);
    assert_true((model_find_tensor(f.m, "layers/1/pred_w1") != NULL) == pred);

    /* how far the top-k boundary is from flipping: min over sequences of
     * (k-th best score - (k+1)-th best) */
    double gap = tl_router_gap(base, k);
    print_message("[%s] top-k boundary gap %.4f\n", label, gap);
    assert_true(gap >= 0.0);

    pcg32 r;
    pcg32_seed(&r, seed, 5);
    tl_fd_env env = { .f = &f, .grad = f.m->grads, .same = tl_record_same, .layer = 1,
                      .need = TL_ROUTER_RECORD, .allow = TL_PRED, .hold = TL_SELECTED,
                      .base = base };
    tl_fd_tensors(&env, label, &r, TL_FD_STEP, TL_FD_STEP, TL_FD_TOL);

    if (learned)
        assert_true(tl_grad_norm(f.m, 1, "router") > 1e-6);
    if (pred) {
        /* the predictor learns, and the router still learns through the gate */
        const char *names[] = { "pred_w1", "pred_b1", "pred_w2", "pred_b2" };
        for (int i = 0; i < 4; i++) {
            double g = tl_grad_norm(f.m, 1, names[i]);
            print_message("[%s] |grad layers/1/%s| = %.3e\n", label, names[i], g);
            assert_true(g > 1e-6);
        }
        print_message("[%s] |grad layers/1/router| = %.3e (gate only)\n", label,
                      tl_grad_norm(f.m, 1, "router"));
        /* stop-gradient: forward side, the predictor's weights change neither
         * the CE nor the aux loss, to the bit; backward side, backward's
         * tok_emb gradient is that of ce + aux alone (checked above), the
         * full J's derivative differs from it */
        tl_check_side_stop_gradient(&env, 1, &r0, &r, TL_FD_STEP, TL_FD_TOL, label);
    }
    free(base);
    tl_unmake(&f);
}

static void test_gradients_sigmoid_predictor(void **state)
{
    modcfg c = { 0.25, "learned", "sigmoid", "predictor", 0.3 };
    fd_case("learned sigmoid predictor", &c, 113);
}

/* ------------------------------------------------------------------ */
/* 2. mod_topk and mod_k                                                */

/* The plain reference: i is selected iff fewer than k elements beat it, where
 * j beats i when s_j > s_i, or s_j == s_i and j < i. */
static void topk_ref(unsigned char *z, const float *s, int n, int k)
{
    for (int i = 0; i < n; i++) {
        int better = 0;
        for (int j = 0; j < n; j++)
            if (s[j] > s[i] || (s[j] == s[i] && j < i))
                better++;
        z[i] = better < k;
    }
}

static void expect_topk(const float *s, int n, int k, const char *expect)
{
    unsigned char z[64];
    int scratch[64];
    memset(z, 7, sizeof(z));
    mod_topk(z, s, n, k, scratch);
    for (int i = 0; i < n; i++) {
        if (z[i] != (unsigned char)(expect[i] == '1'))
            print_message("topk n %d k %d: position %d is %d, expected %c\n", n, k, i, z[i],
                          expect[i]);
        assert_int_equal(z[i], expect[i] == '1');
    }
    assert_int_equal(z[n], 7); /* writes n bytes, no more */
}

static void test_topk_and_k(void **state)
{
    /* k = max(1, floor(capacity S)) */
    assert_int_equal(mod_k(1e-6, 64), 1);
    assert_int_equal(mod_k(0.01, 12), 1);
    assert_int_equal(mod_k(1.0, 37), 37);
    assert_int_equal(mod_k(1.0, 1), 1);
    assert_int_equal(mod_k(0.125, 256), 32);
    assert_int_equal(mod_k(0.3, 10), 3);
    assert_int_equal(mod_k(0.5, 12), 6);
    assert_int_equal(mod_k(0.25, 12), 3);
    assert_int_equal(mod_k(0.999, 10), 9);
    assert_int_equal(mod_k(0.7, 10), 7);
    assert_int_equal(mod_k(0.12, 100), 12);

    /* ties go to the lower position */
    float eq[10] = { 0 };
    expect_topk(eq, 10, 3, "1110000000");
    expect_topk(eq, 10, 1, "1000000000");
    float tie[6] = { 5, 1, 3, 3, 0, 3 };
    expect_topk(tie, 6, 1, "100000");
    expect_topk(tie, 6, 2, "101000");
    expect_topk(tie, 6, 3, "101100");
    expect_topk(tie, 6, 4, "101101");
    expect_topk(tie, 6, 5, "111101");
    expect_topk(tie, 6, 6, "111111");
    float late[5] = { 1, 2, 2, 2, 9 };
    expect_topk(late, 5, 2, "01001");
    /* -inf and huge values */
    float inf[7] = { -INFINITY, -INFINITY, 2.0f, -INFINITY, 1e30f, -1e30f, INFINITY };
    expect_topk(inf, 7, 1, "0000001");
    expect_topk(inf, 7, 3, "0010101");
    expect_topk(inf, 7, 4, "0010111");
    expect_topk(inf, 7, 5, "1010111");
    expect_topk(inf, 7, 6, "1110111");
    float allinf[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    expect_topk(allinf, 4, 2, "1100");
    float big[5] = { 3e38f, -3e38f, 3e38f, 1e-38f, -0.0f };
    expect_topk(big, 5, 2, "10100");
    expect_topk(big, 5, 3, "10110");
    expect_topk(big, 5, 4, "10111");
    /* -0 and +0 compare equal: a tie, the lower position wins */
    float zeros[3] = { -0.0f, 0.0f, -1.0f };
    expect_topk(zeros, 3, 1, "100");
    float zeros2[3] = { -1.0f, 0.0f, -0.0f };
    expect_topk(zeros2, 3, 1, "010");
    /* k >= n: everything */
    float two[2] = { -1, -2 };
    expect_topk(two, 2, 2, "11");
    expect_topk(two, 2, 5, "11");

    /* random inputs against the reference: continuous values, then many
     * duplicates (values in {0,1,2,3}), then a mix with infinities */
    pcg32 r;
    pcg32_seed(&r, 2024, 1);
    float s[300];
    unsigned char z[300], zr[300];
    int scratch[300];
    int cases = 0;
    for (int kind = 0; kind < 3; kind++) {
        for (int it = 0; it < 400; it++) {
            int n = 1 + (int)pcg32_bounded(&r, it < 300 ? 40 : 300);
            int k = 1 + (int)pcg32_bounded(&r, (uint32_t)n);
            for (int i = 0; i < n; i++) {
                if (kind == 0)
                    s[i] = pcg32_normal(&r);
                else if (kind == 1)
                    s[i] = (float)pcg32_bounded(&r, 4);
                else {
                    uint32_t c = pcg32_bounded(&r, 6);
                    s[i] = c == 0 ? -INFINITY : c == 1 ? INFINITY : c == 2 ? 1e30f
                                                                           : (float)(c - 3);
                }
            }
            mod_topk(z, s, n, k, scratch);
            topk_ref(zr, s, n, k);
            int cnt = 0;
            for (int i = 0; i < n; i++)
                cnt += z[i];
            assert_int_equal(cnt, k);
            assert_memory_equal(z, zr, (size_t)n);
            cases++;
        }
    }
    print_message("mod_topk agrees with the O(n^2) reference on %d random cases\n", cases);
}

/* ------------------------------------------------------------------ */
/* 3. Causal mode is causal; top-k mode is not                          */

static void causal_model(tl_fixture *f, const modcfg *mc, int nseq, int seq_len, uint64_t seed)
{
    model_dims dims = tl_small_dims(3, seq_len);
    layer_spec specs[3] = { mod_spec(mc), tl_spec(kinds, "dense"), mod_spec(mc) };
    make(f, dims, specs, nseq, seed);
    tl_scale_weights(f->m, 10.0f, seed + 1);
    /* moderately large routers (std 1) so that routing depends on content */
    for (int l = 0; l < 3; l += 2) {
        tl_scale_if(f->m, l, "router", 5.0f);
        if (tl_scale_if(f->m, l, "pred_w1", 5.0f))
            tl_scale(f->m, l, "pred_w2", 5.0f);
    }
}

static void causal_case(const char *label, const modcfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 16, V = 23, sq = 1;
    tl_fixture f;
    causal_model(&f, mc, nseq, S, seed);
    size_t nl = (size_t)nseq * S * V;
    float *l0 = malloc(nl * sizeof(float)), *l1 = malloc(nl * sizeof(float));
    token_t *keep = malloc((size_t)nseq * (S + 1) * sizeof(token_t));
    tl_routing *rb0 = tl_routing_new(), *rb2 = tl_routing_new(), *rt = tl_routing_new();
    assert_true(l0 && l1 && keep);
    memcpy(keep, f.tokens, (size_t)nseq * (S + 1) * sizeof(token_t));
    fwd_result res;
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_CAUSAL, &res), 0);
    memcpy(l0, f.m->logits, nl * sizeof(float));
    read_routing(f.m, 0, nseq, rb0);
    read_routing(f.m, 2, nseq, rb2);
    int taken0 = 0, taken2 = 0;
    for (int i = 0; i < nseq * S; i++) {
        taken0 += rb0->causal[i];
        taken2 += rb2->causal[i];
    }
    print_message("[%s] causal mode takes %d and %d of %d rows in layers 0 and 2\n", label, taken0,
                  taken2, nseq * S);
    /* the rule must not be trivial for the check to mean anything */
    assert_true(taken0 > 0 && taken0 < nseq * S);
    assert_true(taken2 > 0 && taken2 < nseq * S);

    pcg32 r;
    pcg32_seed(&r, seed, 3);
    int checks = 0, count_changed = 0;
    double worst = 0.0;
    for (int t = 0; t < S - 1; t++) {
        for (int trial = 0; trial < 3; trial++) {
            tl_redraw_after(&f, keep, sq, t, &r);
            assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_CAUSAL, &res), 0);
            memcpy(l1, f.m->logits, nl * sizeof(float));
            read_routing(f.m, 2, nseq, rt);
            int c_new = 0, c_old = 0;
            for (int i = 0; i < S; i++) {
                c_new += rt->causal[sq * S + i];
                c_old += rb2->causal[sq * S + i];
            }
            count_changed += c_new != c_old;
            for (int s = 0; s < nseq; s++) {
                int upto = s == sq ? t + 1 : S; /* rows that must not move */
                size_t o = (size_t)s * S * V;
                double shift = tl_rows_shift(l1 + o, l0 + o, upto, V);
                worst = fmax(worst, shift);
                if (!(shift <= TL_CAUSAL_TOL)) {
                    print_message("[%s] causal: seq %d moved below t = %d by %.2e\n", label, s,
                                  t, shift);
                    fail();
                }
            }
            checks++;
        }
    }
    print_message("[%s] causal mode: %d token changes, logits at positions <= t within %.1e "
                  "(moved %.1e at most; the changed sequence's taken count in layer 2 moved in "
                  "%d of them)\n", label, checks, TL_CAUSAL_TOL, worst, count_changed);

    /* top-k mode: some change of later tokens moves an earlier logit, by far
     * more than rounding */
    memcpy(f.tokens, keep, (size_t)nseq * (S + 1) * sizeof(token_t));
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_TOPK, &res), 0);
    memcpy(l0, f.m->logits, nl * sizeof(float));
    int found = -1, tries = 0;
    for (int t = S / 2; t >= 0 && found < 0; t--) {
        for (int trial = 0; trial < 8 && found < 0; trial++) {
            tl_redraw_after(&f, keep, sq, t, &r);
            assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_TOPK, &res), 0);
            tries++;
            size_t o = (size_t)sq * S * V;
            double shift = tl_rows_shift(f.m->logits + o, l0 + o, t + 1, V);
            if (shift > TL_CAUSAL_TOL) {
                found = t;
                print_message("[%s] top-k mode: changing tokens after t = %d moved an earlier "
                              "logit by %.2e of its row's largest (found after %d tries)\n",
                              label, found, shift, tries);
            }
        }
    }
    assert_true(found >= 0);
    memcpy(f.tokens, keep, (size_t)nseq * (S + 1) * sizeof(token_t));
    free(l0);
    free(l1);
    free(keep);
    free(rb0);
    free(rb2);
    free(rt);
    tl_unmake(&f);
}

static void test_causal_mode(void **state)
{
    modcfg aux = { 0.5, "learned", "sigmoid", "aux", 0.01 };
    modcfg pred = { 0.25, "learned", "sigmoid", "predictor", 0.01 };
    causal_case("learned aux", &aux, 31);
    causal_case("learned predictor", &pred, 32);
}

/* ------------------------------------------------------------------ */
/* 4. Sampling with the cache = causal-mode forward                      */

static void decode_case(const char *label, const modcfg *mc, uint64_t seed)
{
    const int S = 16, V = 23;
    tl_fixture f;
    causal_model(&f, mc, 1, S, seed);
    bool random = !strcmp(mc->router, "random");
    bool pred = !random && !strcmp(mc->causal, "predictor");
    f.b.step = 0;
    f.b.seq0 = 0;
    tl_forward(&f, FWD_EVAL_CAUSAL, NULL);
    float *ref = tl_logits_copy(&f);
    tl_routing *rt[3] = { tl_routing_new(), NULL, tl_routing_new() };
    read_routing(f.m, 0, 1, rt[0]);
    read_routing(f.m, 2, 1, rt[2]);
    double thr = random ? mod_normal_quantile(1.0 - mc->capacity) : 0.0;
    /* the recorded decision is the causal rule of MODEL.md */
    for (int l = 0; l < 3; l += 2) {
        for (int i = 0; i < S; i++) {
            if (pred) {
                assert_true(rt[l]->has & TL_PRED);
                float p = rt[l]->pred_prob[i];
                if (fabsf(p - 0.5f) > 1e-6f)
                    assert_int_equal(rt[l]->causal[i], p > 0.5f);
            } else {
                assert_int_equal(rt[l]->causal[i], (double)rt[l]->scores[i] > thr);
            }
        }
    }

    unsigned char taken[16][3];
    double worst_abs;
    double worst = tl_decode_pass(&f, ref, &taken[0][0], &worst_abs, label);
    int ntaken[3] = { 0, 0, 0 };
    for (int pos = 0; pos < S; pos++) {
        assert_int_equal(taken[pos][1], 1); /* dense */
        for (int l = 0; l < 3; l += 2) {
            assert_int_equal(taken[pos][l], rt[l]->causal[pos]);
            ntaken[l] += taken[pos][l];
        }
    }
    int c0 = 0, c2 = 0;
    for (int i = 0; i < S; i++) {
        c0 += rt[0]->causal[i];
        c2 += rt[2]->causal[i];
    }
    assert_int_equal(ntaken[0], c0);
    assert_int_equal(ntaken[2], c2);
    print_message("[%s] decode vs causal forward: max rel err %.2e (max abs %.2e); taken "
                  "%d/%d and %d/%d positions in layers 0 and 2\n",
                  label, worst, worst_abs, ntaken[0], S, ntaken[2], S);
    /* both outcomes occur, or the comparison is not exercising the skip */
    assert_true(ntaken[0] + ntaken[2] > 0 && ntaken[0] + ntaken[2] < 2 * S);

    /* a second pass after decode_begin again gives the same logits */
    float logits[23];
    assert_int_equal(model_decode_begin(f.m, S), 0);
    for (int pos = 0; pos < S; pos++)
        assert_int_equal(model_decode_step(f.m, &f.ctx, f.tokens[pos], pos, logits, NULL), 0);
    for (int v = 0; v < V; v++)
        assert_true(fabs((double)logits[v] - (double)ref[(size_t)(S - 1) * V + v]) <=
                    1e-4 * fmax(1.0, fabs((double)ref[(size_t)(S - 1) * V + v])));
    free(ref);
    free(rt[0]);
    free(rt[2]);
    tl_unmake(&f);
}

static void test_decode(void **state)
{
    modcfg aux = { 0.5, "learned", "sigmoid", "aux", 0.01 };
    modcfg pred = { 0.25, "learned", "sigmoid", "predictor", 0.01 };
    modcfg rnd = { 0.5, "random", "sigmoid", "aux", 0.01 };
    modcfg raw = { 0.5, "learned", "raw", "none", 0.01 };
    decode_case("learned aux", &aux, 41);
    decode_case("learned predictor", &pred, 42);
    decode_case("random", &rnd, 43);
    decode_case("learned raw none", &raw, 44);
}

/* ------------------------------------------------------------------ */
/* 5. FLOPs                                                             */

static double dense_layer_flops(double S, double d, double f)
{
    return 2.0 * (4.0 * S * d * d + 2.0 * S * S * d) + 6.0 * S * d * f;
}

/* The block on n rows of one sequence. */
static double block_rows_flops(double n, double d, double f)
{
    return 2.0 * (4.0 * n * d * d + 2.0 * n * n * d) + 6.0 * n * d * f;
}

static void test_flops(void **state)
{
    const int nseq = 3, S = 16;
    const double d = 16, ff = 24, V = 23;
    model_dims dims = tl_small_dims(3, S);
    modcfg mc = { 0.25, "learned", "sigmoid", "aux", 0.01 };
    layer_spec specs[3] = { tl_spec(kinds, "dense"), mod_spec(&mc), tl_spec(kinds, "dense") };
    int k = 4; /* floor(0.25 * 16) */
    double dense = dense_layer_flops(S, d, ff), head = 2.0 * S * d * V;
    double modf = 2.0 * S * d + block_rows_flops(k, d, ff);
    double per_seq = 2 * dense + modf + head;

    /* the kind's nominal count, and the model's */
    assert_rel_below(mod_kind.flops(&specs[1], &dims, 1), modf, 1e-12);
    tl_fixture f;
    make(&f, dims, specs, nseq, 51);
    tl_scale_weights(f.m, 10.0f, 52);
    tl_scale(f.m, 1, "router", 5.0f);
    double per_layer[3];
    assert_rel_below(model_flops_per_seq(f.m, per_layer), per_seq, 1e-12);
    assert_rel_below(per_layer[1], modf, 1e-12);
    /* a mod layer with the predictor pays it on S rows (d -> 64 -> 1); the
     * random router has no matrix product */
    modcfg pc = { 0.25, "learned", "sigmoid", "predictor", 0.01 };
    layer_spec ps = mod_spec(&pc);
    assert_rel_below(mod_kind.flops(&ps, &dims, 1),
                     modf + 2.0 * S * (d * MOD_PRED_HIDDEN + MOD_PRED_HIDDEN), 1e-12);
    modcfg rc = { 0.25, "random", "sigmoid", "aux", 0.01 };
    layer_spec rs = mod_spec(&rc);
    assert_rel_below(mod_kind.flops(&rs, &dims, 1), block_rows_flops(k, d, ff), 1e-12);
    layer_spec one = mod_spec(&mc);
    tl_set(&one, kinds, "capacity", "1");
    assert_rel_below(mod_kind.flops(&one, &dims, 1), 2.0 * S * d + dense, 1e-12);

    /* executed, training and top-k evaluation: exactly k rows */
    fwd_result res;
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_TRAIN, &res), 0);
    print_message("flops: train executed %.6e, expected %.6e (nominal %.6e / seq)\n",
                  res.flops_executed, nseq * per_seq, per_seq);
    assert_rel_below(res.flops_executed, nseq * per_seq, 1e-12);
    /* the training statistics count the causal rule against the top-k set */
    {
        tl_routing *rr = tl_routing_new();
        read_routing(f.m, 1, nseq, rr);
        double want_sums[6] = { 0, 0, 0, 0, 0, nseq * S }, sums[6];
        for (int i = 0; i < nseq * S; i++) {
            want_sums[(rr->causal[i] ? 0 : 2) + (rr->selected[i] ? 0 : 1)] += 1.0;
            want_sums[4] += rr->causal[i];
        }
        int n_sums = 0;
        assert_int_equal(mod_ops.stat_count(&f.m->layers[1], &n_sums), 5);
        assert_int_equal(n_sums, 6);
        mod_ops.stat_sums(&f.m->layers[1], sums);
        for (int i = 0; i < 6; i++)
            assert_true(sums[i] == want_sums[i]);
        double cols[5];
        mod_ops.stat_columns(&f.m->layers[1], sums, cols);
        assert_true(fabs(cols[3] - want_sums[4] / (nseq * S)) < 1e-12); /* causal_capacity */
        assert_true(fabs(cols[4] - (double)(nseq * k) / (nseq * S)) < 1e-12); /* topk_capacity */
        free(rr);
    }
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_TOPK, &res), 0);
    assert_rel_below(res.flops_executed, nseq * per_seq, 1e-12);

    /* causal mode: the rows actually taken, per sequence */
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_CAUSAL, &res), 0);
    tl_routing *rt = tl_routing_new();
    read_routing(f.m, 1, nseq, rt);
    double want = nseq * (2 * dense + head + 2.0 * S * d);
    int distinct_from_k = 0;
    for (int b = 0; b < nseq; b++) {
        int ns = 0;
        for (int i = 0; i < S; i++)
            ns += rt->causal[b * S + i];
        print_message("flops: causal mode, sequence %d takes %d rows (k = %d)\n", b, ns, k);
        distinct_from_k += ns != k;
        want += block_rows_flops(ns, d, ff);
    }
    print_message("flops: causal executed %.6e, expected %.6e\n", res.flops_executed, want);
    assert_true(distinct_from_k > 0); /* else this would not tell the two counts apart */
    assert_rel_below(res.flops_executed, want, 1e-12);
    free(rt);
    tl_unmake(&f);
}

/* ------------------------------------------------------------------ */
/* 6. The random router                                                  */

static void test_random_router(void **state)
{
    const int nseq = 4, S = 16;
    model_dims dims = tl_small_dims(2, S);
    modcfg mc = { 0.25, "random", "sigmoid", "aux", 0.01 };
    layer_spec specs[2] = { tl_spec(kinds, "dense"), mod_spec(&mc) };
    tl_fixture f;
    make(&f, dims, specs, nseq, 61);
    tl_scale_weights(f.m, 10.0f, 62);
    /* no router parameters: exactly the block's 9 tensors */
    assert_int_equal(f.m->layers[1].n_tensors, 9);
    assert_int_equal(mod_kind.tensors(&specs[1], &dims, NULL, 0), 9);
    assert_null(model_find_tensor(f.m, "layers/1/router"));
    modcfg pc = mc;
    pc.causal = "predictor";
    layer_spec ps = mod_spec(&pc);
    assert_int_equal(mod_kind.tensors(&ps, &dims, NULL, 0), 9);

    int k = mod_k(mc.capacity, S);
    tl_routing *a = tl_routing_new(), *b = tl_routing_new(), *c = tl_routing_new();
    fwd_result res;
    f.b.step = 3;
    f.b.seq0 = 5;
    f.b.global_seqs = 16;
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_TRAIN, &res), 0);
    read_routing(f.m, 1, nseq, a);
    for (int s = 0; s < nseq; s++) {
        int cnt = 0;
        for (int i = 0; i < S; i++)
            cnt += a->selected[s * S + i];
        assert_int_equal(cnt, k);
    }
    assert_true(res.aux_loss == 0.0 && res.side_loss == 0.0);
    /* the same key gives the same selection, whatever the content */
    for (int i = 0; i < nseq * (S + 1); i++)
        f.tokens[i] = (token_t)((f.tokens[i] + 5) % dims.vocab);
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_TOPK, &res), 0);
    read_routing(f.m, 1, nseq, b);
    assert_memory_equal(a->selected, b->selected, (size_t)(nseq * S));
    assert_memory_equal(a->scores, b->scores, (size_t)(nseq * S) * sizeof(float));
    /* keyed by the global sequence index: sequence 1 of a batch at seq0 5 is
     * sequence 0 of a batch at seq0 6 */
    batch one = f.b;
    one.tokens = f.tokens + (S + 1);
    one.nseq = 1;
    one.seq0 = 6;
    assert_int_equal(model_forward(f.m, &f.ctx, &one, FWD_EVAL_TOPK, &res), 0);
    read_routing(f.m, 1, 1, c);
    assert_memory_equal(c->scores, a->scores + S, (size_t)S * sizeof(float));
    assert_memory_equal(c->selected, a->selected + S, (size_t)S);
    /* another step, another seed: another selection */
    f.b.step = 4;
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_TOPK, &res), 0);
    read_routing(f.m, 1, nseq, b);
    assert_memory_not_equal(a->selected, b->selected, (size_t)(nseq * S));
    f.b.step = 3;
    f.ctx.seed += 1;
    assert_int_equal(model_forward(f.m, &f.ctx, &f.b, FWD_EVAL_TOPK, &res), 0);
    read_routing(f.m, 1, nseq, b);
    assert_memory_not_equal(a->selected, b->selected, (size_t)(nseq * S));
    f.ctx.seed -= 1;
    tl_unmake(&f);

    /* gate 1: at capacity 1 the random-router layer is the dense block */
    {
        model_dims d1 = tl_small_dims(1, S);
        modcfg all = { 1.0, "random", "sigmoid", "aux", 0.01 };
        layer_spec sm = mod_spec(&all), sd = tl_spec(kinds, "dense");
        tl_fixture fm, fdn;
        make(&fm, d1, &sm, nseq, 63);
        make(&fdn, d1, &sd, nseq, 63);
        tl_scale_weights(fdn.m, 10.0f, 64);
        tl_copy_by_name(fm.m, fdn.m, NULL);
        assert_int_equal(model_forward(fm.m, &fm.ctx, &fm.b, FWD_EVAL_TOPK, &res), 0);
        assert_int_equal(model_forward(fdn.m, &fdn.ctx, &fdn.b, FWD_EVAL_TOPK, &res), 0);
        size_t rd = (size_t)nseq * S * d1.d_model;
        double worst = 0.0;
        for (size_t i = 0; i < rd; i++) {
            double ym = (double)fm.m->resid[rd + i], yd = (double)fdn.m->resid[rd + i];
            worst = fmax(worst, fabs(ym - yd) / fmax(1.0, fabs(yd)));
        }
        print_message("random router, capacity 1 vs dense: max rel diff %.2e\n", worst);
        assert_true(worst < 1e-5);
        tl_unmake(&fm);
        tl_unmake(&fdn);
    }

    /* causal mode: r > Phi^-1(1 - capacity); over 64 sequences of 64 tokens
     * the share taken is within 0.03 of the capacity (the binomial standard
     * deviation is sqrt(c(1-c)/4096) <= 0.008, so 0.03 is ~4 sigma) */
    {
        const int ns = 64, SL = 64;
        model_dims d2 = tl_small_dims(3, SL);
        double caps[3] = { 0.125, 0.25, 0.5 };
        for (int ci = 0; ci < 3; ci++) {
            modcfg cm = { caps[ci], "random", "sigmoid", "aux", 0.01 };
            layer_spec sp[3] = { mod_spec(&cm), tl_spec(kinds, "dense"), mod_spec(&cm) };
            tl_fixture fc;
            make(&fc, d2, sp, ns, 65 + (uint64_t)ci);
            fc.b.step = 7;
            assert_int_equal(model_forward(fc.m, &fc.ctx, &fc.b, FWD_EVAL_CAUSAL, &res), 0);
            read_routing(fc.m, 0, ns, a);
            read_routing(fc.m, 2, ns, b);
            double thr = mod_normal_quantile(1.0 - caps[ci]);
            int t0 = 0, t2 = 0, topk = 0;
            for (int i = 0; i < ns * SL; i++) {
                assert_int_equal(a->causal[i], (double)a->scores[i] > thr);
                t0 += a->causal[i];
                t2 += b->causal[i];
                topk += a->selected[i];
            }
            double s0 = (double)t0 / (ns * SL), s2 = (double)t2 / (ns * SL);
            print_message("random router, capacity %.3f: causal share %.4f (layer 0), %.4f "
                          "(layer 2); top-k share %.4f\n",
                          caps[ci], s0, s2, (double)topk / (ns * SL));
            assert_true(fabs(s0 - caps[ci]) < 0.03);
            assert_true(fabs(s2 - caps[ci]) < 0.03);
            assert_int_equal(topk, ns * mod_k(caps[ci], SL));
            /* layers 0 and 2 draw different streams */
            assert_memory_not_equal(a->scores, b->scores, (size_t)(ns * SL) * sizeof(float));
            tl_unmake(&fc);
        }
    }
    /* the quantile itself */
    assert_true(fabs(mod_normal_quantile(0.5)) < 1e-9);
    assert_true(fabs(mod_normal_quantile(0.975) - 1.959963984540054) < 1e-9);
    assert_true(fabs(mod_normal_quantile(0.875) - 1.150349380376008) < 1e-9);
    free(a);
    free(b);
    free(c);
}

/* ------------------------------------------------------------------ */
/* 7. Zero router, sigmoid gate, capacity 1: x + 0.5 (Block(x) - x)      */

static void test_zero_router_half_block(void **state)
{
    const int nseq = 3, S = 12;
    model_dims d1 = tl_small_dims(1, S);
    modcfg mc = { 1.0, "learned", "sigmoid", "aux", 0.01 };
    layer_spec sm = mod_spec(&mc), sd = tl_spec(kinds, "dense");
    tl_fixture fm, fdn;
    make(&fm, d1, &sm, nseq, 71);
    make(&fdn, d1, &sd, nseq, 71);
    tl_scale_weights(fdn.m, 10.0f, 72);
    tl_copy_by_name(fm.m, fdn.m, NULL);
    const model_tensor *rt = tl_tensor(fm.m, 0, "router");
    memset(fm.m->params + rt->offset, 0, (size_t)rt->numel * sizeof(float));
    fwd_result res;
    assert_int_equal(model_forward(fdn.m, &fdn.ctx, &fdn.b, FWD_EVAL_TOPK, &res), 0);
    size_t rd = (size_t)nseq * S * d1.d_model;
    const float *x = fdn.m->resid, *yd = fdn.m->resid + rd;
    for (int mode = 0; mode < 2; mode++) {
        assert_int_equal(
            model_forward(fm.m, &fm.ctx, &fm.b, mode ? FWD_EVAL_TOPK : FWD_TRAIN, &res), 0);
        const float *ym = fm.m->resid + rd;
        assert_memory_equal(fm.m->resid, x, rd * sizeof(float)); /* same embedding */
        double worst = 0.0, moved = 0.0;
        for (size_t i = 0; i < rd; i++) {
            double want = (double)x[i] + 0.5 * ((double)yd[i] - (double)x[i]);
            worst = fmax(worst, fabs((double)ym[i] - want) / fmax(1.0, fabs(want)));
            moved = fmax(moved, fabs((double)yd[i] - (double)x[i]));
        }
        print_message("zero router, sigmoid gate, capacity 1 (%s): max rel diff from "
                      "x + 0.5 (Block(x) - x) %.2e (the block moves x by up to %.2f)\n",
                      mode ? "top-k eval" : "train", worst, moved);
        assert_true(moved > 0.1);
        assert_true(worst < 1e-5);
    }
    /* causal mode: a score of exactly 0 is not > 0, nothing takes the block */
    assert_int_equal(model_forward(fm.m, &fm.ctx, &fm.b, FWD_EVAL_CAUSAL, &res), 0);
    assert_memory_equal(fm.m->resid + rd, fm.m->resid, rd * sizeof(float));
    tl_unmake(&fm);
    tl_unmake(&fdn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_and_k),
        cmocka_unit_test(test_gradients_sigmoid_predictor),
        cmocka_unit_test(test_causal_mode),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_random_router),
        cmocka_unit_test(test_zero_router_half_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
