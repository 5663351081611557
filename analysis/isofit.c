#include "analysis/isofit.h"

#include <errno.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_sort.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

static bool usable(const double *x, const double *y, int i)
{
    return isfinite(x[i]) && isfinite(y[i]);
}

/* Two sizes are one when their x agree within 1e-12 relative. */
static bool same_x(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(1.0, fabs(b));
}

/* Distinct usable x (same_x), up to three: all a fit needs. */
static int distinct_x(const double *x, const double *y, int n)
{
    double seen[3];
    int k = 0;
    for (int i = 0; i < n && k < 3; i++) {
        if (!usable(x, y, i))
            continue;
        bool dup = false;
        for (int j = 0; j < k; j++)
            dup |= same_x(x[i], seen[j]);
        if (!dup)
            seen[k++] = x[i];
    }
    return k;
}

/* The fit in u = (x - mid) / half, u in [-1, 1]: y = A u^2 + B u + C, by
 * GSL's least squares (an SVD of the design matrix, not the normal
 * equations).  -EINVAL when singular (GSL's effective rank below 3),
 * -ENOMEM. */
static int fit_scaled(const double *x, const double *y, int n, double mid, double half,
                      double coef[3])
{
    int m = 0;
    for (int i = 0; i < n; i++)
        m += usable(x, y, i);
    gsl_matrix *X = gsl_matrix_alloc((size_t)m, 3), *cov = gsl_matrix_alloc(3, 3);
    gsl_vector *Y = gsl_vector_alloc((size_t)m), *c = gsl_vector_alloc(3);
    gsl_multifit_linear_workspace *w = gsl_multifit_linear_alloc((size_t)m, 3);
    int rc = -ENOMEM;
    if (X && cov && Y && c && w) {
        size_t row = 0, rank = 0;
        for (int i = 0; i < n; i++) {
            if (!usable(x, y, i))
                continue;
            double u = (x[i] - mid) / half;
            /* columns A, B, C: powers 2, 1, 0 */
            gsl_matrix_set(X, row, 0, u * u);
            gsl_matrix_set(X, row, 1, u);
            gsl_matrix_set(X, row, 2, 1.0);
            gsl_vector_set(Y, row++, y[i]);
        }
        double chisq;
        rc = gsl_multifit_linear_tsvd(X, Y, 1e-13, c, cov, &chisq, &rank, w) || rank < 3
                 ? -EINVAL
                 : 0;
        for (int k = 0; k < 3; k++)
            coef[k] = gsl_vector_get(c, (size_t)k);
    }
    gsl_multifit_linear_free(w);
    gsl_vector_free(c);
    gsl_vector_free(Y);
    gsl_matrix_free(cov);
    gsl_matrix_free(X);
    return rc;
}

/* The fit in the scaled coordinate over the usable points' range [lo, hi]:
 * mid and half of the range, k = A, B, C. */
static int fit_core(const double *x, const double *y, int n, double *mid, double *half,
                    double k[3])
{
    if (distinct_x(x, y, n) < 3)
        return -EINVAL;
    double lo = HUGE_VAL, hi = -HUGE_VAL;
    for (int i = 0; i < n; i++)
        if (usable(x, y, i)) {
            lo = fmin(lo, x[i]);
            hi = fmax(hi, x[i]);
        }
    *mid = 0.5 * (lo + hi);
    *half = 0.5 * (hi - lo);
    return fit_scaled(x, y, n, *mid, *half, k);
}

int fit_parabola(const double *x, const double *y, int n, double *a, double *b, double *c)
{
    double mid, half, k[3];
    *a = *b = *c = (double)NAN;
    if (fit_core(x, y, n, &mid, &half, k))
        return -EINVAL;
    /* back to x: u = (x - mid) / half */
    double h2 = half * half;
    *a = k[0] / h2;
    *b = k[1] / half - 2.0 * k[0] * mid / h2;
    *c = k[0] * mid * mid / h2 - k[1] * mid / half + k[2];
    return 0;
}

