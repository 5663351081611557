/* mode-analyze routing: the routing analytics of a run (docs/instruments.md).
 * From the per-step statistics: for every expert layer, the load over
 * training (MaxVio = max load / mean load - 1 over the real experts, their
 * coefficient of variation, experts that took no token over the last
 * logged steps, the drop rate).  From the routing records of the last
 * recorded step: the expert x token-class matrix of first choices with its
 * mutual information (specialisation), how many routed blocks each token
 * took (compute per token), and the router's margin at the top-k boundary
 * (how close the decisions are to ties).  Works on a run file or on an
 * `eval --record` file alike (without the statistics there). */
#include "analysis/analyze.h"
#include "analysis/stats.h"

#include <gsl/gsl_sort.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RT_MARGIN_BINS = 40, RT_DEAD_ROWS = 100, RT_PANEL_W = 460, RT_PANEL_H = 300 };
#define RT_MARGIN_RANGE 4.0 /* the margin histogram's span, in sds of the scores */
#define RT_NEAR 0.1         /* "near a tie": within 0.1 sd of the boundary */

typedef struct load_layer {
    int layer, experts;
    long n;                      /* logged steps */
    double *step, *maxvio, *cv;  /* [n] */
    double maxvio_late, cv_late, drop_late; /* means over the last 10% of steps */
    int dead;                    /* experts with no token in the last RT_DEAD_ROWS rows */
    long dead_rows;
    bool chosen;                 /* maxvio from the kind's chosen counts (before capacity) */
    double bias_spread;          /* max - min of the balancing bias at the end; NaN: none */
    double shared_late;          /* the shared experts' share, late mean; NaN: none */
} load_layer;

typedef struct class_layer {
    int layer, experts, classes;
    double *joint;               /* [classes][experts + 1] first choices (last: no-op) */
    double mi, h_expert, chance_norm; /* bits; MI / H(expert) */
} class_layer;

typedef struct margin_layer {
    int layer;
    double hist[RT_MARGIN_BINS]; /* share of tokens by (score - boundary) / sd */
    double near, median_abs;     /* share within RT_NEAR sd, median |margin| in sds */
} margin_layer;

typedef struct routing_report {
    const run_info *ri;
    long step;
    load_layer *loads;
    int n_loads;
    class_layer *classes;
    int n_classes;
    margin_layer *margins;
    int n_margins;
    double *blocks;              /* [n_routed + 1] tokens that took b routed blocks */
    int n_routed;
    double tokens;
} routing_report;

/* ---- load over training ---------------------------------------------------- */

