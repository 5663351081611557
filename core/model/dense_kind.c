/* The `dense` kind's description (its compute: dense.c). */
#include "core/model/dense.h"

#include <errno.h>

void dense_layout(buf_plan *p, dense_state *s, const model_dims *dims, int max_seq, bool reader)
{
    int S = dims->seq_len, rows = max_seq * S;
    s->max_seq = max_seq;
    s->reader = reader;
    s->h = BUF_FLOATS(p, (size_t)rows * dims->d_model);
    s->seq_start = BUF_INTS(p, max_seq + 1);
    s->pos = BUF_I32(p, rows);
    if (reader) {
        attn_cache_layout_reader(p, &s->attn, dims, rows);
        s->dk_read = BUF_FLOATS(p, (size_t)rows * dims->d_model);
        s->dv_read = BUF_FLOATS(p, (size_t)rows * dims->d_model);
    } else {
        attn_cache_layout(p, &s->attn, dims, rows);
    }
    mlp_cache_layout(p, &s->mlp, dims, rows, dims->d_ff);
}

void dense_ws_layout(buf_plan *p, dense_ws *w, const model_dims *dims, int n)
{
    long a = attn_ws_floats(dims, n, dims->seq_len), m = mlp_ws_floats(dims, n, dims->d_ff);
    w->dh = BUF_FLOATS(p, (size_t)n * dims->d_model);
    w->sub = BUF_FLOATS(p, a > m ? a : m);
}

static int dense_tensors(const layer_spec *spec, const model_dims *dims, tensor_desc *out, int max)
{
    if (out && max < BLOCK_TENSORS)
        return -EINVAL;
    return block_tensors(out, dims, true);
}

double dense_layout_bytes(const model_dims *dims, int max_seq, bool reader)
{
    dense_state s;
    buf_plan p = buf_counting(BUF_ALIGN);
    dense_layout(&p, &s, dims, max_seq, reader);
    return (double)p.used;
}

static double dense_state_bytes(const layer_spec *spec, const model_dims *dims, int li, int max_seq)
{
    return dense_layout_bytes(dims, max_seq, false);
}

long dense_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    dense_ws w;
    buf_plan p = buf_counting(sizeof(float));
    dense_ws_layout(&p, &w, dims, max_seq * dims->seq_len);
    return (long)(p.used / sizeof(float));
}

double dense_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    long S = dims->seq_len;
    return attn_flops_rows(dims, S, S * S) + ffn_flops_rows(dims->d_model, dims->d_ff, S);
}

const layer_kind dense_kind = {
    .name = "dense",
    .groups = NULL,
    .tensors = dense_tensors,
    .flops = dense_flops,
    .state_bytes = dense_state_bytes,
    .ws_floats = dense_ws_floats,
    .plain = true,
};
