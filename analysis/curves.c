/* mode-analyze curves: held-out loss of groups of replicates against
 * training FLOPs (log scale; as each run's budget counts them, nominal by
 * MODEL.md or executed as routed), wall time and steps, the
 * isoFLOP view of the MoD paper's section 4.  Per group: the mean over its
 * replicates at every evaluation step they all reached, top-k routing solid
 * inside a band from the lowest to the highest replicate (with three seeds
 * the range shows every replicate, with no assumption on their
 * distribution), the causal rule's mean dashed.  A run's last evaluation
 * over more windows than the others (run.final_eval_windows) measures
 * another sample of the held-out text, so it is a dot of its own, not the
 * end of the line. */
#include "analysis/runset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CV_PANEL_W = 440, CV_PANEL_H = 340, CV_TOP = 72, CV_LEGEND_COL = 220 };
enum { X_FLOPS, X_WALL, X_STEPS, X_COUNT };

/* One run's evaluations, each with the metrics of its step. */
typedef struct curve {
    long n;
    double *x[X_COUNT]; /* [n] */
    double *topk, *causal;
    long windows;       /* the line's evaluation windows (0: not recorded) */
    bool has_final;     /* a last evaluation over final_windows, not on the line */
    long final_windows;
    double final_x[X_COUNT], final_topk, final_causal;
} curve;

/* A group's: the means at the steps every replicate reached, and the
 * replicates' range of the top-k loss. */
typedef struct group_curve {
    int n_runs;
    curve mean; /* its final point: when every replicate has one */
    double *lo, *hi;
    double final_lo, final_hi;
} group_curve;

typedef struct curves_fig {
    const an_runset *rs;
    group_curve *gc;
    int width, height, legend_cols, n_items, max_n;
    legend_item *items;
    bool bpb; /* bits per byte on the y axis */
} curves_fig;

static const char *const x_labels[X_COUNT] = { NULL /* x_flops_labels */, "wall time (s)",
                                               "training step" };
static const char *const x_flops_labels[3] = {
    "training FLOPs (nominal)", "training FLOPs (executed)",
    "training FLOPs (as each run's budget counts them)"
};
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

static int alloc_curve(curve *c, long n)
{
    c->n = n;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(double);
    for (int k = 0; k < X_COUNT; k++)
        c->x[k] = malloc(bytes);
    c->topk = malloc(bytes);
    c->causal = malloc(bytes);
    return c->x[X_FLOPS] && c->x[X_WALL] && c->x[X_STEPS] && c->topk && c->causal ? 0 : -1;
}

/* Each evaluation with the metrics of its step; EXIT_BAD_INPUT and a
 * message on error. */
