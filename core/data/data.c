/* Corpora read in place from read-only maps of their files, the train /
 * held-out split, training samples and evaluation windows (MODEL.md "Data";
 * data.h says what is checked when). */
#include "core/data/data.h"

#include "core/rng/pcg32.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- memory ------------------------------------------------------------- */

/* Map the whole of a regular, non-empty file read-only.  The map outlives
 * the descriptor, which is closed here. */
static int map_file(data_region *r, const char *path, char *err, int err_len)
{
    *r = (data_region){ 0 };
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, (size_t)err_len, "%s: cannot open (%s)", path, strerror(e));
        return -e;
    }
    int rc = -EINVAL;
    struct stat st;
    void *addr;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, (size_t)err_len, "%s: not a regular file", path);
        goto fail;
    }
    if (st.st_size == 0) {
        snprintf(err, (size_t)err_len, "%s: file is empty", path);
        goto fail;
    }
    addr = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
        rc = -errno;
        snprintf(err, (size_t)err_len, "%s: cannot map its %lld bytes (%s)", path,
                 (long long)st.st_size, strerror(-rc));
        goto fail;
    }
    *r = (data_region){ .addr = addr, .len = (size_t)st.st_size, .mapped = true };
    rc = 0;
fail:
    close(fd);
    return rc;
}

static void free_region(data_region *r)
{
    if (r->mapped)
        munmap(r->addr, r->len);
    else
        free(r->addr);
    *r = (data_region){ 0 };
}

/* Training reads scattered samples of a page or two: no read-ahead around
 * them, which would read (and map into the rank) pages no sample asked for. */
static void advise_random(const token_split *s)
{
    const corpus *c = s->c;
    if (!c->tokens_mem.mapped || s->n_tokens == 0)
        return;
    long page = sysconf(_SC_PAGESIZE);
    size_t from = (size_t)s->first * (size_t)c->width;
    size_t to = (size_t)(s->first + s->n_tokens) * (size_t)c->width;
    from -= from % (size_t)page; /* posix_madvise wants a page-aligned start */
    posix_madvise((uint8_t *)c->tokens_mem.addr + from, to - from, POSIX_MADV_RANDOM);
}

static void free_corpus(corpus **c)
{
    if (!*c)
        return;
    free_region(&(*c)->tokens_mem);
    free_region(&(*c)->labels_mem);
    free(*c);
    *c = NULL;
}

/* ---- the sources -------------------------------------------------------- */

/* A file of fixed-width little-endian tokens (width 1: text). */
static int map_tokens(corpus *c, const char *path, int width, const char *type, char *err,
                      int err_len)
{
    int rc = map_file(&c->tokens_mem, path, err, err_len);
    if (rc)
        return rc;
    size_t n = c->tokens_mem.len;
    if (n % (size_t)width != 0) {
        snprintf(err, (size_t)err_len, "%s: %zu bytes is not a whole number of %s tokens", path,
                 n, type);
        return -EINVAL;
    }
    c->bytes = c->tokens_mem.addr;
    c->n_tokens = (long)(n / (size_t)width);
    c->width = width;
    return 0;
}

