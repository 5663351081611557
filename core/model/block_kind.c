/* What the block's pieces are, apart from what they compute (block.c): their
 * tensors, FLOPs, and the layouts of their caches and work spaces.  The
 * kinds' descriptions (and so mode-exp plan and the analysis) link this
 * file alone. */
#include "core/model/block.h"

#include "core/kernels/attention.h"
#include "core/util/pool.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void attn_cache_lay(buf_plan *p, attn_cache *c, const model_dims *dims, int cap_rows,
                           bool kv)
{
    size_t rd = (size_t)cap_rows * dims->d_model;
    c->cap_rows = cap_rows;
    c->u = BUF_FLOATS(p, rd);
    c->rstd = BUF_FLOATS(p, cap_rows);
    c->q = BUF_FLOATS(p, rd);
    c->k = kv ? BUF_FLOATS(p, rd) : NULL;
    c->v = kv ? BUF_FLOATS(p, rd) : NULL;
    c->att = BUF_FLOATS(p, rd);
    c->lse = BUF_FLOATS(p, (size_t)cap_rows * dims->n_heads);
    c->dk_read = c->dv_read = NULL;
    c->dkv_first = false;
}

void attn_cache_layout(buf_plan *p, attn_cache *c, const model_dims *dims, int cap_rows)
{
    attn_cache_lay(p, c, dims, cap_rows, true);
}

void attn_cache_layout_reader(buf_plan *p, attn_cache *c, const model_dims *dims, int cap_rows)
{
    attn_cache_lay(p, c, dims, cap_rows, false);
}

void ffn_cache_layout(buf_plan *p, ffn_cache *c, int cap_rows, int f)
{
    size_t rf = (size_t)cap_rows * f;
    c->cap_rows = cap_rows;
    c->f = f;
    /* f = 0: no SwiGLU (an mlp_cache that holds the norm only) */
    c->a1 = rf ? BUF_FLOATS(p, rf) : NULL;
    c->a3 = rf ? BUF_FLOATS(p, rf) : NULL;
    c->g = rf ? BUF_FLOATS(p, rf) : NULL;
}

void mlp_cache_layout(buf_plan *p, mlp_cache *c, const model_dims *dims, int cap_rows, int f)
{
    c->m = BUF_FLOATS(p, (size_t)cap_rows * dims->d_model);
    c->rstd = BUF_FLOATS(p, cap_rows);
    ffn_cache_layout(p, &c->ffn, cap_rows, f);
}

int build_attn_cache(attn_cache *c, const model_dims *dims, int cap_rows)
{
    memset(c, 0, sizeof(*c));
    buf_plan p = buf_counting(BUF_ALIGN);
    attn_cache_layout(&p, c, dims, cap_rows);
    if (buf_alloc(&p, &c->block))
        return -ENOMEM;
    attn_cache_layout(&p, c, dims, cap_rows);
    return 0;
}

void free_attn_cache(attn_cache *c)
{
    free(c->block);
    memset(c, 0, sizeof(*c));
}

int build_ffn_cache(ffn_cache *c, int cap_rows, int f)
{
    memset(c, 0, sizeof(*c));
    buf_plan p = buf_counting(BUF_ALIGN);
    ffn_cache_layout(&p, c, cap_rows, f);
    if (buf_alloc(&p, &c->block))
        return -ENOMEM;
    ffn_cache_layout(&p, c, cap_rows, f);
    return 0;
}

void free_ffn_cache(ffn_cache *c)
{
    free(c->block);
    memset(c, 0, sizeof(*c));
}

int build_mlp_cache(mlp_cache *c, const model_dims *dims, int cap_rows, int f)
{
    memset(c, 0, sizeof(*c));
    buf_plan p = buf_counting(BUF_ALIGN);
    mlp_cache_layout(&p, c, dims, cap_rows, f);
    if (buf_alloc(&p, &c->block))
        return -ENOMEM;
    mlp_cache_layout(&p, c, dims, cap_rows, f);
    return 0;
}

void free_mlp_cache(mlp_cache *c)
{
    free(c->block);
    memset(c, 0, sizeof(*c));
}

