/* mode-analyze tokens: the counts (token_counts.c) behind the tables
 * (tokens.c) and the figure (tokens_fig.c).  One run, or the replicates of one config: their
 * counts pooled (the take rate with a 95% Wilson interval over the pooled
 * tokens: within-run precision) and each replicate's rate kept apart (mean
 * and sd across them: the seed spread). */
#ifndef MODE_ANALYSIS_TOKEN_COUNTS_H
#define MODE_ANALYSIS_TOKEN_COUNTS_H

#include "analysis/analyze.h"
#include "analysis/stats.h"
#include "core/data/data.h"

enum { TK_BUCKETS = 8 };
enum { TK_SKIPPED, TK_TOOK };

/* One layer that records routing decisions. */
typedef struct token_layer {
    int layer;
    double cls[LABEL_CLASSES_MAX][2];  /* tokens per class that skipped / took the block,
                                          pooled over the replicates */
    double pos[TK_BUCKETS][2];         /* the same per position bucket */
    double (*run_cls)[LABEL_CLASSES_MAX][2]; /* [n_runs]: each replicate's counts */
    double (*run_pos)[TK_BUCKETS][2];
    double jaccard;                    /* mean overlap of the taken positions across the
                                          recorded sequences at the last step (mean over
                                          the replicates); -1: one sequence */
    double jaccard_chance;             /* its expectation for random sets of the same sizes */
    double h_take, mi_class, mi_pos;   /* bits, pooled */
    double chance_class, chance_pos;   /* the same for shuffled decisions (chance level) */
    double p_class, p_pos;             /* permutation p-values */
    double var_class, var_pos;         /* variance of the take rate across the groups */
} token_layer;

typedef struct tokens_report {
    const run_info *ri;        /* the first run: the layers, windows and classes */
    run_info **ris;            /* [n_runs] the replicates */
    int n_runs;
    char name[128];            /* the run's name, or the group's */
    token_layer *layers;
    int n_layers;
    long first, last;          /* the steps pooled (of the first run) */
    bool own_last;             /* no --step: each replicate's own last recorded step */
    bool predicted;            /* --predicted: positions classed by their next token */
    int n_steps;
    int bucket_len;            /* positions per bucket (the last may be shorter) */
} tokens_report;

/* Share of took among the counts c[2]; NaN with no token. */
double take_rate(const double *c);
/* Its 95% Wilson interval; NaN with no token. */
void take_interval(const double *c, double *lo, double *hi);
/* Jaccard overlap above which a router "selects the same positions in every
 * sequence". */
#define TK_DEGENERATE 0.9
/* Shuffles of the permutation test, and the p-value below which a router
 * is said to follow the class or the position. */
enum { TK_PERMUTATIONS = 2000 };
#define TK_SIGNIFICANT 0.001

/* Open the runs of a->files (one run, or the replicates of one config),
 * check them and count every routed layer into t; 0, or an exit code
 * after an_fail's message.  free_tokens_report frees t either way. */
int tokens_count(const an_args *a, tokens_report *t);
void free_tokens_report(tokens_report *t);

#endif
