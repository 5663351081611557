/* mode-analyze's reading of runs without a model: the parameters and
 * FLOPs counted from the kind table against those of a model built from the
 * same config; and the grouping of replicates on run files with known
 * numbers (runfiles.h), with the statistics of the groups. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "analysis/groups.h"
#include "analysis/modelsize.h"
#include "analysis/runinfo.h"
#include "analysis/stats.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "moe/registry.h"
#include "tests/analysis/runfiles.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every kind, with the MoD predictor's tensors and experts of their own
 * width: the count must see every tensor a built model holds. */
static const char *const size_configs[] = {
    "[model]\nd_model = 32\nn_heads = 2\nd_ff = 64\nlayers = dense, mod, moe, integrated, "
    "staged\n[mod]\ncausal = predictor\n[moe]\nexperts = 4\nd_ff = 48\ntop_k = 2\n",
    "[data]\nseq_len = 16\nbatch = 4\n[model]\nd_model = 16\nn_heads = 2\nd_ff = 24\n"
    "layers = (dense, mod) x 2\n[mod]\ncapacity = 0.25\n",
    "[model]\nd_model = 24\nn_heads = 4\nd_ff = 40\nlayers = dense x 3\n",
};

static void test_count_matches_built_model(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(size_configs) / sizeof(size_configs[0]); i++) {
        run_config *c = calloc(1, sizeof(*c));
        char err[512];
        assert_non_null(c);
        assert_int_equal(config_load_string(c, size_configs[i], "test.ini", 0, NULL, &mode_schema,
                                            0, err, (int)sizeof(err)),
                         0);
        model_size s;
        assert_int_equal(count_model_size(c, mode_kinds, &s, err, (int)sizeof(err)), 0);
        assert_false(s.recorded);
        model_dims dims = config_dims(c);
        model *m = NULL;
        assert_int_equal(build_model(&m, &dims, c->layers, mode_kind_ops, 1, err, (int)sizeof(err)),
                         0);
        long numel = 0;
        for (int t = 0; t < m->n_tensors; t++)
            numel += m->tensors[t].numel;
        assert_int_equal(s.params, numel);
        double flops = model_flops_per_seq(m, NULL);
        assert_true(fabs(s.forward_flops - flops) <= 1e-12 * flops);
        assert_true(fabs(s.train_flops_per_step - 3.0 * flops * c->batch) <= 1e-9 * flops);
        free_model(&m);
        free(c);
    }
}

static void test_count_unknown_kind(void **state)
{
    (void)state;
    run_config *c = calloc(1, sizeof(*c));
    char err[512] = "";
    assert_non_null(c);
    assert_int_equal(config_load_string(c, "[model]\nlayers = dense, mod\n", "t.ini", 0, NULL,
                                        &mode_schema, 0, err, (int)sizeof(err)),
                     0);
    static const layer_kind *const only_dense[] = { &dense_kind, NULL };
    model_size s;
    assert_int_not_equal(count_model_size(c, only_dense, &s, err, (int)sizeof(err)), 0);
    assert_non_null(strstr(err, "layer 1: unknown kind 'mod'"));
    free(c);
}

static void test_base_names(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        { "capacity-0.125-s2", "capacity-0.125" }, { "iso-1e12-d64x4-mod-s13", "iso-1e12-d64x4-mod" },
        { "dense", "dense" },                      { "run-s", "run-s" },
        { "-s1", "-s1" },                          { "x-s1y", "x-s1y" },
        { "seeds", "seeds" },                      { "a-s1-s2", "a-s1" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[64];
        group_base_name(cases[i][0], out, (int)sizeof(out));
        assert_string_equal(out, cases[i][1]);
    }
}

static char tmp_dir[64];

static int make_study(void **state)
{
    (void)state;
    char err[512];
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/mode-groups-XXXXXX");
    if (!mkdtemp(tmp_dir))
        return -1;
    return write_known_runs(tmp_dir, err, (int)sizeof(err));
}

