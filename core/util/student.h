/* Student's t distribution: what the paired tests of the counterfactual
 * evaluation (core/train/counterfactual.c) and the analysis's intervals
 * and Welch tests read. */
#ifndef MODE_CORE_UTIL_STUDENT_H
#define MODE_CORE_UTIL_STUDENT_H

/* The regularized incomplete beta function I_x(a, b) (a, b > 0, x in
 * [0, 1]), from its continued fraction; NaN outside the domain. */
double beta_inc_reg(double a, double b, double x);
/* P(T <= t) for Student's t with df > 0 degrees of freedom (any real df,
 * as Welch's test needs): I_{df/(df+t^2)}(df/2, 1/2) / 2 in each tail. */
double student_t_cdf(double t, double df);
/* The p-quantile (0 < p < 1) of Student's t with df degrees of freedom,
 * by bisection on student_t_cdf to about 1e-12 relative. */
double student_t_quantile(double p, double df);
/* P(|T| > |t|) for df degrees of freedom (NaN for t NaN). */
double student_t_p_two_sided(double t, double df);

#endif
