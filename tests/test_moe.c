/* Tests of the `moe` and `integrated` layer kinds (MODEL.md "Layer kinds"):
 *   a. finite-difference gradients of `dense, moe` and `dense, integrated`
 *      models, routing held fixed, top_k 1 and 2, with and without dropping,
 *      balance and z losses on (and checked on their own);
 *   b. (capacity and dropping: test_moe_capacity.c);
 *   c. tokens sent to the no-op (or dropped) get exactly no MLP update;
 *   d. `integrated` whose no-op is never chosen equals `moe` on the same
 *      weights;
 *   e. FLOPs: executed (as routed) and nominal counts;
 *   f. decoding with the KV cache gives the causal-mode logits (with drops);
 *   g. the layer is causal (admission in position order);
 *   h. the per-step statistics.
 * Everything runs without MPI (one rank: the all-to-all is a copy).
 *
 * An independent reference of the routing (testlib.h's tl_gate_ref, on every
 * row) recomputes the gate from the layer's input: h through block.h's
 * attention sublayer, then RMSNorm_mlp, logits, softmax and top-k in double,
 * and the admission rule of MODEL.md written out again (tl_check_record).
 * The record hook's "experts" array is checked against it on random models as
 * well as on the hand-made ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/block.h"
#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "moe/moe.h"
#include "moe_cases.h"
#include "moe/moe_state.h"
#include "testlib.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* [dense, X] over 3 sequences of 12 tokens, the weights scaled up. */
static void dense_moe(tl_fixture *f, const moecfg *mc, uint64_t seed)
{
    layer_spec specs[2] = { tl_spec(kinds, "dense"), moe_spec(mc) };
    make(f, tl_small_dims(2, 12), specs, 3, seed);
    tl_scale_weights(f->m, 10.0f, seed + 1);
}

/* Kept assignments at real experts (0 <= e < E). */
static int count_real(const tl_routing *r, int E)
{
    int c = 0;
    for (int i = 0; i < r->nk; i++)
        c += r->experts[i] >= 0 && r->experts[i] < E;
    return c;
}

/* The gate of layer l (moe or integrated) after the last forward over nseq
 * sequences, every row (testlib.h's reference); the no-op is column E of an
 * integrated layer. */
static void gate_reference(model *m, int l, int nseq, tl_gate_ref *g)
{
    tl_gate_ref_build(m, l, nseq, NULL, m->layers[l].kind == &integrated_kind, g);
}

/* ------------------------------------------------------------------ */
/* a. Finite-difference gradients                                        */

/* J = ce_sum / n_positions + aux_loss from a FWD_TRAIN forward (these kinds
 * have no side loss).  The routing at a perturbed point must be the base
 * point's: the record, and the reference's columns before capacity (env->user,
 * which the balance loss counts). */
static bool same_routing(const tl_fd_env *env, tl_routing *scratch)
{
    bool same = tl_record_same(env, scratch);
    tl_gate_ref g;
    gate_reference(env->f->m, env->layer, env->f->b.nseq, &g);
    if (memcmp(g.col, env->user, (size_t)g.nsel * g.K * sizeof(int32_t)))
        same = false;
    tl_gate_ref_free(&g);
    return same;
}

/* Step h = 2e-3 along N(0,1) directions (weights ~0.2, gains ~1), the
 * 4th-order difference within 5e-3 relative of <grad, u>, as test_mod.c
 * (measured: mostly 1e-5 to 5e-4, printed).  The gate moves its logits by
 * about h sqrt(d) |u| ~ 1e-2 at 2h, so the seeds are chosen with the top-k
 * margin (printed: the smallest gap between a row's k-th and (k+1)-th
 * largest logit, k <= K: the order of the first choices matters too) well above that: the best of seeds 1..2999 for each
 * configuration, 0.12 to 0.27.  A direction that flips a decision anyway is
 * redrawn. */
/* All parameters at once move the gate's input through every tensor: a
 * quarter of the step keeps the routing (the derivative along it is large,
 * ~1, so rounding noise stays ~1e-5 relative). */
#define FD_STEP_ALL 5e-4

static const char *const aux_tensors[] = { "tok_emb", "layers/0/wv", "layers/1/wq",
                                           "layers/1/mlp_norm", "layers/1/gate" };

