/* mode-analyze isoflop: the isoFLOP analysis of the MoD paper (Fig. 4) over
 * a folder of runs trained at fixed training-FLOP budgets (run.flops_budget,
 * as `mode-exp sweep` with an [isoflop] design makes them).
 *
 * Left: final held-out loss (top-k routing) against parameters per budget,
 * one curve per kind, with the least-squares parabola in log parameters
 * whose minimum is the compute-optimal size and loss (analysis/isofit.c).
 * Right: the same losses against the FLOPs of one forward pass relative to
 * the best dense run of the budget: MoD's point is that its optimum is
 * cheaper per forward pass at an equal or better loss.
 *
 * A run's kind is the last part of its name when the name is a sweep's
 * "iso-<budget>-<size>-<kind>", else its repeating pattern of layer kinds
 * ("dense", "dense+mod").  Runs short of their planned steps, or without a
 * held-out evaluation, are listed and left out of the fits. */
#include "analysis/analyze.h"
#include "analysis/isofit.h"
#include "analysis/modelsize.h"
#include "analysis/rundir.h"
#include "analysis/stats.h"
#include "core/train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ISO_PI 3.14159265358979323846

enum { ISO_MAX_BUDGETS = 16, ISO_MAX_KINDS = 8, ISO_KIND_LEN = 64 };
enum { IF_PANEL_W = 600, IF_PANEL_H = 440, IF_TOP = 62, IF_LEGEND_COL = 200 };

typedef struct iso_run {
    char name[128], kind[ISO_KIND_LEN];
    double budget, params, flops, loss, loss_causal, rel_flops;
    long done, planned;
    bool dense, usable;
    const char *why; /* why it is left out of the fits */
    int b, k;
} iso_run;

typedef struct iso_group {
    int n;
    isofit fit;
    int best; /* run index, -1 */
} iso_group;

typedef struct iso_data {
    const char *dir;
    iso_run *runs;
    int n_runs, n_other;
    double budgets[ISO_MAX_BUDGETS];
    int n_b;
    char kinds[ISO_MAX_KINDS][ISO_KIND_LEN];
    bool kind_dense[ISO_MAX_KINDS];
    int n_k, dense_kind;
    iso_group groups[ISO_MAX_BUDGETS][ISO_MAX_KINDS];
    double ref_flops[ISO_MAX_BUDGETS];
    bool ref_dense[ISO_MAX_BUDGETS];
    int legend_rows, width, height;
} iso_data;

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

static void run_kind(const run_info *ri, char *out, int len)
{
    const char *name = ri->cfg.name, *dash = strrchr(name, '-');
    int dashes = 0;
    for (const char *c = name; *c; c++)
        dashes += *c == '-';
    if (!strncmp(name, "iso-", 4) && dashes >= 3 && dash[1])
        snprintf(out, (size_t)len, "%s", dash + 1);
    else
        pattern_kind(&ri->cfg, out, len);
}

/* One run file's numbers; 1 when it is no isoFLOP run (no budget), -1 on error. */
static int read_run(const an_args *a, const char *path, iso_run *r)
{
    run_info *ri = NULL;
    char err[RUN_PATH_LEN + 512];
    memset(r, 0, sizeof(*r));
    if (build_run_info(&ri, path, err, (int)sizeof(err))) {
        an_fail(a, EXIT_BAD_INPUT, "%s", err);
        return -1;
    }
    int rc = 1;
    if (ri->cfg.flops_budget > 0.0) {
        model_size size;
        if (run_model_size(ri, &size, err, (int)sizeof(err))) {
            an_fail(a, EXIT_BAD_INPUT, "%s", err);
            rc = -1;
            goto done;
        }
        snprintf(r->name, sizeof(r->name), "%s", ri->name);
        run_kind(ri, r->kind, (int)sizeof(r->kind));
        r->budget = ri->cfg.flops_budget;
        r->params = (double)size.params;
        r->flops = size.forward_flops;
        r->planned = config_planned_steps(&ri->cfg, size.train_flops_per_step);
        double done = run_last_value(ri, "metrics/step", NULL);
        r->done = isfinite(done) ? (long)done : 0;
        r->loss = run_last_value(ri, "eval/loss_topk", NULL);
        r->loss_causal = run_last_value(ri, "eval/loss_causal", NULL);
        double eval_step = run_last_value(ri, "eval/step", NULL);
        r->dense = true;
        for (int l = 0; l < ri->cfg.n_layers; l++)
            r->dense &= !strcmp(ri->cfg.layers[l].kind, "dense");
        r->why = r->done < r->planned        ? "incomplete"
                 : !isfinite(r->loss)        ? "no held-out evaluation"
                 : eval_step != (double)r->done ? "no evaluation at the last step"
                                             : NULL;
        r->usable = !r->why;
        rc = 0;
    }
done:
    free_run_info(&ri);
    return rc;
}

