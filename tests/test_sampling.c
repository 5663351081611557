/* Sampling, evaluation windows, pinned samples and the synthetic corpus
 * (the data files they read are written into a fresh mkdtemp folder,
 * data_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "data_fixture.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- sampling ---------------------------------------------------------- */

static void test_sampling(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[512];
    enum { N = 60, S = 8 };
    write_counting_bin(t, "count.bin", N, path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(load_dataset(&d, path, NULL, 1000, 0.25, S, NULL, err, sizeof(err)), 0);
    assert_int_equal(d->train.n_tokens, 45);
    const long last = d->train.n_tokens - (S + 1); /* largest offset: 36 */

    /* In range, every offset drawn, and the sample is the tokens there. */
    long hits[64] = { 0 };
    token_t out[S + 1];
    for (long step = 0; step < 400; step++) {
        for (long g = 0; g < 16; g++) {
            long off = dataset_sample_offset(d, S, 1234, step, g);
            assert_true(off >= 0 && off <= last);
            hits[off]++;
            assert_int_equal(dataset_sample(d, out, S, 1234, step, g, err, sizeof(err)), 0);
            for (int i = 0; i <= S; i++)
                assert_int_equal(out[i], off + i); /* token i is i: never held out */
        }
    }
    /* 6400 draws over 37 offsets: about 173 each; uniform enough that none
     * is far off (binomial sd ~13). */
    for (long o = 0; o <= last; o++)
        assert_true(hits[o] > 100 && hits[o] < 250);

    /* Depends only on (seed, step, global_seq): a global batch of 8 split
     * over 1, 2 or 4 ranks, each rank drawing its own slice in its own
     * order, gives the same offsets. */
    enum { B = 8 };
    long ref[B];
    for (long g = 0; g < B; g++)
        ref[g] = dataset_sample_offset(d, S, 99, 7, g);
    for (int ranks = 1; ranks <= 4; ranks *= 2) {
        for (int r = ranks - 1; r >= 0; r--) { /* ranks in reverse, to vary the order */
            for (int i = B / ranks - 1; i >= 0; i--) {
                long g = (long)r * (B / ranks) + i;
                assert_int_equal(dataset_sample_offset(d, S, 99, 7, g), ref[g]);
            }
        }
    }
    /* ... and each element of the tuple matters. */
    int differ_seed = 0, differ_step = 0, differ_seq = 0;
    for (long g = 0; g < 64; g++) {
        long o = dataset_sample_offset(d, S, 5, 3, g);
        differ_seed += o != dataset_sample_offset(d, S, 6, 3, g);
        differ_step += o != dataset_sample_offset(d, S, 5, 4, g);
        differ_seq += o != dataset_sample_offset(d, S, 5, 3, g + 64);
    }
    assert_true(differ_seed > 40 && differ_step > 40 && differ_seq > 40);
    free_dataset(&d);
}

/* ---- evaluation windows ------------------------------------------------ */

static void check_windows(const tmp_dir *t, long n, double val_fraction, int S, long want_val,
                          long want_windows)
{
    char path[512], err[512];
    write_counting_bin(t, "eval.bin", n, path, sizeof(path));
    dataset *d = NULL;
    assert_int_equal(
        load_dataset(&d, path, NULL, 65536, val_fraction, S, NULL, err, sizeof(err)), 0);
    long n_val = d->eval.n_tokens;
    assert_int_equal(n_val, want_val);
    long nw = dataset_eval_windows(d, S);
    assert_int_equal(nw, want_windows);
    assert_int_equal(nw, (n_val - 1) / S);

    token_t *win = malloc(((size_t)S + 1) * sizeof(token_t));
    int *predicted = calloc((size_t)n_val, sizeof(int));
    assert_non_null(win);
    assert_non_null(predicted);
    long prev_last = -1;
    for (long w = 0; w < nw; w++) {
        assert_int_equal(dataset_eval_window(d, win, S, w, err, sizeof(err)), 0);
        for (int i = 0; i <= S; i++) /* split tokens [w*S, w*S + S] */
            assert_int_equal(win[i], d->eval.first + w * S + i);
        if (w > 0)
            assert_int_equal(win[0], prev_last); /* neighbours share one token */
        prev_last = win[S];
        for (int i = 1; i <= S; i++) /* targets: every window token but the first */
            predicted[win[i] - d->eval.first]++;
        assert_null(dataset_eval_labels(d, S, w));
    }
    /* Every held-out token after the first, up to the last full window, is
     * predicted exactly once; only a tail shorter than S is left out. */
    assert_int_equal(predicted[0], 0);
    for (long i = 1; i < n_val; i++)
        assert_int_equal(predicted[i], i <= nw * S ? 1 : 0);
    assert_true(n_val - 1 - nw * S < S);
    free(win);
    free(predicted);
    free_dataset(&d);
}

static void test_eval_windows(void **state)
{
    const tmp_dir *t = *state;
    check_windows(t, 330, 0.1, 8, 33, 4);   /* n_val - 1 = 32 = 4 S: all covered */
    check_windows(t, 360, 0.1, 8, 36, 4);   /* 35 = 4 S + 3: a tail of 3 */
    check_windows(t, 1000, 0.5, 1, 500, 499); /* S = 1: every token its own target */
    check_windows(t, 200, 0.1, 19, 20, 1);  /* exactly one window */
}

/* ---- pinned samples ----------------------------------------------------- */

/* FNV-1a over token values, so the same tokens hash alike at any width. */
static uint64_t token_hash(const token_t *t, int n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++)
        h = (h ^ t[i]) * 0x100000001b3ULL;
    return h;
}