static void fd_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 12;
    tl_fixture f;
    dense_moe(&f, mc, seed);
    const model_dims dims = f.m->dims;
    fwd_result r0;
    double J0 = tl_train_grad(&f, &r0);
    tl_routing *base = tl_routing_new();
    read_routing(f.m, 1, nseq, base);
    tl_gate_ref g;
    gate_reference(f.m, 1, nseq, &g);
    int E = mc->experts, cap = tl_capacity(mc->cf, mc->top_k, S, E);
    tl_check_record(&g, base, cap, label);
    int dropped = tl_count_value(base, -1), noop = is_integrated(mc) ? tl_count_value(base, E) : 0;
    print_message("[%s] J = %.6f (ce %.6f, aux %.4e); capacity %d: %d of %d assignments dropped, "
                  "%d to the no-op; top-k margin %.4f\n",
                  label, J0, r0.ce_sum / (double)r0.n_positions, r0.aux_loss,
                  cap == INT32_MAX ? -1 : cap, dropped, base->nk, noop, g.min_gap);
    assert_true(r0.aux_loss > 0.0);
    assert_true(r0.side_loss == 0.0);
    assert_true(mc->cf > 0.0 ? dropped > 0 : dropped == 0);
    if (is_integrated(mc))
        assert_true(noop > 0 && noop < base->nk);
    for (int e = 0; e < E; e++) /* every expert computes something: its gradient is checked */
        assert_true(tl_count_value(base, e) > 0);

    pcg32 r;
    pcg32_seed(&r, seed, 5);
    tl_fd_env env = { .f = &f, .grad = f.m->grads, .same = same_routing, .layer = 1,
                      .need = TL_EXPERT_RECORD, .hold = TL_EXPERTS, .base = base,
                      .user = g.col };
    tl_fd_tensors(&env, label, &r, TL_FD_STEP, FD_STEP_ALL, TL_FD_TOL);

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
        layer_spec s0[2] = { tl_spec(kinds, "dense"), moe_spec(&c0) };
        layer_spec s1[2] = { tl_spec(kinds, "dense"), moe_spec(&c1) };
        tl_fixture f0, f1;
        make(&f0, dims, s0, nseq, seed);
        make(&f1, dims, s1, nseq, seed);
        assert_int_equal(f0.m->n_params, f.m->n_params);
        assert_int_equal(f1.m->n_params, f.m->n_params);
        memcpy(f0.m->params, f.m->params, f.m->n_params * sizeof(float));
        memcpy(f1.m->params, f.m->params, f.m->n_params * sizeof(float));
        fwd_result ra, rb;
        tl_train_grad(&f0, &ra);
        tl_train_grad(&f1, &rb);
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
            const model_tensor *mt = tl_tensor(f.m, -1, untouched[i]);
            for (long j = 0; j < mt->numel; j++)
                assert_true(ga[mt->offset + j] == 0.0f);
        }
        tl_fd_env aenv = env;
        aenv.f = &f1;
        aenv.grad = ga;
        aenv.aux_only = 1;
        const char *what = which == 0 ? "balance" : "z-loss";
        tl_fd_out o;
        for (size_t i = 0; i < sizeof(aux_tensors) / sizeof(aux_tensors[0]); i++) {
            const model_tensor *mt = tl_tensor(f.m, -1, aux_tensors[i]);
            tl_fd_check(&aenv, mt->offset, (size_t)mt->numel, NULL, &r, TL_FD_STEP, &o);
            print_message("[%s] %s alone (aux %.4e): grad %-18s rel err %.2e  <g,u> = %+.4e%s\n",
                          label, what, rb.aux_loss, mt->path, o.e4, o.an,
                          o.tries > 1 ? "  (redrawn)" : "");
            assert_true(fabs(o.an) > 1e-6);
            assert_below(o.e4, TL_FD_TOL);
        }
        tl_fd_check(&aenv, 0, f.m->n_params, NULL, &r, FD_STEP_ALL, &o);
        print_message("[%s] %s alone, all parameters: rel err %.2e\n", label, what, o.e4);
        assert_below(o.e4, TL_FD_TOL);
        free(ga);
        tl_unmake(&f0);
        tl_unmake(&f1);
    }
    tl_gate_ref_free(&g);
    free(base);
    tl_unmake(&f);
}

