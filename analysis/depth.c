/* mode-analyze depth: compute per token, from the routing records of one
 * step (docs/instruments.md).  A token's depth is the number of blocks that
 * ran on it: 1 for a layer without a per-token decision (dense, drop, the
 * expert kinds, whose attention runs on every token), the decision for a
 * depth-routed layer (mod, tcmod, staged: `selected`), the recursions that
 * kept it for a recursing one (mor: `depth`), and nothing after an exit
 * point it left at (exit: `exited`; the layers after it only take its keys
 * and values).  Tables and figure: mean depth by position and by token
 * class, and for each exit point the share of each class that left there. */
#include "analysis/analyze.h"
#include "analysis/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DP_PANEL_W = 460, DP_PANEL_H = 300, DP_MAX_EXITS = 16 };

typedef struct depth_report {
    const run_info *ri;
    long step;
    int blocks;                /* the most a token can take */
    double *by_pos, *n_pos;    /* [S] sum of depths, tokens */
    double *by_class, *n_class; /* [n_classes] */
    double *hist;              /* [blocks + 1] tokens of each depth */
    double tokens, total;
    int n_exits, exit_layer[DP_MAX_EXITS];
    double *exit_class;        /* [n_exits][n_classes] tokens of a class that left there */
} depth_report;

/* The most blocks layer l can run on a token. */
static int layer_blocks(const run_info *ri, int l, const layer_record *rec)
{
    if (run_layer_decides(ri, l) & DECIDES_EXIT)
        return 0;
    if (rec->depth) {
        double R = run_layer_recursions(ri, l);
        return isfinite(R) && R >= 1 ? (int)R : 1;
    }
    return 1;
}

static int read_depths(const an_args *a, depth_report *dp)
{
    const run_info *ri = dp->ri;
    int L = ri->cfg.n_layers, S = ri->S, C = ri->labels ? ri->n_classes : 0;
    long n = (long)ri->R * S;
    char err[RUN_PATH_LEN + 256];
    int *depth = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    unsigned char *gone = calloc((size_t)(n > 0 ? n : 1), 1);
    dp->exit_class = calloc((size_t)DP_MAX_EXITS * (size_t)(C > 0 ? C : 1), sizeof(double));
    int rc = !depth || !gone || !dp->exit_class ? an_fail(a, EXIT_BAD_INPUT, "out of memory") : 0;
    for (int l = 0; !rc && l < L; l++) {
        layer_record rec;
        if (read_layer_record(ri, dp->step, l, &rec, err, (int)sizeof(err))) {
            rc = an_fail(a, EXIT_BAD_INPUT, "%s", err);
            break;
        }
        dp->blocks += layer_blocks(ri, l, &rec);
        bool exit_point = layer_blocks(ri, l, &rec) == 0;
        int x = exit_point && rec.exited && dp->n_exits < DP_MAX_EXITS ? dp->n_exits++ : -1;
        if (x >= 0)
            dp->exit_layer[x] = l;
        for (long t = 0; t < n; t++) {
            if (gone[t])
                continue;
            int r = (int)(t / S), i = (int)(t % S);
            if (exit_point) {
                if (rec.exited && rec.exited[t]) {
                    gone[t] = 1;
                    int c = C ? ri->labels[(long)r * (S + 1) + i] : -1;
                    if (x >= 0 && c >= 0 && c < C)
                        dp->exit_class[(size_t)x * C + c] += 1.0;
                }
            } else if (rec.depth) {
                depth[t] += rec.depth[t];
            } else if (rec.selected) {
                depth[t] += rec.selected[t] != 0;
            } else {
                depth[t] += 1;
            }
        }
        free_layer_record(&rec);
    }
    dp->by_pos = calloc((size_t)S, sizeof(double));
    dp->n_pos = calloc((size_t)S, sizeof(double));
    dp->by_class = calloc((size_t)(C > 0 ? C : 1), sizeof(double));
    dp->n_class = calloc((size_t)(C > 0 ? C : 1), sizeof(double));
    dp->hist = calloc((size_t)dp->blocks + 1, sizeof(double));
    if (!rc && (!dp->by_pos || !dp->n_pos || !dp->by_class || !dp->n_class || !dp->hist))
        rc = an_fail(a, EXIT_BAD_INPUT, "out of memory");
    for (long t = 0; !rc && t < n; t++) {
        int r = (int)(t / S), i = (int)(t % S), v = depth[t];
        dp->by_pos[i] += v;
        dp->n_pos[i] += 1.0;
        int c = C ? ri->labels[(long)r * (S + 1) + i] : -1;
        if (c >= 0 && c < C) {
            dp->by_class[c] += v;
            dp->n_class[c] += 1.0;
        }
        dp->hist[v < dp->blocks ? v : dp->blocks] += 1.0;
        dp->total += v;
    }
    dp->tokens = (double)n;
    free(depth);
    free(gone);
    return rc;
}