static int load_brown(corpus *c, const char *data_dir, char *err, int err_len)
{
    if (!data_dir) {
        const char *env = getenv("MODE_DATA");
        data_dir = env && *env ? env : "data";
    }
    char pos[sizeof(c->path)];
    if (snprintf(c->path, sizeof(c->path), "%s/brown.txt", data_dir) >= (int)sizeof(c->path)
        || snprintf(pos, sizeof(pos), "%s/brown.pos", data_dir) >= (int)sizeof(pos)) {
        snprintf(err, (size_t)err_len, "data folder '%s': path too long", data_dir);
        return -ENAMETOOLONG;
    }
    struct stat st;
    const char *missing = stat(c->path, &st) != 0 ? c->path : stat(pos, &st) != 0 ? pos : NULL;
    if (missing) {
        snprintf(err, (size_t)err_len,
                 "%s: cannot open (%s); run scripts/fetch-brown.sh to fetch the Brown corpus",
                 missing, strerror(errno));
        return -ENOENT;
    }
    int rc = map_tokens(c, c->path, 1, "byte", err, err_len);
    if (!rc)
        rc = map_file(&c->labels_mem, pos, err, err_len);
    if (rc)
        return rc;
    long n = (long)c->labels_mem.len;
    if (n != c->n_tokens) {
        snprintf(err, (size_t)err_len,
                 "%s: %ld labels for the %ld bytes of %s (expected one per byte)", pos, n,
                 c->n_tokens, c->path);
        return -EINVAL;
    }
    /* Labels are checked whole: the corpus is small (6 MB), and a class out
     * of range would index past the analysis tables. */
    const uint8_t *labels = c->labels_mem.addr;
    for (long i = 0; i < n; i++) {
        if (labels[i] >= BROWN_CLASSES) {
            snprintf(err, (size_t)err_len, "%s: label at offset %ld is %d, not below %d classes",
                     pos, i, labels[i], BROWN_CLASSES);
            return -EINVAL;
        }
    }
    c->labels = labels;
    c->n_label_classes = BROWN_CLASSES;
    c->label_names = brown_label_names;
    return 0;
}

static int load_synthetic(corpus *c, char *err, int err_len)
{
    c->tokens_mem = (data_region){ .addr = malloc((size_t)SYNTHETIC_TOKENS),
                                   .len = (size_t)SYNTHETIC_TOKENS };
    c->labels_mem = (data_region){ .addr = malloc((size_t)SYNTHETIC_TOKENS),
                                   .len = (size_t)SYNTHETIC_TOKENS };
    if (!c->tokens_mem.addr || !c->labels_mem.addr) {
        snprintf(err, (size_t)err_len, "synthetic: cannot allocate %ld tokens", SYNTHETIC_TOKENS);
        return -ENOMEM;
    }
    if (synthetic_generate(c->tokens_mem.addr, c->labels_mem.addr, SYNTHETIC_TOKENS,
                           SYNTHETIC_SEED)) {
        snprintf(err, (size_t)err_len, "synthetic: generator failed");
        return -EINVAL;
    }
    c->bytes = c->tokens_mem.addr;
    c->n_tokens = SYNTHETIC_TOKENS;
    c->width = 1;
    c->labels = c->labels_mem.addr;
    c->n_label_classes = SYNTH_CLASSES;
    c->label_names = synthetic_label_names;
    return 0;
}

/* The corpus a source names, and the V its tokens are checked against
 * (256 for text, vocab for token files). */
static int load_corpus(corpus **out, int *vocab_out, const char *source, int vocab,
                       const char *data_dir, char *err, int err_len)
{
    *out = NULL;
    corpus *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, (size_t)err_len, "%s: out of memory", source);
        return -ENOMEM;
    }
    snprintf(c->path, sizeof(c->path), "%s", source);
    int rc = -EINVAL;
    *vocab_out = 256;
    if (strcmp(source, "brown") == 0) {
        rc = load_brown(c, data_dir, err, err_len);
    } else if (strcmp(source, "synthetic") == 0) {
        rc = load_synthetic(c, err, err_len);
    } else if (ends_with(source, ".txt")) {
        rc = map_tokens(c, source, 1, "byte", err, err_len);
    } else if (ends_with(source, ".bin") || ends_with(source, ".u32")) {
        /* the extension declares the width (data.h) */
        bool wide = ends_with(source, ".u32");
        if (vocab < 1)
            snprintf(err, (size_t)err_len, "%s: vocab %d must be at least 1", source, vocab);
        else if (!wide && vocab > 65536)
            snprintf(err, (size_t)err_len,
                     "%s: vocab %d does not fit uint16 tokens (at most 65536); store the tokens "
                     "as little-endian uint32 in a .u32 file", source, vocab);
        else
            rc = map_tokens(c, source, wide ? 4 : 2, wide ? "uint32" : "uint16", err, err_len);
        *vocab_out = vocab;
    } else {
        snprintf(err, (size_t)err_len,
                 "data source '%s': expected brown, synthetic, or a path ending in .txt, .bin or "
                 ".u32", source);
    }
    if (rc) {
        free_corpus(&c);
        return rc;
    }
    *out = c;
    return 0;
}

