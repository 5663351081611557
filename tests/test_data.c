/* Data loading and the split: token files of each format, bad and changing
 * files, held-out files, the `brown` source on a tiny fake, fingerprints.
 * Every file is written into a fresh mkdtemp folder (data_fixture.h);
 * sampling and the synthetic corpus: test_sampling.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "data_fixture.h"
#include "core/util/outfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- loading and the split -------------------------------------------- */

static void test_txt_load(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[512];
    write_text(t, "a.txt", 1001, path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, 0, 0.1, 16, NULL, err, sizeof(err)), 0);
    assert_int_equal(d->source->n_tokens, 1001);
    assert_int_equal(d->source->width, 1);
    assert_int_equal(d->vocab, 256);
    /* Held out: the last floor(1001 * 0.1) = 100 tokens. */
    assert_int_equal(d->train.n_tokens, 901);
    assert_int_equal(d->eval.n_tokens, 100);
    assert_null(d->source->labels);
    token_t *all = read_all(d);
    for (long i = 0; i < 1001; i++)
        assert_int_equal(all[i], (uint8_t)(i * 7 + 3));
    free(all);
    free_dataset(&d);
    assert_null(d);
    free_dataset(&d); /* a second free is harmless */
}

/* core/util/outfile.h: an output that is an input by another name (a
 * symlink, a hard link, "dir/../dir/x") or a run's own file is refused; an
 * aborted set leaves the old files; a committed one replaces them all. */
static void test_outputs(void **state)
{
    tmp_dir *t = *state;
    char in[512], sym[512], hard[512], other[512], run[512], ckpt[512], err[2048];
    write_text(t, "in.txt", 100, in, sizeof(in));
    snprintf(sym, sizeof(sym), "%s/link.txt", t->path);
    snprintf(hard, sizeof(hard), "%s/hard.txt", t->path);
    snprintf(other, sizeof(other), "%s/../%s/in.txt", t->path, strrchr(t->path, '/') + 1);
    assert_int_equal(symlink(in, sym), 0);
    assert_int_equal(link(in, hard), 0);
    const char *inputs[] = { NULL, in };
    const char *outs[] = { in, sym, hard, other };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(out_check(outs[i], inputs, 2, err, sizeof(err)), -EEXIST);
        assert_non_null(strstr(err, "one of this command's inputs"));
    }
    char fresh[512];
    snprintf(fresh, sizeof(fresh), "%s/new.csv", t->path);
    assert_int_equal(out_check(fresh, inputs, 2, err, sizeof(err)), 0);
    /* a run folder's files, whatever the command reads */
    snprintf(run, sizeof(run), "%s/run.h5", t->path);
    write_file(t, "ckpt.h5", "x", 1, ckpt, sizeof(ckpt));
    assert_int_equal(out_check(run, inputs, 2, err, sizeof(err)), -EEXIST);
    assert_non_null(strstr(err, "one of the run's own files"));
    assert_int_equal(out_check(t->path, NULL, 0, err, sizeof(err)), -EISDIR);
    /* a set: aborted, the old files stay; committed, both are new */
    char a[512], b[512];
    write_file(t, "a.bin", "old-a", 5, a, sizeof(a));
    write_file(t, "b.pos", "old-b", 5, b, sizeof(b));
    out_file set[2];
    assert_int_equal(out_open(&set[0], a, err, sizeof(err)), 0);
    assert_int_equal(out_open(&set[1], b, err, sizeof(err)), 0);
    fputs("new-a", set[0].f);
    fputs("new-b", set[1].f);
    out_abort(&set[0]);
    out_abort(&set[1]);
    char buf[16] = "";
    FILE *f = fopen(a, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof(buf), f), 5);
    fclose(f);
    assert_memory_equal(buf, "old-a", 5);
    assert_int_equal(out_open(&set[0], a, err, sizeof(err)), 0);
    assert_int_equal(out_open(&set[1], b, err, sizeof(err)), 0);
    fputs("new-a", set[0].f);
    fputs("new-b", set[1].f);
    assert_int_equal(out_commit_set(set, 2, err, sizeof(err)), 0);
    f = fopen(b, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof(buf), f), 5);
    fclose(f);
    assert_memory_equal(buf, "new-b", 5);
}