static void write_md(FILE *f, const void *user)
{
    const depth_report *dp = user;
    const run_info *ri = dp->ri;
    int C = ri->labels ? ri->n_classes : 0;
    fprintf(f, "# Compute per token of %s\n\n", ri->name);
    fprintf(f, "From the routing records of step %ld (%d held-out windows x %d positions, top-k "
               "evaluation): a token's depth is the number of blocks that ran on it, at most "
               "%d; mean %.3f.\n\n", dp->step, ri->R, ri->S, dp->blocks,
            dp->tokens > 0 ? dp->total / dp->tokens : (double)NAN);
    fprintf(f, "| depth | tokens | share |\n| ---: | ---: | ---: |\n");
    for (int b = 0; b <= dp->blocks; b++)
        fprintf(f, "| %d | %.0f | %.4f |\n", b, dp->hist[b], dp->hist[b] / dp->tokens);
    if (C) {
        fprintf(f, "\nBy the token's class:\n\n| class | tokens | mean depth |");
        for (int x = 0; x < dp->n_exits; x++)
            fprintf(f, " left at layer %d |", dp->exit_layer[x]);
        fprintf(f, "\n| --- | ---: | ---: |");
        for (int x = 0; x < dp->n_exits; x++)
            fprintf(f, " ---: |");
        fprintf(f, "\n");
        for (int c = 0; c < C; c++) {
            if (!dp->n_class[c])
                continue;
            fprintf(f, "| %s | %.0f | %.3f |", ri->class_names[c], dp->n_class[c],
                    dp->by_class[c] / dp->n_class[c]);
            for (int x = 0; x < dp->n_exits; x++)
                fprintf(f, " %.4f |", dp->exit_class[(size_t)x * C + c] / dp->n_class[c]);
            fprintf(f, "\n");
        }
    }
}

static void write_csv(FILE *f, const void *user)
{
    const depth_report *dp = user;
    const run_info *ri = dp->ri;
    int C = ri->labels ? ri->n_classes : 0;
    fprintf(f, "what,index,class,tokens,value\n");
    for (int b = 0; b <= dp->blocks; b++)
        fprintf(f, "depth_tokens,%d,,%.0f,%.0f\n", b, dp->hist[b], dp->hist[b]);
    for (int i = 0; i < ri->S; i++)
        fprintf(f, "mean_depth_position,%d,,%.0f,%.6g\n", i, dp->n_pos[i],
                dp->n_pos[i] ? dp->by_pos[i] / dp->n_pos[i] : (double)NAN);
    for (int c = 0; c < C; c++)
        if (dp->n_class[c]) {
            fprintf(f, "mean_depth_class,,%s,%.0f,%.6g\n", ri->class_names[c], dp->n_class[c],
                    dp->by_class[c] / dp->n_class[c]);
            for (int x = 0; x < dp->n_exits; x++)
                fprintf(f, "exit_share_class,%d,%s,%.0f,%.6g\n", dp->exit_layer[x],
                        ri->class_names[c], dp->n_class[c],
                        dp->exit_class[(size_t)x * C + c] / dp->n_class[c]);
        }
}

static void draw(cairo_t *cr, void *user)
{
    const depth_report *dp = user;
    const run_info *ri = dp->ri;
    int S = ri->S, C = ri->labels ? ri->n_classes : 0;
    char title[200];
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    snprintf(title, sizeof(title), "Compute per token of %s (step %ld; mean depth %.2f of %d)",
             ri->name, dp->step, dp->tokens > 0 ? dp->total / dp->tokens : (double)NAN,
             dp->blocks);
    plot_text(cr, 20, 14, 0.0, 0.0, title);
    double y0 = 44;
    { /* (a) by position */
        double *xs = malloc((size_t)S * sizeof(double)), *ys = malloc((size_t)S * sizeof(double));
        int m = 0;
        for (int i = 0; xs && ys && i < S; i++)
            if (dp->n_pos[i]) {
                xs[m] = i;
                ys[m++] = dp->by_pos[i] / dp->n_pos[i];
            }
        plot_axes ax = { .x = 64, .y = y0 + 30, .w = DP_PANEL_W - 90, .h = DP_PANEL_H - 80,
                         .x0 = 0, .x1 = S > 1 ? S - 1 : 1, .y0 = 0, .y1 = dp->blocks + 0.2 };
        plot_axes_draw(cr, &ax, "mean depth by position", "position in the window",
                       "blocks run");
        if (m)
            plot_polyline(cr, &ax, xs, ys, m, palette_color(0), 1.4, false, false);
        free(xs);
        free(ys);
    }
    { /* (b) by class */
        double x0 = DP_PANEL_W;
        const char *cats[64];
        double mean[64];
        int shown = 0;
        for (int c = 0; c < C && shown < 64; c++)
            if (dp->n_class[c]) {
                cats[shown] = ri->class_names[c];
                mean[shown++] = dp->by_class[c] / dp->n_class[c];
            }
        plot_axes ax = { .x = x0 + 64, .y = y0 + 30, .w = DP_PANEL_W - 90, .h = DP_PANEL_H - 80,
                         .x0 = 0, .x1 = shown ? shown : 1, .y0 = 0, .y1 = dp->blocks + 0.2,
                         .xcats = shown ? cats : NULL, .n_xcats = shown };
        plot_axes_draw(cr, &ax, C ? "mean depth by token class" : "mean depth (no token classes)",
                       "class of the token", "blocks run");
        for (int j = 0; j < shown; j++)
            plot_bar(cr, &ax, j + 0.15, j + 0.85, mean[j], palette_color(0), 0.8);
    }
}

static void free_report(depth_report *dp)
{
    free(dp->by_pos);
    free(dp->n_pos);
    free(dp->by_class);
    free(dp->n_class);
    free(dp->hist);
    free(dp->exit_class);
}

int cmd_depth(const an_args *a)
{
    run_info *ri = NULL;
    if (an_open_routed_run(a, &ri))
        return EXIT_BAD_INPUT;
    depth_report dp = { .ri = ri };
    int rc = EXIT_BAD_INPUT;
    if (an_routing_step(a, ri, &dp.step) || read_depths(a, &dp))
        goto done;
    rc = an_write_outputs(a, ri->dir, "depth", write_md, write_csv, 2 * DP_PANEL_W,
                          44 + DP_PANEL_H, draw, &dp);
done:
    free_report(&dp);
    free_run_info(&ri);
    return rc;
}
