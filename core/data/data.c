/* Corpora read in place from read-only maps of their files, the train /
 * held-out split, training samples and evaluation windows (MODEL.md "Data";
 * data.h says what is checked when). */
#include "core/data/data.h"
#include "core/data/mix_draw.h"
#include "core/data/tokenizer.h"

#include "core/rng/pcg32.h"
#include "core/util/file.h"
#include "core/util/hash.h"

#include <assert.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- files --------------------------------------------------------------- */

/* Open the whole of a regular, non-empty file for pread(); *size is its
 * length.  A FIFO or a device is refused, never waited on. */
static int open_data_file(const char *path, int *fd_out, long *size, char *err, int err_len)
{
    *fd_out = -1;
    int fd = file_open_regular(path, err, err_len);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        snprintf(err, (size_t)err_len, "%s: cannot stat (%s)", path, strerror(e));
        close(fd);
        return -e;
    }
    if (st.st_size == 0) {
        snprintf(err, (size_t)err_len, "%s: file is empty", path);
        close(fd);
        return -EINVAL;
    }
    *fd_out = fd;
    *size = (long)st.st_size;
    return 0;
}

/* The bytes of c's file: its header and its tokens. */
static long corpus_bytes(const corpus *c)
{
    return c->header + c->n_tokens * c->width;
}

/* Bytes [at, at + n) of c's file into buf.  A file that ends before them
 * changed under the run (truncated): said so, naming the file. */
