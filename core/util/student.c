/* Student's t distribution (student.h). */
#include "core/util/student.h"

#include <math.h>

/* The k-th partial numerator (k >= 1) of the continued fraction
 *   I_x(a, b) = x^a (1-x)^b / (a B(a, b)) * 1 / (1 + d_1 / (1 + d_2 / (1 + ...)))
 * (Abramowitz & Stegun 26.5.8): odd k = 2m + 1 give
 * -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)), even k = 2m give
 * m (b-m) x / ((a+2m-1)(a+2m)). */
static double beta_cf_term(double a, double b, double x, int k)
{
    double m = (double)(k / 2);
    if (k % 2)
        return -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
    return m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
}

/* g = 1 + d_1 / (1 + d_2 / (1 + ...)) evaluated forwards (Lentz's method:
 * g is the product of the ratios of successive convergents, each the
 * product of two running fractions, num = A_k / A_{k-1} and
 * den = B_{k-1} / B_k of the convergent A_k / B_k; a zero is nudged off
 * zero).  The start is the convergent A_0 / B_0 = 1 / 1 with B_{-1} = 0. */
static double beta_cf(double a, double b, double x)
{
    const double tiny = 1e-300;
    double num = 1.0, den = 0.0, value = 1.0;
    for (int k = 1; k <= 1000; k++) {
        double d = beta_cf_term(a, b, x, k);
        den = 1.0 + d * den;
        num = 1.0 + d / num;
        if (fabs(den) < tiny)
            den = tiny;
        if (fabs(num) < tiny)
            num = tiny;
        den = 1.0 / den;
        double step = num * den;
        value *= step;
        if (fabs(step - 1.0) < 1e-15)
            break;
    }
    return value;
}

double beta_inc_reg(double a, double b, double x)
{
    if (!(a > 0.0) || !(b > 0.0) || !(x >= 0.0) || !(x <= 1.0))
        return (double)NAN;
    if (x == 0.0 || x == 1.0)
        return x;
    /* the fraction converges fast for x < (a+1)/(a+b+2); beyond, the symmetry
     * I_x(a, b) = 1 - I_{1-x}(b, a) */
    if (x > (a + 1.0) / (a + b + 2.0))
        return 1.0 - beta_inc_reg(b, a, 1.0 - x);
    double log_front = a * log(x) + b * log1p(-x) - (lgamma(a) + lgamma(b) - lgamma(a + b));
    return exp(log_front) / (a * beta_cf(a, b, x));
}

double student_t_cdf(double t, double df)
{
    if (isnan(t) || !(df > 0.0))
        return (double)NAN;
    if (isinf(t))
        return t > 0 ? 1.0 : 0.0;
    /* P(|T| > |t|) = I_{df/(df+t^2)}(df/2, 1/2) */
    double tail = 0.5 * beta_inc_reg(0.5 * df, 0.5, df / (df + t * t));
    return t > 0 ? 1.0 - tail : tail;
}

double student_t_quantile(double p, double df)
{
    if (!(p > 0.0) || !(p < 1.0) || !(df > 0.0))
        return (double)NAN;
    if (p < 0.5)
        return -student_t_quantile(1.0 - p, df);
    double lo = 0.0, hi = 1.0;
    while (student_t_cdf(hi, df) < p && hi < 1e300)
        hi *= 2.0;
    for (int i = 0; i < 400 && hi - lo > 1e-13 * hi; i++) {
        double mid = 0.5 * (lo + hi);
        if (student_t_cdf(mid, df) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

double student_t_p_two_sided(double t, double df)
{
    if (isnan(t) || !(df > 0.0))
        return (double)NAN;
    return beta_inc_reg(0.5 * df, 0.5, df / (df + t * t));
}
