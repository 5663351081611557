/* Token-choice Mixture-of-Depths (docs/kinds/tcmod.md): a token takes the
 * block when its router score passes 0, a penalty keeping the share that
 * does near the capacity; per-token decisions, so the same rule in
 * training, evaluation and decoding. */
#ifndef MODE_MOD_TCMOD_H
#define MODE_MOD_TCMOD_H

#include "core/model/kind.h"

extern const key_group tcmod_group; /* [tcmod] */
extern const layer_kind tcmod_kind;
extern const kind_ops tcmod_ops;

#endif
