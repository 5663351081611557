/* mode-analyze: figures and tables from mode-exp's run files.
 *
 *   mode-analyze heatmap RUN.h5 [--step N] [--seq I]   which tokens took each block
 *   mode-analyze weights RUN.h5                        router weight histograms
 *   mode-analyze curves RUN.h5|DIR ...                 held-out loss curves per group
 *   mode-analyze compare RUN.h5|DIR ... [--baseline G] a table of groups of replicates
 *   mode-analyze sweep RUN.h5|DIR ... --key S.K        final loss against a swept key
 *   mode-analyze tokens RUN.h5 ... [--step N] [--all-steps] take rate per token class
 *   mode-analyze isoflop SWEEP_DIR                     isoFLOP fits and frontier
 *   mode-analyze report DIR [--baseline G]             every analysis on one HTML page
 *   mode-analyze cluster RUN.h5|DIR ... [--nodes LIST]  step time at 1..256 nodes, modelled
 *   mode-analyze routing RUN.h5 [--step N]             expert load, specialisation, margins
 *   mode-analyze depth RUN.h5 [--step N]               blocks run per token, exits by class
 *   mode-analyze counterfactual CF.csv ...             paired loss differences of routings
 *   mode-analyze dial DIAL.csv ...                     loss against executed FLOPs a token
 *   mode-analyze lossdiff A.h5 B.h5 [A2.h5 B2.h5 ...]  where one checkpoint wins or loses
 *
 * (the table `commands` below is the full list, and `mode-analyze --help`
 * prints it)
 *
 * Every subcommand takes --out DIR (default: the first run file's folder)
 * and --help, those that draw figures --svg (an SVG beside every PNG), and
 * prints the paths it wrote.  An option a subcommand does not read, or one
 * given twice, is refused (exit 2).
 * The subcommands over many runs take folders of runs too, and group
 * replicates (analysis/groups.h).  The subcommands are rows of one table
 * below. */
#include "core/util/num.h"
#include "analysis/analyze.h"
#include "analysis/rundir.h"
#include "core/util/file.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { OPT_STEP = 1, OPT_SEQ = 2, OPT_ALL_STEPS = 4, OPT_BASELINE = 8, OPT_KEY = 16, OPT_FIT = 32,
       OPT_LADDER = 64, OPT_BPB = 128, OPT_PREDICTED = 256, OPT_SVG = 512, OPT_OUT = 1024,
       OPT_NODES = 2048, OPT_CORES = 4096, OPT_LINK = 8192, OPT_LATENCY = 16384,
       OPT_PARAMS = 32768, OPT_SWEEP = 65536 };
/* Every option of some subcommand: one a subcommand does not read, or one
 * given twice, is refused by name rather than ignored or overridden. */
static const struct an_opt {
    const char *name;
    int bit;
    bool value;
} an_opts[] = {
    { "--step", OPT_STEP, true },       { "--seq", OPT_SEQ, true },
    { "--all-steps", OPT_ALL_STEPS, false }, { "--baseline", OPT_BASELINE, true },
    { "--key", OPT_KEY, true },         { "--fit-sizes", OPT_FIT, true },
    { "--ladder", OPT_LADDER, true },   { "--bpb", OPT_BPB, false },
    { "--predicted", OPT_PREDICTED, false }, { "--out", OPT_OUT, true },
    { "--svg", OPT_SVG, false },        { "--nodes", OPT_NODES, true },
    { "--cores-per-node", OPT_CORES, true }, { "--link-gbit", OPT_LINK, true },
    { "--latency-us", OPT_LATENCY, true }, { "--params", OPT_PARAMS, true },
    { "--sweep", OPT_SWEEP, true },
};
enum { N_AN_OPTS = (int)(sizeof(an_opts) / sizeof(an_opts[0])) };
enum { MANY = 1 << 20 }; /* max_files of the commands over any number of runs */