/* kind with top_k 1 (seed seeds[0]) and 2 (seeds[1]), each without
 * dropping and with capacity factor 0.5. */
static void fd_cases(const char *kind, const uint64_t seeds[2])
{
    for (int top_k = 1; top_k <= 2; top_k++) {
        for (int drop = 0; drop < 2; drop++) {
            moecfg c = { kind, 4, top_k, drop ? 0.5 : 0.0, 20, 0.1, 0.05 };
            char label[64];
            snprintf(label, sizeof(label), "%s top%d cf%g", kind, top_k, c.cf);
            fd_case(label, &c, seeds[top_k - 1]);
        }
    }
}

static void test_gradients_moe(void **state)
{
    fd_cases("moe", (const uint64_t[2]){ 232, 256 });
}

static void test_gradients_integrated(void **state)
{
    fd_cases("integrated", (const uint64_t[2]){ 1599, 2892 });
}

/* ------------------------------------------------------------------ */
/* c. The no-op (and a dropped assignment) adds exactly nothing          */

/* Rows whose every assignment is the no-op or dropped leave the layer as
 * h = x + Attn(x), bit for bit; the others move.  On random models. */
static void noop_rows_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 12;
    tl_fixture f;
    dense_moe(&f, mc, seed);
    const model_dims dims = f.m->dims;
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        tl_forward(&f, (fwd_mode)mode, NULL);
        tl_routing *r = tl_routing_new();
        read_routing(f.m, 1, nseq, r);
        tl_gate_ref g;
        gate_reference(f.m, 1, nseq, &g);
        tl_check_record(&g, r, tl_capacity(mc->cf, mc->top_k, S, mc->experts), label);
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
        tl_gate_ref_free(&g);
        free(r);
    }
    tl_unmake(&f);
}

/* A one-layer model where h_0 = x_0 = 3 for every row: column 0 of Wo is
 * zero (so Attn(x) has component 0 equal to 0) and tok_emb[:,0] = 3.  With
 * mlp_norm[0] = 1, m_0 = 3 / rms(h) > 0 for every token: the gate's row 0
 * is a lever of known sign on every column. */
