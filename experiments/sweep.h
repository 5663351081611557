/* The sweep file of `mode-exp sweep` (a grid of runs or an isoFLOP design
 * over one base config) turned into a plan: one named run per folder, each
 * the base config plus "section.key=value" overrides that remember the line
 * of the sweep file they come from, so that a bad value is reported there.
 * The format is documented in experiments/sweeps.md and at the top of
 * experiments/capacity.ini and isoflop.ini. */
#ifndef MODE_EXPERIMENTS_SWEEP_H
#define MODE_EXPERIMENTS_SWEEP_H

#include <stdbool.h>
#include <stddef.h>

#define SWEEP_LINE_CHARS 1024 /* longest line of a sweep file */
#define SWEEP_NAME_LEN 128    /* a run's name (its folder): run.name's size */
#define SWEEP_PATH_LEN 512    /* base and out: run.out's size */
#define SWEEP_OVER_LEN 1200   /* "section.key=value" */
#define SWEEP_MAX_OVER 40     /* overrides of one run */
#define SWEEP_MAX_RUNS 1000

#define SWEEP_LINE_CLI (-1)   /* an override given on mode-exp's command line */

typedef struct sweep_override {
    char text[SWEEP_OVER_LEN]; /* "section.key=value", as config_load() takes it */
    int line;                  /* the sweep file's line, or SWEEP_LINE_CLI */
} sweep_override;

typedef struct sweep_run {
    char name[SWEEP_NAME_LEN]; /* run.name, the folder under out */
    int line;                  /* the line that made it (messages about the name) */
    int n_over;
    sweep_override over[SWEEP_MAX_OVER];
    /* isoFLOP design: which budget, size and kind, for the printout */
    int budget, size, kind;
} sweep_run;

typedef struct sweep_plan {
    char path[SWEEP_PATH_LEN];  /* the sweep file */
    char base[SWEEP_PATH_LEN];  /* the base config, resolved against the sweep file's folder */
    char out[SWEEP_PATH_LEN];   /* runs go to <out>/<name>/ */
    bool isoflop;
    int n_runs;
    sweep_run *runs;
} sweep_plan;

/* Read the sweep file at path and expand it into runs; n_cli overrides
 * (section.key=value) from the command line go into every run after the
 * sweep's own.  On error returns non-zero with one line in err,
 * "FILE:LINE: ..." where a line is to blame. */
int sweep_plan_load(sweep_plan *p, const char *path, int n_cli, char *const *cli, char *err,
                    int err_len);
void sweep_plan_free(sweep_plan *p);

/* Rewrite an error of config_load() over a run's overrides so that it names
 * the sweep file's line instead of "command line": "FILE:LINE: [section]
 * key = value: ... (run NAME)". */
void sweep_config_error(const sweep_plan *p, const sweep_run *r, const char *msg, char *out,
                        int len);

/* The queue of a sweep's runs: order[] the runs by cost (their planned
 * training FLOPs), largest first, ties in the sweep's order, the same on
 * every rank.  The groups of --ranks-per-run take them in that order, each
 * the next one not taken when it is free (comm_counter). */
void sweep_queue(int n, const double *cost, int *order);

/* --slurm-array: the batch script at path (one array task per run, in the
 * queue's order, ranks tasks each, `--threads threads` when threads > 0,
 * `--no-tensorboard` with no_tensorboard)
 * and its run list, path + ".runs", a run's name a line; each task runs
 * `mode-exp sweep FILE args... --only RUN` (args: the command line's
 * overrides).  Both through core/util/outfile.h.  0, or a negative errno
 * with err. */
int sweep_write_slurm(const char *path, const sweep_plan *p, const int *order, int ranks,
                      int threads, bool no_tensorboard, int n_args, char *const *args, char *err,
                      int err_len);

/* --only RUN: the plan cut to that run, or -EINVAL with err listing the
 * sweep's runs. */
int sweep_keep_only(sweep_plan *p, const char *name, char *err, int err_len);
/* "  sweep ETA 1m20s": what the runs not yet taken (left_cost) would take
 * the groups, each at this group's rate so far (done_cost in elapsed
 * seconds); "" before any.  The runs the other groups train now are not
 * counted. */
void sweep_format_eta(char *buf, size_t len, double done_cost, double elapsed,
                      double left_cost, int groups);

/* `mode-analyze report out` ($MODE_ANALYZE, else beside mode-exp, in the
 * build tree, or on PATH; a word when there is none): 0, or 1 when it
 * failed. */
int sweep_run_report(const char *out);

#endif