typedef struct an_command {
    const char *name;
    const char *summary;
    const char *usage;       /* --help text after the "usage:" line */
    const char *args;        /* the positional arguments, for the usage line */
    int min_files, max_files;
    int options;             /* OPT_* it accepts besides --out and --help (OPT_SVG: it
                              * draws figures) */
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
      "RUN.h5 [--step N] [--seq I]", 1, 1, OPT_STEP | OPT_SEQ | OPT_SVG, cmd_heatmap },
    { "weights", "router weight histograms, first and last recorded step",
      "Histograms of the router weights sigmoid(r) of every layer that records its\n"
      "router's scores (mod, staged, tcmod, mor) over the recorded sequences: the\n"
      "first recorded step against the last. Writes weights.png.\n",
      "RUN.h5", 1, 1, OPT_SVG, cmd_weights },
    { "curves", "held-out loss against FLOPs, wall time and steps, per group",
      "Held-out loss (top-k routing solid, the causal rule dashed) against training\n"
      "FLOPs (log scale), wall time and steps, one colour per group of replicates\n"
      "(runs whose configs differ only in [run] name, out, seed, init_seed,\n"
      "data_seed): the mean over the replicates at each evaluation they all reached,\n"
      "in a band from the lowest to the highest replicate. Writes curves.png.\n"
      "--bpb: bits per byte (eval/bpb_*) instead of nats per token, so that byte\n"
      "and subword runs of one corpus share an axis (runs without it are refused).\n",
      "RUN.h5|DIR ... [--bpb]", 1, MANY, OPT_BPB | OPT_SVG, cmd_curves },
    { "compare", "a table of groups of replicates: sizes, speed, losses, spread",
      "One row per group of replicates (runs whose configs differ only in [run]\n"
      "name, out, seed, init_seed, data_seed; the group is the run name without\n"
      "-s<seed>): layer kinds, capacity, parameters and forward FLOPs per sequence\n"
      "(recorded in the run file, else counted from the config), steps/s, n, the\n"
      "final held-out loss (top-k and causal) as mean +- sd with its 95% interval\n"
      "(Student's t), the within-run standard error over evaluation windows, the\n"
      "difference to the baseline group with Welch's two-sided p, and the causal\n"
      "rule's precision, recall and capacity (mean of the last 10% of steps over\n"
      "routed layers). Groups with a complete replicate use their complete ones.\n"
      "  --baseline GROUP   the group differences are taken to (default: dense,\n"
      "                     when there is a group of that name)\n"
      "  --ladder DIR       dense runs at several training budgets: the dense-equivalent\n"
      "                     compute multiplier of every group (\"x dense FLOPs\": what\n"
      "                     dense would need for its loss, over its FLOPs, with a 95%\n"
      "                     bootstrap interval; below or above every rung the bound,\n"
      "                     > or < that rung's FLOPs over the group's);\n"
      "                     the given runs' own dense ones and DIR's (without it the\n"
      "                     given runs' alone), when they span two budgets or more;\n"
      "                     they must be one model (parameters, sequence length)\n"
      "Under the table, the power analysis: the seeds a side that would give each\n"
      "difference to the baseline an 80% chance of p < 0.05 at the pooled sd.\n"
      "Prints it and writes compare.md, compare.csv (one row per run: group, the\n"
      "keys that vary, the seeds, the numbers) and compare_groups.csv.\n",
      "RUN.h5|DIR ... [--baseline GROUP] [--ladder DIR]", 1, MANY, OPT_BASELINE | OPT_LADDER,
      cmd_compare },
    { "sweep", "final held-out loss against a swept key, with 95% intervals",
      "The final held-out loss (top-k) of every group of replicates against the\n"
      "value of one numeric config key that varies across the runs (e.g.\n"
      "mod.capacity): the mean with its 95% interval as error bars, one series per\n"
      "combination of the other keys that vary (e.g. mod.router), and the groups\n"
      "the key does not apply to (e.g. dense) as horizontal bands (mean and 95%\n"
      "interval), the baseline first.\n"
      "  --key SECTION.KEY  the swept key (required)\n"
      "  --baseline GROUP   as for compare\n"
      "Prints the table and writes sweep_<key>.md, sweep_<key>.csv, sweep_<key>.png.\n",
      "RUN.h5|DIR ... --key SECTION.KEY", 1, MANY, OPT_BASELINE | OPT_KEY | OPT_SVG, cmd_sweep },
    { "tokens", "take rate per token class and position, with intervals",
      "How often each class of token (Brown: parts of speech; synthetic:\n"
      "difficulty) takes each routed block, over the recorded held-out windows, and\n"
      "by position bucket, with 95% Wilson intervals; given replicates of one config\n"
      "(several RUN.h5), the counts are pooled and the spread across replicates is\n"
      "shown as mean +- sd; the mutual information of the decision with the class and\n"
      "with the position; routers that pick the same positions in every sequence.\n"
      "  --step N      a recorded step (default: the last)\n"
      "  --all-steps   pool every recorded step\n"
      "  --predicted   class a position by the token it predicts (the next one),\n"
      "                not the one it holds\n"
      "Prints it and writes tokens.md, tokens.csv and tokens.png.\n",
      "RUN.h5 ... [--step N | --all-steps] [--predicted]", 1, MANY,
      OPT_STEP | OPT_ALL_STEPS | OPT_PREDICTED | OPT_SVG, cmd_tokens },
    { "isoflop", "isoFLOP fits with their uncertainty: loss against parameters per budget",
      "For a folder of runs with training-FLOP budgets (run.flops_budget; mode-exp\n"
      "sweep with an [isoflop] design): the final held-out loss (top-k) against the\n"
      "parameter count for each budget, one curve per kind: each size's mean over\n"
      "its seeds with a 95% interval, and the least-squares parabola in log\n"
      "parameters through the means of the best size and its neighbours (5 sizes\n"
      "by default), whose minimum gives the compute-optimal size and loss (the\n"
      "best sampled size where it has no minimum inside those sizes). The\n"
      "optimum's uncertainty: the same fit through each seed's points\n"
      "alone, and the spread of those optima (sd and 95% interval of loss* and of\n"
      "log10 N*). Also the loss against the FLOPs of a forward pass relative to\n"
      "the best dense size of the budget (MoD paper, Fig. 4). A run's kind is the\n"
      "end of its name iso-<budget>-<size>-<kind>[-s<seed>], else its layer\n"
      "pattern. Incomplete runs are left out. With two budgets or more, also the\n"
      "parametric law L(N, D) of Hoffmann et al. per kind and the optima it gives.\n"
      "Prints the frontier and the laws and writes isoflop.md, isoflop.csv,\n"
      "isoflop_runs.csv, isoflop_law.csv, isoflop_law_curve.csv and isoflop.png\n"
      "(and isoflop_law.png when a law was fitted), into SWEEP_DIR by default.\n"
      "  --fit-sizes N|all  how many sizes around the best one the parabola goes\n"
      "                     through (at least 3; default 5); all: every size\n",
      "SWEEP_DIR [--fit-sizes N|all]", 1, 1, OPT_FIT | OPT_SVG, cmd_isoflop },
    { "cluster", "step time and efficiency at 1..256 nodes, modelled from runs at several rank counts",
      "From runs of one config trained at two rank counts or more (run files'\n"
      "per-step compute_s, comm_s and comm_bytes: the median after the first step,\n"
      "the mean over the runs of a rank count): compute per rank fitted against\n"
      "the ranks (t(P0) P0 / (P e), or a + b/P where 3 rank counts or more favour\n"
      "it), the bytes a rank sends a step as a ring all-reduce 2 (P-1)/P K, and\n"
      "the step time, tokens/s and parallel efficiency predicted at each node\n"
      "count, for the measured model and for one scaled to --params parameters;\n"
      "with --sweep, the wall time of N runs side by side (longest first), at 1\n"
      "rank a run and one node a run. Runs of different configs, or of one rank\n"
      "count only, are refused.\n"
      "  --nodes LIST          node counts, ascending (default 1,2,4,...,256)\n"
      "  --cores-per-node C    ranks a node, one a core (default 64)\n"
      "  --link-gbit B         network bandwidth between nodes (default 100)\n"
      "  --latency-us L        network latency (default 2)\n"
      "  --params N            the scaled model's parameters (default 1e8)\n"
      "  --sweep N,F[+N,F...]  a sweep of N runs of F training FLOPs each (and N\n"
      "                        more of F, ...: e.g. 42,1e12+42,2e12+42,4e12)\n"
      "Prints the table with its assumptions and writes cluster.md, cluster.csv.\n",
      "RUN.h5|DIR ... [--nodes LIST] [--cores-per-node C] [--link-gbit B] [--latency-us L] "
      "[--params N] [--sweep N,F[+N,F...]]", 1, MANY,
      OPT_NODES | OPT_CORES | OPT_LINK | OPT_LATENCY | OPT_PARAMS | OPT_SWEEP, cmd_cluster },
    { "routing", "routing analytics: expert load, specialisation, compute per token, margins",
      "For a run file (or an eval --record file): per expert layer, the load over\n"
      "training from the per-step statistics (MaxVio = max load / mean load - 1 over\n"
      "the real experts, their coefficient of variation, the drop rate, experts\n"
      "that took no token in the last 100 logged steps); from the routing records\n"
      "of one step, the expert x token-class matrix of first choices with its mutual\n"
      "information (specialisation), the histogram of routed layers each token\n"
      "took (compute per token), and the router's margin at the top-k boundary\n"
      "(score minus the sequence's boundary, in sds of the scores).\n"
      "  --step N   a recorded step (default: the last)\n"
      "Prints it and writes routing.md, routing.csv and routing.png.\n",
      "RUN.h5 [--step N]", 1, 1, OPT_STEP | OPT_SVG, cmd_routing },
    { "depth", "compute per token: blocks run by position and token class, exits by class",
      "For a run file (or an eval --record file), from the routing records of one\n"
      "step: each token's depth, the number of blocks that ran on it (1 for a layer\n"
      "without a per-token decision; the block's decision for mod, tcmod, staged;\n"
      "the recursions that kept it for mor; nothing after the exit point it left\n"
      "at), its histogram, its mean by position and by token class, and for each\n"
      "exit point the share of each class that left there.\n"
      "  --step N   a recorded step (default: the last)\n"
      "Prints it and writes depth.md, depth.csv and depth.png.\n",
      "RUN.h5 [--step N]", 1, 1, OPT_STEP | OPT_SVG, cmd_depth },
    { "counterfactual", "paired loss differences of counterfactual routing, by token class",
      "Draws the tables of mode-exp eval --routing ... --csv: each policy's paired\n"
      "difference to the learned decisions with its 95% interval (1.96 standard\n"
      "errors over windows), overall (all) and per class of the predicted token;\n"
      "one panel per CSV. Writes counterfactual.png, and counterfactual.md and\n"
      "counterfactual.csv: the differences pooled over each model's replicates\n"
      "(checkpoints whose folders differ only in -s<seed>): mean, sd, 95% interval\n"
      "and one-sample t-test over the seeds, the mean within-run standard error.\n",
      "CF.csv ...", 1, 16, OPT_SVG, cmd_counterfactual },
    { "dial", "the compute dial: held-out loss against executed FLOPs per token",
      "Draws the tables of mode-exp eval --dial KEY=V1,V2,... --csv: the loss with\n"
      "its 95% interval against the executed forward FLOPs per token, one curve per\n"
      "CSV (a checkpoint), each point labelled with its setting. Writes dial.png.\n",
      "DIAL.csv ...", 1, 10, OPT_SVG, cmd_dial },
    { "lossdiff", "where one checkpoint wins or loses against another, by class and position",
      "For two files of mode-exp eval --record on the same windows (A, then B): the\n"
      "per-token loss difference B - A overall, by class of the predicted token and\n"
      "by position bucket, each with its standard error over windows and a paired\n"
      "t-test. Prints it and writes lossdiff.md, lossdiff.csv and lossdiff.png.\n"
      "Several pairs (A1 B1 A2 B2 ..., up to 16: replicates, each pair on its own\n"
      "windows): each pair's table, and the differences pooled over the pairs (mean,\n"
      "sd, 95% interval and one-sample t-test over the pairs, the mean within-pair\n"
      "standard error) first in lossdiff.md, in lossdiff_pooled.csv and drawn.\n",
      "A.h5 B.h5 [A2.h5 B2.h5 ...]", 2, 32, OPT_SVG, cmd_lossdiff },
    { "report", "every analysis of a folder of runs on one HTML page",
      "Writes DIR/report.html (with --out, OUT/report.html), a self-contained page\n"
      "(images as data URIs) with the runs and their state, and grouped by\n"
      "replicates: compare, a sweep figure for every numeric key that varies,\n"
      "curves, isoflop when runs have training-FLOP budgets, and for every routed\n"
      "group the heatmap, router weights, routing analytics and compute per token\n"
      "of its first replicate and the token classes over all of them, with its\n"
      "resolved config. The figures and tables themselves go beside it into\n"
      "report/.\n"
      "  --baseline GROUP   as for compare\n"
      "  --ladder DIR       as for compare\n",
      "DIR [--baseline GROUP] [--ladder DIR]", 1, 1, OPT_BASELINE | OPT_LADDER | OPT_SVG,
      cmd_report },
};
enum { N_COMMANDS = (int)(sizeof(commands) / sizeof(commands[0])) };

