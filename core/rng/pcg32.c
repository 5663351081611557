/* PCG32 (XSH-RR, 64-bit state, selectable stream), written from the
 * algorithm in O'Neill (2014) and its minimal C reference (pcg32_srandom_r,
 * pcg32_random_r, pcg32_boundedrand_r), so that raw outputs match the C++
 * pcg32(initstate, initseq) bit for bit; tests/test_pcg32.c checks this
 * against pcg-cpp. */
#include "core/rng/pcg32.h"

#include <math.h>

/* The 64-bit LCG multiplier of the reference implementation; changing it
 * would break equivalence with every other PCG32. */
#define PCG32_MULT 6364136223846793005ULL

/* Salts for the two keyed hashes.  They only need to differ so that initstate
 * and initseq are not the same function of the tuple (otherwise state and
 * stream would be correlated); the values are the fractional parts of sqrt(2)
 * and sqrt(3), arbitrary "nothing up my sleeve" constants. */
#define PCG32_SALT_STATE 0x6a09e667f3bcc908ULL
#define PCG32_SALT_SEQ   0xbb67ae8584caa73bULL

/* Advance the LCG.  The increment is the stream selector. */
static inline void pcg32_step(pcg32 *rng)
{
    rng->state = rng->state * PCG32_MULT + rng->inc;
}

void pcg32_advance(pcg32 *rng, uint64_t delta)
{
    /* state_{n+delta} = A state_n + C, with A = mult^delta and C the sum of
     * inc mult^i for i < delta, built by squaring (mult, inc) per bit */
    uint64_t mult = PCG32_MULT, plus = rng->inc, acc_mult = 1u, acc_plus = 0u;
    while (delta > 0) {
        if (delta & 1u) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1u) * plus;
        mult *= mult;
        delta >>= 1;
    }
    rng->state = acc_mult * rng->state + acc_plus;
}

void pcg32_seed(pcg32 *rng, uint64_t initstate, uint64_t initseq)
{
    /* Exactly the reference sequence: the two steps around adding initstate
     * make state 0 and small seeds land somewhere well mixed, and this order
     * is what the C++ constructor reproduces. */
    rng->state = 0u;
    rng->inc = (initseq << 1u) | 1u; /* must be odd for a full-period LCG */
    pcg32_step(rng);
    rng->state += initstate;
    pcg32_step(rng);
}

/* splitmix64 finaliser (Steele, Lea, Flood 2014): a bijection on 64 bits with
 * good avalanche, so nearby tuples map to unrelated seeds. */
static inline uint64_t mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

/* Fold one tuple element into the running hash.  For a fixed h the map
 * x -> h ^ mix64(x + golden) is injective, and for a fixed x the map
 * h -> mix64(h ^ ...) is injective, so two tuples that differ in exactly one
 * element always give different hashes (not just with high probability).
 * The golden-ratio offset keeps x = 0 from being a fixed point of mix64. */
static inline uint64_t absorb(uint64_t h, uint64_t x)
{
    return mix64(h ^ mix64(x + 0x9e3779b97f4a7c15ULL));
}

static uint64_t hash_tuple(uint64_t salt, uint64_t seed, uint64_t a,
                           uint64_t b, uint64_t c)
{
    uint64_t h = mix64(salt);
    h = absorb(h, seed);
    h = absorb(h, a);
    h = absorb(h, b);
    h = absorb(h, c);
    return h;
}

void pcg32_keyed(pcg32 *rng, uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    /* Deriving both state and stream from the tuple (rather than, say, using
     * a fixed stream) means draws depend only on the tuple, never on which
     * rank or in what order streams were created. */
    pcg32_seed(rng, hash_tuple(PCG32_SALT_STATE, seed, a, b, c),
               hash_tuple(PCG32_SALT_SEQ, seed, a, b, c));
}

uint32_t pcg32_next(pcg32 *rng)
{
    /* Output is computed from the old state (as the reference does) so the
     * multiply of the next step can overlap with the permutation. */
    uint64_t old = rng->state;
    pcg32_step(rng);
    /* XSH-RR: xorshift the high bits down, keep 32 bits, then rotate by the
     * top 5 bits, which are the best-quality bits of an LCG. */
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    /* (-rot) & 31 avoids the undefined shift by 32 when rot == 0. */
    return (xorshifted >> rot) | (xorshifted << ((0u - rot) & 31u));
}

uint32_t pcg32_bounded(pcg32 *rng, uint32_t bound)
{
    /* bound == 0 has no valid result and would divide by zero below; return 0
     * rather than trap, consuming nothing. */
    if (bound == 0u)
        return 0u;
    /* Reject the lowest 2^32 mod bound values so the accepted range is an
     * exact multiple of bound, which makes r % bound unbiased.  The threshold
     * is (2^32 - bound) % bound computed in 32-bit arithmetic.  At most half
     * the range is rejected, so the expected number of draws is < 2. */
    uint32_t threshold = (0u - bound) % bound;
    for (;;) {
        uint32_t r = pcg32_next(rng);
        if (r >= threshold)
            return r % bound;
    }
}

float pcg32_uniform(pcg32 *rng)
{
    /* 24 bits fill a float mantissa exactly, so every value is representable
     * and the result can never round up to 1.0f. */
    return (float)(pcg32_next(rng) >> 8) * 0x1p-24f;
}

float pcg32_normal(pcg32 *rng)
{
    /* u1 in (0, 1] so log(u1) is finite; u2 in [0, 1).  Work in double so the
     * log and trig add no visible error to a float result, and so the tail
     * (u1 down to 2^-24, |z| up to about 5.8) is computed accurately. */
    double u1 = 1.0 - (double)pcg32_uniform(rng);
    double u2 = (double)pcg32_uniform(rng);
    const double two_pi = 6.283185307179586476925286766559;
    double r = sqrt(-2.0 * log(u1));
    /* The sine partner is discarded so every call consumes exactly two
     * outputs, which keeps keyed streams reproducible regardless of how many
     * normals earlier callers drew. */
    return (float)(r * cos(two_pi * u2));
}
