/* The `mod` kind's state, shared by its description (mod_kind.c: bytes for
 * mode-exp plan, the work space) and its compute (mod.c).  Private to mod/. */
#ifndef MODE_MOD_MOD_STATE_H
#define MODE_MOD_MOD_STATE_H

#include "mod/routed.h"
#include "mod/router.h"

/* mod's parameters: the [mod] keys alone. */
typedef struct mod_params {
    mod_router_params router;
} mod_params;

typedef struct mod_state {
    mod_router rt;
    int t_block;        /* first block tensor */
    routed_block blk;   /* the block on the selected rows (routed.h) */
} mod_state;

static inline const mod_params *mod_params_of(const layer_spec *s)
{
    return (const mod_params *)(const void *)s->params;
}

#endif
