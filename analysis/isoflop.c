/* mode-analyze isoflop: the isoFLOP analysis of the MoD paper (Fig. 4) over
 * a folder of runs trained at fixed training-FLOP budgets (run.flops_budget,
 * as `mode-exp sweep` with an [isoflop] design makes them), with replicates.
 *
 * Per budget and kind, each size is a group of replicates (seeds): its mean
 * final held-out loss (top-k routing) with a 95% interval.  A least-squares
 * parabola in log parameters through the means gives the compute-optimal
 * size N* and loss* (analysis/isofit.c); by default it goes through the
 * best size's mean and the two sizes' on each side (ISO_FIT_SIZES), since
 * over a sweep's whole range of sizes the curve is not one parabola and a
 * fit through all of them misplaces the minimum.  How sure that optimum is:
 * the same fit through each seed's points alone (seed s of every size, the
 * seeds paired as the sweep pairs them), whose optima spread as the seeds
 * do: the sd and 95% interval (Student's t over the seeds) of loss* and of
 * log10 N*, and Welch's test of each kind's seed optima against the dense
 * kind's.  (A bootstrap over seeds would resample three values per size:
 * too few to say more than the per-seed fits show directly.)
 *
 * A run's kind is the last part of its name when the name is a sweep's
 * "iso-<budget>-<size>-<kind>[-s<seed>]", else its repeating pattern of
 * layer kinds ("dense", "dense+mod").  Runs short of their planned steps,
 * or without an evaluation at the last step, are listed and left out. */
#include "analysis/isoflop.h"
#include "analysis/isolaw.h"

#include "analysis/rundir.h"

#include <gsl/gsl_sort.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "dense+mod": the shortest repeating group of the layer kinds. */
static void pattern_kind(const run_config *c, char *out, int len)
{
    int L = c->n_layers, p = 1;
    for (; p < L; p++) {
        bool repeats = L % p == 0;
        for (int l = p; l < L && repeats; l++)
            repeats = !strcmp(c->layers[l].kind, c->layers[l % p].kind);
        if (repeats)
            break;
    }
    int w = 0;
    out[0] = '\0';
    for (int l = 0; l < p && w < len; l++)
        w += snprintf(out + w, (size_t)(len - w), "%s%s", l ? "+" : "", c->layers[l].kind);
}

static void run_kind(const an_run *r, char *out, int len)
{
    char base[128];
    group_base_name(r->cfg->name, base, (int)sizeof(base)); /* without -s<seed> */
    const char *dash = strrchr(base, '-');
    int dashes = 0;
    for (const char *c = base; *c; c++)
        dashes += *c == '-';
    if (!strncmp(base, "iso-", 4) && dashes >= 3 && dash[1])
        snprintf(out, (size_t)len, "%s", dash + 1);
    else
        pattern_kind(r->cfg, out, len);
}

static int budget_index(const iso_data *d, double b)
{
    for (int i = 0; i < d->n_b; i++)
        if (fabs(d->budgets[i] - b) <= 1e-9 * b)
            return i;
    return -1;
}

/* The runs with a budget, their kinds and whether they count. */
static int collect_runs(const an_args *a, iso_data *d)
{
    d->runs = calloc((size_t)(d->rs.n ? d->rs.n : 1), sizeof(iso_run));
    if (!d->runs)
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    for (int i = 0; i < d->rs.n; i++) {
        const an_run *r = &d->rs.runs[i];
        if (!(r->cfg->flops_budget > 0.0)) {
            d->n_other++;
            continue;
        }
        iso_run *ir = &d->runs[d->n_runs++];
        ir->run = i;
        run_kind(r, ir->kind, (int)sizeof(ir->kind));
        ir->dense = run_config_dense(r->cfg);
        ir->why = !r->complete                   ? "incomplete"
                  : !isfinite(r->loss_topk)      ? "no held-out evaluation"
                  : r->eval_step != r->done      ? "no evaluation at the last step"
                                                 : NULL;
        ir->usable = !ir->why;
    }
    if (d->n_runs == 0)
        return an_fail(a, EXIT_BAD_INPUT, "%s: no run has run.flops_budget set (an isoFLOP "
                       "sweep's runs do: mode-exp sweep with an [isoflop] design)", d->dir);
    return 0;
}

