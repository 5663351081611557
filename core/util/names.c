#include "core/util/names.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void names_add(char *list, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strstr(p, ", ");
        size_t m = end ? (size_t)(end - p) : strlen(p);
        if (m == n && !strncmp(p, name, n))
            return;
        p += m + (end ? 2 : 0);
    }
    size_t used = strlen(list);
    if (used < len)
        snprintf(list + used, len - used, "%s%s", used ? ", " : "", name);
}
