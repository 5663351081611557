/* Whole-model tests: finite-difference gradients of a two-layer dense model
 * (every tensor, and the whole parameter vector at once), a tiny model
 * that overfits one fixed batch, which exercises the optimizer, the schedule
 * and clipping together, and decoding past the context length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "core/train/optim.h"
#include "testlib.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kind_ops *const kinds[] = { &dense_ops, NULL };

/* Every layer dense (the spec defaults). */
static void make(tl_fixture *f, model_dims dims, int nseq, uint64_t seed)
{
    tl_make(f, kinds, dims, NULL, nseq, seed);
}

/* The loss in top-k evaluation mode (no aux or side loss outside training). */
static double loss_of(tl_fixture *f)
{
    return tl_loss(f, FWD_EVAL_TOPK, NULL);
}

/* Directional derivative along u (restricted to [off, off+n)) by central
 * differences with step h, against <grad, u>.  Returns the relative error
 * |fd - an| / max(|fd|, |an|).  A random u has |<grad, u>| about 0.8
 * |grad|; one nearly orthogonal to the gradient (below a quarter of that)
 * would measure the float32 rounding of the loss (about 1e-7 / h = 1e-4 of
 * it) rather than the gradient, so it is drawn again (at most 8 times). */
static double check_direction(tl_fixture *f, size_t off, size_t n, pcg32 *r, float h,
                              double *an_out)
{
    float *p = f->m->params + off;
    float *u = malloc(n * sizeof(float));
    float *p0 = malloc(n * sizeof(float));
    double an = 0.0, gnorm = 0.0;
    for (size_t i = 0; i < n; i++)
        gnorm += (double)f->m->grads[off + i] * (double)f->m->grads[off + i];
    gnorm = sqrt(gnorm);
    for (int draw = 0; draw < 8 && (draw == 0 || fabs(an) < 0.25 * gnorm); draw++) {
        an = 0.0;
        for (size_t i = 0; i < n; i++) {
            u[i] = pcg32_normal(r);
            an += (double)u[i] * (double)f->m->grads[off + i];
        }
    }
    for (size_t i = 0; i < n; i++)
        p0[i] = p[i];
    for (size_t i = 0; i < n; i++)
        p[i] = p0[i] + h * u[i];
    double lp = loss_of(f);
    for (size_t i = 0; i < n; i++)
        p[i] = p0[i] - h * u[i];
    double lm = loss_of(f);
    memcpy(p, p0, n * sizeof(float));
    free(u);
    free(p0);
    double fd = (lp - lm) / (2.0 * (double)h);
    if (an_out)
        *an_out = an;
    return tl_rel_err(fd, an);
}

/* Finite-difference check of a two-layer dense model.  Weights are scaled up
 * from MODEL.md's init (std 0.02 -> 0.2) so that every tensor's gradient is
 * well above float32 noise.  Step h = 1e-3 along a random direction within
 * each tensor (restricted to that tensor), tolerance 5e-3 relative (a 1% error in one
 * gain gradient shows as 1e-2); the whole
 * parameter vector along one direction, tolerance 1e-2. */
static void test_model_gradients(void **state)
{
    tl_fixture f;
    model_dims dims = { .vocab = 23, .d_model = 16, .n_heads = 2, .d_head = 8, .d_ff = 24,
                        .n_layers = 2, .seq_len = 9 };
    make(&f, dims, 3, 11);
    tl_scale_weights(f.m, 10.0f, 99); /* a dense model has no INIT_ZEROS tensors */
    tl_train_grad(&f, NULL);
    pcg32 r;
    pcg32_seed(&r, 5, 5);
    double worst = 0.0;
    for (int t = 0; t < f.m->n_tensors; t++) {
        const model_tensor *mt = &f.m->tensors[t];
        double an;
        double e = check_direction(&f, mt->offset, (size_t)mt->numel, &r, 1e-3f, &an);
        print_message("model grad %-18s rel err %.2e  (<g,u> = %+.4e)\n", mt->path, e, an);
        assert_true(fabs(an) > 1e-4); /* the check means something only if the gradient is there */
        assert_below(e, 5e-3);
        if (e > worst)
            worst = e;
    }
    double e = check_direction(&f, 0, f.m->n_params, &r, 1e-3f, NULL);
    print_message("model grad, all parameters at once: rel err %.2e; worst tensor %.2e\n", e, worst);
    assert_below(e, 1e-2);
    tl_unmake(&f);
}

/* The loss of an untrained model is close to ln V (the init is small). */
static void test_initial_loss(void **state)
{
    tl_fixture f;
    model_dims dims = { .vocab = 64, .d_model = 32, .n_heads = 4, .d_head = 8, .d_ff = 48,
                        .n_layers = 2, .seq_len = 16 };
    make(&f, dims, 2, 3);
    double l = loss_of(&f);
    print_message("initial loss %.4f, ln V = %.4f\n", l, log(64.0));
    assert_below(fabs(l - log(64.0)), 0.05);
    tl_unmake(&f);
}

/* A tiny model memorises one fixed batch of random tokens: from ln 32 = 3.47
 * to below 0.05 in 300 steps with warm-up, cosine decay, clipping at 1.0 and
 * weight decay 0.1 on.  A broken optimizer, schedule or clipping does not get
 * there. */