/* Budgets ascending, kinds dense first then in order of appearance. */
static int index_runs(const an_args *a, iso_data *d)
{
    for (int i = 0; i < d->n_runs; i++) {
        double b = d->rs.runs[d->runs[i].run].cfg->flops_budget;
        if (budget_index(d, b) < 0) {
            if (d->n_b == ISO_MAX_BUDGETS)
                return an_fail(a, EXIT_BAD_INPUT, "%s: more than %d budgets", d->dir,
                               ISO_MAX_BUDGETS);
            d->budgets[d->n_b++] = b;
        }
    }
    gsl_sort(d->budgets, 1, (size_t)d->n_b);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < d->n_runs; i++) {
            const iso_run *r = &d->runs[i];
            bool known = false;
            for (int k = 0; k < d->n_k; k++)
                known |= !strcmp(d->kinds[k], r->kind);
            bool all_dense = true; /* every run of the kind is dense */
            for (int j = 0; j < d->n_runs; j++)
                if (!strcmp(d->runs[j].kind, r->kind))
                    all_dense &= d->runs[j].dense;
            if (known || all_dense != (pass == 0))
                continue;
            if (d->n_k == ISO_MAX_KINDS)
                return an_fail(a, EXIT_BAD_INPUT, "%s: more than %d kinds", d->dir,
                               ISO_MAX_KINDS);
            snprintf(d->kinds[d->n_k], ISO_KIND_LEN, "%s", r->kind);
            d->kind_dense[d->n_k++] = all_dense;
        }
    d->dense_kind = d->n_k > 0 && d->kind_dense[0] ? 0 : -1;
    for (int i = 0; i < d->n_runs; i++) {
        iso_run *r = &d->runs[i];
        r->b = budget_index(d, d->rs.runs[r->run].cfg->flops_budget);
        for (int k = 0; k < d->n_k; k++)
            if (!strcmp(d->kinds[k], r->kind))
                r->k = k;
    }
    return 0;
}

/* Each replicate group of budget runs is a point: its usable replicates'
 * losses summarised. */
static int make_points(const an_args *a, iso_data *d)
{
    d->points = calloc((size_t)d->n_runs, sizeof(iso_point));
    double *y = malloc((size_t)d->n_runs * sizeof(double));
    double *yc = malloc((size_t)d->n_runs * sizeof(double));
    if (!d->points || !y || !yc) {
        free(y);
        free(yc);
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    }
    for (int i = 0; i < d->n_runs; i++) {
        iso_run *r = &d->runs[i];
        int grp = d->rs.g.group_of[r->run], p = 0;
        while (p < d->n_points && d->points[p].group != grp)
            p++;
        r->point = p;
        if (p < d->n_points)
            continue;
        iso_point *pt = &d->points[d->n_points++];
        const an_run *ar = &d->rs.runs[r->run];
        pt->group = grp;
        pt->b = r->b;
        pt->k = r->k;
        pt->params = (double)ar->size.params;
        pt->flops = ar->size.forward_flops;
        int n = 0;
        for (int j = 0; j < d->n_runs; j++)
            if (d->rs.g.group_of[d->runs[j].run] == grp) {
                pt->n_runs++;
                if (d->runs[j].usable) {
                    y[n] = d->rs.runs[d->runs[j].run].loss_topk;
                    yc[n++] = d->rs.runs[d->runs[j].run].loss_causal;
                }
            }
        summarize(y, n, &pt->loss);
        summarize(yc, n, &pt->loss_causal);
    }
    free(y);
    free(yc);
    return 0;
}


/* The fits of one seed's points of budget b and kind k: its optimum. */
static bool seed_optimum(const iso_data *d, int b, int k, uint64_t seed, double *x, double *y,
                         double *n_opt, double *loss_opt)
{
    int n = 0;
    double params[ISO_MAX_SEEDS * 8];
    for (int i = 0; i < d->n_runs && n < ISO_MAX_SEEDS * 8; i++) {
        const iso_run *r = &d->runs[i];
        const an_run *ar = &d->rs.runs[r->run];
        if (r->b != b || r->k != k || !r->usable || ar->cfg->seed != seed)
            continue;
        params[n] = (double)ar->size.params;
        x[n] = log(params[n]);
        y[n++] = ar->loss_topk;
    }
    isofit f;
    isoflop_optimum_near(x, y, n, d->fit_sizes, &f);
    if (f.status == ISOFIT_EMPTY)
        return false;
    *n_opt = f.status == ISOFIT_INTERIOR ? exp(f.x_opt) : params[f.best];
    *loss_opt = f.y_opt;
    return true;
}