static void lever_model(tl_fixture *f, const moecfg *mc, int nseq, uint64_t seed)
{
    model_dims dims = tl_small_dims(1, 12);
    layer_spec s = moe_spec(mc);
    make(f, dims, &s, nseq, seed);
    tl_scale_weights(f->m, 10.0f, seed + 1);
    int d = dims.d_model;
    float *wo = tl_param(f->m, 0, "wo"), *emb = tl_param(f->m, -1, "tok_emb");
    for (int i = 0; i < d; i++)
        wo[(size_t)i * d] = 0.0f;
    for (int v = 0; v < dims.vocab; v++)
        emb[(size_t)v * d] = 3.0f;
    tl_param(f->m, 0, "mlp_norm")[0] = 1.0f;
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
        tl_fixture fi;
        lever_model(&fi, &mi, nseq, 410);
        tl_fill(fi.m, 0, "gate", 0.0f);
        tl_param(fi.m, 0, "gate")[E] = 1.0f; /* Wg[0][E] */
        fwd_result res;
        tl_forward(&fi, FWD_TRAIN, &res);
        tl_routing *r = tl_routing_new();
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
        tl_gate_ref g;
        gate_reference(fi.m, 0, nseq, &g);
        const float *y = fi.m->resid + (size_t)n * d;
        if (K == 1) {
            /* the layer is the attention sublayer alone, bit for bit */
            assert_memory_equal(y, g.h, (size_t)n * d * sizeof(float));
            /* and equals a moe layer on the same weights whose experts' W2
             * are zero (its MLP output is exactly 0) */
            moecfg mm = { "moe", E, 1, 0.5, 20, 0.1, 0.05 };
            tl_fixture fm;
            lever_model(&fm, &mm, nseq, 410);
            tl_copy_by_name(fm.m, fi.m, "/gate");
            tl_fill(fm.m, 0, "experts_w2", 0.0f);
            memcpy(fm.tokens, fi.tokens, (size_t)nseq * (S + 1) * sizeof(token_t));
            fwd_result rm;
            tl_forward(&fm, FWD_TRAIN, &rm);
            assert_memory_equal(fm.m->resid + (size_t)n * d, y, (size_t)n * d * sizeof(float));
            assert_memory_equal(fm.m->logits, fi.m->logits, (size_t)n * V * sizeof(float));
            /* executed: attention, gate and head, no expert FLOPs */
            double want = nseq * (2.0 * (4.0 * S * d * d + 2.0 * S * S * d) + 2.0 * S * d * (E + 1) +
                                  2.0 * S * d * V);
            print_message("all tokens at the no-op: y = h bit for bit; = moe with W2 = 0; "
                          "executed FLOPs %.6e (expected %.6e)\n", res.flops_executed, want);
            assert_rel_below(res.flops_executed, want, 1e-12);
            tl_unmake(&fm);
        } else {
            /* only the first three rows of each sequence move */
            for (int i = 0; i < n; i++) {
                bool same = !memcmp(y + (size_t)i * d, g.h + (size_t)i * d, (size_t)d * sizeof(float));
                assert_true(same == (i % S >= 3));
            }
        }
        tl_gate_ref_free(&g);
        free(r);
        tl_unmake(&fi);
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
    tl_fixture fi, fm;
    lever_model(&fi, &mi, nseq, seed);
    lever_model(&fm, &mm, nseq, seed);
    float *gi = tl_param(fi.m, 0, "gate");
    for (int j = 0; j < d; j++)
        gi[(size_t)j * (E + 1) + E] = j == 0 ? -200.0f : 0.0f;
    tl_copy_by_name(fm.m, fi.m, "/gate");
    float *gm = tl_param(fm.m, 0, "gate");
    for (int j = 0; j < d; j++)
        for (int e = 0; e < E; e++)
            gm[(size_t)j * E + e] = gi[(size_t)j * (E + 1) + e];
    memcpy(fm.tokens, fi.tokens, (size_t)nseq * (S + 1) * sizeof(token_t));

    fwd_result ri, rm;
    tl_forward(&fi, FWD_TRAIN, &ri);
    tl_forward(&fm, FWD_TRAIN, &rm);
    tl_gate_ref g;
    gate_reference(fi.m, 0, nseq, &g);
    double max_pnoop = 0.0, min_m0 = HUGE_VAL;
    for (int i = 0; i < n; i++) {
        max_pnoop = fmax(max_pnoop, g.p[(size_t)i * (E + 1) + E]);
        min_m0 = fmin(min_m0, -g.logits[(size_t)i * (E + 1) + E] / 200.0);
    }
    tl_routing *a = tl_routing_new(), *b = tl_routing_new();
    read_routing(fi.m, 0, nseq, a);
    read_routing(fm.m, 0, nseq, b);
    tl_check_record(&g, a, tl_capacity(cf, K, S, E), "integrated vs moe");
    assert_int_equal(tl_count_value(a, E), 0);
    assert_memory_equal(a->experts, b->experts, (size_t)a->nk * sizeof(int32_t));
    double werr = 0.0;
    for (int i = 0; i < a->nk; i++)
        werr = fmax(werr, fabs((double)a->weights[i] - (double)b->weights[i]));
    double la, lr, ya, yr;
    tl_max_diff(fi.m->logits, fm.m->logits, (size_t)n * V, &la, &lr);
    tl_max_diff(fi.m->resid + (size_t)n * d, fm.m->resid + (size_t)n * d, (size_t)n * d, &ya, &yr);
    int dropped = tl_count_value(a, -1);
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
    int cols_i = integrated_ops.stat_count(&fi.m->layers[0], &ni);
    int cols_m = moe_ops.stat_count(&fm.m->layers[0], &nm);
    assert_int_equal(cols_i, cols_m + 1);
    integrated_ops.stat_sums(&fi.m->layers[0], si);
    moe_ops.stat_sums(&fm.m->layers[0], sm);
    integrated_ops.stat_columns(&fi.m->layers[0], si, ci);
    moe_ops.stat_columns(&fm.m->layers[0], sm, cmo);
    for (int e = 0; e < E; e++)
        assert_true(ci[e] == cmo[e]);
    assert_true(ci[E] == 0.0);          /* tokens_noop */
    assert_true(ci[E + 1] == cmo[E]);   /* dropped */
    assert_rel_below(ci[E + 2], cmo[E + 1] * (E + 1) / E, 1e-5); /* balance */
    assert_rel_below(ci[E + 3], cmo[E + 2], 1e-5);               /* z */
    assert_rel_below(ci[E + 4], cmo[E + 3], 1e-5);               /* entropy */

    /* FLOPs: the one extra gate column, 2 S d per sequence */
    layer_spec si_spec = moe_spec(&mi), sm_spec = moe_spec(&mm);
    model_dims dims = tl_small_dims(1, S);
    assert_true(fabs(integrated_kind.flops(&si_spec, &dims, 1) - moe_kind.flops(&sm_spec, &dims, 1) -
                     2.0 * S * d) < 1e-6);
    assert_true(fabs(ri.flops_executed - rm.flops_executed - nseq * 2.0 * S * d) < 1e-6);
    free(a);
    free(b);
    tl_gate_ref_free(&g);
    tl_unmake(&fi);
    tl_unmake(&fm);
}

