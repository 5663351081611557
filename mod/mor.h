/* Mixture-of-Recursions (Bae et al. 2025, arXiv 2507.10524;
 * docs/kinds/mor.md): one block's weights applied up to R times, an
 * expert-choice router at each recursion step keeping the top share of the
 * tokens still active, attention at each step among that step's tokens
 * (recursion-wise key-value caching). */
#ifndef MODE_MOD_MOR_H
#define MODE_MOD_MOR_H

#include "core/model/kind.h"

extern const key_group mor_group; /* [mor] */
extern const layer_kind mor_kind;
extern const kind_ops mor_ops;

#endif