static int budget_index(iso_data *d, double b)
{
    for (int i = 0; i < d->n_b; i++)
        if (fabs(d->budgets[i] - b) <= 1e-9 * b)
            return i;
    return -1;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Budgets ascending, kinds dense first then in order of appearance. */
static int index_runs(const an_args *a, iso_data *d)
{
    for (int i = 0; i < d->n_runs; i++)
        if (budget_index(d, d->runs[i].budget) < 0) {
            if (d->n_b == ISO_MAX_BUDGETS)
                return an_fail(a, EXIT_BAD_INPUT, "%s: more than %d budgets", d->dir,
                               ISO_MAX_BUDGETS);
            d->budgets[d->n_b++] = d->runs[i].budget;
        }
    qsort(d->budgets, (size_t)d->n_b, sizeof(double), cmp_double);
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
        r->b = budget_index(d, r->budget);
        for (int k = 0; k < d->n_k; k++)
            if (!strcmp(d->kinds[k], r->kind))
                r->k = k;
    }
    return 0;
}

/* The fits, and per budget the reference of the relative FLOPs: the best
 * dense run, else the best run. */
static void fit_groups(iso_data *d)
{
    double *x = malloc((size_t)(d->n_runs ? d->n_runs : 1) * sizeof(double));
    double *y = malloc((size_t)(d->n_runs ? d->n_runs : 1) * sizeof(double));
    int *idx = malloc((size_t)(d->n_runs ? d->n_runs : 1) * sizeof(int));
    for (int b = 0; b < d->n_b; b++) {
        for (int k = 0; k < d->n_k; k++) {
            iso_group *g = &d->groups[b][k];
            g->n = 0;
            g->best = -1;
            for (int i = 0; x && y && idx && i < d->n_runs; i++) {
                const iso_run *r = &d->runs[i];
                if (r->b != b || r->k != k || !r->usable)
                    continue;
                x[g->n] = log(r->params);
                y[g->n] = r->loss;
                idx[g->n++] = i;
            }
            isoflop_optimum(x, y, g->n, &g->fit);
            g->best = g->fit.best >= 0 ? idx[g->fit.best] : -1;
        }
        int ref = -1;
        for (int dense = 1; dense >= 0 && ref < 0; dense--)
            for (int i = 0; i < d->n_runs; i++) {
                const iso_run *r = &d->runs[i];
                if (r->b == b && r->usable && (r->dense || !dense) &&
                    (ref < 0 || r->loss < d->runs[ref].loss))
                    ref = i;
            }
        d->ref_flops[b] = ref >= 0 ? d->runs[ref].flops : (double)NAN;
        d->ref_dense[b] = ref >= 0 && d->runs[ref].dense;
    }
    for (int i = 0; i < d->n_runs; i++)
        d->runs[i].rel_flops = d->runs[i].flops / d->ref_flops[d->runs[i].b];
    free(x);
    free(y);
    free(idx);
}

/* ---- tables ---------------------------------------------------------------- */

static void params_text(char *buf, int len, double n)
{
    if (!isfinite(n))
        snprintf(buf, (size_t)len, "-");
    else if (n >= 1e6)
        snprintf(buf, (size_t)len, "%.2fM", n / 1e6);
    else if (n >= 1e3)
        snprintf(buf, (size_t)len, "%.1fk", n / 1e3);
    else
        snprintf(buf, (size_t)len, "%.0f", n);
}

/* v formatted into buf (an array), or "-" when it is not finite. */
#define NUM(buf, f, v) (isfinite(v) ? (snprintf(buf, sizeof(buf), f, v), (const char *)buf) : "-")

/* N* of a group: the vertex's, or the best sampled run's own count. */
static double n_opt(const iso_data *d, const iso_group *g)
{
    if (g->fit.status == ISOFIT_INTERIOR)
        return exp(g->fit.x_opt);
    return g->best >= 0 ? d->runs[g->best].params : (double)NAN;
}

