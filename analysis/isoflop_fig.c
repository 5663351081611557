/* isoflop.png.  Left: each size's mean final loss with its 95% interval
 * against parameters, per budget (colour) and kind (marker, line style),
 * the parabolas through the means, their minima ringed, and each seed's own
 * optimum as a small open marker beside it (the optimum's uncertainty).
 * Right: the same means against the FLOPs of a forward pass relative to the
 * best dense size of the budget. */
#include "analysis/isoflop.h"
#include "analysis/isolaw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ISO_PI 3.14159265358979323846

enum { IF_PANEL_W = 600, IF_PANEL_H = 440, IF_TOP = 62, IF_LEGEND_COL = 200 };

/* Marker of kind k: circle, square, triangle, diamond, then again; open
 * markers are outlines only. */
static void marker(cairo_t *cr, double x, double y, int k, rgb c, double size, bool open)
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
    if (open) {
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_fill_preserve(cr);
        plot_color(cr, c, 1.0);
        cairo_set_line_width(cr, 1.4);
        cairo_stroke(cr);
        return;
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

/* Thin lines through the means of each budget and kind, in the order of x
 * (params or relative FLOPs). */
static void connect_points(cairo_t *cr, const iso_data *d, const plot_axes *ax, bool rel)
{
    double *x = malloc((size_t)(d->n_points ? d->n_points : 1) * sizeof(double));
    double *y = malloc((size_t)(d->n_points ? d->n_points : 1) * sizeof(double));
    for (int b = 0; x && y && b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            int n = 0;
            for (int p = 0; p < d->n_points; p++) { /* insertion in ascending x */
                const iso_point *pt = &d->points[p];
                if (pt->b != b || pt->k != k || pt->loss.n == 0)
                    continue;
                double v = rel ? pt->rel_flops : pt->params;
                int j = n++;
                for (; j > 0 && x[j - 1] > v; j--) {
                    x[j] = x[j - 1];
                    y[j] = y[j - 1];
                }
                x[j] = v;
                y[j] = pt->loss.mean;
            }
            plot_polyline(cr, ax, x, y, n, palette_color(b), rel ? 1.0 : 0.7, k % 2 == 1,
                          false);
        }
    free(x);
    free(y);
}

/* The means with their intervals; left out sizes (no usable replicate) grey
 * at their runs' own losses are not drawn: they have no mean. */
static void draw_points(cairo_t *cr, const iso_data *d, const plot_axes *ax, bool rel)
{
    for (int p = 0; p < d->n_points; p++) {
        const iso_point *pt = &d->points[p];
        double x = rel ? pt->rel_flops : pt->params;
        if (pt->loss.n == 0 || !isfinite(x))
            continue;
        plot_error_bar(cr, ax, x, 0.0, pt->loss.ci_lo, pt->loss.ci_hi, palette_color(pt->b),
                       7.0);
    }
    for (int p = 0; p < d->n_points; p++) {
        const iso_point *pt = &d->points[p];
        double x = rel ? pt->rel_flops : pt->params;
        if (pt->loss.n > 0 && isfinite(x))
            marker(cr, axes_px(ax, x), axes_py(ax, pt->loss.mean), pt->k, palette_color(pt->b),
                   4.5, false);
    }
}

static void draw_left(cairo_t *cr, const iso_data *d, const plot_axes *ax)
{
    connect_points(cr, d, ax, false);
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
    draw_points(cr, d, ax, false);
    for (int b = 0; b < d->n_b; b++)
        for (int k = 0; k < d->n_k; k++) {
            const iso_group *g = &d->groups[b][k];
            for (int s = 0; g->n_seeds > 1 && s < g->n_seeds; s++)
                marker(cr, axes_px(ax, g->seed_n[s]), axes_py(ax, g->seed_loss[s]), k,
                       palette_color(b), 3.0, true);
            if (g->fit.status != ISOFIT_INTERIOR)
                continue;
            /* the optimum of the means: a ring around a larger marker */
            double x = axes_px(ax, exp(g->fit.x_opt)), y = axes_py(ax, g->fit.y_opt);
            cairo_new_path(cr);
            cairo_arc(cr, x, y, 9.0, 0, 2 * ISO_PI);
            plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
            cairo_set_line_width(cr, 1.5);
            cairo_stroke(cr);
            marker(cr, x, y, k, palette_color(b), 5.5, false);
        }
}

static void draw_right(cairo_t *cr, const iso_data *d, const plot_axes *ax)
{
    /* x = 1: the reference size's cost */
    cairo_save(cr);
    static const double dot[] = { 2.0, 3.0 };
    cairo_set_dash(cr, dot, 2, 0);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    cairo_set_line_width(cr, 1.0);
    cairo_move_to(cr, axes_px(ax, 1.0), ax->y);
    cairo_line_to(cr, axes_px(ax, 1.0), ax->y + ax->h);
    cairo_stroke(cr);
    cairo_restore(cr);
    connect_points(cr, d, ax, true);
    draw_points(cr, d, ax, true);
}

/* The figure's title and its line of explanation under it. */
static void figure_title(cairo_t *cr, const char *title, const char *what)
{
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    plot_text(cr, 20, 14, 0.0, 0.0, title);
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    plot_text(cr, 20, 36, 0.0, 0.0, what);
}

/* [lo, hi] widened to hold v when v is finite. */
static void widen(double *lo, double *hi, double v)
{
    if (isfinite(v)) {
        *lo = fmin(*lo, v);
        *hi = fmax(*hi, v);
    }
}

static void draw_isoflop(cairo_t *cr, void *user)
{
    const iso_data *d = user;
    char buf[512];
    snprintf(buf, sizeof(buf), "isoFLOP analysis of %s", d->dir);
    figure_title(cr, buf, "final held-out loss (top-k), mean over seeds with 95% "
                 "interval; colour: budget, marker: kind; lines: parabolas in log parameters, "
                 "ringed: their minima, open: each seed's");
    double y0 = HUGE_VAL, y1 = -HUGE_VAL, n0 = HUGE_VAL, n1 = -HUGE_VAL, r0 = HUGE_VAL,
           r1 = -HUGE_VAL;
    for (int p = 0; p < d->n_points; p++) {
        const iso_point *pt = &d->points[p];
        if (pt->loss.n == 0)
            continue;
        const double v[3] = { pt->loss.mean, pt->loss.ci_lo, pt->loss.ci_hi };
        for (int i = 0; i < 3; i++)
            if (isfinite(v[i])) {
                y0 = fmin(y0, v[i]);
                y1 = fmax(y1, v[i]);
            }
        n0 = fmin(n0, pt->params);
        n1 = fmax(n1, pt->params);
        if (isfinite(pt->rel_flops)) {
            r0 = fmin(r0, pt->rel_flops);
            r1 = fmax(r1, pt->rel_flops);
        }
    }
    for (int b = 0; b < d->n_b; b++) /* the optima are drawn too */
        for (int k = 0; k < d->n_k; k++) {
            const iso_group *g = &d->groups[b][k];
            if (g->fit.status == ISOFIT_INTERIOR) {
                y0 = fmin(y0, g->fit.y_opt);
                y1 = fmax(y1, g->fit.y_opt);
            }
            for (int s = 0; g->n_seeds > 1 && s < g->n_seeds; s++) {
                y0 = fmin(y0, g->seed_loss[s]);
                y1 = fmax(y1, g->seed_loss[s]);
            }
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
                   all_dense ? "FLOPs per forward pass / best dense size's (same budget)"
                             : "FLOPs per forward pass / best size's (same budget)",
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
        marker(cr, x + 12, y + 7, k, rgb_hex(COLOR_AXIS), 4.5, false);
        plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
        snprintf(buf, sizeof(buf), "%s%s", d->kinds[k],
                 d->kind_dense[k] && strcmp(d->kinds[k], dense_kind.name) ? " (dense)" : "");
        plot_text(cr, x + 30, y + 7, 0.0, 0.5, buf);
    }
}

int isoflop_figure(const an_args *a, iso_data *d, const char *path)
{
    d->width = 2 * IF_PANEL_W + 20;
    int cols = (d->width - 100) / IF_LEGEND_COL;
    d->height = IF_TOP + IF_PANEL_H + (legend_rows(d->n_b, cols) + legend_rows(d->n_k, cols)) *
                LEGEND_ROW_H + 20;
    return an_save_figure(a, path, d->width, d->height, draw_isoflop, d);
}

/* isoflop_law.png: the compute-optimal size N*(C) (left, log10) and loss
 * L*(C) (right) against the training budget, per kind (colour): approach
 * 3's law as a line with its bootstrap's 95% band, approach 2's parabolas
 * as markers at the budgets sampled (error bars: the seeds' N* range, and
 * the seeds' loss* interval).  Budgets sampled: dotted verticals. */
static void law_panel(cairo_t *cr, const iso_data *d, const plot_axes *ax, bool loss)
{
    cairo_save(cr);
    static const double dot[] = { 2.0, 3.0 };
    cairo_set_dash(cr, dot, 2, 0);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    cairo_set_line_width(cr, 1.0);
    for (int b = 0; b < d->n_b; b++) {
        bool sampled = false; /* a budget with a finished size of some kind */
        for (int k = 0; k < d->n_k; k++)
            sampled |= d->groups[b][k].n_points > 0;
        if (!sampled)
            continue;
        cairo_move_to(cr, axes_px(ax, d->budgets[b]), ax->y);
        cairo_line_to(cr, axes_px(ax, d->budgets[b]), ax->y + ax->h);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
    for (int k = 0; k < d->n_k; k++) {
        const iso_law *w = &d->laws[k];
        if (!w->law.ok || !(w->curve_c[0] > 0))
            continue;
        double y[ISO_CURVE], lo[ISO_CURVE], hi[ISO_CURVE];
        for (int i = 0; i < ISO_CURVE; i++) {
            y[i] = loss ? w->curve_l[i] : log10(w->curve_n[i]);
            lo[i] = loss ? w->curve_l_ci[i][0] : log10(w->curve_n_ci[i][0]);
            hi[i] = loss ? w->curve_l_ci[i][1] : log10(w->curve_n_ci[i][1]);
        }
        plot_band(cr, ax, w->curve_c, lo, hi, ISO_CURVE, palette_color(k), 0.18);
        plot_polyline(cr, ax, w->curve_c, y, ISO_CURVE, palette_color(k), 2.0, false, false);
    }
    for (int k = 0; k < d->n_k; k++)
        for (int b = 0; b < d->n_b; b++) {
            const iso_group *g = &d->groups[b][k];
            double v = loss ? g->fit.y_opt : log10(iso_n_opt(d, g)), a = v, z = v;
            if (loss) {
                a = g->seed_loss_s.ci_lo;
                z = g->seed_loss_s.ci_hi;
            } else {
                for (int s = 0; s < g->n_seeds; s++) {
                    a = fmin(a, log10(g->seed_n[s]));
                    z = fmax(z, log10(g->seed_n[s]));
                }
            }
            if (!isfinite(v))
                continue;
            double dx = (k - 0.5 * (d->n_k - 1)) * 8.0;
            if (isfinite(a) && isfinite(z))
                plot_error_bar(cr, ax, d->budgets[b], dx, a, z, palette_color(k), 6.0);
            marker(cr, axes_px(ax, d->budgets[b]) + dx, axes_py(ax, v), k, palette_color(k), 4.5,
                   false);
        }
}

static void draw_law(cairo_t *cr, void *user)
{
    const iso_data *d = user;
    char buf[512];
    snprintf(buf, sizeof(buf), "Compute-optimal models of %s: two approaches", d->dir);
    figure_title(cr, buf, "lines: the law L(N, D) = E + A/N^alpha + B/D^beta fitted "
                 "over every run (approach 3), bands its bootstrap's 95%; markers: the "
                 "parabolas at each budget (approach 2), bars the seeds'");
    double c0 = HUGE_VAL, c1 = -HUGE_VAL, n0 = HUGE_VAL, n1 = -HUGE_VAL, l0 = HUGE_VAL,
           l1 = -HUGE_VAL;
    for (int k = 0; k < d->n_k; k++) {
        const iso_law *w = &d->laws[k];
        bool curve = w->law.ok && w->curve_c[0] > 0;
        for (int i = 0; curve && i < ISO_CURVE; i++) {
            widen(&c0, &c1, w->curve_c[i]);
            const double nv[3] = { w->curve_n[i], w->curve_n_ci[i][0], w->curve_n_ci[i][1] };
            const double lv[3] = { w->curve_l[i], w->curve_l_ci[i][0], w->curve_l_ci[i][1] };
            for (int j = 0; j < 3; j++) {
                widen(&n0, &n1, nv[j] > 0 ? log10(nv[j]) : (double)NAN);
                widen(&l0, &l1, lv[j]);
            }
        }
        for (int b = 0; b < d->n_b; b++) {
            const iso_group *g = &d->groups[b][k];
            widen(&c0, &c1, d->budgets[b]);
            double pn = iso_n_opt(d, g);
            widen(&n0, &n1, pn > 0 ? log10(pn) : (double)NAN);
            for (int s = 0; s < g->n_seeds; s++)
                widen(&n0, &n1, g->seed_n[s] > 0 ? log10(g->seed_n[s]) : (double)NAN);
            const double lv[3] = { g->fit.y_opt, g->seed_loss_s.ci_lo, g->seed_loss_s.ci_hi };
            for (int j = 0; j < 3; j++)
                widen(&l0, &l1, lv[j]);
        }
    }
    range(&c0, &c1, true);
    range(&n0, &n1, false);
    range(&l0, &l1, false);
    plot_axes left = { .x = 84, .y = IF_TOP + 30, .w = IF_PANEL_W - 110, .h = IF_PANEL_H - 90,
                       .x0 = c0, .x1 = c1, .y0 = n0, .y1 = n1, .logx = true };
    plot_axes right = left;
    right.x += IF_PANEL_W;
    right.y0 = l0;
    right.y1 = l1;
    plot_axes_draw(cr, &left, "compute-optimal size N*", "training FLOPs C",
                   "log10 N* (parameters; 4 = 10k, 5 = 100k)");
    plot_axes_draw(cr, &right, "its loss L*", "training FLOPs C", "held-out loss (nats/token)");
    law_panel(cr, d, &left, false);
    law_panel(cr, d, &right, true);
    legend_item items[ISO_MAX_KINDS];
    for (int k = 0; k < d->n_k; k++) {
        snprintf(items[k].label, sizeof(items[k].label), "%s", d->kinds[k]);
        items[k].color = palette_color(k);
        items[k].mark = MARK_LINE;
    }
    int cols = (d->width - 100) / IF_LEGEND_COL;
    plot_legend(cr, 84, IF_TOP + IF_PANEL_H, IF_LEGEND_COL, cols, items, d->n_k);
}

int isoflop_law_figure(const an_args *a, iso_data *d, const char *path)
{
    d->width = 2 * IF_PANEL_W + 20;
    int cols = (d->width - 100) / IF_LEGEND_COL;
    d->height = IF_TOP + IF_PANEL_H + legend_rows(d->n_k, cols) * LEGEND_ROW_H + 20;
    return an_save_figure(a, path, d->width, d->height, draw_law, d);
}