static void fit_group(iso_data *d, int b, int k, double *x, double *y, int *idx)
{
    iso_group *g = &d->groups[b][k];
    g->n_points = 0;
    for (int p = 0; p < d->n_points; p++) {
        const iso_point *pt = &d->points[p];
        if (pt->b != b || pt->k != k || pt->loss.n == 0)
            continue;
        x[g->n_points] = log(pt->params);
        y[g->n_points] = pt->loss.mean;
        idx[g->n_points++] = p;
    }
    isoflop_optimum_near(x, y, g->n_points, d->fit_sizes, &g->fit);
    g->best = g->fit.best >= 0 ? idx[g->fit.best] : -1;
    /* the seeds, in order of appearance */
    uint64_t seeds[ISO_MAX_SEEDS];
    int n_seeds = 0;
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *r = &d->runs[i];
        uint64_t s = d->rs.runs[r->run].cfg->seed;
        bool seen = false;
        for (int j = 0; j < n_seeds; j++)
            seen |= seeds[j] == s;
        if (r->b == b && r->k == k && r->usable && !seen && n_seeds < ISO_MAX_SEEDS)
            seeds[n_seeds++] = s;
    }
    g->n_seeds = 0;
    double logn[ISO_MAX_SEEDS];
    for (int j = 0; j < n_seeds; j++) {
        double n_opt, loss_opt;
        if (seed_optimum(d, b, k, seeds[j], x, y, &n_opt, &loss_opt)) {
            g->seed_n[g->n_seeds] = n_opt;
            g->seed_loss[g->n_seeds] = loss_opt;
            logn[g->n_seeds++] = log10(n_opt);
        }
    }
    summarize(g->seed_loss, g->n_seeds, &g->seed_loss_s);
    summarize(logn, g->n_seeds, &g->seed_log10n);
}

/* The fits, and per budget the reference of the relative FLOPs: the dense
 * size of the lowest mean loss, else the size of the lowest. */
static int fit_groups(const an_args *a, iso_data *d)
{
    size_t n = (size_t)(d->n_runs > ISO_MAX_SEEDS * 8 ? d->n_runs : ISO_MAX_SEEDS * 8);
    double *x = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
    int *idx = malloc(n * sizeof(int));
    if (!x || !y || !idx) {
        free(x);
        free(y);
        free(idx);
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    }
    for (int b = 0; b < d->n_b; b++) {
        for (int k = 0; k < d->n_k; k++)
            fit_group(d, b, k, x, y, idx);
        for (int k = 0; k < d->n_k; k++) {
            iso_group *g = &d->groups[b][k];
            if (d->dense_kind >= 0)
                welch_test(&g->seed_loss_s, &d->groups[b][d->dense_kind].seed_loss_s,
                           &g->vs_dense);
            else
                g->vs_dense.diff = g->vs_dense.t = g->vs_dense.df = g->vs_dense.p = (double)NAN;
        }
        int ref = -1;
        for (int dense = 1; dense >= 0 && ref < 0; dense--)
            for (int p = 0; p < d->n_points; p++) {
                const iso_point *pt = &d->points[p];
                if (pt->b == b && pt->loss.n > 0 && (d->kind_dense[pt->k] || !dense) &&
                    (ref < 0 || pt->loss.mean < d->points[ref].loss.mean))
                    ref = p;
            }
        d->ref_flops[b] = ref >= 0 ? d->points[ref].flops : (double)NAN;
        d->ref_dense[b] = ref >= 0 && d->kind_dense[d->points[ref].k];
    }
    for (int p = 0; p < d->n_points; p++)
        d->points[p].rel_flops = d->points[p].flops / d->ref_flops[d->points[p].b];
    free(x);
    free(y);
    free(idx);
    return 0;
}

/* ---- tables ---------------------------------------------------------------- */

/* The dense frontier as a ladder (ladder.h): each seed's optimum of the
 * dense kind at each budget; then every other kind's optimum (its seeds'
 * optima the replicates) in dense compute: what the dense frontier would
 * need for that loss, over the budget. */