/* The dense kind's optimum of budget b, NaN without one. */
static double dense_opt(const iso_data *d, int b)
{
    return d->dense_kind >= 0 && d->groups[b][d->dense_kind].n > 0
               ? d->groups[b][d->dense_kind].fit.y_opt
               : (double)NAN;
}

/* Runs of budget b and kind k. */
static int group_runs(const iso_data *d, int b, int k)
{
    int total = 0;
    for (int i = 0; i < d->n_runs; i++)
        total += d->runs[i].b == b && d->runs[i].k == k;
    return total;
}

static void write_frontier_md(FILE *f, const iso_data *d)
{
    fprintf(f, "| budget | kind | runs | fit | N* (params) | loss* | loss* - dense | "
               "loss* / dense | best run | its loss |\n");
    fprintf(f, "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |\n");
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const iso_group *g = &d->groups[b][k];
            int total = group_runs(d, b, k);
            if (!total)
                continue;
            char bl[32], np[32], s[4][40];
            number_label(bl, (int)sizeof(bl), d->budgets[b], 4);
            params_text(np, (int)sizeof(np), n_opt(d, g));
            double dn = dense_opt(d, b), y = g->fit.y_opt;
            fprintf(f, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", bl, d->kinds[k],
                    g->n, isofit_status_text(g->fit.status), np, NUM(s[0], "%.4f", y),
                    NUM(s[1], "%+.4f", y - dn), NUM(s[2], "%.4f", y / dn),
                    g->best >= 0 ? d->runs[g->best].name : "-",
                    g->best >= 0 ? NUM(s[3], "%.4f", d->runs[g->best].loss) : "-");
        }
}

static void write_runs_md(FILE *f, const iso_data *d)
{
    fprintf(f, "| run | budget | kind | params | FLOPs/fwd/seq | relative FLOPs | steps | "
               "loss top-k | loss causal | note |\n");
    fprintf(f, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *r = &d->runs[i];
        char bl[32], np[32], fl[32], s[3][40];
        number_label(bl, (int)sizeof(bl), r->budget, 4);
        params_text(np, (int)sizeof(np), r->params);
        number_label(fl, (int)sizeof(fl), r->flops, 3);
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %ld/%ld | %s | %s | %s |\n", r->name, bl,
                r->kind, np, fl, NUM(s[0], "%.3f", r->rel_flops), r->done, r->planned,
                NUM(s[1], "%.4f", r->loss), NUM(s[2], "%.4f", r->loss_causal),
                r->why ? r->why : "");
    }
}

static void write_md(FILE *f, const iso_data *d)
{
    fprintf(f, "# isoFLOP analysis of %s\n\n", d->dir);
    fprintf(f, "Final held-out loss (top-k routing) against parameters N at each training-FLOP "
               "budget; per budget and kind a least-squares parabola in ln N, whose minimum "
               "gives the compute-optimal N* and loss* (the best sampled run where the "
               "parabola has no minimum inside the sampled sizes).\n\n");
    write_frontier_md(f, d);
    fprintf(f, "\n## Runs\n\nRelative FLOPs: forward FLOPs per sequence over those of the "
               "best dense run of the same budget.\n\n");
    write_runs_md(f, d);
    if (d->n_other)
        fprintf(f, "\n%d run%s without run.flops_budget left out.\n", d->n_other,
                d->n_other > 1 ? "s" : "");
}

static void write_csv(FILE *f, const iso_data *d)
{
    fprintf(f, "budget,kind,runs,fit,n_opt,loss_opt,dense_loss_opt,loss_minus_dense,"
               "loss_over_dense,best_run,best_params,best_loss,a,b,c\n");
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const iso_group *g = &d->groups[b][k];
            int total = group_runs(d, b, k);
            if (!total)
                continue;
            char s[10][40];
            double dn = dense_opt(d, b), y = g->fit.y_opt;
            const iso_run *best = g->best >= 0 ? &d->runs[g->best] : NULL;
            fprintf(f, "%.17g,%s,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", d->budgets[b],
                    d->kinds[k], g->n,
                    g->fit.status == ISOFIT_INTERIOR  ? "parabola"
                    : g->fit.status == ISOFIT_EMPTY   ? "none"
                                                      : "best_sampled",
                    NUM(s[0], "%.17g", n_opt(d, g)), NUM(s[1], "%.17g", y),
                    NUM(s[2], "%.17g", dn), NUM(s[3], "%.17g", y - dn),
                    NUM(s[4], "%.17g", y / dn), best ? best->name : "",
                    best ? NUM(s[5], "%.17g", best->params) : "",
                    best ? NUM(s[6], "%.17g", best->loss) : "", NUM(s[7], "%.17g", g->fit.a),
                    NUM(s[8], "%.17g", g->fit.b), NUM(s[9], "%.17g", g->fit.c));
        }
}

