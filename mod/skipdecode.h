/* SkipDecode (Del Corro et al. 2023, arXiv:2307.02628; docs/kinds/skipdecode.md):
 * a dense block that runs for the first T_l positions of every sequence and
 * is the identity for the rest.  One skip point per position, shared by
 * every sequence of the batch, from a schedule whose count of layers never
 * rises with position; a token enters the stack late (the lower layers are
 * the ones bypassed), so every key and value a later token reads at a
 * layer was computed there by an earlier token. */
#ifndef MODE_MOD_SKIPDECODE_H
#define MODE_MOD_SKIPDECODE_H

#include "core/model/kind.h"

extern const key_group skipdecode_group; /* [skipdecode] */
extern const layer_kind skipdecode_kind;
extern const kind_ops skipdecode_ops;

#endif
