/* Loading token data, the train / held-out split, training samples and
 * evaluation windows (MODEL.md "Data"). */
#include "core/data/data.h"

#include "core/rng/pcg32.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The synthetic corpus: its size and the generator seed are fixed, so every
 * run and every machine sees the same text. */
#define SYNTHETIC_TOKENS 1000000L
#define SYNTHETIC_SEED 20240601u

const char *const brown_label_names[BROWN_CLASSES] = {
    [BROWN_SPACE] = "space",   [BROWN_PUNCT] = "punct", [BROWN_FUNCTION] = "function",
    [BROWN_NOUN] = "noun",     [BROWN_VERB] = "verb",   [BROWN_ADJ] = "adj",
    [BROWN_ADV] = "adv",       [BROWN_NUMBER] = "number", [BROWN_OTHER] = "other",
};

_Static_assert((int)BROWN_CLASSES <= (int)LABEL_CLASSES_MAX, "too many Brown label classes");
_Static_assert((int)SYNTH_CLASSES <= (int)LABEL_CLASSES_MAX, "too many synthetic label classes");

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Read a whole regular file.  *bytes is malloc'd (at least 1 byte, so an
 * empty file still gives a pointer); the caller frees it. */
static int read_file(const char *path, uint8_t **bytes, long *len, char *err, int err_len)
{
    *bytes = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, (size_t)err_len, "%s: not a regular file", path);
        goto fail;
    }
    long n = (long)st.st_size;
    *bytes = malloc(n > 0 ? (size_t)n : 1u);
    if (!*bytes) {
        snprintf(err, (size_t)err_len, "%s: cannot allocate %ld bytes", path, n);
        goto fail;
    }
    if (n > 0 && fread(*bytes, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, (size_t)err_len, "%s: read failed (%s)", path,
                 ferror(f) ? strerror(errno) : "file shrank while reading");
        goto fail;
    }
    fclose(f);
    *len = n;
    return 0;
fail:
    free(*bytes);
    *bytes = NULL;
    fclose(f);
    return -1;
}

static int load_text(dataset *d, const char *path, char *err, int err_len)
{
    uint8_t *bytes;
    long n;
    if (read_file(path, &bytes, &n, err, err_len))
        return -1;
    if (n == 0) {
        snprintf(err, (size_t)err_len, "%s: file is empty", path);
        free(bytes);
        return -1;
    }
    d->tokens = malloc((size_t)n * sizeof(uint16_t));
    if (!d->tokens) {
        snprintf(err, (size_t)err_len, "%s: cannot allocate %ld tokens", path, n);
        free(bytes);
        return -1;
    }
    for (long i = 0; i < n; i++)
        d->tokens[i] = bytes[i];
    free(bytes);
    d->n_tokens = n;
    d->vocab = 256;
    return 0;
}

static int load_bin(dataset *d, const char *path, int vocab, char *err, int err_len)
{
    if (vocab < 1 || vocab > 65536) {
        snprintf(err, (size_t)err_len, "%s: vocab %d must be in [1, 65536] for uint16 tokens",
                 path, vocab);
        return -1;
    }
    uint8_t *bytes;
    long n;
    if (read_file(path, &bytes, &n, err, err_len))
        return -1;
    if (n == 0) {
        snprintf(err, (size_t)err_len, "%s: file is empty", path);
        goto fail;
    }
    if (n % 2 != 0) {
        snprintf(err, (size_t)err_len, "%s: %ld bytes is not a whole number of uint16 tokens",
                 path, n);
        goto fail;
    }
    d->tokens = malloc((size_t)(n / 2) * sizeof(uint16_t));
    if (!d->tokens) {
        snprintf(err, (size_t)err_len, "%s: cannot allocate %ld tokens", path, n / 2);
        goto fail;
    }
    for (long i = 0; i < n / 2; i++) {
        /* Little-endian whatever the host. */
        unsigned t = (unsigned)bytes[2 * i] | (unsigned)bytes[2 * i + 1] << 8;
        if (t >= (unsigned)vocab) {
            snprintf(err, (size_t)err_len,
                     "%s: token %ld (byte offset %ld) is %u, not below vocab %d", path, i,
                     2 * i, t, vocab);
            goto fail;
        }
        d->tokens[i] = (uint16_t)t;
    }
    free(bytes);
    d->n_tokens = n / 2;
    d->vocab = vocab;
    return 0;
fail:
    free(bytes);
    return -1;
}

