#include "analysis/scaling.h"

#include <errno.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_min.h>
#include <gsl/gsl_multimin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NP = 5, REFINE = 16, NM_ITERS = 6000 };
/* The simplex's size (GSL's mean distance of its vertices from their
 * centre) at which a descent stops. */
#define SIMPLEX_SIZE 1e-10
/* The objective where it is not finite: GSL's simplex takes no infinity. */
#define BAD 1e300

typedef struct pts {
    const double *ln_n, *ln_d, *ln_l;
    int n;
} pts;

static double lse3(double x, double y, double z)
{
    double m = fmax(x, fmax(y, z));
    return m + log(exp(x - m) + exp(y - m) + exp(z - m));
}

static double huber(double r)
{
    double a = fabs(r);
    return a <= SCALING_HUBER_DELTA ? 0.5 * r * r
                                    : SCALING_HUBER_DELTA * (a - 0.5 * SCALING_HUBER_DELTA);
}

/* p: a, b, e, alpha, beta */
static double objective(const pts *q, const double *p)
{
    double s = 0.0;
    for (int i = 0; i < q->n; i++)
        s += huber(lse3(p[0] - p[3] * q->ln_n[i], p[1] - p[4] * q->ln_d[i], p[2]) - q->ln_l[i]);
    return isfinite(s) ? s : BAD;
}

static double objective_gsl(const gsl_vector *v, void *q)
{
    return objective(q, v->data);
}

/* One Nelder-Mead descent from x with GSL's simplex (nmsimplex2: the
 * standard coefficients, O(n) updates of the simplex) until its size is
 * below SIMPLEX_SIZE or NM_ITERS iterations; x takes its best vertex, and
 * the objective there is returned.  BAD when GSL refused (out of memory). */
static double simplex_descent(const pts *q, double *x)
{
    static const double step[NP] = { 1.0, 1.0, 0.5, 0.1, 0.1 };
    gsl_multimin_function fn = { objective_gsl, NP, (void *)q };
    gsl_vector_view xv = gsl_vector_view_array(x, NP);
    gsl_vector_const_view sv = gsl_vector_const_view_array(step, NP);
    gsl_multimin_fminimizer *m = gsl_multimin_fminimizer_alloc(gsl_multimin_fminimizer_nmsimplex2, NP);
    if (!m || gsl_multimin_fminimizer_set(m, &fn, &xv.vector, &sv.vector)) {
        gsl_multimin_fminimizer_free(m);
        return BAD;
    }
    for (int it = 0; it < NM_ITERS; it++)
        if (gsl_multimin_fminimizer_iterate(m) ||
            gsl_multimin_test_size(gsl_multimin_fminimizer_size(m), SIMPLEX_SIZE) != GSL_CONTINUE)
            break;
    double f = gsl_multimin_fminimizer_minimum(m);
    memcpy(x, gsl_multimin_fminimizer_x(m)->data, NP * sizeof(double));
    gsl_multimin_fminimizer_free(m);
    return f;
}

/* Nelder-Mead from x, restarted once from its result (a simplex that
 * collapsed in the objective's valley can stop short); x takes the best. */
static double nelder_mead(const pts *q, double *x)
{
    double best = objective(q, x);
    for (int restart = 0; restart < 2; restart++) {
        double y[NP];
        memcpy(y, x, sizeof(y));
        double f = simplex_descent(q, y);
        if (f <= best) {
            best = f;
            memcpy(x, y, sizeof(y));
        }
    }
    return best;
}

/* The usable points as logs; returns their count (-1: out of memory). */
static int make_pts(const double *n, const double *d, const double *l, int count, pts *q,
                    double **buf)
{
    *buf = malloc((size_t)(count > 0 ? count : 1) * 3 * sizeof(double));
    if (!*buf)
        return -1;
    double *ln_n = *buf, *ln_d = ln_n + count, *ln_l = ln_d + count;
    int m = 0;
    for (int i = 0; i < count; i++)
        if (isfinite(n[i]) && isfinite(d[i]) && isfinite(l[i]) && n[i] > 0 && d[i] > 0 &&
            l[i] > 0) {
            ln_n[m] = log(n[i]);
            ln_d[m] = log(d[i]);
            ln_l[m++] = log(l[i]);
        }
    *q = (pts){ ln_n, ln_d, ln_l, m };
    return m;
}

