/* Tests for core/rng/pcg32: bit-exactness against the published demo and
 * against pcg-cpp (via the pcg_oracle helper), plus statistical sanity of the
 * derived distributions and the keyed-stream contract. */

/* popen/pclose are POSIX, not C11; meson defines this project-wide, but a
 * hand build with -std=c11 needs it too. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng/pcg32.h"

/* The demo in the PCG minimal C distribution (pcg32-demo, seeded with
 * initstate 42, initseq 54) prints these as its first six outputs.  Hard-coded
 * so the test still means something if the oracle and this code shared a bug
 * in, say, the seeding procedure. */
static void test_published_demo(void **st)
{
    (void)st;
    static const uint32_t expect[] = {
        0xa15c02b7u, 0x7b47f409u, 0xba1d3330u,
        0x83d2f293u, 0xbfa4784bu, 0xcbed606eu,
    };
    pcg32 rng;
    pcg32_seed(&rng, 42u, 54u);
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        assert_int_equal(pcg32_next(&rng), expect[i]);
}

#define ORACLE_N 1000

/* Run the oracle for one (initstate, initseq) pair and compare ORACLE_N
 * outputs with pcg32_next. */
static void check_against_oracle(const char *oracle, uint64_t initstate,
                                 uint64_t initseq)
{
    /* Single quotes protect a build path with spaces; a path containing a
     * single quote is not supported and is rejected rather than mis-run. */
    if (strchr(oracle, '\'') != NULL)
        fail_msg("PCG_ORACLE path contains a single quote: %s", oracle);
    char cmd[4096];
    int len = snprintf(cmd, sizeof cmd, "'%s' %d %" PRIu64 " %" PRIu64, oracle,
                       ORACLE_N, initstate, initseq);
    assert_true(len > 0 && (size_t)len < sizeof cmd);

    FILE *p = popen(cmd, "r");
    if (p == NULL)
        fail_msg("popen failed for: %s", cmd);

    pcg32 rng;
    pcg32_seed(&rng, initstate, initseq);
    char line[64];
    int got = 0;
    int mismatch = -1;
    uint32_t want = 0, mine = 0;
    while (fgets(line, sizeof line, p) != NULL) {
        char *end = NULL;
        unsigned long v = strtoul(line, &end, 16);
        if (end == line || (*end != '\n' && *end != '\0') || v > UINT32_MAX) {
            pclose(p);
            fail_msg("unparsable oracle line %d: %s", got, line);
        }
        uint32_t r = pcg32_next(&rng);
        if (mismatch < 0 && r != (uint32_t)v) {
            mismatch = got;
            want = (uint32_t)v;
            mine = r;
        }
        got++;
    }
    /* Close before any failure so no child is left behind. */
    int status = pclose(p);
    if (status != 0)
        fail_msg("oracle exited with status %d: %s", status, cmd);
    if (got != ORACLE_N)
        fail_msg("oracle gave %d lines, wanted %d: %s", got, ORACLE_N, cmd);
    if (mismatch >= 0)
        fail_msg("seed %" PRIu64 " stream %" PRIu64 ": output %d is %08" PRIx32
                 ", pcg-cpp says %08" PRIx32,
                 initstate, initseq, mismatch, mine, want);
}

