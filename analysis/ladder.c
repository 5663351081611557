/* The dense-equivalent compute multiplier (ladder.h). */
#include "analysis/ladder.h"
#include "analysis/runset.h"

#include "core/rng/pcg32.h"
#include "core/rng/streams.h"

#include <gsl/gsl_fit.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void free_ladder_fit(ladder_fit *f)
{
    free(f->c);
    free(f->l);
    free(f->budget_of);
    free(f->boot_a);
    free(f->boot_b);
    memset(f, 0, sizeof(*f));
}

/* Least squares of y = a + b x over the points idx[0..n) (GSL's
 * gsl_fit_linear), gathered into gx[n], gy[n]; false with fewer than two
 * points or one x. */
static bool line(const double *x, const double *y, const int *idx, int n, double *gx, double *gy,
                 double *a, double *b)
{
    for (int i = 0; i < n; i++) {
        gx[i] = x[idx[i]];
        gy[i] = y[idx[i]];
    }
    double c0, c1, cov00, cov01, cov11, sumsq;
    if (n < 2 ||
        gsl_fit_linear(gx, 1, gy, 1, (size_t)n, &c0, &c1, &cov00, &cov01, &cov11, &sumsq) ||
        !isfinite(c0) || !isfinite(c1))
        return false;
    *a = c0;
    *b = c1;
    return true;
}

/* The fit and its bootstrap from f->c, f->l, f->budget_of. */
static bool fit(ladder_fit *f)
{
    int n = f->n_points;
    double *x = malloc((size_t)n * 4 * sizeof(double)), *y = x ? x + n : NULL;
    double *gx = x ? y + n : NULL, *gy = x ? gx + n : NULL;
    int *idx = malloc((size_t)n * sizeof(int));
    f->boot_a = malloc(LADDER_BOOT * sizeof(double));
    f->boot_b = malloc(LADDER_BOOT * sizeof(double));
    bool ok = x && idx && f->boot_a && f->boot_b;
    f->c_lo = f->l_lo = HUGE_VAL;
    f->c_hi = f->l_hi = -HUGE_VAL;
    for (int i = 0; ok && i < n; i++) {
        x[i] = log(f->c[i]);
        y[i] = log(f->l[i]);
        idx[i] = i;
        f->c_lo = fmin(f->c_lo, f->c[i]);
        f->c_hi = fmax(f->c_hi, f->c[i]);
        f->l_lo = fmin(f->l_lo, f->l[i]);
        f->l_hi = fmax(f->l_hi, f->l[i]);
    }
    ok = ok && line(x, y, idx, n, gx, gy, &f->a, &f->b) && f->b < 0.0;
    /* the bootstrap: each budget's runs drawn with replacement from its own */
    pcg32 g;
    pcg32_keyed(&g, 1, PCG_KEY_BOOT, 0, 0);
    int *in_budget = malloc((size_t)n * sizeof(int));
    ok = ok && in_budget;
    for (int s = 0; ok && s < LADDER_BOOT; s++) {
        int m = 0;
        for (int bu = 0; bu < f->n_budgets; bu++) {
            int cnt = 0;
            for (int i = 0; i < n; i++)
                if (f->budget_of[i] == bu)
                    in_budget[cnt++] = i;
            for (int k = 0; k < cnt; k++)
                idx[m++] = in_budget[pcg32_bounded(&g, (uint32_t)cnt)];
        }
        if (!line(x, y, idx, m, gx, gy, &f->boot_a[s], &f->boot_b[s])) {
            f->boot_a[s] = f->a;
            f->boot_b[s] = f->b;
        }
    }
    free(in_budget);
    free(x);
    free(idx);
    return ok;
}

static int budget_index(double *budgets, int *n, double v)
{
    for (int i = 0; i < *n; i++)
        if (fabs(budgets[i] - v) <= 1e-9 * fabs(v))
            return i;
    budgets[*n] = v;
    return (*n)++;
}

static bool all_dense(const an_run *r)
{
    return r->cfg->n_layers > 0 && run_config_dense(r->cfg) && r->complete && isfinite(r->loss_topk) && r->train_flops > 0.0;
}