static int read_curve(const an_args *a, const char *path, curve *c)
{
    run_info *ri = NULL;
    double *ms = NULL, *flops = NULL, *wall = NULL, *es = NULL, *topk = NULL, *causal = NULL;
    double *win = NULL, *ex = NULL;
    long nm = 0, nf = 0, nw = 0, ne = 0, n2 = 0, n3 = 0, nwin = 0, nex = 0;
    char err[RUN_PATH_LEN + 512];
    if (build_run_info(&ri, path, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    int rc = EXIT_BAD_INPUT;
    if (run_read_column(ri, "metrics/step", &ms, &nm) ||
        run_read_column(ri, "metrics/train_flops", &flops, &nf) ||
        run_read_column(ri, "metrics/wall_s", &wall, &nw) || nf != nm || nw != nm) {
        an_fail(a, rc, "%s: /metrics/step, train_flops or wall_s missing or uneven", ri->path);
        goto done;
    }
    /* a run whose budget counts executed FLOPs: the x axis is what it ran,
     * its rows' executed FLOPs (one row a step) summed up to each */
    if (!strcmp(ri->cfg.flops_count, "executed")) {
        if (run_read_column(ri, "metrics/train_flops_executed", &ex, &nex) || nex != nm) {
            an_fail(a, rc, "%s: /metrics/train_flops_executed missing or uneven", ri->path);
            goto done;
        }
        double sum = 0.0;
        for (long j = 0; j < nm; j++)
            flops[j] = sum += isfinite(ex[j]) ? ex[j] : 0.0;
    }
    /* bits per byte; a byte-level run's file older than them: nats / ln 2 */
    bool bpb = a->bpb, bytes = ri->cfg.vocab == 256 && !strcmp(ri->cfg.tokenizer, "none");
    if (bpb && bytes && run_read_column(ri, "eval/bpb_topk", &topk, &n2) == 0)
        free(topk);
    else if (bpb && bytes)
        bpb = false;
    topk = NULL;
    n2 = 0;
    if (run_read_column(ri, "eval/step", &es, &ne) ||
        run_read_column(ri, bpb ? "eval/bpb_topk" : "eval/loss_topk", &topk, &n2) ||
        run_read_column(ri, bpb ? "eval/bpb_causal" : "eval/loss_causal", &causal, &n3) ||
        n2 != ne || n3 != ne) {
        an_fail(a, rc, "%s: /eval/step, %s or %s missing or uneven", ri->path,
                a->bpb ? "bpb_topk" : "loss_topk", a->bpb ? "bpb_causal" : "loss_causal");
        goto done;
    }
    for (long i = 0; a->bpb && !bpb && i < ne; i++) { /* bytes: one per token */
        topk[i] /= log(2.0);
        causal[i] /= log(2.0);
    }
    for (long i = 0; a->bpb && i < ne; i++)
        if (!isfinite(topk[i])) {
            an_fail(a, rc, "%s: no bits per byte (a token file without a tokenizer, or a run "
                    "file older than them)", ri->path);
            goto done;
        }
    if (ne == 0) {
        an_fail(a, rc, "%s: no held-out evaluations (run.eval_every = %ld)", ri->path,
                ri->cfg.eval_every);
        goto done;
    }
    /* files written before eval/windows have none: one line */
    if (run_read_column(ri, "eval/windows", &win, &nwin) || nwin != ne)
        nwin = 0;
    bool final = nwin >= 2 && win[ne - 1] != win[ne - 2];
    if (alloc_curve(c, final ? ne - 1 : ne)) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    c->windows = nwin ? (long)win[0] : 0;
    c->has_final = final;
    c->final_windows = final ? (long)win[ne - 1] : 0;
    for (long i = 0, j = 0; i < ne; i++) {
        while (j < nm && ms[j] < es[i]) /* both ascending */
            j++;
        bool at = j < nm && ms[j] == es[i];
        double x[X_COUNT] = { at ? flops[j] : (double)NAN, at ? wall[j] : (double)NAN, es[i] };
        if (i == c->n) {
            memcpy(c->final_x, x, sizeof(x));
            c->final_topk = topk[i];
            c->final_causal = causal[i];
            break;
        }
        for (int k = 0; k < X_COUNT; k++)
            c->x[k][i] = x[k];
        c->topk[i] = topk[i];
        c->causal[i] = causal[i];
    }
    rc = 0;
done:
    free(ms);
    free(flops);
    free(wall);
    free(es);
    free(topk);
    free(causal);
    free(win);
    free(ex);
    free_run_info(&ri);
    return rc;
}

/* The group's curve over the steps every replicate evaluated: of the
 * replicates compare's statistics are over (the complete ones when there
 * are any, so that a run still in progress does not cut the curve short),
 * else of all. */
static int group_curve_of(const an_args *a, const an_runset *rs, int gi, group_curve *g)
{
    const run_group *every = &rs->g.groups[gi];
    run_group used = *every;
    used.n = 0;
    used.members = malloc((size_t)every->n * sizeof(int));
    for (int m = 0; used.members && m < every->n; m++)
        if (an_run_used(rs, every->members[m]))
            used.members[used.n++] = every->members[m];
    const run_group *grp = used.n ? &used : every;
    curve *c = calloc((size_t)grp->n, sizeof(curve));
    int rc = c && used.members ? 0 : an_fail(a, EXIT_BAD_INPUT, "out of memory");
    for (int m = 0; !rc && m < grp->n; m++)
        rc = read_curve(a, rs->runs[grp->members[m]].path, &c[m]);
    if (!rc && alloc_curve(&g->mean, c[0].n))
        rc = an_fail(a, EXIT_BAD_INPUT, "out of memory");
    if (!rc) {
        g->lo = malloc((size_t)c[0].n * sizeof(double));
        g->hi = malloc((size_t)c[0].n * sizeof(double));
        if (!g->lo || !g->hi)
            rc = an_fail(a, EXIT_BAD_INPUT, "out of memory");
    }
    g->n_runs = grp->n;
    long out = 0;
    for (long i = 0; !rc && i < c[0].n; i++) {
        double step = c[0].x[X_STEPS][i], sum[X_COUNT] = { 0 }, st = 0, sc = 0;
        double lo = HUGE_VAL, hi = -HUGE_VAL;
        int all = 1;
        for (int m = 0; m < grp->n && all; m++) {
            long j = 0;
            while (j < c[m].n && c[m].x[X_STEPS][j] != step)
                j++;
            if (j == c[m].n) {
                all = 0;
                break;
            }
            for (int k = 0; k < X_COUNT; k++)
                sum[k] += c[m].x[k][j];
            st += c[m].topk[j];
            sc += c[m].causal[j];
            lo = fmin(lo, c[m].topk[j]);
            hi = fmax(hi, c[m].topk[j]);
        }
        if (!all)
            continue;
        for (int k = 0; k < X_COUNT; k++)
            g->mean.x[k][out] = sum[k] / grp->n;
        g->mean.topk[out] = st / grp->n;
        g->mean.causal[out] = sc / grp->n;
        g->lo[out] = lo;
        g->hi[out++] = hi;
    }
    g->mean.n = out;
    /* the final point: the mean of the replicates' own, when they all have
     * one over the same windows */
    g->mean.has_final = !rc;
    for (int m = 0; !rc && m < grp->n; m++)
        g->mean.has_final &= c[m].has_final && c[m].final_windows == c[0].final_windows;
    if (g->mean.has_final) {
        g->mean.windows = c[0].windows;
        g->mean.final_windows = c[0].final_windows;
        g->final_lo = HUGE_VAL;
        g->final_hi = -HUGE_VAL;
        for (int m = 0; m < grp->n; m++) {
            for (int k = 0; k < X_COUNT; k++)
                g->mean.final_x[k] += c[m].final_x[k] / grp->n;
            g->mean.final_topk += c[m].final_topk / grp->n;
            g->mean.final_causal += c[m].final_causal / grp->n;
            g->final_lo = fmin(g->final_lo, c[m].final_topk);
            g->final_hi = fmax(g->final_hi, c[m].final_topk);
        }
    }
    for (int m = 0; c && m < grp->n; m++)
        free_curve(&c[m]);
    free(c);
    free(used.members);
    return rc;
}

/* The range of the finite values of every group's curves (positive ones for
 * a log axis), padded; which: an x axis, or X_COUNT for the losses. */
static void range_of(const curves_fig *f, int which, bool logx, double *lo, double *hi)
{
    *lo = HUGE_VAL;
    *hi = -HUGE_VAL;
    for (int j = 0; j < f->rs->g.n_groups; j++) {
        const group_curve *g = &f->gc[j];
        for (long i = 0; i <= g->mean.n; i++) {
            if (i == g->mean.n && !g->mean.has_final)
                break;
            bool fin = i == g->mean.n;
            double vals[3] = {
                which < X_COUNT ? (fin ? g->mean.final_x[which] : g->mean.x[which][i])
                                : (fin ? g->final_lo : g->lo[i]),
                which < X_COUNT ? (fin ? g->mean.final_x[which] : g->mean.x[which][i])
                                : (fin ? g->final_hi : g->hi[i]),
                which < X_COUNT ? (fin ? g->mean.final_x[which] : g->mean.x[which][i])
                                : (fin ? g->mean.final_causal : g->mean.causal[i]) };
            for (int k = 0; k < 3; k++)
                if (isfinite(vals[k]) && (!logx || vals[k] > 0)) {
                    *lo = fmin(*lo, vals[k]);
                    *hi = fmax(*hi, vals[k]);
                }
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
    char buf[320];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    plot_text(cr, 20, 14, 0.0, 0.0, "Held-out loss");
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    if (f->max_n > 1)
        snprintf(buf, sizeof(buf), "%d group%s of replicates: mean over the replicates; solid: "
                 "top-k routing, in a band from the lowest to the highest replicate; dashed: "
                 "the causal rule", f->rs->g.n_groups, f->rs->g.n_groups > 1 ? "s" : "");
    else
        snprintf(buf, sizeof(buf), "%d run%s; solid: top-k routing over whole windows, dashed: "
                 "the causal rule (what sampling can do)", f->rs->n, f->rs->n > 1 ? "s" : "");
    plot_text(cr, 20, 36, 0.0, 0.0, buf);
    const curve *fin = NULL;
    for (int j = 0; j < f->rs->g.n_groups && !fin; j++)
        if (f->gc[j].mean.has_final)
            fin = &f->gc[j].mean;
    if (fin) {
        snprintf(buf, sizeof(buf), "dots: the last evaluation, over %ld windows (the lines' are "
                 "over %ld: another sample of the held-out text)%s", fin->final_windows,
                 fin->windows, f->max_n > 1 ? ", with the replicates' range" : "");
        plot_text(cr, 20, 54, 0.0, 0.0, buf);
    }
    int executed = 0;
    for (int i = 0; i < f->rs->n; i++)
        executed += f->rs->runs[i].executed;
    int flops_label = executed == 0 ? 0 : executed == f->rs->n ? 1 : 2;
    double y0, y1;
    range_of(f, X_COUNT, false, &y0, &y1);
    for (int k = 0; k < X_COUNT; k++) {
        plot_axes ax = { .x = k * CV_PANEL_W + 80, .y = CV_TOP + 30, .w = CV_PANEL_W - 104,
                         .h = CV_PANEL_H - 86, .y0 = y0, .y1 = y1, .logx = k == X_FLOPS };
        range_of(f, k, ax.logx, &ax.x0, &ax.x1);
        plot_axes_draw(cr, &ax, x_titles[k],
                       k == X_FLOPS ? x_flops_labels[flops_label] : x_labels[k],
                       f->bpb ? "held-out bits per byte" : "held-out loss (nats/token)");
        for (int j = 0; j < f->rs->g.n_groups; j++) {
            const group_curve *g = &f->gc[j];
            if (g->n_runs > 1)
                plot_band(cr, &ax, g->mean.x[k], g->lo, g->hi, (int)g->mean.n, palette_color(j),
                          0.2);
        }
        for (int j = 0; j < f->rs->g.n_groups; j++) {
            const group_curve *g = &f->gc[j];
            plot_polyline(cr, &ax, g->mean.x[k], g->mean.causal, (int)g->mean.n,
                          palette_color(j), 1.8, true, false);
            plot_polyline(cr, &ax, g->mean.x[k], g->mean.topk, (int)g->mean.n, palette_color(j),
                          2.0, false, true);
            if (g->mean.has_final && isfinite(g->mean.final_x[k])) {
                if (g->n_runs > 1)
                    plot_error_bar(cr, &ax, g->mean.final_x[k], 0.0, g->final_lo, g->final_hi,
                                   palette_color(j), 6.0);
                plot_dot_at(cr, axes_px(&ax, g->mean.final_x[k]), axes_py(&ax, g->mean.final_topk),
                            4.5, palette_color(j));
            }
        }
    }
    plot_legend(cr, 80, CV_TOP + CV_PANEL_H, CV_LEGEND_COL, f->legend_cols, f->items, f->n_items);
}

int cmd_curves(const an_args *a)
{
    an_runset rs;
    char path[RUN_PATH_LEN + 64];
    if (an_read_runs(a, &rs))
        return EXIT_BAD_INPUT;
    int G = rs.g.n_groups, rc = EXIT_BAD_INPUT;
    curves_fig f = { .rs = &rs, .bpb = a->bpb };
    f.gc = calloc((size_t)G, sizeof(group_curve));
    f.items = calloc((size_t)G + 3, sizeof(legend_item));
    if (!f.gc || !f.items) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    for (int j = 0; j < G; j++)
        if (group_curve_of(a, &rs, j, &f.gc[j]))
            goto done;
    for (int j = 0; j < G; j++) {
        legend_item *it = &f.items[f.n_items++];
        int n = f.gc[j].n_runs;
        if (n > 1)
            snprintf(it->label, sizeof(it->label), "%.60s (n=%d)", rs.g.groups[j].name, n);
        else
            snprintf(it->label, sizeof(it->label), "%.79s", rs.g.groups[j].name);
        it->color = palette_color(j);
        it->mark = MARK_LINE;
        f.max_n = n > f.max_n ? n : f.max_n;
    }
    f.items[f.n_items++] = (legend_item){ "top-k routing", rgb_hex(COLOR_AXIS), MARK_LINE };
    f.items[f.n_items++] = (legend_item){ "causal rule", rgb_hex(COLOR_AXIS), MARK_DASH };
    if (f.max_n > 1)
        f.items[f.n_items++] = (legend_item){ "range of the replicates", rgb_hex(0xc8c8c8),
                                              MARK_BOX };
    f.width = X_COUNT * CV_PANEL_W + 20;
    f.legend_cols = (f.width - 100) / CV_LEGEND_COL;
    f.height = CV_TOP + CV_PANEL_H + legend_rows(f.n_items, f.legend_cols) * LEGEND_ROW_H + 12;
    if (an_out_path(a, NULL, "curves.png", path, (int)sizeof(path)))
        goto done;
    rc = an_save_figure(a, path, f.width, f.height, draw_curves, &f);
done:
    for (int j = 0; f.gc && j < G; j++) {
        free_curve(&f.gc[j].mean);
        free(f.gc[j].lo);
        free(f.gc[j].hi);
    }
    free(f.gc);
    free(f.items);
    an_free_runs(&rs);
    return rc;
}
