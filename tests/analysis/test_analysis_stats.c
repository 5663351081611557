/* The pure functions of mode-analyze (analysis/stats.c) and its palette:
 * binning, ticks, labels, information measures and their permutation test,
 * set overlap, tail means, the kinds summary, and the statistics of
 * replicates (Student's t, Welch's test, Wilson intervals) against
 * published values and closed forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "analysis/plot.h"
#include "analysis/stats.h"

#include <math.h>
#include <string.h>

static void test_hist_bin(void **state)
{
    (void)state;
    assert_int_equal(hist_bin(0.0, 0.0, 1.0, 4), 0);
    assert_int_equal(hist_bin(0.24, 0.0, 1.0, 4), 0);
    assert_int_equal(hist_bin(0.25, 0.0, 1.0, 4), 1);
    assert_int_equal(hist_bin(0.99, 0.0, 1.0, 4), 3);
    assert_int_equal(hist_bin(1.0, 0.0, 1.0, 4), 3);   /* hi belongs to the last bin */
    assert_int_equal(hist_bin(-5.0, 0.0, 1.0, 4), 0);  /* clamped */
    assert_int_equal(hist_bin(7.0, 0.0, 1.0, 4), 3);
    assert_int_equal(hist_bin((double)NAN, 0.0, 1.0, 4), 0);
    assert_int_equal(hist_bin(0.5, 1.0, 1.0, 4), 0);   /* empty range */
    float v[] = { 0.1f, 0.2f, 0.3f, 0.6f, 0.9f, 1.0f, -1.0f };
    double counts[4] = { 9, 9, 9, 9 };
    histogram_floats(counts, v, 7, 0.0, 1.0, 4);
    assert_true(counts[0] == 3.0 && counts[1] == 1.0 && counts[2] == 1.0 && counts[3] == 2.0);
}

static void test_ticks(void **state)
{
    (void)state;
    double t[32];
    int n = nice_ticks(t, 32, 0.0, 1.0, 6);
    assert_int_equal(n, 6);
    assert_true(t[0] == 0.0 && fabs(t[5] - 1.0) < 1e-12 && fabs(t[1] - 0.2) < 1e-12);
    n = nice_ticks(t, 32, 1.63, 2.55, 6);
    for (int i = 0; i < n; i++)
        assert_true(t[i] >= 1.63 && t[i] <= 2.55);
    assert_true(n >= 3 && n <= 7);
    n = nice_ticks(t, 32, 3.0, 3.0, 6); /* an empty range still has one tick */
    assert_int_equal(n, 1);
    n = log_ticks(t, 32, 8e8, 5e12);
    assert_int_equal(n, 4); /* 1e9 .. 1e12; 1e13 is outside */
    assert_true(fabs(t[0] - 1e9) < 1 && fabs(t[3] - 1e12) < 1e3);
    n = log_ticks(t, 32, 3e8, 4e9); /* one power inside: 2 and 5 multiples too */
    assert_int_equal(n, 3);         /* 5e8, 1e9, 2e9 (5e9 is past 4e9) */
    assert_true(fabs(t[0] - 5e8) < 1 && fabs(t[1] - 1e9) < 1 && fabs(t[2] - 2e9) < 1);
    assert_int_equal(log_ticks(t, 32, 0.0, 1.0), 0);
}

static void test_labels(void **state)
{
    (void)state;
    char b[32];
    tick_label(b, sizeof(b), 1e9);
    assert_string_equal(b, "1e9");
    tick_label(b, sizeof(b), 2.5e-4);
    assert_string_equal(b, "0.00025");
    tick_label(b, sizeof(b), 2.5e-7);
    assert_string_equal(b, "2.5e-7");
    tick_label(b, sizeof(b), 1000.0);
    assert_string_equal(b, "1000");
    tick_label(b, sizeof(b), 0.2 + 0.1);
    assert_string_equal(b, "0.3");
    number_label(b, sizeof(b), 2.4746e8, 3);
    assert_string_equal(b, "2.47e8");
}

