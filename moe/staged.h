/* The `staged` layer kind: staged MoDE (MoD routing of a block whose MLP is
 * the MoE experts). */
#ifndef MODE_MOE_STAGED_H
#define MODE_MOE_STAGED_H

#include "core/model/kind.h"

extern const layer_kind staged_kind;
extern const kind_ops staged_ops;

#endif
