/* The layer-spec table of the programs: every kind mode knows, one row
 * each, in two tables of the same order (core/model/kind.h): mode_kinds,
 * the descriptions (keys, tensors, FLOPs, buffers: what the config, plan
 * and the analysis need), and mode_kind_ops, the compute (what training,
 * evaluation and sampling need).  They live in moe/, the top of the
 * library stack (core <- mod <- moe), the one place that sees every kind;
 * mode-exp (experiments/) and mode-analyze (analysis/) both link them from
 * here, and mode-analyze links the descriptions alone.  mode_schema is
 * what the config reads: the kinds' keys and the optimizer's. */
#ifndef MODE_MOE_KINDS_H
#define MODE_MOE_KINDS_H

#include "core/config/config.h"
#include "core/model/kind.h"

/* NULL-terminated, row i of one the row i of the other. */
extern const layer_kind *const mode_kinds[];
extern const kind_ops *const mode_kind_ops[];
extern const config_schema mode_schema;

#endif
