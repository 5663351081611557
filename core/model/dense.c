/* The `dense` kind: x <- Block(x) on every row (MODEL.md "Layer kinds"). */
#include "core/model/block.h"
#include "core/model/kind.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct dense_state {
    attn_cache attn;
    mlp_cache mlp;
    float *h;        /* [rows][d] x + Attn(x) */
    int *seq_start;  /* [max_seq+1] */
    int32_t *pos;    /* [rows] */
    int max_seq;
    kv_cache kv;      /* decoding */
    mlp_cache mlp1;   /* one row of MLP activations for decoding */
    float *h1;        /* [d] */
} dense_state;

static const char *const dense_keys[] = { NULL };

static int dense_validate(const layer_spec *spec, const model_dims *dims, char *err, int err_len)
{
    return 0;
}

static int dense_tensors(const layer_spec *spec, const model_dims *dims, tensor_desc *out, int max)
{
    if (out && max < BLOCK_TENSORS)
        return -EINVAL;
    return block_tensors(out, dims, true);
}

static void dense_free(layer *l)
{
    dense_state *s = l->state;
    if (!s)
        return;
    free_attn_cache(&s->attn);
    free_mlp_cache(&s->mlp);
    free(s->h);
    free(s->seq_start);
    free(s->pos);
    free_kv_cache(&s->kv);
    free_mlp_cache(&s->mlp1);
    free(s->h1);
    free(s);
    l->state = NULL;
}

static int dense_build(layer *l, const model_dims *dims, int max_seq)
{
    int S = dims->seq_len, rows = max_seq * S;
    dense_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    s->max_seq = max_seq;
    s->h = malloc((size_t)rows * dims->d_model * sizeof(float));
    s->seq_start = malloc((size_t)(max_seq + 1) * sizeof(int));
    s->pos = malloc((size_t)rows * sizeof(int32_t));
    if (!s->h || !s->seq_start || !s->pos ||
        build_attn_cache(&s->attn, dims, rows) ||
        build_mlp_cache(&s->mlp, dims, rows, dims->d_ff)) {
        dense_free(l);
        return -ENOMEM;
    }
    row_set_fill_whole(s->seq_start, s->pos, max_seq, S);
    return 0;
}

static double dense_state_bytes(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    long rows = (long)max_seq * dims->seq_len;
    /* h [rows][d], pos [rows], seq_start, the attention and MLP caches */
    return 4.0 * ((double)rows * (dims->d_model + 1.0) + max_seq + 1.0) +
           attn_cache_bytes(dims, rows) + mlp_cache_bytes(dims, rows, dims->d_ff);
}

static long dense_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    int rows = max_seq * dims->seq_len;
    long a = attn_ws_floats(dims, rows, dims->seq_len);
    long m = mlp_ws_floats(dims, rows, dims->d_ff);
    /* dh, then the larger of the two sublayers' needs */
    return (long)rows * dims->d_model + (a > m ? a : m);
}

static row_set dense_rows(const dense_state *s, const fwd_args *a)
{
    row_set rs = { .n = a->nseq * a->seq_len, .nseq = a->nseq, .seq_start = s->seq_start,
                   .pos = s->pos };
    return rs;
}

static int dense_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    dense_state *s = l->state;
    const model_dims *dm = a->dims;
    row_set rs = dense_rows(s, a);
    attn_weights aw = attn_weights_at(l->w);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    attn_forward(&s->attn, s->h, x, &rs, &aw, a);
    double t0 = mode_now();
    mlp_forward(a->pool, &s->mlp, y, s->h, rs.n, l->w[BLOCK_ATTN_TENSORS], &fw, dm->d_model, dm->d_ff);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    if (a->flops_executed)
        *a->flops_executed += a->nseq * l->kind->flops(&l->spec, dm);
    return 0;
}

static int dense_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    dense_state *s = l->state;
    const model_dims *dm = a->dims;
    row_set rs = dense_rows(s, a);
    attn_weights aw = attn_weights_at(l->w), daw = attn_weights_at(l->dw);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    ffn_weights dfw = ffn_weights_at(l->dw + BLOCK_ATTN_TENSORS + 1);
    /* dh is the first slice of the work space; the sublayers use the rest. */
    size_t nd = (size_t)rs.n * dm->d_model;
    float *dh = a->ws;
    double t0 = mode_now();
    memset(dh, 0, nd * sizeof(float));
    mlp_backward(a->pool, dh, l->dw[BLOCK_ATTN_TENSORS], &dfw, dy, s->h, &s->mlp, rs.n,
                 l->w[BLOCK_ATTN_TENSORS], &fw, dm->d_model, dm->d_ff, a->ws + nd);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    attn_backward(dx, &daw, dh, x, &s->attn, &rs, &aw, a, a->ws + nd);
    return 0;
}

static double dense_flops(const layer_spec *spec, const model_dims *dims)
{
    long S = dims->seq_len;
    return attn_flops_rows(dims, S, S * S) + ffn_flops_rows(dims->d_model, dims->d_ff, S);
}

static int dense_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    dense_state *s = l->state;
    if (s->kv.cap < max_len) { /* first use, or a longer sequence */
        free_mlp_cache(&s->mlp1);
        free(s->h1);
        s->h1 = malloc((size_t)dims->d_model * sizeof(float));
        if (!s->h1 || build_mlp_cache(&s->mlp1, dims, 1, dims->d_ff))
            return -ENOMEM;
    }
    return kv_cache_begin(&s->kv, dims, max_len);
}

static int dense_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    dense_state *s = l->state;
    const model_dims *dm = a->dims;
    attn_weights aw = attn_weights_at(l->w);
    ffn_weights fw = ffn_weights_at(l->w + BLOCK_ATTN_TENSORS + 1);
    int rc = attn_decode(&s->kv, s->h1, x, pos, &aw, a);
    if (rc)
        return rc;
    mlp_forward(a->pool, &s->mlp1, y, s->h1, 1, l->w[BLOCK_ATTN_TENSORS], &fw, dm->d_model, dm->d_ff);
    return 1;
}

const layer_kind dense_kind = {
    .name = "dense",
    .keys = dense_keys,
    .validate = dense_validate,
    .tensors = dense_tensors,
    .build = dense_build,
    .free = dense_free,
    .ws_floats = dense_ws_floats,
    .state_bytes = dense_state_bytes,
    .forward = dense_forward,
    .backward = dense_backward,
    .flops = dense_flops,
    .decode_begin = dense_decode_begin,
    .decode = dense_decode,
    .record = NULL,
};
