#ifndef MODE_UTIL_NUM_H
#define MODE_UTIL_NUM_H
/* Numbers from text (a config value, a command-line option, an environment
 * variable) and the sizes derived from them.  One parser with a stated
 * range, so no reader takes a number that wraps (atoi, a bare strtol, a
 * cast), and one narrowing that clamps in double before it converts, so a
 * size computed from a factor (a capacity from a factor times S / E) is
 * never the wrapped value of a product past 2^31. */

#include <stdbool.h>
#include <stdint.h>

/* s as a base-10 integer in [lo, hi] (spaces around it allowed): false when
 * s is empty, not a whole integer, or out of range (never wrapped). */
bool num_parse_long(const char *s, long lo, long hi, long *v);
/* s as a base-10 integer in [0, 2^64 - 1] (a seed): a minus sign is
 * refused, not wrapped around as strtoull does. */
bool num_parse_u64(const char *s, uint64_t *v);
/* s as a finite number in [lo, hi] (spaces around it allowed). */
bool num_parse_double(const char *s, double lo, double hi, double *v);

/* floor(x), ceil(x) as an int in [lo, hi]: the clamp is made in double,
 * before narrowing, so x = 1.6e10 gives hi (a cast would wrap it); NaN
 * gives lo. */
int num_floor_int(double x, int lo, int hi);
int num_ceil_int(double x, int lo, int hi);

#endif
