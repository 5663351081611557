/* One checked parser and one clamped narrowing of numbers (num.h). */
#include "core/util/num.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

static bool only_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

bool num_parse_long(const char *s, long lo, long hi, long *v)
{
    if (!s)
        return false;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || errno == ERANGE || !only_space(end) || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

bool num_parse_u64(const char *s, uint64_t *v)
{
    if (!s)
        return false;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '-') /* strtoull would wrap it around */
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (end == s || errno == ERANGE || !only_space(end) || x > UINT64_MAX)
        return false;
    *v = (uint64_t)x;
    return true;
}

bool num_parse_double(const char *s, double lo, double hi, double *v)
{
    if (!s)
        return false;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(x) || !only_space(end) || !(x >= lo) ||
        !(x <= hi))
        return false;
    *v = x;
    return true;
}

static int clamp_int(double x, int lo, int hi)
{
    if (!(x >= (double)lo)) /* NaN too */
        return lo;
    if (x >= (double)hi)
        return hi;
    return (int)x;
}

int num_floor_int(double x, int lo, int hi)
{
    return clamp_int(floor(x), lo, hi);
}

int num_ceil_int(double x, int lo, int hi)
{
    return clamp_int(ceil(x), lo, hi);
}
