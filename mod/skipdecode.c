/* SkipDecode (skipdecode.h, docs/kinds/skipdecode.md): the dense block
 * (core/model/block.h) on the rows of positions t < T_l of every sequence,
 * the identity on the rest:
 *     y_t = Block(X_{<T_l})_t  for t < T_l,    y_t = x_t  otherwise.
 * The rows that run are a prefix of each sequence, so attention among them
 * is the dense block's on a shorter sequence, and in decoding the
 * key-value cache holds T_l rows. */
#include "mod/skipdecode.h"
#include "mod/skipdecode_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void skipdecode_free(layer *l)
{
    skipdecode_state *s = l->state;
    if (!s)
        return;
    free(s->block);
    free_block_decode(&s->kv, &s->mlp1, &s->dec);
    free_decode_lanes(&s->lanes);
    free(s);
    l->state = NULL;
}

static int skipdecode_build(layer *l, const model_dims *dims, int max_seq)
{
    skipdecode_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    buf_plan p = buf_counting(BUF_ALIGN);
    skipdecode_layout(&p, s, dims, max_seq);
    if (buf_alloc(&p, &s->block)) {
        skipdecode_free(l);
        return -ENOMEM;
    }
    skipdecode_layout(&p, s, dims, max_seq);
    s->seq_len = dims->seq_len;
    return 0;
}

/* T_l of this layer in a model of dims. */
static int rows_of(const layer *l, const model_dims *dims)
{
    return skipdecode_rows(skipdecode_params_of(&l->spec), l->index, dims->n_layers,
                           dims->seq_len);
}

static row_set prefix_rows(const skipdecode_state *s)
{
    row_set rs = { .n = s->nseq * s->T, .nseq = s->nseq, .seq_start = s->seq_start,
                   .pos = s->pos };
    return rs;
}

static int skipdecode_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    skipdecode_state *s = l->state;
    const model_dims *dm = a->dims;
    int S = a->seq_len, T = rows_of(l, dm), d = dm->d_model;
    if (T > S)
        T = S;
    size_t row = (size_t)d * sizeof(float);
    s->T = T;
    s->nseq = a->nseq;
    for (int b = 0; b < a->nseq; b++) {
        s->seq_start[b] = b * T;
        for (int t = 0; t < S; t++)
            s->selected[(size_t)b * S + t] = t < T;
        for (int t = 0; t < T; t++)
            s->pos[b * T + t] = t;
        memcpy(s->xs + (size_t)b * T * d, x + (size_t)b * S * d, (size_t)T * row);
        memcpy(y + ((size_t)b * S + T) * d, x + ((size_t)b * S + T) * d, (size_t)(S - T) * row);
    }
    s->seq_start[a->nseq] = a->nseq * T;
    row_set rs = prefix_rows(s);
    if (!rs.n)
        return 0;
    attn_weights aw = attn_weights_at(l->w);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    attn_forward(&s->attn, s->h, s->xs, &rs, &aw, a);
    mlp_forward(&a->mm, &s->mlp, s->ys, s->h, rs.n, l->w[BLOCK_ATTN_TENSORS], &fw, d,
                dm->d_ff);
    for (int b = 0; b < a->nseq; b++)
        memcpy(y + (size_t)b * S * d, s->ys + (size_t)b * T * d, (size_t)T * row);
    if (a->flops_executed)
        *a->flops_executed += attn_flops_rows(dm, rs.n, (long)rs.n * T) +
                              ffn_flops_rows(d, dm->d_ff, rs.n);
    return 0;
}

static int skipdecode_backward(layer *l, const fwd_args *a, float *dx, const float *dy,
                               const float *x)
{
    skipdecode_state *s = l->state;
    const model_dims *dm = a->dims;
    int S = a->seq_len, T = s->T, d = dm->d_model;
    row_set rs = prefix_rows(s);
    size_t nd = (size_t)rs.n * d;
    skipdecode_ws v;
    buf_plan wp = buf_carving(a->ws);
    skipdecode_ws_layout(&wp, &v, dm, rs.n);
    for (int b = 0; b < a->nseq; b++) {
        /* the identity's rows pass dy through; the block's are gathered */
        size_t off = (size_t)b * S * d;
        for (size_t e = (size_t)T * d; e < (size_t)S * d; e++)
            dx[off + e] += dy[off + e];
        memcpy(v.dys + (size_t)b * T * d, dy + off, (size_t)T * d * sizeof(float));
    }
    if (!rs.n)
        return 0;
    attn_weights aw = attn_weights_at(l->w), daw = attn_weights_at(l->dw);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    ffn_weights dfw = ffn_weights_at(l->dw + BLOCK_ATTN_TENSORS + 1);
    memset(v.dh, 0, nd * sizeof(float));
    mlp_backward(&a->mm, v.dh, l->dw[BLOCK_ATTN_TENSORS], &dfw, v.dys, s->h, &s->mlp, rs.n,
                 l->w[BLOCK_ATTN_TENSORS], &fw, d, dm->d_ff, v.sub);
    memset(v.dxs, 0, nd * sizeof(float));
    attn_backward(v.dxs, &daw, v.dh, s->xs, &s->attn, &rs, &aw, a, v.sub);
    for (int b = 0; b < a->nseq; b++) {
        float *o = dx + (size_t)b * S * d;
        const float *g = v.dxs + (size_t)b * T * d;
        for (size_t e = 0; e < (size_t)T * d; e++)
            o[e] += g[e];
    }
    return 0;
}

static int skipdecode_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const skipdecode_state *s = l->state;
    route_decision dcs = { .nseq = a->nseq, .seq_len = a->seq_len, .selected = s->selected };
    return route_decision_record(&dcs, sink);
}