static void test_overfit(void **state)
{
    tl_fixture f;
    model_dims dims = { .vocab = 32, .d_model = 32, .n_heads = 2, .d_head = 16, .d_ff = 64,
                        .n_layers = 2, .seq_len = 16 };
    make(&f, dims, 4, 1);
    optim_cfg oc;
    key_group_defaults(&optim_group, &oc);
    oc.lr = 1e-2;
    oc.warmup = 20;
    oc.total_steps = 300;
    oc.clip = 1.0;
    double first = 0.0, last = 0.0;
    int clipped = 0;
    for (long s = 0; s < oc.total_steps; s++) {
        last = tl_train_grad(&f, NULL);
        if (s == 0)
            first = last;
        double norm = grad_global_norm(f.m->grads, f.m->n_params);
        clipped += clip_grad_norm(f.m->grads, f.m->n_params, norm, oc.clip) < 1.0f;
        adamw_update(NULL, f.m, &oc, s + 1, lr_at(&oc, s));
    }
    last = loss_of(&f);
    print_message("overfit: loss %.4f -> %.4f after %ld steps (%d clipped)\n", first, last,
                  oc.total_steps, clipped);
    assert_true(first > 3.0);
    assert_below(last, 0.05);
    tl_unmake(&f);
}

/* Decoding past the context (S = 8): from position S on, every layer
 * attends to the cached rows of the last S positions.  In a one-layer model
 * the logits at position p are then those of the causal forward over
 * tokens [p - S + 1, p] at its last position: RoPE makes attention depend
 * on the positions' differences alone.  (With more layers they are not: a cached
 * row of a deeper layer was computed when its token attended to its own
 * window, which reached further back, as in any sliding-window attention.)
 * Equal in exact arithmetic; in float the rotations at other absolute
 * angles round differently (seen: 4e-7 of the logits' scale), so within 1e-4
 * of it.  A cache that drops its oldest row one position too soon fails
 * it (checked). */
static void test_decode_window(void **state)
{
    (void)state;
    model_dims dims = { .vocab = 19, .d_model = 16, .n_heads = 2, .d_head = 8, .d_ff = 24,
                        .n_layers = 1, .seq_len = 8 };
    tl_fixture f;
    make(&f, dims, 1, 41);
    tl_scale_weights(f.m, 10.0f, 41);
    const int S = dims.seq_len, P = 3 * S, V = dims.vocab;
    token_t t[24];
    pcg32 r;
    pcg32_seed(&r, 5, 6);
    for (int i = 0; i < P; i++)
        t[i] = (token_t)pcg32_bounded(&r, (uint32_t)V);
    float *slide = malloc((size_t)P * V * sizeof(float)), *fresh = malloc((size_t)V * sizeof(float));
    assert_int_equal(model_decode_begin(f.m, P), 0);
    for (int p = 0; p < P; p++)
        assert_int_equal(model_decode_step(f.m, &f.ctx, t[p], p, slide + (size_t)p * V, NULL), 0);
    assert_int_equal(model_decode_step(f.m, &f.ctx, t[0], P, fresh, NULL), -ERANGE);
    double worst = 0.0;
    for (int p = S - 1; p < P; p++) {
        /* the reference: the causal forward over the window's S tokens (not
         * decoding, whose cache is what is tested), its last position */
        for (int q = 0; q < S; q++)
            f.tokens[q] = t[p - S + 1 + q];
        f.tokens[S] = 0;
        fwd_result res;
        tl_forward(&f, FWD_EVAL_CAUSAL, &res);
        memcpy(fresh, f.m->logits + (size_t)(S - 1) * V, (size_t)V * sizeof(float));
        double scale = 0.0, diff = 0.0;
        for (int v = 0; v < V; v++) {
            scale = fmax(scale, fabs((double)fresh[v]));
            diff = fmax(diff, fabs((double)fresh[v] - (double)slide[(size_t)p * V + v]));
        }
        worst = fmax(worst, diff / scale);
        assert_true(diff <= 1e-4 * scale);
    }
    print_message("decoding %d positions with a window of %d: the logits of the causal forward "
                  "over each window within %.2e of their scale\n", P, S, worst);
    /* Batched (model_decode_rows), each lane's cache sliding on its own:
     * every lane's logits are the one-sequence decoding's, within the
     * rounding of a product over 3 rows rather than 1 (1e-5 of the scale;
     * a lane that drops a row a position too soon is off by far more). */
    enum { LANES = 3 };
    int bad = -1;
    assert_int_equal(model_decode_lanes(f.m, P, LANES, &bad), 0);
    float *lanes = malloc((size_t)LANES * V * sizeof(float));
    unsigned char taken[LANES];
    worst = 0.0;
    for (int p = 0; p < P; p++) {
        token_t tok[LANES] = { t[p], t[p], t[p] };
        assert_int_equal(model_decode_rows(f.m, &f.ctx, tok, p, lanes, taken), 0);
        double scale = 0.0, diff = 0.0;
        for (int v = 0; v < V; v++)
            scale = fmax(scale, fabs((double)slide[(size_t)p * V + v]));
        for (int i = 0; i < LANES * V; i++)
            diff = fmax(diff, fabs((double)lanes[i] - (double)slide[(size_t)p * V + i % V]));
        worst = fmax(worst, diff / scale);
        assert_true(diff <= 1e-5 * scale);
    }
    print_message("the same %d positions in %d lanes: within %.2e of one sequence's logits\n", P,
                  LANES, worst);
    free(lanes);
    free(slide);
    free(fresh);
    tl_unmake(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_initial_loss),
        cmocka_unit_test(test_model_gradients),
        cmocka_unit_test(test_overfit),
        cmocka_unit_test(test_decode_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
