/* The `mod` layer kind: Mixture-of-Depths (Raposo et al. 2024), expert-choice
 * routing of a whole block per sequence (MODEL.md "Layer kinds"). */
#ifndef MODE_MOD_MOD_H
#define MODE_MOD_MOD_H

#include "core/model/kind.h"
#include "mod/router.h"

extern const layer_kind mod_kind;

#endif