static void test_integrated_equals_moe(void **state)
{
    integrated_vs_moe_case(1, 0.0, 501);
    integrated_vs_moe_case(1, 0.4, 502); /* capacity 2 (1 if it were over E + 1 columns) */
    integrated_vs_moe_case(2, 0.0, 503);
    integrated_vs_moe_case(2, 0.4, 504); /* capacity 3 (2 over E + 1) */
}

/* ------------------------------------------------------------------ */
/* The configurations of e. to h.: moe and integrated, top 1 and 2, with
 * dropping (capacity factor 0.5); case i of a test takes seed base + i.     */

static const moecfg routed_cfgs[4] = {
    { "moe", 4, 1, 0.5, 20, 0.1, 0.05 },
    { "moe", 4, 2, 0.5, 20, 0.1, 0.05 },
    { "integrated", 4, 2, 0.5, 20, 0.1, 0.05 },
    { "integrated", 4, 1, 0.5, 20, 0.1, 0.05 },
};
static const char *const routed_labels[4] = { "moe top1 cf0.5", "moe top2 cf0.5",
                                              "integrated top2 cf0.5", "integrated top1 cf0.5" };

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
    model_dims dims = tl_small_dims(2, S);
    layer_spec specs[2] = { tl_spec(kinds, "dense"), moe_spec(mc) };
    double dense = attn_hand(S, d) + 6.0 * S * d * ff, head = 2.0 * S * d * V;
    /* nominal: attention on S rows, the gate, every assignment at a real
     * expert (the no-op charged as one) */
    double nominal = attn_hand(S, d) + 2.0 * S * d * N + (double)S * K * 6.0 * d * fe;
    const layer_kind *kind = is_integrated(mc) ? &integrated_kind : &moe_kind;
    assert_rel_below(kind->flops(&specs[1], &dims, 1), nominal, 1e-12);
    experts_cfg ec = experts_cfg_of(&moe_params_of(&specs[1])->experts, &dims, is_integrated(mc));
    assert_rel_below(experts_flops(&ec, &dims, S), 2.0 * S * d * N + (double)S * K * 6.0 * d * fe,
                     1e-12);
    /* expert d_ff 0 means the model's */
    layer_spec s0 = specs[1];
    tl_set(&s0, kinds, "d_ff", "0");
    assert_rel_below(kind->flops(&s0, &dims, 1),
                     attn_hand(S, d) + 2.0 * S * d * N + (double)S * K * 6.0 * d * ff, 1e-12);

    tl_fixture f;
    dense_moe(&f, mc, seed);
    double per_layer[2];
    assert_rel_below(model_flops_per_seq(f.m, per_layer), dense + nominal + head, 1e-12);
    assert_rel_below(per_layer[1], nominal, 1e-12);
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        fwd_result res;
        tl_forward(&f, (fwd_mode)mode, &res);
        tl_routing *r = tl_routing_new();
        read_routing(f.m, 1, nseq, r);
        int kept = count_real(r, E);
        double want = nseq * (dense + head + attn_hand(S, d)) + 2.0 * nseq * S * d * N +
                      kept * 6.0 * d * fe;
        if (mode == 0)
            print_message("[%s top%d cf %.2f] executed %.6e, expected %.6e: %d of %d assignments "
                          "at real experts (nominal %.6e)\n",
                          mc->kind, K, mc->cf, res.flops_executed, want, kept, nseq * S * K,
                          nseq * (dense + nominal + head));
        assert_rel_below(res.flops_executed, want, 1e-12);
        assert_true(kept < nseq * S * K); /* else executed = nominal and nothing is told apart */
        free(r);
    }
    tl_unmake(&f);
}

