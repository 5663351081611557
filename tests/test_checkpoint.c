/* HDF5 round trips: a checkpoint and a run file written and read back are
 * the same; a checkpoint of another shape is refused with the tensor named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/io/checkpoint.h"
#include "core/io/h5util.h"
#include "core/io/runfile.h"
#include "core/rng/pcg32.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const kind_ops *const kinds[] = { &dense_ops, NULL };

static model *make_layers(int d_ff, uint64_t seed, int layers)
{
    model_dims dims = { .vocab = 16, .d_model = 8, .n_heads = 2, .d_head = 4, .d_ff = d_ff,
                        .n_layers = layers, .seq_len = 4 };
    layer_spec specs[4];
    for (int l = 0; l < layers; l++)
        layer_spec_init(&specs[l], &dense_kind);
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
    assert_int_equal(checkpoint_save(path, a, &(ckpt_header){ "[run]\nname = x\n", 17, 99, NULL, 0.0 }, NULL, err, sizeof(err)), 0);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    assert_int_equal(access(tmp, F_OK), -1); /* the temporary is renamed away */
    ckpt_meta meta;
    assert_int_equal(checkpoint_read_meta(path, &meta, NULL, err, sizeof(err)), 0);
    assert_int_equal(meta.step, 17);
    assert_true(meta.seed == 99);
    assert_string_equal(meta.config, "[run]\nname = x\n");
    ckpt_meta_clear(&meta);
    assert_int_equal(checkpoint_load(path, b, true, NULL, err, sizeof(err)), 0);
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
    assert_int_equal(checkpoint_save(path, a, &(ckpt_header){ "", 1, 1, NULL, 0.0 }, NULL, err, sizeof(err)), 0);
    assert_int_not_equal(checkpoint_load(path, b, false, NULL, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "dataset 'layers/0/w1' has extent 12 in dimension 1, expected 16"));
    free_model(&b);
    b = make_layers(12, 1, 3); /* a layer the file does not have */
    assert_int_not_equal(checkpoint_load(path, b, false, NULL, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "small.h5: dataset 'layers/2/attn_norm' is missing"));
    free_model(&a);
    free_model(&b);
}

static long count_pieces(const char *d)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "ls %s/records 2>/dev/null | grep -c '^step_.*\\.h5$'", d);
    FILE *p = popen(cmd, "r");
    long n = -1;
    assert_non_null(p);
    assert_int_equal(fscanf(p, "%ld", &n), 1);
    pclose(p);
    return n;
}

/* One step's rows: metrics (15 columns), a layer table and a record. */
static void add_step(run_record *r, int t, long s)
{
    double row[RUN_METRIC_COUNT] = { (double)s, 1.0 / (double)s, 2.0 / (double)s };
    row[RUN_METRIC_WALL_S] = 0.5 * (double)s;
    assert_int_equal(run_table_append(&r->metrics, row), 0);
    assert_int_equal(run_table_append(&r->extra[t], row), 0);
    float blob[6] = { (float)s, 2, 3, 4, 5, 6 };
    unsigned long long dims[2] = { 2, 3 };
    char path[96];
    snprintf(path, sizeof(path), "routing/step_%06ld/layer_1/scores", s);
    assert_int_equal(run_record_add_blob(r, path, RUN_BLOB_FLOAT, 2, dims, blob, s), 0);
}

static void check_steps(const char *path, long n, bool with_blobs)
{
    char err[256];
    run_record *back = NULL;
    assert_int_equal(run_record_read(&back, path, with_blobs, err, sizeof(err)), 0);
    assert_int_equal(back->metrics.n_rows, n);
    assert_int_equal(back->n_extra, 1);
    assert_string_equal(back->extra[0].group, "layer_stats/1");
    assert_int_equal(back->extra[0].n_rows, n);
    int wall = run_table_col(&back->metrics, "wall_s");
    assert_true(wall > 0);
    for (long i = 0; i < n; i++) {
        assert_true(back->metrics.rows[i * back->metrics.n_cols] == (double)(i + 1));
        assert_true(back->metrics.rows[i * back->metrics.n_cols + wall] == 0.5 * (double)(i + 1));
        assert_true(back->extra[0].rows[i * 3 + 2] == 2.0 / (double)(i + 1));
    }
    if (with_blobs) { /* routing/tokens (fixed) and one record a step */
        assert_int_equal(back->n_blobs, n + 1);
        for (int i = 0; i < back->n_blobs; i++) {
            const run_blob *b = &back->blobs[i];
            if (strstr(b->path, "scores")) {
                assert_true(((float *)b->data)[0] == (float)b->step);
            } else {
                assert_string_equal(b->path, "routing/tokens");
                assert_int_equal(((int32_t *)b->data)[1], 7);
            }
        }
    }
    free_run_record(&back);
}