static void test_bin_round_trip(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[512];
    enum { N = 3000 };
    token_t tok[N];
    uint8_t b[2 * N];
    for (int i = 0; i < N; i++) {
        tok[i] = (token_t)((i * 40503u) % 65536u); /* spans both bytes */
        b[2 * i] = (uint8_t)(tok[i] & 0xff);
        b[2 * i + 1] = (uint8_t)(tok[i] >> 8);
    }
    tok[17] = 65535;
    b[34] = b[35] = 0xff;
    write_file(t, "t.bin", b, sizeof(b), path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, 65536, 0.25, 32, NULL, err, sizeof(err)), 0);
    assert_int_equal(d->source->n_tokens, N);
    assert_int_equal(d->source->width, 2);
    assert_int_equal(d->vocab, 65536);
    assert_int_equal(d->train.n_tokens, N - N / 4);
    token_t *all = read_all(d);
    assert_memory_equal(all, tok, sizeof(tok));
    free(all);
    free_dataset(&d);
}

/* .u32: little-endian uint32 tokens for vocabularies past 65536. */
static void test_u32_round_trip(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[512], want[640];
    enum { N = 3000, V = 1000003 };
    token_t tok[N];
    uint8_t b[4 * N];
    for (int i = 0; i < N; i++) {
        tok[i] = (token_t)(((uint64_t)i * 2654435761u) % V); /* all four bytes vary */
        if (i == 17)
            tok[i] = V - 1;
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (uint8_t)(tok[i] >> (8 * k));
    }
    write_file(t, "t.u32", b, sizeof(b), path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, V, 0.25, 32, NULL, err, sizeof(err)), 0);
    assert_int_equal(d->source->n_tokens, N);
    assert_int_equal(d->source->width, 4);
    assert_int_equal(d->vocab, V);
    token_t *all = read_all(d);
    assert_memory_equal(all, tok, sizeof(tok));
    free(all);
    free_dataset(&d);

    /* the same bytes as V = 1000000: token 17 (V - 1 above) is out of range */
    assert_int_equal(load_dataset(&d, path, NULL, 1000000, 0.25, 32, NULL, err, sizeof(err)), 0);
    token_t out[20];
    assert_int_equal(dataset_read(d, &d->train, 10, 10, out, err, sizeof(err)), -ERANGE);
    snprintf(want, sizeof(want),
             "%s: token 17 (byte offset 68) is 1000002, not below vocab 1000000", path);
    assert_string_equal(err, want);
    free_dataset(&d);
}

/* load_dataset must fail, leave *out NULL, and say `want` (and the path). */
static void expect_error_held(const char *source, const char *val_source, int vocab,
                              double val_fraction, int seq_len, const char *data_dir,
                              const char *want1, const char *want2)
{
    char err[1024] = "";
    dataset dummy;
    dataset *d = &dummy; /* must come back NULL */
    int rc = load_dataset(&d, source, val_source, vocab, val_fraction, seq_len, data_dir, err,
                          sizeof(err));
    if (rc == 0 || d != NULL || !strstr(err, want1) || (want2 && !strstr(err, want2)))
        fail_msg("source %s: rc %d, message \"%s\", wanted \"%s\" and \"%s\"", source, rc, err,
                 want1, want2 ? want2 : "");
}

static void expect_error(const char *source, int vocab, double val_fraction, int seq_len,
                         const char *data_dir, const char *want1, const char *want2)
{
    expect_error_held(source, NULL, vocab, val_fraction, seq_len, data_dir, want1, want2);
}

/* llm.c's token file (data.h): a 256 x int32 header, then n tokens of width
 * bytes, token i = (i * 40503) mod v; into b (at least 1024 + n width). */
static size_t llmc_file(uint8_t *b, int32_t magic, int32_t version, int32_t count, int width,
                        long n, uint32_t v)
{
    memset(b, 0, 1024);
    int32_t h[3] = { magic, version, count };
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (uint8_t)((uint32_t)h[i] >> (8 * k));
    for (long i = 0; i < n; i++)
        for (int k = 0; k < width; k++)
            b[1024 + i * width + k] = (uint8_t)((uint32_t)((uint64_t)i * 40503u % v) >> (8 * k));
    return 1024 + (size_t)(n * width);
}

/* llm.c's files: version 1 (uint16) and 7 (uint32) read after their
 * header; a size that is not the header's, a version that is not the
 * magic's, a header right in all but the magic are refused naming the file
 * and what is wrong; a headerless .bin is read as before. */
