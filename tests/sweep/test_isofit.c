/* The isoFLOP fit (analysis/isofit.c): least squares on known parabolas,
 * their vertex inside and outside the sampled sizes, and the degenerate
 * inputs (too few sizes, repeated sizes, flat and concave losses, NaN), and
 * the fit through the sizes nearest the best. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "analysis/isofit.h"

#include <math.h>

#define close_to(a, b, tol) assert_true(fabs((a) - (b)) <= (tol) * fmax(1.0, fabs(b)))

/* y = 2 (x - 3)^2 + 1 = 2x^2 - 12x + 19 at x = 1..5: exact. */
static void test_exact_parabola(void **state)
{
    (void)state;
    double x[5], y[5], a, b, c;
    for (int i = 0; i < 5; i++) {
        x[i] = i + 1;
        y[i] = 2.0 * (x[i] - 3.0) * (x[i] - 3.0) + 1.0;
    }
    assert_int_equal(fit_parabola(x, y, 5, &a, &b, &c), 0);
    close_to(a, 2.0, 1e-12);
    close_to(b, -12.0, 1e-12);
    close_to(c, 19.0, 1e-12);
    isofit f;
    isoflop_optimum(x, y, 5, &f);
    assert_int_equal(f.status, ISOFIT_INTERIOR);
    close_to(f.x_opt, 3.0, 1e-12);
    close_to(f.y_opt, 1.0, 1e-12);
    assert_int_equal(f.best, 2);
    assert_int_equal(f.n_used, 5);
    assert_true(f.x_lo == 1.0 && f.x_hi == 5.0);
}

/* Exactly three points determine the parabola; the order does not matter. */
static void test_three_points_any_order(void **state)
{
    (void)state;
    double x[3] = { 4.0, 1.0, 2.5 }, y[3];
    for (int i = 0; i < 3; i++)
        y[i] = 0.5 * x[i] * x[i] - 2.0 * x[i] + 7.0; /* vertex at 2, value 5 */
    isofit f;
    isoflop_optimum(x, y, 3, &f);
    assert_int_equal(f.status, ISOFIT_INTERIOR);
    close_to(f.a, 0.5, 1e-12);
    close_to(f.b, -2.0, 1e-12);
    close_to(f.c, 7.0, 1e-12);
    close_to(f.x_opt, 2.0, 1e-12);
    close_to(f.y_opt, 5.0, 1e-12);
}

/* Least squares, not interpolation: on noisy points the residuals of the
 * fit are orthogonal to 1, x and x^2 (the normal equations). */
static void test_least_squares_normal_equations(void **state)
{
    (void)state;
    double x[6] = { -3, -1.5, 0, 1, 2.5, 4 }, y[6] = { 9.3, 2.1, 0.4, 0.7, 6.6, 15.8 };
    double a, b, c;
    assert_int_equal(fit_parabola(x, y, 6, &a, &b, &c), 0);
    double r0 = 0, r1 = 0, r2 = 0;
    for (int i = 0; i < 6; i++) {
        double r = y[i] - (a * x[i] * x[i] + b * x[i] + c);
        r0 += r;
        r1 += r * x[i];
        r2 += r * x[i] * x[i];
    }
    assert_true(fabs(r0) < 1e-9 && fabs(r1) < 1e-9 && fabs(r2) < 1e-9);
    assert_true(a > 0.9 && a < 1.1);
}

/* x = ln N for N of 1e5..1e7: a shallow parabola far from 0 keeps its
 * vertex (centring and scaling inside the fit). */
static void test_log_params_scale(void **state)
{
    (void)state;
    double x[5], y[5], opt = log(4e5);
    for (int i = 0; i < 5; i++) {
        x[i] = log(1e5) + i * (log(1e7) - log(1e5)) / 4.0;
        y[i] = 3.2 + 0.013 * (x[i] - opt) * (x[i] - opt);
    }
    isofit f;
    isoflop_optimum(x, y, 5, &f);
    assert_int_equal(f.status, ISOFIT_INTERIOR);
    close_to(f.x_opt, opt, 1e-9);
    close_to(f.y_opt, 3.2, 1e-12);
    close_to(exp(f.x_opt), 4e5, 1e-6);
}

