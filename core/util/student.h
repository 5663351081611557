/* Student's t distribution: what the paired tests of the counterfactual
 * evaluation (core/train/counterfactual.c) and the analysis's intervals
 * and Welch tests read.  GSL computes it (gsl_cdf_tdist_*); these wrappers
 * are the one place that checks the domain, so that GSL's error handler
 * (an abort naming GSL's file and line) is never reached on an argument
 * of ours: outside the domain the answer is NaN.  Beyond 1e12 degrees of
 * freedom t is the standard normal to 1e-12 and the normal's functions
 * answer (GSL's t functions lose their result above about 1e16). */
#ifndef MODE_CORE_UTIL_STUDENT_H
#define MODE_CORE_UTIL_STUDENT_H

/* P(T <= t) for Student's t with df > 0 degrees of freedom (any real df,
 * as Welch's test needs); NaN for t NaN or df not positive. */
double student_t_cdf(double t, double df);
/* The p-quantile of Student's t with df degrees of freedom, for df >= 1
 * and p in [1e-12, 1 - 1e-12]; NaN outside.  (GSL's inverse does not
 * converge for every p below df 1, nor for p of 1e-15 below df 2: those
 * would reach its error handler.  The callers ask for p = 0.975 at
 * df = n - 1 >= 1.) */
double student_t_quantile(double p, double df);
/* P(|T| > |t|) for df > 0 degrees of freedom (NaN for t NaN); the upper
 * tail doubled, so that a p-value of 1e-30 keeps its digits. */
double student_t_p_two_sided(double t, double df);

#endif
