#include "analysis/stats.h"

#include "core/rng/pcg32.h"
#include "core/rng/streams.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hist_bin(double v, double lo, double hi, int nbins)
{
    if (!(hi > lo) || nbins < 1 || !(v > lo)) /* also catches NaN */
        return 0;
    int b = (int)((v - lo) / (hi - lo) * nbins);
    return b >= nbins ? nbins - 1 : b;
}

void histogram_floats(double *counts, const float *v, long n, double lo, double hi, int nbins)
{
    memset(counts, 0, (size_t)nbins * sizeof(double));
    for (long i = 0; i < n; i++)
        counts[hist_bin((double)v[i], lo, hi, nbins)] += 1.0;
}

int nice_ticks(double *ticks, int cap, double lo, double hi, int max_ticks)
{
    if (!(hi > lo) || max_ticks < 2 || cap < 1) {
        if (cap >= 1 && isfinite(lo)) {
            ticks[0] = lo;
            return 1;
        }
        return 0;
    }
    double raw = (hi - lo) / (max_ticks - 1);
    double p = pow(10.0, floor(log10(raw)));
    static const double steps[] = { 1.0, 2.0, 5.0, 10.0 };
    double step = 10.0 * p;
    for (int i = 0; i < 4; i++)
        if (steps[i] * p >= raw) {
            step = steps[i] * p;
            break;
        }
    int n = 0;
    for (double t = ceil(lo / step - 1e-9) * step; t <= hi + 1e-9 * step && n < cap; t += step)
        ticks[n++] = fabs(t) < 1e-12 * step ? 0.0 : t;
    return n;
}

int log_ticks(double *ticks, int cap, double lo, double hi)
{
    if (!(lo > 0.0) || !(hi >= lo) || cap < 1)
        return 0;
    int k0 = (int)floor(log10(lo)), k1 = (int)ceil(log10(hi));
    int inside = 0;
    for (int k = k0; k <= k1; k++) {
        double t = pow(10.0, k);
        inside += t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9);
    }
    static const double all[] = { 1.0, 2.0, 5.0 };
    int mult = inside >= 3 ? 1 : 3, n = 0;
    for (int k = k0; k <= k1; k++)
        for (int m = 0; m < mult; m++) {
            double t = all[m] * pow(10.0, k);
            if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9) && n < cap)
                ticks[n++] = t;
        }
    return n;
}

void tick_label(char *buf, int len, double v)
{
    number_label(buf, len, v, 6);
}

void number_label(char *buf, int len, double v, int sig)
{
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%.*g", sig, v);
    int w = 0;
    for (const char *p = tmp; *p && w < len - 1; p++) {
        buf[w++] = *p;
        if (*p == 'e') {
            if (p[1] == '+')
                p++;
            else if (p[1] == '-' && w < len - 1)
                buf[w++] = *++p;
            while (p[1] == '0' && p[2])
                p++;
        }
    }
    buf[w] = '\0';
}

double entropy_bits(const double *counts, int n)
{
    double total = 0.0, h = 0.0;
    for (int i = 0; i < n; i++)
        total += counts[i];
    if (total <= 0.0)
        return 0.0;
    for (int i = 0; i < n; i++)
        if (counts[i] > 0.0) {
            double p = counts[i] / total;
            h -= p * log2(p);
        }
    return h;
}

/* I(X;Y) = H(X) + H(Y) - H(X,Y) over the table's cells. */
double mutual_info_bits(const double *joint, int rows, int cols)
{
    double row[256], col[16];
    if (rows < 1 || cols < 1 || rows > 256 || cols > 16)
        return 0.0;
    memset(row, 0, sizeof(row));
    memset(col, 0, sizeof(col));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            row[i] += joint[i * cols + j];
            col[j] += joint[i * cols + j];
        }
    double mi = entropy_bits(row, rows) + entropy_bits(col, cols) -
                entropy_bits(joint, rows * cols);
    return mi > 0.0 ? mi : 0.0; /* rounding can leave -1e-17 */
}

double mutual_info_labels(const uint8_t *group, const uint8_t *outcome, long n, int rows)
{
    double joint[256 * 2];
    if (rows < 1 || rows > 256)
        return 0.0;
    memset(joint, 0, sizeof(joint));
    for (long i = 0; i < n; i++)
        if (group[i] < rows)
            joint[group[i] * 2 + (outcome[i] != 0)] += 1.0;
    return mutual_info_bits(joint, rows, 2);
}

double mutual_info_permutation(const uint8_t *group, const uint8_t *outcome, long n, int rows,
                               int n_perm, uint64_t seed, double *chance)
{
    double observed = mutual_info_labels(group, outcome, n, rows), sum = 0.0;
    int as_high = 0;
    *chance = 0.0;
    uint8_t *y = malloc((size_t)(n > 0 ? n : 1));
    if (!y || n_perm < 1) {
        free(y);
        return 1.0;
    }
    memcpy(y, outcome, (size_t)n);
    pcg32 rng;
    pcg32_keyed(&rng, seed, PCG_KEY_MI, (uint64_t)n, (uint64_t)rows);
    for (int p = 0; p < n_perm; p++) {
        for (long i = n - 1; i > 0; i--) { /* Fisher-Yates */
            long j = (long)pcg32_bounded(&rng, (uint32_t)(i + 1));
            uint8_t t = y[i];
            y[i] = y[j];
            y[j] = t;
        }
        double mi = mutual_info_labels(group, y, n, rows);
        sum += mi;
        as_high += mi >= observed - 1e-12;
    }
    free(y);
    *chance = sum / n_perm;
    return (as_high + 1.0) / (n_perm + 1.0);
}

