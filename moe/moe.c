#include "moe/moe.h"

#include "core/kernels/ops.h"
#include "core/kernels/parallel.h"
#include "core/model/block.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct moe_state {
    experts_cfg ec;
    attn_cache attn;
    float *h;          /* [rows][d] x + Attn(x) */
    float *m, *rstd;   /* [rows][d], [rows]: RMSNorm_mlp(h) */
    int *seq_start;    /* [max_seq+1] */
    int32_t *pos;      /* [rows] */
    experts *x;
    int nseq;
    kv_cache kv;       /* decoding */
    float *dec;        /* [3d] */
} moe_state;

static const char *const moe_keys[] = { "experts", "top_k", "capacity_factor", "d_ff",
                                        "balance_weight", "z_weight", NULL };

experts_cfg moe_experts_cfg(const layer_spec *s, const model_dims *dims, bool noop)
{
    experts_cfg c = {
        .experts = s->experts, .noop = noop, .top_k = s->top_k,
        .capacity_factor = s->capacity_factor,
        .d_ff = s->expert_d_ff > 0 ? s->expert_d_ff : dims->d_ff,
        .balance_weight = s->balance_weight, .z_weight = s->z_weight,
    };
    return c;
}

int moe_validate_experts(const layer_spec *s, bool noop, char *err, int err_len)
{
    int N = s->experts + (noop ? 1 : 0);
    if (s->experts < 1 || s->experts > MOE_MAX_EXPERTS)
        snprintf(err, (size_t)err_len, "experts %d: expected 1 to %d", s->experts,
                 MOE_MAX_EXPERTS);
    else if (s->top_k < 1 || s->top_k > N)
        snprintf(err, (size_t)err_len, "top_k %d: expected 1 to %d (the gate's columns)", s->top_k,
                 N);
    else if (s->capacity_factor < 0.0)
        snprintf(err, (size_t)err_len, "capacity_factor %g: expected >= 0 (0: no dropping)",
                 s->capacity_factor);
    else
        return 0;
    return -EINVAL;
}

static bool is_integrated(const layer *l)
{
    return l->kind == &integrated_kind;
}

static int moe_validate(const layer_spec *s, const model_dims *dims, char *err, int err_len)
{
    return moe_validate_experts(s, false, err, err_len);
}

static int integrated_validate(const layer_spec *s, const model_dims *dims, char *err, int err_len)
{
    return moe_validate_experts(s, true, err, err_len);
}

static int tensors_of(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max,
                      bool noop)
{
    /* attn_norm wq wk wv wo, mlp_norm, then the gate and the experts */
    int n = BLOCK_ATTN_TENSORS + 1 + EXPERTS_TENSORS;
    if (!out)
        return n;
    if (max < n)
        return -EINVAL;
    tensor_desc block[BLOCK_TENSORS];
    block_tensors(block, dims, true);
    memcpy(out, block, (BLOCK_ATTN_TENSORS + 1) * sizeof(tensor_desc));
    experts_cfg c = moe_experts_cfg(s, dims, noop);
    experts_tensors(out + BLOCK_ATTN_TENSORS + 1, &c, dims);
    return n;
}

static int moe_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    return tensors_of(s, dims, out, max, false);
}

static int integrated_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out,
                              int max)
{
    return tensors_of(s, dims, out, max, true);
}

enum { T_MLP_NORM = BLOCK_ATTN_TENSORS, T_GATE = BLOCK_ATTN_TENSORS + 1 };

static void moe_free(layer *l)
{
    moe_state *s = l->state;
    if (!s)
        return;
    free_attn_cache(&s->attn);
    free(s->h);
    free(s->m);
    free(s->rstd);
    free(s->seq_start);
    free(s->pos);
    free_experts(&s->x);
    free_kv_cache(&s->kv);
    free(s->dec);
    free(s);
    l->state = NULL;
}

static int moe_build(layer *l, const model_dims *dims, int max_seq)
{
    int S = dims->seq_len, rows = max_seq * S, d = dims->d_model;
    moe_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    s->ec = moe_experts_cfg(&l->spec, dims, is_integrated(l));
    s->h = malloc((size_t)rows * d * sizeof(float));
    s->m = malloc((size_t)rows * d * sizeof(float));
    s->rstd = malloc((size_t)rows * sizeof(float));
    s->seq_start = malloc((size_t)(max_seq + 1) * sizeof(int));
    s->pos = malloc((size_t)rows * sizeof(int32_t));
    s->dec = malloc(3 * (size_t)d * sizeof(float));
    if (!s->h || !s->m || !s->rstd || !s->seq_start || !s->pos || !s->dec ||
        build_attn_cache(&s->attn, dims, rows) ||
        build_experts(&s->x, &s->ec, dims)) {
        moe_free(l);
        return -ENOMEM;
    }
    row_set_fill_whole(s->seq_start, s->pos, max_seq, S);
    return 0;
}

static double moe_state_bytes(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    long rows = (long)max_seq * dims->seq_len;
    experts_cfg c = moe_experts_cfg(spec, dims, !strcmp(spec->kind, "integrated"));
    /* h m [rows][d], rstd pos [rows], seq_start, decoding's 3d; attention's
     * cache; the experts on every row */
    return 4.0 * ((double)rows * (2.0 * dims->d_model + 2.0) + max_seq + 1.0 +
                  3.0 * dims->d_model) +
           attn_cache_bytes(dims, rows) + experts_bytes(&c, dims, rows);
}

static long moe_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    int rows = max_seq * dims->seq_len;
    /* dh and dm, then attention's share (the experts keep their own) */
    return 2L * rows * dims->d_model + attn_ws_floats(dims, rows, dims->seq_len);
}