typedef struct pin {
    long step, global_seq; /* the key of a training sample (eval: step = -1, window global_seq) */
    long offset;           /* where the sample starts in its split */
    uint64_t hash;         /* token_hash of its S+1 tokens */
} pin;

/* The samples and windows an existing config gets are part of its meaning
 * (MODEL.md "Data"): these were recorded before the corpora were memory
 * mapped and must never change. */
static void check_pins(const dataset *d, int S, uint64_t seed, const pin *pins, int n_pins)
{
    char err[512];
    token_t *out = malloc(((size_t)S + 1) * sizeof(token_t));
    assert_non_null(out);
    for (int i = 0; i < n_pins; i++) {
        const pin *p = &pins[i];
        long off;
        if (p->step >= 0) {
            off = dataset_sample_offset(d, S, seed, p->step, p->global_seq);
            assert_int_equal(dataset_sample(d, out, S, seed, p->step, p->global_seq, err,
                                            sizeof(err)), 0);
        } else {
            off = p->global_seq * S;
            assert_int_equal(dataset_eval_window(d, out, S, p->global_seq, err, sizeof(err)), 0);
        }
        uint64_t h = token_hash(out, S + 1);
        if (off != p->offset || h != p->hash)
            fail_msg("pin %d (step %ld, seq %ld): offset %ld hash %016llx, pinned %ld %016llx",
                     i, p->step, p->global_seq, off, (unsigned long long)h, p->offset,
                     (unsigned long long)p->hash);
    }
    free(out);
}

