/* mode-exp score: each document's difficulty, written once beside the
 * corpus for data.mix = difficulty (docs/data-mix.md).
 *
 *   mode-exp score SOURCE [--out PATH]
 *
 * SOURCE is brown or a .txt whose documents are separated by a blank line;
 * PATH defaults to SOURCE's file with .difficulty appended (brown:
 * data/brown.txt.difficulty, $MODE_DATA for data). */
#include "experiments/cli.h"

#include "core/data/data.h"
#include "core/data/mix.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: mode-exp score SOURCE [--out PATH]\n"
    "  Scores every document of SOURCE (brown, or a .txt of documents separated by a blank\n"
    "  line) by its bigram cross-entropy under the corpus's own counts and writes the scores\n"
    "  with the corpus's fingerprint to PATH (default: SOURCE's file + .difficulty), what\n"
    "  data.mix = difficulty reads (docs/data-mix.md).\n";

int cmd_score(int argc, char **argv)
{
    const char *source = NULL, *out = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--out") && i + 1 < argc && !out)
            out = argv[++i];
        else if (argv[i][0] == '-' || source) {
            fprintf(stderr, "mode-exp score: unexpected '%s'\n%s", argv[i], usage);
            return 2;
        } else
            source = argv[i];
    }
    if (!source) {
        fprintf(stderr, "mode-exp score: expected SOURCE\n%s", usage);
        return 2;
    }
    dataset *d = NULL;
    char err[2048], path[600];
    long n = 0;
    /* the split does not matter: every document of the file is scored */
    int rc = load_dataset(&d, source, NULL, 256, 0.5, 1, NULL, err, sizeof(err));
    if (!rc) {
        if (out)
            snprintf(path, sizeof(path), "%s", out);
        else
            mix_default_path(d->source, path, (int)sizeof(path));
        rc = mix_score_write(d, path, &n, err, sizeof(err));
    }
    if (rc) {
        fprintf(stderr, "mode-exp score: %s\n", err);
        free_dataset(&d);
        return 1;
    }
    printf("mode-exp score: %ld documents of %s scored (%s) into %s\n", n, d->source->path,
           MIX_SCORER, path);
    free_dataset(&d);
    return 0;
}
