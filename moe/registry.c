/* The descriptions' table and the programs' config schema (registry.h);
 * the compute table is registry_ops.c, so that what links this file alone
 * (mode-analyze) links no compute. */
#include "moe/registry.h"

#include "core/train/optim.h"

#include <stddef.h>

const layer_kind *const mode_kinds[KIND_COUNT + 1] = {
    MODE_KIND_ROWS(MODE_KIND_ENTRY) [KIND_COUNT] = NULL,
};

const char *const mode_kind_names[KIND_COUNT + 1] = {
    MODE_KIND_ROWS(MODE_KIND_NAME) [KIND_COUNT] = NULL,
};

/* The sections beyond the kinds' own: the optimizer's. */
static const key_group *const extra_groups[] = { &optim_group, NULL };

const config_schema mode_schema = { .kinds = mode_kinds, .groups = extra_groups };
