/* The parametric scaling law (analysis/scaling.c, Hoffmann et al. 2022's
 * approach 3): a law recovered from points drawn on it, with and without
 * noise; the FLOPs-per-token line; the compute-optimal size against the
 * closed form of C = 6 N D; too few points refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "analysis/scaling.h"
#include "core/rng/pcg32.h"

#include <errno.h>
#include <math.h>

/* a law of Chinchilla's form with constants of this project's scale: byte
 * loss about 1.5 to 2.5 over 1e4 to 1e6 parameters */
static const double E0 = 1.2, A0 = 40.0, AL = 0.35, B0 = 60.0, BE = 0.3;

static double law(double n, double d)
{
    return E0 + A0 * pow(n, -AL) + B0 * pow(d, -BE);
}

/* an isoFLOP design: 3 budgets x 7 sizes, D = C / (6 N) */
static int design(double *n, double *d, double *l, double noise, uint64_t seed)
{
    static const double budgets[3] = { 1e12, 2e12, 4e12 };
    pcg32 r;
    pcg32_keyed(&r, seed, 7, 0, 0);
    int m = 0;
    for (int b = 0; b < 3; b++)
        for (int s = 0; s < 7; s++) {
            n[m] = 1.5e4 * pow(2.0, 0.75 * s);
            d[m] = budgets[b] / (6.0 * n[m]);
            double u = (pcg32_next(&r) + 0.5) / 4294967296.0;
            l[m] = law(n[m], d[m]) * (1.0 + noise * (2.0 * u - 1.0));
            m++;
        }
    return m;
}

/* Closed form for C = 6 N D: N* = G (C / 6)^(beta / (alpha + beta)),
 * G = (alpha A / (beta B))^(1 / (alpha + beta)). */
static double n_star(double c)
{
    return pow(AL * A0 / (BE * B0), 1.0 / (AL + BE)) * pow(c / 6.0, BE / (AL + BE));
}

static void test_exact_law(void **state)
{
    (void)state;
    double n[32], d[32], l[32];
    int m = design(n, d, l, 0.0, 1);
    scaling_law f;
    assert_int_equal(scaling_fit(n, d, l, m, &f), 0);
    assert_true(f.ok && f.n == 21);
    /* the points are reproduced; the parameters, weakly determined by 21
     * points in a narrow range, close enough that the optimum is */
    for (int i = 0; i < m; i++)
        assert_true(fabs(scaling_loss(&f, n[i], d[i]) / l[i] - 1.0) < 1e-4);
    double kappa, gamma;
    assert_int_equal(flops_per_token_fit(n, d, (double[]){ 0 }, 0, &kappa, &gamma), -EINVAL);
    double c[32];
    for (int i = 0; i < m; i++)
        c[i] = 6.0 * n[i] * d[i];
    assert_int_equal(flops_per_token_fit(n, d, c, m, &kappa, &gamma), 0);
    assert_true(fabs(kappa - 6.0) < 1e-9 && fabs(gamma - 1.0) < 1e-12);
    for (double cc = 1e12; cc <= 4e12; cc *= 2.0) {
        double no, lo;
        bool edge;
        scaling_optimum(&f, kappa, gamma, cc, 1e3, 1e8, &no, &lo, &edge);
        assert_false(edge);
        assert_true(fabs(no / n_star(cc) - 1.0) < 0.05);
        assert_true(fabs(lo / law(n_star(cc), cc / (6.0 * n_star(cc))) - 1.0) < 1e-3);
    }
}

/* Half a percent of noise on each loss: the optimum within 25%, its loss
 * within 0.5%; a refit from the fit stays at it. */
static void test_noisy_law(void **state)
{
    (void)state;
    double n[32], d[32], l[32];
    int m = design(n, d, l, 0.005, 3);
    scaling_law f, g;
    assert_int_equal(scaling_fit(n, d, l, m, &f), 0);
    double no, lo;
    bool edge;
    scaling_optimum(&f, 6.0, 1.0, 2e12, 1e3, 1e8, &no, &lo, &edge);
    assert_true(fabs(no / n_star(2e12) - 1.0) < 0.25);
    assert_true(fabs(lo / law(n_star(2e12), 2e12 / (6.0 * n_star(2e12))) - 1.0) < 5e-3);
    assert_int_equal(scaling_refit(n, d, l, m, &f, &g), 0);
    assert_true(g.objective <= f.objective * (1.0 + 1e-9));
}

/* A law whose optimum lies outside the interval is reported at its edge. */
static void test_edge(void **state)
{
    (void)state;
    scaling_law f = { .a = log(A0), .b = log(B0), .e = log(E0), .alpha = AL, .beta = BE,
                      .ok = true };
    double no, lo;
    bool edge;
    scaling_optimum(&f, 6.0, 1.0, 2e12, 1e7, 1e8, &no, &lo, &edge);
    assert_true(edge && fabs(no / 1e7 - 1.0) < 1e-5);
    scaling_optimum(&f, 6.0, 1.0, 2e12, 1e2, 1e3, &no, &lo, &edge); /* the upper end */
    assert_true(edge && fabs(no / 1e3 - 1.0) < 1e-5);
    /* inside, but in the first or last of the grid's cells that bracket
     * the minimiser's start: found there, not reported at the end */
    double ns = n_star(2e12);
    scaling_optimum(&f, 6.0, 1.0, 2e12, 0.99 * ns, 1e3 * ns, &no, &lo, &edge);
    assert_true(!edge && fabs(no / ns - 1.0) < 1e-6);
    scaling_optimum(&f, 6.0, 1.0, 2e12, 1e-3 * ns, 1.01 * ns, &no, &lo, &edge);
    assert_true(!edge && fabs(no / ns - 1.0) < 1e-6);
    /* an interval of one size: that size, at the edge (GSL's minimiser,
     * which would refuse the bracket, not called) */
    scaling_optimum(&f, 6.0, 1.0, 2e12, 5e4, 5e4, &no, &lo, &edge);
    assert_true(edge && fabs(no / 5e4 - 1.0) < 1e-12 && isfinite(lo));
}

static void test_too_few(void **state)
{
    (void)state;
    double n[4] = { 1e4, 2e4, 4e4, (double)NAN }, d[4] = { 1e6, 1e6, 1e6, 1e6 }, l[4] = { 2, 1.9, 1.8, 1.7 };
    scaling_law f;
    assert_int_equal(scaling_fit(n, d, l, 4, &f), -EINVAL);
    assert_false(f.ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_law), cmocka_unit_test(test_noisy_law),
        cmocka_unit_test(test_edge), cmocka_unit_test(test_too_few),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
