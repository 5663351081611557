/* mode-analyze heatmap: which tokens of one held-out sequence took each
 * block at one recorded step, as Fig. 5 (left) of the MoD paper draws it
 * (Raposo et al. 2024, section 5): one row per layer, one column per
 * position, the sequence's text along the x axis.  A recursing layer's row
 * has one band a recursion; an exit point's shows the tokens that left. */
#include "analysis/analyze.h"
#include "analysis/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Layout in pixels: the image is HM_LEFT + HM_RIGHT + HM_CELL * max(S,
 * HM_MIN_COLS) wide; tests/analysis/test_analysis.sh checks it. */
enum {
    HM_CELL = 10, HM_MIN_COLS = 48, HM_LEFT = 150, HM_RIGHT = 24, HM_TOP = 66, HM_ROW = 24,
    HM_TEXT = 18, HM_TICKS = 18, HM_XLABEL = 26, HM_LEGEND_COL = 180,
};

enum { LEG_DENSE, LEG_TAKEN, LEG_SKIPPED, LEG_CAUSAL, LEG_NOOP, LEG_DROPPED, LEG_EXIT, LEG_GONE,
       LEG_FIXED };

/* An exit point's cells: the token left the stack there, or had left at an
 * earlier exit (its state frozen: no later layer computes it). */
#define COLOR_EXITED 0xd55e00u
#define COLOR_GONE 0xf7e3d4u

typedef struct heatmap_fig {
    const run_info *ri;
    layer_record *recs;  /* [L] */
    long step;
    int seq, width, height, legend_cols, n_items;
    legend_item items[LEG_FIXED + 64];
    char subtitle[512];
} heatmap_fig;

/* One glyph per byte token: printable ASCII as itself, a space as a middle
 * dot, a newline as a return arrow, anything else as a replacement box. */
static const char *token_glyph(int32_t t, char *buf)
{
    if (t == ' ')
        return "\xc2\xb7";
    if (t == '\n')
        return "\xe2\x86\xb5";
    if (t == '\t')
        return "\xe2\x86\x92";
    if (t > 32 && t < 127) {
        buf[0] = (char)t;
        buf[1] = '\0';
        return buf;
    }
    return "\xe2\x96\xaf";
}

/* Whether the token of cell at left the stack at an exit before layer l. */
static bool gone_before(const heatmap_fig *h, int l, long at)
{
    for (int j = 0; j < l; j++)
        if (h->recs[j].exited && h->recs[j].exited[at])
            return true;
    return false;
}

/* Cell (l, i): what the layer did with the token at position i. */
static void draw_cell(cairo_t *cr, const heatmap_fig *h, int l, int i, double x, double y,
                      double w, double hh)
{
    const layer_record *rec = &h->recs[l];
    int S = h->ri->S;
    long at = (long)h->seq * S + i;
    bool gone = gone_before(h, l, at);
    if (gone || rec->exited) {
        cairo_rectangle(cr, x, y, w, hh);
        plot_color(cr, rgb_hex(gone ? COLOR_GONE : rec->exited[at] ? COLOR_EXITED : COLOR_DENSE),
                   1.0);
        cairo_fill(cr);
        return;
    }
    if (rec->depth) { /* a recursing layer: one band a recursion, filled where it ran */
        double R = run_layer_recursions(h->ri, l);
        int n = isfinite(R) && R >= 1 ? (int)R : 1;
        for (int r = 0; r < n; r++) {
            cairo_rectangle(cr, x, y + hh * r / n, w, hh / n);
            plot_color(cr, rgb_hex(rec->depth[at] > r ? COLOR_TAKEN : COLOR_SKIPPED), 1.0);
            cairo_fill(cr);
        }
        return;
    }
    if (rec->experts) {
        int K = rec->top_k;
        for (int k = 0; k < K; k++) {
            int32_t e = rec->experts[at * K + k];
            double ky = y + hh * k / K, kh = hh / K;
            if (e == rec->n_experts) {
                plot_hatch_box(cr, x + 0.5, ky + 0.5, w - 1, kh - 1);
                continue;
            }
            cairo_rectangle(cr, x, ky, w, kh);
            rgb c = e >= 0 ? palette_color(e) : rgb_hex(e == -1 ? COLOR_DROPPED : COLOR_SKIPPED);
            plot_color(cr, c, 1.0);
            cairo_fill(cr);
        }
    } else if (rec->selected) {
        cairo_rectangle(cr, x, y, w, hh);
        plot_color(cr, rgb_hex(rec->selected[at] ? COLOR_TAKEN : COLOR_SKIPPED), 1.0);
        cairo_fill(cr);
    } else {
        cairo_rectangle(cr, x, y, w, hh);
        plot_color(cr, rgb_hex(COLOR_DENSE), 1.0);
        cairo_fill(cr);
    }
    if (rec->causal && rec->selected && (rec->causal[at] != 0) != (rec->selected[at] != 0))
        plot_dot(cr, x + w / 2, y + hh / 2, 1.8);
}

