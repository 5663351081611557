/* mode-analyze: figures and tables from mode-exp's run files.
 *
 *   mode-analyze heatmap RUN.h5 [--step N] [--seq I]   which tokens took each block
 *   mode-analyze weights RUN.h5                        router weight histograms
 *   mode-analyze curves RUN.h5 [RUN.h5 ...]            held-out loss curves
 *   mode-analyze compare RUN.h5 [RUN.h5 ...]           a table of runs
 *   mode-analyze tokens RUN.h5 [--step N] [--all-steps] take rate per token class
 *   mode-analyze isoflop SWEEP_DIR                     isoFLOP fits and frontier
 *   mode-analyze report DIR                            every analysis on one HTML page
 *
 * Every subcommand takes --out DIR (default: the first run file's folder),
 * --svg (an SVG beside every PNG) and --help, and prints the paths it wrote.
 * The subcommands are rows of one table below. */
#include "analysis/analyze.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { OPT_STEP = 1, OPT_SEQ = 2, OPT_ALL_STEPS = 4 };

typedef struct an_command {
    const char *name;
    const char *summary;
    const char *usage;       /* --help text after the "usage:" line */
    const char *args;        /* the positional arguments, for the usage line */
    int min_files, max_files;
    int options;             /* OPT_* it accepts besides --out, --svg, --help */
    int (*run)(const an_args *a);
} an_command;

static const an_command commands[] = {
    { "heatmap", "which tokens took each block (layer x position)",
      "Draws, for one held-out sequence at one recorded step, a layer x position map\n"
      "of the routing: dense layers grey (always computed); mod layers taken or\n"
      "skipped, with a dot where the causal rule disagrees with top-k; expert layers\n"
      "one colour per expert, the no-op hatched, dropped tokens black. The\n"
      "sequence's text runs along the x axis.\n"
      "  --step N   a recorded step (default: the last)\n"
      "  --seq I    a recorded held-out sequence (default: 0)\n"
      "Writes heatmap_step<N>_seq<I>.png, 10 px per position.\n",
      "RUN.h5 [--step N] [--seq I]", 1, 1, OPT_STEP | OPT_SEQ, cmd_heatmap },
    { "weights", "router weight histograms, first and last recorded step",
      "Histograms of the router weights sigmoid(r) of every routed layer (mod,\n"
      "staged) over the recorded sequences: the first recorded step against the\n"
      "last. Writes weights.png.\n",
      "RUN.h5", 1, 1, 0, cmd_weights },
    { "curves", "held-out loss against FLOPs, wall time and steps",
      "Held-out loss (top-k routing solid, the causal rule dashed) against training\n"
      "FLOPs (log scale), wall time and steps, one colour per run. Writes curves.png.\n",
      "RUN.h5 [RUN.h5 ...]", 1, AN_MAX_FILES, 0, cmd_curves },
    { "compare", "a table of runs: sizes, speed, losses, the causal rule",
      "One row per run: layer kinds, capacity, parameters (from ckpt.h5 beside the\n"
      "run file, else counted from the config), forward FLOPs per sequence,\n"
      "steps/s, final held-out losses, and the causal rule's precision, recall and\n"
      "capacity (mean of the last 10% of steps over routed layers). Prints it and\n"
      "writes compare.md and compare.csv.\n",
      "RUN.h5 [RUN.h5 ...]", 1, AN_MAX_FILES, 0, cmd_compare },
    { "tokens", "take rate per token class and position; degenerate routers",
      "How often each class of token (Brown: parts of speech; synthetic:\n"
      "difficulty) takes each routed block, over the recorded sequences, and by\n"
      "position bucket; the mutual information of the decision with the class and\n"
      "with the position; routers that pick the same positions in every sequence.\n"
      "  --step N      a recorded step (default: the last)\n"
      "  --all-steps   pool every recorded step\n"
      "Prints it and writes tokens.md, tokens.csv and tokens.png.\n",
      "RUN.h5 [--step N | --all-steps]", 1, 1, OPT_STEP | OPT_ALL_STEPS, cmd_tokens },
    { "isoflop", "isoFLOP fits: loss against parameters per budget and kind",
      "For a folder of runs with training-FLOP budgets (run.flops_budget; mode-exp\n"
      "sweep with an [isoflop] design): the final held-out loss (top-k) against the\n"
      "parameter count for each budget, one curve per kind, with the least-squares\n"
      "parabola in log parameters whose minimum gives the compute-optimal size and\n"
      "loss (the best sampled run where it has no minimum inside the sampled sizes);\n"
      "and the loss against the FLOPs of a forward pass relative to the best dense\n"
      "run of the budget (MoD paper, Fig. 4). A run's kind is the end of its name\n"
      "iso-<budget>-<size>-<kind>, else its layer pattern. Incomplete runs are left\n"
      "out. Prints the frontier and writes isoflop.md, isoflop.csv (budget, kind,\n"
      "N*, loss*, against dense), isoflop_runs.csv and isoflop.png.\n",
      "SWEEP_DIR", 1, 1, 0, cmd_isoflop },
    { "report", "every analysis of a folder of runs on one HTML page",
      "Writes DIR/report.html (with --out, OUT/report.html), a self-contained page\n"
      "(images as data URIs) with the runs and their state, compare, curves, isoflop\n"
      "when runs have training-FLOP budgets, and for every routed run its heatmap\n"
      "(last recorded step), router weights and token classes. The figures and\n"
      "tables themselves go beside it into report/.\n",
      "DIR", 1, 1, 0, cmd_report },
};
enum { N_COMMANDS = (int)(sizeof(commands) / sizeof(commands[0])) };

