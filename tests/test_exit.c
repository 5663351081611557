/* Known answers of a stack with two exit points (dense, exit, dense, exit,
 * dense), what the contract test (one exit point between two dense layers)
 * cannot say: the exit points' stack-wide part (kind_ops stack, layer
 * shared) and their link to each other.
 *   1. the first exit point takes every token (max, threshold 0): each
 *      row's logits are that exit's head on its input, the later layers
 *      keep the row's state, the second exit takes none, and decoding
 *      agrees (the later layers take keys and values only, taken 0);
 *   2. the second exit point takes every token by divergence from the
 *      first (which takes none): only if it found its peer, the previous
 *      exit point, when the stack was built (with none it never leaves);
 *   3. in training no token leaves: the logits are the final head's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"
#include "core/model/model.h"
#include "mod/exit.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kind_ops *const kinds[] = { &dense_ops, &exit_ops, NULL };

enum { L = 5, S = 16, NSEQ = 2, FIRST = 1, SECOND = 3 };

/* dense, exit, dense, exit, dense; the exits' keys as given. */
static void make(tl_fixture *f, const char *conf1, const char *thr1, const char *conf2,
                 const char *thr2)
{
    layer_spec specs[L];
    for (int l = 0; l < L; l++)
        specs[l] = tl_spec(kinds, l == FIRST || l == SECOND ? "exit" : "dense");
    tl_set(&specs[FIRST], kinds, "confidence", conf1);
    tl_set(&specs[FIRST], kinds, "threshold", thr1);
    tl_set(&specs[SECOND], kinds, "confidence", conf2);
    tl_set(&specs[SECOND], kinds, "threshold", thr2);
    tl_make(f, kinds, tl_small_dims(L, S), specs, NSEQ, 5);
    tl_scale_weights(f->m, 10.0f, 6);
}

/* Row i of layer l's input, the residual stream after the last forward. */
static const float *stream(const model *m, int l, int i)
{
    size_t rd = (size_t)NSEQ * S * m->dims.d_model;
    return m->resid + (size_t)l * rd + (size_t)i * m->dims.d_model;
}

/* The head of the exit point at layer l on row x: RMSNorm_exit(x) tok_emb^T. */
static void exit_head(model *m, int l, const float *x, float *logits)
{
    int d = m->dims.d_model, V = m->dims.vocab;
    float u[64], rstd;
    assert_true(d <= 64);
    rmsnorm_forward(u, &rstd, x, tl_param(m, l, "exit_norm"), 1, d);
    matmul(logits, V, u, d, false, m->tok_emb, d, true, 1, V, d, 0.0f);
}

/* After an evaluation forward: every row left at exit point `at`. */
static void check_all_left_at(model *m, int at)
{
    int d = m->dims.d_model, V = m->dims.vocab;
    float *want = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < NSEQ * S; i++) {
        exit_head(m, at, stream(m, at, i), want);
        assert_at_most(tl_rows_shift(m->logits + (size_t)i * V, want, 1, V), 1e-5);
        /* its state frozen from the exit point on */
        for (int l = at + 1; l <= L; l++)
            assert_memory_equal(stream(m, l, i), stream(m, at, i), (size_t)d * sizeof(float));
    }
    free(want);
}

/* The `exited` record of the exit point at layer l after the last forward:
 * how many rows left there. */
typedef struct exits_sink {
    record_sink sink;
    int left, got;
} exits_sink;

static int count_exited(record_sink *s, const char *name, int type, int ndim,
                        const unsigned long long *dims, const void *data)
{
    exits_sink *e = s->user;
    if (strcmp(name, "exited"))
        return 0;
    const unsigned char *z = data;
    for (unsigned long long i = 0; i < dims[0] * dims[1]; i++)
        e->left += z[i];
    e->got = 1;
    return 0;
}

static int left_at(model *m, int l)
{
    exits_sink e = { .sink = { .put = count_exited } };
    e.sink.user = &e;
    fwd_args a = { .dims = &m->dims, .nseq = NSEQ, .seq_len = S };
    layer *ly = &m->layers[l];
    assert_int_equal(ly->ops->record(ly, &a, &e.sink), 0);
    assert_true(e.got);
    return e.left;
}

/* Decoding sequence 0 against the causal forward's logits ref; taken of
 * each layer against want_taken. */
static void check_decode(tl_fixture *f, const float *ref, const unsigned char *want_taken)
{
    model *m = f->m;
    int V = m->dims.vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    unsigned char taken[L];
    assert_int_equal(model_decode_begin(m, S), 0);
    for (int pos = 0; pos < S; pos++) {
        assert_int_equal(model_decode_step(m, &f->ctx, f->tokens[pos], pos, logits, taken), 0);
        assert_at_most(tl_rows_shift(logits, ref + (size_t)pos * V, 1, V), TL_CAUSAL_TOL);
        for (int l = FIRST; l < L; l++)
            assert_int_equal(taken[l], want_taken[l]);
    }
    free(logits);
}

/* An evaluation forward in which every token leaves at exit point `at`
 * (and none at the other), then decoding against it, taken as want_taken. */
static void check_exit_case(tl_fixture *f, int at, const unsigned char *want_taken)
{
    tl_forward(f, FWD_EVAL_CAUSAL, NULL);
    check_all_left_at(f->m, at);
    assert_int_equal(left_at(f->m, FIRST), at == FIRST ? NSEQ * S : 0);
    assert_int_equal(left_at(f->m, SECOND), at == SECOND ? NSEQ * S : 0);
    float *ref = tl_logits_copy(f);
    check_decode(f, ref, want_taken);
    free(ref);
    tl_unmake(f);
}

static void test_first_exit_takes_all(void **state)
{
    tl_fixture f;
    /* the second exit confident too: a token that left at the first is
     * not judged again, in decoding as in the forward (decoding once gave
     * the head the second exit's input) */
    make(&f, "max", "0", "max", "0");
    /* the first exit takes it; the later layers run none of it (taken 0) */
    const unsigned char want[L] = { 1, 1, 0, 0, 0 };
    check_exit_case(&f, FIRST, want);
}

static void test_second_exit_finds_the_first(void **state)
{
    tl_fixture f;
    /* max p > 1: never; divergence from the first exit's below 1e9: always */
    make(&f, "max", "1", "divergence", "1e9");
    const unsigned char want[L] = { 1, 0, 1, 1, 0 };
    check_exit_case(&f, SECOND, want);
}

static void test_training_keeps_every_token(void **state)
{
    tl_fixture f;
    make(&f, "max", "0", "max", "0");
    fwd_result r;
    tl_forward(&f, FWD_TRAIN, &r);
    model *m = f.m;
    int d = m->dims.d_model;
    /* the head read the final norm of the last layer's output, which the
     * exit points left as the layers made it */
    for (int i = 0; i < NSEQ * S; i++) {
        float u[64], rstd;
        rmsnorm_forward(u, &rstd, stream(m, L, i), m->final_norm, 1, d);
        for (int j = 0; j < d; j++)
            assert_at_most((double)fabsf(u[j] - m->final_u[(size_t)i * d + j]), 1e-6);
        assert_memory_not_equal(stream(m, L, i), stream(m, FIRST, i), (size_t)d * sizeof(float));
    }
    assert_int_equal(left_at(m, FIRST), 0);
    tl_unmake(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_exit_takes_all),
        cmocka_unit_test(test_second_exit_finds_the_first),
        cmocka_unit_test(test_training_keeps_every_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
