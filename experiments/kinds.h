/* The layer-spec table of the programs: every kind mode knows, one row each. */
#ifndef MODE_EXPERIMENTS_KINDS_H
#define MODE_EXPERIMENTS_KINDS_H

#include "core/model/kind.h"

/* NULL-terminated. */
extern const layer_kind *const mode_kinds[];

#endif
