/* mode-analyze's reading of runs without a model: the parameters and
 * FLOPs counted from the kind table against those of a model built from the
 * same config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "analysis/modelsize.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "moe/kinds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        assert_int_equal(config_load_string(c, size_configs[i], "test.ini", 0, NULL, mode_kinds,
                                            0, err, (int)sizeof(err)),
                         0);
        model_size s;
        assert_int_equal(count_model_size(c, mode_kinds, &s, err, (int)sizeof(err)), 0);
        assert_false(s.recorded);
        model_dims dims = config_dims(c);
        model *m = NULL;
        assert_int_equal(build_model(&m, &dims, c->layers, mode_kinds, 1, err, (int)sizeof(err)),
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
                                        mode_kinds, 0, err, (int)sizeof(err)),
                     0);
    static const layer_kind *const only_dense[] = { &dense_kind, NULL };
    model_size s;
    assert_int_not_equal(count_model_size(c, only_dense, &s, err, (int)sizeof(err)), 0);
    assert_non_null(strstr(err, "layer 1: unknown kind 'mod'"));
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_matches_built_model),
        cmocka_unit_test(test_count_unknown_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