static void store(scaling_law *f, const double *p, double obj, int n)
{
    f->a = p[0];
    f->b = p[1];
    f->e = p[2];
    f->alpha = p[3];
    f->beta = p[4];
    f->objective = obj;
    f->n = n;
    f->ok = isfinite(obj);
}

double scaling_loss(const scaling_law *f, double n, double d)
{
    return exp(f->e) + exp(f->a - f->alpha * log(n)) + exp(f->b - f->beta * log(d));
}

typedef struct start {
    double p[NP], f;
} start;

static int by_objective(const void *x, const void *y)
{
    double a = ((const start *)x)->f, b = ((const start *)y)->f;
    return (a > b) - (a < b);
}

/* The grid's best start: Hoffmann et al.'s grid (alpha, beta in 0..2 by
 * 0.5, e in -1..1 by 0.5, a, b in 0..25 by 5) scored, the REFINE best
 * refined by Nelder-Mead.  Returns the objective; -1 when out of memory. */
static double grid_fit(const pts *q, double *best)
{
    enum { G = 5 * 5 * 5 * 6 * 6 };
    start *g = malloc(G * sizeof(start));
    if (!g)
        return -1.0;
    int k = 0;
    for (int ia = 0; ia < 6; ia++)
        for (int ib = 0; ib < 6; ib++)
            for (int ie = 0; ie < 5; ie++)
                for (int ial = 0; ial < 5; ial++)
                    for (int ibe = 0; ibe < 5; ibe++, k++) {
                        double p[NP] = { 5.0 * ia, 5.0 * ib, -1.0 + 0.5 * ie, 0.5 * ial,
                                         0.5 * ibe };
                        memcpy(g[k].p, p, sizeof(p));
                        g[k].f = objective(q, p);
                    }
    qsort(g, G, sizeof(start), by_objective);
    double fb = HUGE_VAL;
    memcpy(best, g[0].p, NP * sizeof(double));
    for (int i = 0; i < REFINE; i++) {
        double x[NP];
        memcpy(x, g[i].p, sizeof(x));
        double fx = nelder_mead(q, x);
        if (fx < fb) {
            fb = fx;
            memcpy(best, x, sizeof(x));
        }
    }
    free(g);
    return fb;
}

/* The fit through the usable points: from start alone, or (NULL) from the
 * grid. */
static int fit_points(const double *n, const double *d, const double *l, int count,
                      const scaling_law *from, scaling_law *f)
{
    memset(f, 0, sizeof(*f));
    double *buf;
    pts q;
    int m = make_pts(n, d, l, count, &q, &buf);
    if (m < NP) {
        free(buf);
        return -EINVAL;
    }
    double x[NP], fx;
    if (from) {
        double p[NP] = { from->a, from->b, from->e, from->alpha, from->beta };
        memcpy(x, p, sizeof(x));
        fx = nelder_mead(&q, x);
    } else if ((fx = grid_fit(&q, x)) < 0.0) {
        free(buf);
        return -ENOMEM;
    }
    free(buf);
    store(f, x, fx, m);
    return f->ok ? 0 : -EINVAL;
}

int scaling_fit(const double *n, const double *d, const double *l, int count, scaling_law *f)
{
    return fit_points(n, d, l, count, NULL, f);
}

int scaling_refit(const double *n, const double *d, const double *l, int count,
                  const scaling_law *start_at, scaling_law *f)
{
    return fit_points(n, d, l, count, start_at, f);
}

int flops_per_token_fit(const double *n, const double *d, const double *c, int count,
                        double *kappa, double *gamma)
{
    *kappa = *gamma = (double)NAN;
    double *x = malloc((size_t)(count > 0 ? count : 1) * 2 * sizeof(double)), *y = x + count;
    if (!x)
        return -ENOMEM;
    int m = 0;
    bool two = false;
    for (int i = 0; i < count; i++) {
        if (!(n[i] > 0 && d[i] > 0 && c[i] > 0) || !isfinite(n[i] * d[i] * c[i]))
            continue;
        x[m] = log(n[i]);
        y[m] = log(c[i] / d[i]);
        two |= fabs(x[m] - x[0]) > 1e-12;
        m++;
    }
    double c0, c1, cov00, cov01, cov11, sumsq;
    int rc = two && !gsl_fit_linear(x, 1, y, 1, (size_t)m, &c0, &c1, &cov00, &cov01, &cov11,
                                    &sumsq)
                 ? 0
                 : -EINVAL;
    free(x);
    if (rc)
        return rc;
    *gamma = c1;
    *kappa = exp(c0);
    return 0;
}

