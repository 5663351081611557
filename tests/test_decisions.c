/* Every kind's declaration of its decisions (layer_kind.decides,
 * core/model/decision.h) against what its forward records, for every row
 * of the kind table: a kind that records a part declares the decision the
 * part belongs to, a kind that declares a recorded decision records its
 * key part (selected, experts, depth, exited), each part of the shape and
 * range the readers expect, and the keys a declaration names are the
 * kind's.  What the analysis and mode-exp sample read off a layer follows
 * from this declaration, so a wrong one would draw a layer as another kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/model.h"
#include "moe/registry.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_LEN 16
#define NSEQ 3

/* The parts one record() wrote, by part id. */
typedef struct seen {
    int n[DECISION_PART_COUNT];
    int ndim[DECISION_PART_COUNT];
    unsigned long long dims[DECISION_PART_COUNT][3];
    void *data[DECISION_PART_COUNT];
    int unknown; /* puts of a name that is no part of a decision */
} seen;

static int seen_put(record_sink *s, const char *name, int type, int ndim,
                    const unsigned long long *dims, const void *data)
{
    seen *w = s->user;
    for (int i = 0; i < DECISION_PART_COUNT; i++) {
        if (strcmp(name, decision_parts[i].name))
            continue;
        if (type != decision_parts[i].type || ndim < 2 || ndim > 3)
            break;
        size_t n = type == RECORD_UINT8 ? 1 : 4;
        for (int d = 0; d < ndim; d++)
            n *= dims[d];
        w->n[i]++;
        w->ndim[i] = ndim;
        memcpy(w->dims[i], dims, (size_t)ndim * sizeof(dims[0]));
        free(w->data[i]);
        w->data[i] = malloc(n ? n : 1);
        memcpy(w->data[i], data, n);
        return 0;
    }
    w->unknown++;
    return 0;
}

/* Layer l's value of one of its declared keys. */
static double key_value(const layer *ly, const char *key)
{
    double v = (double)NAN;
    assert_non_null(key);
    assert_non_null(layer_key(ly->kind, key, NULL));
    assert_int_equal(layer_spec_number(&ly->spec, ly->kind, key, &v), 0);
    return v;
}

