/* Early exit (CALM, Schuster et al. 2022; docs/kinds/exit.md): an exit
 * point between layers reads the normed residual stream through the shared
 * tied head.  Training adds its weighted cross-entropy to the loss; in
 * evaluation and decoding a token leaves the stack at the first exit point
 * confident enough, its later layers' keys and values taken from its
 * frozen state. */
#ifndef MODE_MOD_EXIT_H
#define MODE_MOD_EXIT_H

#include "core/model/kind.h"

extern const key_group exit_group; /* [exit] */
extern const layer_kind exit_kind;
extern const kind_ops exit_ops;

#endif