static void test_sample_pins(void **state)
{
    tmp_dir *t = *state;
    char path[512], err[512];
    dataset *d = NULL;

    /* a .bin of 100003 tokens below V = 50000 (both bytes vary) */
    enum { NB = 100003 };
    uint8_t *b = malloc(2 * NB);
    assert_non_null(b);
    for (long i = 0; i < NB; i++) {
        uint32_t v = (uint32_t)(((uint64_t)i * 2654435761u) >> 7) % 50000u;
        b[2 * i] = (uint8_t)(v & 0xff);
        b[2 * i + 1] = (uint8_t)(v >> 8);
    }
    write_file(t, "pins.bin", b, 2 * NB, path, sizeof(path));
    free(b);
    assert_int_equal(load_dataset(&d, path, NULL, 50000, 0.1, 64, NULL, err, sizeof(err)), 0);
    static const pin bin_pins[] = {
        { 0, 0, 30558, 0xbfbb35fa92ef8bf6ULL },
        { 0, 1, 19723, 0xafde4b58350ed0f5ULL },
        { 1, 0, 33445, 0xaebd41599a961647ULL },
        { 17, 5, 81082, 0x3cf903855d6fe063ULL },
        { 99999, 31, 6675, 0xbedd2f962cf90a57ULL },
        { -1, 0, 0, 0xc85f51936b066372ULL },
        { -1, 100, 6400, 0x5d15617870ee3c20ULL },
        { -1, 155, 9920, 0x53d3f0c39337b675ULL },
    };
    check_pins(d, 64, 7, bin_pins, (int)(sizeof(bin_pins) / sizeof(bin_pins[0])));
    free_dataset(&d);

    /* a text file of 20011 bytes */
    enum { NT = 20011 };
    uint8_t *txt = malloc(NT);
    assert_non_null(txt);
    for (long i = 0; i < NT; i++)
        txt[i] = (uint8_t)((i * 131 + i / 7) & 0xff);
    write_file(t, "pins.txt", txt, NT, path, sizeof(path));
    free(txt);
    assert_int_equal(load_dataset(&d, path, NULL, 0, 0.2, 32, NULL, err, sizeof(err)), 0);
    static const pin txt_pins[] = {
        { 0, 0, 4473, 0x4cafbfdfd6cea33dULL },
        { 3, 2, 9569, 0xa45f6b43558dfa0dULL },
        { 250, 7, 198, 0x00388b5d110625a9ULL },
        { -1, 0, 0, 0xfaf4684ac88e195dULL },
        { -1, 124, 3968, 0xfb94b784aea7b5cfULL },
    };
    check_pins(d, 32, 1, txt_pins, (int)(sizeof(txt_pins) / sizeof(txt_pins[0])));
    free_dataset(&d);

    /* the synthetic corpus, as the default config reads it */
    assert_int_equal(load_dataset(&d, "synthetic", NULL, 0, 0.1, 128, NULL, err, sizeof(err)), 0);
    static const pin synth_pins[] = {
        { 0, 0, 527828, 0x5a1643ccf1cad035ULL },
        { 0, 7, 370075, 0xee75553076bca59fULL },
        { 199, 3, 413647, 0xf26699550bbdbf1bULL },
        { 5000, 15, 115917, 0x85bf924d6294e29dULL },
        { -1, 0, 0, 0xa55ca2d4dee8ae60ULL },
        { -1, 780, 99840, 0x1ec9d9db5637d444ULL },
    };
    check_pins(d, 128, 1, synth_pins, (int)(sizeof(synth_pins) / sizeof(synth_pins[0])));
    free_dataset(&d);
}

/* ---- the synthetic corpus ---------------------------------------------- */

enum { EASY = SYNTH_EASY, MEDIUM = SYNTH_MEDIUM, HARD = SYNTH_HARD, FILLER = SYNTH_FILLER,
       N_CLASSES = SYNTH_CLASSES };
/* An easy token is fixed by the last CTX bytes (the longest reach is the
 * ' ' closing a repeat: its '~' is 13 bytes back). */
#define CTX 13

static uint64_t ctx_hash(const uint8_t *t)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (int i = 0; i < CTX; i++)
        h = (h ^ t[i]) * 0x100000001b3ULL;
    return h;
}

