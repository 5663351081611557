/* tokens.png: the take rate of every routed layer per token class (grouped
 * bars) and per position bucket (lines), each with its 95% Wilson interval,
 * each replicate's own rate as a dot (for replicates), the capacity as a
 * dashed line. */
#include "analysis/tokens_fig.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { TF_CLASS_W = 600, TF_POS_W = 480, TF_PANEL_H = 360, TF_TOP = 58, TF_LEGEND_COL = 170 };

typedef struct tokens_fig {
    const tokens_report *t;
    int width, height, legend_cols;
    legend_item items[MODE_MAX_LAYERS];
} tokens_fig;

static double max_rate(const tokens_report *t)
{
    double m = 0.0;
    for (int k = 0; k < t->n_layers; k++) {
        const token_layer *tl = &t->layers[k];
        double lo, hi;
        for (int c = 0; c < t->ri->n_classes; c++) {
            take_interval(tl->cls[c], &lo, &hi);
            m = fmax(m, isnan(hi) ? 0.0 : hi);
            for (int r = 0; r < t->n_runs; r++)
                m = fmax(m, isnan(take_rate(tl->run_cls[r][c])) ? 0.0 : take_rate(tl->run_cls[r][c]));
        }
        for (int b = 0; b < TK_BUCKETS; b++) {
            take_interval(tl->pos[b], &lo, &hi);
            m = fmax(m, isnan(hi) ? 0.0 : hi);
        }
        m = fmax(m, run_layer_capacity(t->ri, tl->layer));
    }
    return m > 0 ? fmin(1.0, m * 1.12) : 1.0;
}

