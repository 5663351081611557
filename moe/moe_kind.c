/* The `moe` and `integrated` kinds' description (their compute: moe.c). */
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

experts_cfg moe_cfg_of(const layer_spec *s, const layer_kind *k, const model_dims *dims)
{
    if (k == &ec_kind)
        return ec_cfg_of((const ec_params *)(const void *)s->params, dims);
    experts_cfg c = experts_cfg_of(&moe_params_of(s)->experts, dims, k == &integrated_kind);
    if (k == &integrated_kind)
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

static int tensors_of(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max,
                      const layer_kind *k)
{
    /* attn_norm wq wk wv wo, mlp_norm, then the gate (learned router) and
     * the experts */
    experts_cfg c = moe_cfg_of(s, k, dims);
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
    return tensors_of(s, dims, out, max, &moe_kind);
}

static int integrated_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out,
                              int max)
{
    return tensors_of(s, dims, out, max, &integrated_kind);
}

static double bytes_of(const layer_spec *spec, const model_dims *dims, int max_seq,
                       const layer_kind *k)
{
    long rows = (long)max_seq * dims->seq_len;
    experts_cfg c = moe_cfg_of(spec, k, dims);
    moe_state s;
    buf_plan p = buf_counting(BUF_ALIGN);
    moe_layout(&p, &s, dims, max_seq);
    /* and the experts on every row */
    return (double)p.used + experts_bytes(&c, dims, rows);
}

static double moe_state_bytes(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    return bytes_of(spec, dims, max_seq, &moe_kind);
}

static double integrated_state_bytes(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    return bytes_of(spec, dims, max_seq, &integrated_kind);
}

static long moe_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    moe_ws w;
    buf_plan p = buf_counting(sizeof(float));
    moe_ws_layout(&p, &w, dims, max_seq * dims->seq_len);
    return (long)(p.used / sizeof(float));
}

static double flops_of(const layer_spec *spec, const model_dims *dims, const layer_kind *k)
{
    long S = dims->seq_len;
    experts_cfg c = moe_cfg_of(spec, k, dims);
    return attn_flops_rows(dims, S, S * S) + experts_flops(&c, dims, S);
}

static double moe_flops(const layer_spec *spec, const model_dims *dims)
{
    return flops_of(spec, dims, &moe_kind);
}

static double integrated_flops(const layer_spec *spec, const model_dims *dims)
{
    return flops_of(spec, dims, &integrated_kind);
}

const layer_kind moe_kind = {
    .name = "moe",
    .groups = moe_groups,
    .validate = moe_validate,
    .tensors = moe_tensors,
    .flops = moe_flops,
    .state_bytes = moe_state_bytes,
    .ws_floats = moe_ws_floats,
    .decides = { DECIDES_EXPERTS, .experts_key = "experts", .split_key = "granularity" },
};

const layer_kind integrated_kind = {
    .name = "integrated",
    .groups = integrated_groups,
    .validate = integrated_validate,
    .tensors = integrated_tensors,
    .flops = integrated_flops,
    .state_bytes = integrated_state_bytes,
    .ws_floats = moe_ws_floats,
    .decides = { DECIDES_EXPERTS, .experts_key = "experts", .split_key = "granularity" },
};

/* ---- ec: expert-choice experts (docs/kinds/ec.md) ----------------------- */

_Static_assert(sizeof(ec_params) <= MODE_PARAMS_BYTES, "ec's keys fit a layer_spec");

static const kind_group ec_groups[] = {
    { &ec_group, 0 },
    { NULL, 0 },
};

static int ec_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    return tensors_of(s, dims, out, max, &ec_kind);
}

static double ec_state_bytes(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    return bytes_of(spec, dims, max_seq, &ec_kind);
}

static double ec_flops(const layer_spec *spec, const model_dims *dims)
{
    return flops_of(spec, dims, &ec_kind);
}

const layer_kind ec_kind = {
    .name = "ec",
    .groups = ec_groups,
    .tensors = ec_tensors,
    .flops = ec_flops,
    .state_bytes = ec_state_bytes,
    .ws_floats = moe_ws_floats,
    .decides = { DECIDES_EXPERTS, .experts_key = "experts" },
};
