/* The layer-spec table of the programs: every kind mode knows, one row each.
 * It lives in moe/, the top of the library stack (core <- mod <- moe), because
 * it is the one place that must see every kind: core offers dense, mod/ the
 * MoD kind, moe/ the expert kinds and staged MoDE.  mode-exp (experiments/)
 * and mode-analyze (analysis/) both link it from here, so neither program
 * reaches into the other's folder. */
#ifndef MODE_MOE_KINDS_H
#define MODE_MOE_KINDS_H

#include "core/model/kind.h"

/* NULL-terminated. */
extern const layer_kind *const mode_kinds[];

#endif
