/* mode-analyze curves: held-out loss of several runs against training FLOPs
 * (nominal, MODEL.md; log scale), wall time and steps, the isoFLOP view of
 * the MoD paper's section 4: top-k routing solid, the causal rule dashed. */
#include "analysis/analyze.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CV_PANEL_W = 440, CV_PANEL_H = 340, CV_TOP = 58, CV_LEGEND_COL = 220 };
enum { X_FLOPS, X_WALL, X_STEPS, X_COUNT };

typedef struct curve {
    long n;
    double *x[X_COUNT];   /* [n] at the evaluation steps */
    double *topk, *causal;
} curve;

typedef struct curves_fig {
    run_info **ris;
    curve *c;
    int n_runs, width, height, legend_cols, n_items;
    legend_item *items;
} curves_fig;

static const char *const x_labels[X_COUNT] = { "training FLOPs (nominal)", "wall time (s)",
                                               "training step" };
static const char *const x_titles[X_COUNT] = { "against compute", "against wall time",
                                               "against steps" };

static void free_curve(curve *c)
{
    for (int k = 0; k < X_COUNT; k++)
        free(c->x[k]);
    free(c->topk);
    free(c->causal);
    memset(c, 0, sizeof(*c));
}

/* Each evaluation with the metrics of its step; -1 and a message on error. */
static int read_curve(const an_args *a, const run_info *ri, curve *c)
{
    double *ms = NULL, *flops = NULL, *wall = NULL, *es = NULL;
    long nm = 0, nf = 0, nw = 0, ne = 0, n2 = 0, n3 = 0;
    int rc = -1;
    if (run_read_column(ri, "metrics/step", &ms, &nm) ||
        run_read_column(ri, "metrics/train_flops", &flops, &nf) ||
        run_read_column(ri, "metrics/wall_s", &wall, &nw) || nf != nm || nw != nm) {
        an_fail(a, EXIT_BAD_INPUT, "%s: /metrics/step, train_flops or wall_s missing or uneven",
                ri->path);
        goto fail;
    }
    if (run_read_column(ri, "eval/step", &es, &ne) ||
        run_read_column(ri, "eval/loss_topk", &c->topk, &n2) ||
        run_read_column(ri, "eval/loss_causal", &c->causal, &n3) || n2 != ne || n3 != ne) {
        an_fail(a, EXIT_BAD_INPUT, "%s: /eval/step, loss_topk or loss_causal missing or uneven",
                ri->path);
        goto fail;
    }
    if (ne == 0) {
        an_fail(a, EXIT_BAD_INPUT, "%s: no held-out evaluations (run.eval_every = %ld)",
                ri->path, ri->cfg.eval_every);
        goto fail;
    }
    c->n = ne;
    for (int k = 0; k < X_COUNT; k++)
        if (!(c->x[k] = malloc((size_t)ne * sizeof(double))))
            goto fail;
    for (long i = 0; i < ne; i++) {
        long j = 0;
        while (j < nm && ms[j] != es[i])
            j++;
        c->x[X_FLOPS][i] = j < nm ? flops[j] : (double)NAN;
        c->x[X_WALL][i] = j < nm ? wall[j] : (double)NAN;
        c->x[X_STEPS][i] = es[i];
    }
    rc = 0;
fail:
    free(ms);
    free(flops);
    free(wall);
    free(es);
    return rc;
}

/* The range of the finite values of every run's v (positive ones for a log
 * axis), padded. */
