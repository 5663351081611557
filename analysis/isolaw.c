/* mode-analyze isoflop's second approach: the parametric law L(N, D) of
 * Hoffmann et al. 2022 (approach 3, scaling.h) fitted over every usable run
 * of a kind, whatever its budget, and the compute-optimal N*(C) and L*(C)
 * it gives at each budget, beside the per-budget parabolas (approach 2).
 * The intervals: a bootstrap that resamples, for every size and budget, its
 * seeds with replacement and refits from the full fit. */
#include "analysis/isolaw.h"

#include "core/rng/pcg32.h"

#include <gsl/gsl_sort.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The tokens a run trained on: steps x sequences x positions. */
static double run_tokens(const an_run *r)
{
    return (double)r->done * r->cfg->batch * r->cfg->seq_len;
}

/* N* of a group: the vertex's, or the best sampled size's own count. */
double iso_n_opt(const iso_data *d, const iso_group *g)
{
    if (g->fit.status == ISOFIT_INTERIOR)
        return exp(g->fit.x_opt);
    return g->best >= 0 ? d->points[g->best].params : (double)NAN;
}

/* The 2.5% and 97.5% points of v[n] (sorted here), by the nearest rank.
 * Not GSL's quantile, which interpolates between the order statistics:
 * over ISO_LAW_BOOT = 100 refits that moves each bound by up to half the
 * gap between two refits' values, and the 4th decimal of L*'s interval
 * with it (3.7743 to 3.7746 on a noisy law); GSL has no nearest-rank
 * quantile. */
static void percentiles(double *v, int n, double ci[2])
{
    if (n < 2) {
        ci[0] = ci[1] = (double)NAN;
        return;
    }
    gsl_sort(v, 1, (size_t)n);
    ci[0] = v[(int)floor(0.025 * (n - 1) + 0.5)];
    ci[1] = v[(int)floor(0.975 * (n - 1) + 0.5)];
}

/* The optimum law gives at each of the n budgets c: NaN at the edge of
 * the search (a hundredth of the smallest size fitted to a hundred times
 * the largest). */
static void optima_at(const iso_law *w, const scaling_law *law, const double *c, int n,
                      double *n_opt, double *l_opt, bool *outside)
{
    for (int b = 0; b < n; b++) {
        bool edge;
        scaling_optimum(law, w->kappa, w->gamma, c[b], w->n_lo / 100.0, w->n_hi * 100.0,
                        &n_opt[b], &l_opt[b], &edge);
        if (edge) {
            n_opt[b] = l_opt[b] = (double)NAN;
        }
        if (outside)
            outside[b] = edge || n_opt[b] < w->n_lo || n_opt[b] > w->n_hi;
    }
}

static void optima(const iso_data *d, const iso_law *w, const scaling_law *law, double *n_opt,
                   double *l_opt, bool *outside)
{
    optima_at(w, law, d->budgets, d->n_b, n_opt, l_opt, outside);
}

/* The 95% intervals at each of n points of the values v[s * stride + i]
 * of the n_boot refits (non-finite ones left out). */
static void boot_ci(const double *v, int n_boot, int n, int stride, double (*ci)[2])
{
    double *x = malloc((size_t)(n_boot + 1) * sizeof(double));
    for (int i = 0; i < n; i++) {
        int m = 0;
        for (int s = 0; x && s < n_boot; s++)
            if (isfinite(v[(size_t)s * stride + i]))
                x[m++] = v[(size_t)s * stride + i];
        percentiles(x, x ? m : 0, ci[i]);
    }
    free(x);
}