static void check_kind(const kind_ops *ops)
{
    const layer_kind *k = ops->kind;
    const decision_decl *dd = &k->decides;
    print_message("kind %s: decides 0x%x\n", k->name, dd->decides);
    /* the keys a declaration names: those of its decisions, and the kind's */
    /* a share key only with take/skip; a take/skip kind may have none when
     * its share follows from its depth (skipdecode's T_l / S) */
    assert_true(!dd->share_key || (dd->decides & DECIDES_TAKE));
    assert_true(!dd->most_key == !(dd->decides & DECIDES_DEPTH));
    assert_true(!dd->experts_key == !(dd->decides & DECIDES_EXPERTS));
    assert_true(!dd->split_key || (dd->decides & DECIDES_EXPERTS));
    assert_true(!(dd->decides & DECIDES_EXIT) == !k->exit_point);
    /* a kind records exactly when it declares a recorded decision */
    assert_true(!ops->record == !(dd->decides & DECIDES_RECORDED));

    layer_spec specs[3] = { tl_spec(mode_kind_ops, "dense"), tl_spec(mode_kind_ops, k->name),
                            tl_spec(mode_kind_ops, "dense") };
    tl_fixture f;
    tl_make(&f, mode_kind_ops, tl_small_dims(3, S_LEN), specs, NSEQ, 11);
    tl_scale_weights(f.m, 10.0f, 11);
    const layer *ly = &f.m->layers[1];
    if (dd->share_key)
        assert_true(key_value(ly, dd->share_key) > 0.0);
    for (fwd_mode mode = FWD_TRAIN; ops->record && mode <= FWD_EVAL_TOPK; mode++) {
        tl_forward(&f, mode, NULL);
        seen w = { 0 };
        fwd_args a = { .dims = &f.m->dims, .nseq = NSEQ, .seq_len = S_LEN, .mode = mode };
        record_sink sink = { .put = seen_put, .user = &w };
        assert_int_equal(ops->record(ly, &a, &sink), 0);
        assert_int_equal(w.unknown, 0);
        unsigned recorded = 0;
        long rows = (long)NSEQ * S_LEN;
        int top_k = 0;
        for (int i = 0; i < DECISION_PART_COUNT; i++) {
            if (!w.n[i])
                continue;
            const decision_part *p = &decision_parts[i];
            print_message("  %s: %s\n", mode == FWD_TRAIN ? "train" : "top-k", p->name);
            /* once, [nseq][S] (x top_k), of a decision the kind declares */
            assert_int_equal(w.n[i], 1);
            assert_int_equal(w.ndim[i], p->slots ? 3 : 2);
            assert_int_equal(w.dims[i][0], NSEQ);
            assert_int_equal(w.dims[i][1], S_LEN);
            if (p->slots) {
                assert_true(!top_k || top_k == (int)w.dims[i][2]);
                top_k = (int)w.dims[i][2];
            }
            assert_true(p->decides & dd->decides);
            recorded |= p->decides;
        }
        assert_int_equal(recorded, dd->decides & DECIDES_RECORDED);
        /* the key part of each declared decision, in the range readers check */
        if (dd->decides & DECIDES_TAKE) {
            const uint8_t *sel = w.data[DECISION_PART_selected];
            assert_non_null(sel);
            long took = 0;
            for (long t = 0; t < rows; t++) {
                assert_true(sel[t] <= 1);
                took += sel[t];
            }
            assert_true(took > 0 && took <= rows);
        }
        if (dd->decides & DECIDES_EXPERTS) {
            const int32_t *e = w.data[DECISION_PART_experts];
            assert_non_null(e);
            double E = key_value(ly, dd->experts_key);
            if (dd->split_key)
                E *= key_value(ly, dd->split_key);
            long real = 0;
            for (long t = 0; t < rows * top_k; t++) {
                assert_true(e[t] >= -2 && e[t] <= (int32_t)E);
                real += e[t] >= 0 && e[t] < (int32_t)E;
            }
            assert_true(real > 0);
        }
        if (dd->decides & DECIDES_DEPTH) {
            const int32_t *dep = w.data[DECISION_PART_depth];
            assert_non_null(dep);
            double most = key_value(ly, dd->most_key);
            for (long t = 0; t < rows; t++)
                assert_true(dep[t] >= 0 && dep[t] <= (int32_t)most);
        }
        if (dd->decides & DECIDES_EXIT) {
            const uint8_t *x = w.data[DECISION_PART_exited];
            assert_non_null(x);
            for (long t = 0; t < rows; t++)
                assert_true(x[t] <= 1);
        }
        for (int i = 0; i < DECISION_PART_COUNT; i++)
            free(w.data[i]);
    }
    tl_unmake(&f);
}

static void test_every_kind(void **state)
{
    int n = 0;
    for (const kind_ops *const *ops = mode_kind_ops; *ops; ops++, n++)
        check_kind(*ops);
    assert_true(n > 1);
}

/* The writer puts every part a decision holds under the name the reader
 * looks for, and nothing else. */
static void test_writer_names(void **state)
{
    uint8_t sel[NSEQ * S_LEN] = { 1 };
    int32_t ex[NSEQ * S_LEN * 2] = { 0 };
    float wt[NSEQ * S_LEN * 2] = { 0 };
    route_decision d = { .nseq = NSEQ, .seq_len = S_LEN, .n_slots = 2, .selected = sel,
                         .experts = ex, .weights = wt };
    seen w = { 0 };
    record_sink sink = { .put = seen_put, .user = &w };
    assert_int_equal(route_decision_record(&d, &sink), 0);
    assert_int_equal(w.unknown, 0);
    for (int i = 0; i < DECISION_PART_COUNT; i++) {
        bool held = route_decision_get(&d, (decision_part_id)i) != NULL;
        assert_int_equal(w.n[i], held ? 1 : 0);
        if (held && decision_parts[i].slots)
            assert_int_equal(w.dims[i][2], 2);
        free(w.data[i]);
    }
    assert_int_equal(w.n[DECISION_PART_selected] + w.n[DECISION_PART_experts] +
                         w.n[DECISION_PART_weights], 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_names),
        cmocka_unit_test(test_every_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
