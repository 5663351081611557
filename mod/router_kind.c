/* What the MoD router is, apart from what it computes (router.c): the [mod]
 * keys, the configuration they give, the tensors, FLOPs and buffers of the
 * router.  The kinds' descriptions link this file alone. */
#include "core/util/num.h"
#include "mod/router.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const router_names[] = { [ROUTER_LEARNED] = "learned",
                                            [ROUTER_RANDOM] = "random", NULL };
static const char *const gate_names[] = { [GATE_RAW] = "raw", [GATE_SIGMOID] = "sigmoid", NULL };
static const char *const causal_names[] = { [CAUSAL_AUX] = "aux", [CAUSAL_PREDICTOR] = "predictor",
                                            [CAUSAL_NONE] = "none",
                                            [CAUSAL_THRESHOLD] = "threshold", NULL };
static const char *const schedule_names[] = { [SCHEDULE_NONE] = "none",
                                              [SCHEDULE_LINEAR] = "linear",
                                              [SCHEDULE_COSINE] = "cosine", NULL };
_Static_assert(sizeof(router_names) / sizeof(router_names[0]) == ROUTER_COUNT + 1, "a name each");
_Static_assert(sizeof(gate_names) / sizeof(gate_names[0]) == GATE_COUNT + 1, "a name each");
_Static_assert(sizeof(causal_names) / sizeof(causal_names[0]) == CAUSAL_COUNT + 1, "a name each");
_Static_assert(sizeof(schedule_names) / sizeof(schedule_names[0]) == SCHEDULE_COUNT + 1,
               "a name each");

