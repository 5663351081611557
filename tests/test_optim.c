/* AdamW, the learning-rate schedule and clipping against hand-computed values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/train/optim.h"

#include <math.h>
#include <stdlib.h>

/* cmocka 1.1's assert_float_equal compares in float; these need double. */
#define assert_close(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (double)(tol))

static const kind_ops *const kinds[] = { &dense_ops, NULL };

static void test_schedule(void **state)
{
    optim_cfg c;
    key_group_defaults(&optim_group, &c);
    c.lr = 2.0;
    c.warmup = 10;
    c.total_steps = 110;
    assert_close(lr_at(&c, 0), 0.2, 1e-12);   /* (0+1)/10 of the peak */
    assert_close(lr_at(&c, 9), 2.0, 1e-12);   /* end of warm-up: the peak */
    assert_close(lr_at(&c, 10), 2.0, 1e-12);  /* cosine starts at the peak */
    assert_close(lr_at(&c, 60), 2.0 * (0.1 + 0.9 * 0.5), 1e-12); /* half-way */
    assert_close(lr_at(&c, 110), 0.2, 1e-12); /* 10% of the peak at the end */
    assert_close(lr_at(&c, 500), 0.2, 1e-12); /* and stays there */
    for (long s = 11; s < 110; s++)
        assert_true(lr_at(&c, s) < lr_at(&c, s - 1));
}

static void test_clip(void **state)
{
    float g[4] = { 3.0f, 4.0f, 0.0f, 0.0f };
    double n = grad_global_norm(g, 4);
    assert_close(n, 5.0, 1e-9);
    assert_true(clip_grad_norm(g, 4, n, 10.0) == 1.0f); /* exact */ /* under the limit: untouched */
    assert_close(g[0], 3.0, 0);
    float f = clip_grad_norm(g, 4, n, 1.0);
    assert_close(f, 0.2, 1e-7);
    assert_close(grad_global_norm(g, 4), 1.0, 1e-6);
}

/* Two AdamW updates on a real model's buffers against the formula written out
 * in double: m, v with bias correction, decoupled decay on matrices only. */
static void test_adamw(void **state)
{
    model_dims dims = { .vocab = 8, .d_model = 4, .n_heads = 1, .d_head = 4, .d_ff = 4,
                        .n_layers = 1, .seq_len = 2 };
    layer_spec spec;
    layer_spec_init(&spec, &dense_kind);
    model *m = NULL;
    char err[128];
    assert_int_equal(build_model(&m, &dims, &spec, kinds, 1, err, sizeof(err)), 0);
    model_init(m, 1);
    optim_cfg c;
    key_group_defaults(&optim_group, &c);
    c.weight_decay = 0.5;
    double *p = malloc(m->n_params * sizeof(double));
    double *mm = calloc(m->n_params, sizeof(double)), *vv = calloc(m->n_params, sizeof(double));
    for (size_t i = 0; i < m->n_params; i++)
        p[i] = (double)m->params[i];
    for (long t = 1; t <= 2; t++) {
        double lr = 0.01 * (double)t;
        for (size_t i = 0; i < m->n_params; i++)
            m->grads[i] = (float)(0.1 * sin((double)i + (double)t));
        for (int ti = 0; ti < m->n_tensors; ti++) {
            const model_tensor *mt = &m->tensors[ti];
            for (long e = 0; e < mt->numel; e++) {
                size_t i = mt->offset + (size_t)e;
                double g = (double)m->grads[i];
                mm[i] = 0.9 * mm[i] + 0.1 * g;
                vv[i] = 0.95 * vv[i] + 0.05 * g * g;
                double mh = mm[i] / (1 - pow(0.9, (double)t)), vh = vv[i] / (1 - pow(0.95, (double)t));
                double wd = mt->desc.decay ? lr * 0.5 * p[i] : 0.0;
                p[i] -= wd + lr * mh / (sqrt(vh) + 1e-8);
            }
        }
        adamw_update(NULL, m, &c, t, lr);
    }
    int checked_decay = 0, checked_plain = 0;
    for (int ti = 0; ti < m->n_tensors; ti++) {
        const model_tensor *mt = &m->tensors[ti];
        if (mt->desc.decay)
            checked_decay++;
        else
            checked_plain++;
        for (long e = 0; e < mt->numel; e++) {
            size_t i = mt->offset + (size_t)e;
            assert_close(m->params[i], p[i], 1e-5);
        }
    }
    assert_true(checked_decay > 0 && checked_plain > 0); /* norms are not decayed, matrices are */
    free(p);
    free(mm);
    free(vv);
    free_model(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_adamw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