/* N*(C) and L*(C) of w's law and its refits over the curve's budgets. */
static void curves(const iso_data *d, iso_law *w)
{
    double lo = d->budgets[0] / 2.0, hi = d->budgets[0] * 2.0;
    for (int b = 0; b < d->n_b; b++) {
        lo = fmin(lo, d->budgets[b] / 2.0);
        hi = fmax(hi, d->budgets[b] * 2.0);
    }
    for (int i = 0; i < ISO_CURVE; i++)
        w->curve_c[i] = exp(log(lo) + (log(hi) - log(lo)) * i / (ISO_CURVE - 1));
    optima_at(w, &w->law, w->curve_c, ISO_CURVE, w->curve_n, w->curve_l, NULL);
    double *bn = malloc((size_t)(w->n_boot + 1) * ISO_CURVE * 2 * sizeof(double));
    if (!bn) {
        for (int i = 0; i < ISO_CURVE; i++)
            w->curve_n_ci[i][0] = w->curve_n_ci[i][1] = w->curve_l_ci[i][0] =
                w->curve_l_ci[i][1] = (double)NAN;
        return;
    }
    double *bl = bn + (size_t)(w->n_boot + 1) * ISO_CURVE;
    for (int s = 0; s < w->n_boot; s++)
        optima_at(w, &w->boot[s], w->curve_c, ISO_CURVE, bn + (size_t)s * ISO_CURVE,
                  bl + (size_t)s * ISO_CURVE, NULL);
    boot_ci(bn, w->n_boot, ISO_CURVE, ISO_CURVE, w->curve_n_ci);
    boot_ci(bl, w->n_boot, ISO_CURVE, ISO_CURVE, w->curve_l_ci);
    free(bn);
}

static void fit_kind(iso_data *d, int k)
{
    iso_law *w = &d->laws[k];
    memset(w, 0, sizeof(*w));
    int m = 0;
    double *n = malloc((size_t)d->n_runs * 4 * sizeof(double));
    int *pt = malloc((size_t)d->n_runs * sizeof(int));
    if (!n || !pt) {
        free(n);
        free(pt);
        return;
    }
    double *t = n + d->n_runs, *l = t + d->n_runs, *c = l + d->n_runs;
    w->n_lo = HUGE_VAL;
    w->n_hi = 0.0;
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *r = &d->runs[i];
        if (r->k != k || !r->usable)
            continue;
        const an_run *ar = &d->rs.runs[r->run];
        n[m] = (double)ar->size.params;
        t[m] = run_tokens(ar);
        l[m] = ar->loss_topk;
        c[m] = ar->train_flops;
        pt[m++] = r->point;
        w->n_lo = fmin(w->n_lo, n[m - 1]);
        w->n_hi = fmax(w->n_hi, n[m - 1]);
    }
    w->n_runs = m;
    /* one budget leaves N and D in one line: the law is not determined */
    int n_budgets = 0;
    for (int b = 0; b < d->n_b; b++) {
        bool any = false;
        for (int i = 0; i < d->n_runs; i++)
            any |= d->runs[i].k == k && d->runs[i].usable && d->runs[i].b == b;
        n_budgets += any;
    }
    if (n_budgets < 2 || scaling_fit(n, t, l, m, &w->law) || flops_per_token_fit(n, t, c, m, &w->kappa, &w->gamma)) {
        w->law.ok = false;
        free(n);
        free(pt);
        return;
    }
    optima(d, w, &w->law, w->n_opt, w->l_opt, w->outside);
    /* the bootstrap: each point's replicates drawn with replacement */
    double (*bn)[ISO_MAX_BUDGETS] = malloc(ISO_LAW_BOOT * sizeof(*bn));
    double (*bll)[ISO_MAX_BUDGETS] = malloc(ISO_LAW_BOOT * sizeof(*bll));
    double *rn = malloc((size_t)m * 3 * sizeof(double));
    if (bn && bll && rn) {
        double *rt = rn + m, *rl = rt + m;
        for (int s = 0; s < ISO_LAW_BOOT; s++) {
            pcg32 g;
            pcg32_keyed(&g, 0x1a3, (uint64_t)k, (uint64_t)s, 0);
            for (int i = 0; i < m; i++) {
                /* the replicates of i's point: draw one of them */
                int same = 0;
                for (int j = 0; j < m; j++)
                    same += pt[j] == pt[i];
                int pick = (int)pcg32_bounded(&g, (uint32_t)same), j = 0;
                for (; j < m; j++)
                    if (pt[j] == pt[i] && pick-- == 0)
                        break;
                rn[i] = n[j];
                rt[i] = t[j];
                rl[i] = l[j];
            }
            scaling_law f;
            if (scaling_refit(rn, rt, rl, m, &w->law, &f))
                continue;
            optima(d, w, &f, bn[w->n_boot], bll[w->n_boot], NULL);
            w->boot[w->n_boot++] = f;
        }
        boot_ci(&bn[0][0], w->n_boot, d->n_b, ISO_MAX_BUDGETS, w->n_ci);
        boot_ci(&bll[0][0], w->n_boot, d->n_b, ISO_MAX_BUDGETS, w->l_ci);
        curves(d, w);
    }
    free(bn);
    free(bll);
    free(rn);
    free(n);
    free(pt);
}

