/* AdamW, the learning-rate schedule and clipping against hand-computed values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/train/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    /* a tensor with a step of its own (MoD's fitted threshold's rule):
     * the first one without decay takes 7 times the rate */
    int scaled = -1;
    for (int ti = 0; ti < m->n_tensors && scaled < 0; ti++)
        if (!m->tensors[ti].desc.decay)
            scaled = ti;
    assert_true(scaled >= 0);
    m->tensors[scaled].desc.lr_scale = 7.0f;
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
                double sc = ti == scaled ? 7.0 : 1.0;
                p[i] -= wd + sc * lr * mh / (sqrt(vh) + 1e-8);
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

/* [optim] shard (docs/sharding.md): P ranks' pieces of every shared run
 * cover it once, in rank order, from its length and P alone; each rank's
 * update of its pieces is the unsharded update of those elements, bit for
 * bit (AdamW is element by element), moments included. */
static void test_sharded_adamw(void **state)
{
    for (long n = 0; n < 50; n++)
        for (int P = 1; P <= 7; P++) {
            long at = 100;
            for (int r = 0; r < P; r++) {
                span pc = span_piece((span){ 100, n }, P, r);
                assert_int_equal(pc.offset, at);
                assert_true(pc.count >= n / P && pc.count <= n / P + 1);
                at += pc.count;
            }
            assert_int_equal(at, 100 + n);
        }
    enum { P = 3 };
    model_dims dims = { .vocab = 11, .d_model = 4, .n_heads = 1, .d_head = 4, .d_ff = 6,
                        .n_layers = 2, .seq_len = 2 };
    layer_spec spec[2];
    layer_spec_init(&spec[0], &dense_kind);
    layer_spec_init(&spec[1], &dense_kind);
    model *u = NULL, *z[P];
    char err[128];
    assert_int_equal(build_model(&u, &dims, spec, kinds, 1, err, sizeof(err)), 0);
    model_init(u, 3);
    for (int r = 0; r < P; r++) {
        model_dims d = dims;
        d.ranks = P;
        d.rank = r;
        d.shard_optim = true;
        z[r] = NULL;
        assert_int_equal(build_model(&z[r], &d, spec, kinds, 1, err, sizeof(err)), 0);
        model_init(z[r], 3);
        assert_int_equal(z[r]->optim_shards, P);
        assert_true(z[r]->n_moments < u->n_params);
    }
    optim_cfg c;
    key_group_defaults(&optim_group, &c);
    for (long t = 1; t <= 3; t++) {
        for (size_t i = 0; i < u->n_params; i++)
            u->grads[i] = (float)(0.1 * sin(0.7 * (double)i + (double)t));
        adamw_update(NULL, u, &c, t, 0.01);
        for (int r = 0; r < P; r++) {
            memcpy(z[r]->grads, u->grads, u->n_params * sizeof(float));
            adamw_update(NULL, z[r], &c, t, 0.01);
        }
    }
    for (int ti = 0; ti < u->n_tensors; ti++) {
        const model_tensor *ut = &u->tensors[ti];
        long covered = 0;
        for (int r = 0; r < P; r++) {
            const model_tensor *zt = &z[r]->tensors[ti];
            if (zt->mcount == 0)
                continue;
            assert_int_equal(zt->mlo, covered); /* in rank order, no gap, no overlap */
            covered += zt->mcount;
            size_t at = ut->offset + (size_t)zt->mlo, bytes = (size_t)zt->mcount * sizeof(float);
            assert_memory_equal(z[r]->params + at, u->params + at, bytes);
            assert_memory_equal(z[r]->adam_m + zt->moff, u->adam_m + at, bytes);
            assert_memory_equal(z[r]->adam_v + zt->moff, u->adam_v + at, bytes);
        }
        assert_int_equal(covered, ut->numel);
    }
    free_model(&u);
    for (int r = 0; r < P; r++)
        free_model(&z[r]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sharded_adamw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
