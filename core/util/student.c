/* Student's t distribution (student.h), through GSL's cumulative
 * distribution functions. */
#include "core/util/student.h"

#include <gsl/gsl_cdf.h>
#include <math.h>

/* Above this many degrees of freedom, the standard normal (student.h). */
#define NORMAL_DF 1e12

/* P(T > t), t finite and df > 0 */
static double upper(double t, double df)
{
    return df > NORMAL_DF ? gsl_cdf_ugaussian_Q(t) : gsl_cdf_tdist_Q(t, df);
}

double student_t_cdf(double t, double df)
{
    if (isnan(t) || !(df > 0.0))
        return (double)NAN;
    if (isinf(t))
        return t > 0 ? 1.0 : 0.0;
    return df > NORMAL_DF ? gsl_cdf_ugaussian_P(t) : gsl_cdf_tdist_P(t, df);
}

double student_t_quantile(double p, double df)
{
    if (!(p >= 1e-12) || !(p <= 1.0 - 1e-12) || !(df >= 1.0))
        return (double)NAN;
    return df > NORMAL_DF ? gsl_cdf_ugaussian_Pinv(p) : gsl_cdf_tdist_Pinv(p, df);
}

double student_t_p_two_sided(double t, double df)
{
    if (isnan(t) || !(df > 0.0))
        return (double)NAN;
    return isinf(t) ? 0.0 : 2.0 * upper(fabs(t), df);
}