static void usage_main(FILE *f)
{
    fprintf(f, "usage: mode-analyze COMMAND FILE|DIR ... [--out DIR] [--svg]\n\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`mode-analyze COMMAND --help` tells more. Exit status: 0, 1 for bad input,\n"
               "2 for a bad command line.\n");
}

static void usage_cmd(FILE *f, const an_command *c)
{
    bool svg = (c->options & OPT_SVG) != 0;
    fprintf(f, "usage: mode-analyze %s %s [--out DIR]%s\n\n%s", c->name, c->args,
            svg ? " [--svg]" : "", c->usage);
    /* where an_out_path writes without --out (report and isoflop: their folder) */
    const char *out = c->run == cmd_report    ? "DIR"
                      : c->run == cmd_isoflop ? "SWEEP_DIR"
                      : c->max_files == 1     ? "the file's folder"
                                              : "the first file's folder; a folder given stands "
                                                "for its run files";
    fprintf(f, "  --out DIR  output folder (default: %s)\n%s", out,
            svg ? "  --svg      write an SVG beside every PNG\n" : "");
}

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
    return num_parse_long(s, 0, LONG_MAX, v);
}

/* The positional arguments: a folder given to a command over many runs
 * stands for its runs (rundir.h). */
typedef struct file_list {
    const char **files;
    int n, cap;
    char **owned; /* the folders' paths, freed at the end */
    int n_owned;
} file_list;