double group_variance(const double *v, const double *weight, int n)
{
    double sum = 0.0, sq = 0.0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (weight[i] > 0.0) {
            sum += v[i];
            sq += v[i] * v[i];
            k++;
        }
    if (k < 2)
        return 0.0;
    double mean = sum / k, var = sq / k - mean * mean;
    return var > 0.0 ? var : 0.0;
}

double jaccard(const uint8_t *a, const uint8_t *b, int n)
{
    int both = 0, any = 0;
    for (int i = 0; i < n; i++) {
        both += a[i] && b[i];
        any += a[i] || b[i];
    }
    return any ? (double)both / any : 1.0;
}

double mean_pairwise_jaccard(const uint8_t *sets, int rows, int n)
{
    if (rows < 2)
        return -1.0;
    double sum = 0.0;
    long pairs = 0;
    for (int i = 0; i < rows; i++)
        for (int j = i + 1; j < rows; j++) {
            sum += jaccard(sets + (long)i * n, sets + (long)j * n, n);
            pairs++;
        }
    return sum / (double)pairs;
}

double tail_mean(const double *v, long n, double share)
{
    if (n <= 0)
        return (double)NAN;
    long k = (long)ceil(share * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    double sum = 0.0;
    for (long i = n - k; i < n; i++)
        sum += v[i];
    return sum / (double)k;
}

int kinds_summary(char *buf, int len, const char *const *kinds, int n)
{
    int w = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(kinds[j], kinds[i]) == 0;
        if (seen)
            continue;
        int count = 0;
        for (int j = i; j < n; j++)
            count += strcmp(kinds[j], kinds[i]) == 0;
        char item[96];
        if (count > 1)
            snprintf(item, sizeof(item), "%s%s x%d", w ? ", " : "", kinds[i], count);
        else
            snprintf(item, sizeof(item), "%s%s", w ? ", " : "", kinds[i]);
        int k = snprintf(buf + w, (size_t)(len - w), "%s", item);
        if (k < 0 || k >= len - w)
            return w;
        w += k;
    }
    return w;
}

/* ---- replicates ------------------------------------------------------------ */

void summarize(const double *v, int n, sample_summary *s)
{
    double sum = 0.0;
    s->n = 0;
    s->min = HUGE_VAL;
    s->max = -HUGE_VAL;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) {
            sum += v[i];
            s->n++;
            s->min = fmin(s->min, v[i]);
            s->max = fmax(s->max, v[i]);
        }
    s->mean = s->n ? sum / s->n : (double)NAN;
    s->sd = s->ci_lo = s->ci_hi = (double)NAN;
    if (!s->n)
        s->min = s->max = (double)NAN;
    if (s->n < 2)
        return;
    double sq = 0.0; /* two passes: the squares of deviations, not of values */
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]))
            sq += (v[i] - s->mean) * (v[i] - s->mean);
    s->sd = sqrt(sq / (s->n - 1));
    double half = student_t_quantile(0.5 + 0.5 * STATS_LEVEL, s->n - 1) * s->sd / sqrt(s->n);
    s->ci_lo = s->mean - half;
    s->ci_hi = s->mean + half;
}

void welch_test(const sample_summary *a, const sample_summary *b, welch_result *w)
{
    w->diff = a->mean - b->mean;
    w->t = w->df = w->p = (double)NAN;
    if (a->n < 2 || b->n < 2)
        return;
    double va = a->sd * a->sd / a->n, vb = b->sd * b->sd / b->n, se2 = va + vb;
    if (!(se2 > 0.0)) { /* both without spread: any difference is certain */
        w->p = w->diff == 0.0 ? 1.0 : 0.0;
        return;
    }
    w->t = w->diff / sqrt(se2);
    w->df = se2 * se2 / (va * va / (a->n - 1) + vb * vb / (b->n - 1));
    w->p = student_t_p_two_sided(w->t, w->df);
}

int seeds_for_power(double diff, double sd, double power, int cap)
{
    if (!isfinite(diff) || !isfinite(sd) || sd < 0.0 || diff == 0.0)
        return -1;
    if (sd == 0.0)
        return 2;
    for (int n = 2; n <= cap; n++) {
        double df = 2.0 * n - 2.0, shift = fabs(diff) / (sd * sqrt(2.0 / n));
        double crit = student_t_quantile(0.5 + 0.5 * STATS_LEVEL, df);
        if (1.0 - student_t_cdf(crit - shift, df) >= power)
            return n;
    }
    return -1;
}

void wilson_interval(double k, double n, double z, double *lo, double *hi)
{
    if (!(n > 0.0)) {
        *lo = *hi = (double)NAN;
        return;
    }
    double p = k / n, z2 = z * z;
    double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
    double half = z / (1 + z2 / n) * sqrt(p * (1 - p) / n + z2 / (4 * n * n));
    /* exact at the ends, where centre - half is 0 or 1 up to rounding */
    *lo = k <= 0.0 ? 0.0 : fmax(0.0, centre - half);
    *hi = k >= n ? 1.0 : fmin(1.0, centre + half);
}
