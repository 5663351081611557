/* Known answers for the routed block's data movement and the selectors
 * beside the router (what the contract test, tests/test_kinds.c, cannot
 * say: it checks the kinds' backward against finite differences and their
 * decoding against the causal forward, not which rows a rule picks):
 *   1. gather, scatter and their backward on a hand example;
 *   2. select_draws: evaluation, pruning, per-sequence and per-token draws
 *      and their scales;
 *   3. select_steps: top-k among the eligible rows (ties to the lower
 *      position), the causal rule, gates sigmoid(s), the BCE's sum. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mod/routed.h"
#include "mod/select_draws.h"
#include "mod/select_steps.h"

#include <math.h>
#include <string.h>

enum { MAXR = 64 };

typedef struct set_store {
    int sel[MAXR], seq_start[MAXR + 1];
    int32_t pos[MAXR];
    float gate[MAXR];
} set_store;

static routed_set set_on(set_store *st)
{
    routed_set s = { .sel = st->sel, .seq_start = st->seq_start, .pos = st->pos,
                     .gate = st->gate };
    return s;
}

/* 1. Two sequences of two rows, d = 2; rows 1 (gate 0.5) and 2 (gate 2). */
static void test_gather_scatter(void **state)
{
    (void)state;
    set_store st;
    routed_set s = set_on(&st);
    routed_set_begin(&s);
    routed_set_add(&s, 1, 1, 0.5f);
    routed_set_next_seq(&s);
    routed_set_add(&s, 2, 0, 2.0f);
    routed_set_next_seq(&s);
    assert_int_equal(s.n_sel, 2);
    assert_int_equal(s.nseq, 2);
    assert_int_equal(s.sum_sq, 2);
    assert_int_equal(s.seq_start[0], 0);
    assert_int_equal(s.seq_start[1], 1);
    assert_int_equal(s.seq_start[2], 2);

    const float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    float xs[4], y[8];
    routed_gather(&s, xs, x, 2);
    const float xs_want[4] = { 3, 4, 5, 6 };
    assert_memory_equal(xs, xs_want, sizeof(xs));
    const float ys[4] = { 5, 0, 6, 10 }; /* the block's outputs on rows 1, 2 */
    routed_scatter(&s, y, x, ys, xs, 4, 2);
    /* row 1: 3 + 0.5 (5 - 3), 4 + 0.5 (0 - 4); row 2: 5 + 2 (6 - 5), 6 + 2 (10 - 6) */
    const float y_want[8] = { 1, 2, 4, 2, 7, 14, 7, 8 };
    assert_memory_equal(y, y_want, sizeof(y));

    const float dy[8] = { 1, 1, 1, 2, 3, -1, 1, 1 };
    float dx[8] = { 0 }, dys[4], dgate[2];
    routed_scatter_backward(&s, dys, dgate, dx, dy, ys, xs, 4, 2);
    const float dys_want[4] = { 0.5f, 1, 6, -2 };
    assert_memory_equal(dys, dys_want, sizeof(dys));
    /* <dy[1], ys - xs> = 1 * 2 + 2 * (-4); <dy[2], ...> = 3 * 1 + (-1) * 4 */
    assert_true(dgate[0] == -6.0f && dgate[1] == -1.0f);
    assert_memory_equal(dx, dy, sizeof(dx)); /* the identity path alone so far */
    const float dxs[4] = { 10, 20, 30, 40 };
    routed_gather_backward(&s, dx, dxs, dys, 2);
    const float dx_want[8] = { 1, 1, 10.5f, 21, 27, 41, 1, 1 };
    assert_memory_equal(dx, dx_want, sizeof(dx));
}

