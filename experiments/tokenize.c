/* mode-exp tokenize: a SentencePiece model trained on a text, the text as
 * its tokens, and (with labels) each token's class (docs/tokens.md).
 *
 *   mode-exp tokenize TEXT OUT --vocab V [--type bpe|unigram] [--labels POS]
 *   mode-exp tokenize brown --vocab V [--type ...]     (data/brown.txt and .pos)
 *
 * writes OUT.model (and OUT.vocab), OUT.bin (uint16; OUT.u32 past 65536),
 * and OUT.pos with labels: the class of the first byte of each token that
 * is not a space, else the space class.  The tokens must decode to the text
 * byte for byte, else nothing is written. */
#include "experiments/cli.h"

#include "core/data/data.h"
#include "core/data/tokenizer.h"
#include "core/util/file.h"
#include "core/util/num.h"
#include "core/util/outfile.h"
#include "core/util/signals.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: mode-exp tokenize TEXT OUT --vocab V [--type bpe|unigram] [--labels POS]\n"
    "       mode-exp tokenize brown --vocab V [--type bpe|unigram]\n"
    "  Trains a SentencePiece model of V pieces on TEXT (byte fallback, no normalisation:\n"
    "  any text round-trips) and writes OUT.model, OUT.bin (OUT.u32 past 65536 pieces) and,\n"
    "  with --labels (one class byte per text byte, as brown.pos), OUT.pos: one class per\n"
    "  token.  `brown`: data/brown.txt with data/brown.pos into data/brown-<type><V>.*\n"
    "  ($MODE_DATA for data).  Use OUT.bin as data.source, V as data.vocab and OUT.model\n"
    "  as data.tokenizer.\n";

