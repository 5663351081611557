/* The registry of kinds: every layer kind mode knows, one row each in
 * MODE_KIND_ROWS below, from which the enum and both tables are made.  It
 * lives in moe/ because moe/ is the top compute floor (core < mod < moe),
 * the one folder that sees every kind; mode-exp (experiments/) and
 * mode-analyze (analysis/) both link the tables from here.
 *
 *   mode_kinds      the descriptions (keys, tensors, FLOPs, buffers: what
 *                   the config, plan and the analysis need), registry.c;
 *   mode_kind_ops   the compute (what training, evaluation and sampling
 *                   need), registry_ops.c, apart so that mode-analyze links
 *                   the descriptions alone (the test analysis-links);
 *   mode_schema     what the config reads: the kinds' keys and the
 *                   optimizer's, registry.c.
 *
 * Adding a kind is one row here (its files declare the two symbols the
 * row names); the row's place is its place in both tables. */
#ifndef MODE_MOE_REGISTRY_H
#define MODE_MOE_REGISTRY_H

#include "core/config/config.h"
#include "core/model/kind.h"

#include <assert.h>

/* X(name, enum id, description symbol, compute symbol) */
#define MODE_KIND_ROWS(X)                                                                          \
    X(dense, KIND_DENSE, dense_kind, dense_ops)                                                    \
    X(mod, KIND_MOD, mod_kind, mod_ops)                                                            \
    X(moe, KIND_MOE, moe_kind, moe_ops)                                                            \
    X(integrated, KIND_INTEGRATED, integrated_kind, integrated_ops)                                \
    X(staged, KIND_STAGED, staged_kind, staged_ops)                                                \
    X(tcmod, KIND_TCMOD, tcmod_kind, tcmod_ops)                                                    \
    X(drop, KIND_DROP, drop_kind, drop_ops)                                                        \
    X(ec, KIND_EC, ec_kind, ec_ops)                                                                \
    X(mor, KIND_MOR, mor_kind, mor_ops)                                                            \
    X(exit, KIND_EXIT, exit_kind, exit_ops)                                                        \
    X(skipdecode, KIND_SKIPDECODE, skipdecode_kind, skipdecode_ops)                                \
    X(cla, KIND_CLA, cla_kind, cla_ops)                                                            \
    X(attnres, KIND_ATTNRES, attnres_kind, attnres_ops)                                            \
    /* the list's end: every row above ends with a backslash, so a new row is one line */

#define MODE_KIND_ID(name, id, kind, ops) id,
enum { MODE_KIND_ROWS(MODE_KIND_ID) KIND_COUNT };
#undef MODE_KIND_ID

/* Every row's two symbols (their own headers declare them too). */
#define MODE_KIND_DECLARE(name, id, kind, ops)                                                     \
    extern const layer_kind kind;                                                                  \
    extern const kind_ops ops;
MODE_KIND_ROWS(MODE_KIND_DECLARE)
#undef MODE_KIND_DECLARE

/* The rows' entries of each table (registry.c, registry_ops.c), and the
 * rows' names ("dense", ...: each equals its description's name, which
 * the contract test checks). */
#define MODE_KIND_ENTRY(name, id, kind, ops) [id] = &kind,
#define MODE_KIND_OPS_ENTRY(name, id, kind, ops) [id] = &ops,
#define MODE_KIND_NAME(name, id, kind, ops) [id] = #name,

/* NULL-terminated, row i of one the row i of the other; a definition of
 * another length does not compile against these. */
extern const layer_kind *const mode_kinds[KIND_COUNT + 1];
extern const kind_ops *const mode_kind_ops[KIND_COUNT + 1];
extern const char *const mode_kind_names[KIND_COUNT + 1];
extern const config_schema mode_schema;

static_assert(sizeof(mode_kinds) / sizeof(mode_kinds[0]) == KIND_COUNT + 1,
              "mode_kinds: one row per kind, then NULL");
static_assert(sizeof(mode_kind_ops) / sizeof(mode_kind_ops[0]) == KIND_COUNT + 1,
              "mode_kind_ops: one row per kind, then NULL");
static_assert(sizeof(mode_kind_names) / sizeof(mode_kind_names[0]) == KIND_COUNT + 1,
              "mode_kind_names: one name per kind, then NULL");

#endif
