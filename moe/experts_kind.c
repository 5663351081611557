/* What the experts are, apart from what they compute (experts.c): the [moe]
 * keys, the configuration they give, the tensors, FLOPs and the layouts of
 * the buffers.  The kinds' descriptions link this file alone. */
#include "moe/experts_kind.h"
#include "core/util/num.h"
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
static const char *const score_names[] = { [MOE_SCORE_SOFTMAX] = "softmax",
                                           [MOE_SCORE_SIGMOID] = "sigmoid", NULL };
_Static_assert(sizeof(score_names) / sizeof(score_names[0]) == MOE_SCORE_COUNT + 1, "a name each");
static const char *const scope_names[] = { [MOE_SCOPE_SEQUENCE] = "sequence",
                                           [MOE_SCOPE_BATCH] = "batch", NULL };
_Static_assert(sizeof(scope_names) / sizeof(scope_names[0]) == MOE_SCOPE_COUNT + 1, "a name each");

#define P(f) offsetof(experts_params, f)
static const kind_key moe_keys[] = {
    { "experts", KEY_INT, P(experts), "8", 1, KEY_NO_MAX, 0, NULL,
      "E, the real experts of a layer (integrated's no-op is not counted); a multiple or a "
      "divisor of the rank count", KEY_SHARDED },
    { "top_k", KEY_INT, P(top_k), "1", 1, KEY_NO_MAX, 0, NULL,
      "experts each token picks by gate probability (token-choice), weights not renormalised", 0 },
    { "capacity_factor", KEY_REAL, P(capacity_factor), "1.25", 0, KEY_NO_MAX, 0, NULL,
      "each expert takes at most ceil(capacity_factor top_k S / E) assignments a sequence "
      "(one past the tokens there are drops nothing), earlier positions first; 0: no dropping",
      0 },
    { "d_ff", KEY_INT, P(d_ff), "0", 0, MODE_MAX_WIDTH, 0, NULL,
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
    { "score", KEY_CHOICE, P(score), "softmax", 0, 0, 0, score_names,
      "the gate's probabilities: softmax over the columns, or sigmoid of each logit "
      "(DeepSeek-V3); top_k by probability (plus expert_bias)", 0 },
    { "renormalize", KEY_BOOL, P(renormalize), "false", 0, 0, 0, NULL,
      "the chosen columns' weights divided by their sum (with softmax: the softmax after the "
      "top-k, as Mixtral)", 0 },
    { "balance_scope", KEY_CHOICE, P(balance_scope), "sequence", 0, 0, 0, scope_names,
      "the balance loss's load fractions: per sequence, or over the global batch of the step, "
      "summed over ranks (Qwen's global-batch balance)", 0 },
    { "bias_rate", KEY_REAL, P(bias_rate), "0", 0, KEY_NO_MAX, 0, NULL,
      "auxiliary-loss-free balancing (DeepSeek-V3): a per-expert bias added to the "
      "probabilities for the top-k choice only, moved by bias_rate against the sign of each "
      "expert's load error after every step (global batch); 0: off. Learned router only", 0 },
    { "shared_experts", KEY_INT, P(shared_experts), "0", 0, 64, 0, NULL,
      "experts every token goes through beside the routed ones (DeepSeekMoE), each as wide as "
      "a routed expert, weight 1; replicated on every rank", 0 },
    { "granularity", KEY_INT, P(granularity), "1", 1, 64, 0, NULL,
      "m: each expert split into m of d_ff/m, experts and top_k times m: the same active "
      "and total parameters (Krajewski et al. 2024); d_ff must divide by m", 0 },
    { "eval_capacity_factor", KEY_REAL, P(eval_capacity_factor), "-1", -1, KEY_NO_MAX, 0, NULL,
      "the capacity factor of evaluation and sampling; 0: no dropping (dropless evaluation); "
      "-1: capacity_factor's", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

#define Q(f) offsetof(ec_params, f)
static const kind_key ec_keys[] = {
    { "experts", KEY_INT, Q(experts), "8", 1, MOE_MAX_EXPERTS, 0, NULL,
      "E, the experts of a layer; a multiple or a divisor of the rank count", KEY_SHARDED },
    { "capacity_factor", KEY_REAL, Q(capacity_factor), "1", 0, KEY_NO_MAX, KEY_MIN_OPEN, NULL,
      "c (Zhou et al.): each expert takes the max(1, floor(c S / E)) tokens of the sequence of "
      "the highest gate probability (at most S: c >= E takes every token), so a token goes to "
      "c experts on average", 0 },
    { "d_ff", KEY_INT, Q(d_ff), "0", 0, MODE_MAX_WIDTH, 0, NULL,
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
    int m = p->granularity > 0 ? p->granularity : 1;
    experts_cfg c = {
        .experts = p->experts * m, .noop = noop, .top_k = p->top_k * m,
        .capacity_factor = p->capacity_factor,
        .d_ff = (p->d_ff > 0 ? p->d_ff : dims->d_ff) / m,
        .balance_weight = p->balance_weight, .z_weight = p->z_weight, .router = p->router,
        .score = p->score, .renormalize = p->renormalize, .balance_scope = p->balance_scope,
        .bias_rate = p->router == MOE_ROUTER_LEARNED ? p->bias_rate : 0.0,
        .shared = p->shared_experts, .eval_capacity_factor = p->eval_capacity_factor,
    };
    return c;
}

int experts_validate(const experts_params *p, bool noop, int model_d_ff, char *err, int err_len)
{
    int N = p->experts + (noop ? 1 : 0), m = p->granularity > 0 ? p->granularity : 1;
    int f = p->d_ff > 0 ? p->d_ff : model_d_ff;
    if (p->experts < 1 || (long)p->experts * m > MOE_MAX_EXPERTS)
        snprintf(err, (size_t)err_len, "experts %d x granularity %d: expected 1 to %d", p->experts,
                 m, MOE_MAX_EXPERTS);
    else if (f % m)
        snprintf(err, (size_t)err_len,
                 "granularity %d: expected a divisor of the experts' d_ff %d (each expert is "
                 "split into granularity experts of d_ff / granularity)", m, f);
    else if (p->bias_rate > 0.0 && p->router != MOE_ROUTER_LEARNED)
        snprintf(err, (size_t)err_len,
                 "bias_rate %g: expected 0 with router %s (the bias balances a learned gate)",
                 p->bias_rate, router_names[p->router]);
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
    /* kept per column, dropped, balance, z, entropy, tokens, seqs; chosen
     * per real expert; the bias per real expert (times sequences); the
     * shared experts' share (summed over tokens) */
    return experts_columns(c) + 6 + c->experts + (c->bias_rate > 0.0 ? c->experts : 0) +
           (c->shared > 0 ? 1 : 0);
}

int experts_stat_cols_count(const experts_cfg *c)
{
    /* kept per column, dropped, balance, z, entropy; MaxVio; bias per real
     * expert; shared share */
    return experts_columns(c) + 5 + (c->bias_rate > 0.0 ? c->experts : 0) +
           (c->shared > 0 ? 1 : 0);
}

int experts_capacity(const experts_cfg *c, int rows_per_seq)
{
    /* computed in double and clamped before narrowing (num.h), never a
     * product wrapped past 2^31: expert choice takes at most the
     * rows_per_seq tokens there are (c = 1e9 is c = E); token choice's
     * capacity past 2^31 - 1 drops nothing, as one past the rows does
     * (staged's causal rows may outnumber the nominal k, so no tighter) */
    int S = rows_per_seq > 1 ? rows_per_seq : 1;
    if (c->expert_choice)
        return num_floor_int(c->capacity_factor * rows_per_seq / c->experts, 1, S);
    if (c->capacity_factor <= 0.0)
        return INT32_MAX;
    return num_ceil_int(c->capacity_factor * c->top_k * rows_per_seq / c->experts, 1, INT32_MAX);
}

int experts_capacity_in(const experts_cfg *c, int rows_per_seq, int mode)
{
    if (mode == FWD_TRAIN || c->expert_choice || c->eval_capacity_factor < 0.0)
        return experts_capacity(c, rows_per_seq);
    experts_cfg e = *c;
    e.capacity_factor = c->eval_capacity_factor;
    return experts_capacity(&e, rows_per_seq);
}

double experts_flops(const experts_cfg *c, const model_dims *dims, long rows)
{
    double d = dims->d_model;
    double gate = c->router == MOE_ROUTER_LEARNED ? 2.0 * rows * d * experts_columns(c) : 0.0;
    if (c->expert_choice) /* every expert its capacity's tokens */
        return gate + (double)c->experts * experts_capacity(c, (int)rows) * 6.0 * d * c->d_ff;
    return gate + (double)rows * (c->top_k + c->shared) * 6.0 * d * c->d_ff;
}

experts_slots experts_tensor_slots(const experts_cfg *c)
{
    int g = c->router == MOE_ROUTER_LEARNED ? 1 : 0, b = c->bias_rate > 0.0 ? 1 : 0;
    experts_slots s = { .gate = g ? 0 : -1, .w1 = g, .bias = b ? g + 3 : -1,
                        .shared = c->shared > 0 ? g + 3 + b : -1 };
    return s;
}

int experts_tensors(tensor_desc *out, const experts_cfg *c, const model_dims *dims)
{
    experts_slots s = experts_tensor_slots(c);
    int n = s.w1 + 3 + (s.bias >= 0) + (s.shared >= 0 ? 3 : 0);
    if (!out)
        return n;
    int d = dims->d_model, f = c->d_ff, E = c->experts, g = s.w1;
    float out_std = 0.02f / sqrtf(2.0f * (float)dims->n_layers);
    if (s.gate >= 0)
        out[s.gate] = make_tensor_desc("gate", 2, d, experts_columns(c), 0, INIT_NORMAL, 0.02f);
    out[g + 0] = make_tensor_desc("experts_w1", 3, E, d, f, INIT_NORMAL, 0.02f);
    out[g + 1] = make_tensor_desc("experts_w3", 3, E, d, f, INIT_NORMAL, 0.02f);
    out[g + 2] = make_tensor_desc("experts_w2", 3, E, f, d, INIT_NORMAL, out_std);
    for (int i = g; i < g + 3; i++) {
        out[i].expert_dim = true;
        /* upcycling: each expert from the dense MLP's tensor (its slice of
         * the hidden units when narrower) */
        snprintf(out[i].upcycle_from, sizeof(out[i].upcycle_from), "%s", i == g + 0 ? "w1"
                                                                       : i == g + 1 ? "w3"
                                                                                    : "w2");
    }
    if (s.bias >= 0) {
        out[s.bias] = make_tensor_desc("expert_bias", 1, E, 0, 0, INIT_ZEROS, 0.0f);
        out[s.bias].decay = false;
        out[s.bias].no_grad = true; /* experts_step_end moves it */
    }
    if (s.shared >= 0) {
        int sf = c->shared * f;
        out[s.shared + 0] = make_tensor_desc("shared_w1", 2, d, sf, 0, INIT_NORMAL, 0.02f);
        out[s.shared + 1] = make_tensor_desc("shared_w3", 2, d, sf, 0, INIT_NORMAL, 0.02f);
        out[s.shared + 2] = make_tensor_desc("shared_w2", 2, sf, d, 0, INIT_NORMAL, out_std);
        for (int i = 0; i < 3; i++)
            snprintf(out[s.shared + i].upcycle_from, sizeof(out[s.shared + i].upcycle_from), "%s",
                     i == 0 ? "w1" : i == 1 ? "w3" : "w2");
    }
    return n;
}

void experts_init(experts *ex, const experts_cfg *c, const model_dims *dims)
{
    memset(ex, 0, sizeof(*ex));
    ex->c = *c;
    ex->slot = experts_tensor_slots(c);
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
    ex->global = BUF_DOUBLES(p, N + 1);
    ex->load = BUF_DOUBLES(p, ex->c.experts);
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
    ex->logit = BUF_FLOATS(p, n * N);
    ex->dslot = BUF_FLOATS(p, n * K);
    ex->sh_out = ex->c.shared > 0 ? BUF_FLOATS(p, n * ex->d) : NULL;
    ex->sh_rout = ex->c.shared > 0 ? BUF_FLOATS(p, n * ex->d) : NULL;
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
    if (c->shared > 0) { /* every row through the shared experts: cache, backward work */
        ffn_cache_layout(&p, &fc, (int)rows, c->shared * c->d_ff);
        ffn_cache_layout(&p, &fc, 1, c->shared * c->d_ff);
        ffn_ws f;
        ffn_ws_layout(&ws, &f, (int)rows, c->shared * c->d_ff);
        buf_take(&ws, (size_t)rows * dims->d_model, sizeof(float));
    }
    return (double)(p.used + ws.used);
}
