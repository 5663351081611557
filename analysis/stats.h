/* The pure numerics of mode-analyze: histogram binning, axis ticks, the
 * information measures that say whether a router follows the token or the
 * position, set overlap across sequences, small summaries, and the
 * statistics of replicates (Student's t intervals, Welch's test, Wilson
 * intervals).  Nothing here reads files or draws;
 * tests/analysis/test_analysis_stats.c covers it. */
#ifndef MODE_ANALYSIS_STATS_H
#define MODE_ANALYSIS_STATS_H

#include "core/util/student.h"

#include <stdint.h>

/* Bin of v among nbins equal bins over [lo, hi]; values outside are clamped
 * into the first or last bin (hi itself belongs to the last). */
int hist_bin(double v, double lo, double hi, int nbins);
/* counts[nbins] = how many of v[n] fall into each bin (counts are set, not
 * added to). */
void histogram_floats(double *counts, const float *v, long n, double lo, double hi, int nbins);

/* Up to cap "nice" tick values (1, 2, 5 times a power of ten) covering
 * [lo, hi] with at most about max_ticks of them; returns the count. */
int nice_ticks(double *ticks, int cap, double lo, double hi, int max_ticks);
/* Ticks of a log axis over [lo, hi] (lo > 0): the powers of ten inside, and
 * 2 and 5 times them when fewer than three powers fall inside. */
int log_ticks(double *ticks, int cap, double lo, double hi);

/* A number with sig significant digits as %g writes it, without the
 * exponent's plus sign and leading zeros ("1e9", "2.5e-4", "0.25"). */
void number_label(char *buf, int len, double v, int sig);
/* The same with 6 digits, for axis ticks. */
void tick_label(char *buf, int len, double v);

/* Shannon entropy in bits of counts[n] (normalised here). */
double entropy_bits(const double *counts, int n);
/* Mutual information in bits between the row and the column variable of a
 * table of counts joint[rows][cols] (e.g. rows = token classes or position
 * buckets, cols = skipped / took the block). */
double mutual_info_bits(const double *joint, int rows, int cols);
/* The same from one group label and one 0/1 outcome per token (group[i] <
 * rows <= 256). */
double mutual_info_labels(const uint8_t *group, const uint8_t *outcome, long n, int rows);
/* Permutation test of that mutual information: the outcomes are shuffled
 * n_perm times (PCG32 keyed by seed); returns the p-value (shuffles at least
 * as informative as the data, +1 smoothed) and the mean shuffled value in
 * *chance, the information a router without preference shows on as many
 * tokens (the plug-in estimate is biased upwards on small samples). */
double mutual_info_permutation(const uint8_t *group, const uint8_t *outcome, long n, int rows,
                               int n_perm, uint64_t seed, double *chance);

/* Population variance of the values v[i] with weight[i] > 0 (the groups that
 * have tokens); 0 when fewer than two. */
double group_variance(const double *v, const double *weight, int n);

/* |a and b| / |a or b| of two 0/1 sets of n members (1 when both are empty). */
double jaccard(const uint8_t *a, const uint8_t *b, int n);
/* Mean Jaccard overlap over all pairs of the rows of sets[rows][n]; -1 when
 * there are fewer than two rows. */
double mean_pairwise_jaccard(const uint8_t *sets, int rows, int n);

/* Mean of the last share of v[n] (at least one value); NaN when n == 0. */
double tail_mean(const double *v, long n, double share);

/* ---- replicates ------------------------------------------------------------ */


/* The level of every interval of mode-analyze. */
#define STATS_LEVEL 0.95
/* The standard normal's 0.975 quantile (Wilson intervals at 95%). */
#define STATS_Z95 1.959963984540054

/* What the replicates of one number say about it. */
typedef struct sample_summary {
    int n;              /* the finite values (NaNs are left out) */
    double mean;        /* NaN when n == 0 */
    double sd;          /* sample standard deviation (n - 1); NaN when n < 2 */
    double ci_lo, ci_hi; /* the 95% interval of the mean: mean -+ t_{0.975, n-1} sd / sqrt(n);
                            NaN when n < 2 */
    double min, max;    /* NaN when n == 0 */
} sample_summary;
void summarize(const double *v, int n, sample_summary *s);

/* Welch's t-test of the difference of two means (a - b), which does not
 * assume equal variances: t = (mean_a - mean_b) / sqrt(sd_a^2/n_a +
 * sd_b^2/n_b), the Welch-Satterthwaite degrees of freedom, the two-sided
 * p-value.  It assumes independent replicates, each sample roughly normal.
 * With fewer than two values on either side every field but diff is NaN
 * (no test). */
typedef struct welch_result {
    double diff, t, df, p;
} welch_result;
void welch_test(const sample_summary *a, const sample_summary *b, welch_result *w);

/* Seeds a side that a two-sided two-sample t-test at the 5% level needs to
 * find a true difference diff with probability power, when the replicates
 * of each side spread by sd (equal n): the smallest n >= 2 with
 * P(T_{2n-2} > t_{0.975, 2n-2} - |diff| / (sd sqrt(2/n))) >= power, the
 * noncentral t approximated by the central one shifted by its
 * noncentrality (within one seed of the exact answer at the effects of
 * Cohen's table, 6 to 64 seeds; tests/analysis/test_analysis_stats.c).  -1
 * when diff is 0 or not finite, sd is not finite, or no n up to cap will
 * do. */
int seeds_for_power(double diff, double sd, double power, int cap);

/* The Wilson score interval of a proportion: k successes of n trials at the
 * normal quantile z (STATS_Z95 for 95%); [NaN, NaN] when n <= 0.  Unlike
 * p -+ z sqrt(p(1-p)/n) it stays inside [0, 1] and is sound near 0 and 1. */
void wilson_interval(double k, double n, double z, double *lo, double *hi);

/* "dense x2, mod x2": each kind in order of first appearance with its count
 * (no " x1" for a kind that appears once).  Returns the length written. */
int kinds_summary(char *buf, int len, const char *const *kinds, int n);

#endif
