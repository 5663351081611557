/* Finiteness of what is read or computed: a number that is not finite is
 * an error where it is found (docs/robustness.md), never an output. */
#ifndef MODE_CORE_UTIL_FINITE_H
#define MODE_CORE_UTIL_FINITE_H

#include <math.h>
#include <stddef.h>

/* The index of the first element of p[n] that is NaN or infinite, or -1. */
static inline long first_nonfinite(const float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i]))
            return (long)i;
    return -1;
}

#endif