int block_tensors(tensor_desc *out, const model_dims *dims, bool with_mlp)
{
    int d = dims->d_model, f = dims->d_ff;
    /* MODEL.md "Init": N(0, 0.02), the output projections N(0, 0.02/sqrt(2L)). */
    float out_std = 0.02f / sqrtf(2.0f * (float)dims->n_layers);
    tensor_desc t[BLOCK_TENSORS] = {
        make_tensor_desc("attn_norm", 1, d, 0, 0, INIT_ONES, 0.0f),
        make_tensor_desc("wq", 2, d, d, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("wk", 2, d, d, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("wv", 2, d, d, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("wo", 2, d, d, 0, INIT_NORMAL, out_std),
        make_tensor_desc("mlp_norm", 1, d, 0, 0, INIT_ONES, 0.0f),
        make_tensor_desc("w1", 2, d, f, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("w3", 2, d, f, 0, INIT_NORMAL, 0.02f),
        make_tensor_desc("w2", 2, f, d, 0, INIT_NORMAL, out_std),
    };
    int count = with_mlp ? BLOCK_TENSORS : BLOCK_ATTN_TENSORS;
    if (out)
        memcpy(out, t, (size_t)count * sizeof(tensor_desc));
    return count;
}

attn_weights attn_weights_at(float *const *t)
{
    attn_weights w = { .norm = t[0], .wq = t[1], .wk = t[2], .wv = t[3], .wo = t[4] };
    return w;
}

ffn_weights ffn_weights_at(float *const *t)
{
    ffn_weights w = { .w1 = t[0], .w3 = t[1], .w2 = t[2] };
    return w;
}

void attn_ws_layout(buf_plan *p, attn_ws *w, const model_dims *dims, int n, int max_seq_rows)
{
    size_t nd = (size_t)n * dims->d_model;
    w->datt = BUF_FLOATS(p, nd);
    w->dq = BUF_FLOATS(p, nd);
    w->dk = BUF_FLOATS(p, nd);
    w->dv = BUF_FLOATS(p, nd);
    w->scratch_floats = attention_scratch_floats(max_seq_rows, dims->d_head);
    w->scratch = BUF_FLOATS(p, POOL_MAX_THREADS * w->scratch_floats);
}

void ffn_ws_layout(buf_plan *p, ffn_ws *w, int n, int f)
{
    size_t nf = (size_t)n * f;
    w->dg = BUF_FLOATS(p, nf);
    w->da1 = BUF_FLOATS(p, nf);
    w->da3 = BUF_FLOATS(p, nf);
}

void mlp_ws_layout(buf_plan *p, mlp_ws *w, const model_dims *dims, int n, int f)
{
    w->dm = BUF_FLOATS(p, (size_t)n * dims->d_model);
    ffn_ws_layout(p, &w->ffn, n, f);
}

long attn_ws_floats(const model_dims *dims, int n, int max_seq_rows)
{
    /* backward: its layout; forward: one (smaller) scratch per thread */
    attn_ws w;
    buf_plan p = buf_counting(sizeof(float));
    attn_ws_layout(&p, &w, dims, n, max_seq_rows);
    long bwd = (long)(p.used / sizeof(float));
    long fwd = POOL_MAX_THREADS * attention_fwd_scratch_floats(dims->seq_len, dims->d_head);
    return bwd > fwd ? bwd : fwd;
}

long mlp_ws_floats(const model_dims *dims, int n, int f)
{
    mlp_ws w;
    buf_plan p = buf_counting(sizeof(float));
    mlp_ws_layout(&p, &w, dims, n, f);
    return (long)(p.used / sizeof(float));
}

double attn_flops_rows(const model_dims *dims, long n, long sum_sq_seq_rows)
{
    double d = dims->d_model;
    /* Wq Wk Wv Wo: 4 (n x d x d); QK^T and PV over all heads: 2 (n_s^2 d) */
    return 2.0 * (4.0 * (double)n * d * d + 2.0 * (double)sum_sq_seq_rows * d);
}

double ffn_flops_rows(int d, int f, long n)
{
    return 2.0 * 3.0 * (double)n * d * f;
}