static void frontier_multipliers(iso_data *d)
{
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++)
            d->mult[b][k] = multiplier_none();
    if (d->dense_kind < 0)
        return;
    int cap = d->n_b * ISO_MAX_SEEDS + 1, n = 0, executed = 0;
    double *c = malloc((size_t)cap * sizeof(double)), *l = malloc((size_t)cap * sizeof(double));
    int *bud = malloc((size_t)cap * sizeof(int));
    for (int i = 0; i < d->rs.n; i++)
        executed += d->rs.runs[i].executed;
    for (int b = 0; c && l && bud && b < d->n_b; b++) {
        const iso_group *g = &d->groups[b][d->dense_kind];
        for (int s = 0; s < g->n_seeds; s++, n++) {
            c[n] = d->budgets[b];
            l[n] = g->seed_loss[s];
            bud[n] = b;
        }
        if (!g->n_seeds && g->n_points > 0 && isfinite(g->fit.y_opt)) {
            c[n] = d->budgets[b];
            l[n] = g->fit.y_opt;
            bud[n++] = b;
        }
    }
    char what[160];
    snprintf(what, sizeof(what), "the dense frontier's optima (each seed's) at the budgets");
    if (c && l && bud && ladder_from_points(c, l, bud, n, executed > 0, what, &d->ladder))
        for (int b = 0; b < d->n_b; b++)
            for (int k = 0; k < d->n_k; k++) {
                const iso_group *g = &d->groups[b][k];
                if (k == d->dense_kind || !g->n_points)
                    continue;
                double one = g->fit.y_opt;
                d->mult[b][k] = g->n_seeds
                                    ? ladder_multiplier(&d->ladder, g->seed_loss, g->n_seeds,
                                                        d->budgets[b], (uint64_t)(b * 64 + k + 1))
                                    : ladder_multiplier(&d->ladder, &one, 1, d->budgets[b],
                                                        (uint64_t)(b * 64 + k + 1));
            }
    free(c);
    free(l);
    free(bud);
}

/* v formatted into buf (an array), or "-" when it is not finite. */
#define NUM(buf, f, v) (isfinite(v) ? (snprintf(buf, sizeof(buf), f, v), (const char *)buf) : "-")

/* The dense kind's optimum of budget b, NaN without one. */
static double dense_opt(const iso_data *d, int b)
{
    return d->dense_kind >= 0 && d->groups[b][d->dense_kind].n_points > 0
               ? d->groups[b][d->dense_kind].fit.y_opt
               : (double)NAN;
}

static int runs_of(const iso_data *d, int b, int k)
{
    int total = 0;
    for (int i = 0; i < d->n_runs; i++)
        total += d->runs[i].b == b && d->runs[i].k == k;
    return total;
}

static const char *point_name(const iso_data *d, int p)
{
    return p >= 0 ? d->rs.g.groups[d->points[p].group].name : "-";
}

/* "9.1k to 14.2k" of the seeds' N*, "-" without two */
static void seed_range(char *buf, int len, const iso_group *g)
{
    if (g->n_seeds < 2) {
        snprintf(buf, (size_t)len, "-");
        return;
    }
    double lo = HUGE_VAL, hi = -HUGE_VAL;
    for (int s = 0; s < g->n_seeds; s++) {
        lo = fmin(lo, g->seed_n[s]);
        hi = fmax(hi, g->seed_n[s]);
    }
    char a[24], b[24];
    fmt_params(a, (int)sizeof(a), lo);
    fmt_params(b, (int)sizeof(b), hi);
    snprintf(buf, (size_t)len, "%s to %s", a, b);
}