/* ---- datasets ------------------------------------------------------------ */

int load_eval_file(dataset **out, const char *path, int vocab, int seq_len, char *err,
                   int err_len)
{
    *out = NULL;
    dataset *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, (size_t)err_len, "out of memory loading '%s'", path);
        return -ENOMEM;
    }
    int rc = load_corpus(&d->source, &d->vocab, path, vocab, NULL, err, err_len);
    if (rc)
        goto fail;
    /* the whole file is held out: windows from its first token */
    const corpus *c = d->source;
    d->train = (token_split){ c, 0, 0 };
    d->eval = (token_split){ c, 0, c->n_tokens };
    if (c->n_tokens < (long)seq_len + 1) {
        snprintf(err, (size_t)err_len, "%s: %ld tokens, fewer than one window of seq_len+1 = %ld",
                 c->path, c->n_tokens, (long)seq_len + 1);
        rc = -EINVAL;
        goto fail;
    }
    *out = d;
    return 0;
fail:
    free_dataset(&d);
    return rc;
}

/* Text and token ids do not mix: a byte of text is not a token of V. */
static const char *corpus_kind(const corpus *c)
{
    return c->width == 1 ? "byte text" : "token ids";
}

/* Training samples all of source, the held-out windows are all of
 * val_source. */
static int split_files(dataset *d, const char *val_source, int vocab, int seq_len,
                       const char *data_dir, char *err, int err_len)
{
    int held_vocab;
    int rc = load_corpus(&d->held_out, &held_vocab, val_source, vocab, data_dir, err, err_len);
    if (rc)
        return rc;
    const corpus *c = d->source, *h = d->held_out;
    if (c->width == 1 ? h->width != 1 : h->width == 1) {
        snprintf(err, (size_t)err_len,
                 "%s: %s, but the source %s is %s: the held-out file must be of the same kind",
                 h->path, corpus_kind(h), c->path, corpus_kind(c));
        return -EINVAL;
    }
    d->train = (token_split){ c, 0, c->n_tokens };
    d->eval = (token_split){ h, 0, h->n_tokens };
    const token_split *short_split = c->n_tokens < (long)seq_len + 1   ? &d->train
                                     : h->n_tokens < (long)seq_len + 1 ? &d->eval
                                                                       : NULL;
    if (short_split) {
        snprintf(err, (size_t)err_len, "%s: %ld tokens, fewer than one %s of seq_len+1 = %ld",
                 short_split->c->path, short_split->n_tokens,
                 short_split == &d->train ? "training sample" : "held-out window",
                 (long)seq_len + 1);
        return -EINVAL;
    }
    return 0;
}

/* The split: the held-out part is the LAST floor(n * val_fraction) tokens,
 * the training part everything before it.  A contiguous tail (rather than
 * scattered windows) keeps held-out text unseen in training, up to the one
 * boundary. */
static int split_tail(dataset *d, double val_fraction, int seq_len, char *err, int err_len)
{
    const corpus *c = d->source;
    long n = c->n_tokens, n_val = (long)((double)n * val_fraction);
    d->train = (token_split){ c, 0, n - n_val };
    d->eval = (token_split){ c, n - n_val, n_val };
    if (d->train.n_tokens < (long)seq_len + 1 || n_val < (long)seq_len + 1) {
        snprintf(err, (size_t)err_len,
                 "%s: %ld tokens split (val_fraction %g) into %ld for training and %ld held out; "
                 "each side needs at least seq_len+1 = %ld",
                 c->path, n, val_fraction, d->train.n_tokens, n_val, (long)seq_len + 1);
        return -EINVAL;
    }
    return 0;
}