/* The vertex outside the sampled range: the best sampled point, not the
 * extrapolation. */
static void test_vertex_outside(void **state)
{
    (void)state;
    double x[4] = { 1, 2, 3, 4 }, y[4];
    for (int i = 0; i < 4; i++)
        y[i] = (x[i] - 10.0) * (x[i] - 10.0);
    isofit f;
    isoflop_optimum(x, y, 4, &f);
    assert_int_equal(f.status, ISOFIT_EDGE);
    close_to(f.a, 1.0, 1e-12); /* the fit is still there, for drawing */
    assert_int_equal(f.best, 3);
    assert_true(f.x_opt == 4.0 && f.y_opt == 36.0);
}

/* Concave and flat losses have no minimum. */
static void test_concave_and_flat(void **state)
{
    (void)state;
    double x[5] = { 1, 2, 3, 4, 5 }, y[5], flat[5] = { 2, 2, 2, 2, 2 };
    for (int i = 0; i < 5; i++)
        y[i] = -(x[i] - 3.0) * (x[i] - 3.0);
    isofit f;
    isoflop_optimum(x, y, 5, &f);
    assert_int_equal(f.status, ISOFIT_EDGE);
    assert_int_equal(f.best, 0); /* -4 at x = 1 and x = 5: the first */
    isoflop_optimum(x, flat, 5, &f);
    assert_int_equal(f.status, ISOFIT_EDGE);
    assert_int_equal(f.best, 0);
    assert_true(f.y_opt == 2.0);
    /* a straight line: no curvature either */
    double line[5] = { 5, 4, 3, 2, 1 };
    isoflop_optimum(x, line, 5, &f);
    assert_int_equal(f.status, ISOFIT_EDGE);
    assert_int_equal(f.best, 4);
}

/* Fewer than three distinct sizes: no fit. */
static void test_too_few(void **state)
{
    (void)state;
    double x2[2] = { 1, 2 }, y2[2] = { 3, 2.5 }, a, b, c;
    assert_int_not_equal(fit_parabola(x2, y2, 2, &a, &b, &c), 0);
    assert_true(isnan(a) && isnan(b) && isnan(c));
    isofit f;
    isoflop_optimum(x2, y2, 2, &f);
    assert_int_equal(f.status, ISOFIT_TOO_FEW);
    assert_int_equal(f.best, 1);
    assert_true(f.x_opt == 2.0 && f.y_opt == 2.5);
    /* four points but two sizes */
    double x4[4] = { 1, 1, 2, 2 }, y4[4] = { 3, 3.1, 2.5, 2.4 };
    isoflop_optimum(x4, y4, 4, &f);
    assert_int_equal(f.status, ISOFIT_TOO_FEW);
    assert_int_equal(f.best, 3);
    /* one point, and none */
    isoflop_optimum(x2, y2, 1, &f);
    assert_int_equal(f.status, ISOFIT_TOO_FEW);
    assert_int_equal(f.best, 0);
    isoflop_optimum(x2, y2, 0, &f);
    assert_int_equal(f.status, ISOFIT_EMPTY);
    assert_int_equal(f.best, -1);
    assert_true(isnan(f.x_opt) && isnan(f.y_opt));
}

/* Points with a NaN or infinite coordinate are left out, not propagated. */
static void test_non_finite_skipped(void **state)
{
    (void)state;
    double x[7] = { 1, 2, (double)NAN, 3, 4, 5, HUGE_VAL };
    double y[7] = { 9, 4, 0.0, 1, 0, 1, 0.0 };
    y[0] = (double)NAN; /* drops x = 1 */
    isofit f;
    isoflop_optimum(x, y, 7, &f);
    /* (x - 4)^2 at 2, 3, 4, 5 */
    assert_int_equal(f.n_used, 4);
    assert_int_equal(f.status, ISOFIT_INTERIOR);
    close_to(f.x_opt, 4.0, 1e-12);
    close_to(f.y_opt, 0.0, 1e-12);
    assert_true(f.x_lo == 2.0 && f.x_hi == 5.0);
    double nx[2] = { (double)NAN, (double)NAN }, ny[2] = { 1, 2 };
    isoflop_optimum(nx, ny, 2, &f);
    assert_int_equal(f.status, ISOFIT_EMPTY);
}