static void write_runs_csv(FILE *f, const iso_data *d)
{
    fprintf(f, "run,budget,kind,params,flops_per_seq,rel_flops,steps,planned,loss_topk,"
               "loss_causal,used\n");
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *r = &d->runs[i];
        char s[3][40];
        fprintf(f, "%s,%.17g,%s,%.17g,%.17g,%s,%ld,%ld,%s,%s,%d\n", r->name, r->budget, r->kind,
                r->params, r->flops, NUM(s[0], "%.17g", r->rel_flops), r->done, r->planned,
                NUM(s[1], "%.17g", r->loss), NUM(s[2], "%.17g", r->loss_causal), r->usable);
    }
}

/* ---- the figure --------------------------------------------------------------- */

/* Marker of kind k: circle, square, triangle, diamond, then again. */
static void marker(cairo_t *cr, double x, double y, int k, rgb c, double size)
{
    double s = size;
    cairo_new_path(cr);
    switch (k % 4) {
    case 0: cairo_arc(cr, x, y, s, 0, 2 * ISO_PI); break;
    case 1: cairo_rectangle(cr, x - s * 0.9, y - s * 0.9, 1.8 * s, 1.8 * s); break;
    case 2:
        cairo_move_to(cr, x, y - 1.2 * s);
        cairo_line_to(cr, x + 1.1 * s, y + 0.8 * s);
        cairo_line_to(cr, x - 1.1 * s, y + 0.8 * s);
        cairo_close_path(cr);
        break;
    default:
        cairo_move_to(cr, x, y - 1.3 * s);
        cairo_line_to(cr, x + 1.1 * s, y);
        cairo_line_to(cr, x, y + 1.3 * s);
        cairo_line_to(cr, x - 1.1 * s, y);
        cairo_close_path(cr);
        break;
    }
    plot_color(cr, c, 1.0);
    cairo_fill_preserve(cr);
    cairo_set_line_width(cr, 1.0);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_stroke(cr);
}

static void range(double *lo, double *hi, bool logx)
{
    if (!isfinite(*lo)) {
        *lo = logx ? 1.0 : 0.0;
        *hi = logx ? 10.0 : 1.0;
    } else if (logx) {
        double pad = *hi > *lo ? pow(*hi / *lo, 0.08) : 2.0;
        *lo /= pad;
        *hi *= pad;
    } else {
        double pad = *hi > *lo ? 0.08 * (*hi - *lo) : fmax(0.05, 0.05 * fabs(*hi));
        *lo -= pad;
        *hi += pad;
    }
}

/* Thin lines through the usable runs of each budget and kind, in the order
 * of x (params or relative FLOPs). */
static void connect_runs(cairo_t *cr, const iso_data *d, const plot_axes *ax, bool rel)
{
    double *x = malloc((size_t)(d->n_runs ? d->n_runs : 1) * sizeof(double));
    double *y = malloc((size_t)(d->n_runs ? d->n_runs : 1) * sizeof(double));
    for (int b = 0; x && y && b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            int n = 0;
            for (int i = 0; i < d->n_runs; i++) { /* insertion in ascending x */
                const iso_run *r = &d->runs[i];
                if (r->b != b || r->k != k || !r->usable)
                    continue;
                double v = rel ? r->rel_flops : r->params;
                int j = n++;
                for (; j > 0 && x[j - 1] > v; j--) {
                    x[j] = x[j - 1];
                    y[j] = y[j - 1];
                }
                x[j] = v;
                y[j] = r->loss;
            }
            plot_polyline(cr, ax, x, y, n, palette_color(b), rel ? 1.0 : 0.7, k % 2 == 1,
                          false);
        }
    free(x);
    free(y);
}