static int read_load(const run_info *ri, int l, int E, load_layer *out)
{
    memset(out, 0, sizeof(*out));
    out->layer = l;
    out->experts = E;
    char name[96];
    double **cols = calloc((size_t)E, sizeof(double *)), *drop = NULL, *steps = NULL;
    long n = -1, m;
    int rc = cols ? 0 : -1;
    snprintf(name, sizeof(name), "layer_stats/%d/step", l);
    if (!rc && run_read_column(ri, name, &steps, &n))
        rc = -1;
    for (int e = 0; !rc && e < E; e++) {
        snprintf(name, sizeof(name), "layer_stats/%d/tokens_%d", l, e);
        if (run_read_column(ri, name, &cols[e], &m) || m != n)
            rc = -1;
    }
    snprintf(name, sizeof(name), "layer_stats/%d/dropped", l);
    if (!rc && (run_read_column(ri, name, &drop, &m) || m != n))
        rc = -1;
    if (!rc && n > 0) {
        out->n = n;
        out->step = steps;
        steps = NULL;
        out->maxvio = malloc((size_t)n * sizeof(double));
        out->cv = malloc((size_t)n * sizeof(double));
        long late0 = n - (n / 10 > 0 ? n / 10 : 1), cnt = 0;
        for (long i = 0; out->maxvio && out->cv && i < n; i++) {
            double sum = 0, sq = 0, mx = 0, kept = 0;
            for (int e = 0; e < E; e++) {
                double v = cols[e][i];
                sum += v;
                sq += v * v;
                mx = fmax(mx, v);
            }
            kept = sum;
            double mean = sum / E, var = sq / E - mean * mean;
            out->maxvio[i] = mean > 0 ? mx / mean - 1.0 : (double)NAN;
            out->cv[i] = mean > 0 ? sqrt(var > 0 ? var : 0) / mean : (double)NAN;
            if (i >= late0) {
                out->maxvio_late += out->maxvio[i];
                out->cv_late += out->cv[i];
                out->drop_late += kept + drop[i] > 0 ? drop[i] / (kept + drop[i]) : 0.0;
                cnt++;
            }
        }
        /* the kinds' own MaxVio, of the chosen assignments before capacity
         * drops them (where the run has it): the kept counts above cannot
         * show more than the capacity factor's imbalance */
        double *mv = NULL;
        snprintf(name, sizeof(name), "layer_stats/%d/maxvio", l);
        if (!run_read_column(ri, name, &mv, &m) && m == n) {
            out->maxvio_late = 0.0;
            for (long i = 0; i < n; i++) {
                out->maxvio[i] = mv[i];
                if (i >= late0)
                    out->maxvio_late += mv[i];
            }
        }
        out->chosen = mv != NULL;
        free(mv);
        out->bias_spread = out->shared_late = (double)NAN;
        double lo = HUGE_VAL, hi = -HUGE_VAL;
        for (int e = 0; e < E; e++) {
            snprintf(name, sizeof(name), "layer_stats/%d/bias_%d", l, e);
            long k = 0;
            double b = run_last_value(ri, name, &k);
            if (k > 0 && isfinite(b))
                lo = fmin(lo, b), hi = fmax(hi, b);
        }
        if (hi >= lo)
            out->bias_spread = hi - lo;
        double *sh = NULL;
        snprintf(name, sizeof(name), "layer_stats/%d/shared_share", l);
        if (!run_read_column(ri, name, &sh, &m) && m == n) {
            out->shared_late = 0.0;
            for (long i = late0; i < n; i++)
                out->shared_late += sh[i] / (double)(n - late0);
        }
        free(sh);
        if (cnt) {
            out->maxvio_late /= cnt;
            out->cv_late /= cnt;
            out->drop_late /= cnt;
        }
        out->dead_rows = n < RT_DEAD_ROWS ? n : RT_DEAD_ROWS;
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (long i = n - out->dead_rows; i < n; i++)
                s += cols[e][i];
            out->dead += s == 0.0;
        }
    }
    for (int e = 0; cols && e < E; e++)
        free(cols[e]);
    free(cols);
    free(drop);
    free(steps);
    return rc;
}

/* ---- the records of one step ----------------------------------------------- */

static void add_classes(const run_info *ri, const layer_record *rec, class_layer *cl)
{
    int K = rec->top_k, E = rec->n_experts, S = ri->S;
    for (int r = 0; r < ri->R; r++)
        for (int i = 0; i < S; i++) {
            int c = ri->labels[(long)r * (S + 1) + i];
            int e = layer_record_expert(rec, S, r, i), first = rec->experts[((long)r * S + i) * K];
            if (e < 0 && first == E)
                e = E; /* the no-op expert first */
            if (c >= cl->classes || e < 0)
                continue; /* dropped, or a row that skipped staged's block */
            cl->joint[(size_t)c * (E + 1) + e] += 1.0;
        }
    double *col = calloc((size_t)E + 1, sizeof(double));
    for (int c = 0; col && c < cl->classes; c++)
        for (int e = 0; e <= E; e++)
            col[e] += cl->joint[(size_t)c * (E + 1) + e];
    cl->mi = mutual_info_bits(cl->joint, cl->classes, E + 1);
    cl->h_expert = col ? entropy_bits(col, E + 1) : (double)NAN;
    cl->chance_norm = cl->h_expert > 0 ? cl->mi / cl->h_expert : (double)NAN;
    free(col);
}