static int add_file(file_list *l, const char *path)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        const char **grown = realloc(l->files, (size_t)cap * sizeof(char *));
        if (!grown)
            return -1;
        l->files = grown;
        l->cap = cap;
    }
    l->files[l->n++] = path;
    return 0;
}

static int add_folder(const an_args *a, file_list *l, const char *dir)
{
    char **paths = NULL, err[RUN_PATH_LEN + 256];
    int n = 0;
    if (list_run_files(dir, &paths, &n, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    char **grown = realloc(l->owned, (size_t)(l->n_owned + n) * sizeof(char *));
    if (!grown) {
        free_run_files(&paths, n);
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    }
    l->owned = grown;
    for (int i = 0; i < n; i++) {
        l->owned[l->n_owned++] = paths[i];
        if (add_file(l, paths[i])) {
            for (int j = i + 1; j < n; j++)
                free(paths[j]);
            free(paths);
            return an_fail(a, EXIT_BAD_INPUT, "out of memory");
        }
    }
    free(paths);
    return 0;
}

static void free_file_list(file_list *l)
{
    for (int i = 0; i < l->n_owned; i++)
        free(l->owned[i]);
    free(l->owned);
    free(l->files);
    memset(l, 0, sizeof(*l));
}

/* An option of some subcommand that c does not read, or one given before
 * (seen[k]: its value, or its name for a flag): refused naming it, c and
 * the options c takes.  argv[i] is "--name", "--name=value" or other. */
static int check_option(const an_command *c, an_args *a, int argc, char **argv, int i,
                        const char **seen)
{
    for (int k = 0; k < N_AN_OPTS; k++) {
        const struct an_opt *o = &an_opts[k];
        size_t n = strlen(o->name);
        if (strncmp(argv[i], o->name, n) || (argv[i][n] && !(o->value && argv[i][n] == '=')))
            continue;
        const char *v = !o->value ? o->name : argv[i][n] ? argv[i] + n + 1
                        : i + 1 < argc ? argv[i + 1] : "";
        if (!((c->options | OPT_OUT) & o->bit)) {
            char names[256] = "";
            for (int j = 0; j < N_AN_OPTS; j++)
                if ((c->options | OPT_OUT) & an_opts[j].bit)
                    snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                             names[0] ? ", " : "", an_opts[j].name);
            return an_fail(a, EXIT_USAGE, "%s is not an option of %s, which would ignore it%s; "
                           "%s takes %s (see mode-analyze %s --help)", o->name, c->name,
                           o->bit == OPT_SVG ? " (it draws no figure)" : "", c->name, names,
                           c->name);
        }
        if (seen[k]) {
            /* the last would win over the first without a word */
            if (o->value)
                return an_fail(a, EXIT_USAGE, "%s given twice (%s, then %s): give each option "
                               "once", o->name, seen[k], v);
            return an_fail(a, EXIT_USAGE, "%s given twice: give each option once", o->name);
        }
        seen[k] = v;
        return 0;
    }
    return 0;
}

/* A file given twice, by any path (a folder and a run file in it, a
 * symlink, "./x" for "x"), would be read as two: two replicates of one run
 * with sd 0, a table pooled twice.  Refused naming both paths (not for
 * lossdiff, whose files are pairs: a file in two pairs, or a pair of one
 * file against itself, is what was asked for). */
static int same_files(an_args *a, const file_list *l)
{
    struct stat *st = calloc((size_t)l->n + 1, sizeof(*st));
    bool *ok = calloc((size_t)l->n + 1, sizeof(*ok));
    int rc = st && ok ? 0 : an_fail(a, EXIT_USAGE, "out of memory");
    for (int i = 0; !rc && i < l->n; i++) {
        ok[i] = stat(l->files[i], &st[i]) == 0 && S_ISREG(st[i].st_mode);
        for (int j = 0; !rc && ok[i] && j < i; j++)
            if (ok[j] && st[j].st_dev == st[i].st_dev && st[j].st_ino == st[i].st_ino)
                rc = an_fail(a, EXIT_USAGE, "%s and %s are one file, given twice: it would be "
                             "read as two (two replicates of one run, a table counted twice); "
                             "give each once", l->files[j], l->files[i]);
    }
    free(st);
    free(ok);
    return rc;
}

static int parse_args(const an_command *c, an_args *a, file_list *l, int argc, char **argv)
{
    memset(a, 0, sizeof(*a));
    a->cmd = c->name;
    a->step = -1;
    a->cores = 64;
    a->link_gbit = 100;
    a->latency_us = 2;
    a->params = 1e8;
    const char *seen[N_AN_OPTS] = { 0 };
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v;
        struct stat st;
        int bad = check_option(c, a, argc, argv, i, seen);
        if (bad)
            return bad;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage_cmd(stdout, c);
            free_file_list(l);
            exit(0);
        } else if ((c->options & OPT_SVG) && !strcmp(argv[i], "--svg")) {
            a->svg = true;
        } else if ((c->options & OPT_ALL_STEPS) && !strcmp(argv[i], "--all-steps")) {
            a->all_steps = true;
        } else if ((c->options & OPT_PREDICTED) && !strcmp(argv[i], "--predicted")) {
            a->predicted = true;
        } else if ((c->options & OPT_BPB) && !strcmp(argv[i], "--bpb")) {
            a->bpb = true;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing))) {
            a->out = v;
        } else if ((c->options & OPT_STEP) && (v = opt_value(argc, argv, &i, "--step", &missing))) {
            if (!parse_long(v, &a->step))
                return an_fail(a, EXIT_USAGE, "--step %s: expected a step number", v);
        } else if ((c->options & OPT_SEQ) && (v = opt_value(argc, argv, &i, "--seq", &missing))) {
            if (!parse_long(v, &a->seq))
                return an_fail(a, EXIT_USAGE, "--seq %s: expected a sequence index (0, 1, ...)",
                               v);
        } else if ((c->options & OPT_BASELINE) &&
                   (v = opt_value(argc, argv, &i, "--baseline", &missing))) {
            a->baseline = v;
        } else if ((c->options & OPT_KEY) && (v = opt_value(argc, argv, &i, "--key", &missing))) {
            if (!strchr(v, '.'))
                return an_fail(a, EXIT_USAGE, "--key %s: expected SECTION.KEY (e.g. "
                               "mod.capacity)", v);
            a->key = v;
        } else if ((c->options & OPT_FIT) &&
                   (v = opt_value(argc, argv, &i, "--fit-sizes", &missing))) {
            long k = 0;
            if (!strcmp(v, "all"))
                a->fit_sizes = -1;
            else if (parse_long(v, &k) && k >= 3 && k <= 1000)
                a->fit_sizes = (int)k;
            else
                return an_fail(a, EXIT_USAGE, "--fit-sizes %s: expected a number of sizes "
                               "(3 or more) or all", v);
        } else if ((c->options & OPT_LADDER) &&
                   (v = opt_value(argc, argv, &i, "--ladder", &missing))) {
            a->ladder = v;
        } else if ((c->options & OPT_NODES) && (v = opt_value(argc, argv, &i, "--nodes", &missing))) {
            a->nodes = v;
        } else if ((c->options & OPT_CORES) &&
                   (v = opt_value(argc, argv, &i, "--cores-per-node", &missing))) {
            if (!num_parse_long(v, 1, 1 << 16, &a->cores))
                return an_fail(a, EXIT_USAGE, "--cores-per-node %s: expected ranks a node, "
                               "1..65536", v);
        } else if ((c->options & OPT_LINK) &&
                   (v = opt_value(argc, argv, &i, "--link-gbit", &missing))) {
            if (!num_parse_double(v, 1e-6, 1e6, &a->link_gbit))
                return an_fail(a, EXIT_USAGE, "--link-gbit %s: expected a bandwidth in Gbit/s, "
                               "above 0 (e.g. 100)", v);
        } else if ((c->options & OPT_LATENCY) &&
                   (v = opt_value(argc, argv, &i, "--latency-us", &missing))) {
            if (!num_parse_double(v, 0, 1e7, &a->latency_us))
                return an_fail(a, EXIT_USAGE, "--latency-us %s: expected microseconds, 0 or "
                               "more (e.g. 2)", v);
        } else if ((c->options & OPT_PARAMS) &&
                   (v = opt_value(argc, argv, &i, "--params", &missing))) {
            if (!num_parse_double(v, 1, 1e15, &a->params))
                return an_fail(a, EXIT_USAGE, "--params %s: expected a parameter count (e.g. "
                               "1e8)", v);
        } else if ((c->options & OPT_SWEEP) && (v = opt_value(argc, argv, &i, "--sweep", &missing))) {
            a->sweep = v; /* parsed by cluster */
        } else if (missing) {
            return an_fail(a, EXIT_USAGE, "%s needs a value", argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return an_fail(a, EXIT_USAGE, "unknown option %s (see mode-analyze %s --help)",
                           argv[i], c->name);
        } else if (l->n == c->max_files) {
            return an_fail(a, EXIT_USAGE, "%s: one file too many: %s takes at most %d (%s)",
                           argv[i], c->name, c->max_files, c->args);
        } else if (c->max_files > 1 && !stat(argv[i], &st) && S_ISDIR(st.st_mode)) {
            if (add_folder(a, l, argv[i]))
                return EXIT_BAD_INPUT;
        } else if (add_file(l, argv[i])) {
            return an_fail(a, EXIT_BAD_INPUT, "out of memory");
        }
    }
    a->files = l->files;
    a->n_files = l->n;
    if (c->run != cmd_lossdiff && same_files(a, l)) /* lossdiff's are pairs, each a choice */
        return EXIT_USAGE;
    if (a->n_files < c->min_files)
        return an_fail(a, EXIT_USAGE, "%d file%s given, %s takes at least %d (%s; see "
                       "mode-analyze %s --help)", a->n_files, a->n_files == 1 ? "" : "s",
                       c->name, c->min_files, c->args, c->name);
    if (a->all_steps && a->step >= 0)
        return an_fail(a, EXIT_USAGE, "--step and --all-steps exclude each other");
    if ((c->options & OPT_KEY) && !a->key)
        return an_fail(a, EXIT_USAGE, "--key SECTION.KEY is required (e.g. --key mod.capacity)");
    return 0;
}

static int run_command(int argc, char **argv)
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
        file_list l = { 0 };
        int rc = parse_args(&commands[i], &a, &l, argc - 2, argv + 2);
        if (!rc)
            rc = commands[i].run(&a);
        free_file_list(&l);
        return rc;
    }
    fprintf(stderr, "mode-analyze: unknown command '%s'\n\n", argv[1]);
    usage_main(stderr);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    /* a closed pipe behind stdout is a failed write, not a silent death */
    signal(SIGPIPE, SIG_IGN);
    int rc = run_command(argc, argv);
    char err[256];
    if (file_close_stdout(err, sizeof(err))) {
        fprintf(stderr, "mode-analyze%s%s: %s\n", argc > 1 ? " " : "", argc > 1 ? argv[1] : "",
                err);
        return rc ? rc : EXIT_BAD_INPUT;
    }
    return rc;
}
