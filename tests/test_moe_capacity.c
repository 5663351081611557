/* Capacity and dropping of the `moe` and `integrated` kinds on hand-made
 * routings (MODEL.md "Layer kinds"): position order, first choice before
 * second, capacity_factor 0, the no-op never dropped, ties to the lower
 * index, experts_capacity().  Without MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/model.h"
#include "mod/router.h"
#include "moe_cases.h"
#include "testlib.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* b. Capacity and dropping on hand-made routings                        */

/* A one-layer model whose routing is a function of the token alone:
 * Wo = 0 makes Attn(x) = att Wo = 0 exactly, so h = x = tok_emb[v];
 * tok_emb[v] = e_v (one-hot, v < d) and mlp_norm = 1 give
 * m = e_v / sqrt(1/d + 1e-5), so token v's gate logits are row v of Wg
 * times that constant (the other rows add exact zeros). */
static void handmade(tl_fixture *f, const moecfg *mc, int nseq)
{
    model_dims dims = tl_small_dims(1, 12);
    layer_spec s = moe_spec(mc);
    make(f, dims, &s, nseq, 900);
    tl_scale_weights(f->m, 10.0f, 901);
    tl_fill(f->m, 0, "wo", 0.0f);
    tl_fill(f->m, 0, "mlp_norm", 1.0f);
    tl_fill(f->m, 0, "gate", 0.0f);
    tl_fill(f->m, -1, "tok_emb", 0.0f);
    float *emb = tl_param(f->m, -1, "tok_emb");
    for (int v = 0; v < dims.d_model; v++)
        emb[(size_t)v * dims.d_model + v] = 1.0f;
    for (int i = 0; i < nseq * (dims.seq_len + 1); i++)
        f->tokens[i] = 0;
}

/* Token v's preferences: Wg[v][0..N-1]. */
static void set_prefs(tl_fixture *f, int v, const float *row, int N)
{
    float *wg = tl_param(f->m, 0, "gate");
    memcpy(wg + (size_t)v * N, row, (size_t)N * sizeof(float));
}

/* Sequence s's S input tokens from a string of digits. */
static void set_seq(tl_fixture *f, int s, const char *toks)
{
    int S = f->m->dims.seq_len;
    assert_int_equal((int)strlen(toks), S);
    for (int i = 0; i < S; i++)
        f->tokens[(size_t)s * (S + 1) + i] = (token_t)(toks[i] - '0');
}

/* Run the hand-made model in every mode and compare the record with want
 * ([nseq][S][K]); the weights with the softmax of the constructed logits. */
