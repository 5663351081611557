/* The isoFLOP fit (MoD paper, Fig. 4 left; Hoffmann et al. 2022, approach
 * 2): at one training-FLOP budget, the final loss against the logarithm of
 * the parameter count is close to a parabola, and its minimum is the
 * compute-optimal size.  Pure numerics, no files; tests/sweep/test_isofit.c
 * covers it on known parabolas and degenerate inputs. */
#ifndef MODE_ANALYSIS_ISOFIT_H
#define MODE_ANALYSIS_ISOFIT_H

typedef enum isofit_status {
    ISOFIT_INTERIOR, /* a > 0 and the vertex inside the sampled range: the vertex */
    ISOFIT_EDGE,     /* fitted, but a <= 0 or the vertex outside the range: the best point */
    ISOFIT_TOO_FEW,  /* fewer than three distinct x: no fit, the best sampled point */
    ISOFIT_EMPTY,    /* no finite point */
} isofit_status;

typedef struct isofit {
    isofit_status status;
    double a, b, c;      /* y = a x^2 + b x + c; NaN without a fit */
    double x_opt, y_opt; /* the vertex (interior), else the best sampled point */
    int best;            /* index of the lowest finite y (the first of ties); -1 when empty */
    int n_used;          /* points with finite x and y */
    double x_lo, x_hi;   /* their range */
} isofit;

/* Least squares y = a x^2 + b x + c over the points whose x and y are both
 * finite.  Returns 0, or -EINVAL (coefficients NaN) when fewer than three
 * distinct x remain.  x is centred and scaled inside, so x = log N of
 * 1e4..1e9 loses nothing to cancellation. */
int fit_parabola(const double *x, const double *y, int n, double *a, double *b, double *c);

/* The fit of y[n] against x[n] and its minimum as isofit describes. */
void isoflop_optimum(const double *x, const double *y, int n, isofit *f);

/* The same fit through the points of the `window` distinct x nearest the
 * best point: the best's x and window / 2 on each side, the window moved
 * inwards at the ends of the range (window <= 0 or at least the distinct x
 * there are: every point).  Over a range of sizes as wide as a sweep's
 * (50x and more) the loss against ln N is not one parabola, and a fit
 * through every size can put the minimum above the best point sampled;
 * near its minimum it is one.  n_used, x_lo and x_hi then describe the
 * window, and the vertex must lie inside it. */
void isoflop_optimum_near(const double *x, const double *y, int n, int window, isofit *f);

/* "parabola", "best sampled (no interior minimum)", ... for tables. */
const char *isofit_status_text(isofit_status s);

#endif