static void test_matches_pcg_cpp(void **st)
{
    (void)st;
    /* Missing oracle is a build/configuration error, so fail, never skip:
     * a skipped bit-exactness test would let a wrong generator through. */
    const char *oracle = getenv("PCG_ORACLE");
    if (oracle == NULL || oracle[0] == '\0')
        fail_msg("PCG_ORACLE is not set (meson sets it to the pcg_oracle path)");

    /* Zero, the demo pair, extremes of both 64-bit words (the stream's top
     * bit is shifted out by (seq << 1) | 1, so UINT64_MAX and its lower
     * half-neighbour exercise that), and a couple of arbitrary large values. */
    static const uint64_t pairs[][2] = {
        {0u, 0u},
        {42u, 54u},
        {UINT64_MAX, UINT64_MAX},
        {0x8000000000000000ULL, 0x7fffffffffffffffULL},
        {0xdeadbeefcafebabeULL, 0x0123456789abcdefULL},
        {1u, 0xfedcba9876543210ULL},
        {0x9e3779b97f4a7c15ULL, 0u},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        check_against_oracle(oracle, pairs[i][0], pairs[i][1]);
}

static void test_bounded_range(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 12345u, 678u);
    /* Bound 1 has only one answer. */
    for (int i = 0; i < 1000; i++)
        assert_int_equal(pcg32_bounded(&rng, 1u), 0);
    /* Small, non-power-of-two, and bounds just above 2^31 where almost half
     * the raw range is rejected: the worst case for the rejection loop. */
    static const uint32_t bounds[] = {
        2u, 3u, 7u, 10u, 1000u, 0x80000001u, 0xfffffffeu, UINT32_MAX,
    };
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++)
        for (int i = 0; i < 10000; i++)
            assert_true(pcg32_bounded(&rng, bounds[b]) < bounds[b]);
}

static void test_bounded_uniform(void **st)
{
    (void)st;
    enum { BOUND = 10, DRAWS = 100000 };
    long counts[BOUND] = {0};
    pcg32 rng;
    pcg32_seed(&rng, 2024u, 7u);
    for (int i = 0; i < DRAWS; i++)
        counts[pcg32_bounded(&rng, BOUND)]++;
    double expect = (double)DRAWS / BOUND;
    double chi2 = 0.0;
    for (int k = 0; k < BOUND; k++) {
        double d = (double)counts[k] - expect;
        chi2 += d * d / expect;
    }
    /* 9 degrees of freedom: the 99.9th percentile is 27.9 and the
     * 1-in-a-million tail about 44.  The seed is fixed, so this is really a
     * gross-error check (e.g. a value never drawn gives chi2 >= 10000). */
    if (!(chi2 < 50.0))
        fail_msg("chi-square %.2f over %d draws of bound %d", chi2, DRAWS, BOUND);
}

static void test_uniform(void **st)
{
    (void)st;
    enum { DRAWS = 200000 };
    pcg32 rng;
    pcg32_seed(&rng, 99u, 1u);
    double sum = 0.0;
    for (int i = 0; i < DRAWS; i++) {
        float u = pcg32_uniform(&rng);
        assert_true(u >= 0.0f && u < 1.0f);
        sum += (double)u;
    }
    double mean = sum / DRAWS;
    /* The standard error of the mean is sqrt(1/12 / 200000) = 0.00065;
     * 0.005 is about 7.7 sigma. */
    if (fabs(mean - 0.5) > 0.005)
        fail_msg("uniform mean %.6f, want 0.5 +- 0.005", mean);

    /* The scaling is exactly the top 24 bits times 2^-24, so the largest
     * value is 1 - 2^-24 and the result is exact (no rounding up to 1). */
    pcg32 x, y;
    pcg32_seed(&x, 0u, 0u);
    pcg32_seed(&y, 0u, 0u);
    for (int i = 0; i < 1000; i++) {
        uint32_t raw = pcg32_next(&y);
        float want = (float)(raw >> 8) * 0x1p-24f;
        assert_true(pcg32_uniform(&x) == want);
    }
}

