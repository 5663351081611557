/* What the subcommands of mode-analyze share: the parsed command line, the
 * output folder, writing text files atomically, and messages.  Every
 * subcommand returns the program's exit code: 0, 1 for bad input (a file
 * that is missing, foreign or lacks what the subcommand needs, a step that
 * is not recorded, a sequence out of range), 2 for a bad command line. */
#ifndef MODE_ANALYSIS_ANALYZE_H
#define MODE_ANALYSIS_ANALYZE_H

#include "analysis/plot.h"
#include "analysis/runinfo.h"
#include "core/util/outfile.h"

#include <stdbool.h>
#include <stdio.h>

enum { EXIT_BAD_INPUT = 1, EXIT_USAGE = 2 };

typedef struct an_args {
    const char *cmd;                   /* the subcommand's name, for messages */
    const char *const *files;          /* the run files (a folder of runs given to a command
                                          over many runs stands for its runs) */
    int n_files;
    const char *out;                   /* --out DIR, or NULL: the first file's folder */
    bool svg;                          /* --svg: an SVG beside every PNG */
    long step;                         /* --step N, or -1: the last recorded */
    long seq;                          /* --seq I */
    bool all_steps;                    /* --all-steps */
    bool predicted;                    /* --predicted: a position's class is its next token's */
    bool bpb;                          /* --bpb: bits per byte instead of nats (curves) */
    const char *baseline;              /* --baseline GROUP, or NULL: "dense" when there is one */
    const char *key;                   /* --key section.key (sweep) */
    int fit_sizes;                     /* --fit-sizes N (isoflop): 0 the default (5), -1 all */
    const char *ladder;                /* --ladder DIR: dense runs at several budgets, for the
                                          dense-equivalent compute multiplier (ladder.h) */
    const char *nodes;                 /* cluster: --nodes LIST, or NULL: 1,2,4,...,256 */
    long cores;                        /* cluster: --cores-per-node C (64) */
    double link_gbit, latency_us;      /* cluster: --link-gbit B (100), --latency-us L (2) */
    double params;                     /* cluster: --params N, the scaled model (1e8) */
    const char *sweep;                 /* cluster: --sweep N,F[+N,F...], or NULL */
    bool no_ladder;                    /* reading --ladder's own runs: fit no ladder of them */
} an_args;

int cmd_heatmap(const an_args *a);
int cmd_weights(const an_args *a);
int cmd_curves(const an_args *a);
int cmd_compare(const an_args *a);
int cmd_tokens(const an_args *a);
int cmd_isoflop(const an_args *a);
int cmd_sweep(const an_args *a);
int cmd_report(const an_args *a);
int cmd_routing(const an_args *a);
int cmd_depth(const an_args *a);
int cmd_counterfactual(const an_args *a);
int cmd_dial(const an_args *a);
int cmd_lossdiff(const an_args *a);
int cmd_cluster(const an_args *a);

/* "mode-analyze CMD: " and the message on stderr; returns code. */
int an_fail(const an_args *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Open the one run file of a routing figure: EXIT_BAD_INPUT, with the
 * message saying why, when it cannot be read or holds no routing records. */
int an_open_routed_run(const an_args *a, run_info **ri);
/* path = the output folder (--out, else dir, else the first run file's
 * folder; created when missing) / name.  Returns 0, or EXIT_BAD_INPUT after
 * a message. */
int an_out_path(const an_args *a, const char *dir, const char *name, char *path, int len);

/* A text output written to a temporary beside it and renamed into place
 * (core/util/outfile.h); one of the command's inputs or a run's own file is
 * refused (EXIT_USAGE), as is such a figure by an_save_figure. */
typedef struct an_text {
    FILE *f;
    out_file o;
} an_text;
int an_text_begin(const an_args *a, an_text *t, const char *path);
/* Close, rename and report; on failure removes the temporary file. */
int an_text_commit(const an_args *a, an_text *t);
void an_text_abort(an_text *t);

/* Save a figure (PNG, plus SVG with --svg) and report it. */
int an_save_figure(const an_args *a, const char *path, int w, int h, plot_draw_fn draw,
                   void *user);

/* The recorded routing step --step names (default: the last) into *step;
 * a step not recorded is an error naming the recorded ones. */
int an_routing_step(const an_args *a, const run_info *ri, long *step);
/* A subcommand's three outputs in dir (--out wins): the table printed and
 * written to STEM.md, STEM.csv, and the figure STEM.png (w x h). */
typedef void (*an_write_fn)(FILE *f, const void *user);
int an_write_outputs(const an_args *a, const char *dir, const char *stem, an_write_fn md,
                     an_write_fn csv, int w, int h, plot_draw_fn draw, void *user);

#endif
