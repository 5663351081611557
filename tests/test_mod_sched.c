/* MoD's threshold and capacity schedule (docs/kinds/mod-schedule.md) with
 * answers worked by hand: the schedule's capacity at given steps, the
 * quantile loss and its derivative, the threshold rule on hand scores (and
 * the fitted threshold's gradient), the refusals of schedules that mean
 * nothing, and the steps a run.flops_budget buys under a schedule: the
 * largest count whose per-step FLOPs sum within the budget. */
#include "core/config/config.h"
#include "core/model/buf.h"
#include "moe/registry.h"
#include "mod/router.h"

#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_capacity_at(void **state)
{
    /* linear: 1 - (1 - c) t / T; cosine: c + (1 - c) (1 + cos(pi t / T)) / 2 */
    static const double linear[] = { 1.0, 0.8125, 0.625, 0.4375, 0.25, 0.25 };
    for (int s = 0; s < 6; s++)
        assert_true(fabs(mod_capacity_at(SCHEDULE_LINEAR, 4, 0.25, s) - linear[s]) < 1e-12);
    assert_true(fabs(mod_capacity_at(SCHEDULE_COSINE, 4, 0.25, 0) - 1.0) < 1e-12);
    assert_true(fabs(mod_capacity_at(SCHEDULE_COSINE, 4, 0.25, 1) - 0.8901650429449553) < 1e-12);
    assert_true(fabs(mod_capacity_at(SCHEDULE_COSINE, 4, 0.25, 2) - 0.625) < 1e-12);
    assert_true(fabs(mod_capacity_at(SCHEDULE_COSINE, 4, 0.25, 4) - 0.25) < 1e-12);
    assert_true(mod_capacity_at(SCHEDULE_NONE, 0, 0.25, 0) == 0.25);
    /* k of S = 16: floor(16 x capacity), evaluation always at capacity */
    mod_router_params p = { .capacity = 0.25, .capacity_schedule = SCHEDULE_LINEAR,
                            .schedule_steps = 4 };
    model_dims dims = { .d_model = 4, .seq_len = 16 };
    mod_router_cfg c = mod_router_parse(&p, &dims);
    assert_int_equal(c.max_k, 16);
    static const int k[] = { 16, 13, 10, 7, 4, 4 };
    for (int s = 0; s < 6; s++)
        assert_int_equal(mod_router_k(&c, 16, true, s), k[s]);
    assert_int_equal(mod_router_k(&c, 16, false, 0), 4);
}

static void test_pinball(void **state)
{
    /* q = 0.75: above tau costs 0.75 u, below 0.25 |u| */
    assert_true(fabs(mod_pinball(2.0, 0.75) - 1.5) < 1e-12);
    assert_true(fabs(mod_pinball(-2.0, 0.75) - 0.5) < 1e-12);
    assert_true(mod_pinball_dtau(2.0, 0.75) == -0.75);
    assert_true(mod_pinball_dtau(-2.0, 0.75) == 0.25);
}

/* The rule on hand scores: x rows of one feature, w_r = 1, so r = x. */
static void test_threshold_rule(void **state)
{
    enum { S = 8, D = 2 };
    mod_router_params p = { .capacity = 0.25, .router = ROUTER_LEARNED, .gate = GATE_SIGMOID,
                            .causal = CAUSAL_THRESHOLD, .causal_threshold = 0.0 };
    model_dims dims = { .d_model = D, .seq_len = S, .n_heads = 1, .d_head = D, .d_ff = 4 };
    mod_router rt;
    assert_int_equal(build_mod_router(&rt, &p, &dims, 1), 0);
    assert_int_equal(rt.cfg.n_tensors, 2); /* router, threshold */
    assert_int_equal(rt.cfg.t_thr, 1);
    /* tau's own step ([mod] threshold_lr): its tensor's AdamW rate */
    tensor_desc td[2];
    rt.cfg.threshold_lr = 10.0;
    assert_int_equal(mod_router_tensors(&rt.cfg, &dims, td), 2);
    assert_true(td[1].lr_scale == 10.0f && td[0].lr_scale == 0.0f);
    routed_set set;
    buf_plan bp = buf_counting(BUF_ALIGN);
    routed_set_layout(&bp, &set, 1, S);
    void *mem = NULL;
    assert_int_equal(buf_alloc(&bp, &mem), 0);
    routed_set_layout(&bp, &set, 1, S);
    float wr[D] = { 1.0f, 0.0f }, tau[1] = { 0.35f }, dwr[D] = { 0 }, dtau[1] = { 0 };
    float *w[2] = { wr, tau }, *dw[2] = { dwr, dtau };
    static const float r[S] = { 0.1f, 0.9f, -0.3f, 0.4f, 0.35f, 2.0f, -1.0f, 0.3f };
    float x[S * D] = { 0 }, dx[S * D] = { 0 };
    for (int i = 0; i < S; i++)
        x[i * D] = r[i];
    double aux = 0.0, side = 0.0;
    fwd_args a = { .dims = &dims, .mode = FWD_EVAL_CAUSAL, .nseq = 1, .seq_len = S,
                   .seq_scale = 1.0f, .aux_loss = &aux, .side_loss = &side };
    /* r > 0.35: positions 1, 3, 5 (0.35 itself does not pass) */
    assert_int_equal(mod_router_forward(&rt, &set, w, 0, &a, x, ROUTER_TAKE_MODE), 0);
    assert_int_equal(set.n_sel, 3);
    assert_int_equal(set.sel[0], 1);
    assert_int_equal(set.sel[1], 3);
    assert_int_equal(set.sel[2], 5);
    /* the dial adds to the fitted tau: 0.35 + 0.5 leaves 0.9 and 2.0 */
    rt.cfg.threshold = 0.5;
    assert_int_equal(mod_router_forward(&rt, &set, w, 0, &a, x, ROUTER_TAKE_MODE), 0);
    assert_int_equal(set.n_sel, 2);
    rt.cfg.threshold = 0.0;
    /* decoding: the same rule token by token */
    float g;
    for (int i = 0; i < S; i++)
        assert_int_equal(mod_router_decide(&rt, w, 0, &a, x + i * D, i, &g), r[i] > 0.35f);
    /* training: top-k takes 2 (k = 0.25 x 8), tau's loss is the quantile
     * loss at q = 0.75 over /S; its gradient (#(r < tau) - q S) / S =
     * (4 - 6) / 8 with 0.35 itself not below (u = 0) */
    a.mode = FWD_TRAIN;
    assert_int_equal(mod_router_forward(&rt, &set, w, 0, &a, x, ROUTER_TAKE_MODE), 0);
    assert_int_equal(set.n_sel, 2);
    double want = 0.0;
    for (int i = 0; i < S; i++)
        want += mod_pinball((double)r[i] - (double)tau[0], 0.75);
    assert_true(fabs(side - want / S) < 1e-6);
    float dgate[2] = { 0.0f, 0.0f };
    mod_router_backward(&rt, &set, w, dw, &a, dx, x, dgate);
    assert_true(fabs((double)dtau[0] - (4.0 - 6.0) / 8.0) < 1e-6);
    free(mem);
    free_mod_router(&rt);
}

