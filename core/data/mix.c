/* Difficulty-mixed batches: the documents' scores and the two halves the
 * sampler draws from (mix.h, docs/data-mix.md). */
#include "core/data/mix.h"
#include "core/util/file.h"
#include "core/util/outfile.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(((data_mix *)0)->fingerprint) == DATA_FINGERPRINT_LEN,
               "data_mix's fingerprint holds a data fingerprint");

#define MIX_READ (1L << 20) /* tokens read at a time while scoring */

void mix_default_path(const corpus *c, char *out, int out_len)
{
    snprintf(out, (size_t)out_len, "%s.difficulty", c->path);
}

/* ---- scoring ----------------------------------------------------------- */

/* The whole of d's source, block by block, into f(tokens, n, at, arg). */
static int for_each_block(const dataset *d, int (*f)(const token_t *, long, long, void *),
                          void *arg, char *err, int err_len)
{
    const corpus *c = d->source;
    token_split all = { c, 0, c->n_tokens };
    token_t *buf = malloc((size_t)MIX_READ * sizeof(token_t));
    int rc = buf ? 0 : -ENOMEM;
    if (rc)
        snprintf(err, (size_t)err_len, "%s: out of memory", c->path);
    for (long at = 0; !rc && at < c->n_tokens; at += MIX_READ) {
        long n = c->n_tokens - at < MIX_READ ? c->n_tokens - at : MIX_READ;
        if (!(rc = dataset_read(d, &all, at, n, buf, err, err_len)))
            rc = f(buf, n, at, arg);
    }
    free(buf);
    return rc;
}

typedef struct scan {
    long *count;      /* [256 * 256] bigrams, [prev * 256 + next] */
    long *from;       /* [256] bigrams starting at a byte */
    long *start;      /* [cap] documents' first tokens */
    double *bits;     /* [cap] summed -log2 P of their tokens after the first */
    long n_docs, cap;
    token_t prev[2];  /* the two tokens before the block (prev[1] the last) */
    int pass;         /* 0: count and find documents, 1: sum the bits */
} scan;

/* A document starts at token 0 and after every "\n\n" at a token that is
 * not itself '\n' (so three newlines start one document, not two). */
static int scan_block(const token_t *t, long n, long at, void *arg)
{
    scan *s = arg;
    for (long i = 0; i < n; i++) {
        long k = at + i;
        token_t a = s->prev[1], b = t[i];
        bool starts = k == 0 || (s->prev[0] == '\n' && a == '\n' && b != '\n');
        if (s->pass == 0) {
            if (starts) {
                if (s->n_docs == s->cap) {
                    long cap = s->cap ? 2 * s->cap : 1024;
                    long *st = realloc(s->start, (size_t)cap * sizeof(long));
                    if (!st)
                        return -ENOMEM;
                    s->start = st;
                    s->cap = cap;
                }
                s->start[s->n_docs++] = k;
            } else {
                s->count[a * 256 + b]++;
                s->from[a]++;
            }
        } else {
            if (starts) {
                s->n_docs++;
            } else {
                double p = (double)(s->count[a * 256 + b] + 1) / (double)(s->from[a] + 256);
                s->bits[s->n_docs - 1] -= log2(p);
            }
        }
        s->prev[0] = a;
        s->prev[1] = b;
    }
    return 0;
}

static int write_scores(const dataset *d, const char *path, const scan *s, char *err,
                        int err_len)
{
    const corpus *c = d->source;
    char fp[DATA_FINGERPRINT_LEN];
    int rc = corpus_fingerprint(c, fp, sizeof(fp), err, err_len);
    if (rc)
        return rc;
    const char *inputs[] = { c->path };
    out_file o = { 0 };
    if ((rc = out_check(path, inputs, 1, err, err_len)) || (rc = out_open(&o, path, err, err_len)))
        return rc;
    fprintf(o.f, "# the difficulty of each document of %s (mode-exp score; docs/data-mix.md)\n"
                 "format %s\ncorpus %s\nfingerprint %s\nscorer %s\ndocuments %ld\n"
                 "# first_token tokens bits_per_token\n",
            c->path, MIX_FORMAT, c->path, fp, MIX_SCORER, s->n_docs);
    for (long i = 0; i < s->n_docs; i++) {
        long end = i + 1 < s->n_docs ? s->start[i + 1] : c->n_tokens;
        long n = end - s->start[i];
        double score = n > 1 ? s->bits[i] / (double)(n - 1) : 0.0;
        fprintf(o.f, "%ld %ld %.9g\n", s->start[i], n, score);
    }
    if (ferror(o.f)) {
        out_abort(&o);
        snprintf(err, (size_t)err_len, "%s: write failed", path);
        return -EIO;
    }
    return out_commit(&o, err, err_len);
}

