/* exp for the element-wise loops (softmax, SiLU), written so that the
 * compiler vectorises it: no calls, no branches.  The method is Cephes'
 * expf: n = round(x log2 e), r = x - n ln 2 in two parts, e^r by a degree-5
 * minimax polynomial, times 2^n built in the exponent bits.  Relative error
 * below 3e-7 over the whole range (tests/test_attention.c checks it against
 * exp() in double).  Inputs are clamped to [-87.3, 88.3] so that 2^n stays a
 * normal float; NaN stays NaN. */
#ifndef MODE_CORE_KERNELS_VEXP_H
#define MODE_CORE_KERNELS_VEXP_H

#include <stdint.h>
#include <string.h>

static inline float vexpf(float x)
{
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    /* adding 1.5 * 2^23 rounds to an integer, which lands in the low bits */
    const float shifter = 12582912.0f;
    float t = x * 1.44269504088896341f + shifter;
    float n = t - shifter;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof(bits));
    bits = (bits - 0x4B400000u + 127u) << 23; /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

/* The logistic function 1 / (1 + e^-x), on vexpf. */
static inline float vsigmoidf(float x)
{
    return 1.0f / (1.0f + vexpf(-x));
}

#endif