static void test_normal(void **st)
{
    (void)st;
    enum { DRAWS = 200000 };
    pcg32 rng;
    pcg32_seed(&rng, 31337u, 3u);
    double sum = 0.0, sumsq = 0.0;
    for (int i = 0; i < DRAWS; i++) {
        float z = pcg32_normal(&rng);
        assert_true(isfinite(z));
        sum += (double)z;
        sumsq += (double)z * (double)z;
    }
    double mean = sum / DRAWS;
    double var = sumsq / DRAWS - mean * mean;
    /* Standard error of the mean is 1/sqrt(200000) = 0.0022, so 0.02 is about
     * 9 sigma.  The sample variance has standard error about sqrt(2/n) =
     * 0.0032, so 0.03 is about 9 sigma as well. */
    if (fabs(mean) > 0.02)
        fail_msg("normal mean %.6f, want 0 +- 0.02", mean);
    if (fabs(var - 1.0) > 0.03)
        fail_msg("normal variance %.6f, want 1 +- 0.03", var);

    /* Exactly two raw outputs per normal, as the header promises. */
    pcg32 a, b;
    pcg32_seed(&a, 5u, 6u);
    pcg32_seed(&b, 5u, 6u);
    for (int i = 0; i < 10; i++)
        (void)pcg32_normal(&a);
    for (int i = 0; i < 20; i++)
        (void)pcg32_next(&b);
    assert_int_equal(pcg32_next(&a), pcg32_next(&b));
}

static void test_keyed(void **st)
{
    (void)st;
    /* Same tuple, same sequence. */
    pcg32 a, b;
    pcg32_keyed(&a, 7u, 100u, 3u, 123456u);
    pcg32_keyed(&b, 7u, 100u, 3u, 123456u);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(pcg32_next(&a), pcg32_next(&b));

    /* Changing any one element changes the stream.  Neighbouring values (the
     * common case: consecutive steps or layers) and moving a value between
     * positions are both covered. */
    static const uint64_t base[4] = {7u, 100u, 3u, 123456u};
    static const uint64_t deltas[] = {1u, 2u, UINT64_MAX /* i.e. -1 */,
                                      0x8000000000000000ULL};
    pcg32 ref;
    pcg32_keyed(&ref, base[0], base[1], base[2], base[3]);
    uint32_t ref_first = pcg32_next(&ref);
    for (int pos = 0; pos < 4; pos++) {
        for (size_t d = 0; d < sizeof deltas / sizeof deltas[0]; d++) {
            uint64_t t[4] = {base[0], base[1], base[2], base[3]};
            t[pos] += deltas[d];
            pcg32 other;
            pcg32_keyed(&other, t[0], t[1], t[2], t[3]);
            if (pcg32_next(&other) == ref_first)
                fail_msg("keyed tuple differing at position %d gave the same "
                         "first output", pos);
        }
    }
    /* A permutation of the same values is a different tuple. */
    pcg32 perm;
    pcg32_keyed(&perm, base[1], base[0], base[2], base[3]);
    assert_int_not_equal(pcg32_next(&perm), ref_first);

    /* All-zero tuples: the keyed hash must not collapse small indices. */
    pcg32 z0, z1;
    pcg32_keyed(&z0, 0u, 0u, 0u, 0u);
    pcg32_keyed(&z1, 0u, 0u, 0u, 1u);
    assert_int_not_equal(pcg32_next(&z0), pcg32_next(&z1));
}

/* Skipping ahead is the same as drawing: for strides of 0, 1, a few, and
 * past the first few thousand, on several streams (expert shards start
 * their initialisation by it). */
static void test_advance(void **state)
{
    (void)state;
    static const uint64_t deltas[] = { 0, 1, 2, 3, 7, 64, 1000, 4097 };
    for (uint64_t seq = 0; seq < 3; seq++) {
        for (size_t i = 0; i < sizeof deltas / sizeof deltas[0]; i++) {
            pcg32 a, b;
            pcg32_seed(&a, 42u + seq, 54u * seq + 1u);
            b = a;
            for (uint64_t k = 0; k < deltas[i]; k++)
                pcg32_next(&a);
            pcg32_advance(&b, deltas[i]);
            assert_true(a.state == b.state && a.inc == b.inc);
            assert_int_equal(pcg32_next(&a), pcg32_next(&b));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_demo),
        cmocka_unit_test(test_matches_pcg_cpp),
        cmocka_unit_test(test_bounded_range),
        cmocka_unit_test(test_bounded_uniform),
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_normal),
        cmocka_unit_test(test_keyed),
        cmocka_unit_test(test_advance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