int mix_score_write(const dataset *d, const char *path, long *n_docs, char *err, int err_len)
{
    const corpus *c = d->source;
    if (c->width != 1 || c->fd < 0) {
        snprintf(err, (size_t)err_len,
                 "%s: documents are known only in byte text (brown, a .txt: a blank line "
                 "between documents); a token file or the synthetic corpus keeps none",
                 c->path);
        return -EINVAL;
    }
    scan s = { 0 };
    s.count = calloc(256 * 256, sizeof(long));
    s.from = calloc(256, sizeof(long));
    int rc = s.count && s.from ? 0 : -ENOMEM;
    if (!rc)
        rc = for_each_block(d, scan_block, &s, err, err_len);
    if (!rc && !(s.bits = calloc((size_t)s.n_docs, sizeof(double))))
        rc = -ENOMEM;
    if (!rc) {
        *n_docs = s.n_docs;
        s.pass = 1;
        s.n_docs = 0;
        s.prev[0] = s.prev[1] = 0;
        rc = for_each_block(d, scan_block, &s, err, err_len);
    }
    if (rc == -ENOMEM)
        snprintf(err, (size_t)err_len, "%s: out of memory", c->path);
    if (!rc)
        rc = write_scores(d, path, &s, err, err_len);
    free(s.count);
    free(s.from);
    free(s.start);
    free(s.bits);
    return rc;
}

/* ---- the halves ------------------------------------------------------------ */

typedef struct doc {
    long first, n; /* in the file */
    double score;
    long index;
} doc;

static int by_score(const void *pa, const void *pb)
{
    const doc *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score < b->score ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static int by_position(const void *pa, const void *pb)
{
    const doc *a = pa, *b = pb;
    return (a->index > b->index) - (a->index < b->index);
}

/* "key value" of the header line, or -1 with err. */
static int header_line(FILE *f, const char *path, const char *key, char *value, size_t n,
                       char *err, int err_len)
{
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#')
            continue;
        line[strcspn(line, "\r\n")] = '\0';
        size_t k = strlen(key);
        if (strncmp(line, key, k) != 0 || line[k] != ' ') {
            snprintf(err, (size_t)err_len, "%s: expected '%s ...', found '%.80s'", path, key, line);
            return -EINVAL;
        }
        snprintf(value, n, "%s", line + k + 1);
        return 0;
    }
    snprintf(err, (size_t)err_len, "%s: ends before its '%s' line", path, key);
    return -EINVAL;
}

static int read_docs(FILE *f, const char *path, const dataset *d, doc **out, long *n_out,
                     char *err, int err_len)
{
    char v[512], fp[DATA_FINGERPRINT_LEN];
    const corpus *c = d->source;
    int rc = header_line(f, path, "format", v, sizeof(v), err, err_len);
    if (!rc && strcmp(v, MIX_FORMAT) != 0) {
        snprintf(err, (size_t)err_len, "%s: format '%s', expected '%s'", path, v, MIX_FORMAT);
        rc = -EINVAL;
    }
    if (!rc)
        rc = header_line(f, path, "corpus", v, sizeof(v), err, err_len);
    if (!rc)
        rc = header_line(f, path, "fingerprint", v, sizeof(v), err, err_len);
    if (!rc)
        rc = corpus_fingerprint(c, fp, sizeof(fp), err, err_len);
    if (!rc && strcmp(v, fp) != 0) {
        snprintf(err, (size_t)err_len,
                 "%s: stale: scored for a corpus of fingerprint '%s', %s is now '%s': run "
                 "mode-exp score again", path, v, c->path, fp);
        rc = -ESTALE;
    }
    if (!rc)
        rc = header_line(f, path, "scorer", v, sizeof(v), err, err_len);
    if (!rc && strcmp(v, MIX_SCORER) != 0) {
        snprintf(err, (size_t)err_len, "%s: stale: scored by '%s', this build scores by '%s': "
                 "run mode-exp score again", path, v, MIX_SCORER);
        rc = -ESTALE;
    }
    if (!rc)
        rc = header_line(f, path, "documents", v, sizeof(v), err, err_len);
    char *end = NULL;
    long n = rc ? 0 : strtol(v, &end, 10);
    if (!rc && (end == v || *end || n < 1 || n > c->n_tokens)) {
        snprintf(err, (size_t)err_len, "%s: documents '%s', expected 1 to %ld", path, v,
                 c->n_tokens);
        rc = -EINVAL;
    }
    doc *docs = rc ? NULL : calloc((size_t)n, sizeof(doc));
    if (!rc && !docs)
        rc = -ENOMEM;
    char line[256];
    long next = 0;
    for (long i = 0; !rc && i < n; i++) {
        doc *o = &docs[i];
        char extra;
        do {
            if (!fgets(line, sizeof(line), f)) {
                snprintf(err, (size_t)err_len, "%s: %ld documents declared, %ld found", path, n, i);
                rc = -EINVAL;
                break;
            }
        } while (line[0] == '#');
        if (rc)
            break;
        /* the documents tile the corpus in order, each scored finite */
        if (sscanf(line, "%ld %ld %lf %c", &o->first, &o->n, &o->score, &extra) != 3 ||
            o->first != next || o->n < 1 || o->n > c->n_tokens - next || !isfinite(o->score)) {
            line[strcspn(line, "\r\n")] = '\0';
            snprintf(err, (size_t)err_len,
                     "%s: document %ld is '%.80s', expected FIRST LENGTH SCORE with FIRST %ld, "
                     "LENGTH in 1..%ld and a finite score", path, i, line, next,
                     c->n_tokens - next);
            rc = -EINVAL;
        }
        o->index = i;
        next = o->first + o->n;
    }
    if (!rc && next != c->n_tokens) {
        snprintf(err, (size_t)err_len, "%s: the documents end at token %ld, the corpus at %ld",
                 path, next, c->n_tokens);
        rc = -EINVAL;
    }
    if (rc) {
        free(docs);
        return rc;
    }
    *out = docs;
    *n_out = n;
    return 0;
}

