/* The `dense` kind's compute: x <- Block(x) on every row (MODEL.md "Layer
 * kinds"); its description is dense_kind.c. */
#include "core/model/dense.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void dense_views(const layer *l, float *const *t, attn_weights *aw, float **mlp_norm,
                 ffn_weights *fw)
{
    const dense_state *s = l->state;
    if (s->reader) { /* attn_norm wq wo, then the MLP's */
        *aw = (attn_weights){ .norm = t[0], .wq = t[1], .wo = t[2] };
        t += 3;
    } else {
        *aw = attn_weights_at(t);
        t += BLOCK_ATTN_TENSORS;
    }
    *mlp_norm = t[0];
    *fw = ffn_weights_at(t + 1);
}

void dense_free(layer *l)
{
    dense_state *s = l->state;
    if (!s)
        return;
    free(s->block);
    free_block_decode(&s->kv, &s->mlp1, &s->h1);
    free_decode_lanes(&s->lanes);
    free(s);
    l->state = NULL;
}

int dense_build_as(layer *l, const model_dims *dims, int max_seq, bool reader)
{
    dense_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    buf_plan p = buf_counting(BUF_ALIGN);
    dense_layout(&p, s, dims, max_seq, reader);
    if (buf_alloc(&p, &s->block)) {
        dense_free(l);
        return -ENOMEM;
    }
    dense_layout(&p, s, dims, max_seq, reader);
    row_set_fill_whole(s->seq_start, s->pos, max_seq, dims->seq_len);
    return 0;
}

static int dense_build(layer *l, const model_dims *dims, int max_seq)
{
    return dense_build_as(l, dims, max_seq, false);
}

static row_set dense_rows(const dense_state *s, const fwd_args *a)
{
    row_set rs = { .n = a->nseq * a->seq_len, .nseq = a->nseq, .seq_start = s->seq_start,
                   .pos = s->pos };
    return rs;
}

int dense_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    dense_state *s = l->state;
    const model_dims *dm = a->dims;
    row_set rs = dense_rows(s, a);
    attn_weights aw;
    ffn_weights fw;
    float *mlp_norm;
    dense_views(l, l->w, &aw, &mlp_norm, &fw);
    attn_forward(&s->attn, s->h, x, &rs, &aw, a);
    double t0 = mode_now();
    mlp_forward(&a->mm, &s->mlp, y, s->h, rs.n, mlp_norm, &fw, dm->d_model, dm->d_ff);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    if (a->flops_executed)
        *a->flops_executed += a->nseq * l->kind->flops(&l->spec, dm, l->index);
    return 0;
}

int dense_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    dense_state *s = l->state;
    const model_dims *dm = a->dims;
    row_set rs = dense_rows(s, a);
    attn_weights aw, daw;
    ffn_weights fw, dfw;
    float *mlp_norm, *dmlp_norm;
    dense_views(l, l->w, &aw, &mlp_norm, &fw);
    dense_views(l, l->dw, &daw, &dmlp_norm, &dfw);
    size_t nd = (size_t)rs.n * dm->d_model;
    dense_ws v;
    buf_plan wp = buf_carving(a->ws);
    dense_ws_layout(&wp, &v, dm, rs.n);
    double t0 = mode_now();
    memset(v.dh, 0, nd * sizeof(float));
    mlp_backward(&a->mm, v.dh, dmlp_norm, &dfw, dy, s->h, &s->mlp, rs.n, mlp_norm, &fw,
                 dm->d_model, dm->d_ff, v.sub);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    attn_backward(dx, &daw, v.dh, x, &s->attn, &rs, &aw, a, v.sub);
    return 0;
}

static int dense_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    dense_state *s = l->state;
    return block_decode_begin(&s->kv, &s->mlp1, &s->h1, dims->d_model, dims, max_len);
}

int dense_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    dense_state *s = l->state;
    const model_dims *dm = a->dims;
    attn_weights aw;
    ffn_weights fw;
    float *mlp_norm;
    dense_views(l, l->w, &aw, &mlp_norm, &fw);
    int rc = attn_decode(s->reader ? s->kv_read : &s->kv, s->h1, x, pos, &aw, a);
    if (rc)
        return rc;
    mlp_forward(&a->mm, &s->mlp1, y, s->h1, 1, mlp_norm, &fw, dm->d_model, dm->d_ff);
    return 1;
}

static int dense_decode_kv(layer *l, const fwd_args *a, const float *x, int32_t pos)
{
    dense_state *s = l->state;
    attn_weights aw = attn_weights_at(l->w);
    return attn_decode_kv(&s->kv, x, pos, &aw, a);
}

static int dense_decode_truncate(layer *l, int32_t pos)
{
    dense_state *s = l->state;
    if (s->reader)
        return -ENOTSUP; /* its group's first layer owns the cache */
    kv_cache_truncate(&s->kv, pos);
    return 0;
}

static int dense_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    dense_state *s = l->state;
    if (s->reader)
        return -ENOTSUP; /* its group's first layer owns the caches */
    return decode_lanes_begin(&s->lanes, dims, dims->d_ff, max_len, lanes);
}

int dense_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n, int32_t pos,
                      unsigned char *taken)
{
    dense_state *s = l->state;
    attn_weights aw;
    ffn_weights fw;
    float *mlp_norm;
    dense_views(l, l->w, &aw, &mlp_norm, &fw);
    if (n > s->lanes.lanes)
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        s->lanes.lane[i] = i;
        taken[i] = 1;
    }
    return block_decode_rows(&s->lanes, y, x, s->lanes.lane, n, pos, &aw, mlp_norm, &fw, a);
}

const kind_ops dense_ops = {
    .kind = &dense_kind,
    .build = dense_build,
    .free = dense_free,
    .forward = dense_forward,
    .backward = dense_backward,
    .decode_begin = dense_decode_begin,
    .decode = dense_decode,
    .decode_kv = dense_decode_kv,
    .decode_truncate = dense_decode_truncate,
    .decode_lanes = dense_decode_lanes,
    .decode_rows = dense_decode_rows,
};
