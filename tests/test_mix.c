/* Difficulty-mixed batches (core/data/mix.h, docs/data-mix.md): the scores
 * of a corpus of known easy and hard documents, the sampler's halves, and
 * the score files refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "data_fixture.h"
#include "core/data/mix.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Documents 0 .. N_DOCS-1 separated by "\n\n": an even one repeats "ab"
 * (easy: its bigrams are the corpus's commonest), an odd one is
 * pseudo-random letters (hard); lengths vary.  starts[i], lens[i] (the
 * separator counts in the document before it). */
enum { N_DOCS = 10, S = 16 };

static void write_docs(const tmp_dir *t, char *path, size_t n, long *starts, long *lens)
{
    char *text = malloc(1 << 16);
    long at = 0;
    uint32_t x = 12345;
    for (int d = 0; d < N_DOCS; d++) {
        starts[d] = at;
        long len = 200 + 37 * d;
        for (long i = 0; i < len; i++) {
            x = x * 1664525u + 1013904223u;
            text[at++] = d % 2 ? (char)('c' + (x >> 24) % 20) : (char)("ab"[i % 2]);
        }
        if (d + 1 < N_DOCS) {
            text[at++] = '\n';
            text[at++] = '\n';
        }
        lens[d] = at - starts[d];
    }
    write_file(t, "docs.txt", text, (size_t)at, path, n);
    free(text);
}

/* The documents written and scored beside them (path.difficulty). */
static void scored_docs(const tmp_dir *t, char *path, char *scores, long *starts, long *lens)
{
    char err[1024];
    long n_docs = 0;
    write_docs(t, path, 512, starts, lens);
    snprintf(scores, 600, "%s.difficulty", path);
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, 256, 0.1, S, NULL, err, sizeof(err)), 0);
    assert_int_equal(mix_score_write(d, scores, &n_docs, err, sizeof(err)), 0);
    assert_int_equal(n_docs, N_DOCS);
    free_dataset(&d);
}

static dataset *load_mixed(const char *path, const char *scores, int seq_len)
{
    dataset *d = NULL;
    char err[1024];
    assert_int_equal(load_dataset(&d, path, NULL, 256, 0.1, seq_len, NULL, err, sizeof(err)), 0);
    int rc = dataset_use_mix(d, scores, seq_len, err, sizeof(err));
    if (rc)
        fail_msg("%s", err);
    return d;
}

static int doc_of(long off, const long *starts)
{
    int d = 0;
    while (d + 1 < N_DOCS && starts[d + 1] <= off)
        d++;
    return d;
}

/* Every batch half below the median, half above; every window inside one
 * document; every document of a half drawn. */
static void test_halves(void **state)
{
    tmp_dir *t = *state;
    char path[512], scores[600];
    long starts[N_DOCS], lens[N_DOCS];
    scored_docs(t, path, scores, starts, lens);
    dataset *d = load_mixed(path, scores, S);
    /* the last document lies partly in the held-out tail: clipped, and
     * still holds windows (its head is in the training split) */
    assert_int_equal(d->mix->n_docs[MIX_EASY] + d->mix->n_docs[MIX_HARD], N_DOCS);
    long hits[N_DOCS] = { 0 };
    enum { B = 8 };
    for (long step = 0; step < 300; step++) {
        int easy = 0, hard = 0;
        for (long g = 0; g < B; g++) {
            long off = dataset_sample_offset(d, S, 77, step, g);
            assert_true(off >= 0 && off + S + 1 <= d->train.n_tokens);
            int doc = doc_of(off, starts);
            /* the window lies inside its document */
            assert_true(off + S + 1 <= starts[doc] + lens[doc]);
            hits[doc]++;
            easy += doc % 2 == 0;
            hard += doc % 2 == 1;
            assert_int_equal(doc % 2, (int)(g % 2)); /* even rows easy, odd rows hard */
        }
        assert_int_equal(easy, B / 2);
        assert_int_equal(hard, B / 2);
    }
    for (int doc = 0; doc < N_DOCS; doc++)
        assert_true(hits[doc] > 0);
    free_dataset(&d);
}