static double loss_at(const scaling_law *f, double kappa, double gamma, double c, double ln_n)
{
    double n = exp(ln_n);
    return scaling_loss(f, n, c / (kappa * pow(n, gamma)));
}

typedef struct opt_arg {
    double kappa, gamma, c;
    scaling_law law;
} opt_arg;

static double loss_gsl(double ln_n, void *arg)
{
    const opt_arg *p = arg;
    double l = loss_at(&p->law, p->kappa, p->gamma, p->c, ln_n);
    return isfinite(l) ? l : BAD; /* GSL's Brent takes no infinity either */
}

/* The loss is unimodal in log N on [lo, hi] (scaling.h), so the best of
 * OPT_GRID + 1 points brackets its minimum: GSL's Brent minimiser then
 * needs a point lower than both ends (gsl_min_fminimizer_set refuses a
 * bracket without one), and a minimum in the first or last cell is looked
 * for within EDGE of that end first.  (GSL's one-dimensional minimisers
 * do not search an interval whose end may be the minimum, as golden
 * section by itself does.) */
enum { OPT_GRID = 64 };
#define EDGE 1e-7

void scaling_optimum(const scaling_law *f, double kappa, double gamma, double c, double n_lo,
                     double n_hi, double *n_opt, double *l_opt, bool *at_edge)
{
    opt_arg arg = { kappa, gamma, c, *f };
    gsl_function fn = { loss_gsl, &arg };
    double lo = log(n_lo), hi = log(n_hi), g[OPT_GRID + 1];
    int best = 0;
    for (int i = 0; i <= OPT_GRID; i++) {
        g[i] = loss_gsl(lo + (hi - lo) * i / OPT_GRID, &arg);
        if (g[i] < g[best])
            best = i;
    }
    double a = lo + (hi - lo) * (best > 0 ? best - 1 : 0) / OPT_GRID;
    double b = lo + (hi - lo) * (best < OPT_GRID ? best + 1 : OPT_GRID) / OPT_GRID;
    double x = lo + (hi - lo) * best / OPT_GRID, fx = g[best], fa, fb;
    fa = best > 0 ? g[best - 1] : fx;
    fb = best < OPT_GRID ? g[best + 1] : fx;
    /* a minimum in an end cell (wider than EDGE): within EDGE of the end,
     * or a point inside lower than the end */
    if ((best == 0 || best == OPT_GRID) && (hi - lo) / OPT_GRID > 2.0 * EDGE) {
        double in = best == 0 ? x + EDGE : x - EDGE, fin = loss_gsl(in, &arg);
        if (fin < fx) {
            if (best == 0) {
                a = x;
                fa = fx;
            } else {
                b = x;
                fb = fx;
            }
            x = in;
            fx = fin;
        }
    }
    if (a < x && x < b && fx < fa && fx < fb) { /* what GSL's bracket needs */
        gsl_min_fminimizer *m = gsl_min_fminimizer_alloc(gsl_min_fminimizer_brent);
        if (m && !gsl_min_fminimizer_set_with_values(m, &fn, x, fx, a, fa, b, fb)) {
            for (int it = 0; it < 200; it++) {
                if (gsl_min_fminimizer_iterate(m))
                    break;
                if (gsl_min_test_interval(gsl_min_fminimizer_x_lower(m),
                                          gsl_min_fminimizer_x_upper(m), 1e-10, 0.0) != GSL_CONTINUE)
                    break;
            }
            x = gsl_min_fminimizer_x_minimum(m);
        }
        gsl_min_fminimizer_free(m);
    }
    /* else: at an end, or flat to rounding around x: x stands */
    *n_opt = exp(x);
    *l_opt = loss_at(f, kappa, gamma, c, x);
    *at_edge = x - log(n_lo) < 1e-6 || log(n_hi) - x < 1e-6;
}