static void draw_heatmap(cairo_t *cr, void *user)
{
    const heatmap_fig *h = user;
    const run_info *ri = h->ri;
    int L = ri->cfg.n_layers, S = ri->S;
    char buf[256];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    snprintf(buf, sizeof(buf), "Routing of held-out sequence %d at step %ld: %s", h->seq, h->step,
             ri->name);
    plot_text(cr, 20, 14, 0.0, 0.0, buf);
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    plot_text(cr, 20, 36, 0.0, 0.0, h->subtitle);

    for (int l = 0; l < L; l++) {
        double y = HM_TOP + l * HM_ROW;
        const layer_record *rec = &h->recs[l];
        bool routed = (run_layer_decides(ri, l) & (DECIDES_TAKE | DECIDES_EXPERTS)) != 0;
        plot_font(cr, 12, false, false);
        plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
        snprintf(buf, sizeof(buf), "%d  %s", l, ri->cfg.layers[l].kind);
        plot_text(cr, HM_LEFT - 10, y + HM_ROW / 2.0, 1.0, 0.5, buf);
        if (routed && !layer_record_any(rec)) {
            plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
            plot_text(cr, HM_LEFT + 6, y + HM_ROW / 2.0, 0.0, 0.5, "(no record at this step)");
            continue;
        }
        for (int i = 0; i < S; i++)
            draw_cell(cr, h, l, i, HM_LEFT + i * HM_CELL, y + 3, HM_CELL - 1, HM_ROW - 6);
    }

    /* the text of the sequence, one glyph under each column, then positions */
    double ty = HM_TOP + L * HM_ROW + 4;
    plot_font(cr, 11, true, true);
    bool bytes = true;
    for (int i = 0; i < S; i++)
        bytes &= ri->tokens[(long)h->seq * (S + 1) + i] < 256;
    for (int i = 0; bytes && i < S; i++) {
        int32_t t = ri->tokens[(long)h->seq * (S + 1) + i];
        char g[2];
        plot_color(cr, rgb_hex(t > 32 && t < 127 ? COLOR_TEXT : 0x9a9a9a), 1.0);
        plot_text(cr, HM_LEFT + i * HM_CELL + (HM_CELL - 1) / 2.0, ty, 0.5, 0.0,
                  token_glyph(t, g));
    }
    int every = S <= 64 ? 8 : S <= 256 ? 16 : 32;
    double py = ty + HM_TEXT;
    plot_font(cr, 10, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    cairo_set_line_width(cr, 1.0);
    for (int i = 0; i < S; i += every) {
        double x = HM_LEFT + i * HM_CELL + 4.5;
        cairo_move_to(cr, x, py);
        cairo_line_to(cr, x, py + 4);
        cairo_stroke(cr);
        snprintf(buf, sizeof(buf), "%d", i);
        plot_text(cr, x, py + 5, 0.5, 0.0, buf);
    }
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_text(cr, HM_LEFT + S * HM_CELL / 2.0, py + HM_TICKS + 2, 0.5, 0.0,
              bytes ? "position (the token entering it below its column)" : "position");
    plot_text_up(cr, 24, HM_TOP + L * HM_ROW / 2.0, "layer");
    plot_legend(cr, 20, py + HM_TICKS + HM_XLABEL, HM_LEGEND_COL, h->legend_cols, h->items,
                h->n_items);
}

static void add_item(heatmap_fig *h, const char *label, rgb c, legend_mark m)
{
    legend_item *it = &h->items[h->n_items++];
    snprintf(it->label, sizeof(it->label), "%s", label);
    it->color = c;
    it->mark = m;
}

/* The legend lists only what the figure shows. */
static void build_legend(heatmap_fig *h)
{
    bool dense = false, sel = false, causal = false, skip = false, noop = false, drop = false;
    bool exited = false, gone = false;
    int experts = 0;
    int L = h->ri->cfg.n_layers, S = h->ri->S;
    long at0 = (long)h->seq * S; /* the shown sequence's cells */
    for (int l = 0; l < L; l++) {
        const layer_record *r = &h->recs[l];
        for (long i = at0; r->exited && i < at0 + S; i++)
            if (r->exited[i]) {
                exited = true;
                gone |= l + 1 < L; /* the later rows show it gone */
            }
        dense |= r->exited != NULL;
        dense |= !layer_record_any(r) &&
                 !(run_layer_decides(h->ri, l) & (DECIDES_TAKE | DECIDES_EXPERTS));
        for (long i = at0; r->depth && i < at0 + S; i++)
            if (!gone_before(h, l, i)) {
                double R = run_layer_recursions(h->ri, l);
                sel |= r->depth[i] > 0;
                skip |= r->depth[i] < (isfinite(R) && R >= 1 ? (int)R : 1);
            }
        for (long i = at0; r->selected && !r->experts && !r->depth && i < at0 + S; i++)
            if (!gone_before(h, l, i)) {
                sel |= r->selected[i] != 0;
                skip |= !r->selected[i];
            }
        for (long i = at0; r->selected && r->experts && i < at0 + S; i++)
            skip |= !gone_before(h, l, i);
        for (long i = at0; r->causal && r->selected && i < at0 + S; i++)
            causal |= (r->causal[i] != 0) != (r->selected[i] != 0);
        if (r->experts) {
            experts = r->n_experts > experts ? r->n_experts : experts;
            for (long i = at0 * r->top_k; i < (at0 + S) * r->top_k; i++) {
                noop |= r->experts[i] == r->n_experts;
                drop |= r->experts[i] == -1;
            }
        }
    }
    char buf[80];
    if (dense)
        add_item(h, "always computed (dense)", rgb_hex(COLOR_DENSE), MARK_BOX);
    if (sel)
        add_item(h, "took the block", rgb_hex(COLOR_TAKEN), MARK_BOX);
    if (skip)
        add_item(h, "skipped the block", rgb_hex(COLOR_SKIPPED), MARK_BOX);
    for (int e = 0; e < experts && e < 64; e++) {
        snprintf(buf, sizeof(buf), "expert %d", e);
        add_item(h, buf, palette_color(e), MARK_BOX);
    }
    if (noop)
        add_item(h, "no-op expert", rgb_hex(0xffffff), MARK_HATCH);
    if (drop)
        add_item(h, "dropped (over capacity)", rgb_hex(COLOR_DROPPED), MARK_BOX);
    if (exited)
        add_item(h, "left the stack here (exit)", rgb_hex(COLOR_EXITED), MARK_BOX);
    if (gone)
        add_item(h, "left at an earlier exit", rgb_hex(COLOR_GONE), MARK_BOX);
    if (causal)
        add_item(h, "causal rule disagrees", rgb_hex(COLOR_SKIPPED), MARK_DOT);
}

static void capacities(const run_info *ri, char *buf, int len)
{
    int w = snprintf(buf, (size_t)len, "capacity ");
    int start = w;
    double seen[MODE_MAX_LAYERS];
    int n = 0;
    for (int l = 0; l < ri->cfg.n_layers && w < len; l++) {
        if (!(run_layer_decides(ri, l) & DECIDES_TAKE))
            continue;
        double c = run_layer_capacity(ri, l);
        bool dup = isnan(c); /* no share key: the share follows from the depth */
        for (int j = 0; j < n; j++)
            dup |= seen[j] == c;
        if (!dup) {
            seen[n++] = c;
            w += snprintf(buf + w, (size_t)(len - w), "%s%g", n > 1 ? ", " : "", c);
        }
    }
    if (w == start)
        snprintf(buf, (size_t)len, "no routed capacity");
}

int cmd_heatmap(const an_args *a)
{
    run_info *ri = NULL;
    heatmap_fig h = { 0 };
    char err[RUN_PATH_LEN + 512], path[RUN_PATH_LEN + 64], name[96], kinds[256], cap[128];
    if (an_open_routed_run(a, &ri))
        return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT, L = ri->cfg.n_layers;
    h.step = a->step >= 0 ? a->step : ri->steps[ri->n_steps - 1];
    if (run_step_index(ri, h.step) < 0) {
        char list[512];
        run_steps_list(ri, list, (int)sizeof(list));
        an_fail(a, rc, "%s: step %ld is not recorded (recorded steps: %s)", ri->path, h.step,
                list);
        goto done;
    }
    if (a->seq >= ri->R) {
        an_fail(a, rc, "%s: --seq %ld is out of range: the file records %d sequences (0 to %d)",
                ri->path, a->seq, ri->R, ri->R - 1);
        goto done;
    }
    h.ri = ri;
    h.seq = (int)a->seq;
    h.recs = calloc((size_t)L, sizeof(layer_record));
    if (!h.recs) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    for (int l = 0; l < L; l++)
        if (read_layer_record(ri, h.step, l, &h.recs[l], err, (int)sizeof(err))) {
            an_fail(a, rc, "%s", err);
            goto done;
        }
    build_legend(&h);
    const char *kind_names[MODE_MAX_LAYERS];
    for (int l = 0; l < L; l++)
        kind_names[l] = ri->cfg.layers[l].kind;
    kinds_summary(kinds, (int)sizeof(kinds), kind_names, L);
    capacities(ri, cap, (int)sizeof(cap));
    snprintf(h.subtitle, sizeof(h.subtitle), "%s  \xc2\xb7  %s  \xc2\xb7  S = %d  \xc2\xb7  "
             "%d sequences recorded", kinds, cap, ri->S, ri->R);
    int cols = ri->S > HM_MIN_COLS ? ri->S : HM_MIN_COLS;
    h.width = HM_LEFT + HM_RIGHT + HM_CELL * cols;
    h.legend_cols = (h.width - 40) / HM_LEGEND_COL;
    h.height = HM_TOP + L * HM_ROW + 4 + HM_TEXT + HM_TICKS + HM_XLABEL +
               legend_rows(h.n_items, h.legend_cols) * LEGEND_ROW_H + 10;
    snprintf(name, sizeof(name), "heatmap_step%ld_seq%d.png", h.step, h.seq);
    if (an_out_path(a, ri->dir, name, path, (int)sizeof(path)))
        goto done;
    rc = an_save_figure(a, path, h.width, h.height, draw_heatmap, &h);
done:
    for (int l = 0; h.recs && l < L; l++)
        free_layer_record(&h.recs[l]);
    free(h.recs);
    free_run_info(&ri);
    return rc;
}
