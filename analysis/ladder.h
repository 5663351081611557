/* The dense-equivalent compute multiplier (docs/instruments.md): from dense
 * runs at several training budgets (a ladder), the least-squares line of
 * log(loss) on log(training FLOPs); a group's final loss L then reads "dense
 * would need M times these FLOPs": M = C_dense(L) / C, with C_dense the
 * line solved for the FLOPs.  Its 95% interval from a bootstrap over both
 * the ladder's runs (resampled within each budget) and the group's
 * replicates.  Outside the ladder's loss range the line is not read: a
 * group below every rung is worth more than the largest rung's FLOPs (dense
 * would need more than them, its loss falling with compute), one above
 * every rung less than the smallest's, and the result is that bound. */
#ifndef MODE_ANALYSIS_LADDER_H
#define MODE_ANALYSIS_LADDER_H

#include <stdbool.h>
#include <stdint.h>

struct an_runset;

enum { LADDER_BOOT = 2000 };

typedef struct ladder_fit {
    int n_points, n_budgets;     /* runs, distinct budgets (at least 2 for a fit) */
    double *c, *l;               /* [n_points] training FLOPs and final losses */
    int *budget_of;              /* [n_points] the budget each belongs to */
    double c_lo, c_hi, l_lo, l_hi; /* the range the points span */
    double a, b;                 /* log L = a + b log C */
    double *boot_a, *boot_b;     /* [LADDER_BOOT] the bootstrap's fits */
    bool executed;               /* the points' FLOPs are executed ones */
    char what[256];              /* "12 dense runs at 4 budgets, 1e13 to 8e13 (nominal)" */
} ladder_fit;

typedef struct multiplier {
    double m, lo, hi;            /* M and its 95% interval; NaN without a fit */
    bool extrapolated;           /* L outside the ladder's losses: m is the line's
                                  * extrapolation, kept for the CSV only */
    char bound;                  /* '>' L below every rung, '<' above every rung, 0 inside */
    double bound_m;              /* the largest (>) or smallest (<) rung's FLOPs over C */
} multiplier;

/* The ladder of rs and more (NULL: rs alone): their complete runs whose
 * layers are all dense, at two budgets or more (their training FLOPs,
 * counted as each run's run.flops_count says).  Returns 1 with a fit, 0
 * (and an empty fit) without one, -1 with a message in err when the dense
 * runs are not one model (parameters or sequence length differ). */
int ladder_from_runs(const struct an_runset *rs, const struct an_runset *more, ladder_fit *f,
                     char *err, int err_len);
/* The same from points given directly, point i at training FLOPs c[i] with
 * loss l[i] in budget budget[i] (the isoFLOP dense frontier: each seed's
 * optimum at each budget). */
bool ladder_from_points(const double *c, const double *l, const int *budget, int n,
                        bool executed, const char *what, ladder_fit *f);
void free_ladder_fit(ladder_fit *f);

/* No multiplier (NaN, no bound): a group without a fit. */
multiplier multiplier_none(void);
/* M for a group whose replicates reached losses loss[0..n) with training
 * FLOPs c (their mean); seed keys the bootstrap. */
multiplier ladder_multiplier(const ladder_fit *f, const double *loss, int n, double c,
                             uint64_t seed);
/* "2.31 [1.95, 2.80]"; outside the ladder's losses the bound, "> 3.92" or
 * "< 0.50"; "-" without a fit. */
void fmt_multiplier(char *buf, int len, const multiplier *m);

#endif
