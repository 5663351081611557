/* mode-analyze weights: histograms of the router weights sigmoid(r) of every
 * routed layer over the recorded held-out sequences, at the first and the
 * last recorded step, as Fig. 5 (right) of the MoD paper: a trained router
 * pushes the weights of the tokens it takes away from those it skips. */
#include "analysis/analyze.h"
#include "analysis/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WT_BINS = 25, WT_PANEL_W = 400, WT_PANEL_H = 290, WT_MAX_COLS = 3, WT_TOP = 58,
       WT_LEGEND = 34 };

typedef struct weights_panel {
    int layer;
    double early[WT_BINS], late[WT_BINS]; /* share of tokens per bin */
    double capacity;
} weights_panel;

typedef struct weights_fig {
    const run_info *ri;
    weights_panel *panels;
    int n, cols, width, height;
    long first, last;
} weights_fig;

static void draw_panel(cairo_t *cr, const weights_fig *f, const weights_panel *p, double x,
                       double y)
{
    double ymax = 0.0;
    for (int b = 0; b < WT_BINS; b++)
        ymax = fmax(ymax, fmax(p->early[b], p->late[b]));
    plot_axes ax = { .x = x + 64, .y = y + 30, .w = WT_PANEL_W - 84, .h = WT_PANEL_H - 82,
                     .x0 = 0.0, .x1 = 1.0, .y0 = 0.0, .y1 = ymax > 0 ? ymax * 1.08 : 1.0 };
    char title[96];
    snprintf(title, sizeof(title), "layer %d (%s, capacity %g)", p->layer,
             f->ri->cfg.layers[p->layer].kind, p->capacity);
    plot_axes_draw(cr, &ax, title, "router weight sigmoid(r)", "share of tokens");
    double bw = 1.0 / WT_BINS;
    for (int b = 0; b < WT_BINS; b++)
        plot_bar(cr, &ax, b * bw + 0.1 * bw, (b + 1) * bw - 0.1 * bw, p->early[b],
                 rgb_hex(0x9a9a9a), 0.55);
    for (int b = 0; b < WT_BINS; b++)
        plot_bar(cr, &ax, b * bw + 0.1 * bw, (b + 1) * bw - 0.1 * bw, p->late[b], palette_color(0),
                 0.55);
    /* the late histogram's outline, so overlapping bars stay readable */
    cairo_save(cr);
    plot_color(cr, palette_color(0), 1.0);
    cairo_set_line_width(cr, 1.5);
    cairo_move_to(cr, axes_px(&ax, 0.0), axes_py(&ax, 0.0));
    for (int b = 0; b < WT_BINS; b++) {
        cairo_line_to(cr, axes_px(&ax, b * bw), axes_py(&ax, p->late[b]));
        cairo_line_to(cr, axes_px(&ax, (b + 1) * bw), axes_py(&ax, p->late[b]));
    }
    cairo_line_to(cr, axes_px(&ax, 1.0), axes_py(&ax, 0.0));
    cairo_stroke(cr);
    cairo_restore(cr);
}

static void draw_weights(cairo_t *cr, void *user)
{
    const weights_fig *f = user;
    char buf[256];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    snprintf(buf, sizeof(buf), "Router weights of %s: step %ld against step %ld", f->ri->name,
             f->first, f->last);
    plot_text(cr, 20, 14, 0.0, 0.0, buf);
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    snprintf(buf, sizeof(buf), "%d recorded held-out sequences x %d positions per layer",
             f->ri->R, f->ri->S);
    plot_text(cr, 20, 36, 0.0, 0.0, buf);
    for (int i = 0; i < f->n; i++)
        draw_panel(cr, f, &f->panels[i], (i % f->cols) * WT_PANEL_W,
                   WT_TOP + (i / f->cols) * WT_PANEL_H);
    legend_item items[2] = { { .color = rgb_hex(0x9a9a9a), .mark = MARK_BOX },
                             { .color = palette_color(0), .mark = MARK_BOX } };
    snprintf(items[0].label, sizeof(items[0].label), "step %ld (first recorded)", f->first);
    snprintf(items[1].label, sizeof(items[1].label), "step %ld (last recorded)", f->last);
    plot_legend(cr, 64, f->height - WT_LEGEND + 4, 240, 2, items, f->first == f->last ? 1 : 2);
}

/* Share of the record's R*S tokens in each bin of sigmoid(scores). */
static void weight_hist(double *share, const float *scores, long n)
{
    float *w = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!w) {
        memset(share, 0, WT_BINS * sizeof(double));
        return;
    }
    for (long i = 0; i < n; i++)
        w[i] = 1.0f / (1.0f + expf(-scores[i]));
    histogram_floats(share, w, n, 0.0, 1.0, WT_BINS);
    for (int b = 0; b < WT_BINS; b++)
        share[b] /= n > 0 ? (double)n : 1.0;
    free(w);
}

int cmd_weights(const an_args *a)
{
    run_info *ri = NULL;
    weights_fig f = { 0 };
    char err[RUN_PATH_LEN + 512], path[RUN_PATH_LEN + 64];
    if (an_open_routed_run(a, &ri))
        return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT, L = ri->cfg.n_layers;
    f.ri = ri;
    f.first = ri->steps[0];
    f.last = ri->steps[ri->n_steps - 1];
    f.panels = calloc((size_t)L, sizeof(weights_panel));
    if (!f.panels)
        goto done;
    long n = (long)ri->R * ri->S;
    for (int l = 0; l < L; l++) {
        layer_record early, late;
        if (read_layer_record(ri, f.first, l, &early, err, (int)sizeof(err)) ||
            read_layer_record(ri, f.last, l, &late, err, (int)sizeof(err))) {
            free_layer_record(&early);
            an_fail(a, rc, "%s", err);
            goto done;
        }
        if (early.scores && late.scores) {
            weights_panel *p = &f.panels[f.n++];
            p->layer = l;
            p->capacity = run_layer_capacity(ri, l);
            weight_hist(p->early, early.scores, n);
            weight_hist(p->late, late.scores, n);
        }
        free_layer_record(&early);
        free_layer_record(&late);
    }
    if (f.n == 0) {
        an_fail(a, rc, "%s: no router scores recorded (layers = %s: no layer of a kind that "
                "records them: mod, staged, tcmod, mor)", ri->path, ri->cfg.layers_text);
        goto done;
    }
    f.cols = f.n < WT_MAX_COLS ? f.n : WT_MAX_COLS;
    f.width = f.cols * WT_PANEL_W + 10;
    f.height = WT_TOP + legend_rows(f.n, f.cols) * WT_PANEL_H + WT_LEGEND;
    if (an_out_path(a, ri->dir, "weights.png", path, (int)sizeof(path)))
        goto done;
    rc = an_save_figure(a, path, f.width, f.height, draw_weights, &f);
done:
    free(f.panels);
    free_run_info(&ri);
    return rc;
}