static void test_flops(void **state)
{
    for (int i = 0; i < 3; i++)
        flops_case(&routed_cfgs[i], 601 + (uint64_t)i);
    moecfg c = routed_cfgs[3];
    c.cf = 0.0; /* no drops: only the no-op saves */
    flops_case(&c, 604);
}

/* ------------------------------------------------------------------ */
/* f. Decoding                                                          */

/* [X, dense, X] with X the moe kind, weights scaled up and the gate more so
 * (std 1) so routing depends on content. */
static void routed_model(tl_fixture *f, const moecfg *mc, int nseq, int S, uint64_t seed)
{
    model_dims dims = tl_small_dims(3, S);
    layer_spec specs[3] = { moe_spec(mc), tl_spec(kinds, "dense"), moe_spec(mc) };
    make(f, dims, specs, nseq, seed);
    tl_scale_weights(f->m, 10.0f, seed + 1);
    tl_scale(f->m, 0, "gate", 5.0f);
    tl_scale(f->m, 2, "gate", 5.0f);
}

static void decode_case(const char *label, const moecfg *mc, uint64_t seed, bool need_drops)
{
    const int S = 16, E = mc->experts, K = mc->top_k;
    tl_fixture f;
    routed_model(&f, mc, 1, S, seed);
    tl_forward(&f, FWD_EVAL_CAUSAL, NULL);
    float *ref = tl_logits_copy(&f);
    tl_routing *rt[3] = { tl_routing_new(), NULL, tl_routing_new() };
    int cap = tl_capacity(mc->cf, K, S, E), drops = 0, noops = 0;
    for (int l = 0; l < 3; l += 2) {
        read_routing(f.m, l, 1, rt[l]);
        tl_gate_ref g;
        gate_reference(f.m, l, 1, &g);
        tl_check_record(&g, rt[l], cap, label);
        tl_gate_ref_free(&g);
        drops += tl_count_value(rt[l], -1);
        noops += is_integrated(mc) ? tl_count_value(rt[l], E) : 0;
    }
    if (need_drops) {
        assert_true(drops > 0);
        if (is_integrated(mc))
            assert_true(noops > 0);
    }

    unsigned char taken[16][3];
    double worst_abs, abs2;
    double worst = tl_decode_pass(&f, ref, &taken[0][0], &worst_abs, label);
    for (int pos = 0; pos < S; pos++) {
        assert_int_equal(taken[pos][1], 1);
        /* moe.c: "took the block" when the first choice is a real expert */
        for (int l = 0; l < 3; l += 2)
            assert_int_equal(taken[pos][l], rt[l]->experts[pos * K] != E);
    }
    print_message("[%s] decode vs causal forward: max rel err %.2e (max abs %.2e); %d dropped "
                  "assignments, %d at the no-op, over 2 layers\n",
                  label, worst, worst_abs, drops, noops);
    /* a second pass after decode_begin: the admission counters restart */
    tl_decode_pass(&f, ref, NULL, &abs2, label);
    free(ref);
    free(rt[0]);
    free(rt[2]);
    tl_unmake(&f);
}

static void test_decode(void **state)
{
    for (int i = 0; i < 4; i++)
        decode_case(routed_labels[i], &routed_cfgs[i], 701 + (uint64_t)i, true);
    /* past a word of bits per expert: 256 real experts and the no-op, top 2
     * (the gate's columns, the dispatch's counting sort, decoding's choices) */
    moecfg many = { "integrated", 256, 2, 1.0, 8, 0.1, 0.05 };
    decode_case("integrated, 256 experts, top2", &many, 709, false);
}

/* ------------------------------------------------------------------ */
/* g. Causality                                                          */

/* Changing tokens after position t never moves a logit or a routing
 * decision at positions <= t in FWD_EVAL_TOPK mode (logits within
 * TL_CAUSAL_TOL, decisions the same): the admission is in position order. */