static int read_at(const corpus *c, uint8_t *buf, long at, long n, char *err, int err_len)
{
    long done = 0;
    while (done < n) {
        ssize_t got = pread(c->fd, buf + done, (size_t)(n - done), (off_t)(at + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            snprintf(err, (size_t)err_len, "%s: reading byte offset %ld failed (%s)", c->path,
                     at + done, strerror(e));
            return -e;
        }
        if (got == 0) {
            struct stat st;
            long now = fstat(c->fd, &st) == 0 ? (long)st.st_size : -1;
            snprintf(err, (size_t)err_len,
                     "%s: the file changed under the run: it ends at byte %ld, but it held %ld "
                     "bytes when it was opened (byte offset %ld is gone)", c->path, now,
                     corpus_bytes(c), at + done);
            return -EIO;
        }
        done += got;
    }
    return 0;
}

/* Training reads scattered samples of a page or two: no read-ahead around
 * them, which would read pages no sample asked for. */
static void advise_random(const token_split *s)
{
    const corpus *c = s->c;
    if (c->fd < 0 || s->n_tokens == 0)
        return;
    posix_fadvise(c->fd, (off_t)(c->header + s->first * c->width),
                  (off_t)s->n_tokens * c->width, POSIX_FADV_RANDOM);
}

static void free_corpus(corpus **c)
{
    if (!*c)
        return;
    if ((*c)->fd >= 0)
        close((*c)->fd);
    free((*c)->bytes);
    free((*c)->labels);
    free(*c);
    *c = NULL;
}

/* ---- fingerprints ---------------------------------------------------------- */

#define FINGERPRINT_BLOCK (64L << 10)

/* "bytes 6012345 fnv1a64 0123456789abcdef (whole)"; non-zero and err on a
 * read that fails. */
int corpus_fingerprint(const corpus *c, char *out, int out_len, char *err, int err_len)
{
    long size = corpus_bytes(c); /* an llm.c header too: the whole file */
    bool whole = size <= DATA_FINGERPRINT_WHOLE;
    uint64_t h = HASH_FNV1A64_OFFSET;
    if (c->fd < 0) {
        h = hash_fnv1a64(h, c->bytes, (size_t)size); /* in memory (synthetic): small */
        whole = true;
    } else {
        uint8_t *buf = malloc((size_t)FINGERPRINT_BLOCK);
        if (!buf) {
            snprintf(err, (size_t)err_len, "%s: out of memory", c->path);
            return -ENOMEM;
        }
        long blocks = whole ? (size + FINGERPRINT_BLOCK - 1) / FINGERPRINT_BLOCK
                            : DATA_FINGERPRINT_BLOCKS;
        int rc = 0;
        for (long b = 0; b < blocks && !rc; b++) {
            /* whole: consecutive blocks; sampled: block b starts at
             * b (size - block) / (blocks - 1), so the last ends at the end */
            long at = whole ? b * FINGERPRINT_BLOCK
                            : b * (size - FINGERPRINT_BLOCK) / (blocks - 1);
            long n = size - at < FINGERPRINT_BLOCK ? size - at : FINGERPRINT_BLOCK;
            if (!(rc = read_at(c, buf, at, n, err, err_len)))
                h = hash_fnv1a64(h, buf, (size_t)n);
        }
        free(buf);
        if (rc)
            return rc;
    }
    snprintf(out, (size_t)out_len, "bytes %ld fnv1a64 %016llx (%s)", size, (unsigned long long)h,
             whole ? "whole" : "sampled");
    return 0;
}

int dataset_fingerprint(const dataset *d, char *out, int out_len, char *err, int err_len)
{
    char a[DATA_FINGERPRINT_LEN], b[DATA_FINGERPRINT_LEN] = "";
    int rc = corpus_fingerprint(d->source, a, sizeof(a), err, err_len);
    if (!rc && d->held_out)
        rc = corpus_fingerprint(d->held_out, b, sizeof(b), err, err_len);
    if (rc)
        return rc;
    if (d->held_out)
        snprintf(out, (size_t)out_len, "%s: %s; %s: %s", d->source->path, a, d->held_out->path, b);
    else
        snprintf(out, (size_t)out_len, "%s: %s", d->source->path, a);
    if (d->tok) { /* "; tokenizer PATH: bytes ..." */
        char t[DATA_FINGERPRINT_LEN];
        if ((rc = file_fingerprint(d->tok_path, t, sizeof(t), err, err_len)))
            return rc;
        size_t at = strlen(out);
        snprintf(out + at, (size_t)out_len - at, "; tokenizer %s: %s", d->tok_path, t);
    }
    if (d->mix) { /* "; difficulty PATH: bytes ..." */
        size_t at = strlen(out);
        snprintf(out + at, (size_t)out_len - at, "; " DATA_FP_DIFFICULTY "%s: %s", d->mix->path,
                 d->mix->fingerprint);
    }
    return 0;
}

void dataset_describe(const dataset *d, const char *fingerprint, char *out, int out_len)
{
    snprintf(out, (size_t)out_len, "data.source=%s with %ld tokens held out%s%s\ndata=%s\n",
             d->source->path, d->eval.n_tokens, d->held_out ? " in " : "",
             d->held_out ? d->held_out->path : "", fingerprint);
}

/* ---- the sources -------------------------------------------------------- */

/* The n bytes of c's file after its header as its tokens, of a fixed width,
 * little-endian (1: text). */
static int take_tokens(corpus *c, long n, int width, const char *type, char *err, int err_len)
{
    if (n % width != 0) {
        snprintf(err, (size_t)err_len, "%s: %ld bytes is not a whole number of %s tokens",
                 c->path, n, type);
        return -EINVAL;
    }
    c->n_tokens = n / width;
    c->width = width;
    return 0;
}

/* A file of fixed-width little-endian tokens (width 1: text). */
static int open_tokens(corpus *c, const char *path, int width, const char *type, char *err,
                       int err_len)
{
    long n = 0;
    int rc = open_data_file(path, &c->fd, &n, err, err_len);
    return rc ? rc : take_tokens(c, n, width, type, err, err_len);
}

/* llm.c's token files (dev/data/data_common.py): LLMC_HEADER_BYTES of
 * little-endian int32, header[0] the magic, header[1] the version (which
 * the magic fixes), header[2] the token count, then the tokens. */
static const struct llmc_format {
    int32_t magic, version;
    int width;
    const char *type;
} llmc_formats[] = {
    { LLMC_MAGIC_U16, 1, 2, "uint16" }, /* GPT-2's tokens */
    { LLMC_MAGIC_U32, 7, 4, "uint32" }, /* Llama 3's */
};

static int32_t int32_le(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* A .bin is llm.c's when its first int32 is one of the magics; else it is
 * headerless uint16 tokens (nanoGPT's), unless its header reads as llm.c's
 * in all but the magic (a version of llm.c's, and the count of tokens of
 * that width that fill the file exactly): that is a bad magic, refused.
 * *f is NULL for a headerless file. */
static int probe_llmc(const corpus *c, long size, const struct llmc_format **f, char *err,
                      int err_len)
{
    *f = NULL;
    uint8_t h[12];
    if (size < (long)sizeof(h))
        return 0; /* too short for a header: tokens (open_tokens checks the rest) */
    int rc = read_at(c, h, 0, (long)sizeof(h), err, err_len);
    if (rc)
        return rc;
    int32_t magic = int32_le(h), version = int32_le(h + 4), count = int32_le(h + 8);
    const int n_formats = (int)(sizeof(llmc_formats) / sizeof(llmc_formats[0]));
    for (int i = 0; i < n_formats; i++)
        if (magic == llmc_formats[i].magic)
            *f = &llmc_formats[i];
    for (int i = 0; !*f && i < n_formats; i++) {
        const struct llmc_format *g = &llmc_formats[i];
        if (version == g->version && count >= 0 &&
            size == LLMC_HEADER_BYTES + (long)count * g->width) {
            snprintf(err, (size_t)err_len,
                     "%s: its header reads as an llm.c token file's (version %d, %d %s tokens, "
                     "which fill its %ld bytes exactly) but its magic is %d, neither %d "
                     "(version 1) nor %d (version 7)", c->path, (int)version, (int)count,
                     g->type, size, (int)magic, LLMC_MAGIC_U16, LLMC_MAGIC_U32);
            return -EINVAL;
        }
    }
    if (*f && version != (*f)->version) {
        snprintf(err, (size_t)err_len,
                 "%s: llm.c token file of magic %d and version %d: that magic goes with "
                 "version %d (%d: version 1, uint16 tokens; %d: version 7, uint32)", c->path,
                 (int)magic, (int)version, (int)(*f)->version, LLMC_MAGIC_U16, LLMC_MAGIC_U32);
        return -EINVAL;
    }
    if (!*f)
        return 0;
    if (count < 0) {
        snprintf(err, (size_t)err_len,
                 "%s: its llm.c header (magic %d, version %d) says %d tokens: expected a "
                 "count of 0 or more", c->path, (int)magic, (int)version, (int)count);
        return -EINVAL;
    }
    long want = LLMC_HEADER_BYTES + (long)count * (*f)->width;
    if (size != want) {
        snprintf(err, (size_t)err_len,
                 "%s: %ld bytes, but its llm.c header (magic %d, version %d) says %d %s tokens, "
                 "%d + %d x %d = %ld bytes: %s", c->path, size, (int)magic, (int)version,
                 (int)count, (*f)->type, LLMC_HEADER_BYTES, (int)count, (*f)->width, want,
                 size < want ? "the file is truncated" : "the file is longer than its header says");
        return -EINVAL;
    }
    return 0;
}

/* A token file: .u32 (headerless uint32), or .bin: llm.c's (uint16 or
 * uint32 after a header) or headerless uint16 (nanoGPT's, mode-exp
 * tokenize's).  uint16 tokens hold a vocab of at most 65536. */
static int open_token_file(corpus *c, const char *path, int vocab, char *err, int err_len)
{
    if (vocab < 1) {
        snprintf(err, (size_t)err_len, "%s: vocab %d must be at least 1", path, vocab);
        return -EINVAL;
    }
    if (ends_with(path, ".u32")) /* the extension declares the width (data.h) */
        return open_tokens(c, path, 4, "uint32", err, err_len);
    long size = 0;
    int rc = open_data_file(path, &c->fd, &size, err, err_len);
    const struct llmc_format *f = NULL;
    if (!rc)
        rc = probe_llmc(c, size, &f, err, err_len);
    if (rc)
        return rc;
    if ((!f || f->width == 2) && vocab > 65536) {
        snprintf(err, (size_t)err_len,
                 "%s: vocab %d does not fit uint16 tokens (at most 65536); store the tokens "
                 "as little-endian uint32 in a .u32 file (or an llm.c file of version 7)", path,
                 vocab);
        return -EINVAL;
    }
    if (!f)
        return take_tokens(c, size, 2, "uint16", err, err_len);
    c->header = LLMC_HEADER_BYTES; /* the header's count matched the size */
    return take_tokens(c, size - LLMC_HEADER_BYTES, f->width, f->type, err, err_len);
}

/* Brown's classes, one byte per token of c, from the file pos: read and
 * checked whole (6 MB for Brown's bytes, less for its subword tokens), as a
 * class out of range would index past the analysis tables. */
static int read_labels(corpus *c, const char *pos, char *err, int err_len)
{
    corpus lc = { .fd = -1, .width = 1 };
    long n = 0;
    snprintf(lc.path, sizeof(lc.path), "%s", pos);
    int rc = open_data_file(pos, &lc.fd, &n, err, err_len);
    if (!rc && n != c->n_tokens) {
        const char *unit = c->width == 1 ? "byte" : "token";
        snprintf(err, (size_t)err_len, "%s: %ld labels for the %ld %ss of %s (expected one per %s)",
                 pos, n, c->n_tokens, unit, c->path, unit);
        rc = -EINVAL;
    }
    if (!rc && !(c->labels = malloc((size_t)(n > 0 ? n : 1)))) {
        snprintf(err, (size_t)err_len, "%s: out of memory for its %ld labels", pos, n);
        rc = -ENOMEM;
    }
    lc.n_tokens = n;
    if (!rc)
        rc = read_at(&lc, c->labels, 0, n, err, err_len);
    if (lc.fd >= 0)
        close(lc.fd);
    if (rc)
        return rc;
    const uint8_t *labels = c->labels;
    for (long i = 0; i < n; i++) {
        if (labels[i] >= BROWN_CLASSES) {
            snprintf(err, (size_t)err_len, "%s: label at offset %ld is %d, not below %d classes",
                     pos, i, labels[i], BROWN_CLASSES);
            return -EINVAL;
        }
    }
    c->n_label_classes = BROWN_CLASSES;
    c->label_names = brown_label_names;
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
                 "%s: cannot open it (%s); run scripts/fetch-brown.sh to fetch the Brown corpus",
                 missing, strerror(errno));
        return -ENOENT;
    }
    int rc = open_tokens(c, c->path, 1, "byte", err, err_len);
    if (rc)
        return rc;
    return read_labels(c, pos, err, err_len);
}

static int load_synthetic(corpus *c, char *err, int err_len)
{
    c->bytes = malloc((size_t)SYNTHETIC_TOKENS);
    c->labels = malloc((size_t)SYNTHETIC_TOKENS);
    if (!c->bytes || !c->labels) {
        snprintf(err, (size_t)err_len, "synthetic: cannot allocate %ld tokens", SYNTHETIC_TOKENS);
        return -ENOMEM;
    }
    if (synthetic_generate(c->bytes, c->labels, SYNTHETIC_TOKENS, SYNTHETIC_SEED)) {
        snprintf(err, (size_t)err_len, "synthetic: generator failed");
        return -EINVAL;
    }
    c->n_tokens = SYNTHETIC_TOKENS;
    c->width = 1;
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
    c->fd = -1;
    snprintf(c->path, sizeof(c->path), "%s", source);
    int rc = -EINVAL;
    *vocab_out = 256;
    if (strcmp(source, "brown") == 0) {
        rc = load_brown(c, data_dir, err, err_len);
    } else if (strcmp(source, "synthetic") == 0) {
        rc = load_synthetic(c, err, err_len);
    } else if (ends_with(source, ".txt")) {
        rc = open_tokens(c, source, 1, "byte", err, err_len);
    } else if (ends_with(source, ".bin") || ends_with(source, ".u32")) {
        rc = open_token_file(c, source, vocab, err, err_len);
        /* the tokens' Brown classes beside them (mode-exp tokenize --labels) */
        char pos[sizeof(c->path) + 8];
        struct stat st;
        snprintf(pos, sizeof(pos), "%.*s.pos", (int)(strlen(source) - 4), source);
        if (!rc && stat(pos, &st) == 0)
            rc = read_labels(c, pos, err, err_len);
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
    if (d->source->width == 1) { /* bytes: one each */
        if (!(d->token_bytes = malloc(256 * sizeof(float)))) {
            rc = -ENOMEM;
            goto fail;
        }
        for (int i = 0; i < 256; i++)
            d->token_bytes[i] = 1.0f;
    }
    *out = d;
    return 0;
fail:
    free_dataset(&d);
    return rc;
}

int file_fingerprint(const char *path, char *out, int out_len, char *err, int err_len)
{
    corpus c = { .fd = -1, .width = 1 };
    snprintf(c.path, sizeof(c.path), "%s", path);
    long n = 0;
    int rc = open_data_file(path, &c.fd, &n, err, err_len);
    c.n_tokens = n;
    if (!rc)
        rc = corpus_fingerprint(&c, out, out_len, err, err_len);
    if (c.fd >= 0)
        close(c.fd);
    return rc;
}

int dataset_use_tokenizer(dataset *d, const char *path, char *err, int err_len)
{
    if (d->source->width == 1) {
        snprintf(err, (size_t)err_len,
                 "data.tokenizer %s: the source %s is bytes (V 256); a tokenizer goes with the "
                 "token file it wrote (.bin or .u32: mode-exp tokenize)", path, d->source->path);
        return -EINVAL;
    }
    tokenizer *t = NULL;
    int rc = tokenizer_load(&t, path, err, err_len);
    if (rc)
        return rc;
    if (tokenizer_vocab(t) != d->vocab) {
        snprintf(err, (size_t)err_len,
                 "data.tokenizer %s has %d pieces, data.vocab is %d: not the tokenizer of these "
                 "tokens", path, tokenizer_vocab(t), d->vocab);
        tokenizer_free(&t);
        return -EINVAL;
    }
    float *b = malloc((size_t)d->vocab * sizeof(float));
    if (!b) {
        tokenizer_free(&t);
        return -ENOMEM;
    }
    for (int i = 0; i < d->vocab; i++)
        b[i] = (float)tokenizer_piece_bytes(t, i);
    free(d->token_bytes);
    d->token_bytes = b;
    d->tok = t;
    snprintf(d->tok_path, sizeof(d->tok_path), "%s", path);
    return 0;
}

void free_dataset(dataset **d)
{
    if (!*d)
        return;
    free((*d)->token_bytes);
    tokenizer_free(&(*d)->tok);
    free_data_mix(&(*d)->mix);
    free_corpus(&(*d)->source);
    free_corpus(&(*d)->held_out);
    free(*d);
    *d = NULL;
}

/* ---- reading tokens ------------------------------------------------------ */

/* Token i of the little-endian tokens at p, whatever the host. */
static token_t token_at(const uint8_t *p, int width, long i)
{
    p += (size_t)i * (size_t)width;
    switch (width) {
    case 1: return p[0];
    case 2: return (token_t)p[0] | (token_t)p[1] << 8;
    default: return (token_t)p[0] | (token_t)p[1] << 8 | (token_t)p[2] << 16 | (token_t)p[3] << 24;
    }
}

/* Tokens are read from files in chunks of this many bytes (on the stack). */
#define READ_CHUNK 16384

int dataset_read(const dataset *d, const token_split *s, long at, long n, token_t *out,
                 char *err, int err_len)
{
    assert(at >= 0 && n >= 0 && at + n <= s->n_tokens);
    const corpus *c = s->c;
    uint8_t chunk[READ_CHUNK];
    long per = READ_CHUNK / c->width;
    for (long i0 = 0; i0 < n; i0 += per) {
        long m = n - i0 < per ? n - i0 : per, k0 = s->first + at + i0; /* in the file */
        const uint8_t *p = c->bytes ? c->bytes + (size_t)k0 * (size_t)c->width : chunk;
        int rc = c->bytes ? 0 : read_at(c, chunk, c->header + k0 * c->width, m * c->width, err,
                                        err_len);
        if (rc)
            return rc;
        for (long i = 0; i < m; i++) {
            token_t v = token_at(p, c->width, i);
            out[i0 + i] = v;
            if (v >= (token_t)d->vocab) {
                long k = k0 + i;
                snprintf(err, (size_t)err_len,
                         "%s: token %ld (byte offset %ld) is %lu, not below vocab %d", c->path, k,
                         c->header + k * c->width, (unsigned long)v, d->vocab);
                return -ERANGE;
            }
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
    if (d->mix) { /* even rows below the median, odd rows above (mix.h) */
        int half = (int)(global_seq & 1);
        long r = (long)bounded64(&rng, (uint64_t)mix_windows(d->mix, half));
        return mix_window_offset(d->mix, half, r);
    }
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
