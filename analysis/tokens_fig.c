/* tokens.png: the take rate of every routed layer per token class (grouped
 * bars) and per position bucket (lines), the capacity as a dashed line. */
#include "analysis/tokens.h"

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
        for (int c = 0; c < t->ri->n_classes; c++)
            m = fmax(m, isnan(take_rate(tl->cls[c])) ? 0.0 : take_rate(tl->cls[c]));
        for (int b = 0; b < TK_BUCKETS; b++)
            m = fmax(m, isnan(take_rate(tl->pos[b])) ? 0.0 : take_rate(tl->pos[b]));
        m = fmax(m, t->ri->cfg.layers[tl->layer].capacity);
    }
    return m > 0 ? fmin(1.0, m * 1.12) : 1.0;
}

static void capacity_lines(cairo_t *cr, const tokens_fig *f, const plot_axes *ax)
{
    static const double dash[] = { 5.0, 4.0 };
    for (int k = 0; k < f->t->n_layers; k++) {
        const run_info *ri = f->t->ri;
        int l = f->t->layers[k].layer;
        if (!run_layer_has_key(ri, l, "capacity"))
            continue;
        double y = round(axes_py(ax, ri->cfg.layers[l].capacity)) + 0.5;
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
    snprintf(buf, sizeof(buf), "Which tokens take the routed blocks: %s", ri->name);
    plot_text(cr, 20, 14, 0.0, 0.0, buf);
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    if (t->n_steps > 1)
        snprintf(buf, sizeof(buf), "steps %ld to %ld pooled, %d held-out sequences x %d "
                 "positions; dashed: capacity", t->first, t->last, ri->R, ri->S);
    else
        snprintf(buf, sizeof(buf), "step %ld, %d held-out sequences x %d positions; dashed: "
                 "capacity", t->last, ri->R, ri->S);
    plot_text(cr, 20, 36, 0.0, 0.0, buf);

    double ymax = max_rate(t);
    plot_axes ac = { .x = 80, .y = TF_TOP + 30, .w = TF_CLASS_W - 100, .h = TF_PANEL_H - 86,
                     .x0 = 0, .x1 = ri->n_classes, .y0 = 0, .y1 = ymax,
                     .xcats = ri->class_names, .n_xcats = ri->n_classes };
    plot_axes_draw(cr, &ac, "by token class", "class", "take rate");
    double group = 0.8 / t->n_layers;
    for (int c = 0; c < ri->n_classes; c++)
        for (int k = 0; k < t->n_layers; k++) {
            double v = take_rate(t->layers[k].cls[c]);
            double x = c + 0.1 + k * group;
            if (!isnan(v))
                plot_bar(cr, &ac, x, x + group * 0.9, v, palette_color(k), 1.0);
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