static int moe_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    moe_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    row_set rs = { .n = n, .nseq = a->nseq, .seq_start = s->seq_start, .pos = s->pos };
    attn_weights aw = attn_weights_at(l->w);
    attn_forward(&s->attn, s->h, x, &rs, &aw, a);
    double t0 = mode_now();
    rmsnorm_forward_pool(a->pool, s->m, s->rstd, s->h, l->w[T_MLP_NORM], n, d);
    memcpy(y, s->h, (size_t)n * d * sizeof(float));
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    s->nseq = a->nseq;
    if (a->flops_executed)
        *a->flops_executed += a->nseq * attn_flops_rows(dm, a->seq_len, (long)a->seq_len * a->seq_len);
    return experts_forward(s->x, a, y, s->m, &rs, l->w + T_GATE,
                           experts_capacity(&s->ec, a->seq_len));
}

static int moe_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    moe_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    size_t nd = (size_t)n * d;
    row_set rs = { .n = n, .nseq = a->nseq, .seq_start = s->seq_start, .pos = s->pos };
    float *dh = a->ws, *dmm = a->ws + nd;
    memcpy(dh, dy, nd * sizeof(float)); /* the residual path around the experts */
    memset(dmm, 0, nd * sizeof(float));
    int rc = experts_backward(s->x, a, dmm, dy, s->m, &rs, l->w + T_GATE, l->dw + T_GATE);
    if (rc)
        return rc;
    double t0 = mode_now();
    rmsnorm_backward_pool(a->pool, dh, l->dw[T_MLP_NORM], dmm, s->h, l->w[T_MLP_NORM], s->rstd,
                          n, d);
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    attn_weights aw = attn_weights_at(l->w), daw = attn_weights_at(l->dw);
    attn_backward(dx, &daw, dh, x, &s->attn, &rs, &aw, a, a->ws + 2 * nd);
    return 0;
}

static double moe_flops(const layer_spec *spec, const model_dims *dims, bool noop)
{
    long S = dims->seq_len;
    experts_cfg c = moe_experts_cfg(spec, dims, noop);
    return attn_flops_rows(dims, S, S * S) + experts_flops(&c, dims, S);
}

static double moe_flops_plain(const layer_spec *spec, const model_dims *dims)
{
    return moe_flops(spec, dims, false);
}

static double integrated_flops(const layer_spec *spec, const model_dims *dims)
{
    return moe_flops(spec, dims, true);
}

static int moe_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    moe_state *s = l->state;
    experts_decode_reset(s->x);
    return kv_cache_begin(&s->kv, dims, max_len);
}

static int moe_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    moe_state *s = l->state;
    int d = a->dims->d_model;
    float *h = s->dec, *m = h + d, rstd;
    attn_weights aw = attn_weights_at(l->w);
    int rc = attn_decode(&s->kv, h, x, pos, &aw, a);
    if (rc)
        return rc;
    rmsnorm_forward(m, &rstd, h, l->w[T_MLP_NORM], 1, d);
    memcpy(y, h, (size_t)d * sizeof(float));
    int first = experts_decode(s->x, a, y, m, l->w + T_GATE, experts_capacity(&s->ec, a->seq_len));
    if (first < 0)
        return first;
    /* "took the block": the first choice is a real expert (always, for moe) */
    return first < s->ec.experts ? 1 : 0;
}

static int moe_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const moe_state *s = l->state;
    unsigned long long dims[3] = { (unsigned long long)a->nseq, (unsigned long long)a->seq_len,
                                   (unsigned long long)s->ec.top_k };
    int rc = sink->put(sink, "experts", RECORD_INT32, 3, dims, experts_choices(s->x));
    if (!rc)
        rc = sink->put(sink, "weights", RECORD_FLOAT, 3, dims, experts_weights(s->x));
    return rc;
}

static int moe_stat_count(const layer *l, int *n_sums)
{
    const moe_state *s = l->state;
    *n_sums = experts_stat_sums_count(&s->ec);
    return experts_stat_cols_count(&s->ec);
}

static void moe_stat_name(const layer *l, int col, char *buf, int len)
{
    const moe_state *s = l->state;
    experts_stat_name(&s->ec, col, buf, len);
}

static void moe_stat_sums(const layer *l, double *sums)
{
    const moe_state *s = l->state;
    experts_stat_sums(s->x, sums);
}

static void moe_stat_columns(const layer *l, const double *sums, double *cols)
{
    const moe_state *s = l->state;
    experts_stat_columns(&s->ec, sums, cols);
}

#define MOE_ROW(NAME, VALIDATE, TENSORS, FLOPS)                                                    \
    {                                                                                              \
        .name = NAME, .keys = moe_keys, .validate = VALIDATE, .tensors = TENSORS,                 \
        .build = moe_build, .free = moe_free, .ws_floats = moe_ws_floats,                       \
        .state_bytes = moe_state_bytes, .forward = moe_forward,                                \
        .backward = moe_backward, .flops = FLOPS, .decode_begin = moe_decode_begin,               \
        .decode = moe_decode, .record = moe_record, .stat_count = moe_stat_count,                 \
        .stat_name = moe_stat_name, .stat_sums = moe_stat_sums, .stat_columns = moe_stat_columns, \
    }

const layer_kind moe_kind = MOE_ROW("moe", moe_validate, moe_tensors, moe_flops_plain);
const layer_kind integrated_kind =
    MOE_ROW("integrated", integrated_validate, integrated_tensors, integrated_flops);
