#include "moe/kinds.h"

#include "mod/mod.h"
#include "moe/moe.h"
#include "moe/staged.h"

#include <assert.h>
#include <stddef.h>

/* Adding a kind: one row here, and its file in mod/ or moe/ (kinds.h says
 * why the table lives in moe/). */
enum { KIND_DENSE, KIND_MOD, KIND_MOE, KIND_INTEGRATED, KIND_STAGED, KIND_COUNT };

const layer_kind *const mode_kinds[] = {
    [KIND_DENSE] = &dense_kind,
    [KIND_MOD] = &mod_kind,
    [KIND_MOE] = &moe_kind,
    [KIND_INTEGRATED] = &integrated_kind,
    [KIND_STAGED] = &staged_kind,
    [KIND_COUNT] = NULL,
};

static_assert(sizeof(mode_kinds) / sizeof(mode_kinds[0]) == KIND_COUNT + 1,
              "one row per kind, then NULL");
