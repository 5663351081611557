/* Mixture-of-Depths (Raposo et al. 2024, Sec. 3): the router (router.c)
 * picks k = floor(capacity S) tokens per sequence; the block (routed.c) runs
 * on those k rows only (attention among them, causal by original position,
 * RoPE with original positions), so its work really shrinks, and the rest
 * are copied through (Eq. 1):
 *     x_i <- x_i + g(r_i) (Block(X~) - X~)_i   for i in the selected set. */
#include "mod/mod.h"
#include "mod/mod_state.h"

#include "core/util/ctx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mod_free(layer *l)
{
    mod_state *s = l->state;
    if (!s)
        return;
    free_routed_block(&s->blk);
    free_mod_router(&s->rt);
    free(s);
    l->state = NULL;
}

static int mod_build(layer *l, const model_dims *dims, int max_seq)
{
    mod_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    int rc = build_mod_router(&s->rt, &mod_params_of(&l->spec)->router, dims, max_seq);
    s->t_block = s->rt.cfg.n_tensors;
    if (rc || build_routed_block(&s->blk, &routed_dense, NULL, dims, max_seq, s->rt.cfg.max_k)) {
        mod_free(l);
        return -ENOMEM;
    }
    return 0;
}

static int mod_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    mod_state *s = l->state;
    double t0 = mode_now();
    int rc = mod_router_forward(&s->rt, &s->blk.set, l->w, l->index, a, x, ROUTER_TAKE_MODE);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return rc ? rc : routed_forward(&s->blk, l->w + s->t_block, a, y, x);
}

static int mod_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    mod_state *s = l->state;
    const float *dgate;
    int rc = routed_backward(&s->blk, l->w + s->t_block, l->dw + s->t_block, a, dx, dy, &dgate);
    if (rc)
        return rc;
    double t0 = mode_now();
    mod_router_backward(&s->rt, &s->blk.set, l->w, l->dw, a, dx, x, dgate);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

static int mod_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const mod_state *s = l->state;
    route_decision d = { 0 };
    return mod_router_record(&s->rt, a, &d, sink);
}

static int mod_stat_count(const layer *l, int *n_sums)
{
    return mod_router_stat_count(n_sums);
}

static void mod_stat_name(const layer *l, int col, char *buf, int len)
{
    mod_router_stat_name(col, buf, len);
}

static void mod_stat_sums(const layer *l, double *sums)
{
    const mod_state *s = l->state;
    memcpy(sums, s->rt.sums, sizeof(s->rt.sums));
}

static void mod_stat_columns(const layer *l, const double *sums, double *cols)
{
    mod_router_stat_columns(sums, cols);
}

static int mod_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    mod_state *s = l->state;
    return routed_decode_begin(&s->blk, dims, max_len);
}

static int mod_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    mod_state *s = l->state;
    return mod_router_decode(&s->rt, &s->blk, l->w, s->t_block, l->index, a, y, x, pos);
}

/* A frozen token (it left at an exit point): its keys and values where the
 * router would take it. */
static int mod_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    mod_state *s = l->state;
    return mod_router_decode_kv(&s->rt, &s->blk, l->w, s->t_block, l->index, a, x, pos);
}

static int mod_decode_truncate(layer *l, int32_t pos)
{
    mod_state *s = l->state;
    kv_cache_truncate(&s->blk.kv, pos);
    return 0;
}

static int mod_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    mod_state *s = l->state;
    return routed_decode_lanes(&s->blk, dims, max_len, lanes);
}

static int mod_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n,
                          int32_t pos, unsigned char *taken)
{
    mod_state *s = l->state;
    return mod_router_decode_rows(&s->rt, &s->blk, l->w, s->t_block, l->index, a, y, x, n, pos,
                                  taken);
}

const kind_ops mod_ops = {
    .kind = &mod_kind,
    .build = mod_build,
    .free = mod_free,
    .forward = mod_forward,
    .backward = mod_backward,
    .decode_begin = mod_decode_begin,
    .decode = mod_decode,
    .decode_lanes = mod_decode_lanes,
    .decode_rows = mod_decode_rows,
    .decode_kv = mod_decode_kv,
    .decode_truncate = mod_decode_truncate,
    .record = mod_record,
    .stat_count = mod_stat_count,
    .stat_name = mod_stat_name,
    .stat_sums = mod_stat_sums,
    .routes = MOD_ROUTES,
    .decode_routes = MOD_DECODE_ROUTES,
    .stat_columns = mod_stat_columns,
};