int dataset_use_mix(dataset *d, const char *path, int seq_len, char *err, int err_len)
{
    char why[600];
    FILE *f = file_fopen_regular(path, "r", why, sizeof(why));
    if (!f) {
        snprintf(err, (size_t)err_len, "data.difficulty: %s (data.mix = difficulty needs the "
                 "documents' scores: mode-exp score %s)", why, d->source->path);
        return -ENOENT;
    }
    doc *docs = NULL;
    long n = 0;
    int rc = read_docs(f, path, d, &docs, &n, err, err_len);
    fclose(f);
    data_mix *m = rc ? NULL : calloc(1, sizeof(*m));
    if (!rc && !m)
        rc = -ENOMEM;
    if (!rc)
        rc = file_fingerprint(path, m->fingerprint, sizeof(m->fingerprint), err, err_len);
    if (rc)
        goto fail;
    snprintf(m->path, sizeof(m->path), "%s", path);
    /* each document clipped to the training split; those that hold a window */
    long kept = 0, lo = d->train.first, hi = d->train.first + d->train.n_tokens;
    for (long i = 0; i < n; i++) {
        long a = docs[i].first > lo ? docs[i].first : lo;
        long b = docs[i].first + docs[i].n < hi ? docs[i].first + docs[i].n : hi;
        if (b - a >= (long)seq_len + 1) {
            docs[kept] = docs[i];
            docs[kept].first = a - lo;
            docs[kept].n = b - a;
            kept++;
        }
    }
    qsort(docs, (size_t)kept, sizeof(doc), by_score);
    long below = kept / 2;
    for (int h = 0; h < MIX_HALVES && !rc; h++) {
        doc *part = docs + (h == MIX_EASY ? 0 : below);
        long k = h == MIX_EASY ? below : kept - below;
        if (k < 1) {
            snprintf(err, (size_t)err_len,
                     "%s: %ld documents of the training split hold a window of data.seq_len + 1 "
                     "= %d tokens: none %s the median (two are needed)", path, kept, seq_len + 1,
                     h == MIX_EASY ? "below" : "above");
            rc = -EINVAL;
            break;
        }
        /* within a half, documents in corpus order: a window's offset does
         * not depend on how ties in the score were broken beyond that */
        qsort(part, (size_t)k, sizeof(doc), by_position);
        m->n_docs[h] = k;
        m->first[h] = malloc((size_t)k * sizeof(long));
        m->cum[h] = malloc((size_t)k * sizeof(long));
        if (!m->first[h] || !m->cum[h]) {
            rc = -ENOMEM;
            snprintf(err, (size_t)err_len, "%s: out of memory", path);
            break;
        }
        long total = 0;
        for (long i = 0; i < k; i++) {
            m->first[h][i] = part[i].first;
            total += part[i].n - seq_len; /* offsets first .. first + n - (S+1) */
            m->cum[h][i] = total;
        }
    }
    if (rc)
        goto fail;
    free(docs);
    free_data_mix(&d->mix);
    d->mix = m;
    return 0;
fail:
    free(docs);
    free_data_mix(&m);
    return rc;
}