int load_dataset(dataset **out, const char *source, const char *val_source, int vocab,
                 double val_fraction, int seq_len, const char *data_dir, char *err,
                 int err_len)
{
    *out = NULL;
    dataset *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, (size_t)err_len, "out of memory loading '%s'", source);
        return -ENOMEM;
    }
    int rc = -EINVAL;
    if (seq_len < 1) {
        snprintf(err, (size_t)err_len, "%s: seq_len %d must be at least 1", source, seq_len);
        goto fail;
    }
    bool held_out = val_source && strcmp(val_source, "none") != 0;
    if (!held_out && !(val_fraction > 0.0 && val_fraction < 1.0)) { /* before any file */
        snprintf(err, (size_t)err_len, "%s: val_fraction %g must be in (0, 1)", source,
                 val_fraction);
        goto fail;
    }
    if ((rc = load_corpus(&d->source, &d->vocab, source, vocab, data_dir, err, err_len)))
        goto fail;
    rc = held_out ? split_files(d, val_source, vocab, seq_len, data_dir, err, err_len)
                  : split_tail(d, val_fraction, seq_len, err, err_len);
    if (rc)
        goto fail;
    advise_random(&d->train);
    *out = d;
    return 0;
fail:
    free_dataset(&d);
    return rc;
}

void free_dataset(dataset **d)
{
    if (!*d)
        return;
    free_corpus(&(*d)->source);
    free_corpus(&(*d)->held_out);
    free(*d);
    *d = NULL;
}

/* ---- reading tokens ------------------------------------------------------ */

/* Token i of c, little-endian whatever the host. */
static token_t token_at(const corpus *c, long i)
{
    const uint8_t *p = c->bytes + (size_t)i * (size_t)c->width;
    switch (c->width) {
    case 1: return p[0];
    case 2: return (token_t)p[0] | (token_t)p[1] << 8;
    default: return (token_t)p[0] | (token_t)p[1] << 8 | (token_t)p[2] << 16 | (token_t)p[3] << 24;
    }
}

int dataset_read(const dataset *d, const token_split *s, long at, long n, token_t *out,
                 char *err, int err_len)
{
    assert(at >= 0 && n >= 0 && at + n <= s->n_tokens);
    const corpus *c = s->c;
    for (long i = 0; i < n; i++) {
        long k = s->first + at + i; /* in the file */
        out[i] = token_at(c, k);
        if (out[i] >= (token_t)d->vocab) {
            snprintf(err, (size_t)err_len,
                     "%s: token %ld (byte offset %ld) is %lu, not below vocab %d", c->path, k,
                     k * c->width, (unsigned long)out[i], d->vocab);
            return -ERANGE;
        }
    }
    return 0;
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
    /* Offsets 0 .. n_train - (S+1) inclusive: the sample never reaches
     * into the held-out tokens. */
    long span = d->train.n_tokens - seq_len;
    assert(span >= 1);
    pcg32 rng;
    pcg32_keyed(&rng, seed, DATA_KEY, (uint64_t)step, (uint64_t)global_seq);
    return (long)bounded64(&rng, (uint64_t)span);
}

int dataset_sample(const dataset *d, token_t *out, int seq_len, uint64_t seed, long step,
                   long global_seq, char *err, int err_len)
{
    long off = dataset_sample_offset(d, seq_len, seed, step, global_seq);
    return dataset_read(d, &d->train, off, (long)seq_len + 1, out, err, err_len);
}

long dataset_eval_windows(const dataset *d, int seq_len)
{
    /* Window w covers split tokens [w*S, w*S + S]; the last one must end
     * inside the split, so count = floor((n_val - 1) / S).  A tail of fewer
     * than S tokens is left unpredicted. */
    long n_val = d->eval.n_tokens;
    return n_val < 1 ? 0 : (n_val - 1) / seq_len;
}

int dataset_eval_window(const dataset *d, token_t *out, int seq_len, long w, char *err,
                        int err_len)
{
    assert(w >= 0 && w < dataset_eval_windows(d, seq_len));
    return dataset_read(d, &d->eval, w * seq_len, (long)seq_len + 1, out, err, err_len);
}

const uint8_t *dataset_eval_labels(const dataset *d, int seq_len, long w)
{
    assert(w >= 0 && w < dataset_eval_windows(d, seq_len));
    const corpus *c = d->eval.c;
    return c->labels ? c->labels + d->eval.first + w * seq_len : NULL;
}