static void draw_left(cairo_t *cr, const iso_data *d, const plot_axes *ax)
{
    connect_runs(cr, d, ax, false);
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const isofit *f = &d->groups[b][k].fit;
            if (!isfinite(f->a))
                continue;
            enum { NP = 60 };
            double px[NP], py[NP];
            for (int i = 0; i < NP; i++) {
                double x = f->x_lo + (f->x_hi - f->x_lo) * i / (NP - 1);
                px[i] = exp(x);
                py[i] = f->a * x * x + f->b * x + f->c;
            }
            plot_polyline(cr, ax, px, py, NP, palette_color(b), 1.8, k % 2 == 1, false);
        }
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *r = &d->runs[i];
        if (!isfinite(r->loss))
            continue;
        rgb c = r->usable ? palette_color(r->b) : rgb_hex(0xbbbbbb);
        marker(cr, axes_px(ax, r->params), axes_py(ax, r->loss), r->k, c, 4.5);
    }
    /* the optimum of each interior fit: a ring around a larger marker */
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const isofit *f = &d->groups[b][k].fit;
            if (f->status != ISOFIT_INTERIOR)
                continue;
            double x = axes_px(ax, exp(f->x_opt)), y = axes_py(ax, f->y_opt);
            cairo_new_path(cr);
            cairo_arc(cr, x, y, 9.0, 0, 2 * ISO_PI);
            plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
            cairo_set_line_width(cr, 1.5);
            cairo_stroke(cr);
            marker(cr, x, y, k, palette_color(b), 5.5);
        }
}

static void draw_right(cairo_t *cr, const iso_data *d, const plot_axes *ax)
{
    /* x = 1: the reference run's cost */
    cairo_save(cr);
    static const double dot[] = { 2.0, 3.0 };
    cairo_set_dash(cr, dot, 2, 0);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    cairo_set_line_width(cr, 1.0);
    cairo_move_to(cr, axes_px(ax, 1.0), ax->y);
    cairo_line_to(cr, axes_px(ax, 1.0), ax->y + ax->h);
    cairo_stroke(cr);
    cairo_restore(cr);
    connect_runs(cr, d, ax, true);
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *r = &d->runs[i];
        if (r->usable && isfinite(r->rel_flops))
            marker(cr, axes_px(ax, r->rel_flops), axes_py(ax, r->loss), r->k,
                   palette_color(r->b), 4.5);
    }
}

