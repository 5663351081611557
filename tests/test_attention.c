/* The blocked causal attention kernel (FlashAttention: online softmax,
 * backward recomputed from the log-sum-exp) against a plain triple-loop
 * reference in double, at sizes on both sides of the tile size and with a
 * partial last tile, for head widths that are whole register tiles (the
 * kernel reads the operands in place) and that are not (it pads copies):
 * the forward output, its log-sum-exp and all three input gradients.  Then
 * the causal rule bit for bit, and the vectorised exp that the softmax (and
 * SiLU) use against exp() in double. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/kernels/attention.h"
#include "core/kernels/vexp.h"
#include "core/rng/pcg32.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* out[j] = sum_m<=j softmax_m(q_j.k_m / sqrt(dh)) v_m per head, lse[h][j]
 * the log of the softmax's denominator (with its max); backward of
 * sum(out * g); all in double. */
static void reference(double *out, double *lse, double *dq, double *dk, double *dv,
                      const float *q, const float *k, const float *v, const float *g, int n,
                      int H, int dh)
{
    int d = H * dh;
    double *p = malloc((size_t)n * sizeof(double)), *dp = malloc((size_t)n * sizeof(double));
    memset(dq, 0, (size_t)n * d * sizeof(double));
    memset(dk, 0, (size_t)n * d * sizeof(double));
    memset(dv, 0, (size_t)n * d * sizeof(double));
    for (int h = 0; h < H; h++) {
        for (int j = 0; j < n; j++) {
            double mx = -HUGE_VAL, sum = 0.0;
            for (int m = 0; m <= j; m++) {
                double s = 0.0;
                for (int e = 0; e < dh; e++)
                    s += (double)q[j * d + h * dh + e] * (double)k[m * d + h * dh + e];
                p[m] = s / sqrt((double)dh);
                mx = fmax(mx, p[m]);
            }
            for (int m = 0; m <= j; m++)
                sum += (p[m] = exp(p[m] - mx));
            lse[h * n + j] = mx + log(sum);
            for (int m = 0; m <= j; m++)
                p[m] /= sum;
            double dot = 0.0;
            for (int e = 0; e < dh; e++) {
                double o = 0.0;
                for (int m = 0; m <= j; m++)
                    o += p[m] * (double)v[m * d + h * dh + e];
                out[j * d + h * dh + e] = o;
            }
            for (int m = 0; m <= j; m++) {
                dp[m] = 0.0;
                for (int e = 0; e < dh; e++) {
                    dp[m] += (double)g[j * d + h * dh + e] * (double)v[m * d + h * dh + e];
                    dv[m * d + h * dh + e] += p[m] * (double)g[j * d + h * dh + e];
                }
                dot += p[m] * dp[m];
            }
            for (int m = 0; m <= j; m++) {
                double ds = p[m] * (dp[m] - dot) / sqrt((double)dh);
                for (int e = 0; e < dh; e++) {
                    dq[j * d + h * dh + e] += ds * (double)k[m * d + h * dh + e];
                    dk[m * d + h * dh + e] += ds * (double)q[j * d + h * dh + e];
                }
            }
        }
    }
    free(p);
    free(dp);
}

/* Largest error relative to the largest reference entry, at least 0.1:
 * with one row the gradients of q and k are 0 in exact arithmetic (a
 * softmax over one key is constant), and the kernel's dP - D leaves float
 * rounding of O(1e-7) there. */
static double max_rel(const float *a, const double *b, size_t count)
{
    double worst = 0.0, scale = 0.1;
    for (size_t i = 0; i < count; i++)
        scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < count; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
    return worst;
}

/* The worst errors over all cases, for the summary line. */
static double worst_seen[5];

/* Random q, k, v, g of n rows; the kernel's forward and backward. */
typedef struct att_run {
    int n, H, dh;
    float *q, *k, *v, *g, *out, *lse, *dq, *dk, *dv, *scratch;
} att_run;