/* A vertex on the edge of the range counts as inside. */
static void test_vertex_on_edge(void **state)
{
    (void)state;
    double x[3] = { 0, 1, 2 }, y[3] = { 4, 1, 0 }; /* (x - 2)^2 */
    isofit f;
    isoflop_optimum(x, y, 3, &f);
    assert_int_equal(f.status, ISOFIT_INTERIOR);
    close_to(f.x_opt, 2.0, 1e-12);
    assert_string_equal(isofit_status_text(ISOFIT_INTERIOR), "parabola");
    assert_string_equal(isofit_status_text(ISOFIT_TOO_FEW), "best sampled (fewer than 3 sizes)");
}

/* The fit near the best size: a parabola around the minimum, far sizes off
 * it (as a wide sweep's are).  Through every size the vertex moves; through
 * the best and two on each side it is exact. */
static void test_near_best(void **state)
{
    (void)state;
    double x[9], y[9];
    for (int i = 0; i < 9; i++) {
        x[8 - i] = i; /* in descending order: the window is found by value */
        y[8 - i] = i >= 2 && i <= 6 ? (i - 4.2) * (i - 4.2) + 1.0 : 40.0 + i;
    }
    isofit all, near;
    isoflop_optimum(x, y, 9, &all);
    assert_true(all.status != ISOFIT_INTERIOR || fabs(all.x_opt - 4.2) > 0.05);
    isoflop_optimum_near(x, y, 9, 5, &near);
    assert_int_equal(near.status, ISOFIT_INTERIOR);
    close_to(near.x_opt, 4.2, 1e-12);
    close_to(near.y_opt, 1.0, 1e-12);
    assert_int_equal(near.best, 4); /* x = 4 */
    assert_int_equal(near.n_used, 5);
    assert_true(near.x_lo == 2.0 && near.x_hi == 6.0);
    /* window <= 0, or as many sizes as there are: the fit through all */
    isoflop_optimum_near(x, y, 9, 0, &near);
    assert_true(near.n_used == 9 && near.a == all.a && near.y_opt == all.y_opt);
    isoflop_optimum_near(x, y, 9, 9, &near);
    assert_true(near.n_used == 9 && near.a == all.a);
    /* an even window: one more size above the best than below */
    isoflop_optimum_near(x, y, 9, 4, &near);
    assert_true(near.n_used == 4 && near.x_lo == 2.0 && near.x_hi == 5.0);
}

/* The window moves inwards at the ends; repeated sizes (seeds) count once. */
static void test_near_edges(void **state)
{
    (void)state;
    double x[14], y[14];
    for (int i = 0; i < 7; i++) { /* two replicates of each of 7 sizes */
        x[i] = x[i + 7] = i;
        y[i] = (i + 0.5) * (i + 0.5); /* minimum left of the range */
        y[i + 7] = y[i] + 0.25;
    }
    isofit f;
    isoflop_optimum_near(x, y, 14, 3, &f);
    assert_int_equal(f.best, 0);
    assert_int_equal(f.n_used, 6); /* sizes 0, 1, 2, twice each */
    assert_true(f.x_lo == 0.0 && f.x_hi == 2.0);
    assert_int_equal(f.status, ISOFIT_EDGE); /* the vertex -0.5 lies outside */
    close_to(f.y_opt, 0.25, 1e-12);
    for (int i = 0; i < 14; i++)
        y[i] = (x[i] - 6.5) * (x[i] - 6.5) + (i >= 7 ? 0.25 : 0.0);
    isoflop_optimum_near(x, y, 14, 3, &f);
    assert_int_equal(f.best, 6);
    assert_true(f.x_lo == 4.0 && f.x_hi == 6.0 && f.n_used == 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_parabola),
        cmocka_unit_test(test_three_points_any_order),
        cmocka_unit_test(test_least_squares_normal_equations),
        cmocka_unit_test(test_log_params_scale),
        cmocka_unit_test(test_vertex_outside),
        cmocka_unit_test(test_concave_and_flat),
        cmocka_unit_test(test_too_few),
        cmocka_unit_test(test_non_finite_skipped),
        cmocka_unit_test(test_vertex_on_edge),
        cmocka_unit_test(test_near_best),
        cmocka_unit_test(test_near_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
