/* The compute table (registry.h), in the rows' order. */
#include "moe/registry.h"

#include <stddef.h>

const kind_ops *const mode_kind_ops[KIND_COUNT + 1] = {
    MODE_KIND_ROWS(MODE_KIND_OPS_ENTRY) [KIND_COUNT] = NULL,
};