static void write_frontier_md(FILE *f, const iso_data *d)
{
    fprintf(f, "| budget | kind | sizes | seeds | fit | N* | N* of the seeds | loss* | "
               "loss* of the seeds | 95%% CI | loss* - dense | p | loss* / dense | x dense FLOPs | "
               "best size | its loss |\n");
    fprintf(f, "| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
               "---: | ---: | ---: | --- | ---: |\n");
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const iso_group *g = &d->groups[b][k];
            if (!runs_of(d, b, k))
                continue;
            char bl[32], np[32], rng[96], s[6][64];
            number_label(bl, (int)sizeof(bl), d->budgets[b], 4);
            fmt_params(np, (int)sizeof(np), iso_n_opt(d, g));
            seed_range(rng, (int)sizeof(rng), g);
            fmt_mean_sd(s[0], 64, &g->seed_loss_s, 4);
            fmt_interval(s[1], 64, &g->seed_loss_s, 4);
            fmt_p(s[2], 64, k == d->dense_kind ? (double)NAN : g->vs_dense.p);
            double dn = dense_opt(d, b), y = g->fit.y_opt;
            char y4[32], dy[32], ry[32], fit[96];
            if (g->fit.status == ISOFIT_INTERIOR || g->fit.status == ISOFIT_EDGE)
                snprintf(fit, sizeof(fit), "%s (%d sizes)", isofit_status_text(g->fit.status),
                         g->fit.n_used);
            else
                snprintf(fit, sizeof(fit), "%s", isofit_status_text(g->fit.status));
            char mb[64];
            fmt_multiplier(mb, sizeof(mb), &d->mult[b][k]);
            fprintf(f, "| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | "
                       "%s | %s |\n",
                    bl, d->kinds[k], g->n_points, g->n_seeds, fit,
                    np, rng, NUM(y4, "%.4f", y), s[0], s[1], NUM(dy, "%+.4f", y - dn), s[2],
                    NUM(ry, "%.4f", y / dn), k == d->dense_kind ? "1 (dense)" : mb,
                    point_name(d, g->best),
                    g->best >= 0 ? NUM(s[3], "%.4f", d->points[g->best].loss.mean) : "-");
        }
}

static void write_points_md(FILE *f, const iso_data *d)
{
    fprintf(f, "| size (group) | budget | kind | params | FLOPs/fwd/seq | relative FLOPs | n | "
               "loss top-k | 95%% CI | loss causal |\n");
    fprintf(f, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int p = 0; p < d->n_points; p++) {
        const iso_point *pt = &d->points[p];
        char bl[32], np[32], fl[32], s[4][64];
        number_label(bl, (int)sizeof(bl), d->budgets[pt->b], 4);
        fmt_params(np, (int)sizeof(np), pt->params);
        number_label(fl, (int)sizeof(fl), pt->flops, 3);
        fmt_mean_sd(s[0], 64, &pt->loss, 4);
        fmt_interval(s[1], 64, &pt->loss, 4);
        fmt_mean_sd(s[2], 64, &pt->loss_causal, 4);
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %d of %d | %s | %s | %s |\n",
                point_name(d, p), bl, d->kinds[pt->k], np, fl,
                NUM(s[3], "%.3f", pt->rel_flops), pt->loss.n, pt->n_runs, s[0], s[1], s[2]);
    }
}

/* Which sizes the fits go through, for the texts. */
static const char *fit_sizes_text(const iso_data *d)
{
    static char buf[96];
    if (d->fit_sizes <= 0)
        return "every size";
    snprintf(buf, sizeof(buf), "the best size and its neighbours, %d sizes", d->fit_sizes);
    return buf;
}

static void write_md(FILE *f, const iso_data *d)
{
    fprintf(f, "# isoFLOP analysis of %s\n\n", d->dir);
    fprintf(f, "Final held-out loss (top-k routing) against parameters N at each training-FLOP "
               "budget. Each size is the mean over its seeds; per budget and kind a "
               "least-squares parabola in ln N through the means of %s gives the "
               "compute-optimal N* and loss* (the best sampled size where the parabola has no "
               "minimum inside those sizes). Their uncertainty: the same fit through each "
               "seed's points alone (around that seed's best size); the table gives those "
               "optima's range of N*, their loss* as mean ± sd with a 95%% interval (Student's "
               "t over the seeds), and p, Welch's two-sided test of the seeds' loss* against "
               "the dense kind's. x dense FLOPs: the training FLOPs the dense frontier would "
               "need for a kind's loss*, over the budget, from the line of log loss* on log "
               "FLOPs through the dense seeds' optima at every budget, with a 95%% bootstrap "
               "interval over those optima and the kind's seeds; below every optimum of the "
               "frontier, > its largest budget over this one (above every optimum, < its "
               "smallest over this one): the line is not extrapolated.\n\n",
            fit_sizes_text(d));
    write_frontier_md(f, d);
    fprintf(f, "\n## Sizes\n\nEach size's replicates: n of them usable (complete, evaluated "
               "at the last step); relative FLOPs: forward FLOPs per sequence over those of "
               "the best dense size of the same budget.\n\n");
    write_points_md(f, d);
    int left = 0;
    for (int i = 0; i < d->n_runs; i++)
        left += !d->runs[i].usable;
    if (left) {
        fprintf(f, "\nLeft out:\n\n");
        for (int i = 0; i < d->n_runs; i++)
            if (!d->runs[i].usable) {
                const an_run *r = &d->rs.runs[d->runs[i].run];
                fprintf(f, "- %s: %s (step %ld of %ld)\n", r->name, d->runs[i].why, r->done,
                        r->planned);
            }
    }
    if (d->n_other)
        fprintf(f, "\n%d run%s without run.flops_budget left out.\n", d->n_other,
                d->n_other > 1 ? "s" : "");
}