static void expect_routing(tl_fixture *f, const int32_t *want, const char *label)
{
    model *m = f->m;
    int S = m->dims.seq_len, d = m->dims.d_model, nseq = f->b.nseq;
    const layer *ly = &m->layers[0];
    int K = tl_key(ly, "top_k"), N = tl_key(ly, "experts") + (ly->kind == &integrated_kind ? 1 : 0);
    const float *wg = tl_param(m, 0, "gate");
    double c = 1.0 / sqrt(1.0 / d + 1e-5);
    tl_routing *r = tl_routing_new();
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        tl_forward(f, (fwd_mode)mode, NULL);
        read_routing(m, 0, nseq, r);
        int bad = 0;
        for (int i = 0; i < r->nk; i++) {
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

/* The hand-made model with token v = 1, 2, ... preferring the row
 * prefs[v-1] (N columns each, n_tokens rows) and the three sequences seqs:
 * expect_routing against want. */
static void handmade_case(const moecfg *mc, const float *prefs, int n_tokens,
                          const char *const seqs[3], const int32_t *want, const char *label)
{
    int N = mc->experts + (is_integrated(mc) ? 1 : 0);
    tl_fixture f;
    handmade(&f, mc, 3);
    for (int v = 1; v <= n_tokens; v++)
        set_prefs(&f, v, prefs + (size_t)(v - 1) * N, N);
    for (int s = 0; s < 3; s++)
        set_seq(&f, s, seqs[s]);
    expect_routing(&f, want, label);
    tl_unmake(&f);
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
    /* a factor whose capacity passes 2^31 is computed in double and clamped
     * before narrowing (1e9 x 8 x 1024 / 64 wrapped): it drops nothing,
     * as 0 does */
    ec.capacity_factor = 1e9;
    assert_int_equal(experts_capacity(&ec, 1024), INT32_MAX);
    ec.capacity_factor = 1e300;
    assert_int_equal(experts_capacity(&ec, 1024), INT32_MAX);
    ec.capacity_factor = 16.0;
    assert_int_equal(experts_capacity(&ec, 1024), 2048); /* past the rows: no drop either */
    ec.eval_capacity_factor = 1e12;
    assert_int_equal(experts_capacity_in(&ec, 1024, FWD_EVAL_TOPK), INT32_MAX);
    ec.eval_capacity_factor = -1.0;
    /* expert choice: C = min(S, max(1, floor(c S / E))): 1e9 and 8 (= E)
     * the same capacity, every token */
    experts_cfg ch = { .experts = 8, .top_k = 1, .capacity_factor = 1e9, .d_ff = 8,
                       .expert_choice = true };
    assert_int_equal(experts_capacity(&ch, 128), 128);
    ch.capacity_factor = 8.0;
    assert_int_equal(experts_capacity(&ch, 128), 128);
    ch.capacity_factor = 1.0;
    assert_int_equal(experts_capacity(&ch, 128), 16);
    ch.capacity_factor = 1e-9;
    assert_int_equal(experts_capacity(&ch, 128), 1);
    /* MoD: k = max(1, floor(capacity S)) within [1, S] */
    assert_int_equal(mod_k(1.0, 65536), 65536);
    assert_int_equal(mod_k(1e-9, 65536), 1);
    assert_int_equal(mod_k(0.29, 100), 28);

    const int nseq = 3, S = 12;
    tl_fixture f;
    /* B1: moe, top 1, capacity ceil(1 * 12 / 4) = 3.  Token 1 prefers
     * expert 2, token 2 expert 0.  The first 3 positions of each expert
     * keep it, per sequence (the counters restart with each sequence). */
    {
        moecfg mc = { "moe", 4, 1, 1.0, 8, 0.01, 0.001 };
        const float prefs[2 * 4] = {
            0, 0, 1, 0, /* token 1 */
            1, 0, 0, 0, /* token 2 */
        };
        const char *const seqs[3] = { "111111111111", "121212121212", "222222111111" };
        const int32_t want[3 * 12] = {
            2, 2, 2, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            2, 0, 2, 0, 2, 0, -1, -1, -1, -1, -1, -1,
            0, 0, 0, -1, -1, -1, 2, 2, 2, -1, -1, -1,
        };
        handmade_case(&mc, prefs, 2, seqs, want, "moe top1 capacity 3");
    }
    /* B2: moe, top 2, cf 0.3: capacity ceil(0.3 * 2 * 12 / 4) = 2.  Token 1
     * prefers (0, 1), token 2 (1, 0), token 3 (2, 1).  Sequence 0 is
     * 1 1 2 2 ...: positions 0 and 1 fill experts 0 and 1 with their first
     * AND second choices, so position 2's first choice (1) is dropped: the
     * rule is position order, not "all first choices before any second". */
    {
        moecfg mc = { "moe", 4, 2, 0.3, 8, 0.01, 0.001 };
        const float prefs[3 * 4] = {
            2, 1, 0, 0, /* token 1 */
            1, 2, 0, 0, /* token 2 */
            0, 1, 2, 0, /* token 3 */
        };
        const char *const seqs[3] = { "112222222222", "211111111111", "133133333333" };
        const int32_t want[3 * 12 * 2] = {
            0, 1,  0, 1,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            1, 0,  0, 1,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            0, 1,  2, 1,  2, -1,  0, -1,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        };
        handmade_case(&mc, prefs, 3, seqs, want, "moe top2 capacity 2");
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
        tl_unmake(&f);
    }
    /* B4: integrated (E 4, the no-op is column 4), top 1, cf 0.4: capacity
     * ceil(0.4 * 12 / 4) = 2 (over E; over the 5 columns it would be 1).
     * Token 1 prefers the no-op, token 2 expert 2.  Every no-op choice is
     * kept, however many. */
    {
        moecfg mc = { "integrated", 4, 1, 0.4, 8, 0.01, 0.001 };
        const float prefs[2 * 5] = {
            0, 0, 0, 0, 3, /* token 1 */
            0, 0, 1, 0, 0, /* token 2 */
        };
        const char *const seqs[3] = { "111111111111", "212121212121", "111111222222" };
        const int32_t want[3 * 12] = {
            4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
            2, 4, 2, 4, -1, 4, -1, 4, -1, 4, -1, 4,
            4, 4, 4, 4, 4, 4, 2, 2, -1, -1, -1, -1,
        };
        handmade_case(&mc, prefs, 2, seqs, want, "integrated top1 capacity 2");
    }
    /* B5: integrated, top 2, cf 0.25: capacity ceil(0.25 * 2 * 12 / 4) = 2.
     * Token 1 prefers (no-op, expert 0), token 2 (expert 0, no-op). */
    {
        moecfg mc = { "integrated", 4, 2, 0.25, 8, 0.01, 0.001 };
        const float prefs[2 * 5] = {
            1, 0, 0, 0, 3, /* token 1 */
            3, 0, 0, 0, 1, /* token 2 */
        };
        const char *const seqs[3] = { "111111111111", "222222222222", "212121212121" };
        const int32_t want[3 * 12 * 2] = {
            4, 0,  4, 0,  4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1,
            0, 4,  0, 4,  -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4, -1, 4,
            0, 4,  4, 0,  -1, 4, 4, -1, -1, 4, 4, -1, -1, 4, 4, -1, -1, 4, 4, -1, -1, 4, 4, -1,
        };
        handmade_case(&mc, prefs, 2, seqs, want, "integrated top2 capacity 2");
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
            tl_routing *r = tl_routing_new();
            tl_forward(&f, FWD_EVAL_TOPK, NULL);
            read_routing(f.m, 0, nseq, r);
            for (int i = 0; i < S * K; i++)
                assert_true(fabs((double)r->weights[i] - 1.0 / N) < 1e-7);
            free(r);
            tl_unmake(&f);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