static int load_brown(dataset *d, const char *data_dir, char *err, int err_len)
{
    if (!data_dir) {
        const char *env = getenv("MODE_DATA");
        data_dir = env && *env ? env : "data";
    }
    char txt[sizeof(d->source)], pos[sizeof(d->source)];
    if (snprintf(txt, sizeof(txt), "%s/brown.txt", data_dir) >= (int)sizeof(txt)
        || snprintf(pos, sizeof(pos), "%s/brown.pos", data_dir) >= (int)sizeof(pos)) {
        snprintf(err, (size_t)err_len, "data folder '%s': path too long", data_dir);
        return -1;
    }
    snprintf(d->source, sizeof(d->source), "%s", txt);
    struct stat st;
    const char *missing = stat(txt, &st) != 0 ? txt : stat(pos, &st) != 0 ? pos : NULL;
    if (missing) {
        snprintf(err, (size_t)err_len,
                 "%s: cannot open (%s); run scripts/fetch-brown.sh to fetch the Brown corpus",
                 missing, strerror(errno));
        return -1;
    }
    if (load_text(d, txt, err, err_len))
        return -1;
    uint8_t *labels;
    long n;
    if (read_file(pos, &labels, &n, err, err_len))
        return -1;
    if (n != d->n_tokens) {
        snprintf(err, (size_t)err_len, "%s: %ld labels for the %ld bytes of %s (expected one per byte)",
                 pos, n, d->n_tokens, txt);
        free(labels);
        return -1;
    }
    for (long i = 0; i < n; i++) {
        if (labels[i] >= BROWN_CLASSES) {
            snprintf(err, (size_t)err_len, "%s: label at offset %ld is %d, not below %d classes",
                     pos, i, labels[i], BROWN_CLASSES);
            free(labels);
            return -1;
        }
    }
    d->labels = labels;
    d->n_label_classes = BROWN_CLASSES;
    d->label_names = brown_label_names;
    return 0;
}

static int load_synthetic(dataset *d, char *err, int err_len)
{
    d->tokens = malloc((size_t)SYNTHETIC_TOKENS * sizeof(uint16_t));
    d->labels = malloc((size_t)SYNTHETIC_TOKENS);
    if (!d->tokens || !d->labels) {
        snprintf(err, (size_t)err_len, "synthetic: cannot allocate %ld tokens", SYNTHETIC_TOKENS);
        return -1;
    }
    if (synthetic_generate(d->tokens, d->labels, SYNTHETIC_TOKENS, SYNTHETIC_SEED)) {
        snprintf(err, (size_t)err_len, "synthetic: generator failed");
        return -1;
    }
    d->n_tokens = SYNTHETIC_TOKENS;
    d->vocab = 256;
    d->n_label_classes = SYNTH_CLASSES;
    d->label_names = synthetic_label_names;
    return 0;
}

static int load_source(dataset *d, const char *source, int vocab, const char *data_dir,
                       char *err, int err_len)
{
    snprintf(d->source, sizeof(d->source), "%s", source);
    if (strcmp(source, "brown") == 0)
        return load_brown(d, data_dir, err, err_len);
    if (strcmp(source, "synthetic") == 0)
        return load_synthetic(d, err, err_len);
    if (ends_with(source, ".txt"))
        return load_text(d, source, err, err_len);
    if (ends_with(source, ".bin"))
        return load_bin(d, source, vocab, err, err_len);
    snprintf(err, (size_t)err_len,
             "data source '%s': expected brown, synthetic, or a path ending in .txt or .bin",
             source);
    return -1;
}

int load_eval_file(dataset **out, const char *path, int vocab, int seq_len, char *err,
                   int err_len)
{
    *out = NULL;
    dataset *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, (size_t)err_len, "out of memory loading '%s'", path);
        return -1;
    }
    if (load_source(d, path, vocab, NULL, err, err_len))
        goto fail;
    /* the whole file is held out: windows from its first token */
    d->train_end = 0;
    if (d->n_tokens < (long)seq_len + 1) {
        snprintf(err, (size_t)err_len, "%s: %ld tokens, fewer than one window of seq_len+1 = %ld",
                 path, d->n_tokens, (long)seq_len + 1);
        goto fail;
    }
    *out = d;
    return 0;