/* The run file in pieces: a header with the fixed arrays, a piece a
 * checkpoint; the reader sees one record; a resume drops the pieces past
 * its step; the end gathers everything into run.h5 alone, which reads the
 * same. */
static void test_run_file_pieces(void **state)
{
    char sub[96], path[128], err[256];
    snprintf(sub, sizeof(sub), "%s/run", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    snprintf(path, sizeof(path), "%s/run.h5", sub);
    run_record *r = NULL;
    assert_int_equal(build_run_record(&r, "[run]\nname = y\n"), 0);
    static const char *const cols[] = { "step", "a", "b" };
    int t = run_record_add_table(r, "layer_stats/1", cols, 3);
    assert_true(t >= 0);
    int32_t tok[4] = { 5, 7, 9, 11 };
    unsigned long long tdims[2] = { 1, 4 };
    assert_int_equal(run_record_add_blob(r, "routing/tokens", RUN_BLOB_INT32, 2, tdims, tok, 0),
                     0);
    assert_int_equal(run_record_write_header(r, path, err, sizeof(err)), 0);
    assert_int_equal(r->n_blobs, 0); /* they went into the header */
    for (long s = 1; s <= 9; s++) {
        add_step(r, t, s);
        if (s % 3 == 0)
            assert_int_equal(run_record_flush(r, path, s, err, sizeof(err)), 0);
    }
    assert_int_equal(r->metrics.n_rows, 0);
    assert_int_equal(count_pieces(sub), 3);
    check_steps(path, 9, true);
    /* resuming at step 6: the piece of step 9 goes */
    assert_int_equal(run_record_rewind(path, 6, err, sizeof(err)), 0);
    r->flushed_through = 6; /* what the trainer's resume sets */
    assert_int_equal(count_pieces(sub), 2);
    check_steps(path, 6, true);
    for (long s = 7; s <= 9; s++)
        add_step(r, t, s);
    assert_int_equal(run_record_flush(r, path, 9, err, sizeof(err)), 0);
    /* the end: one file */
    assert_int_equal(run_record_finish(path, err, sizeof(err)), 0);
    assert_int_equal(count_pieces(sub), 0);
    check_steps(path, 9, true);
    check_steps(path, 9, false);
    /* a finished record cannot go back */
    assert_int_not_equal(run_record_rewind(path, 6, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "past the checkpoint's step 6"));
    free_run_record(&r);
}

/* Records with a hole: a piece removed (or damaged) stops the reader, and
 * so a resume or the gathering, with a message naming the piece and the
 * steps that are missing; a late piece (an evaluation made again on
 * resume) reads after the piece of its step. */
static void test_run_file_holes(void **state)
{
    char sub[96], path[128], piece[192], err[512];
    snprintf(sub, sizeof(sub), "%s/holes", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    snprintf(path, sizeof(path), "%s/run.h5", sub);
    run_record *r = NULL;
    assert_int_equal(build_run_record(&r, "[run]\nname = h\n"), 0);
    static const char *const cols[] = { "step", "a", "b" };
    int t = run_record_add_table(r, "layer_stats/1", cols, 3);
    assert_int_equal(run_record_write_header(r, path, err, sizeof(err)), 0);
    for (long s = 1; s <= 12; s++) {
        add_step(r, t, s);
        if (s % 4 == 0)
            assert_int_equal(run_record_flush(r, path, s, err, sizeof(err)), 0);
    }
    /* a late piece of step 12: one evaluation row */
    double row[RUN_EVAL_COUNT] = { 12, 1.5, 1.6, 0.01, 0.01, 4, 2.1, 2.2 }; /* ..., windows, bpb */
    assert_int_equal(run_table_append(&r->eval, row), 0);
    assert_int_equal(run_record_flush_late(r, path, 12, err, sizeof(err)), 0);
    run_reader *rd = NULL;
    assert_int_equal(open_run_reader(&rd, path, err, sizeof(err)), 0);
    assert_int_equal(run_reader_last_step(rd), 12);
    assert_int_equal(run_reader_files(rd), 5);
    close_run_reader(&rd);
    /* the middle piece gone */
    run_record_piece_path(piece, sizeof(piece), path, 8);
    char kept[200];
    snprintf(kept, sizeof(kept), "%s.kept", piece);
    assert_int_equal(rename(piece, kept), 0);
    assert_int_not_equal(open_run_reader(&rd, path, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "step_00000012.h5: the records of steps 5..8 are missing"));
    assert_int_not_equal(run_record_finish(path, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "the records of steps 5..8 are missing"));
    /* a damaged piece: named, with the steps it held */
    assert_int_equal(rename(kept, piece), 0);
    FILE *f = fopen(piece, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 3000, SEEK_SET), 0);
    fputc(0x5a ^ fgetc(f), f);
    fclose(f);
    assert_int_not_equal(open_run_reader(&rd, path, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "step_00000008.h5"));
    assert_non_null(strstr(err, "it held the records of steps 5..8"));
    free_run_record(&r);
}

static void test_crc_combine(void **state)
{
    uint8_t buf[1000];
    pcg32 r;
    pcg32_seed(&r, 5, 6);
    for (int i = 0; i < 1000; i++)
        buf[i] = (uint8_t)pcg32_next(&r);
    uint32_t whole = h5_crc32(0, buf, sizeof(buf));
    for (size_t cut = 0; cut <= sizeof(buf); cut += 111) {
        uint32_t a = h5_crc32(0, buf, cut), b = h5_crc32(0, buf + cut, sizeof(buf) - cut);
        assert_int_equal(h5_crc32_combine(a, b, sizeof(buf) - cut), whole);
    }
    assert_int_equal(h5_crc32(0, "123456789", 9), 0xcbf43926u); /* the check value */
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
    assert_int_not_equal(checkpoint_read_meta(path, &meta, NULL, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "not an HDF5 file"));
    run_record *r = NULL;
    assert_int_not_equal(run_record_read(&r, path, true, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "text.h5"));
    assert_null(r);
}

/* A full disk on a real file system: a small tmpfs (mounting needs root;
 * skipped with the reason otherwise).  The first checkpoint and run file
 * fit; once the disk is filled, saving them again fails with a message
 * naming the file and the room, nothing crashes (HDF5 never meets the
 * full disk: h5util.h), and the earlier files are whole and load. */
static void test_full_disk(void **state)
{
    char mnt[96], cmd[256], path[160], runp[160], fill[160], err[256] = "";
    snprintf(mnt, sizeof(mnt), "%s/small", dir);
    assert_int_equal(mkdir(mnt, 0777), 0);
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=2m tmpfs %s 2>/dev/null", mnt);
    if (geteuid() != 0 || system(cmd) != 0) {
        print_message("skipped: mounting a 2 MiB tmpfs needs root (tests/robust covers "
                      "/dev/full as any user)\n");
        skip();
    }
    snprintf(path, sizeof(path), "%s/ckpt.h5", mnt);
    snprintf(runp, sizeof(runp), "%s/run.h5", mnt);
    snprintf(fill, sizeof(fill), "%s/filler", mnt);
    model *a = make_layers(64, 1, 4), *b = make_layers(64, 2, 4);
    assert_int_equal(checkpoint_save(path, a, &(ckpt_header){ "", 5, 1, NULL, 0.0 }, NULL, err, sizeof(err)), 0);
    run_record *r = NULL;
    assert_int_equal(build_run_record(&r, "[run]\n"), 0);
    assert_int_equal(run_record_write_header(r, runp, err, sizeof(err)), 0);
    /* fill the disk, leaving less than another checkpoint needs */
    snprintf(cmd, sizeof(cmd), "dd if=/dev/zero of=%s bs=4k 2>/dev/null; true", fill);
    assert_int_equal(system(cmd), 0);
    int rc = checkpoint_save(path, b, &(ckpt_header){ "", 6, 1, NULL, 0.0 }, NULL, err, sizeof(err));
    print_message("%s\n", err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, "ckpt.h5"));
    assert_true(strstr(err, "no room") || strstr(err, "cannot reserve"));
    double row[RUN_METRIC_COUNT] = { 1 };
    assert_int_equal(run_table_append(&r->metrics, row), 0);
    assert_int_not_equal(run_record_flush(r, runp, 1, err, sizeof(err)), 0);
    print_message("%s\n", err);
    assert_non_null(strstr(err, "step_00000001.h5"));
    remove(fill);
    ckpt_meta meta;
    assert_int_equal(checkpoint_read_meta(path, &meta, NULL, err, sizeof(err)), 0);
    assert_int_equal(meta.step, 5); /* the old one */
    ckpt_meta_clear(&meta);
    assert_int_equal(checkpoint_load(path, b, true, NULL, err, sizeof(err)), 0);
    assert_memory_equal(a->params, b->params, a->n_params * sizeof(float));
    run_record *back = NULL;
    assert_int_equal(run_record_read(&back, runp, true, err, sizeof(err)), 0);
    free_run_record(&back);
    snprintf(cmd, sizeof(cmd), "ls %s | grep -c tmp", mnt);
    FILE *p = popen(cmd, "r");
    int tmps = -1;
    assert_int_equal(fscanf(p, "%d", &tmps), 1);
    pclose(p);
    assert_int_equal(tmps, 0); /* no temporary left behind */
    snprintf(cmd, sizeof(cmd), "umount %s", mnt);
    assert_int_equal(system(cmd), 0);
    free_run_record(&r);
    free_model(&a);
    free_model(&b);
}