static void test_synthetic(void **state)
{
    enum { N = 300000 };
    uint8_t *a = malloc(N), *b = malloc(N);
    uint8_t *la = malloc(N), *lb = malloc(N);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(la);
    assert_non_null(lb);
    assert_int_equal(synthetic_generate(a, la, N, 42), 0);
    assert_int_equal(synthetic_generate(b, lb, N, 42), 0);
    assert_memory_equal(a, b, N); /* deterministic */
    assert_memory_equal(la, lb, N);
    assert_int_equal(synthetic_generate(b, lb, N, 43), 0);
    assert_memory_not_equal(a, b, N); /* and seeded */
    /* A shorter run is a prefix of a longer one (the last document is cut). */
    assert_int_equal(synthetic_generate(b, lb, 1234, 42), 0);
    assert_memory_equal(a, b, 1234);

    long count[N_CLASSES] = { 0 };
    for (long i = 0; i < N; i++) {
        assert_true(la[i] < N_CLASSES);
        count[la[i]]++;
    }
    /* Reasonable proportions: none rare, none dominant. */
    for (int c = 0; c < N_CLASSES; c++)
        assert_true(count[c] > N / 25 && count[c] < N * 3 / 4);

    /* Hard tokens are recall tokens: "K=v" where the document's header
     * defined "K=v;" at least 40 bytes earlier (so no local context has it). */
    long doc = 0, hard_checked = 0, medium_checked = 0;
    for (long i = 0; i < N; i++) {
        if (a[i] == '@')
            doc = i;
        if (la[i] == HARD) {
            assert_true(i >= 2 && a[i - 1] == '=' && a[i - 2] >= 'A' && a[i - 2] <= 'Z');
            assert_true(a[doc] == '@');
            long def = -1;
            for (long j = doc + 1; j + 3 < i && a[j] != '|'; j += 4) { /* "K=v;" */
                assert_true(a[j + 1] == '=' && a[j + 3] == ';');
                if (a[j] == a[i - 2])
                    def = j;
            }
            assert_true(def >= 0);
            assert_int_equal(a[def + 2], a[i]);
            assert_true(i - (def + 2) >= 40);
            hard_checked++;
        } else if (la[i] == MEDIUM) {
            /* A running sum: previous sum (4 back) + digit (2 back), mod 10. */
            assert_true(a[i - 1] == '=' && a[i - 3] == ' ');
            int prev = a[i - 4] - '0', digit = a[i - 2] - '0';
            assert_true(prev >= 0 && prev < 10 && digit >= 0 && digit < 10);
            assert_int_equal(a[i], '0' + (prev + digit) % 10);
            medium_checked++;
        }
    }
    assert_int_equal(hard_checked, count[HARD]);
    assert_int_equal(medium_checked, count[MEDIUM]);

    /* Easy tokens are fixed by the last CTX bytes: wherever an easy token's
     * context occurs in the corpus, the same byte follows.  Open addressing
     * on a hash of the context, verified byte for byte. */
    enum { TABLE = 1 << 20 };
    long *slot = malloc(TABLE * sizeof(long)); /* a position whose context is stored, or -1 */
    uint8_t *conflict = calloc(TABLE, 1);
    assert_non_null(slot);
    assert_non_null(conflict);
    for (long s = 0; s < TABLE; s++)
        slot[s] = -1;
    long *where = malloc(N * sizeof(long)); /* slot of position i's context */
    assert_non_null(where);
    for (long i = CTX; i < N; i++) {
        uint64_t h = ctx_hash(a + i - CTX) & (TABLE - 1);
        while (slot[h] >= 0
               && memcmp(a + slot[h] - CTX, a + i - CTX, CTX) != 0)
            h = (h + 1) & (TABLE - 1);
        if (slot[h] < 0)
            slot[h] = i;
        else if (a[slot[h]] != a[i])
            conflict[h] = 1;
        where[i] = (long)h;
    }
    long easy_checked = 0;
    for (long i = CTX; i < N; i++) {
        if (la[i] != EASY)
            continue;
        if (conflict[where[i]])
            fail_msg("easy token %ld ('%c') is not fixed by its last %d bytes", i, a[i], CTX);
        easy_checked++;
    }
    assert_true(easy_checked > N / 4);
    free(where);
    free(slot);
    free(conflict);
    free(a);
    free(b);
    free(la);
    free(lb);
}

static void test_synthetic_dataset(void **state)
{
    char err[512];
    dataset *d = NULL, *e = NULL;
    assert_int_equal(load_dataset(&d, "synthetic", NULL, 0, 0.1, 256, NULL, err, sizeof(err)), 0);
    assert_int_equal(load_dataset(&e, "synthetic", NULL, 0, 0.1, 256, NULL, err, sizeof(err)), 0);
    const corpus *c = d->source;
    assert_int_equal(c->n_tokens, 1000000);
    assert_int_equal(c->width, 1);
    assert_int_equal(c->fd, -1); /* generated in memory */
    assert_int_equal(d->vocab, 256);
    assert_int_equal(d->train.n_tokens, 900000);
    assert_int_equal(c->n_label_classes, N_CLASSES);
    assert_string_equal(c->label_names[EASY], "easy");
    assert_string_equal(c->label_names[MEDIUM], "medium");
    assert_string_equal(c->label_names[HARD], "hard");
    assert_string_equal(c->label_names[FILLER], "filler");
    assert_memory_equal(c->bytes, e->source->bytes, 1000000);
    assert_memory_equal(c->labels, e->source->labels, 1000000);
    const uint8_t *l = dataset_eval_labels(d, 256, 3);
    assert_ptr_equal(l, c->labels + 900000 + 3 * 256);
    free_dataset(&d);
    free_dataset(&e);
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sampling, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_eval_windows, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_sample_pins, setup_tmp, teardown_tmp),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_synthetic_dataset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