int ladder_from_runs(const an_runset *rs, const an_runset *more, ladder_fit *f, char *err,
                     int err_len)
{
    memset(f, 0, sizeof(*f));
    const an_runset *sets[2] = { rs, more };
    int n_max = rs->n + (more ? more->n : 0) + 1;
    f->c = malloc((size_t)n_max * sizeof(double));
    f->l = malloc((size_t)n_max * sizeof(double));
    f->budget_of = malloc((size_t)n_max * sizeof(int));
    double *budgets = malloc((size_t)n_max * sizeof(double));
    if (!f->c || !f->l || !f->budget_of || !budgets) {
        free(budgets);
        free_ladder_fit(f);
        snprintf(err, (size_t)err_len, "out of memory");
        return -1;
    }
    /* one model: a line through dense runs of two sizes or sequence lengths
     * would mix two scaling curves */
    const an_run *first = NULL;
    int executed = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; sets[s] && i < sets[s]->n; i++) {
            const an_run *r = &sets[s]->runs[i];
            if (!all_dense(r))
                continue;
            if (!first)
                first = r;
            else if (r->size.params != first->size.params ||
                     r->cfg->seq_len != first->cfg->seq_len) {
                snprintf(err, (size_t)err_len, "the dense runs differ in their model: %s has "
                         "%lld parameters and sequences of %d, %s %lld and %d; a ladder is "
                         "one model at several budgets", first->path,
                         (long long)first->size.params, first->cfg->seq_len, r->path,
                         (long long)r->size.params, r->cfg->seq_len);
                free(budgets);
                free_ladder_fit(f);
                return -1;
            }
            double key = r->cfg->flops_budget > 0 ? r->cfg->flops_budget : (double)r->cfg->steps;
            f->c[f->n_points] = r->train_flops;
            f->l[f->n_points] = r->loss_topk;
            f->budget_of[f->n_points++] = budget_index(budgets, &f->n_budgets, key);
            executed += r->executed;
        }
    f->executed = executed > 0;
    bool ok = f->n_budgets >= 2 && fit(f);
    if (ok)
        snprintf(f->what, sizeof(f->what), "%d dense runs at %d budgets, %.3g to %.3g training "
                 "FLOPs (%s)", f->n_points, f->n_budgets, f->c_lo, f->c_hi,
                 f->executed ? "executed" : "nominal");
    free(budgets);
    if (!ok)
        free_ladder_fit(f);
    return ok ? 1 : 0;
}

bool ladder_from_points(const double *c, const double *l, const int *budget, int n,
                        bool executed, const char *what, ladder_fit *f)
{
    memset(f, 0, sizeof(*f));
    f->c = malloc((size_t)(n + 1) * sizeof(double));
    f->l = malloc((size_t)(n + 1) * sizeof(double));
    f->budget_of = malloc((size_t)(n + 1) * sizeof(int));
    if (!f->c || !f->l || !f->budget_of) {
        free_ladder_fit(f);
        return false;
    }
    double *ids = malloc((size_t)(n + 1) * sizeof(double));
    if (!ids) {
        free_ladder_fit(f);
        return false;
    }
    for (int i = 0; i < n; i++)
        if (c[i] > 0 && isfinite(l[i]) && l[i] > 0) {
            f->c[f->n_points] = c[i];
            f->l[f->n_points] = l[i];
            f->budget_of[f->n_points++] = budget_index(ids, &f->n_budgets, (double)budget[i]);
        }
    free(ids);
    f->executed = executed;
    bool ok = f->n_budgets >= 2 && fit(f);
    if (ok)
        snprintf(f->what, sizeof(f->what), "%s", what);
    else
        free_ladder_fit(f);
    return ok;
}

multiplier multiplier_none(void)
{
    return (multiplier){ (double)NAN, (double)NAN, (double)NAN, false, 0, (double)NAN };
}

multiplier ladder_multiplier(const ladder_fit *f, const double *loss, int n, double c,
                             uint64_t seed)
{
    multiplier r = multiplier_none();
    if (!f || f->n_points < 2 || n < 1 || !(c > 0.0))
        return r;
    double mean = 0.0;
    for (int i = 0; i < n; i++)
        mean += loss[i];
    mean /= n;
    if (!(mean > 0.0))
        return r;
    r.m = exp((log(mean) - f->a) / f->b) / c;
    r.extrapolated = mean < f->l_lo || mean > f->l_hi;
    /* below every rung, dense needs more than the largest rung's FLOPs
     * (whatever the line says: a flat ladder's line reads absurd values);
     * above every rung, less than the smallest's */
    if (mean < f->l_lo) {
        r.bound = '>';
        r.bound_m = f->c_hi / c;
    } else if (mean > f->l_hi) {
        r.bound = '<';
        r.bound_m = f->c_lo / c;
    }
    double *ms = malloc(LADDER_BOOT * sizeof(double));
    if (!ms)
        return r;
    pcg32 g;
    pcg32_keyed(&g, seed, PCG_KEY_BOOT, 1, 0);
    for (int s = 0; s < LADDER_BOOT; s++) {
        double m = 0.0;
        for (int i = 0; i < n; i++)
            m += loss[pcg32_bounded(&g, (uint32_t)n)];
        m /= n;
        ms[s] = exp((log(m) - f->boot_a[s]) / f->boot_b[s]) / c;
    }
    gsl_sort(ms, 1, LADDER_BOOT);
    r.lo = gsl_stats_quantile_from_sorted_data(ms, 1, LADDER_BOOT, 0.025);
    r.hi = gsl_stats_quantile_from_sorted_data(ms, 1, LADDER_BOOT, 0.975);
    free(ms);
    return r;
}

void fmt_multiplier(char *buf, int len, const multiplier *m)
{
    if (!isfinite(m->m))
        snprintf(buf, (size_t)len, "-");
    else if (m->bound)
        snprintf(buf, (size_t)len, "%c %.2f", m->bound, m->bound_m);
    else
        snprintf(buf, (size_t)len, "%.2f [%.2f, %.2f]", m->m, m->lo, m->hi);
}