static void capacity_lines(cairo_t *cr, const tokens_fig *f, const plot_axes *ax)
{
    static const double dash[] = { 5.0, 4.0 };
    for (int k = 0; k < f->t->n_layers; k++) {
        const run_info *ri = f->t->ri;
        int l = f->t->layers[k].layer;
        if (!(run_layer_decides(ri, l) & DECIDES_TAKE) || isnan(run_layer_capacity(ri, l)))
            continue;
        double y = round(axes_py(ax, run_layer_capacity(ri, l))) + 0.5;
        cairo_set_dash(cr, dash, 2, 0);
        cairo_set_line_width(cr, 1.0);
        plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
        cairo_move_to(cr, ax->x, y);
        cairo_line_to(cr, ax->x + ax->w, y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
    }
}

static void draw_tokens(cairo_t *cr, void *user)
{
    const tokens_fig *f = user;
    const tokens_report *t = f->t;
    const run_info *ri = t->ri;
    char buf[256], names[TK_BUCKETS][24];
    const char *bucket_names[TK_BUCKETS];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    snprintf(buf, sizeof(buf), "Which tokens take the routed blocks: %s", t->name);
    plot_text(cr, 20, 14, 0.0, 0.0, buf);
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    char reps[64] = "";
    if (t->n_runs > 1)
        snprintf(reps, sizeof(reps), " x %d replicates (dots: each one's rate)", t->n_runs);
    if (t->n_steps > 1)
        snprintf(buf, sizeof(buf), "steps %ld to %ld pooled, %d held-out sequences x %d "
                 "positions%s; bars: 95%% Wilson intervals; dashed: capacity", t->first, t->last,
                 ri->R, ri->S, reps);
    else
        snprintf(buf, sizeof(buf), "step %ld, %d held-out sequences x %d positions%s; bars: 95%% "
                 "Wilson intervals; dashed: capacity", t->last, ri->R, ri->S, reps);
    plot_text(cr, 20, 36, 0.0, 0.0, buf);

    double ymax = max_rate(t);
    plot_axes ac = { .x = 80, .y = TF_TOP + 30, .w = TF_CLASS_W - 100, .h = TF_PANEL_H - 86,
                     .x0 = 0, .x1 = ri->n_classes, .y0 = 0, .y1 = ymax,
                     .xcats = ri->class_names, .n_xcats = ri->n_classes };
    plot_axes_draw(cr, &ac, t->predicted ? "by class of the predicted token" : "by token class",
                   "class", "take rate");
    double group = 0.8 / t->n_layers;
    for (int c = 0; c < ri->n_classes; c++)
        for (int k = 0; k < t->n_layers; k++) {
            double v = take_rate(t->layers[k].cls[c]);
            double x = c + 0.1 + k * group;
            if (isnan(v))
                continue;
            plot_bar(cr, &ac, x, x + group * 0.9, v, palette_color(k), 0.85);
            double lo, hi, mid = x + group * 0.45;
            take_interval(t->layers[k].cls[c], &lo, &hi);
            plot_error_bar(cr, &ac, mid, 0.0, lo, hi, rgb_hex(COLOR_TEXT), 5.0);
            for (int r = 0; t->n_runs > 1 && r < t->n_runs; r++) {
                double vr = take_rate(t->layers[k].run_cls[r][c]);
                double spread = group * 0.5 * ((r + 0.5) / t->n_runs - 0.5);
                if (!isnan(vr))
                    plot_dot_at(cr, axes_px(&ac, mid + spread), axes_py(&ac, vr), 2.2,
                                rgb_hex(COLOR_TEXT));
            }
        }
    capacity_lines(cr, f, &ac);

    for (int b = 0; b < TK_BUCKETS; b++) {
        int lo = b * t->bucket_len, hi = (b + 1) * t->bucket_len - 1;
        snprintf(names[b], sizeof(names[b]), "%d-%d", lo, hi < ri->S - 1 ? hi : ri->S - 1);
        bucket_names[b] = names[b];
    }
    plot_axes ap = { .x = TF_CLASS_W + 70, .y = TF_TOP + 30, .w = TF_POS_W - 90,
                     .h = TF_PANEL_H - 86, .x0 = 0, .x1 = TK_BUCKETS, .y0 = 0, .y1 = ymax,
                     .xcats = bucket_names, .n_xcats = TK_BUCKETS };
    plot_axes_draw(cr, &ap, "by position", "positions", "take rate");
    capacity_lines(cr, f, &ap);
    for (int k = 0; k < t->n_layers; k++) {
        double x[TK_BUCKETS], y[TK_BUCKETS];
        for (int b = 0; b < TK_BUCKETS; b++) {
            x[b] = b + 0.5;
            y[b] = take_rate(t->layers[k].pos[b]);
        }
        plot_polyline(cr, &ap, x, y, TK_BUCKETS, palette_color(k), 2.0, false, true);
        double dx = t->n_layers > 1 ? (k - (t->n_layers - 1) / 2.0) * 4.0 : 0.0;
        for (int b = 0; b < TK_BUCKETS; b++) {
            double lo, hi;
            take_interval(t->layers[k].pos[b], &lo, &hi);
            plot_error_bar(cr, &ap, x[b], dx, lo, hi, palette_color(k), 5.0);
        }
    }
    plot_legend(cr, 80, TF_TOP + TF_PANEL_H, TF_LEGEND_COL, f->legend_cols, f->items,
                t->n_layers);
}

int tokens_figure(const an_args *a, const tokens_report *t, const char *path)
{
    tokens_fig f = { .t = t };
    for (int k = 0; k < t->n_layers; k++) {
        int l = t->layers[k].layer;
        snprintf(f.items[k].label, sizeof(f.items[k].label), "layer %d (%s)", l,
                 t->ri->cfg.layers[l].kind);
        f.items[k].color = palette_color(k);
        f.items[k].mark = MARK_BOX;
    }
    f.width = TF_CLASS_W + TF_POS_W + 20;
    f.legend_cols = (f.width - 100) / TF_LEGEND_COL;
    f.height = TF_TOP + TF_PANEL_H + legend_rows(t->n_layers, f.legend_cols) * LEGEND_ROW_H + 12;
    return an_save_figure(a, path, f.width, f.height, draw_tokens, &f);
}
