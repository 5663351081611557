/* The parametric scaling law of Hoffmann et al. 2022 (approach 3):
 *
 *   L(N, D) = E + A / N^alpha + B / D^beta
 *
 * N the parameters, D the training tokens, fitted over every run of a kind
 * by minimising the Huber loss (delta 1e-3, the paper's) of
 * log L(N, D) - log L_run, with L(N, D) written LSE(a - alpha log N,
 * b - beta log D, e) (A = e^a, B = e^b, E = e^e).  The minimiser is
 * GSL's Nelder-Mead simplex from the best of a grid of starts (the
 * paper's grid, every start evaluated, the most promising refined), since
 * the objective has many local minima.  Where the residuals exceed delta
 * the Huber loss is their absolute value, whose minimum can be a flat
 * set: there the law is not identified, and which point of the set a
 * minimiser stops at depends on its path (with 2% noise, laws of equal
 * objective to 12 digits differ in A by 3% and more).  Given the kind's training FLOPs per token, C / D =
 * kappa N^gamma (fitted on the runs: 6N for dense, less for a routed model),
 * the compute-optimal N*(C) minimises L(N, C / (kappa N^gamma)) over N.
 * Pure numerics, no files; tests/sweep/test_scaling.c holds it to laws it
 * must recover. */
#ifndef MODE_ANALYSIS_SCALING_H
#define MODE_ANALYSIS_SCALING_H

#include <stdbool.h>

#define SCALING_HUBER_DELTA 1e-3

typedef struct scaling_law {
    double a, b, e, alpha, beta; /* the fitted parameters: A = e^a, B = e^b, E = e^e */
    double objective;            /* the Huber sum at them */
    int n;                       /* the points fitted */
    bool ok;                     /* false: fewer than 5 usable points, or no finite fit */
} scaling_law;

/* L at (N, D). */
double scaling_loss(const scaling_law *f, double n, double d);

/* Fit the law through the points (n[i], d[i], l[i]) whose values are all
 * finite and positive.  Returns 0, or -EINVAL (f->ok false) with fewer
 * than 5 of them. */
int scaling_fit(const double *n, const double *d, const double *l, int count, scaling_law *f);

/* The same, the simplex from start alone (a bootstrap's refit). */
int scaling_refit(const double *n, const double *d, const double *l, int count,
                  const scaling_law *start, scaling_law *f);

/* Least squares log(c / d) = log kappa + gamma log n over the points: the
 * training FLOPs per token as a power of the size.  Returns 0, or -EINVAL
 * with fewer than two distinct sizes. */
int flops_per_token_fit(const double *n, const double *d, const double *c, int count,
                        double *kappa, double *gamma);

/* The compute-optimal size at training FLOPs c: N* minimising
 * L(N, c / (kappa N^gamma)) for N in [n_lo, n_hi] (GSL's Brent minimiser
 * on log N in a bracket a grid finds; the loss is unimodal there for
 * alpha, beta > 0), and L* there.
 * *at_edge is set when N* is an end of the interval. */
void scaling_optimum(const scaling_law *f, double kappa, double gamma, double c, double n_lo,
                     double n_hi, double *n_opt, double *l_opt, bool *at_edge);

#endif