static void test_causal(void **state)
{
    for (int i = 0; i < 3; i++) {
        uint64_t seed = 801 + (uint64_t)i;
        tl_fixture f;
        routed_model(&f, &routed_cfgs[i], 3, 16, seed);
        tl_check_causal(&f, FWD_EVAL_TOPK, 2, TL_EXPERT_RECORD, 0, TL_EXPERTS, seed,
                        routed_labels[i], "top-k mode is causal");
        tl_unmake(&f);
    }
}

/* ------------------------------------------------------------------ */
/* h. Statistics                                                        */

static void stats_case(const char *label, const moecfg *mc, uint64_t seed)
{
    const int nseq = 3, S = 12, E = mc->experts, K = mc->top_k;
    const int N = E + (is_integrated(mc) ? 1 : 0);
    tl_fixture f;
    dense_moe(&f, mc, seed);
    tl_scale(f.m, 1, "gate", 3.0f);
    const layer *ly = &f.m->layers[1];
    const kind_ops *k = ly->ops;
    assert_non_null(k->stat_count);
    int n_sums = 0;
    assert_int_equal(k->stat_count(ly, &n_sums), N + 5);
    assert_int_equal(n_sums, N + 6 + E);
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
    k->stat_name(ly, N + 4, name, sizeof(name));
    assert_string_equal(name, "maxvio");

    fwd_result res;
    tl_forward(&f, FWD_TRAIN, &res);
    tl_routing *r = tl_routing_new();
    read_routing(f.m, 1, nseq, r);
    tl_gate_ref g;
    gate_reference(f.m, 1, nseq, &g);
    tl_check_record(&g, r, tl_capacity(mc->cf, K, S, E), label);
    double sums[70], cols[70];
    k->stat_sums(ly, sums);
    for (int e = 0; e < N; e++)
        assert_true(sums[e] == tl_count_value(r, e));
    assert_true(sums[N] == tl_count_value(r, -1));
    assert_true(sums[N + 4] == nseq * S);
    assert_true(sums[N + 5] == nseq);
    k->stat_columns(ly, sums, cols);
    double bl, z, ent;
    tl_aux_reference(&g, &bl, &z, &ent);
    for (int e = 0; e <= N; e++)
        assert_true(cols[e] == sums[e]);
    print_message("[%s] statistics: kept", label);
    for (int e = 0; e < N; e++)
        print_message(" %g", cols[e]);
    print_message(", dropped %g; balance %.6f (ref %.6f), z %.6f (ref %.6f), entropy %.6f "
                  "(ref %.6f); aux %.6e\n",
                  cols[N], cols[N + 1], bl, cols[N + 2], z, cols[N + 3], ent, res.aux_loss);
    assert_true(cols[N] > 0.0);
    assert_rel_below(cols[N + 1], bl, 1e-5);
    assert_rel_below(cols[N + 2], z, 1e-5);
    assert_rel_below(cols[N + 3], ent, 1e-5);
    /* MaxVio over the chosen assignments (before capacity): each expert
     * chose at least what it kept, moe's every assignment is chosen */
    double chosen = 0.0, most = 0.0;
    for (int e = 0; e < E; e++) {
        assert_true(sums[N + 6 + e] >= sums[e]);
        chosen += sums[N + 6 + e];
        most = fmax(most, sums[N + 6 + e]);
    }
    if (!is_integrated(mc))
        assert_true(chosen == (double)nseq * S * K);
    assert_rel_below(cols[N + 4], most / (chosen / E) - 1.0, 1e-12);
    /* the training loss carries bw * balance + zw * z, averaged over sequences */
    assert_rel_below(res.aux_loss, mc->bw * bl + mc->zw * z, 1e-5);
    /* an evaluation forward (other tokens) leaves the training statistics */
    tl_check_stats_kept(&f, 1, FWD_EVAL_TOPK, sums, n_sums);
    tl_gate_ref_free(&g);
    free(r);
    tl_unmake(&f);
}

static void test_stats(void **state)
{
    for (int i = 0; i < 3; i++)
        stats_case(routed_labels[i], &routed_cfgs[i], 901 + (uint64_t)i);
    moecfg c = routed_cfgs[3];
    c.experts = 3;
    stats_case("integrated E3 top1 cf0.5", &c, 904);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
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
