/* PCG32: 64-bit LCG state, XSH-RR output, selectable stream.
 * O'Neill, "PCG: A Family of Simple Fast Space-Efficient Statistically Good
 * Algorithms for Random Number Generation" (2014); the constants and the
 * seeding procedure are those of the reference pcg32_srandom_r, so the raw
 * output equals C++ pcg32(initstate, initseq). */
#ifndef MODE_CORE_RNG_PCG32_H
#define MODE_CORE_RNG_PCG32_H

#include <stdint.h>

typedef struct pcg32 {
    uint64_t state;
    uint64_t inc; /* always odd: (stream << 1) | 1 */
} pcg32;

/* Seed like pcg32_srandom_r(rng, initstate, initseq). */
void pcg32_seed(pcg32 *rng, uint64_t initstate, uint64_t initseq);

/* A stream keyed by a tuple: the run seed and up to three indices (e.g. step,
 * layer, global sequence index).  The tuple is hashed (splitmix64 rounds) into
 * initstate; initseq is the hash of the tuple with a different salt, so
 * distinct tuples give distinct streams.  The same tuple always gives the same
 * draws, whatever the rank count. */
void pcg32_keyed(pcg32 *rng, uint64_t seed, uint64_t a, uint64_t b, uint64_t c);

uint32_t pcg32_next(pcg32 *rng);
/* Skip delta outputs in O(log delta) steps (the LCG jumped ahead: Brown,
 * "Random number generation with arbitrary stride", 1994), as delta calls
 * of pcg32_next would; a pcg32_normal is two outputs. */
void pcg32_advance(pcg32 *rng, uint64_t delta);
/* Uniform integer in [0, bound), unbiased (rejection as in pcg32_boundedrand_r). */
uint32_t pcg32_bounded(pcg32 *rng, uint32_t bound);
/* Uniform float in [0, 1): 24 high bits. */
float pcg32_uniform(pcg32 *rng);
/* Standard normal, Box-Muller on two uniforms (one normal per call; the second
 * is discarded so a draw always consumes exactly two outputs). */
float pcg32_normal(pcg32 *rng);

#endif