static void run_alloc(att_run *r, int n, int H, int dh, uint64_t seed)
{
    size_t nd = (size_t)n * H * dh;
    *r = (att_run){ .n = n, .H = H, .dh = dh };
    float **bufs[] = { &r->q, &r->k, &r->v, &r->g, &r->out, &r->dq, &r->dk, &r->dv };
    for (int i = 0; i < 8; i++)
        assert_non_null(*bufs[i] = malloc(nd * sizeof(float)));
    assert_non_null(r->lse = malloc((size_t)H * n * sizeof(float)));
    assert_non_null(r->scratch = malloc((size_t)attention_scratch_floats(n, dh) *
                                        sizeof(float)));
    pcg32 rng;
    pcg32_seed(&rng, seed, 17);
    for (size_t i = 0; i < nd; i++) {
        r->q[i] = pcg32_normal(&rng);
        r->k[i] = pcg32_normal(&rng);
        r->v[i] = pcg32_normal(&rng);
        r->g[i] = pcg32_normal(&rng);
    }
}

static void run_kernel(att_run *r)
{
    size_t nd = (size_t)r->n * r->H * r->dh;
    memset(r->dq, 0, nd * sizeof(float));
    memset(r->dk, 0, nd * sizeof(float));
    memset(r->dv, 0, nd * sizeof(float));
    int d = r->H * r->dh;
    attention_forward(r->out, r->lse, r->scratch, r->q, r->k, r->v, r->n, r->H, r->dh, d);
    attention_backward(r->dq, r->dk, r->dv, r->scratch, r->g, r->out, r->q, r->k, r->v, r->lse,
                       r->n, r->H, r->dh, d);
}

static void run_free(att_run *r)
{
    free(r->q); free(r->k); free(r->v); free(r->g); free(r->out); free(r->lse);
    free(r->dq); free(r->dk); free(r->dv); free(r->scratch);
}

/* Against the reference in double.  Tolerance: each output is a float sum
 * of at most n products (and each score one of dh), rounded at 6e-8 per
 * step, plus vexpf's 3e-7; relative to the largest entry the errors seen
 * stay below 1.5e-6 up to n 1000, so 1e-5 leaves room for other compilers'
 * orders of summation but not for a wrong mask or a missed tile (errors of
 * order 1e-2 to 1). */
static void check(int n, int H, int dh)
{
    att_run r;
    run_alloc(&r, n, H, dh, (uint64_t)n * 131 + (uint64_t)dh);
    size_t nd = (size_t)n * H * dh;
    double *ro = malloc(nd * sizeof(double)), *rl = malloc((size_t)H * n * sizeof(double));
    double *rq = malloc(nd * sizeof(double)), *rk = malloc(nd * sizeof(double));
    double *rv = malloc(nd * sizeof(double));
    run_kernel(&r);
    reference(ro, rl, rq, rk, rv, r.q, r.k, r.v, r.g, n, H, dh);
    /* lse is of the order of log n: compare it absolutely */
    double el = 0.0;
    for (size_t i = 0; i < (size_t)H * n; i++)
        el = fmax(el, fabs((double)r.lse[i] - rl[i]));
    double e[5] = { max_rel(r.out, ro, nd), el, max_rel(r.dq, rq, nd), max_rel(r.dk, rk, nd),
                    max_rel(r.dv, rv, nd) };
    print_message("n %4d H %d dh %2d: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n", n, H, dh,
                  e[0], e[1], e[2], e[3], e[4]);
    for (int i = 0; i < 5; i++) {
        worst_seen[i] = fmax(worst_seen[i], e[i]);
        assert_true(e[i] < 1e-5);
    }
    run_free(&r);
    free(ro); free(rl); free(rq); free(rk); free(rv);
}