static void range_of(const curves_fig *f, int which, bool logx, double *lo, double *hi)
{
    *lo = HUGE_VAL;
    *hi = -HUGE_VAL;
    for (int r = 0; r < f->n_runs; r++)
        for (long i = 0; i < f->c[r].n; i++) {
            const curve *c = &f->c[r];
            double vals[2] = { which < X_COUNT ? c->x[which][i] : c->topk[i],
                               which < X_COUNT ? c->x[which][i] : c->causal[i] };
            for (int k = 0; k < 2; k++)
                if (isfinite(vals[k]) && (!logx || vals[k] > 0)) {
                    *lo = fmin(*lo, vals[k]);
                    *hi = fmax(*hi, vals[k]);
                }
        }
    if (!isfinite(*lo)) {
        *lo = logx ? 1.0 : 0.0;
        *hi = logx ? 10.0 : 1.0;
    } else if (logx) {
        double pad = *hi > *lo ? pow(*hi / *lo, 0.05) : 2.0;
        *lo /= pad;
        *hi *= pad;
    } else {
        double pad = *hi > *lo ? 0.05 * (*hi - *lo) : fmax(0.5, 0.05 * fabs(*hi));
        *lo -= pad;
        *hi += pad;
    }
}

static void draw_curves(cairo_t *cr, void *user)
{
    const curves_fig *f = user;
    char buf[256];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    plot_text(cr, 20, 14, 0.0, 0.0, "Held-out loss");
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    snprintf(buf, sizeof(buf), "%d run%s; solid: top-k routing over whole windows, dashed: the "
             "causal rule (what sampling can do)", f->n_runs, f->n_runs > 1 ? "s" : "");
    plot_text(cr, 20, 36, 0.0, 0.0, buf);
    double y0, y1;
    range_of(f, X_COUNT, false, &y0, &y1);
    for (int k = 0; k < X_COUNT; k++) {
        plot_axes ax = { .x = k * CV_PANEL_W + 80, .y = CV_TOP + 30, .w = CV_PANEL_W - 104,
                         .h = CV_PANEL_H - 86, .y0 = y0, .y1 = y1, .logx = k == X_FLOPS };
        range_of(f, k, ax.logx, &ax.x0, &ax.x1);
        plot_axes_draw(cr, &ax, x_titles[k], x_labels[k], "held-out loss (nats/token)");
        for (int r = 0; r < f->n_runs; r++) {
            const curve *c = &f->c[r];
            plot_polyline(cr, &ax, c->x[k], c->causal, (int)c->n, palette_color(r), 1.8, true,
                          false);
            plot_polyline(cr, &ax, c->x[k], c->topk, (int)c->n, palette_color(r), 2.0, false,
                          true);
        }
    }
    plot_legend(cr, 80, CV_TOP + CV_PANEL_H, CV_LEGEND_COL, f->legend_cols, f->items, f->n_items);
}

int cmd_curves(const an_args *a)
{
    run_info *ris[AN_MAX_FILES];
    curve c[AN_MAX_FILES];
    legend_item items[AN_MAX_FILES + 2];
    char path[RUN_PATH_LEN + 64];
    curves_fig f = { .ris = ris, .c = c, .n_runs = a->n_files, .items = items };
    memset(c, 0, sizeof(c));
    memset(items, 0, sizeof(items));
    if (an_open_runs(a, ris))
        return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT;
    an_unique_names(ris, a->n_files);
    for (int r = 0; r < a->n_files; r++)
        if (read_curve(a, ris[r], &c[r]))
            goto done;
    for (int r = 0; r < a->n_files; r++) {
        legend_item *it = &items[f.n_items++];
        snprintf(it->label, sizeof(it->label), "%.79s", ris[r]->name);
        it->color = palette_color(r);
        it->mark = MARK_LINE;
    }
    items[f.n_items++] = (legend_item){ "top-k routing", rgb_hex(COLOR_AXIS), MARK_LINE };
    items[f.n_items++] = (legend_item){ "causal rule", rgb_hex(COLOR_AXIS), MARK_DASH };
    f.width = X_COUNT * CV_PANEL_W + 20;
    f.legend_cols = (f.width - 100) / CV_LEGEND_COL;
    f.height = CV_TOP + CV_PANEL_H + legend_rows(f.n_items, f.legend_cols) * LEGEND_ROW_H + 12;
    if (an_out_path(a, ris[0], "curves.png", path, (int)sizeof(path)))
        goto done;
    rc = an_save_figure(a, path, f.width, f.height, draw_curves, &f);
done:
    for (int r = 0; r < a->n_files; r++)
        free_curve(&c[r]);
    an_close_runs(a, ris);
    return rc;
}