/* 2. */
static void test_draws(void **state)
{
    (void)state;
    set_store st;
    routed_set s = set_on(&st);
    enum { NSEQ = 4, S = 8 };
    fwd_args a = { .mode = FWD_EVAL_TOPK, .nseq = NSEQ, .seq_len = S, .seq0 = 0, .step = 3 };
    draws_rule r = { .p = 0.25, .per_token = false, .rescale = false, .pruned = false };
    float g;

    /* evaluation: every row, scaled by 1 - p without rescaling */
    assert_true(select_draws(&s, &r, &a, 1) == NSEQ * S);
    assert_int_equal(s.n_sel, NSEQ * S);
    assert_int_equal(s.sum_sq, NSEQ * S * S);
    for (int j = 0; j < s.n_sel; j++)
        assert_true(s.sel[j] == j && s.pos[j] == j % S && s.gate[j] == 0.75f);
    assert_int_equal(select_draws_decide(&r, &g), 1);
    assert_true(g == 0.75f);
    r.rescale = true;
    assert_int_equal(select_draws_decide(&r, &g), 1);
    assert_true(g == 1.0f);

    /* pruned: no row in evaluation and decoding, every sequence still closed */
    r.pruned = true;
    assert_true(select_draws(&s, &r, &a, 1) == 0.0);
    assert_int_equal(s.n_sel, 0);
    assert_int_equal(s.nseq, NSEQ);
    assert_int_equal(select_draws_decide(&r, &g), 0);

    /* training per sequence: whole sequences, scale 1 / (1 - p); pruning
     * is for evaluation only */
    a.mode = FWD_TRAIN;
    int whole = 0, seen_drop = 0;
    for (a.step = 0; a.step < 20; a.step++) {
        double kept = select_draws(&s, &r, &a, 1);
        assert_true(kept == s.n_sel);
        assert_int_equal(s.n_sel % S, 0);
        for (int b = 0; b < NSEQ; b++) {
            int ns = s.seq_start[b + 1] - s.seq_start[b];
            assert_true(ns == 0 || ns == S);
            whole += ns == S;
            seen_drop += ns == 0;
        }
        for (int j = 0; j < s.n_sel; j++)
            assert_true(s.gate[j] == (float)(1.0 / 0.75));
    }
    assert_true(whole > 0 && seen_drop > 0);

    /* training per token: every row runs, a dropped one with gate 0, the
     * kept share near 1 - p */
    r.per_token = true;
    double kept = 0.0;
    for (a.step = 0; a.step < 50; a.step++) {
        kept += select_draws(&s, &r, &a, 1);
        assert_int_equal(s.n_sel, NSEQ * S);
        for (int j = 0; j < s.n_sel; j++)
            assert_true(s.gate[j] == 0.0f || s.gate[j] == (float)(1.0 / 0.75));
    }
    double share = kept / (50.0 * NSEQ * S);
    assert_true(share > 0.68 && share < 0.82);
}

/* 3. One sequence of 6 rows; rows 1 and 4 no longer recursing. */
static void test_steps(void **state)
{
    (void)state;
    enum { S = 6, D = 2 };
    select_steps sel;
    assert_int_equal(build_select_steps(&sel, 1, S), 0);
    set_store st;
    routed_set s = set_on(&st);
    const unsigned char elig[S] = { 1, 0, 1, 1, 0, 1 };
    memcpy(sel.elig, elig, S);
    /* s = x . w with w = (1, 0): scores 0.5, (9), 2, 2, (9), -1 */
    const float x[S * D] = { 0.5f, 7, 9, 7, 2, 7, 2, 7, 9, 7, -1, 7 };
    const float w[D] = { 1, 0 };
    assert_int_equal(select_steps_score(&sel, x, w, S, D), 4);
    assert_true(sel.s[1] == 0.0f && sel.s[4] == 0.0f && sel.s[2] == 2.0f);

    /* top-2 of the eligible: rows 2 and 3 (the ineligible 9s never) */
    select_steps_choose(&sel, &s, 2, false, 1, S);
    const unsigned char take2[S] = { 0, 0, 1, 1, 0, 0 };
    assert_memory_equal(sel.take, take2, S);
    assert_int_equal(s.n_sel, 2);
    assert_true(s.sel[0] == 2 && s.sel[1] == 3 && s.pos[1] == 3);
    assert_true(s.gate[0] == 1.0f / (1.0f + expf(-2.0f)));
    /* top-1: the tie at 2 goes to the lower position */
    select_steps_choose(&sel, &s, 1, false, 1, S);
    assert_int_equal(s.n_sel, 1);
    assert_int_equal(s.sel[0], 2);
    /* k beyond the eligible rows: all four, the -1 among them, no other */
    select_steps_choose(&sel, &s, 6, false, 1, S);
    assert_int_equal(s.n_sel, 4);
    assert_memory_equal(sel.take, elig, S);
    /* the causal rule: the eligible rows with s > 0 */
    select_steps_choose(&sel, &s, 1, true, 1, S);
    const unsigned char takec[S] = { 1, 0, 1, 1, 0, 0 };
    assert_memory_equal(sel.take, takec, S);
    float g;
    assert_int_equal(select_steps_decide(x + 2 * D, w, D, &g), 1);
    assert_true(g == s.gate[1]);
    assert_int_equal(select_steps_decide(x + 5 * D, w, D, &g), 0);

    /* the BCE over the eligible rows only, added in row order */
    double aux = 1.0, want = 1.0;
    select_steps_bce(&sel, S, &aux);
    for (int i = 0; i < S; i++)
        if (elig[i]) {
            double v = (double)sel.s[i];
            want += fmax(v, 0.0) + log1p(exp(-fabs(v))) - (takec[i] ? v : 0.0);
        }
    assert_true(aux == want);
    free_select_steps(&sel);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_draws),
        cmocka_unit_test(test_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
