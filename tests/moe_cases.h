/* What the moe test programs share: the kinds table, the expert layer
 * configurations and the routing record of a layer. */
#ifndef MODE_TESTS_MOE_CASES_H
#define MODE_TESTS_MOE_CASES_H

#include "moe/moe.h"
#include "testlib.h"

#include <stdbool.h>
#include <string.h>

static const kind_ops *const kinds[] = { &dense_ops, &moe_ops, &integrated_ops, NULL };

/* ------------------------------------------------------------------ */
/* Layer specs                                                          */

typedef struct moecfg {
    const char *kind; /* "moe" | "integrated" */
    int experts, top_k;
    double cf;        /* capacity_factor */
    int d_ff;         /* expert d_ff */
    double bw, zw;    /* balance_weight, z_weight */
} moecfg;

static inline layer_spec moe_spec(const moecfg *c)
{
    layer_spec s = tl_spec(kinds, c->kind);
    tl_spec_experts(&s, kinds, c->experts, c->top_k, c->cf, c->d_ff, c->bw, c->zw);
    return s;
}

static inline bool is_integrated(const moecfg *c)
{
    return !strcmp(c->kind, "integrated");
}

/* ------------------------------------------------------------------ */
/* Fixtures, routing records, the reference routing                     */

static inline void make(tl_fixture *f, model_dims dims, const layer_spec *specs, int nseq, uint64_t seed)
{
    tl_make(f, kinds, dims, specs, nseq, seed);
}

/* The routing of layer l after the last forward over nseq sequences: the
 * experts and their weights, nothing else. */
static inline void read_routing(model *m, int l, int nseq, tl_routing *out)
{
    tl_read_routing(m, l, nseq, out, TL_EXPERT_RECORD, 0);
}

#endif