/* A checkpoint replaced (by rename, as a live run does) while a reader
 * holds it open: the metadata and tensors read are those of the version
 * whose seal was checked, never a mix.  (Read by path, the tensors came
 * from the file renamed in after the check.) */
static void test_checkpoint_one_version(void **state)
{
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/live.h5", dir);
    model *a = make(12, 1), *b = make(12, 2), *c = make(12, 3);
    assert_int_equal(checkpoint_save(path, a, &(ckpt_header){ "", 1, 1, NULL, 0.0 }, NULL, err,
                                     sizeof(err)), 0);
    ckpt_file *f = NULL;
    ckpt_meta meta;
    assert_int_equal(checkpoint_open(&f, path, &meta, NULL, err, sizeof(err)), 0);
    assert_int_equal(meta.step, 1);
    ckpt_meta_clear(&meta);
    /* the run writes its next checkpoint over it */
    assert_int_equal(checkpoint_save(path, b, &(ckpt_header){ "", 2, 1, NULL, 0.0 }, NULL, err,
                                     sizeof(err)), 0);
    assert_int_equal(checkpoint_read(f, c, true, NULL, err, sizeof(err)), 0);
    checkpoint_close(&f);
    assert_null(f);
    assert_memory_equal(a->params, c->params, a->n_params * sizeof(float));
    assert_memory_equal(a->adam_v, c->adam_v, a->n_params * sizeof(float));
    /* a new open reads the new one */
    assert_int_equal(checkpoint_load(path, c, false, NULL, err, sizeof(err)), 0);
    assert_memory_equal(b->params, c->params, b->n_params * sizeof(float));
    free_model(&a);
    free_model(&b);
    free_model(&c);
}

