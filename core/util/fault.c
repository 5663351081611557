#include "core/util/fault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fault_spec fault_from_env(void)
{
    fault_spec f = { .set = false, .rank = -1, .step = -1 };
    const char *s = getenv("MODE_FAULT");
    long a = 0, b = 0;
    int got = s ? sscanf(s, "%31[a-z-]@%ld:%ld", f.site, &a, &b) : 0;
    if (got >= 2 && !strcmp(f.site, "nan")) {
        f.step = a;
        f.set = got == 2;
    } else if (got >= 2) {
        f.rank = (int)a;
        f.step = got == 3 ? b : -1;
        f.set = true;
    }
    if (!f.set)
        f.site[0] = '\0';
    return f;
}