static void usage_main(FILE *f)
{
    fprintf(f, "usage: mode-analyze COMMAND RUN.h5 ... [--out DIR] [--svg]\n\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`mode-analyze COMMAND --help` tells more. Exit status: 0, 1 for bad input,\n"
               "2 for a bad command line.\n");
}

static void usage_cmd(FILE *f, const an_command *c)
{
    fprintf(f, "usage: mode-analyze %s %s [--out DIR] [--svg]\n\n%s", c->name, c->args, c->usage);
    fprintf(f, "  --out DIR  output folder (default: the run file's folder)\n"
               "  --svg      write an SVG beside every PNG\n");
}

int an_fail(const an_args *a, int code, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "mode-analyze %s: ", a->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

/* "--opt VALUE" or "--opt=VALUE": the value, or NULL when i is not --opt. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt, bool *missing)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n))
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n])
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

static bool parse_long(const char *s, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return !errno && end != s && !*end && *v >= 0;
}

static int parse_args(const an_command *c, an_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof(*a));
    a->cmd = c->name;
    a->step = -1;
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage_cmd(stdout, c);
            exit(0);
        } else if (!strcmp(argv[i], "--svg")) {
            a->svg = true;
        } else if ((c->options & OPT_ALL_STEPS) && !strcmp(argv[i], "--all-steps")) {
            a->all_steps = true;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing))) {
            a->out = v;
        } else if ((c->options & OPT_STEP) && (v = opt_value(argc, argv, &i, "--step", &missing))) {
            if (!parse_long(v, &a->step))
                return an_fail(a, EXIT_USAGE, "--step %s: expected a step number", v);
        } else if ((c->options & OPT_SEQ) && (v = opt_value(argc, argv, &i, "--seq", &missing))) {
            if (!parse_long(v, &a->seq))
                return an_fail(a, EXIT_USAGE, "--seq %s: expected a sequence index (0, 1, ...)",
                               v);
        } else if (missing) {
            return an_fail(a, EXIT_USAGE, "%s needs a value", argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return an_fail(a, EXIT_USAGE, "unknown option %s (see mode-analyze %s --help)",
                           argv[i], c->name);
        } else if (a->n_files == c->max_files) {
            return an_fail(a, EXIT_USAGE, "%s: too many run files (at most %d)", argv[i],
                           c->max_files);
        } else {
            a->files[a->n_files++] = argv[i];
        }
    }
    if (a->n_files < c->min_files)
        return an_fail(a, EXIT_USAGE, "no run file given (see mode-analyze %s --help)", c->name);
    if (a->all_steps && a->step >= 0)
        return an_fail(a, EXIT_USAGE, "--step and --all-steps exclude each other");
    return 0;
}

int an_open_runs(const an_args *a, run_info **ris)
{
    char err[RUN_PATH_LEN + 512];
    for (int i = 0; i < a->n_files; i++) {
        ris[i] = NULL;
        if (build_run_info(&ris[i], a->files[i], err, (int)sizeof(err))) {
            an_close_runs(a, ris);
            return an_fail(a, EXIT_BAD_INPUT, "%s", err);
        }
    }
    return 0;
}

int an_open_routed_run(const an_args *a, run_info **ri)
{
    if (an_open_runs(a, ri))
        return EXIT_BAD_INPUT;
    if ((*ri)->n_steps == 0 || !(*ri)->tokens) {
        char why[1200];
        run_no_routing_reason(*ri, why, (int)sizeof(why));
        an_fail(a, EXIT_BAD_INPUT, "%s: no routing records: %s", (*ri)->path, why);
        free_run_info(ri);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

void an_close_runs(const an_args *a, run_info **ris)
{
    for (int i = 0; i < a->n_files; i++)
        free_run_info(&ris[i]);
}

void an_unique_names(run_info **ris, int n)
{
    for (int i = 0; i < n; i++) {
        bool clash = false;
        for (int j = 0; j < n; j++)
            clash |= j != i && !strcmp(ris[i]->cfg.name, ris[j]->cfg.name);
        if (clash)
            snprintf(ris[i]->name, sizeof(ris[i]->name), "%.127s", ris[i]->dir);
    }
}

int an_out_path(const an_args *a, const run_info *first, const char *name, char *path, int len)
{
    const char *dir = a->out ? a->out : first->dir;
    struct stat st;
    if (stat(dir, &st) && mkdir(dir, 0777) && errno != EEXIST)
        return an_fail(a, EXIT_BAD_INPUT, "%s: cannot create the output folder (%s)", dir,
                       strerror(errno));
    if (!stat(dir, &st) && !S_ISDIR(st.st_mode))
        return an_fail(a, EXIT_BAD_INPUT, "%s: not a folder", dir);
    int n = snprintf(path, (size_t)len, "%s/%s", dir, name);
    if (n < 0 || n >= len)
        return an_fail(a, EXIT_BAD_INPUT, "%s: path too long", dir);
    return 0;
}

void an_wrote(const char *path)
{
    printf("wrote %s\n", path);
}

int an_text_begin(const an_args *a, an_text *t, const char *path)
{
    snprintf(t->path, sizeof(t->path), "%s", path);
    snprintf(t->tmp, sizeof(t->tmp), "%s.tmp", path);
    t->f = fopen(t->tmp, "w");
    if (!t->f)
        return an_fail(a, EXIT_BAD_INPUT, "%s: cannot write (%s)", t->tmp, strerror(errno));
    return 0;
}

int an_text_commit(const an_args *a, an_text *t)
{
    bool bad = ferror(t->f) != 0;
    bad |= fclose(t->f) != 0;
    t->f = NULL;
    if (bad || rename(t->tmp, t->path)) {
        remove(t->tmp);
        return an_fail(a, EXIT_BAD_INPUT, "%s: writing failed (disk full?)", t->path);
    }
    an_wrote(t->path);
    return 0;
}

void an_text_abort(an_text *t)
{
    if (t->f)
        fclose(t->f);
    t->f = NULL;
    remove(t->tmp);
}

int an_save_figure(const an_args *a, const char *path, int w, int h, plot_draw_fn draw,
                   void *user)
{
    char err[RUN_PATH_LEN + 256];
    if (plot_save(path, w, h, draw, user, a->svg, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    an_wrote(path);
    if (a->svg) {
        size_t n = strlen(path);
        printf("wrote %.*s.svg\n", (int)(n > 4 ? n - 4 : n), path);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage_main(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name))
            continue;
        an_args a;
        int rc = parse_args(&commands[i], &a, argc - 2, argv + 2);
        return rc ? rc : commands[i].run(&a);
    }
    fprintf(stderr, "mode-analyze: unknown command '%s'\n\n", argv[1]);
    usage_main(stderr);
    return EXIT_USAGE;
}