/* Deterministic from (seed, step, row): a reload gives the same offsets,
 * and a global batch split over 1, 2 or 4 ranks the same global batch. */
static void test_deterministic(void **state)
{
    tmp_dir *t = *state;
    char path[512], scores[600];
    long starts[N_DOCS], lens[N_DOCS];
    scored_docs(t, path, scores, starts, lens);
    enum { B = 8 };
    long ref[5][B];
    dataset *d = load_mixed(path, scores, S);
    for (long step = 0; step < 5; step++)
        for (long g = 0; g < B; g++)
            ref[step][g] = dataset_sample_offset(d, S, 3, step, g);
    free_dataset(&d);
    dataset *again = load_mixed(path, scores, S);
    for (int ranks = 1; ranks <= 4; ranks *= 2)
        for (long step = 4; step >= 0; step--)
            for (int r = ranks - 1; r >= 0; r--) /* each rank its slice, in reverse */
                for (int i = B / ranks - 1; i >= 0; i--) {
                    long g = (long)r * (B / ranks) + i;
                    assert_int_equal(dataset_sample_offset(again, S, 3, step, g), ref[step][g]);
                }
    /* and the seed matters */
    int differ = 0;
    for (long g = 0; g < B; g++)
        differ += dataset_sample_offset(again, S, 4, 0, g) != ref[0][g];
    assert_true(differ > 0);
    free_dataset(&again);
}

/* A file rewritten with one line changed. */
static void rewrite(const char *path, const char *from, const char *to)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *at = strstr(buf, from);
    assert_non_null(at);
    f = fopen(path, "w");
    fwrite(buf, 1, (size_t)(at - buf), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(buf);
}

static void expect_refused(const char *path, const char *scores, int seq_len, const char *what)
{
    dataset *d = NULL;
    char err[1024];
    /* a held-out tail long enough for the longest window */
    assert_int_equal(load_dataset(&d, path, NULL, 256, 0.25, seq_len, NULL, err, sizeof(err)), 0);
    assert_int_not_equal(dataset_use_mix(d, scores, seq_len, err, sizeof(err)), 0);
    assert_null(d->mix);
    if (!strstr(err, what) || !strstr(err, scores))
        fail_msg("expected '%s' and the file in: %s", what, err);
    free_dataset(&d);
}

/* Missing, stale (another corpus, another scorer), broken and too short
 * score files are refused, naming the file. */
static void test_refused(void **state)
{
    tmp_dir *t = *state;
    char path[512], scores[600], missing[600], copy[700];
    long starts[N_DOCS], lens[N_DOCS];
    scored_docs(t, path, scores, starts, lens);
    snprintf(missing, sizeof(missing), "%s/none.difficulty", t->path);
    expect_refused(path, missing, S, "cannot open");
    /* a window longer than every document of the training split (the
     * longest there 498 tokens, separator included) */
    expect_refused(path, scores, 500, "below the median");
    snprintf(copy, sizeof(copy), "%s.keep", scores);
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", scores, copy);
    assert_int_equal(system(cmd), 0);
    rewrite(scores, "scorer " MIX_SCORER, "scorer unigram");
    expect_refused(path, scores, S, "stale");
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", copy, scores);
    assert_int_equal(system(cmd), 0);
    rewrite(scores, "\n202 ", "\n203 "); /* document 1 starts a token late */
    expect_refused(path, scores, S, "document 1");
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", copy, scores);
    assert_int_equal(system(cmd), 0);
    /* the corpus changed under its scores */
    FILE *f = fopen(path, "a");
    fputs("more", f);
    fclose(f);
    expect_refused(path, scores, S, "stale");
}

/* Token files keep no documents: scoring one is refused. */
static void test_token_file(void **state)
{
    tmp_dir *t = *state;
    char path[512], scores[600], err[1024];
    long n = 0;
    write_counting_bin(t, "count.bin", 400, path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, 1000, 0.25, 8, NULL, err, sizeof(err)), 0);
    snprintf(scores, sizeof(scores), "%s.difficulty", path);
    assert_int_not_equal(mix_score_write(d, scores, &n, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "count.bin"));
    free_dataset(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_halves, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_deterministic, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_refused, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_token_file, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