void isoflop_optimum(const double *x, const double *y, int n, isofit *f)
{
    f->status = ISOFIT_EMPTY;
    f->a = f->b = f->c = (double)NAN;
    f->x_opt = f->y_opt = (double)NAN;
    f->best = -1;
    f->n_used = 0;
    f->x_lo = HUGE_VAL;
    f->x_hi = -HUGE_VAL;
    for (int i = 0; i < n; i++) {
        if (!usable(x, y, i))
            continue;
        f->n_used++;
        f->x_lo = fmin(f->x_lo, x[i]);
        f->x_hi = fmax(f->x_hi, x[i]);
        if (f->best < 0 || y[i] < y[f->best])
            f->best = i;
    }
    if (f->best < 0) {
        f->x_lo = f->x_hi = (double)NAN;
        return;
    }
    f->x_opt = x[f->best];
    f->y_opt = y[f->best];
    double mid, half, k[3];
    if (fit_parabola(x, y, n, &f->a, &f->b, &f->c) || fit_core(x, y, n, &mid, &half, k)) {
        f->status = ISOFIT_TOO_FEW;
        return;
    }
    f->status = ISOFIT_EDGE;
    /* the vertex in the scaled coordinate u in [-1, 1], where the size of
     * the curvature A compares with the losses themselves */
    double A = k[0], B = k[1], C = k[2];
    if (!(A > 1e-12 * (fabs(B) + fabs(C) + 1e-300)))
        return; /* flat or concave: no minimum */
    double u = -B / (2.0 * A);
    /* a vertex on the range's edge counts as inside: the least-squares solve
     * puts it there to a few ulp (test_isofit's (x - 2)^2 gave u = 1 + 2e-16
     * on an AMD EPYC with AVX-512), and 1e-9 of the half range is no size a
     * sweep samples */
    if (fabs(u) > 1.0 && fabs(u) <= 1.0 + 1e-9)
        u = u > 0.0 ? 1.0 : -1.0;
    if (u < -1.0 || u > 1.0)
        return; /* the minimum lies outside the sampled sizes */
    f->status = ISOFIT_INTERIOR;
    f->x_opt = mid + half * u;
    f->y_opt = C - B * B / (4.0 * A);
}

void isoflop_optimum_near(const double *x, const double *y, int n, int window, isofit *f)
{
    isoflop_optimum(x, y, n, f);
    if (window <= 0 || f->best < 0)
        return;
    /* the distinct usable x, sorted */
    double *xs = malloc(sizeof(double) * (size_t)n * 2), *ym = xs + n;
    if (!xs)
        return; /* the fit through every point stands */
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (usable(x, y, i))
            xs[nd++] = x[i];
    gsl_sort(xs, 1, (size_t)nd);
    int m = 0;
    for (int i = 0; i < nd; i++)
        if (m == 0 || !same_x(xs[i], xs[m - 1]))
            xs[m++] = xs[i];
    if (m > window) {
        int p = 0;
        while (p < m - 1 && !same_x(x[f->best], xs[p]))
            p++;
        int lo = p - window / 2;
        if (lo < 0)
            lo = 0;
        if (lo + window > m)
            lo = m - window;
        double x_lo = xs[lo], x_hi = xs[lo + window - 1];
        for (int i = 0; i < n; i++) {
            bool in = (x[i] >= x_lo || same_x(x[i], x_lo)) && (x[i] <= x_hi || same_x(x[i], x_hi));
            ym[i] = in ? y[i] : (double)NAN;
        }
        /* the best point lies in the window, so it is found again: the
         * same index, and its y */
        isoflop_optimum(x, ym, n, f);
    }
    free(xs);
}

const char *isofit_status_text(isofit_status s)
{
    switch (s) {
    case ISOFIT_INTERIOR: return "parabola";
    case ISOFIT_EDGE: return "best sampled (no interior minimum)";
    case ISOFIT_TOO_FEW: return "best sampled (fewer than 3 sizes)";
    default: return "no finite point";
    }
}