fail:
    free_dataset(&d);
    return -1;
}

int load_dataset(dataset **out, const char *source, int vocab, double val_fraction, int seq_len,
                 const char *data_dir, char *err, int err_len)
{
    *out = NULL;
    dataset *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, (size_t)err_len, "out of memory loading '%s'", source);
        return -1;
    }
    snprintf(d->source, sizeof(d->source), "%s", source);
    if (seq_len < 1) {
        snprintf(err, (size_t)err_len, "%s: seq_len %d must be at least 1", source, seq_len);
        goto fail;
    }
    if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
        snprintf(err, (size_t)err_len, "%s: val_fraction %g must be in (0, 1)", source,
                 val_fraction);
        goto fail;
    }

    if (load_source(d, source, vocab, data_dir, err, err_len))
        goto fail;

    /* The split: the held-out part is the LAST floor(n * val_fraction)
     * tokens, the training part everything before it.  A contiguous tail
     * (rather than scattered windows) keeps held-out text unseen in
     * training, up to the one boundary. */
    long n = d->n_tokens;
    long n_val = (long)((double)n * val_fraction);
    d->train_end = n - n_val;
    if (d->train_end < (long)seq_len + 1 || n_val < (long)seq_len + 1) {
        snprintf(err, (size_t)err_len,
                 "%s: %ld tokens split (val_fraction %g) into %ld for training and %ld held out; "
                 "each side needs at least seq_len+1 = %ld",
                 d->source, n, val_fraction, d->train_end, n_val, (long)seq_len + 1);
        goto fail;
    }
    *out = d;
    return 0;
fail:
    free_dataset(&d);
    return -1;
}

void free_dataset(dataset **d)
{
    if (!*d)
        return;
    free((*d)->tokens);
    free((*d)->labels);
    free(*d);
    *d = NULL;
}

/* Uniform in [0, bound) for bounds past 32 bits too (a .bin of more than
 * 4G tokens); below 2^32 this is exactly pcg32_bounded. */
static uint64_t bounded64(pcg32 *rng, uint64_t bound)
{
    if (bound <= UINT32_MAX)
        return pcg32_bounded(rng, (uint32_t)bound);
    uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound: reject below */
    for (;;) {
        uint64_t r = (uint64_t)pcg32_next(rng) << 32;
        r |= pcg32_next(rng);
        if (r >= threshold)
            return r % bound;
    }
}

long dataset_sample_offset(const dataset *d, int seq_len, uint64_t seed, long step,
                           long global_seq)
{
    /* Offsets 0 .. train_end - (S+1) inclusive: the sample never reaches
     * into the held-out tokens. */
    long span = d->train_end - seq_len;
    assert(span >= 1);
    pcg32 rng;
    pcg32_keyed(&rng, seed, DATA_KEY, (uint64_t)step, (uint64_t)global_seq);
    return (long)bounded64(&rng, (uint64_t)span);
}

void dataset_sample(const dataset *d, token_t *out, int seq_len, uint64_t seed, long step,
                    long global_seq)
{
    long off = dataset_sample_offset(d, seq_len, seed, step, global_seq);
    for (int i = 0; i <= seq_len; i++)
        out[i] = d->tokens[off + i];
}

long dataset_eval_windows(const dataset *d, int seq_len)
{
    /* Window w covers split tokens [w*S, w*S + S]; the last one must end
     * inside the split, so count = floor((n_val - 1) / S).  A tail of fewer
     * than S tokens is left unpredicted. */
    long n_val = d->n_tokens - d->train_end;
    return n_val < 1 ? 0 : (n_val - 1) / seq_len;
}

void dataset_eval_window(const dataset *d, token_t *out, int seq_len, long w)
{
    assert(w >= 0 && w < dataset_eval_windows(d, seq_len));
    const uint16_t *from = d->tokens + d->train_end + w * seq_len;
    for (int i = 0; i <= seq_len; i++)
        out[i] = from[i];
}

const uint8_t *dataset_eval_labels(const dataset *d, int seq_len, long w)
{
    assert(w >= 0 && w < dataset_eval_windows(d, seq_len));
    return d->labels ? d->labels + d->train_end + w * seq_len : NULL;
}
