/* The runs of a table or figure over many runs (compare, sweep, isoflop,
 * report): each run file is opened, read into an an_run and closed again, so
 * that a folder of a hundred runs costs one open file at a time; then the
 * runs are grouped into replicates (groups.h) and the baseline group is
 * chosen. */
#ifndef MODE_ANALYSIS_RUNSET_H
#define MODE_ANALYSIS_RUNSET_H

#include "analysis/analyze.h"
#include "analysis/groups.h"
#include "analysis/ladder.h"
#include "analysis/modelsize.h"
#include "analysis/stats.h"

#include <stdio.h>

enum { RT_PRECISION, RT_RECALL, RT_CAUSAL_CAP, RT_COUNT };
extern const char *const rule_cols[RT_COUNT]; /* the /layer_stats columns */

/* What the tables say of one run. */
typedef struct an_run {
    char path[RUN_PATH_LEN];
    char dir[RUN_PATH_LEN];
    char name[128];          /* [run] name, or its folder where two runs share a name */
    run_config *cfg;         /* its resolved config (a run_config is ~50 KB: on the heap) */
    char *data;              /* its data's fingerprint (run_info.data), or NULL */
    run_keys keys;
    char kinds[256];         /* "dense x2, mod x2" */
    char capacity[96];       /* the routed layers' capacities, "-" without */
    model_size size;
    long done, planned;      /* steps done, steps the run will make (nominal plan: under
                                run.flops_count = executed a lower bound) */
    bool executed;           /* run.flops_count = executed */
    double train_flops;      /* training FLOPs spent, as its flops_count counts them */
    double flops_nominal, flops_executed; /* both counts */
    bool complete;
    double wall_s, steps_per_s;
    long eval_step;          /* the last evaluation's step, -1 without */
    double loss_topk, loss_causal; /* the last evaluation's losses (NaN without) */
    double se_topk, se_causal;     /* their standard errors over windows (NaN in older files) */
    double windows;                /* the windows of that evaluation (NaN in older files) */
    double bpb_topk;               /* its bits per byte (NaN: unknown, or older files) */
    double rule[RT_COUNT];   /* the causal rule over routed layers, NaN without */
} an_run;

/* One group's numbers over its replicates. */
typedef struct an_group_stats {
    int used;                 /* the replicates the statistics are over: the complete ones
                                 when there are any, else all (in progress) */
    bool in_progress;         /* no replicate is complete */
    long eval_lo, eval_hi;    /* the steps of their last evaluations */
    sample_summary topk, causal;
    double se_topk, se_causal; /* mean standard error over windows (within-run precision) */
    double steps_per_s, rule[RT_COUNT];  /* means */
    welch_result vs_topk, vs_causal;     /* against the baseline (diff NaN without one) */
    double train_flops;       /* mean over the replicates used */
    double bpb_topk;          /* mean bits per byte of the replicates used (NaN: unknown) */
    multiplier mult;          /* dense-equivalent compute (ladder.h), NaN without a ladder */
} an_group_stats;

typedef struct an_runset {
    an_run *runs;
    int n;
    run_grouping g;
    an_group_stats *stats;    /* [g.n_groups] */
    int baseline;             /* group index, -1 without */
    ladder_fit ladder;        /* the dense ladder the multipliers read (n_points 0: none) */
} an_runset;

/* Read the run files of a (a->files); on error prints the message and
 * returns EXIT_BAD_INPUT (also for a --baseline that names no group). */
int an_read_runs(const an_args *a, an_runset *rs);
/* The same for paths[n] (isoflop and report read folders). */
int an_read_run_paths(const an_args *a, const char *const *paths, int n, an_runset *rs);
void an_free_runs(an_runset *rs);

/* Whether run i is used in its group's statistics. */
bool an_run_used(const an_runset *rs, int i);

/* "1.6474 ± 0.0034" of a summary (n = 1: the value, "± -"), "[lo, hi]" of
 * its interval ("-" when n < 2), a p-value ("0.089", "<0.001", "-"). */
void fmt_mean_sd(char *buf, int len, const sample_summary *s, int digits);
void fmt_interval(char *buf, int len, const sample_summary *s, int digits);
void fmt_p(char *buf, int len, double p);
/* v with digits decimals, "-" when it is not finite; with sign: "+0.0012". */
const char *fmt_num(char *buf, int len, double v, int digits, bool sign);
/* A CSV field, quoted when it holds a comma, a quote or a line break. */
void csv_field(FILE *f, const char *s);
/* ",<v>" at full precision, or "," when v is not finite. */
void csv_num(FILE *f, double v);
/* The CSV fields dense_multiplier, _lo, _hi, _extrapolated and _bound, each
 * after a comma (the bound as ">3.94", empty inside the ladder). */
void csv_multiplier(FILE *f, const multiplier *m);
/* 837.0k, 2.73M, 412 */
void fmt_params(char *buf, int len, double n);

#endif
