#include "core/util/fault.h"
#include "core/util/num.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "A" or "A:B" after the '@', each a number through the one checked parser
 * (num.h): a rank in [0, INT_MAX], a step in [0, LONG_MAX]. */
static int fault_numbers(const char *s, long *a, long *b)
{
    char first[32];
    const char *colon = strchr(s, ':');
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    if (n >= sizeof(first))
        return 0;
    memcpy(first, s, n);
    first[n] = '\0';
    if (!num_parse_long(first, 0, LONG_MAX, a))
        return 0;
    if (!colon)
        return 1;
    return num_parse_long(colon + 1, 0, LONG_MAX, b) ? 2 : 0;
}

fault_spec fault_from_env(void)
{
    fault_spec f = { .set = false, .rank = -1, .step = -1 };
    const char *s = getenv("MODE_FAULT"), *at = s ? strchr(s, '@') : NULL;
    long a = 0, b = 0;
    size_t site = at ? (size_t)(at - s) : 0;
    bool named = site > 0 && site < sizeof(f.site) &&
                 strspn(s, "abcdefghijklmnopqrstuvwxyz-") == site;
    int got = named ? fault_numbers(at + 1, &a, &b) : 0;
    if (got)
        memcpy(f.site, s, site);
    if (got == 1 && !strcmp(f.site, "nan")) {
        f.step = a;
        f.set = true;
    } else if (got && strcmp(f.site, "nan") && a <= INT_MAX) {
        f.rank = (int)a;
        f.step = got == 2 ? b : -1;
        f.set = true;
    }
    if (!f.set)
        f.site[0] = '\0';
    return f;
}