static void add_margins(const run_info *ri, const layer_record *rec, margin_layer *ml)
{
    int S = ri->S;
    long n = (long)ri->R * S;
    double *m = malloc((size_t)n * sizeof(double));
    double *sorted = malloc((size_t)S * sizeof(double));
    if (!m || !sorted) {
        free(m);
        free(sorted);
        return;
    }
    double sum = 0, sq = 0;
    for (long i = 0; i < n; i++) {
        double v = (double)rec->scores[i];
        sum += v;
        sq += v * v;
    }
    double mean = sum / n, sd = sqrt(fmax(sq / n - mean * mean, 0.0));
    long cnt = 0;
    for (int r = 0; r < ri->R; r++) {
        /* the boundary: midway between the lowest taken and the highest
         * skipped score of the sequence */
        double lo_taken = HUGE_VAL, hi_skipped = -HUGE_VAL;
        for (int i = 0; i < S; i++) {
            double s = (double)rec->scores[(long)r * S + i];
            if (rec->selected[(long)r * S + i])
                lo_taken = fmin(lo_taken, s);
            else
                hi_skipped = fmax(hi_skipped, s);
        }
        if (!isfinite(lo_taken) || !isfinite(hi_skipped))
            continue;
        double thr = 0.5 * (lo_taken + hi_skipped);
        for (int i = 0; i < S; i++)
            m[cnt++] = sd > 0 ? ((double)rec->scores[(long)r * S + i] - thr) / sd : 0.0;
    }
    for (long i = 0; i < cnt; i++) {
        int b = hist_bin(m[i], -RT_MARGIN_RANGE, RT_MARGIN_RANGE, RT_MARGIN_BINS);
        ml->hist[b] += 1.0 / cnt;
        ml->near += fabs(m[i]) < RT_NEAR ? 1.0 / cnt : 0.0;
        m[i] = fabs(m[i]);
    }
    gsl_sort(m, 1, (size_t)cnt);
    ml->median_abs = cnt ? m[cnt / 2] : (double)NAN;
    free(m);
    free(sorted);
}

static int read_records(const an_args *a, routing_report *rp)
{
    const run_info *ri = rp->ri;
    int L = ri->cfg.n_layers, S = ri->S;
    long n = (long)ri->R * S;
    char err[RUN_PATH_LEN + 256];
    int *took = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    rp->classes = calloc((size_t)L, sizeof(class_layer));
    rp->margins = calloc((size_t)L, sizeof(margin_layer));
    if (!took || !rp->classes || !rp->margins) {
        free(took);
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    }
    for (int l = 0; l < L; l++) {
        layer_record rec;
        if (read_layer_record(ri, rp->step, l, &rec, err, (int)sizeof(err))) {
            free(took);
            return an_fail(a, EXIT_BAD_INPUT, "%s", err);
        }
        if (!layer_record_any(&rec)) {
            free_layer_record(&rec);
            continue;
        }
        rp->n_routed++;
        for (int r = 0; r < ri->R; r++)
            for (int i = 0; i < S; i++)
                took[(long)r * S + i] += layer_record_taken(&rec, S, r, i);
        if (rec.experts && ri->labels && ri->n_classes > 0) {
            class_layer *cl = &rp->classes[rp->n_classes];
            cl->layer = l;
            cl->experts = rec.n_experts;
            cl->classes = ri->n_classes;
            cl->joint = calloc((size_t)ri->n_classes * (size_t)(rec.n_experts + 1),
                               sizeof(double));
            if (cl->joint) {
                add_classes(ri, &rec, cl);
                rp->n_classes++;
            }
        }
        if (rec.scores && rec.selected) {
            margin_layer *ml = &rp->margins[rp->n_margins++];
            ml->layer = l;
            add_margins(ri, &rec, ml);
        }
        free_layer_record(&rec);
    }
    rp->blocks = calloc((size_t)rp->n_routed + 1, sizeof(double));
    for (long i = 0; rp->blocks && i < n; i++)
        rp->blocks[took[i]] += 1.0;
    rp->tokens = (double)n;
    free(took);
    return rp->blocks ? 0 : an_fail(a, EXIT_BAD_INPUT, "out of memory");
}

/* ---- writing ------------------------------------------------------------------ */