void isoflop_laws(iso_data *d)
{
    for (int k = 0; k < d->n_k; k++)
        fit_kind(d, k);
}

/* v to 4 decimals, "-" when not finite */
static const char *num(char *buf, int len, double v)
{
    if (isfinite(v))
        snprintf(buf, (size_t)len, "%.4f", v);
    else
        snprintf(buf, (size_t)len, "-");
    return buf;
}

void isoflop_laws_md(FILE *f, const iso_data *d)
{
    fprintf(f, "\n## The parametric fit (Hoffmann et al. 2022, approach 3)\n\n"
               "Per kind, over every usable run at every budget: L(N, D) = E + A / N^alpha + "
               "B / D^beta (N parameters, D training tokens), minimising the Huber loss "
               "(delta 1e-3) of log L's residuals from the best of a grid of starts; the "
               "training FLOPs per token as kappa N^gamma from the runs; at each budget C the "
               "N* that minimises L(N, C / (kappa N^gamma)) and its L*. 95%% intervals: %d "
               "bootstrap refits, each size's seeds drawn with replacement. Agree: approach 3's "
               "interval for N* meets the range of the parabolas' N* (approach 2, above: the "
               "fit through the means and those through each seed's points).\n\n",
            ISO_LAW_BOOT);
    fprintf(f, "| kind | runs | E | A | alpha | B | beta | kappa | gamma | refits |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < d->n_k; k++) {
        const iso_law *w = &d->laws[k];
        if (!w->law.ok) {
            fprintf(f, "| %s | %d | no fit (it needs 5 usable runs or more at two budgets or "
                       "more) | | | | | | | |\n", d->kinds[k], w->n_runs);
            continue;
        }
        fprintf(f, "| %s | %d | %.4f | %.4g | %.3f | %.4g | %.3f | %.3g | %.3f | %d |\n",
                d->kinds[k], w->n_runs, exp(w->law.e), exp(w->law.a), w->law.alpha,
                exp(w->law.b), w->law.beta, w->kappa, w->gamma, w->n_boot);
    }
    fprintf(f, "\n| budget | kind | N* (approach 3) | 95%% CI | L* | 95%% CI | N* (parabola) | "
               "loss* (parabola) | agree |\n"
               "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const iso_law *w = &d->laws[k];
            if (!w->law.ok)
                continue;
            char bl[32], n3[32], lo[32], hi[32], np[32], s[4][32];
            number_label(bl, (int)sizeof(bl), d->budgets[b], 4);
            fmt_params(n3, (int)sizeof(n3), w->n_opt[b]);
            fmt_params(lo, (int)sizeof(lo), w->n_ci[b][0]);
            fmt_params(hi, (int)sizeof(hi), w->n_ci[b][1]);
            double pn = iso_n_opt(d, &d->groups[b][k]);
            fmt_params(np, (int)sizeof(np), pn);
            /* agree: approach 3's interval meets the parabolas' (the seeds'
             * optima and the fit through their means) */
            const iso_group *g = &d->groups[b][k];
            double plo = pn, phi = pn;
            for (int s2 = 0; s2 < g->n_seeds; s2++) {
                plo = fmin(plo, g->seed_n[s2]);
                phi = fmax(phi, g->seed_n[s2]);
            }
            bool agree = isfinite(pn) && plo <= w->n_ci[b][1] && phi >= w->n_ci[b][0];
            fprintf(f, "| %s | %s | %s%s | [%s, %s] | %s | [%s, %s] | %s | %s | %s |\n", bl,
                    d->kinds[k], w->outside[b] ? "~" : "", n3, lo, hi,
                    num(s[0], 32, w->l_opt[b]), num(s[1], 32, w->l_ci[b][0]),
                    num(s[2], 32, w->l_ci[b][1]), np,
                    num(s[3], 32, d->groups[b][k].fit.y_opt),
                    isfinite(w->n_ci[b][0]) && isfinite(pn) ? (agree ? "yes" : "no") : "-");
        }
    fprintf(f, "\n(~: N* outside the sizes fitted, where the law extrapolates; agree -: no "
               "parabola at that budget, where the law's N* and L* are its prediction.)\n");
}