static int remove_study(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The runs of runfiles.h in the order a folder lists them. */
static const char *const study[] = { "a-s1", "a-s2", "a-s3", "b-s1", "b-s2",
                                     "b-s3", "c", "dense-s1", "dense-s2" };
enum { N_STUDY = sizeof(study) / sizeof(study[0]) };

static void test_grouping(void **state)
{
    (void)state;
    run_keys keys[N_STUDY];
    const char *names[N_STUDY];
    double loss[N_STUDY];
    for (int i = 0; i < N_STUDY; i++) {
        char path[256], err[1024];
        run_info *ri = NULL;
        snprintf(path, sizeof(path), "%s/known/%s/run.h5", tmp_dir, study[i]);
        assert_int_equal(build_run_info(&ri, path, err, (int)sizeof(err)), 0);
        assert_int_equal(config_run_keys(&ri->cfg, mode_kinds, &keys[i]), 0);
        names[i] = study[i];
        loss[i] = run_last_value(ri, "eval/loss_topk", NULL);
        free_run_info(&ri);
    }
    /* parsed, not text: layers written out, init_seed and data_seed apart */
    assert_string_equal(run_key_value(&keys[1], "model.layers"), "dense, mod, dense, mod");
    assert_string_equal(run_key_value(&keys[0], "model.layers"), "(dense, mod) x 2");
    assert_true(same_config(&keys[0], &keys[1], NULL));
    assert_true(same_config(&keys[0], &keys[2], NULL));
    assert_string_equal(run_key_value(&keys[2], "run.init_seed"), "33");
    const char *diff = NULL;
    assert_false(same_config(&keys[0], &keys[3], &diff));
    assert_string_equal(diff, "mod.capacity");
    assert_false(same_config(&keys[0], &keys[6], &diff));
    assert_string_equal(diff, "mod.router");
    /* a key no layer reads: "-" */
    assert_string_equal(run_key_value(&keys[7], "mod.capacity"), "-");
    assert_string_equal(run_key_value(&keys[0], "mod.capacity"), "0.25");
    assert_string_equal(run_key_value(&keys[7], "run.seed"), "1");

    run_grouping g;
    assert_int_equal(group_runs(keys, names, N_STUDY, &g), 0);
    assert_int_equal(g.n_groups, 4);
    static const char *const want[] = { "a", "b", "c", "dense" };
    static const int sizes[] = { 3, 3, 1, 2 };
    for (int j = 0; j < 4; j++) {
        assert_string_equal(g.groups[j].name, want[j]);
        assert_int_equal(g.groups[j].n, sizes[j]);
        assert_int_equal(find_group(&g, want[j]), j);
    }
    assert_int_equal(g.group_of[2], 0);
    assert_int_equal(g.group_of[8], 3);
    /* the grid's keys: model.layers (dense against the others), the
     * capacity and the router; mod.gate is "-" or sigmoid, not a grid key */
    assert_int_equal(g.n_varying, 3);
    assert_string_equal(g.varying[0], "model.layers");
    assert_string_equal(g.varying[1], "mod.capacity");
    assert_string_equal(g.varying[2], "mod.router");
    assert_true(key_is_numeric(keys, N_STUDY, "mod.capacity"));
    assert_false(key_is_numeric(keys, N_STUDY, "mod.router"));
    assert_false(key_is_numeric(keys, N_STUDY, "run.steps")); /* one value */

    /* the statistics of groups a and b: the known numbers */
    double va[3], vb[3];
    for (int m = 0; m < 3; m++) {
        va[m] = loss[g.groups[0].members[m]];
        vb[m] = loss[g.groups[1].members[m]];
    }
    sample_summary sa, sb;
    summarize(va, 3, &sa);
    summarize(vb, 3, &sb);
    assert_true(fabs(sa.mean - 1.6474) < 1e-12 && fabs(sb.mean - 1.65356666666666667) < 1e-12);
    welch_result w;
    welch_test(&sb, &sa, &w);
    assert_true(fabs(w.p - 0.08920052) < 1e-6);
    free_run_grouping(&g);
    for (int i = 0; i < N_STUDY; i++)
        free_run_keys(&keys[i]);
}

/* Two groups of one name stay apart, and a lone run is a group of one. */
static void test_group_names(void **state)
{
    (void)state;
    run_config *c = calloc(2, sizeof(run_config));
    char err[512];
    assert_non_null(c);
    assert_int_equal(config_load_string(&c[0], "[run]\nname = x-s1\n", "t", 0, NULL, &mode_schema,
                                        0, err, (int)sizeof(err)),
                     0);
    assert_int_equal(config_load_string(&c[1], "[run]\nname = x-s2\n[optim]\nlr = 0.01\n", "t",
                                        0, NULL, &mode_schema, 0, err, (int)sizeof(err)),
                     0);
    run_keys keys[2];
    assert_int_equal(config_run_keys(&c[0], mode_kinds, &keys[0]), 0);
    assert_int_equal(config_run_keys(&c[1], mode_kinds, &keys[1]), 0);
    const char *names[2] = { "x-s1", "x-s2" };
    run_grouping g;
    assert_int_equal(group_runs(keys, names, 2, &g), 0);
    assert_int_equal(g.n_groups, 2);
    assert_string_equal(g.groups[0].name, "x");
    assert_string_equal(g.groups[1].name, "x (2)");
    assert_int_equal(g.n_varying, 1);
    assert_string_equal(g.varying[0], "optim.lr");
    assert_true(key_is_numeric(keys, 2, "optim.lr"));
    free_run_grouping(&g);
    free_run_keys(&keys[0]);
    free_run_keys(&keys[1]);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_matches_built_model),
        cmocka_unit_test(test_count_unknown_kind),
        cmocka_unit_test(test_base_names),
        cmocka_unit_test_setup_teardown(test_grouping, make_study, remove_study),
        cmocka_unit_test(test_group_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
