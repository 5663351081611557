/* Stochastic depth / LayerDrop (Huang et al. 2016; Fan et al. 2020;
 * docs/kinds/drop.md): a dense block that training skips at random, per
 * sequence or per token, with a probability that grows linearly with depth
 * (or is the same in every layer); evaluation and sampling run it whole, or
 * prune it (skip it) to trade loss for compute. */
#ifndef MODE_MOD_DROP_H
#define MODE_MOD_DROP_H

#include "core/model/kind.h"

extern const key_group drop_group; /* [drop] */
extern const layer_kind drop_kind;
extern const kind_ops drop_ops;

#endif
