/* The `cla` kind's compute (Cross-Layer Attention, docs/kinds/cla.md):
 * dense.c's block with its attention a reader of its group's first layer's
 * keys and values, joined to that layer when the stack is built. */
#include "core/model/dense.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* The group: the cla layers right above a dense layer (its first layer).
 * Its top reader's buffers gather d k, d v for the first layer's backward:
 * backward runs top-down, so the top reader writes them, the others below
 * it add, and the first layer finds them complete. */
static int cla_join(layer *l, const stack_call *c)
{
    dense_state *s = l->state;
    int first = l->index - 1, top = l->index;
    while (first >= 0 && c->layers[first].kind == l->kind)
        first--;
    while (top + 1 < c->n_layers && c->layers[top + 1].kind == l->kind)
        top++;
    if (first < 0 || c->layers[first].kind != &dense_kind) {
        if (c->err)
            snprintf(c->err, (size_t)c->err_len,
                     "layer %d (cla) reads the keys and values of the first layer of its group, "
                     "the layer below its run of cla layers, which must be dense; found %s "
                     "(expected dense: a routed kind computes keys for the rows it selects "
                     "only, and the other kinds keep their keys where cla does not reach)",
                     l->index, first < 0 ? "none (a cla layer at the bottom of the stack)"
                                         : c->layers[first].kind->name);
        return -EINVAL;
    }
    dense_state *src = c->layers[first].state, *t = c->layers[top].state;
    s->attn.k = src->attn.k;
    s->attn.v = src->attn.v;
    s->kv_read = &src->kv;
    s->lanes.read_from = &src->lanes;
    s->attn.dk_read = src->attn.dk_read = t->dk_read;
    s->attn.dv_read = src->attn.dv_read = t->dv_read;
    s->attn.dkv_first = top == l->index;
    return 0;
}

static int cla_stack(layer *l, const fwd_args *a, const stack_call *c)
{
    (void)a;
    return c->event == STACK_BUILT ? cla_join(l, c) : 0;
}

static int cla_build(layer *l, const model_dims *dims, int max_seq)
{
    return dense_build_as(l, dims, max_seq, true);
}

/* A reader keeps no cache: its decoding state is the MLP's row and h. */
static int cla_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    (void)max_len;
    dense_state *s = l->state;
    if (s->h1)
        return 0;
    s->h1 = malloc((size_t)dims->d_model * sizeof(float));
    if (!s->h1 || build_mlp_cache(&s->mlp1, dims, 1, dims->d_ff))
        return -ENOMEM;
    return 0;
}

/* Batched decoding: a reader's scratch; its group's first layer's lanes
 * hold the caches (joined at STACK_BUILT). */
static int cla_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    dense_state *s = l->state;
    return decode_lanes_begin_reader(&s->lanes, dims, dims->d_ff, max_len, lanes);
}

/* A token that left the stack: the first layer's decode_kv gave the
 * group's cache its keys and values; a reader has none to add. */
static int cla_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    (void)l, (void)a, (void)x, (void)pos;
    return 0;
}

const kind_ops cla_ops = {
    .kind = &cla_kind,
    .build = cla_build,
    .free = dense_free,
    .forward = dense_forward,
    .backward = dense_backward,
    .decode_begin = cla_decode_begin,
    .decode = dense_decode,
    .decode_kv = cla_decode_kv,
    .decode_lanes = cla_decode_lanes,
    .decode_rows = dense_decode_rows,
    .stack = cla_stack,
};
