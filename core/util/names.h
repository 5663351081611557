/* Lists of names in messages ("dense, mod, tcmod"), each name once. */
#ifndef MODE_CORE_UTIL_NAMES_H
#define MODE_CORE_UTIL_NAMES_H

#include <stddef.h>

/* Append name to list (of size len, ", " between names) unless it is one of
 * its names already: whole names, so that "mod" is added after "tcmod". */
void names_add(char *list, size_t len, const char *name);

#endif
