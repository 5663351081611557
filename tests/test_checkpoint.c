/* HDF5 round trips: a checkpoint and a run file written and read back are
 * the same; a checkpoint of another shape is refused with the tensor named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/io/checkpoint.h"
#include "core/io/runfile.h"
#include "core/rng/pcg32.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const layer_kind *const kinds[] = { &dense_kind, NULL };

static model *make_layers(int d_ff, uint64_t seed, int layers)
{
    model_dims dims = { .vocab = 16, .d_model = 8, .n_heads = 2, .d_head = 4, .d_ff = d_ff,
                        .n_layers = layers, .seq_len = 4 };
    layer_spec specs[4];
    for (int l = 0; l < layers; l++)
        layer_spec_defaults(&specs[l]);
    model *m = NULL;
    char err[256];
    assert_int_equal(build_model(&m, &dims, specs, kinds, 1, err, sizeof(err)), 0);
    model_init(m, seed);
    pcg32 r;
    pcg32_seed(&r, seed, 3);
    for (int t = 0; t < m->n_tensors; t++) { /* moments too, to see them travel */
        for (long i = 0; i < m->tensors[t].numel; i++) {
            m->adam_m[m->tensors[t].offset + (size_t)i] = pcg32_normal(&r);
            m->adam_v[m->tensors[t].offset + (size_t)i] = pcg32_uniform(&r);
        }
    }
    return m;
}

static model *make(int d_ff, uint64_t seed)
{
    return make_layers(d_ff, seed, 2);
}

static char dir[64];

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/mode-ckpt-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_checkpoint_round_trip(void **state)
{
    char path[128], tmp[140], err[256];
    snprintf(path, sizeof(path), "%s/ckpt.h5", dir);
    model *a = make(12, 1), *b = make(12, 2);
    assert_int_equal(checkpoint_save(path, a, "[run]\nname = x\n", 17, 99, err, sizeof(err)), 0);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    assert_int_equal(access(tmp, F_OK), -1); /* the temporary is renamed away */
    ckpt_meta meta;
    assert_int_equal(checkpoint_read_meta(path, &meta, err, sizeof(err)), 0);
    assert_int_equal(meta.step, 17);
    assert_true(meta.seed == 99);
    assert_string_equal(meta.config, "[run]\nname = x\n");
    ckpt_meta_clear(&meta);
    assert_int_equal(checkpoint_load(path, b, true, err, sizeof(err)), 0);
    assert_memory_equal(a->params, b->params, a->n_params * sizeof(float));
    assert_memory_equal(a->adam_m, b->adam_m, a->n_params * sizeof(float));
    assert_memory_equal(a->adam_v, b->adam_v, a->n_params * sizeof(float));
    free_model(&a);
    free_model(&b);
}

static void test_checkpoint_shape_mismatch(void **state)
{
    char path[128], err[256] = "";
    snprintf(path, sizeof(path), "%s/small.h5", dir);
    model *a = make(12, 1), *b = make(16, 1);
    assert_int_equal(checkpoint_save(path, a, "", 1, 1, err, sizeof(err)), 0);
    assert_int_not_equal(checkpoint_load(path, b, false, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "dataset 'layers/0/w1' has extent 12 in dimension 1, expected 16"));
    free_model(&b);
    b = make_layers(12, 1, 3); /* a layer the file does not have */
    assert_int_not_equal(checkpoint_load(path, b, false, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "small.h5: dataset 'layers/2/attn_norm' is missing"));
    free_model(&a);
    free_model(&b);
}