static void test_information(void **state)
{
    (void)state;
    double half[2] = { 5, 5 }, none[2] = { 0, 0 }, one[3] = { 0, 7, 0 };
    assert_true(fabs(entropy_bits(half, 2) - 1.0) < 1e-12);
    assert_true(entropy_bits(none, 2) == 0.0 && entropy_bits(one, 3) == 0.0);
    /* the decision is the class: MI = H(took) = 1 bit */
    double same[2 * 2] = { 10, 0, 0, 10 };
    assert_true(fabs(mutual_info_bits(same, 2, 2) - 1.0) < 1e-12);
    /* independent: 0 */
    double indep[3 * 2] = { 2, 6, 1, 3, 5, 15 };
    assert_true(fabs(mutual_info_bits(indep, 3, 2)) < 1e-12);
    /* the same from per-token labels */
    uint8_t g[8] = { 0, 0, 1, 1, 2, 2, 3, 3 }, y[8] = { 1, 1, 0, 0, 1, 1, 0, 0 };
    double joint[4 * 2] = { 0, 2, 2, 0, 0, 2, 2, 0 };
    assert_true(fabs(mutual_info_labels(g, y, 8, 4) - mutual_info_bits(joint, 4, 2)) < 1e-12);
    assert_true(fabs(mutual_info_labels(g, y, 8, 4) - 1.0) < 1e-12);
}

static void test_permutation(void **state)
{
    (void)state;
    enum { N = 400 };
    uint8_t g[N], dep[N], indep[N];
    for (int i = 0; i < N; i++) {
        g[i] = (uint8_t)(i % 4);
        dep[i] = g[i] < 2;                       /* follows the group */
        indep[i] = (uint8_t)((i / 4) % 2);       /* the same share in every group */
    }
    double chance;
    double p = mutual_info_permutation(g, dep, N, 4, 200, 1, &chance);
    assert_true(p < 0.01);
    assert_true(chance > 0.0 && chance < 0.05);
    p = mutual_info_permutation(g, indep, N, 4, 200, 1, &chance);
    assert_true(p > 0.5);
    /* deterministic for a seed */
    double c2, p2 = mutual_info_permutation(g, indep, N, 4, 200, 1, &c2);
    assert_true(p == p2 && chance == c2);
}

static void test_variance_overlap(void **state)
{
    (void)state;
    double v[4] = { 0.2, 0.4, 99.0, 0.6 }, w[4] = { 1, 1, 0, 1 };
    double mean = 0.4, want = ((0.2 - mean) * (0.2 - mean) + (0.6 - mean) * (0.6 - mean)) / 3;
    assert_true(fabs(group_variance(v, w, 4) - want) < 1e-12);
    assert_true(group_variance(v, w, 1) == 0.0);
    uint8_t a[6] = { 1, 1, 0, 0, 1, 0 }, b[6] = { 1, 0, 0, 0, 1, 1 }, z[6] = { 0 };
    assert_true(fabs(jaccard(a, b, 6) - 0.5) < 1e-12);
    assert_true(jaccard(z, z, 6) == 1.0);
    uint8_t same[3 * 6] = { 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0 };
    assert_true(fabs(mean_pairwise_jaccard(same, 3, 6) - 1.0) < 1e-12);
    uint8_t two[2 * 6];
    memcpy(two, a, 6);
    memcpy(two + 6, b, 6);
    assert_true(fabs(mean_pairwise_jaccard(two, 2, 6) - 0.5) < 1e-12);
    assert_true(mean_pairwise_jaccard(a, 1, 6) < 0);
}

