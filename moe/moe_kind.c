/* The `moe` and `integrated` kinds' description (their compute: moe.c); the
 * functions of every kind on the experts, which ec_kind.c shares. */
#include "moe/moe.h"
#include "moe/moe_state.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(moe_params) <= MODE_PARAMS_BYTES, "moe's keys fit a layer_spec");

static const kind_group moe_groups[] = {
    { &experts_group, offsetof(moe_params, experts) },
    { NULL, 0 },
};

static const kind_key integrated_keys[] = {
    { "noop_bias", KEY_REAL, 0, "0", -1e6, 1e6, 0, NULL,
      "b, added to the no-op column's score for the top-k choice only (no weight, no loss): "
      "a dial of evaluation and sampling, higher sends more tokens past the experts; 0: "
      "MODEL.md", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};

static const key_group integrated_group = {
    .section = "integrated", .keys = integrated_keys, .size = sizeof(double), .check = NULL,
};

static const kind_group integrated_groups[] = {
    { &experts_group, offsetof(moe_params, experts) },
    { &integrated_group, offsetof(moe_params, noop_bias) },
    { NULL, 0 },
};

void moe_layout(buf_plan *p, moe_state *s, const model_dims *dims, int max_seq)
{
    int S = dims->seq_len, rows = max_seq * S, d = dims->d_model;
    s->h = BUF_FLOATS(p, (size_t)rows * d);
    s->m = BUF_FLOATS(p, (size_t)rows * d);
    s->rstd = BUF_FLOATS(p, rows);
    s->seq_start = BUF_INTS(p, max_seq + 1);
    s->pos = BUF_I32(p, rows);
    s->dec = BUF_FLOATS(p, 3 * (size_t)d);
    attn_cache_layout(p, &s->attn, dims, rows);
}

void moe_ws_layout(buf_plan *p, moe_ws *w, const model_dims *dims, int rows)
{
    size_t nd = (size_t)rows * dims->d_model;
    w->dh = BUF_FLOATS(p, nd);
    w->dm = BUF_FLOATS(p, nd);
    w->sub = BUF_FLOATS(p, attn_ws_floats(dims, rows, dims->seq_len));
}

experts_cfg moe_cfg(const layer_spec *s, const model_dims *dims)
{
    return experts_cfg_of(&moe_params_of(s)->experts, dims, false);
}

experts_cfg integrated_cfg(const layer_spec *s, const model_dims *dims)
{
    experts_cfg c = experts_cfg_of(&moe_params_of(s)->experts, dims, true);
    c.noop_bias = moe_params_of(s)->noop_bias;
    return c;
}

static int validate_of(const layer_spec *s, const model_dims *dims, bool noop, char *err,
                       int err_len)
{
    return experts_validate(&moe_params_of(s)->experts, noop, dims->d_ff, err, err_len);
}

static int moe_validate(const layer_spec *s, const model_dims *dims, char *err, int err_len)
{
    return validate_of(s, dims, false, err, err_len);
}

static int integrated_validate(const layer_spec *s, const model_dims *dims, char *err, int err_len)
{
    return validate_of(s, dims, true, err, err_len);
}

int moe_tensors_of(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max,
                   moe_cfg_fn cfg)
{
    /* attn_norm wq wk wv wo, mlp_norm, then the gate (learned router) and
     * the experts */
    experts_cfg c = cfg(s, dims);
    int n = BLOCK_ATTN_TENSORS + 1 + experts_tensors(NULL, &c, dims);
    if (!out)
        return n;
    if (max < n)
        return -EINVAL;
    tensor_desc block[BLOCK_TENSORS];
    block_tensors(block, dims, true);
    memcpy(out, block, (BLOCK_ATTN_TENSORS + 1) * sizeof(tensor_desc));
    experts_tensors(out + BLOCK_ATTN_TENSORS + 1, &c, dims);
    return n;
}

static int moe_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    return moe_tensors_of(s, dims, out, max, moe_cfg);
}

static int integrated_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out,
                              int max)
{
    return moe_tensors_of(s, dims, out, max, integrated_cfg);
}

double moe_state_bytes_of(const layer_spec *spec, const model_dims *dims, int max_seq,
                          moe_cfg_fn cfg)
{
    long rows = (long)max_seq * dims->seq_len;
    experts_cfg c = cfg(spec, dims);
    moe_state s;
    buf_plan p = buf_counting(BUF_ALIGN);
    moe_layout(&p, &s, dims, max_seq);
    /* and the experts on every row */
    return (double)p.used + experts_bytes(&c, dims, rows);
}

static double moe_state_bytes(const layer_spec *spec, const model_dims *dims, int li,
                              int max_seq)
{
    return moe_state_bytes_of(spec, dims, max_seq, moe_cfg);
}

static double integrated_state_bytes(const layer_spec *spec, const model_dims *dims, int li,
                                     int max_seq)
{
    return moe_state_bytes_of(spec, dims, max_seq, integrated_cfg);
}

long moe_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    moe_ws w;
    buf_plan p = buf_counting(sizeof(float));
    moe_ws_layout(&p, &w, dims, max_seq * dims->seq_len);
    return (long)(p.used / sizeof(float));
}

double moe_flops_of(const layer_spec *spec, const model_dims *dims, moe_cfg_fn cfg)
{
    long S = dims->seq_len;
    experts_cfg c = cfg(spec, dims);
    return attn_flops_rows(dims, S, S * S) + experts_flops(&c, dims, S);
}

static double moe_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    return moe_flops_of(spec, dims, moe_cfg);
}

static double integrated_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    return moe_flops_of(spec, dims, integrated_cfg);
}

const layer_kind moe_kind = {
    .name = "moe",
    .groups = moe_groups,
    .validate = moe_validate,
    .tensors = moe_tensors,
    .flops = moe_flops,
    .state_bytes = moe_state_bytes,
    .ws_floats = moe_ws_floats,
    .decides = { .decides = DECIDES_EXPERTS, .experts_key = "experts",
                 .split_key = "granularity" },
};

const layer_kind integrated_kind = {
    .name = "integrated",
    .groups = integrated_groups,
    .validate = integrated_validate,
    .tensors = integrated_tensors,
    .flops = integrated_flops,
    .state_bytes = integrated_state_bytes,
    .ws_floats = moe_ws_floats,
    .decides = { .decides = DECIDES_EXPERTS, .experts_key = "experts",
                 .split_key = "granularity" },
};