static void write_csv(FILE *f, const iso_data *d)
{
    fprintf(f, "budget,kind,sizes,seeds,fit,n_opt,loss_opt,dense_loss_opt,loss_minus_dense,"
               "loss_over_dense,p_vs_dense,seed_n_opt_lo,seed_n_opt_hi,seed_log10_n_opt_mean,"
               "seed_log10_n_opt_sd,seed_loss_opt_mean,seed_loss_opt_sd,seed_loss_opt_ci_lo,"
               "seed_loss_opt_ci_hi,best_size,best_params,best_loss,a,b,c,fit_sizes,"
               "dense_multiplier,dense_multiplier_lo,dense_multiplier_hi,"
               "dense_multiplier_extrapolated,dense_multiplier_bound\n");
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const iso_group *g = &d->groups[b][k];
            if (!runs_of(d, b, k))
                continue;
            double dn = dense_opt(d, b), y = g->fit.y_opt, lo = HUGE_VAL, hi = -HUGE_VAL;
            for (int s = 0; s < g->n_seeds; s++) {
                lo = fmin(lo, g->seed_n[s]);
                hi = fmax(hi, g->seed_n[s]);
            }
            fprintf(f, "%.17g,", d->budgets[b]);
            csv_field(f, d->kinds[k]);
            fprintf(f, ",%d,%d,%s", g->n_points, g->n_seeds,
                    g->fit.status == ISOFIT_INTERIOR ? "parabola"
                    : g->fit.status == ISOFIT_EMPTY  ? "none"
                                                     : "best_sampled");
            csv_num(f, iso_n_opt(d, g));
            csv_num(f, y);
            csv_num(f, dn);
            csv_num(f, y - dn);
            csv_num(f, y / dn);
            csv_num(f, k == d->dense_kind ? (double)NAN : g->vs_dense.p);
            csv_num(f, g->n_seeds ? lo : (double)NAN);
            csv_num(f, g->n_seeds ? hi : (double)NAN);
            csv_num(f, g->seed_log10n.mean);
            csv_num(f, g->seed_log10n.sd);
            csv_num(f, g->seed_loss_s.mean);
            csv_num(f, g->seed_loss_s.sd);
            csv_num(f, g->seed_loss_s.ci_lo);
            csv_num(f, g->seed_loss_s.ci_hi);
            fputc(',', f);
            if (g->best >= 0)
                csv_field(f, point_name(d, g->best));
            csv_num(f, g->best >= 0 ? d->points[g->best].params : (double)NAN);
            csv_num(f, g->best >= 0 ? d->points[g->best].loss.mean : (double)NAN);
            csv_num(f, g->fit.a);
            csv_num(f, g->fit.b);
            csv_num(f, g->fit.c);
            fprintf(f, ",%d", g->fit.n_used);
            const multiplier *mu = &d->mult[b][k];
            csv_multiplier(f, mu);
            fputc('\n', f);
        }
}