/* A new file of the set: data into a temporary beside path (outfile.h). */
static int write_member(out_file *o, const char *path, const void *data, size_t n, char *err,
                        int err_len)
{
    int rc = out_open(o, path, err, err_len);
    if (!rc && fwrite(data, 1, n, o->f) != n) {
        snprintf(err, (size_t)err_len, "%s: writing it failed (%s); the file there before, if "
                 "any, is unchanged", path, strerror(errno));
        out_abort(o);
        rc = -EIO;
    }
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *text = NULL, *out = NULL, *labels = NULL, *type = "bpe";
    long vocab = 0;
    const char *given[3] = { 0 }; /* --vocab, --type, --labels */
    for (int i = 2; i < argc; i++) {
        int k = !strcmp(argv[i], "--vocab") ? 0 : !strcmp(argv[i], "--type") ? 1
                : !strcmp(argv[i], "--labels") ? 2 : -1;
        if (k >= 0 && i + 1 < argc && given[k]) {
            /* the last would win over the first without a word */
            fprintf(stderr, "mode-exp tokenize: %s given twice (%s, then %s): give each option "
                    "once\n", argv[i], given[k], argv[i + 1]);
            return 2;
        }
        if (k >= 0 && i + 1 < argc)
            given[k] = argv[i + 1];
        if (k == 0 && i + 1 < argc)
            vocab = num_parse_long(argv[++i], 260, 1L << 20, &vocab) ? vocab : -1;
        else if (k == 1 && i + 1 < argc)
            type = argv[++i];
        else if (k == 2 && i + 1 < argc)
            labels = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (argv[i][0] == '-' || (text && out)) {
            fprintf(stderr, "mode-exp tokenize: unexpected '%s'\n%s", argv[i], usage);
            return 2;
        } else if (!text)
            text = argv[i];
        else
            out = argv[i];
    }
    if (text && !strcmp(text, "brown") && !out && labels) {
        fprintf(stderr, "mode-exp tokenize: brown takes its labels from brown.pos beside "
                        "brown.txt, so --labels %s would be ignored: give TEXT OUT --labels POS "
                        "for other labels\n", labels);
        return 2;
    }
    char bt[600], bp[600], bo[600];
    if (text && !strcmp(text, "brown") && !out) {
        const char *env = getenv("MODE_DATA"), *dir = env && *env ? env : "data";
        snprintf(bt, sizeof(bt), "%s/brown.txt", dir);
        snprintf(bp, sizeof(bp), "%s/brown.pos", dir);
        snprintf(bo, sizeof(bo), "%s/brown-%s%ld", dir, type, vocab);
        text = bt, labels = bp, out = bo;
    }
    if (!text || !out || vocab < 260 || vocab > (1L << 20) ||
        (strcmp(type, "bpe") && strcmp(type, "unigram"))) {
        fprintf(stderr, "mode-exp tokenize: expected TEXT OUT (or brown), --vocab from 260 "
                        "(the 256 byte pieces and the control pieces) to %ld, --type bpe or "
                        "unigram\n%s", 1L << 20, usage);
        return 2;
    }
    /* the set OUT.model, OUT.vocab, OUT.bin (.u32), OUT.pos is replaced whole
     * or not at all (core/util/outfile.h): each goes to a temporary beside
     * OUT and all are renamed together at the end; a stop signal before
     * then (SentencePiece's training is not interrupted: the signal is
     * honoured when it returns) leaves the old set untouched */
    char err[2048], mfile[700], vfile[700], tokens[700], pos[700], stale[700];
    snprintf(mfile, sizeof(mfile), "%s.model", out);
    snprintf(vfile, sizeof(vfile), "%s.vocab", out);
    snprintf(tokens, sizeof(tokens), "%s.%s", out, vocab > 65536 ? "u32" : "bin");
    snprintf(stale, sizeof(stale), "%s.%s", out, vocab > 65536 ? "bin" : "u32");
    snprintf(pos, sizeof(pos), "%s.pos", out);
    const char *inputs[] = { text, labels };
    const char *members[] = { mfile, vfile, tokens, pos, stale };
    for (int i = 0; i < 5; i++)
        if (out_check(members[i], inputs, 2, err, sizeof(err))) {
            fprintf(stderr, "mode-exp tokenize: %s\n", err);
            return 2;
        }
    out_file set[4] = { 0 };
    int n_set = 0;
    stop_signals_install();
    char *txt = NULL, *lab = NULL, *mbytes = NULL, *listing = NULL;
    int rc;
    size_t un = 0, unl = 0, model_len = 0, listing_len = 0;
    /* TEXT and POS through the one checked open (a FIFO or a folder is
     * refused at once); SentencePiece is handed the bytes, never the path */
    rc = file_read_all(text, &txt, &un, err, sizeof(err));
    if (!rc && labels && !(rc = file_read_all(labels, &lab, &unl, err, sizeof(err))) && unl != un) {
        snprintf(err, sizeof(err), "%s: %zu labels for the %zu bytes of %s", labels, unl, un,
                 text);
        rc = -EINVAL;
    }
    long n = (long)un;
    if (!rc) {
        printf("# training a %s tokenizer of %ld pieces on %s (%ld bytes)\n", type, vocab, text,
               n);
        fflush(stdout);
        char why[1000];
        if ((rc = tokenizer_train(txt, un, (int)vocab, type, 2, &mbytes, &model_len, why,
                                  sizeof(why))))
            snprintf(err, sizeof(err), "training the tokenizer on %.600s: %s", text, why);
    }
    tokenizer *tk = NULL;
    if (!rc)
        rc = tokenizer_from_model(&tk, mbytes, model_len, mfile, err, sizeof(err));
    if (!rc && tokenizer_vocab(tk) != vocab) {
        snprintf(err, sizeof(err), "%s: %d pieces, asked for %ld", mfile, tokenizer_vocab(tk),
                 vocab);
        rc = -EINVAL;
    }
    int32_t *ids = NULL;
    long n_ids = 0;
    if (!rc) {
        printf("# trained; encoding %s and checking that it decodes back\n", text);
        fflush(stdout);
    }
    if (!rc)
        rc = tokenizer_encode(tk, txt, (size_t)n, &ids, &n_ids, err, sizeof(err));
    size_t dlen = 0;
    char *back = rc ? NULL : tokenizer_decode(tk, ids, n_ids, &dlen);
    if (!rc && (!back || dlen != (size_t)n || memcmp(back, txt, (size_t)n) != 0)) {
        snprintf(err, sizeof(err), "the tokens of %s do not decode to it (%zu bytes back of %ld)",
                 text, dlen, n);
        rc = -EINVAL;
    }
    free(back);
    /* the tokens, and each token's class from the bytes it stands for */
    long off = 0;
    unsigned char *cls = lab ? malloc((size_t)(n_ids > 0 ? n_ids : 1)) : NULL;
    void *buf = rc ? NULL : malloc((size_t)(n_ids > 0 ? n_ids : 1) * (vocab > 65536 ? 4 : 2));
    if (!rc && (!buf || (lab && !cls)))
        rc = -ENOMEM;
    for (long i = 0; !rc && i < n_ids; i++) {
        if (vocab > 65536)
            ((uint32_t *)buf)[i] = (uint32_t)ids[i];
        else
            ((uint16_t *)buf)[i] = (uint16_t)ids[i];
        int b = tokenizer_piece_bytes(tk, ids[i]);
        if (cls) {
            unsigned char c = BROWN_SPACE;
            for (int k = 0; k < b && off + k < n; k++)
                if (lab[off + k] != BROWN_SPACE) {
                    c = (unsigned char)lab[off + k];
                    break;
                }
            cls[i] = c;
        }
        off += b;
    }
    if (!rc && off != n) {
        snprintf(err, sizeof(err), "the pieces' bytes add up to %ld, not the text's %ld", off, n);
        rc = -EINVAL;
    }
    if (!rc && !(listing = tokenizer_vocab_listing(tk, &listing_len)))
        rc = -ENOMEM;
    if (!rc)
        rc = write_member(&set[n_set++], mfile, mbytes, model_len, err, sizeof(err));
    if (!rc)
        rc = write_member(&set[n_set++], vfile, listing, listing_len, err, sizeof(err));
    if (!rc)
        rc = write_member(&set[n_set++], tokens, buf, (size_t)n_ids * (vocab > 65536 ? 4 : 2),
                          err, sizeof(err));
    if (!rc && cls)
        rc = write_member(&set[n_set++], pos, cls, (size_t)n_ids, err, sizeof(err));
    int sig = stop_signal_pending();
    if (!rc && sig) {
        snprintf(err, sizeof(err), "stopped by signal %d before %s.* was replaced: the files "
                 "there before are untouched", sig, out);
        rc = -EINTR;
    }
    if (!rc)
        rc = out_commit_set(set, n_set, err, sizeof(err));
    else
        for (int i = 0; i < n_set; i++)
            out_abort(&set[i]);
    /* files of the old set the new one lacks would be read with it */
    if (!rc && !cls)
        unlink(pos);
    if (!rc)
        unlink(stale);
    stop_signals_restore();
    if (!rc)
        printf("# wrote %s (%ld tokens, %.3f bytes a token)%s%s, and %s\n"
               "# train on it with data.source = %s, data.vocab = %ld, data.tokenizer = %s\n",
               tokens, n_ids, (double)n / (double)(n_ids > 0 ? n_ids : 1), cls ? ", " : "",
               cls ? pos : "", mfile, tokens, vocab, mfile);
    else
        fprintf(stderr, "mode-exp tokenize: %s\n", err);
    free(buf);
    free(cls);
    free(ids);
    tokenizer_free(&tk);
    free(txt);
    free(lab);
    free(mbytes);
    free(listing);
    return sig && rc == -EINTR ? 128 + sig : rc ? 1 : 0;
}