static const char base_ini[] =
    "[run]\nname = s\nseed = 1\n[data]\nsource = synthetic\nseq_len = 32\nbatch = 2\n"
    "[model]\nd_model = 32\nn_heads = 2\nd_ff = 64\nlayers = dense, mod, dense\n";

static int load(run_config *c, const char *extra, char *err)
{
    char text[1024];
    snprintf(text, sizeof(text), "%s%s", base_ini, extra);
    return config_load_string(c, text, "cfg.ini", 0, NULL, &mode_schema, 0, err, 512);
}

/* Schedules that mean nothing are refused naming key and value. */
static void test_refused(void **state)
{
    static const char *const bad[][2] = {
        { "[run]\nsteps = 4\n[mod]\ncapacity_schedule = linear\n", "[mod] schedule_steps" },
        { "[run]\nsteps = 4\n[mod]\nschedule_steps = 3\n", "[mod] schedule_steps" },
        { "[run]\nsteps = 4\n[mod]\ncapacity = 1\ncapacity_schedule = cosine\nschedule_steps = 3\n",
          "[mod] capacity_schedule" },
        { "[run]\nsteps = 4\n[mod]\nrouter = random\ncausal = threshold\n", "[mod] causal" },
        { "[run]\nsteps = 4\n[mod]\ncapacity_schedule = square\n", "square" },
        { "[run]\nsteps = 4\n[mod]\nthreshold_lr = 10\n", "[mod] threshold_lr" },
        { "[run]\nsteps = 4\n[mod]\ncausal = threshold\nthreshold_lr = 0\n", "threshold_lr" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_config c;
        char err[512] = "";
        assert_int_not_equal(load(&c, bad[i][0], err), 0);
        if (!strstr(err, bad[i][1]))
            fail_msg("case %zu: %s lacks %s", i, err, bad[i][1]);
    }
}

/* The budget's steps integrate the schedule's per-step FLOPs. */
static void test_budget(void **state)
{
    run_config c;
    char err[512] = "";
    if (load(&c, "[run]\nsteps = 4\n[mod]\ncapacity = 0.25\ncapacity_schedule = linear\n"
                 "schedule_steps = 10\n", err))
        fail_msg("%s", err);
    long steady = -1;
    double f0 = config_train_flops_at(&c, 0, &steady), fin = config_train_flops_per_step(&c);
    assert_int_equal(steady, 10);
    assert_true(f0 > fin);
    double sum = 0.0;
    for (long s = 0; s < 10; s++)
        sum += config_train_flops_at(&c, s, &steady);
    assert_true(fabs(config_train_flops_through(&c, 10) - sum) <= 1e-9 * sum);
    assert_true(fabs(config_train_flops_through(&c, 13) - (sum + 3 * fin)) <= 1e-9 * sum);
    /* a budget of the first 7 steps and half of the 8th buys 7; of the
     * schedule and 5.5 steady steps, 15 */
    double b7 = config_train_flops_through(&c, 7) + 0.5 * config_train_flops_at(&c, 7, &steady);
    c.flops_budget = b7;
    assert_int_equal(config_planned_steps(&c, fin), 7);
    c.flops_budget = sum + 5.5 * fin;
    assert_int_equal(config_planned_steps(&c, fin), 15);
    /* without a schedule: budget / per-step as before */
    run_config d;
    if (load(&d, "[run]\nsteps = 4\n[mod]\ncapacity = 0.25\n", err))
        fail_msg("%s", err);
    assert_true(config_train_flops_at(&d, 0, &steady) == config_train_flops_per_step(&d));
    assert_int_equal(steady, 0);
    d.flops_budget = 5.5 * config_train_flops_per_step(&d);
    assert_int_equal(config_planned_steps(&d, config_train_flops_per_step(&d)), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity_at),   cmocka_unit_test(test_pinball),
        cmocka_unit_test(test_threshold_rule), cmocka_unit_test(test_refused),
        cmocka_unit_test(test_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