static void test_tail_mean(void **state)
{
    (void)state;
    double v[24];
    for (int i = 0; i < 24; i++)
        v[i] = i;
    assert_true(fabs(tail_mean(v, 24, 0.1) - 22.0) < 1e-12); /* ceil(2.4) = 3: 21, 22, 23 */
    assert_true(tail_mean(v, 5, 0.1) == 4.0);                /* at least one */
    assert_true(isnan(tail_mean(v, 0, 0.1)));
}

static void test_kinds_summary(void **state)
{
    (void)state;
    char b[128];
    const char *k1[] = { "dense", "mod", "dense", "mod" };
    kinds_summary(b, sizeof(b), k1, 4);
    assert_string_equal(b, "dense x2, mod x2");
    const char *k2[] = { "dense", "staged", "dense", "integrated" };
    kinds_summary(b, sizeof(b), k2, 4);
    assert_string_equal(b, "dense x2, staged, integrated");
    kinds_summary(b, 8, k1, 4); /* truncated, still a string */
    assert_true(strlen(b) < 8);
}

/* Student's t: the closed forms of the CDF for 1, 2 and 4 degrees of
 * freedom, and the 0.975 quantiles of the tables (to the 6 decimals they
 * give). */
static void test_student_t(void **state)
{
    (void)state;
    for (double t = -30.0; t <= 30.0; t += 0.37) {
        double c1 = 0.5 + atan(t) / 3.14159265358979323846;
        double c2 = 0.5 + t / (2.0 * sqrt(2.0 + t * t));
        double u = t * t / 4.0;
        double c4 = 0.5 + 0.375 * t / sqrt(1.0 + u) * (1.0 - u / (3.0 * (1.0 + u)));
        assert_true(fabs(student_t_cdf(t, 1.0) - c1) < 1e-12);
        assert_true(fabs(student_t_cdf(t, 2.0) - c2) < 1e-12);
        assert_true(fabs(student_t_cdf(t, 4.0) - c4) < 1e-12);
    }
    assert_true(student_t_cdf(0.0, 7.3) == 0.5);
    static const struct { double df, q; } table[] = {
        { 1, 12.706205 }, { 2, 4.302653 }, { 3, 3.182446 }, { 4, 2.776445 },
        { 9, 2.262157 },  { 30, 2.042272 }, { 120, 1.979930 },
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        double q = student_t_quantile(0.975, table[i].df);
        assert_true(fabs(q - table[i].q) < 5e-7);
        assert_true(fabs(student_t_cdf(q, table[i].df) - 0.975) < 1e-12);
        assert_true(fabs(student_t_quantile(0.025, table[i].df) + q) < 1e-9);
    }
    /* many degrees of freedom: the normal's quantile */
    assert_true(fabs(student_t_quantile(0.975, 1e7) - STATS_Z95) < 1e-5);
    assert_true(isnan(student_t_quantile(1.0, 3.0)) && isnan(student_t_cdf(1.0, 0.0)));
    /* the two-sided p-value against the closed forms at 1 and 2 degrees
     * of freedom, to the relative precision a small p keeps; and beyond
     * 30 degrees of freedom, where GSL changes its method, against the
     * normal's tail as df grows */
    for (double t = 0.0; t <= 60.0; t += 0.73) {
        double p1 = 2.0 * atan(1.0 / t) / 3.14159265358979323846;
        double p2 = 1.0 - t / sqrt(2.0 + t * t);
        assert_true(fabs(student_t_p_two_sided(-t, 1.0) - p1) <= 1e-12 * p1);
        assert_true(fabs(student_t_p_two_sided(t, 2.0) - p2) <= 1e-10 * p2);
    }
    assert_true(student_t_p_two_sided(0.0, 40.0) == 1.0);
    assert_true(fabs(student_t_p_two_sided(STATS_Z95, 1e13) - 0.05) < 1e-13);
    assert_true(fabs(student_t_p_two_sided(2.5, 50.0) - 2.0 * (1.0 - student_t_cdf(2.5, 50.0))) <
                1e-14);
    /* outside the domain: NaN, not GSL's error handler */
    assert_true(isnan(student_t_quantile(0.975, 0.5)) && isnan(student_t_quantile(1e-13, 3.0)));
    assert_true(isnan(student_t_p_two_sided((double)NAN, 3.0)) &&
                isnan(student_t_p_two_sided(1.0, -1.0)));
    assert_true(student_t_p_two_sided(HUGE_VAL, 3.0) == 0.0);
    assert_true(fabs(student_t_quantile(0.975, 1e300) - STATS_Z95) < 1e-15);
}

