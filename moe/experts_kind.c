/* What the experts are, apart from what they compute (experts.c): the [moe]
 * keys, the configuration they give, the tensors, FLOPs and the layouts of
 * the buffers.  The kinds' descriptions link this file alone. */
#include "moe/experts_kind.h"
#include "moe/experts_state.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* top_k against experts (a kind may refine it: integrated's no-op column). */
static int experts_check(const void *values, key_problem *p)
{
    const experts_params *e = values;
    if (e->top_k <= e->experts)
        return 0;
    *p = (key_problem){ .key = "top_k", .rel = " to be at most ", .other = "experts", .tail = "" };
    return -EINVAL;
}

static const char *const router_names[] = { [MOE_ROUTER_LEARNED] = "learned",
                                            [MOE_ROUTER_RANDOM] = "random",
                                            [MOE_ROUTER_HASH] = "hash", NULL };
_Static_assert(sizeof(router_names) / sizeof(router_names[0]) == MOE_ROUTER_COUNT + 1,
               "a name each");

#define P(f) offsetof(experts_params, f)
static const kind_key moe_keys[] = {
    { "experts", KEY_INT, P(experts), "8", 1, KEY_NO_MAX, 0, NULL,
      "E, the real experts of a layer (integrated's no-op is not counted); a multiple or a "
      "divisor of the rank count", KEY_SHARDED },
    { "top_k", KEY_INT, P(top_k), "1", 1, KEY_NO_MAX, 0, NULL,
      "experts each token picks by gate probability (token-choice), weights not renormalised", 0 },
    { "capacity_factor", KEY_REAL, P(capacity_factor), "1.25", 0, KEY_NO_MAX, 0, NULL,
      "each expert takes at most ceil(capacity_factor top_k S / E) assignments a sequence, "
      "earlier positions first; 0: no dropping", 0 },
    { "d_ff", KEY_INT, P(d_ff), "0", 0, KEY_NO_MAX, 0, NULL,
      "each expert's hidden width; 0: the model's d_ff", 0 },
    { "balance_weight", KEY_REAL, P(balance_weight), "0.01", 0, KEY_NO_MAX, 0, NULL,
      "weight of the Switch balance loss N sum_e frac_e meanP_e (per sequence)", 0 },
    { "z_weight", KEY_REAL, P(z_weight), "0.001", 0, KEY_NO_MAX, 0, NULL,
      "weight of the z-loss mean(logsumexp(l)^2)", 0 },
    { "router", KEY_CHOICE, P(router), "learned", 0, 0, 0, router_names,
      "learned: the gate l = m W_g; random: N(0,1) logits keyed by seed, step, layer and "
      "token, softmax, top_k (the control); hash: top_k columns a fixed random function of "
      "the token id (Hash Layers), weights 1/top_k; random and hash have no gate tensor and "
      "no balance or z-loss", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

#define Q(f) offsetof(ec_params, f)
static const kind_key ec_keys[] = {
    { "experts", KEY_INT, Q(experts), "8", 1, MOE_MAX_EXPERTS, 0, NULL,
      "E, the experts of a layer; a multiple or a divisor of the rank count", KEY_SHARDED },
    { "capacity_factor", KEY_REAL, Q(capacity_factor), "1", 0, KEY_NO_MAX, KEY_MIN_OPEN, NULL,
      "c (Zhou et al.): each expert takes the max(1, floor(c S / E)) tokens of the sequence of "
      "the highest gate probability, so a token goes to c experts on average", 0 },
    { "d_ff", KEY_INT, Q(d_ff), "0", 0, KEY_NO_MAX, 0, NULL,
      "each expert's hidden width; 0: the model's d_ff", 0 },
    { "aux_weight", KEY_REAL, Q(aux_weight), "0.01", 0, KEY_NO_MAX, 0, NULL,
      "weight of the causal rule's BCE of sigmoid(l_ie) against expert e taking token i; "
      "evaluation's causal mode and sampling send token i to the experts with l_ie > 0", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef Q

const key_group ec_group = {
    .section = "ec", .keys = ec_keys, .size = sizeof(ec_params), .check = NULL,
};

experts_cfg ec_cfg_of(const ec_params *p, const model_dims *dims)
{
    experts_cfg c = {
        .experts = p->experts, .noop = false, .top_k = p->experts,
        .capacity_factor = p->capacity_factor, .d_ff = p->d_ff > 0 ? p->d_ff : dims->d_ff,
        .router = MOE_ROUTER_LEARNED, .expert_choice = true, .aux_weight = p->aux_weight,
    };
    return c;
}

const key_group experts_group = {
    .section = "moe", .keys = moe_keys, .size = sizeof(experts_params), .check = experts_check,
};

experts_cfg experts_cfg_of(const experts_params *p, const model_dims *dims, bool noop)
{
    experts_cfg c = {
        .experts = p->experts, .noop = noop, .top_k = p->top_k,
        .capacity_factor = p->capacity_factor,
        .d_ff = p->d_ff > 0 ? p->d_ff : dims->d_ff,
        .balance_weight = p->balance_weight, .z_weight = p->z_weight, .router = p->router,
    };
    return c;
}

int experts_validate(const experts_params *p, bool noop, char *err, int err_len)
{
    int N = p->experts + (noop ? 1 : 0);
    if (p->experts < 1 || p->experts > MOE_MAX_EXPERTS)
        snprintf(err, (size_t)err_len, "experts %d: expected 1 to %d", p->experts,
                 MOE_MAX_EXPERTS);
    else if (p->top_k < 1 || p->top_k > N)
        snprintf(err, (size_t)err_len, "top_k %d: expected 1 to %d (the gate's columns)", p->top_k,
                 N);
    else if (p->capacity_factor < 0.0)
        snprintf(err, (size_t)err_len, "capacity_factor %g: expected >= 0 (0: no dropping)",
                 p->capacity_factor);
    else
        return 0;
    return -EINVAL;
}

int experts_stat_sums_count(const experts_cfg *c)
{
    return experts_columns(c) + 6; /* kept per column, dropped, balance, z, entropy, tokens, seqs */
}

int experts_stat_cols_count(const experts_cfg *c)
{
    return experts_columns(c) + 4;
}

int experts_capacity(const experts_cfg *c, int rows_per_seq)
{
    if (c->expert_choice) {
        int C = (int)floor(c->capacity_factor * rows_per_seq / c->experts);
        return C < 1 ? 1 : C > rows_per_seq ? rows_per_seq : C;
    }
    if (c->capacity_factor <= 0.0)
        return INT32_MAX;
    return (int)ceil(c->capacity_factor * c->top_k * rows_per_seq / c->experts);
}

double experts_flops(const experts_cfg *c, const model_dims *dims, long rows)
{
    double d = dims->d_model;
    double gate = c->router == MOE_ROUTER_LEARNED ? 2.0 * rows * d * experts_columns(c) : 0.0;
    if (c->expert_choice) /* every expert its capacity's tokens */
        return gate + (double)c->experts * experts_capacity(c, (int)rows) * 6.0 * d * c->d_ff;
    return gate + (double)rows * c->top_k * 6.0 * d * c->d_ff;
}

int experts_tensors(tensor_desc *out, const experts_cfg *c, const model_dims *dims)
{
    int g = c->router == MOE_ROUTER_LEARNED ? 1 : 0;
    if (!out)
        return g + 3;
    int d = dims->d_model, f = c->d_ff, E = c->experts;
    float out_std = 0.02f / sqrtf(2.0f * (float)dims->n_layers);
    if (g)
        out[0] = make_tensor_desc("gate", 2, d, experts_columns(c), 0, INIT_NORMAL, 0.02f);
    out[g + 0] = make_tensor_desc("experts_w1", 3, E, d, f, INIT_NORMAL, 0.02f);
    out[g + 1] = make_tensor_desc("experts_w3", 3, E, d, f, INIT_NORMAL, 0.02f);
    out[g + 2] = make_tensor_desc("experts_w2", 3, E, f, d, INIT_NORMAL, out_std);
    for (int i = g; i < g + 3; i++)
        out[i].expert_dim = true;
    return g + 3;
}

void experts_init(experts *ex, const experts_cfg *c, const model_dims *dims)
{
    memset(ex, 0, sizeof(*ex));
    ex->c = *c;
    ex->d = dims->d_model;
    ex->N = experts_columns(c);
    ex->S = dims->seq_len;
    ex->ranks = dims->ranks > 1 ? dims->ranks : 1;
    ex->rank = dims->ranks > 1 ? dims->rank : 0;
    ex->first = experts_first(c->experts, ex->ranks, ex->rank);
    ex->local = experts_local(c->experts, ex->ranks);
}

void experts_fixed_layout(buf_plan *p, experts *ex)
{
    int N = ex->N, K = ex->c.top_k;
    ex->exp_start = BUF_INTS(p, ex->local + 1);
    ex->at = BUF_INTS(p, ex->c.experts + 1);
    ex->cache = buf_take(p, (size_t)ex->local, sizeof(ffn_cache));
    ex->sums = BUF_DOUBLES(p, experts_stat_sums_count(&ex->c));
    ex->count = BUF_INTS(p, N);
    ex->dec_counts = BUF_INTS(p, N);
    ex->dec = BUF_FLOATS(p, N + ex->d);
    ex->dec_col = BUF_I32(p, K);
    ex->dec_weight = BUF_FLOATS(p, K);
    ex->used = BUF_BYTES(p, N);
    ex->perm_scratch = BUF_INTS(p, N);
    ex->ec_scores = BUF_FLOATS(p, ex->S);
    ex->ec_z = BUF_BYTES(p, ex->S);
    ex->ec_heap = BUF_INTS(p, ex->S);
}

void experts_rows_layout(buf_plan *p, experts *ex, int rows)
{
    size_t n = (size_t)rows;
    int N = ex->N, K = ex->c.top_k;
    ex->probs = BUF_FLOATS(p, n * N);
    ex->lse = BUF_FLOATS(p, n);
    ex->col = BUF_I32(p, n * K);
    ex->choice = BUF_I32(p, n * K);
    ex->weight = BUF_FLOATS(p, n * K);
    ex->dp = BUF_FLOATS(p, n * N);
}

void experts_assign_layout(buf_plan *p, experts *ex, int n)
{
    size_t d = (size_t)ex->d;
    ex->a_row = BUF_INTS(p, n);
    ex->a_slot = BUF_INTS(p, n);
    ex->send = BUF_FLOATS(p, (size_t)n * (d + 1));
    ex->outs = BUF_FLOATS(p, (size_t)n * d);
    ex->grads = BUF_FLOATS(p, (size_t)n * d);
}

void experts_recv_layout(buf_plan *p, experts *ex, int n)
{
    size_t d = (size_t)ex->d;
    ex->recv = BUF_FLOATS(p, (size_t)n * (d + 1));
    ex->xin = BUF_FLOATS(p, (size_t)n * d);
    ex->yout = BUF_FLOATS(p, (size_t)n * d);
    ex->back = BUF_FLOATS(p, (size_t)n * d);
    ex->perm = BUF_INTS(p, n);
}

void experts_ws_layout(buf_plan *p, experts_ws *w, const experts *ex, int cnt)
{
    ffn_ws f;
    buf_plan q = buf_counting(sizeof(float));
    ffn_ws_layout(&q, &f, cnt, ex->c.d_ff);
    w->ffn = BUF_FLOATS(p, q.used / sizeof(float));
    w->dxin = BUF_FLOATS(p, (size_t)cnt * ex->d);
}

double experts_bytes(const experts_cfg *c, const model_dims *dims, long rows)
{
    experts ex;
    experts_init(&ex, c, dims);
    int L = ex.local;
    /* every assignment to a real expert kept, and this rank receiving as
     * many rows as it sends (balanced routing), spread evenly over its
     * experts: their SwiGLU caches, and the busiest one's backward work */
    long assign = rows * c->top_k, per_expert = assign / L;
    buf_plan p = buf_counting(BUF_ALIGN);
    experts_fixed_layout(&p, &ex);
    experts_rows_layout(&p, &ex, (int)rows);
    experts_assign_layout(&p, &ex, (int)assign);
    experts_recv_layout(&p, &ex, (int)assign);
    ffn_cache fc;
    for (int e = 0; e < L; e++)
        ffn_cache_layout(&p, &fc, (int)per_expert, c->d_ff);
    ffn_cache_layout(&p, &fc, 1, c->d_ff); /* decoding's one row */
    experts_ws w;
    buf_plan ws = buf_counting(sizeof(float));
    experts_ws_layout(&ws, &w, &ex, (int)per_expert);
    return (double)(p.used + ws.used);
}