static void write_md(FILE *f, const void *user)
{
    const routing_report *rp = user;
    const run_info *ri = rp->ri;
    fprintf(f, "# Routing analytics of %s\n\n", ri->name);
    if (rp->n_loads) {
        fprintf(f, "Expert load per layer over training (the per-step statistics): MaxVio = "
                   "max load / mean load - 1 over the real experts (0: perfectly balanced; "
                   "of the assignments chosen before capacity drops them where the run "
                   "records `maxvio`, marked *, else of the tokens kept), "
                   "CV = their coefficient of variation, drop rate = dropped assignments over "
                   "all, each the mean of the last 10%% of logged steps; dead = experts that "
                   "took no token in the last logged steps; bias spread = max - min of the "
                   "balancing bias at the last step; shared = the shared experts' share of "
                   "the update (docs/kinds/moe-routing.md).\n\n");
        fprintf(f, "| layer | kind | experts | MaxVio | CV | drop rate | dead experts | "
                   "bias spread | shared |\n");
        fprintf(f, "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (int k = 0; k < rp->n_loads; k++) {
            const load_layer *x = &rp->loads[k];
            char bias[32] = "-", shared[32] = "-";
            if (isfinite(x->bias_spread))
                snprintf(bias, sizeof(bias), "%.4f", x->bias_spread);
            if (isfinite(x->shared_late))
                snprintf(shared, sizeof(shared), "%.3f", x->shared_late);
            fprintf(f, "| %d | %s | %d | %.3f%s | %.3f | %.4f | %d (last %ld steps) | %s | %s |\n",
                    x->layer, ri->cfg.layers[x->layer].kind, x->experts, x->maxvio_late,
                    x->chosen ? "*" : "", x->cv_late, x->drop_late, x->dead, x->dead_rows, bias,
                    shared);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "From the routing records of step %ld (%d held-out windows x %d positions).\n\n",
            rp->step, ri->R, ri->S);
    if (rp->n_routed) {
        fprintf(f, "Compute per token: how many of the %d routed layers each token took (a "
                   "routed block, or a real expert as first choice).\n\n| blocks taken | "
                   "tokens | share |\n| ---: | ---: | ---: |\n", rp->n_routed);
        for (int b = 0; b <= rp->n_routed; b++)
            fprintf(f, "| %d | %.0f | %.4f |\n", b, rp->blocks[b], rp->blocks[b] / rp->tokens);
        fprintf(f, "\n");
    }
    if (rp->n_classes) {
        fprintf(f, "Specialisation: the first choices by token class; MI = their mutual "
                   "information with the class, in bits, and over the entropy of the "
                   "choice.\n\n| layer | experts | MI (bits) | H(expert) | MI / H |\n"
                   "| ---: | ---: | ---: | ---: | ---: |\n");
        for (int k = 0; k < rp->n_classes; k++) {
            const class_layer *c = &rp->classes[k];
            fprintf(f, "| %d | %d | %.4f | %.3f | %.4f |\n", c->layer, c->experts, c->mi,
                    c->h_expert, c->chance_norm);
        }
        fprintf(f, "\n");
    }
    if (rp->n_margins) {
        fprintf(f, "The router's margin at the top-k boundary: a token's score minus the "
                   "midpoint between the sequence's lowest taken and highest skipped score, in "
                   "standard deviations of the layer's scores.\n\n| layer | median |margin| | "
                   "within %.1f sd |\n| ---: | ---: | ---: |\n", RT_NEAR);
        for (int k = 0; k < rp->n_margins; k++)
            fprintf(f, "| %d | %.3f | %.4f |\n", rp->margins[k].layer,
                    rp->margins[k].median_abs, rp->margins[k].near);
    }
}

static void write_csv(FILE *f, const void *user)
{
    const routing_report *rp = user;
    fprintf(f, "what,layer,index,class,value\n");
    for (int k = 0; k < rp->n_loads; k++) {
        const load_layer *x = &rp->loads[k];
        for (long i = 0; i < x->n; i++) {
            fprintf(f, "maxvio,%d,%.0f,,%.6g\n", x->layer, x->step[i], x->maxvio[i]);
            fprintf(f, "cv,%d,%.0f,,%.6g\n", x->layer, x->step[i], x->cv[i]);
        }
        fprintf(f, "dead_experts,%d,%ld,,%d\n", x->layer, x->dead_rows, x->dead);
        fprintf(f, "drop_rate,%d,,,%.6g\n", x->layer, x->drop_late);
    }
    for (int b = 0; b <= rp->n_routed; b++)
        fprintf(f, "blocks_taken,,%d,,%.0f\n", b, rp->blocks[b]);
    for (int k = 0; k < rp->n_classes; k++) {
        const class_layer *c = &rp->classes[k];
        for (int cl = 0; cl < c->classes; cl++)
            for (int e = 0; e <= c->experts; e++)
                fprintf(f, "expert_class,%d,%d,%s,%.0f\n", c->layer, e, rp->ri->class_names[cl],
                        c->joint[(size_t)cl * (c->experts + 1) + e]);
        fprintf(f, "mutual_info_bits,%d,,,%.6g\n", c->layer, c->mi);
    }
    for (int k = 0; k < rp->n_margins; k++)
        for (int b = 0; b < RT_MARGIN_BINS; b++)
            fprintf(f, "margin_share,%d,%d,,%.6g\n", rp->margins[k].layer, b,
                    rp->margins[k].hist[b]);
}

/* ---- the figure: load over training, compute per token, specialisation, margin */

static void draw(cairo_t *cr, void *user)
{
    const routing_report *rp = user;
    char title[160];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    snprintf(title, sizeof(title), "Routing analytics of %s", rp->ri->name);
    plot_text(cr, 20, 14, 0.0, 0.0, title);
    double x0 = 0, y0 = 44;
    /* (a) MaxVio over training */
    {
        double ymax = 0.1, xmax = 1;
        for (int k = 0; k < rp->n_loads; k++)
            for (long i = 0; i < rp->loads[k].n; i++) {
                if (isfinite(rp->loads[k].maxvio[i]))
                    ymax = fmax(ymax, rp->loads[k].maxvio[i]);
                xmax = fmax(xmax, rp->loads[k].step[i]);
            }
        plot_axes ax = { .x = x0 + 64, .y = y0 + 30, .w = RT_PANEL_W - 90, .h = RT_PANEL_H - 80,
                         .x0 = 0, .x1 = xmax, .y0 = 0, .y1 = ymax * 1.05 };
        plot_axes_draw(cr, &ax, rp->n_loads ? "expert load: MaxVio over training"
                                            : "expert load (no expert layer)",
                       "step", "max load / mean - 1");
        for (int k = 0; k < rp->n_loads; k++)
            plot_polyline(cr, &ax, rp->loads[k].step, rp->loads[k].maxvio, (int)rp->loads[k].n,
                          palette_color(k), 1.4, false, false);
        legend_item items[8];
        int ni = 0;
        for (int k = 0; k < rp->n_loads && ni < 8; k++, ni++) {
            snprintf(items[ni].label, sizeof(items[ni].label), "layer %d", rp->loads[k].layer);
            items[ni].color = palette_color(k);
            items[ni].mark = MARK_LINE;
        }
        plot_legend(cr, ax.x + 8, ax.y + 6, 90, 4, items, ni);
    }
    /* (b) compute per token */
    {
        x0 = RT_PANEL_W;
        double ymax = 0.01;
        for (int b = 0; b <= rp->n_routed; b++)
            ymax = fmax(ymax, rp->blocks[b] / rp->tokens);
        plot_axes ax = { .x = x0 + 64, .y = y0 + 30, .w = RT_PANEL_W - 90, .h = RT_PANEL_H - 80,
                         .x0 = -0.5, .x1 = rp->n_routed + 0.5, .y0 = 0, .y1 = ymax * 1.08 };
        plot_axes_draw(cr, &ax, "compute per token: routed layers taken", "layers taken",
                       "share of tokens");
        for (int b = 0; b <= rp->n_routed; b++)
            plot_bar(cr, &ax, b - 0.35, b + 0.35, rp->blocks[b] / rp->tokens, palette_color(0),
                     0.8);
    }
    /* (c) specialisation of the first expert layer: P(expert | class) */
    y0 += RT_PANEL_H;
    x0 = 0;
    if (rp->n_classes) {
        const class_layer *c = &rp->classes[0];
        double cw = (RT_PANEL_W - 130.0) / (c->experts + 1), ch = (RT_PANEL_H - 90.0) / c->classes;
        snprintf(title, sizeof(title), "layer %d: first choice by token class (MI %.3f bits)",
                 c->layer, c->mi);
        plot_font(cr, 12, true, false);
        plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
        plot_text(cr, x0 + 20, y0 + 10, 0.0, 0.0, title);
        plot_font(cr, 10, false, false);
        for (int cl = 0; cl < c->classes; cl++) {
            double row = 0;
            for (int e = 0; e <= c->experts; e++)
                row += c->joint[(size_t)cl * (c->experts + 1) + e];
            plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
            plot_text(cr, x0 + 100, y0 + 40 + (cl + 0.5) * ch, 1.0, 0.5, rp->ri->class_names[cl]);
            for (int e = 0; e <= c->experts; e++) {
                double v = row > 0 ? c->joint[(size_t)cl * (c->experts + 1) + e] / row : 0;
                rgb col = palette_color(0);
                plot_color(cr, (rgb){ 1 - v * (1 - col.r), 1 - v * (1 - col.g),
                                      1 - v * (1 - col.b) }, 1.0);
                cairo_rectangle(cr, x0 + 110 + e * cw, y0 + 40 + cl * ch, cw - 1, ch - 1);
                cairo_fill(cr);
            }
        }
        plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
        for (int e = 0; e <= c->experts; e++) {
            char lab[16];
            snprintf(lab, sizeof(lab), e < c->experts ? "%d" : "no-op", e);
            if (e < c->experts || c->experts < 64)
                plot_text(cr, x0 + 110 + (e + 0.5) * cw, y0 + 44 + c->classes * ch, 0.5, 0.0,
                          lab);
        }
    }
    /* (d) the router's margin */
    x0 = RT_PANEL_W;
    {
        double ymax = 0.01, bw = 2.0 * RT_MARGIN_RANGE / RT_MARGIN_BINS;
        for (int k = 0; k < rp->n_margins; k++)
            for (int b = 0; b < RT_MARGIN_BINS; b++)
                ymax = fmax(ymax, rp->margins[k].hist[b]);
        plot_axes ax = { .x = x0 + 64, .y = y0 + 30, .w = RT_PANEL_W - 90, .h = RT_PANEL_H - 80,
                         .x0 = -RT_MARGIN_RANGE, .x1 = RT_MARGIN_RANGE, .y0 = 0,
                         .y1 = ymax * 1.08 };
        plot_axes_draw(cr, &ax, rp->n_margins ? "router margin at the top-k boundary"
                                              : "router margin (no depth-routed layer)",
                       "score - boundary (sd of the scores)", "share of tokens");
        for (int k = 0; k < rp->n_margins; k++) {
            double xs[RT_MARGIN_BINS];
            for (int b = 0; b < RT_MARGIN_BINS; b++)
                xs[b] = -RT_MARGIN_RANGE + (b + 0.5) * bw;
            plot_polyline(cr, &ax, xs, rp->margins[k].hist, RT_MARGIN_BINS, palette_color(k),
                          1.4, false, true);
        }
    }
}

static void free_report(routing_report *rp)
{
    for (int k = 0; rp->loads && k < rp->n_loads; k++) {
        free(rp->loads[k].step);
        free(rp->loads[k].maxvio);
        free(rp->loads[k].cv);
    }
    free(rp->loads);
    for (int k = 0; rp->classes && k < rp->n_classes; k++)
        free(rp->classes[k].joint);
    free(rp->classes);
    free(rp->margins);
    free(rp->blocks);
}

int cmd_routing(const an_args *a)
{
    run_info *ri = NULL;
    if (an_open_routed_run(a, &ri))
        return EXIT_BAD_INPUT;
    routing_report rp = { .ri = ri };
    int rc = EXIT_BAD_INPUT;
    int L = ri->cfg.n_layers;
    rp.loads = calloc((size_t)L, sizeof(load_layer));
    if (!rp.loads) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    for (int l = 0; l < L; l++) {
        double E = run_layer_experts(ri, l);
        if (isfinite(E) && E >= 1 && !read_load(ri, l, (int)E, &rp.loads[rp.n_loads]))
            rp.n_loads++;
    }
    if (an_routing_step(a, ri, &rp.step) || read_records(a, &rp))
        goto done;
    rc = an_write_outputs(a, ri->dir, "routing", write_md, write_csv, 2 * RT_PANEL_W,
                          44 + 2 * RT_PANEL_H, draw, &rp);
done:
    free_report(&rp);
    free_run_info(&ri);
    return rc;
}