static void test_llmc_files(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[1024], want[1024];
    enum { N = 3000 };
    static uint8_t b[1024 + 4 * N];
    dataset *d = NULL;
    for (int w = 2; w <= 4; w += 2) {
        uint32_t v = w == 2 ? 50257 : 128256;
        size_t n = llmc_file(b, w == 2 ? 20240520 : 20240801, w == 2 ? 1 : 7, N, w, N, v);
        write_file(t, "l.bin", b, n, path, sizeof(path));
        assert_int_equal(load_dataset(&d, path, NULL, (int)v, 0.25, 32, NULL, err, sizeof(err)), 0);
        assert_int_equal(d->source->n_tokens, N);
        assert_int_equal(d->source->width, w);
        assert_int_equal(d->source->header, 1024);
        token_t *all = read_all(d);
        for (long i = 0; i < N; i++)
            assert_int_equal(all[i], (token_t)((uint64_t)i * 40503u % v));
        free(all);
        /* the fingerprint covers the header: the whole file's bytes */
        char fp[DATA_FINGERPRINT_LEN + 600];
        assert_int_equal(dataset_fingerprint(d, fp, sizeof(fp), err, sizeof(err)), 0);
        snprintf(want, sizeof(want), "bytes %zu fnv1a64", n);
        assert_non_null(strstr(fp, want));
        free_dataset(&d);
        /* a token >= vocab: named with its index and byte offset past the header */
        assert_int_equal(load_dataset(&d, path, NULL, 40000, 0.25, 32, NULL, err, sizeof(err)),
                         0);
        token_t out[8];
        assert_int_equal(dataset_read(d, &d->train, 0, 8, out, err, sizeof(err)), -ERANGE);
        snprintf(want, sizeof(want), "%s: token 1 (byte offset %d) is 40503, not below vocab 40000",
                 path, 1024 + w);
        assert_string_equal(err, want);
        free_dataset(&d);
        /* truncated by one token */
        write_file(t, "short.bin", b, n - (size_t)w, path, sizeof(path));
        snprintf(want, sizeof(want), "%s: %zu bytes, but its llm.c header (magic %d, version %d) "
                 "says 3000 %s tokens, 1024 + 3000 x %d = %zu bytes: the file is truncated", path,
                 n - (size_t)w, w == 2 ? 20240520 : 20240801, w == 2 ? 1 : 7,
                 w == 2 ? "uint16" : "uint32", w, n);
        expect_error(path, (int)v, 0.25, 32, NULL, want, NULL);
        /* a version that is not the magic's */
        llmc_file(b, w == 2 ? 20240520 : 20240801, w == 2 ? 7 : 1, N, w, N, v);
        write_file(t, "ver.bin", b, n, path, sizeof(path));
        snprintf(want, sizeof(want), "%s: llm.c token file of magic %d and version %d: that "
                 "magic goes with version %d", path, w == 2 ? 20240520 : 20240801,
                 w == 2 ? 7 : 1, w == 2 ? 1 : 7);
        expect_error(path, (int)v, 0.25, 32, NULL, want, NULL);
        /* a header right but for its magic */
        llmc_file(b, 20240521, w == 2 ? 1 : 7, N, w, N, v);
        write_file(t, "magic.bin", b, n, path, sizeof(path));
        snprintf(want, sizeof(want), "%s: its header reads as an llm.c token file's (version %d, "
                 "3000 %s tokens, which fill its %zu bytes exactly) but its magic is 20240521",
                 path, w == 2 ? 1 : 7, w == 2 ? "uint16" : "uint32", n);
        expect_error(path, (int)v, 0.25, 32, NULL, want, NULL);
    }
    /* version 1 holds uint16 tokens: V at most 65536 */
    size_t n = llmc_file(b, 20240520, 1, N, 2, N, 50257);
    write_file(t, "v1.bin", b, n, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: vocab 70000 does not fit uint16 tokens", path);
    expect_error(path, 70000, 0.25, 32, NULL, want, NULL);
    /* the same bytes with another magic and a count that does not fill the
     * file: headerless uint16 tokens (nanoGPT's), header and all */
    llmc_file(b, 20240521, 1, N - 1, 2, N, 50257);
    write_file(t, "plain.bin", b, n, path, sizeof(path));
    assert_int_equal(load_dataset(&d, path, NULL, 65536, 0.25, 32, NULL, err, sizeof(err)), 0);
    assert_int_equal(d->source->header, 0);
    assert_int_equal(d->source->n_tokens, (long)n / 2);
    free_dataset(&d);
}

static void test_bad_files(void **state)
{
    tmp_dir *t = *state;
    char path[512], want[640];
    uint8_t b[2002];
    memset(b, 0, sizeof(b));

    write_file(t, "odd.bin", b, 1001, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: 1001 bytes is not a whole number of uint16 tokens", path);
    expect_error(path, 256, 0.1, 8, NULL, want, NULL);

    write_file(t, "empty.bin", b, 0, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: file is empty", path);
    expect_error(path, 256, 0.1, 8, NULL, want, NULL);

    write_file(t, "empty.txt", b, 0, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: file is empty", path);
    expect_error(path, 256, 0.1, 8, NULL, want, NULL);

    write_file(t, "zeros.bin", b, 2000, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: vocab 70000 does not fit uint16 tokens (at most 65536); "
             "store the tokens as little-endian uint32 in a .u32 file", path);
    expect_error(path, 70000, 0.1, 8, NULL, want, NULL);
    snprintf(want, sizeof(want), "%s: vocab 0 must be at least 1", path);
    expect_error(path, 0, 0.1, 8, NULL, want, NULL);

    write_file(t, "odd.u32", b, 1002, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: 1002 bytes is not a whole number of uint32 tokens", path);
    expect_error(path, 70000, 0.1, 8, NULL, want, NULL);
    write_file(t, "empty.u32", b, 0, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: file is empty", path);
    expect_error(path, 70000, 0.1, 8, NULL, want, NULL);

    snprintf(path, sizeof(path), "%s/missing.bin", t->path);
    snprintf(want, sizeof(want), "%s: cannot open it (", path);
    expect_error(path, 256, 0.1, 8, NULL, want, NULL);
    snprintf(path, sizeof(path), "%s/missing.txt", t->path);
    snprintf(want, sizeof(want), "%s: cannot open it (", path);
    expect_error(path, 256, 0.1, 8, NULL, want, NULL);

    /* Unreadable: a folder where the file should be (chmod 000 would not
     * stop root, which CI runs as). */
    snprintf(path, sizeof(path), "%s/dir.bin", t->path);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(want, sizeof(want), "%s: not a regular file", path);
    expect_error(path, 256, 0.1, 8, NULL, want, NULL);

    /* Too few tokens: 40 tokens, S = 16 needs 17 on each side. */
    dataset *d = NULL;
    char err[512];
    write_text(t, "short.txt", 40, path, sizeof(path));
    expect_error(path, 0, 0.1, 16, NULL, path, "4 held out"); /* held-out side short */
    expect_error(path, 0, 0.6, 16, NULL, path, "16 for training"); /* training side short */
    expect_error(path, 0, 0.5, 20, NULL, path, "seq_len+1 = 21"); /* both */
    d = NULL;
    /* 20 | 20 */
    assert_int_equal(load_dataset(&d, path, NULL, 0, 0.5, 16, NULL, err, sizeof(err)), 0);
    assert_int_equal(d->train.n_tokens, 20);
    free_dataset(&d);
    write_counting_bin(t, "short.bin", 40, path, sizeof(path));
    expect_error(path, 256, 0.1, 16, NULL, path, "4 held out");

    /* Arguments. */
    expect_error(path, 256, 0.0, 8, NULL, "val_fraction 0 must be in (0, 1)", NULL);
    expect_error(path, 256, 1.0, 8, NULL, "val_fraction 1 must be in (0, 1)", NULL);
    expect_error(path, 256, 0.1, 0, NULL, "seq_len 0 must be at least 1", NULL);
    expect_error("corpus.csv", 256, 0.1, 8, NULL,
                 "data source 'corpus.csv': expected brown, synthetic, or a path ending in .txt, "
                 ".bin or .u32", NULL);
}

/* Token values are checked as they are read, not at load (data.h): the load
 * of a file with a token >= V succeeds, the read that meets it fails naming
 * the file, the token's index and its byte offset, and nothing beyond V is
 * handed out. */
static void test_token_checks(void **state)
{
    tmp_dir *t = *state;
    char path[512], want[640], err[1024];
    uint8_t b[2000];
    memset(b, 0, sizeof(b));
    b[10] = 0x2c; /* token 5 = 0x012c = 300 */
    b[11] = 0x01;
    write_file(t, "big.bin", b, sizeof(b), path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, 256, 0.1, 8, NULL, err, sizeof(err)), 0);
    assert_true(d->source->fd >= 0); /* read from the file in place */
    token_t out[16];
    assert_int_equal(dataset_read(d, &d->train, 0, 5, out, err, sizeof(err)), 0);
    assert_int_equal(dataset_read(d, &d->train, 3, 8, out, err, sizeof(err)), -ERANGE);
    snprintf(want, sizeof(want), "%s: token 5 (byte offset 10) is 300, not below vocab 256", path);
    assert_string_equal(err, want);
    free_dataset(&d);
    /* fits 301 */
    assert_int_equal(load_dataset(&d, path, NULL, 301, 0.1, 8, NULL, err, sizeof(err)), 0);
    assert_int_equal(dataset_read(d, &d->train, 0, 16, out, err, sizeof(err)), 0);
    assert_int_equal(out[5], 300);
    free_dataset(&d);

    /* every token 300: each sample and each window fails where it starts */
    for (size_t i = 0; i < sizeof(b); i += 2) {
        b[i] = 0x2c;
        b[i + 1] = 0x01;
    }
    write_file(t, "all.bin", b, sizeof(b), path, sizeof(path));
    assert_int_equal(load_dataset(&d, path, NULL, 256, 0.1, 8, NULL, err, sizeof(err)), 0);
    long off = dataset_sample_offset(d, 8, 3, 4, 5);
    assert_int_equal(dataset_sample(d, out, 8, 3, 4, 5, err, sizeof(err)), -ERANGE);
    snprintf(want, sizeof(want), "%s: token %ld (byte offset %ld) is 300, not below vocab 256",
             path, off, 2 * off);
    assert_string_equal(err, want);
    assert_int_equal(dataset_eval_window(d, out, 8, 2, err, sizeof(err)), -ERANGE);
    snprintf(want, sizeof(want), "%s: token %ld (byte offset %ld) is 300", path, 900 + 2 * 8L,
             2 * (900 + 2 * 8L));
    assert_non_null(strstr(err, want));
    free_dataset(&d);
}

/* A file given to eval: all of it held out, windows from its first token. */
static void test_eval_file(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[512];
    write_counting_bin(t, "whole.bin", 100, path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_eval_file(&d, path, 1000, 8, err, sizeof(err)), 0);
    assert_int_equal(d->train.n_tokens, 0);
    assert_int_equal(d->eval.first, 0);
    assert_int_equal(d->eval.n_tokens, 100);
    assert_int_equal(dataset_eval_windows(d, 8), 12);
    token_t win[9];
    assert_int_equal(dataset_eval_window(d, win, 8, 11, err, sizeof(err)), 0);
    assert_int_equal(win[0], 88);
    assert_int_equal(win[8], 96);
    free_dataset(&d);
    /* fewer than S+1 tokens */
    dataset dummy;
    d = &dummy; /* must come back NULL */
    assert_int_not_equal(load_eval_file(&d, path, 1000, 100, err, sizeof(err)), 0);
    assert_null(d);
    assert_non_null(strstr(err, "100 tokens, fewer than one window of seq_len+1 = 101"));
}

/* data.val_source: training samples from all of the source, the held-out
 * windows are all of the other file, val_fraction does not apply. */
static void test_held_out_file(void **state)
{
    tmp_dir *t = *state;
    char src[512], held[512], path[512], err[1200], want[1200];
    enum { S = 8 };
    write_counting_bin(t, "train.bin", 100, src, sizeof(src));
    write_counting_bin(t, "held.bin", 50, held, sizeof(held));
    dataset *d = NULL;
    /* val_fraction 0 would be refused for a split: here it is not used */
    assert_int_equal(load_dataset(&d, src, held, 1000, 0.0, S, NULL, err, sizeof(err)), 0);
    assert_non_null(d->held_out);
    assert_ptr_equal(d->train.c, d->source);
    assert_int_equal(d->train.first, 0);
    assert_int_equal(d->train.n_tokens, 100);
    assert_ptr_equal(d->eval.c, d->held_out);
    assert_int_equal(d->eval.first, 0);
    assert_int_equal(d->eval.n_tokens, 50);
    assert_int_equal(d->held_out->width, 2);
    token_t out[S + 1];
    long top = 0;
    for (long g = 0; g < 2000; g++) { /* offsets reach the end of the source */
        long off = dataset_sample_offset(d, S, 5, 1, g);
        assert_true(off >= 0 && off <= 100 - (S + 1));
        top = off > top ? off : top;
        assert_int_equal(dataset_sample(d, out, S, 5, 1, g, err, sizeof(err)), 0);
        assert_int_equal(out[0], off);
    }
    assert_int_equal(top, 100 - (S + 1));
    assert_int_equal(dataset_eval_windows(d, S), (50 - 1) / S);
    for (long w = 0; w < dataset_eval_windows(d, S); w++) { /* from the held-out file's start */
        assert_int_equal(dataset_eval_window(d, out, S, w, err, sizeof(err)), 0);
        for (int i = 0; i <= S; i++)
            assert_int_equal(out[i], w * S + i);
    }
    assert_null(dataset_eval_labels(d, S, 0));
    free_dataset(&d);
    assert_null(d);

    /* "none" is no held-out file: the split of the source */
    assert_int_equal(load_dataset(&d, src, "none", 1000, 0.5, S, NULL, err, sizeof(err)), 0);
    assert_null(d->held_out);
    assert_int_equal(d->train.n_tokens, 50);
    assert_int_equal(d->eval.first, 50);
    free_dataset(&d);

    /* a .u32 held-out file beside a .bin source: both token ids */
    uint8_t b[4 * 40] = { 0 };
    for (int i = 0; i < 40; i++)
        b[4 * i] = (uint8_t)i;
    write_file(t, "held.u32", b, sizeof(b), path, sizeof(path));
    assert_int_equal(load_dataset(&d, src, path, 1000, 0.1, S, NULL, err, sizeof(err)), 0);
    assert_int_equal(d->eval.n_tokens, 40);
    assert_int_equal(dataset_eval_window(d, out, S, 2, err, sizeof(err)), 0);
    assert_int_equal(out[S], 3 * S);
    free_dataset(&d);

    /* errors: each names the file */
    write_text(t, "held.txt", 100, path, sizeof(path));
    snprintf(want, sizeof(want),
             "%s: byte text, but the source %s is token ids: the held-out file must be of the "
             "same kind", path, src);
    expect_error_held(src, path, 1000, 0.1, S, NULL, want, NULL);
    snprintf(want, sizeof(want), "%s: token ids, but the source %s is byte text", held, path);
    expect_error_held(path, held, 256, 0.1, S, NULL, want, NULL);
    snprintf(want, sizeof(want), "%s: 50 tokens, fewer than one held-out window of seq_len+1 = 51",
             held);
    expect_error_held(src, held, 1000, 0.1, 50, NULL, want, NULL);
    write_counting_bin(t, "tiny.bin", 9, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: 9 tokens, fewer than one training sample of seq_len+1 = 10",
             path);
    expect_error_held(path, held, 1000, 0.1, 9, NULL, want, NULL);
    snprintf(path, sizeof(path), "%s/missing.bin", t->path);
    snprintf(want, sizeof(want), "%s: cannot open it (", path);
    expect_error_held(src, path, 1000, 0.1, S, NULL, want, NULL);
    write_file(t, "empty.bin", b, 0, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: file is empty", path);
    expect_error_held(src, path, 1000, 0.1, S, NULL, want, NULL);
    write_file(t, "odd.u32", b, 6, path, sizeof(path));
    snprintf(want, sizeof(want), "%s: 6 bytes is not a whole number of uint32 tokens", path);
    expect_error_held(src, path, 1000, 0.1, S, NULL, want, NULL);
    snprintf(want, sizeof(want), "%s: vocab 70000 does not fit uint16 tokens", held);
    expect_error_held("big.u32", held, 70000, 0.1, S, NULL, "big.u32: cannot open", NULL);
    write_file(t, "src.u32", b, sizeof(b), path, sizeof(path));
    expect_error_held(path, held, 70000, 0.1, S, NULL, want, NULL);
}

/* `brown` as the held-out file of a text source: its labels come with it. */
static void test_held_out_brown(void **state)
{
    tmp_dir *t = *state;
    char src[512], path[512], err[512];
    enum { N = 200, S = 8 };
    uint8_t text[N], pos[N];
    for (int i = 0; i < N; i++) {
        text[i] = (uint8_t)('a' + i % 26);
        pos[i] = (uint8_t)(i % BROWN_CLASSES);
    }
    write_file(t, "brown.txt", text, N, path, sizeof(path));
    write_file(t, "brown.pos", pos, N, path, sizeof(path));
    write_text(t, "train.txt", 300, src, sizeof(src));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, src, "brown", 0, 0.1, S, t->path, err, sizeof(err)), 0);
    assert_int_equal(d->vocab, 256);
    assert_int_equal(d->train.n_tokens, 300);
    assert_null(d->source->labels);
    assert_int_equal(d->eval.n_tokens, N);
    assert_int_equal(d->eval.c->n_label_classes, BROWN_CLASSES);
    assert_ptr_equal(dataset_eval_labels(d, S, 3), d->held_out->labels + 3 * S);
    assert_int_equal(dataset_eval_labels(d, S, 3)[1], (3 * S + 1) % BROWN_CLASSES);
    free_dataset(&d);
}

/* `brown` from a tiny fake in the temp folder, and the errors when it is
 * missing or inconsistent. */
static void test_brown_files(void **state)
{
    tmp_dir *t = *state;
    char path[512], want[640], err[512];
    snprintf(want, sizeof(want), "%s/brown.txt: cannot open it (", t->path);
    expect_error("brown", 0, 0.1, 8, t->path, want, "run scripts/fetch-brown.sh");

    enum { N = 200 };
    uint8_t text[N], pos[N];
    for (int i = 0; i < N; i++) {
        text[i] = (uint8_t)(i % 5 == 4 ? ' ' : 'a' + i % 26);
        pos[i] = (uint8_t)(i % 5 == 4 ? 0 : 2 + i % 7);
    }
    write_file(t, "brown.txt", text, N, path, sizeof(path));
    snprintf(want, sizeof(want), "%s/brown.pos: cannot open it (", t->path);
    expect_error("brown", 0, 0.1, 8, t->path, want, "run scripts/fetch-brown.sh");

    write_file(t, "brown.pos", pos, N - 1, path, sizeof(path));
    expect_error("brown", 0, 0.1, 8, t->path, path, "199 labels for the 200 bytes");
    pos[3] = 9;
    write_file(t, "brown.pos", pos, N, path, sizeof(path));
    expect_error("brown", 0, 0.1, 8, t->path, path, "label at offset 3 is 9");
    pos[3] = 3;
    write_file(t, "brown.pos", pos, N, path, sizeof(path));

    /* Found through $MODE_DATA when no folder is given. */
    const char *old = getenv("MODE_DATA");
    char *saved = old ? strdup(old) : NULL;
    assert_int_equal(setenv("MODE_DATA", t->path, 1), 0);
    dataset *d = NULL;
    int rc = load_dataset(&d, "brown", NULL, 0, 0.2, 8, NULL, err, sizeof(err));
    if (saved) {
        setenv("MODE_DATA", saved, 1);
        free(saved);
    } else {
        unsetenv("MODE_DATA");
    }
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(d->source->n_tokens, N);
    assert_int_equal(d->vocab, 256);
    assert_int_equal(d->train.n_tokens, N - N / 5);
    assert_ptr_equal(d->eval.c, d->source);
    assert_int_equal(d->source->n_label_classes, 9);
    const char *names[] = { "space", "punct", "function", "noun", "verb",
                            "adj", "adv", "number", "other" };
    for (int c = 0; c < 9; c++)
        assert_string_equal(d->source->label_names[c], names[c]);
    assert_memory_equal(d->source->labels, pos, N);
    token_t *all = read_all(d);
    for (int i = 0; i < N; i++)
        assert_int_equal(all[i], text[i]);
    free(all);
    /* Evaluation labels follow their window. */
    long nw = dataset_eval_windows(d, 8);
    assert_int_equal(nw, (N / 5 - 1) / 8);
    for (long w = 0; w < nw; w++) {
        const uint8_t *l = dataset_eval_labels(d, 8, w);
        assert_ptr_equal(l, d->source->labels + d->train.n_tokens + w * 8);
    }
    free_dataset(&d);
}


/* A file that changes under a run: a truncated corpus fails the read that
 * meets its new end with a message naming it (it used to be memory-mapped,
 * and such a read died of SIGBUS); the fingerprint tells a changed file. */
static void test_changed_file(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[1024], fa[DATA_FINGERPRINT_LEN], fb[DATA_FINGERPRINT_LEN];
    uint8_t b[4000];
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (uint8_t)(i * 7 + 3);
    write_file(t, "c.txt", b, sizeof(b), path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, 0, 0.1, 8, NULL, err, sizeof(err)), 0);
    assert_int_equal(dataset_fingerprint(d, fa, sizeof(fa), err, sizeof(err)), 0);
    assert_non_null(strstr(fa, "bytes 4000 fnv1a64 "));
    assert_non_null(strstr(fa, "(whole)"));
    token_t out[16];
    assert_int_equal(dataset_read(d, &d->train, 3000, 9, out, err, sizeof(err)), 0);
    assert_int_equal(out[0], (token_t)(uint8_t)(3000 * 7 + 3));
    assert_int_equal(truncate(path, 1000), 0);
    assert_int_equal(dataset_read(d, &d->train, 0, 9, out, err, sizeof(err)), 0);
    assert_int_equal(dataset_read(d, &d->train, 3000, 9, out, err, sizeof(err)), -EIO);
    assert_non_null(strstr(err, "c.txt: the file changed under the run: it ends at byte 1000, "
                                "but it held 4000 bytes when it was opened"));
    assert_int_not_equal(dataset_fingerprint(d, fa, sizeof(fa), err, sizeof(err)), 0);
    free_dataset(&d);
    /* the same size, other bytes: another fingerprint */
    write_file(t, "c.txt", b, sizeof(b), path, sizeof(path));
    assert_int_equal(load_dataset(&d, path, NULL, 0, 0.1, 8, NULL, err, sizeof(err)), 0);
    assert_int_equal(dataset_fingerprint(d, fa, sizeof(fa), err, sizeof(err)), 0);
    free_dataset(&d);
    b[1234] ^= 1;
    write_file(t, "c.txt", b, sizeof(b), path, sizeof(path));
    assert_int_equal(load_dataset(&d, path, NULL, 0, 0.1, 8, NULL, err, sizeof(err)), 0);
    assert_int_equal(dataset_fingerprint(d, fb, sizeof(fb), err, sizeof(err)), 0);
    assert_string_not_equal(fa, fb);
    free_dataset(&d);
}

/* A large file is fingerprinted from blocks spread over it: a change in its
 * first or last byte, or inside one of the blocks in between, changes the
 * fingerprint (one in the gaps between blocks would not: data.h). */
static void test_sampled_fingerprint(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[1024], f0[DATA_FINGERPRINT_LEN], f1[DATA_FINGERPRINT_LEN];
    long n = DATA_FINGERPRINT_WHOLE + 12345;
    uint8_t *b = malloc((size_t)n);
    assert_non_null(b);
    for (long i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 13 + (i >> 9));
    dataset *d = NULL;
    long block100 = 100 * (n - (64L << 10)) / (DATA_FINGERPRINT_BLOCKS - 1);
    const long at[] = { n - 1, 0, block100 + 20 };
    for (int k = -1; k < 3; k++) {
        if (k >= 0)
            b[at[k]] ^= 0x40;
        write_file(t, "big.txt", b, (size_t)n, path, sizeof(path));
        assert_int_equal(load_dataset(&d, path, NULL, 0, 0.1, 8, NULL, err, sizeof(err)), 0);
        assert_int_equal(dataset_fingerprint(d, k < 0 ? f0 : f1, sizeof(f0), err, sizeof(err)),
                         0);
        free_dataset(&d);
        if (k < 0) {
            assert_non_null(strstr(f0, "(sampled)"));
            continue;
        }
        assert_string_not_equal(f0, f1);
        b[at[k]] ^= 0x40;
    }
    free(b);
}

/* A FIFO (or any file that is not a regular file) is refused at once, never
 * waited on: open() of a FIFO without O_NONBLOCK blocks until a writer
 * comes.  The alarm turns a hang into a failure. */
static void test_fifo(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/f.txt", t->path);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(20);
    dataset *d = NULL;
    assert_int_not_equal(load_dataset(&d, path, NULL, 0, 0.1, 8, NULL, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "f.txt: not a regular file (a FIFO)"));
    assert_int_not_equal(load_eval_file(&d, path, 256, 8, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "f.txt: not a regular file (a FIFO)"));
    assert_int_not_equal(load_dataset(&d, "synthetic", path, 0, 0.1, 8, NULL, err, sizeof(err)),
                         0);
    assert_non_null(strstr(err, "not a regular file"));
    alarm(0);
    unlink(path);
    assert_int_equal(mkdir(path, 0700), 0); /* a folder named f.txt */
    assert_int_not_equal(load_dataset(&d, path, NULL, 0, 0.1, 8, NULL, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "f.txt: not a regular file (a directory)"));
    rmdir(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_txt_load, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_outputs, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_bin_round_trip, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_u32_round_trip, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_bad_files, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_llmc_files, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_token_checks, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_eval_file, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_brown_files, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_held_out_file, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_held_out_brown, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_changed_file, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_sampled_fingerprint, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_fifo, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

