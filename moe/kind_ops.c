/* The kinds' compute rows, in the order of their descriptions (kinds.c). */
#include "moe/kinds.h"
#include "moe/kind_order.h"

#include "mod/drop.h"
#include "mod/exit.h"
#include "mod/mod.h"
#include "mod/mor.h"
#include "mod/tcmod.h"
#include "moe/moe.h"
#include "moe/staged.h"

#include <assert.h>
#include <stddef.h>

const kind_ops *const mode_kind_ops[] = {
    [KIND_DENSE] = &dense_ops,
    [KIND_MOD] = &mod_ops,
    [KIND_MOE] = &moe_ops,
    [KIND_INTEGRATED] = &integrated_ops,
    [KIND_STAGED] = &staged_ops,
    [KIND_TCMOD] = &tcmod_ops,
    [KIND_DROP] = &drop_ops,
    [KIND_EC] = &ec_ops,
    [KIND_MOR] = &mor_ops,
    [KIND_EXIT] = &exit_ops,
    [KIND_COUNT] = NULL,
};

static_assert(sizeof(mode_kind_ops) / sizeof(mode_kind_ops[0]) == KIND_COUNT + 1,
              "one row per kind, then NULL");
