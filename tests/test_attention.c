/* The blocked causal attention kernel against a plain triple-loop reference
 * in double, at sizes that span several blocks (and a partial last one), for
 * the forward output and all three input gradients; the vectorised exp that
 * its softmax (and SiLU) use against exp() in double. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/kernels/ops.h"
#include "core/kernels/vexp.h"
#include "core/rng/pcg32.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* out[j] = sum_m<=j softmax_m(q_j.k_m / sqrt(dh)) v_m per head; backward of
 * sum(out * g), all in double. */
static void reference(double *out, double *dq, double *dk, double *dv, const float *q,
                      const float *k, const float *v, const float *g, int n, int H, int dh)
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

static double max_rel(const float *a, const double *b, size_t count)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < count; i++)
        scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < count; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
    return worst;
}

static void check(int n, int H, int dh)
{
    int d = H * dh;
    size_t nd = (size_t)n * d;
    pcg32 r;
    pcg32_seed(&r, (uint64_t)n, 17);
    float *q = malloc(nd * sizeof(float)), *k = malloc(nd * sizeof(float));
    float *v = malloc(nd * sizeof(float)), *g = malloc(nd * sizeof(float));
    for (size_t i = 0; i < nd; i++) {
        q[i] = pcg32_normal(&r);
        k[i] = pcg32_normal(&r);
        v[i] = pcg32_normal(&r);
        g[i] = pcg32_normal(&r);
    }
    float *out = malloc(nd * sizeof(float)), *probs = malloc((size_t)H * n * n * sizeof(float));
    float *scratch = malloc((size_t)n * n * sizeof(float));
    float *dq = calloc(nd, sizeof(float)), *dk = calloc(nd, sizeof(float));
    float *dv = calloc(nd, sizeof(float));
    double *ro = malloc(nd * sizeof(double)), *rq = malloc(nd * sizeof(double));
    double *rk = malloc(nd * sizeof(double)), *rv = malloc(nd * sizeof(double));
    attention_forward(out, probs, q, k, v, n, H, dh, d);
    attention_backward(dq, dk, dv, scratch, g, q, k, v, probs, n, H, dh, d);
    reference(ro, rq, rk, rv, q, k, v, g, n, H, dh);
    double e[4] = { max_rel(out, ro, nd), max_rel(dq, rq, nd), max_rel(dk, rk, nd),
                    max_rel(dv, rv, nd) };
    print_message("n %3d: out %.1e dq %.1e dk %.1e dv %.1e (relative to the largest)\n", n, e[0],
                  e[1], e[2], e[3]);
    for (int i = 0; i < 4; i++)
        assert_true(e[i] < 1e-5);
    /* the contract: probabilities above the diagonal are exactly 0 */
    for (int h = 0; h < H; h++)
        for (int j = 0; j < n; j++)
            for (int m = j + 1; m < n; m++)
                assert_true(probs[((size_t)h * n + j) * n + m] == 0.0f);
    free(q); free(k); free(v); free(g); free(out); free(probs); free(scratch);
    free(dq); free(dk); free(dv); free(ro); free(rq); free(rk); free(rv);
}

static void test_blocks(void **state)
{
    check(1, 2, 8);
    check(63, 2, 8);
    check(64, 2, 8);
    check(65, 2, 8);
    check(150, 2, 8);  /* three blocks, the last partial */
    check(256, 4, 16); /* the bench shape's four full blocks */
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
                                        cmocka_unit_test(test_vexpf) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