void isoflop_laws_csv(FILE *f, const iso_data *d)
{
    fputs("kind,runs,E,A,alpha,B,beta,kappa,gamma,refits,budget,n_opt,n_opt_lo,n_opt_hi,"
          "loss_opt,loss_opt_lo,loss_opt_hi,outside,parabola_n_opt,parabola_loss_opt\n", f);
    for (int k = 0; k < d->n_k; k++) {
        const iso_law *w = &d->laws[k];
        if (!w->law.ok)
            continue;
        for (int b = 0; b < d->n_b; b++) {
            fprintf(f, "%s,%d", d->kinds[k], w->n_runs);
            csv_num(f, exp(w->law.e));
            csv_num(f, exp(w->law.a));
            csv_num(f, w->law.alpha);
            csv_num(f, exp(w->law.b));
            csv_num(f, w->law.beta);
            csv_num(f, w->kappa);
            csv_num(f, w->gamma);
            fprintf(f, ",%d", w->n_boot);
            csv_num(f, d->budgets[b]);
            csv_num(f, w->n_opt[b]);
            csv_num(f, w->n_ci[b][0]);
            csv_num(f, w->n_ci[b][1]);
            csv_num(f, w->l_opt[b]);
            csv_num(f, w->l_ci[b][0]);
            csv_num(f, w->l_ci[b][1]);
            fprintf(f, ",%d", w->outside[b]);
            csv_num(f, iso_n_opt(d, &d->groups[b][k]));
            csv_num(f, d->groups[b][k].fit.y_opt);
            fputc('\n', f);
        }
    }
}

void isoflop_law_curves_csv(FILE *f, const iso_data *d)
{
    fputs("kind,budget,n_opt,n_opt_lo,n_opt_hi,loss_opt,loss_opt_lo,loss_opt_hi\n", f);
    for (int k = 0; k < d->n_k; k++) {
        const iso_law *w = &d->laws[k];
        if (!w->law.ok || !(w->curve_c[0] > 0))
            continue;
        for (int i = 0; i < ISO_CURVE; i++) {
            fprintf(f, "%s", d->kinds[k]);
            csv_num(f, w->curve_c[i]);
            csv_num(f, w->curve_n[i]);
            csv_num(f, w->curve_n_ci[i][0]);
            csv_num(f, w->curve_n_ci[i][1]);
            csv_num(f, w->curve_l[i]);
            csv_num(f, w->curve_l_ci[i][0]);
            csv_num(f, w->curve_l_ci[i][1]);
            fputc('\n', f);
        }
    }
}
