/* mode-analyze isoflop's data: the runs, sizes and fits that isoflop.c
 * computes, isolaw.c adds the parametric law to, and isoflop_fig.c draws. */
#ifndef MODE_ANALYSIS_ISODATA_H
#define MODE_ANALYSIS_ISODATA_H

#include "analysis/isofit.h"
#include "analysis/runset.h"
#include "analysis/scaling.h"

enum { ISO_MAX_BUDGETS = 16, ISO_MAX_KINDS = 8, ISO_KIND_LEN = 64, ISO_MAX_SEEDS = 64 };
/* The sizes an isoFLOP parabola goes through by default: the best and two on
 * each side (mode-analyze isoflop --fit-sizes). */
enum { ISO_FIT_SIZES = 5 };

/* One run file with a training-FLOP budget. */
typedef struct iso_run {
    int run;                  /* index in the runset */
    char kind[ISO_KIND_LEN];
    bool dense, usable;
    const char *why;          /* why it is left out of the fits */
    int b, k, point;
} iso_run;

/* One size of one budget and kind: a group of replicates (seeds). */
typedef struct iso_point {
    int group;                /* in the runset's grouping */
    int b, k;
    double params, flops, rel_flops;
    sample_summary loss, loss_causal; /* over its usable replicates */
    int n_runs;
} iso_point;

/* One kind's parametric law over all its usable runs (scaling.h), and at
 * each budget the optimum it gives, with 95% intervals from a bootstrap
 * that resamples each size's seeds. */
enum { ISO_LAW_BOOT = 100, ISO_CURVE = 41 };
typedef struct iso_law {
    scaling_law law;
    scaling_law boot[ISO_LAW_BOOT]; /* the bootstrap's refits (n_boot of them) */
    double kappa, gamma;      /* training FLOPs per token = kappa N^gamma */
    double n_lo, n_hi;        /* the sizes fitted */
    int n_runs, n_boot;       /* runs fitted; bootstrap refits that converged */
    double n_opt[ISO_MAX_BUDGETS], l_opt[ISO_MAX_BUDGETS];
    double n_ci[ISO_MAX_BUDGETS][2], l_ci[ISO_MAX_BUDGETS][2];
    bool outside[ISO_MAX_BUDGETS]; /* N* outside the sizes fitted */
    /* N*(C) and L*(C) over ISO_CURVE budgets from half the smallest to twice
     * the largest (log spaced), with the bootstrap's 95% intervals; NaN where
     * the optimum is at the edge of the search */
    double curve_c[ISO_CURVE], curve_n[ISO_CURVE], curve_l[ISO_CURVE];
    double curve_n_ci[ISO_CURVE][2], curve_l_ci[ISO_CURVE][2];
} iso_law;

/* One budget and kind: the fit through the sizes' means, and the spread of
 * the optima of the fits through each seed's points alone. */
typedef struct iso_group {
    int n_points;             /* sizes with a usable replicate */
    isofit fit;
    int best;                 /* the point of the lowest mean, -1 */
    int n_seeds;              /* seeds whose points give an optimum */
    double seed_n[ISO_MAX_SEEDS], seed_loss[ISO_MAX_SEEDS];
    sample_summary seed_loss_s, seed_log10n; /* over those seeds */
    welch_result vs_dense;    /* seed optima against the dense kind's */
} iso_group;

typedef struct iso_data {
    const char *dir;
    an_runset rs;
    iso_run *runs;
    int n_runs, n_other;
    iso_point *points;
    int n_points;
    double budgets[ISO_MAX_BUDGETS];
    int n_b;
    char kinds[ISO_MAX_KINDS][ISO_KIND_LEN];
    bool kind_dense[ISO_MAX_KINDS];
    int n_k, dense_kind;
    iso_group groups[ISO_MAX_BUDGETS][ISO_MAX_KINDS];
    double ref_flops[ISO_MAX_BUDGETS];
    bool ref_dense[ISO_MAX_BUDGETS];
    int width, height;
    int fit_sizes; /* the sizes around the best one each fit goes through; 0: all */
    ladder_fit ladder; /* the dense frontier (each seed's optimum at each budget) as a ladder */
    multiplier mult[ISO_MAX_BUDGETS][ISO_MAX_KINDS]; /* a kind's optimum in dense compute */
    iso_law laws[ISO_MAX_KINDS];
} iso_data;

#endif