static void test_summary_welch(void **state)
{
    (void)state;
    /* two capacities' held-out losses over three seeds */
    double a[3] = { 1.6507, 1.6476, 1.6439 }, b[3] = { 1.6501, 1.6568, 1.6538 };
    sample_summary sa, sb;
    summarize(a, 3, &sa);
    summarize(b, 3, &sb);
    assert_int_equal(sa.n, 3);
    assert_true(fabs(sa.mean - 1.6474) < 1e-12);
    assert_true(fabs(sb.mean - 1.65356666666666667) < 1e-12);
    /* sd by hand: sqrt(((0.0033)^2 + (0.0002)^2 + (0.0035)^2) / 2) */
    assert_true(fabs(sa.sd - sqrt((0.0033 * 0.0033 + 0.0002 * 0.0002 + 0.0035 * 0.0035) / 2)) <
                1e-12);
    assert_true(fabs(sa.sd - 0.0034044089) < 1e-9 && fabs(sb.sd - 0.0033560890) < 1e-9);
    /* the interval: mean -+ t_{0.975, 2} sd / sqrt(3) */
    double half = 4.302652729911275 * sa.sd / sqrt(3.0);
    assert_true(fabs(sa.ci_lo - (sa.mean - half)) < 1e-9 && fabs(sa.ci_hi - (sa.mean + half)) < 1e-9);
    assert_true(sa.min == 1.6439 && sa.max == 1.6507);
    welch_result w;
    welch_test(&sa, &sb, &w);
    /* t and df by hand (the Welch-Satterthwaite formula); p by integrating
     * the t density with Simpson's rule (Python, 2e5 intervals) */
    assert_true(fabs(w.diff - (1.6474 - 1.65356666666666667)) < 1e-12);
    assert_true(fabs(w.t + 2.234273445583079) < 1e-9);
    assert_true(fabs(w.df - 3.9991828876040794) < 1e-9);
    assert_true(fabs(w.p - 0.08920052) < 1e-6);
    /* unequal sizes and spreads: {1..5} against {2, 4, 6} */
    double c[5] = { 1, 2, 3, 4, 5 }, d[3] = { 2, 4, 6 };
    sample_summary sc, sd;
    summarize(c, 5, &sc);
    summarize(d, 3, &sd);
    welch_test(&sc, &sd, &w);
    assert_true(fabs(w.t + 0.7385489458759964) < 1e-9);
    assert_true(fabs(w.df - 3.532846715328467) < 1e-9);
    assert_true(fabs(w.p - 0.50621417) < 1e-6);
    /* NaNs are left out; one value: no spread, no interval, no test */
    double e[3] = { 1.7, (double)NAN, 1.7 }, one[1] = { 1.6 };
    summarize(e, 3, &sc);
    assert_int_equal(sc.n, 2);
    assert_true(sc.sd == 0.0 && sc.ci_lo == 1.7 && sc.ci_hi == 1.7);
    summarize(one, 1, &sd);
    assert_true(sd.n == 1 && sd.mean == 1.6 && isnan(sd.sd) && isnan(sd.ci_lo) && isnan(sd.ci_hi));
    welch_test(&sa, &sd, &w);
    assert_true(fabs(w.diff - (1.6474 - 1.6)) < 1e-12 && isnan(w.t) && isnan(w.p) && isnan(w.df));
    summarize(one, 0, &sd);
    assert_true(sd.n == 0 && isnan(sd.mean) && isnan(sd.min));
}

