/* The `ec` layer kind, expert-choice experts (Zhou et al. 2022;
 * docs/kinds/ec.md): h = x + Attn(x), then each expert takes the
 * max(1, floor(c S / E)) tokens of the sequence of highest gate
 * probability; a token may get several experts or none.  moe's layer with
 * the [ec] keys' configuration (ec_kind.c), its compute moe's (ec.c). */
#ifndef MODE_MOE_EC_H
#define MODE_MOE_EC_H

#include "core/model/kind.h"

extern const layer_kind ec_kind;
extern const kind_ops ec_ops;

#endif