/* A run reader open while the run gathers its pieces into run.h5 (which
 * replaces run.h5 and removes the pieces): it goes on reading the version
 * it opened, every row there.  (Reopening files by path, it met pieces
 * gone and failed.) */
static void test_run_reader_while_gathering(void **state)
{
    char sub[96], path[128], err[256];
    snprintf(sub, sizeof(sub), "%s/gathering", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    snprintf(path, sizeof(path), "%s/run.h5", sub);
    run_record *r = NULL;
    assert_int_equal(build_run_record(&r, "[run]\nname = g\n"), 0);
    static const char *const cols[] = { "step", "a", "b" };
    int t = run_record_add_table(r, "layer_stats/1", cols, 3);
    assert_int_equal(run_record_write_header(r, path, err, sizeof(err)), 0);
    for (long s = 1; s <= 6; s++) {
        add_step(r, t, s);
        if (s % 2 == 0)
            assert_int_equal(run_record_flush(r, path, s, err, sizeof(err)), 0);
    }
    run_reader *rd = NULL;
    assert_int_equal(open_run_reader(&rd, path, err, sizeof(err)), 0);
    assert_int_equal(run_reader_files(rd), 4);
    assert_int_equal(run_record_finish(path, err, sizeof(err)), 0);
    assert_int_equal(count_pieces(sub), 0);
    double *v = NULL;
    long n = 0;
    assert_int_equal(run_reader_column(rd, "metrics/step", &v, &n), 0);
    assert_int_equal(n, 6);
    for (long i = 0; i < n; i++)
        assert_true(v[i] == (double)(i + 1));
    free(v);
    void *blob = NULL;
    int nd = 0;
    unsigned long long dims[4];
    long step = 0;
    assert_int_equal(run_reader_array(rd, "routing/step_000005/layer_1/scores", H5T_NATIVE_FLOAT,
                                      sizeof(float), &blob, &nd, dims, &step), 0);
    assert_true(((float *)blob)[0] == 5.0f);
    free(blob);
    close_run_reader(&rd);
    free_run_record(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_round_trip),
        cmocka_unit_test(test_checkpoint_shape_mismatch),
        cmocka_unit_test(test_run_file_pieces),
        cmocka_unit_test(test_run_file_holes),
        cmocka_unit_test(test_crc_combine),
        cmocka_unit_test(test_foreign_files),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_checkpoint_one_version),
        cmocka_unit_test(test_run_reader_while_gathering),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