static void test_wilson(void **state)
{
    (void)state;
    double lo, hi;
    /* 20 of 100: 0.1334 to 0.2888 (Newcombe 1998's method 3) */
    wilson_interval(20, 100, STATS_Z95, &lo, &hi);
    assert_true(fabs(lo - 0.13336693) < 1e-8 && fabs(hi - 0.28882917) < 1e-8);
    /* none or all of 10: one end at the boundary, the other 0.2775 in */
    wilson_interval(0, 10, STATS_Z95, &lo, &hi);
    assert_true(lo == 0.0 && fabs(hi - 0.27753280) < 1e-8);
    wilson_interval(10, 10, STATS_Z95, &lo, &hi);
    assert_true(fabs(lo - 0.72246720) < 1e-8 && hi == 1.0);
    wilson_interval(0, 0, STATS_Z95, &lo, &hi);
    assert_true(isnan(lo) && isnan(hi));
}

static void test_power(void **state)
{
    (void)state;
    /* Cohen's table (two-sided 5%, power 0.8, seeds a side; the exact
     * noncentral t): effect 0.5 -> 64, 0.8 -> 26, 1 -> 17, 2 -> 6; the
     * shifted central t is within one of it */
    static const double effect[] = { 0.5, 0.8, 1.0, 2.0 };
    static const int exact[] = { 64, 26, 17, 6 };
    for (int i = 0; i < 4; i++) {
        int n = seeds_for_power(0.01 * effect[i], 0.01, 0.8, 1000);
        assert_true(n >= exact[i] - 1 && n <= exact[i] + 1);
        /* the sign of the difference does not matter, its scale does not */
        assert_int_equal(seeds_for_power(-3.0 * effect[i], 3.0, 0.8, 1000), n);
    }
    /* more power needs more seeds; a difference of 0 or beyond the cap none */
    assert_true(seeds_for_power(0.005, 0.01, 0.9, 1000) > seeds_for_power(0.005, 0.01, 0.8, 1000));
    assert_int_equal(seeds_for_power(0.0, 0.01, 0.8, 1000), -1);
    assert_int_equal(seeds_for_power(0.0001, 0.01, 0.8, 1000), -1);
    assert_int_equal(seeds_for_power(0.01, 0.0, 0.8, 1000), 2);
    assert_int_equal(seeds_for_power((double)NAN, 0.01, 0.8, 1000), -1);
}

static void test_palette(void **state)
{
    (void)state;
    /* the hues are distinct, and repeats are darker, not equal */
    for (int i = 0; i < 2 * PALETTE_HUES; i++)
        for (int j = i + 1; j < 2 * PALETTE_HUES; j++) {
            rgb a = palette_color(i), b = palette_color(j);
            double d = fabs(a.r - b.r) + fabs(a.g - b.g) + fabs(a.b - b.b);
            assert_true(d > 0.05);
        }
    rgb c = rgb_hex(0x0072b2);
    assert_true(c.r == 0.0 && fabs(c.g - 0x72 / 255.0) < 1e-12 && fabs(c.b - 0xb2 / 255.0) < 1e-12);
    assert_int_equal(legend_rows(7, 3), 3);
    assert_int_equal(legend_rows(6, 3), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_bin),     cmocka_unit_test(test_ticks),
        cmocka_unit_test(test_labels),       cmocka_unit_test(test_information),
        cmocka_unit_test(test_permutation),  cmocka_unit_test(test_variance_overlap),
        cmocka_unit_test(test_tail_mean),    cmocka_unit_test(test_kinds_summary),
        cmocka_unit_test(test_palette),     cmocka_unit_test(test_student_t),
        cmocka_unit_test(test_summary_welch), cmocka_unit_test(test_wilson), cmocka_unit_test(test_power),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