static int skipdecode_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    skipdecode_state *s = l->state;
    int T = rows_of(l, dims);
    /* a layer that runs every position of the schedule runs the later ones too */
    int cap = T < dims->seq_len && T < max_len ? T : max_len;
    return block_decode_begin(&s->kv, &s->mlp1, &s->dec, dims->d_model, dims, cap > 0 ? cap : 1);
}

static bool runs_at(const layer *l, const model_dims *dims, int32_t pos)
{
    return skipdecode_runs(skipdecode_params_of(&l->spec), l->index, dims->n_layers,
                           dims->seq_len, pos);
}

static int skipdecode_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    skipdecode_state *s = l->state;
    const model_dims *dm = a->dims;
    if (!runs_at(l, dm, pos)) {
        memcpy(y, x, (size_t)dm->d_model * sizeof(float));
        return 0;
    }
    attn_weights aw = attn_weights_at(l->w);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    int rc = attn_decode(&s->kv, s->dec, x, pos, &aw, a);
    if (rc)
        return rc;
    mlp_forward(&a->mm, &s->mlp1, y, s->dec, 1, l->w[BLOCK_ATTN_TENSORS], &fw, dm->d_model,
                dm->d_ff);
    return 1;
}

static int skipdecode_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    skipdecode_state *s = l->state;
    int T = rows_of(l, dims);
    int cap = T < dims->seq_len && T < max_len ? T : max_len; /* as decode_begin */
    return decode_lanes_begin(&s->lanes, dims, dims->d_ff, cap > 0 ? cap : 1, lanes);
}

/* Every lane stands at pos: the schedule runs the block on all or none. */
static int skipdecode_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n,
                                  int32_t pos, unsigned char *taken)
{
    skipdecode_state *s = l->state;
    const model_dims *dm = a->dims;
    bool runs = runs_at(l, dm, pos);
    for (int i = 0; i < n; i++) {
        s->lanes.lane[i] = i;
        taken[i] = runs;
    }
    if (!runs) {
        memcpy(y, x, (size_t)n * dm->d_model * sizeof(float));
        return 0;
    }
    attn_weights aw = attn_weights_at(l->w);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    return block_decode_rows(&s->lanes, y, x, s->lanes.lane, n, pos, &aw,
                             l->w[BLOCK_ATTN_TENSORS], &fw, a);
}

static int skipdecode_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    skipdecode_state *s = l->state;
    if (!runs_at(l, a->dims, pos))
        return 0;
    attn_weights aw = attn_weights_at(l->w);
    return attn_decode_kv(&s->kv, x, pos, &aw, a);
}

/* The stack as SkipDecode reads it (checked once, by the lowest skipdecode
 * layer, when the model is built): the skipdecode layers are one run of
 * adjacent layers with one schedule; the layers below it compute every
 * position (the paper's warm-up layers), and so do those above it, which
 * the schedule must count among the min_layers every position computes.
 * Then the layers a position computes are the warm-up layers and the top
 * n(t), n never rising with t: a token enters the stack late. */
static int skipdecode_stack(layer *l, const fwd_args *a, const stack_call *c)
{
    if (c->event != STACK_BUILT)
        return 0;
    const layer *ls = c->layers;
    int L = c->n_layers, first = l->index, last = first;
    for (int k = 0; k < first; k++)
        if (ls[k].kind == &skipdecode_kind)
            return 0; /* a lower one checks */
    const skipdecode_params *p = skipdecode_params_of(&l->spec);
    while (last + 1 < L && ls[last + 1].kind == &skipdecode_kind)
        last++;
    for (int k = last + 1; k < L; k++) {
        if (ls[k].kind == &skipdecode_kind) {
            fprintf(stderr,
                    "skipdecode: layer %d is skipdecode above layer %d (%s), which computes "
                    "every position: the skipdecode layers must be adjacent (a token enters the "
                    "stack once, bypassing only lower layers)\n",
                    k, last + 1, ls[last + 1].kind->name);
            return -EINVAL;
        }
        if (L - k > p->min_layers) {
            fprintf(stderr,
                    "skipdecode: [skipdecode] min_layers = %d, but layer %d (%s) above the "
                    "skipdecode layers computes every position, so the last position computes "
                    "at least %d layers from the top: set min_layers >= %d or make layer %d "
                    "skipdecode\n",
                    p->min_layers, k, ls[k].kind->name, L - k, L - k, k);
            return -EINVAL;
        }
    }
    for (int k = first; k <= last; k++) {
        if (memcmp(ls[k].spec.params, l->spec.params, sizeof(skipdecode_params))) {
            fprintf(stderr,
                    "skipdecode: layers %d and %d have different [skipdecode] keys: the "
                    "schedule is the model's, one skip point a position\n",
                    first, k);
            return -EINVAL;
        }
        if (!skipdecode_rows(p, k, L, ((const skipdecode_state *)l->state)->seq_len)) {
            fprintf(stderr,
                    "skipdecode: layer %d of %d never runs: [skipdecode] max_layers = %d lets "
                    "position 0 compute only the top %d layers (set max_layers >= %d, or 0)\n",
                    k, L, p->max_layers, p->max_layers, L - k);
            return -EINVAL;
        }
    }
    return 0;
}

const kind_ops skipdecode_ops = {
    .kind = &skipdecode_kind,
    .build = skipdecode_build,
    .free = skipdecode_free,
    .forward = skipdecode_forward,
    .backward = skipdecode_backward,
    .decode_begin = skipdecode_decode_begin,
    .decode = skipdecode_decode,
    .decode_lanes = skipdecode_decode_lanes,
    .decode_rows = skipdecode_decode_rows,
    .decode_kv = skipdecode_decode_kv,
    .record = skipdecode_record,
    .stack = skipdecode_stack,
};
