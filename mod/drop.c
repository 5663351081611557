/* Stochastic depth / LayerDrop (drop.h, docs/kinds/drop.md): the routed
 * block (routed.c) on the rows Bernoulli draws choose (select_draws.c): in
 * training the kept sequences' rows (unit = sequence: the dropped ones cost
 * nothing) or every row with a kept/dropped scale (unit = token); in
 * evaluation every row, or none when the layer is pruned.
 *     x_i <- x_i + s_i (Block(X~) - X~)_i,
 * s_i = 1 / (1 - p_l) or 1 kept (rescale true or false), 0 dropped, and in
 * evaluation 1 or 1 - p_l. */
#include "mod/drop.h"
#include "mod/drop_state.h"
#include "mod/select_draws.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void drop_free(layer *l)
{
    drop_state *s = l->state;
    if (!s)
        return;
    free_routed_block(&s->blk);
    free(s);
    l->state = NULL;
}

static int drop_build(layer *l, const model_dims *dims, int max_seq)
{
    drop_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    if (build_routed_block(&s->blk, &routed_dense, NULL, dims, max_seq, dims->seq_len)) {
        drop_free(l);
        return -ENOMEM;
    }
    return 0;
}

/* The layer's draws from its keys. */
static draws_rule rule_of(const layer *l, int n_layers)
{
    const drop_params *p = drop_params_of(&l->spec);
    draws_rule r = { .p = drop_probability(p, l->index, n_layers),
                     .per_token = p->unit == DROP_TOKEN, .rescale = p->rescale,
                     .pruned = drop_pruned(p, l->index) };
    return r;
}

static int drop_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    drop_state *s = l->state;
    draws_rule r = rule_of(l, a->dims->n_layers);
    s->sums[0] = select_draws(&s->blk.set, &r, a, l->index);
    s->sums[1] = (double)a->nseq * a->seq_len;
    return routed_forward(&s->blk, l->w, a, y, x);
}

static int drop_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    drop_state *s = l->state;
    const float *dgate; /* the scales are constants: no selector's backward */
    return routed_backward(&s->blk, l->w, l->dw, a, dx, dy, &dgate);
}

static int drop_stat_count(const layer *l, int *n_sums)
{
    *n_sums = 2;
    return 1;
}

static void drop_stat_name(const layer *l, int col, char *buf, int len)
{
    snprintf(buf, (size_t)len, "kept_share");
}

static void drop_stat_sums(const layer *l, double *sums)
{
    const drop_state *s = l->state;
    memcpy(sums, s->sums, sizeof(s->sums));
}

static void drop_stat_columns(const layer *l, const double *m, double *cols)
{
    cols[0] = m[1] > 0 ? m[0] / m[1] : 0.0;
}

static int drop_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    drop_state *s = l->state;
    return routed_decode_begin(&s->blk, dims, max_len);
}

static int drop_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    drop_state *s = l->state;
    draws_rule r = rule_of(l, a->dims->n_layers);
    float g;
    if (!select_draws_decide(&r, &g)) {
        memcpy(y, x, (size_t)a->dims->d_model * sizeof(float));
        return 0;
    }
    int rc = routed_decode(&s->blk, l->w, a, y, x, pos, g);
    return rc ? rc : 1;
}

static int drop_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    drop_state *s = l->state;
    return routed_decode_lanes(&s->blk, dims, max_len, lanes);
}

/* Decoding draws nothing: every token of a layer runs it (or none, pruned). */
static int drop_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n,
                            int32_t pos, unsigned char *taken)
{
    drop_state *s = l->state;
    draws_rule r = rule_of(l, a->dims->n_layers);
    float g, gv[MODE_MAX_LANES];
    unsigned char take = (unsigned char)select_draws_decide(&r, &g);
    if (n > MODE_MAX_LANES)
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        taken[i] = take;
        gv[i] = g;
    }
    return routed_decode_rows(&s->blk, l->w, a, y, x, n, pos, taken, gv);
}

static int drop_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    drop_state *s = l->state;
    if (drop_pruned(drop_params_of(&l->spec), l->index))
        return 0;
    return routed_decode_kv(&s->blk, l->w, a, x, pos);
}

static int drop_decode_truncate(layer *l, int32_t pos)
{
    drop_state *s = l->state;
    kv_cache_truncate(&s->blk.kv, pos);
    return 0;
}

const kind_ops drop_ops = {
    .kind = &drop_kind,
    .build = drop_build,
    .free = drop_free,
    .forward = drop_forward,
    .backward = drop_backward,
    .decode_begin = drop_decode_begin,
    .decode = drop_decode,
    .decode_lanes = drop_decode_lanes,
    .decode_rows = drop_decode_rows,
    .decode_kv = drop_decode_kv,
    .decode_truncate = drop_decode_truncate,
    .stat_count = drop_stat_count,
    .stat_name = drop_stat_name,
    .stat_sums = drop_stat_sums,
    .stat_columns = drop_stat_columns,
};
