/* The `moe` and `integrated` layer kinds (MODEL.md "Layer kinds"):
 * h = x + Attn(x); y = h + sum_e p_e SwiGLU_e(RMSNorm_mlp(h)) over the kept
 * token-choice assignments; `integrated` (integrated MoDE, Raposo et al.
 * 2024 Sec. 4.3) adds a no-op column to the gate: tokens sent there get no
 * MLP update, cost nothing and are never dropped.  (ec, expert-choice
 * experts on the same layer: ec.h.) */
#ifndef MODE_MOE_MOE_H
#define MODE_MOE_MOE_H

#include "core/model/kind.h"
#include "moe/experts.h"

extern const layer_kind moe_kind, integrated_kind;
extern const kind_ops moe_ops, integrated_ops;

#endif