static void test_blocks(void **state)
{
    /* padded head widths (8, 16, 48: not whole register tiles of 32) */
    check(1, 2, 8);
    check(7, 2, 8);
    check(63, 2, 8);
    check(64, 2, 8);
    check(65, 2, 8);
    check(150, 2, 8);  /* three tiles, the last partial */
    check(256, 4, 16); /* the bench shape's four full tiles */
    check(129, 1, 48);
    /* head widths read in place (32, 64) */
    check(1, 1, 64);
    check(9, 2, 32);
    check(64, 2, 64);
    check(127, 2, 64);
    check(128, 2, 32);
    check(200, 1, 64);
    check(256, 2, 64);
    check(517, 1, 32);
    check(1000, 1, 64);
    print_message("worst: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n", worst_seen[0],
                  worst_seen[1], worst_seen[2], worst_seen[3], worst_seen[4]);
}

/* The causal rule, bit for bit: rows before j never see rows from j on.
 * Changing q, k, v and the output gradient of rows >= j leaves out, lse
 * and dq of the rows before j exactly as they were; changing q and the
 * output gradient of rows < j leaves dk and dv of the rows from j on
 * exactly as they were (their keys are seen only by rows >= j).  Exact
 * because masked scores contribute exact zeros, never approximations. */
static void causal_case(int n, int dh, int j)
{
    const int H = 2, d = H * dh;
    att_run a, b;
    run_alloc(&a, n, H, dh, 5);
    run_alloc(&b, n, H, dh, 5);
    pcg32 rng;
    pcg32_seed(&rng, 99, (uint64_t)j);
    for (size_t i = (size_t)j * d; i < (size_t)n * d; i++) {
        b.q[i] = pcg32_normal(&rng);
        b.k[i] = pcg32_normal(&rng);
        b.v[i] = pcg32_normal(&rng);
        b.g[i] = pcg32_normal(&rng);
    }
    run_kernel(&a);
    run_kernel(&b);
    size_t before = (size_t)j * d;
    assert_memory_equal(a.out, b.out, before * sizeof(float));
    assert_memory_equal(a.dq, b.dq, before * sizeof(float));
    for (int h = 0; h < H; h++)
        assert_memory_equal(a.lse + (size_t)h * n, b.lse + (size_t)h * n, j * sizeof(float));
    run_free(&b);
    run_alloc(&b, n, H, dh, 5);
    for (size_t i = 0; i < before; i++) {
        b.q[i] = pcg32_normal(&rng);
        b.g[i] = pcg32_normal(&rng);
    }
    run_kernel(&b);
    size_t after = (size_t)(n - j) * d;
    assert_memory_equal(a.dk + before, b.dk + before, after * sizeof(float));
    assert_memory_equal(a.dv + before, b.dv + before, after * sizeof(float));
    run_free(&a);
    run_free(&b);
}

static void test_causal(void **state)
{
    /* inside a register tile, at a register-tile edge, inside a tile, at
     * a tile's edge, in a partial last tile; in place and padded */
    const int cuts[] = { 1, 3, 8, 37, 64, 100, 129 };
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        causal_case(150, 64, cuts[i]);
        causal_case(150, 8, cuts[i]);
    }
}

/* Every float step of 1e-4 across the range softmax and SiLU can meet, then
 * the edges: clamped, not infinite; NaN passes through. */
static void test_vexpf(void **state)
{
    double worst = 0.0;
    for (double x = -87.0; x <= 88.0; x += 1e-4) {
        float f = (float)x;
        double e = exp((double)f), err = fabs((double)vexpf(f) - e) / e;
        worst = err > worst ? err : worst;
    }
    printf("vexpf: max relative error %.2g over [-87, 88]\n", worst);
    assert_true(worst < 3e-7);
    assert_true(vexpf(0.0f) == 1.0f);
    assert_true(isfinite(vexpf(INFINITY)) && vexpf(INFINITY) > 1e38f);
    assert_true(vexpf(-INFINITY) >= 0.0f && vexpf(-INFINITY) < 1.3e-38f);
    assert_true(isnan(vexpf(NAN)));
    assert_true(fabsf(vsigmoidf(0.0f) - 0.5f) < 1e-7f);
    assert_true(vsigmoidf(-200.0f) < 1e-37f && vsigmoidf(200.0f) == 1.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_blocks),
                                        cmocka_unit_test(test_causal),
                                        cmocka_unit_test(test_vexpf) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
