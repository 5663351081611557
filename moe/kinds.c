/* The kinds' descriptions and the programs' config schema (kinds.h); the
 * compute rows are kind_ops.c. */
#include "moe/kinds.h"
#include "moe/kind_order.h"

#include "core/train/optim.h"
#include "mod/drop.h"
#include "mod/exit.h"
#include "mod/mod.h"
#include "mod/mor.h"
#include "mod/tcmod.h"
#include "moe/moe.h"
#include "moe/staged.h"

#include <assert.h>
#include <stddef.h>

const layer_kind *const mode_kinds[] = {
    [KIND_DENSE] = &dense_kind,
    [KIND_MOD] = &mod_kind,
    [KIND_MOE] = &moe_kind,
    [KIND_INTEGRATED] = &integrated_kind,
    [KIND_STAGED] = &staged_kind,
    [KIND_TCMOD] = &tcmod_kind,
    [KIND_DROP] = &drop_kind,
    [KIND_EC] = &ec_kind,
    [KIND_MOR] = &mor_kind,
    [KIND_EXIT] = &exit_kind,
    [KIND_COUNT] = NULL,
};

static_assert(sizeof(mode_kinds) / sizeof(mode_kinds[0]) == KIND_COUNT + 1,
              "one row per kind, then NULL");

/* The sections beyond the kinds' own: the optimizer's. */
static const key_group *const extra_groups[] = { &optim_group, NULL };

const config_schema mode_schema = { .kinds = mode_kinds, .groups = extra_groups };