static void draw_isoflop(cairo_t *cr, void *user)
{
    const iso_data *d = user;
    char buf[512];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    snprintf(buf, sizeof(buf), "isoFLOP analysis of %s", d->dir);
    plot_text(cr, 20, 14, 0.0, 0.0, buf);
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    plot_text(cr, 20, 36, 0.0, 0.0, "final held-out loss (top-k routing); colour: training-FLOP "
              "budget, marker: kind; lines: least-squares parabolas in log parameters, ringed: "
              "their minima");
    double y0 = HUGE_VAL, y1 = -HUGE_VAL, n0 = HUGE_VAL, n1 = -HUGE_VAL, r0 = HUGE_VAL,
           r1 = -HUGE_VAL;
    for (int i = 0; i < d->n_runs; i++) {
        const iso_run *r = &d->runs[i];
        if (!isfinite(r->loss))
            continue;
        y0 = fmin(y0, r->loss);
        y1 = fmax(y1, r->loss);
        n0 = fmin(n0, r->params);
        n1 = fmax(n1, r->params);
        if (r->usable && isfinite(r->rel_flops)) {
            r0 = fmin(r0, r->rel_flops);
            r1 = fmax(r1, r->rel_flops);
        }
    }
    for (int b = 0; b < d->n_b; b++) /* the ringed minima are drawn too */
        for (int k = 0; k < d->n_k; k++)
            if (d->groups[b][k].fit.status == ISOFIT_INTERIOR) {
                y0 = fmin(y0, d->groups[b][k].fit.y_opt);
                y1 = fmax(y1, d->groups[b][k].fit.y_opt);
            }
    r0 = fmin(r0, 1.0);
    r1 = fmax(r1, 1.0);
    range(&y0, &y1, false);
    range(&n0, &n1, true);
    range(&r0, &r1, true);
    plot_axes left = { .x = 84, .y = IF_TOP + 30, .w = IF_PANEL_W - 110, .h = IF_PANEL_H - 90,
                       .x0 = n0, .x1 = n1, .y0 = y0, .y1 = y1, .logx = true };
    plot_axes right = left;
    right.x += IF_PANEL_W;
    right.x0 = r0;
    right.x1 = r1;
    plot_axes_draw(cr, &left, "loss against parameters at each budget", "parameters N",
                   "held-out loss (nats/token)");
    bool all_dense = true;
    for (int b = 0; b < d->n_b; b++)
        all_dense &= d->ref_dense[b];
    plot_axes_draw(cr, &right, "loss against the cost of a forward pass",
                   all_dense ? "FLOPs per forward pass / best dense run's (same budget)"
                             : "FLOPs per forward pass / best run's (same budget)",
                   "held-out loss (nats/token)");
    draw_left(cr, d, &left);
    draw_right(cr, d, &right);
    /* legend: budgets (colours), then kinds (markers and line styles) */
    double ly = IF_TOP + IF_PANEL_H;
    legend_item items[ISO_MAX_BUDGETS];
    for (int b = 0; b < d->n_b; b++) {
        char bl[32];
        number_label(bl, (int)sizeof(bl), d->budgets[b], 4);
        snprintf(items[b].label, sizeof(items[b].label), "budget %s FLOPs", bl);
        items[b].color = palette_color(b);
        items[b].mark = MARK_BOX;
    }
    int cols = (d->width - 100) / IF_LEGEND_COL;
    plot_legend(cr, 84, ly, IF_LEGEND_COL, cols, items, d->n_b);
    ly += legend_rows(d->n_b, cols) * LEGEND_ROW_H + 4;
    plot_font(cr, 11, false, false);
    for (int k = 0; k < d->n_k; k++) {
        double x = 84 + (k % cols) * IF_LEGEND_COL, y = ly + (k / cols) * LEGEND_ROW_H;
        static const double dash[] = { 5.0, 3.0 };
        cairo_set_dash(cr, dash, k % 2 ? 2 : 0, 0);
        plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
        cairo_set_line_width(cr, 1.8);
        cairo_move_to(cr, x, y + 7);
        cairo_line_to(cr, x + 24, y + 7);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        marker(cr, x + 12, y + 7, k, rgb_hex(COLOR_AXIS), 4.5);
        plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
        snprintf(buf, sizeof(buf), "%s%s", d->kinds[k],
                 d->kind_dense[k] && strcmp(d->kinds[k], "dense") ? " (dense)" : "");
        plot_text(cr, x + 30, y + 7, 0.0, 0.5, buf);
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
    if (list_run_files(d->dir, &paths, &n_paths, err, (int)sizeof(err))) {
        an_fail(a, EXIT_BAD_INPUT, "%s", err);
        goto done;
    }
    d->runs = calloc((size_t)n_paths, sizeof(iso_run));
    if (!d->runs)
        goto done;
    for (int i = 0; i < n_paths; i++) {
        int r = read_run(a, paths[i], &d->runs[d->n_runs]);
        if (r < 0)
            goto done;
        if (r == 0)
            d->n_runs++;
        else
            d->n_other++;
    }
    if (d->n_runs == 0) {
        an_fail(a, EXIT_BAD_INPUT, "%s: no run has run.flops_budget set (an isoFLOP sweep's runs "
                "do: mode-exp sweep with an [isoflop] design)", d->dir);
        goto done;
    }
    if (index_runs(a, d))
        goto done;
    fit_groups(d);
    /* the output folder: --out, else the sweep's folder */
    an_args o = *a;
    if (!o.out)
        o.out = d->dir;
    write_frontier_md(stdout, d);
    for (int i = 0; i < d->n_runs; i++)
        if (d->runs[i].why)
            printf("left out: %s (%s, step %ld of %ld)\n", d->runs[i].name, d->runs[i].why,
                   d->runs[i].done, d->runs[i].planned);
    if (an_out_path(&o, NULL, "isoflop.md", path, (int)sizeof(path)) ||
        an_text_begin(&o, &t, path))
        goto done;
    write_md(t.f, d);
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
    d->width = 2 * IF_PANEL_W + 20;
    int cols = (d->width - 100) / IF_LEGEND_COL;
    d->height = IF_TOP + IF_PANEL_H + (legend_rows(d->n_b, cols) + legend_rows(d->n_k, cols)) *
                LEGEND_ROW_H + 20;
    rc = an_save_figure(&o, path, d->width, d->height, draw_isoflop, d);
done:
    an_text_abort(&t);
    free_run_files(&paths, n_paths);
    free(d->runs);
    free(d);
    return rc;
}