#define P(f) offsetof(mod_router_params, f)
static const kind_key mod_keys[] = {
    { "capacity", KEY_REAL, P(capacity), "0.125", 0, 1, KEY_MIN_OPEN, NULL,
      "share of each sequence's tokens that take the routed block: k = max(1, floor(capacity S)) "
      "of the S by router score (expert-choice, per sequence)", 0 },
    { "router", KEY_CHOICE, P(router), "learned", 0, 0, 0, router_names,
      "learned: scores r = x w_r from the residual stream; random: N(0,1) scores keyed by seed, "
      "step, layer and sequence, gate 1, no parameters (the control)", 0 },
    { "gate", KEY_CHOICE, P(gate), "sigmoid", 0, 0, 0, gate_names,
      "what scales a selected token's update: raw r (the paper's Eq. 1) or sigmoid(r)", 0 },
    { "causal", KEY_CHOICE, P(causal), "aux", 0, 0, 0, causal_names,
      "the causal rule of evaluation and sampling: aux (BCE of sigmoid(r) against top-k "
      "membership, threshold r > 0), predictor (a separate MLP d -> 64 -> 1 on stop-gradient(x)), "
      "none (threshold r > 0), threshold (r > tau, tau a tensor fitted in training by the "
      "quantile loss at level 1 - capacity, so that the share of tokens passing it matches the "
      "capacity: docs/kinds/mod-schedule.md)", 0 },
    { "causal_threshold", KEY_REAL, P(causal_threshold), "0", -1e6, 1e6, 0, NULL,
      "the causal rule takes token i when its score (r_i, or the predictor's logit) is above "
      "it (MODEL.md: 0); a dial of evaluation and sampling: higher, fewer tokens take the "
      "block (router = random: Phi^-1(1 - capacity) instead; causal = threshold: added to the "
      "fitted tau)", 0 },
    { "aux_weight", KEY_REAL, P(aux_weight), "0.01", 0, KEY_NO_MAX, 0, NULL,
      "weight of the aux BCE in the training loss (causal = aux)", 0 },
    { "capacity_schedule", KEY_CHOICE, P(capacity_schedule), "none", 0, 0, 0, schedule_names,
      "training's capacity: none (capacity from the first step), linear or cosine from 1 at "
      "step 0 down to capacity at mod.schedule_steps (evaluation always at capacity; "
      "run.flops_budget buys the steps the schedule's FLOPs sum to)", 0 },
    { "schedule_steps", KEY_LONG, P(schedule_steps), "0", 0, KEY_NO_MAX, 0, NULL,
      "the steps capacity_schedule takes to reach capacity (>= 1 with a schedule, 0 without)",
      0 },
    { "threshold_lr", KEY_REAL, P(threshold_lr), "1", 0, 1e6, KEY_MIN_OPEN, NULL,
      "with causal = threshold: tau's AdamW step as a multiple of the learning rate (AdamW "
      "moves a tensor about its rate a step, so tau follows drifting scores only this fast; "
      "docs/kinds/mod-schedule.md)", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

/* Schedules and fitted thresholds that would mean nothing. */
static int router_check(const void *values, key_problem *p)
{
    const mod_router_params *r = values;
    if (r->capacity_schedule != SCHEDULE_NONE && r->schedule_steps < 1) {
        *p = (key_problem){ .key = "schedule_steps", .rel = " to be >= 1 with ",
                            .other = "capacity_schedule", .tail = " (the steps it decays over)" };
        return -EINVAL;
    }
    if (r->capacity_schedule == SCHEDULE_NONE && r->schedule_steps != 0) {
        *p = (key_problem){ .key = "schedule_steps", .rel = " to be 0 with ",
                            .other = "capacity_schedule", .tail = " (no schedule to take steps)" };
        return -EINVAL;
    }
    if (r->capacity_schedule != SCHEDULE_NONE && r->capacity >= 1.0) {
        *p = (key_problem){ .key = "capacity_schedule", .rel = " to be none with ",
                            .other = "capacity", .tail = " (a schedule decays from 1 to capacity)" };
        return -EINVAL;
    }
    if (r->causal != CAUSAL_THRESHOLD && r->threshold_lr != 1.0) {
        *p = (key_problem){ .key = "threshold_lr", .rel = " to be 1 with ", .other = "causal",
                            .tail = " (only causal = threshold has a fitted threshold to move)" };
        return -EINVAL;
    }
    if (r->causal == CAUSAL_THRESHOLD && r->router != ROUTER_LEARNED) {
        *p = (key_problem){ .key = "causal", .rel = " to be other than threshold with ",
                            .other = "router",
                            .tail = " (a random router's threshold is Phi^-1(1 - capacity) already)" };
        return -EINVAL;
    }
    return 0;
}

const key_group mod_router_group = {
    .section = "mod", .keys = mod_keys, .size = sizeof(mod_router_params), .check = router_check,
};

double mod_capacity_at(int schedule, long schedule_steps, double capacity, long step)
{
    if (schedule == SCHEDULE_NONE || step >= schedule_steps)
        return capacity;
    double t = step <= 0 ? 0.0 : (double)step / (double)schedule_steps;
    double w = schedule == SCHEDULE_LINEAR ? 1.0 - t : 0.5 * (1.0 + cos(3.14159265358979323846 * t));
    return capacity + (1.0 - capacity) * w;
}

int mod_router_k(const mod_router_cfg *c, int seq_len, bool training, long step)
{
    if (!training || c->schedule == SCHEDULE_NONE)
        return c->k;
    return mod_k(mod_capacity_at(c->schedule, c->schedule_steps, c->capacity, step), seq_len);
}

double mod_pinball(double u, double q)
{
    return u * (q - (u < 0.0 ? 1.0 : 0.0));
}

double mod_pinball_dtau(double u, double q)
{
    return (u < 0.0 ? 1.0 : 0.0) - q;
}

int mod_k(double capacity, int seq_len)
{
    /* floor in double, to the letter of MODEL.md (0.29 x 100 gives 28) */
    return num_floor_int(capacity * seq_len, 1, seq_len > 1 ? seq_len : 1);
}

mod_router_cfg mod_router_parse(const mod_router_params *p, const model_dims *dims)
{
    mod_router_cfg c = {
        .router = p->router, .gate = p->gate, .causal = p->causal,
        .capacity = p->capacity, .aux_weight = p->aux_weight, .threshold = p->causal_threshold,
        .threshold_lr = p->threshold_lr,
        .k = mod_k(p->capacity, dims->seq_len),
        .schedule = p->capacity_schedule, .schedule_steps = p->schedule_steps,
    };
    c.max_k = c.schedule == SCHEDULE_NONE ? c.k : mod_k(1.0, dims->seq_len);
    int t = 0;
    c.t_router = c.router == ROUTER_LEARNED ? t++ : -1;
    /* the random router is the ablation control: no parameters, gate 1, and
     * its own causal rule (threshold at the capacity's normal quantile) */
    c.t_pred = c.router == ROUTER_LEARNED && c.causal == CAUSAL_PREDICTOR ? t : -1;
    if (c.t_pred >= 0)
        t += 4;
    c.t_thr = c.router == ROUTER_LEARNED && c.causal == CAUSAL_THRESHOLD ? t++ : -1;
    c.n_tensors = t;
    return c;
}

int mod_router_tensors(const mod_router_cfg *c, const model_dims *dims, tensor_desc *out)
{
    int d = dims->d_model;
    if (out && c->t_router >= 0)
        out[c->t_router] = make_tensor_desc("router", 1, d, 0, 0, INIT_NORMAL, 0.02f);
    if (out && c->t_pred >= 0) {
        out[c->t_pred + 0] = make_tensor_desc("pred_w1", 2, d, MOD_PRED_HIDDEN, 0, INIT_NORMAL, 0.02f);
        out[c->t_pred + 1] = make_tensor_desc("pred_b1", 1, MOD_PRED_HIDDEN, 0, 0, INIT_ZEROS, 0.0f);
        out[c->t_pred + 2] = make_tensor_desc("pred_w2", 1, MOD_PRED_HIDDEN, 0, 0, INIT_NORMAL, 0.02f);
        out[c->t_pred + 3] = make_tensor_desc("pred_b2", 1, 1, 0, 0, INIT_ZEROS, 0.0f);
    }
    if (out && c->t_thr >= 0) {
        out[c->t_thr] = make_tensor_desc("threshold", 1, 1, 0, 0, INIT_ZEROS, 0.0f);
        out[c->t_thr].lr_scale = (float)c->threshold_lr;
    }
    return c->n_tensors;
}

double mod_router_flops(const mod_router_cfg *c, const model_dims *dims)
{
    double S = dims->seq_len, d = dims->d_model;
    double f = c->router == ROUTER_LEARNED ? 2.0 * S * d : 0.0;
    if (c->t_pred >= 0)
        f += 2.0 * S * (d * MOD_PRED_HIDDEN + MOD_PRED_HIDDEN);
    return f;
}

void mod_router_layout(buf_plan *p, mod_router *rt, const model_dims *dims, int max_seq)
{
    int S = dims->seq_len;
    size_t rows = (size_t)max_seq * S;
    rt->max_seq = max_seq;
    rt->r = BUF_FLOATS(p, rows);
    rt->pl = BUF_FLOATS(p, rows);
    rt->z = BUF_BYTES(p, rows);
    rt->c = BUF_BYTES(p, rows);
    rt->scratch = BUF_INTS(p, S);
    rt->dr = BUF_FLOATS(p, rows);
    bool pred = rt->cfg.t_pred >= 0;
    rt->pa = pred ? BUF_FLOATS(p, rows * MOD_PRED_HIDDEN) : NULL;
    rt->ph = pred ? BUF_FLOATS(p, rows * MOD_PRED_HIDDEN) : NULL;
    rt->dpa = pred ? BUF_FLOATS(p, rows * MOD_PRED_HIDDEN) : NULL;
}

double mod_router_bytes(const model_dims *dims, const mod_router_params *params, int max_seq)
{
    mod_router rt = { .cfg = mod_router_parse(params, dims) };
    buf_plan p = buf_counting(BUF_ALIGN);
    mod_router_layout(&p, &rt, dims, max_seq);
    return (double)p.used;
}