static void test_run_file_round_trip(void **state)
{
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/run.h5", dir);
    run_record *r = NULL, *back = NULL;
    assert_int_equal(build_run_record(&r, "[run]\nname = y\n"), 0);
    static const char *const cols[] = { "step", "a", "b" };
    int t = run_record_add_table(r, "layer_stats/1", cols, 3);
    assert_true(t >= 0);
    for (int s = 1; s <= 5; s++) {
        double row[15] = { s, 1.0 / s, 2.0 / s };
        assert_int_equal(run_table_append(&r->metrics, row), 0);
        assert_int_equal(run_table_append(&r->extra[t], row), 0);
    }
    float blob[6] = { 1, 2, 3, 4, 5, 6 };
    unsigned long long dims[2] = { 2, 3 };
    assert_int_equal(run_record_add_blob(r, "routing/step_000003/layer_1/scores", RUN_BLOB_FLOAT,
                                         2, dims, blob, 3), 0);
    assert_int_equal(run_record_write(r, path, err, sizeof(err)), 0);
    /* read back into a record built the same way: tables and blobs return */
    assert_int_equal(build_run_record(&back, "[run]\nname = y\n"), 0);
    assert_true(run_record_add_table(back, "layer_stats/1", cols, 3) >= 0);
    assert_int_equal(run_record_load(back, path, err, sizeof(err)), 0);
    assert_int_equal(back->metrics.n_rows, 5);
    assert_memory_equal(back->metrics.rows, r->metrics.rows,
                        5 * (size_t)r->metrics.n_cols * sizeof(double));
    assert_memory_equal(back->extra[0].rows, r->extra[0].rows, 5 * 3 * sizeof(double));
    assert_int_equal(back->n_blobs, 1);
    assert_memory_equal(back->blobs[0].data, blob, sizeof(blob));
    assert_int_equal(back->blobs[0].step, 3);
    /* resume from step 3: rows and blobs of later steps go */
    run_record_truncate(back, 3);
    assert_int_equal(back->metrics.n_rows, 2);
    assert_int_equal(back->extra[0].n_rows, 2);
    assert_int_equal(back->n_blobs, 0);
    free_run_record(&r);
    free_run_record(&back);
}

static void test_foreign_files(void **state)
{
    char path[128], err[256] = "";
    snprintf(path, sizeof(path), "%s/text.h5", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("hello\n", f);
    fclose(f);
    ckpt_meta meta;
    assert_int_not_equal(checkpoint_read_meta(path, &meta, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "not an HDF5 file"));
    run_record *r = NULL;
    assert_int_not_equal(run_record_read(&r, path, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "text.h5"));
    assert_null(r);
}

/* A full disk: the temporary file is a link to /dev/full, where every write
 * fails with ENOSPC.  The save reports it, and the previous checkpoint and
 * run file are untouched and still load. */
static void test_full_disk(void **state)
{
    char path[128], tmp[140], runp[128], runtmp[140], err[256] = "";
    snprintf(path, sizeof(path), "%s/full.h5", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    snprintf(runp, sizeof(runp), "%s/fullrun.h5", dir);
    snprintf(runtmp, sizeof(runtmp), "%s.tmp", runp);
    model *a = make(12, 1), *b = make(12, 2);
    assert_int_equal(checkpoint_save(path, a, "", 5, 1, err, sizeof(err)), 0);
    run_record *r = NULL;
    assert_int_equal(build_run_record(&r, "[run]\n"), 0);
    assert_int_equal(run_record_write(r, runp, err, sizeof(err)), 0);
    assert_int_equal(symlink("/dev/full", tmp), 0);
    assert_int_equal(symlink("/dev/full", runtmp), 0);
    assert_int_not_equal(checkpoint_save(path, b, "", 6, 1, err, sizeof(err)), 0);
    print_message("%s\n", err);
    /* HDF5 fails at creation already, or at the first write */
    assert_true(strstr(err, "full.h5.tmp: cannot create it") ||
                strstr(err, "full.h5: writing the checkpoint failed"));
    assert_int_not_equal(run_record_write(r, runp, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "fullrun.h5"));
    ckpt_meta meta;
    assert_int_equal(checkpoint_read_meta(path, &meta, err, sizeof(err)), 0);
    assert_int_equal(meta.step, 5); /* the old one */
    ckpt_meta_clear(&meta);
    assert_int_equal(checkpoint_load(path, b, false, err, sizeof(err)), 0);
    assert_memory_equal(a->params, b->params, a->n_params * sizeof(float));
    run_record *back = NULL;
    assert_int_equal(run_record_read(&back, runp, err, sizeof(err)), 0);
    free_run_record(&back);
    unlink(tmp);
    unlink(runtmp);
    free_run_record(&r);
    free_model(&a);
    free_model(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_round_trip),
        cmocka_unit_test(test_checkpoint_shape_mismatch),
        cmocka_unit_test(test_run_file_round_trip),
        cmocka_unit_test(test_foreign_files),
        cmocka_unit_test(test_full_disk),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