static void write_runs_csv(FILE *f, const iso_data *d)
{
    fprintf(f, "run,size,seed,budget,kind,params,flops_per_seq,rel_flops,steps,planned,"
               "loss_topk,loss_causal,used\n");
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *ir = &d->runs[i];
        const an_run *r = &d->rs.runs[ir->run];
        csv_field(f, r->name);
        fputc(',', f);
        csv_field(f, point_name(d, ir->point));
        fprintf(f, ",%llu,%.17g,", (unsigned long long)r->cfg->seed, r->cfg->flops_budget);
        csv_field(f, ir->kind);
        fprintf(f, ",%lld", (long long)r->size.params);
        csv_num(f, r->size.forward_flops);
        csv_num(f, d->points[ir->point].rel_flops);
        fprintf(f, ",%ld,%ld", r->done, r->planned);
        csv_num(f, r->loss_topk);
        csv_num(f, r->loss_causal);
        fprintf(f, ",%d\n", ir->usable);
    }
}

/* ---- the command ------------------------------------------------------------ */

int cmd_isoflop(const an_args *a)
{
    iso_data *d = calloc(1, sizeof(iso_data));
    char **paths = NULL, err[RUN_PATH_LEN + 256], path[RUN_PATH_LEN + 64];
    int n_paths = 0, rc = EXIT_BAD_INPUT;
    an_text t = { 0 };
    if (!d)
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    d->dir = a->files[0];
    d->fit_sizes = a->fit_sizes == 0 ? ISO_FIT_SIZES : a->fit_sizes < 0 ? 0 : a->fit_sizes;
    if (list_run_files(d->dir, &paths, &n_paths, err, (int)sizeof(err))) {
        an_fail(a, EXIT_BAD_INPUT, "%s", err);
        goto done;
    }
    an_args quiet = *a; /* dense runs of many sizes are no ladder: the frontier is */
    quiet.no_ladder = true;
    if (an_read_run_paths(&quiet, (const char *const *)paths, n_paths, &d->rs))
        goto done;
    if (collect_runs(a, d) || index_runs(a, d) || make_points(a, d) || fit_groups(a, d))
        goto done;
    frontier_multipliers(d);
    isoflop_laws(d);
    /* the output folder: --out, else the sweep's folder */
    an_args o = *a;
    if (!o.out)
        o.out = d->dir;
    write_frontier_md(stdout, d);
    isoflop_laws_md(stdout, d);
    for (int i = 0; i < d->n_runs; i++)
        if (d->runs[i].why) {
            const an_run *r = &d->rs.runs[d->runs[i].run];
            printf("left out: %s (%s, step %ld of %ld)\n", r->name, d->runs[i].why, r->done,
                   r->planned);
        }
    if (an_out_path(&o, NULL, "isoflop.md", path, (int)sizeof(path)) ||
        an_text_begin(&o, &t, path))
        goto done;
    write_md(t.f, d);
    isoflop_laws_md(t.f, d);
    if (an_text_commit(&o, &t) ||
        an_out_path(&o, NULL, "isoflop_law.csv", path, (int)sizeof(path)) ||
        an_text_begin(&o, &t, path))
        goto done;
    isoflop_laws_csv(t.f, d);
    if (an_text_commit(&o, &t) ||
        an_out_path(&o, NULL, "isoflop_law_curve.csv", path, (int)sizeof(path)) ||
        an_text_begin(&o, &t, path))
        goto done;
    isoflop_law_curves_csv(t.f, d);
    if (an_text_commit(&o, &t) || an_out_path(&o, NULL, "isoflop.csv", path, (int)sizeof(path)) ||
        an_text_begin(&o, &t, path))
        goto done;
    write_csv(t.f, d);
    if (an_text_commit(&o, &t) ||
        an_out_path(&o, NULL, "isoflop_runs.csv", path, (int)sizeof(path)) ||
        an_text_begin(&o, &t, path))
        goto done;
    write_runs_csv(t.f, d);
    if (an_text_commit(&o, &t) || an_out_path(&o, NULL, "isoflop.png", path, (int)sizeof(path)))
        goto done;
    rc = isoflop_figure(&o, d, path);
    bool law = false;
    for (int k = 0; k < d->n_k; k++)
        law |= d->laws[k].law.ok;
    if (!rc && law) {
        if (an_out_path(&o, NULL, "isoflop_law.png", path, (int)sizeof(path)))
            rc = EXIT_BAD_INPUT;
        else
            rc = isoflop_law_figure(&o, d, path);
    }
done:
    an_text_abort(&t);
    free_run_files(&paths, n_paths);
    an_free_runs(&d->rs);
    free_ladder_fit(&d->ladder);
    free(d->runs);
    free(d->points);
    free(d);
    return rc;
}
