/* mode-analyze sweep: the final held-out loss (top-k routing) of every group
 * of replicates against the value of one swept config key (the MoD paper's
 * Fig. 3 asks it of the capacity): the mean with its 95% interval (Student's
 * t) as error bars, one series per combination of the other keys that vary
 * (learned or random router, say), and the groups the key does not apply to
 * (dense: no layer reads mod.capacity) as horizontal bands of mean and 95%
 * interval, since they are one number whatever the key. */
#include "analysis/runset.h"
#include "core/util/num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SW_W = 820, SW_PANEL_H = 470, SW_TOP = 62, SW_LEGEND_COL = 360 };

typedef struct sweep_data {
    const an_runset *rs;
    const char *key;
    int n_series;
    char (*series)[256];  /* labels: the other keys' values */
    int *series_of;       /* [groups]: series, -1 for a band (the key does not apply) */
    double *x;            /* [groups]: the key's value */
    bool logx;
    int width, height, legend_cols, n_items;
    legend_item *items;
    char title[300];
} sweep_data;

/* The other keys that vary among the groups the key applies to, as
 * "mod.router = random, ..." of group j (empty when none vary). */
static void series_label(const sweep_data *d, int j, char *buf, int len)
{
    const an_runset *rs = d->rs;
    const run_keys *mine = &rs->runs[rs->g.groups[j].members[0]].keys;
    int w = 0;
    buf[0] = '\0';
    for (int k = 0; k < rs->g.n_varying; k++) {
        const char *name = rs->g.varying[k];
        if (!strcmp(name, d->key))
            continue;
        bool varies = false; /* among the groups on the axis */
        for (int i = 0; i < rs->g.n_groups && !varies; i++)
            varies = d->series_of[i] >= 0 &&
                     strcmp(run_key_value(&rs->runs[rs->g.groups[i].members[0]].keys, name),
                            run_key_value(mine, name));
        if (!varies)
            continue;
        int n = snprintf(buf + w, (size_t)(len - w), "%s%s = %s", w ? ", " : "", name,
                         run_key_value(mine, name));
        if (n < 0 || n >= len - w)
            break;
        w += n;
    }
}

static int build_series(const an_args *a, sweep_data *d)
{
    const an_runset *rs = d->rs;
    int G = rs->g.n_groups;
    d->series = calloc((size_t)G, sizeof(*d->series));
    d->series_of = malloc((size_t)G * sizeof(int));
    d->x = malloc((size_t)G * sizeof(double));
    if (!d->series || !d->series_of || !d->x)
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    bool known = false;
    for (int i = 0; i < rs->n && !known; i++)
        for (int k = 0; k < rs->runs[i].keys.n && !known; k++)
            known = !strcmp(rs->runs[i].keys.keys[k].name, d->key);
    if (!known)
        return an_fail(a, EXIT_BAD_INPUT, "--key %s: no such config key (e.g. mod.capacity, "
                       "optim.lr, model.d_model)", d->key);
    for (int j = 0; j < G; j++) {
        const char *v = run_key_value(&rs->runs[rs->g.groups[j].members[0]].keys, d->key);
        d->series_of[j] = 0; /* on the axis, series decided below */
        if (!strcmp(v, "-")) {
            d->series_of[j] = -1;
            d->x[j] = (double)NAN;
        } else if (!num_parse_double(v, -HUGE_VAL, HUGE_VAL, &d->x[j])) {
            return an_fail(a, EXIT_BAD_INPUT, "--key %s: group %s has the value '%s', not a "
                           "number (a sweep figure needs a numeric key)", d->key,
                           rs->g.groups[j].name, v);
        }
    }
    double x0 = HUGE_VAL, x1 = -HUGE_VAL;
    for (int j = 0; j < G; j++)
        if (d->series_of[j] >= 0) {
            x0 = fmin(x0, d->x[j]);
            x1 = fmax(x1, d->x[j]);
        }
    if (!(x1 > x0))
        return an_fail(a, EXIT_BAD_INPUT, "--key %s: takes %s across the runs; a sweep figure "
                       "needs at least two values", d->key,
                       isfinite(x0) ? "one value" : "no value (no layer reads it)");
    d->logx = x0 > 0 && x1 / x0 >= 16.0; /* learning rates, sizes; capacities stay linear */
    for (int j = 0; j < G; j++) {
        if (d->series_of[j] < 0)
            continue;
        char label[256];
        series_label(d, j, label, (int)sizeof(label));
        int s = 0;
        while (s < d->n_series && strcmp(d->series[s], label))
            s++;
        if (s == d->n_series)
            snprintf(d->series[d->n_series++], sizeof(d->series[0]), "%s", label);
        d->series_of[j] = s;
    }
    return 0;
}

static void file_stem(const char *key, char *out, int len)
{
    int w = snprintf(out, (size_t)len, "sweep_");
    for (const char *c = key; *c && w < len - 1; c++)
        out[w++] = (char)((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                                  (*c >= '0' && *c <= '9') || *c == '.' || *c == '-'
                              ? *c
                              : '_');
    out[w] = '\0';
}

/* ---- tables ------------------------------------------------------------------- */

static void write_md(FILE *f, const sweep_data *d)
{
    const an_runset *rs = d->rs;
    fprintf(f, "Final held-out loss against %s: mean ± sd over the n replicates of each group "
               "and the 95%% interval of the mean (Student's t).", d->key);
    if (rs->baseline >= 0)
        fprintf(f, " Δ: the difference to the baseline %s, p: Welch's two-sided t-test.",
                rs->g.groups[rs->baseline].name);
    fprintf(f, "\n\n| %s | series | group | n | loss top-k | 95%% CI |%s loss causal | 95%% CI |\n",
            d->key, rs->baseline >= 0 ? " Δ top-k | p |" : "");
    fprintf(f, "| ---: | --- | --- | ---: | ---: | ---: |%s ---: | ---: |\n",
            rs->baseline >= 0 ? " ---: | ---: |" : "");
    for (int pass = 0; pass < 2; pass++) /* the axis by series and value, then the bands */
        for (int s = 0; s < (pass ? 1 : d->n_series); s++) {
            int G = rs->g.n_groups;
            bool *done = calloc((size_t)G, sizeof(bool));
            for (;;) { /* ascending in x: the smallest not yet written */
                int best = -1;
                for (int j = 0; j < G; j++) {
                    bool mine = pass ? d->series_of[j] < 0 : d->series_of[j] == s;
                    if (mine && !done[j] && (best < 0 || d->x[j] < d->x[best]))
                        best = j;
                }
                if (!done || best < 0)
                    break;
                done[best] = true;
                const an_group_stats *st = &rs->stats[best];
                char b[8][64], xv[32];
                number_label(xv, (int)sizeof(xv), d->x[best], 6);
                fmt_mean_sd(b[0], 64, &st->topk, 4);
                fmt_interval(b[1], 64, &st->topk, 4);
                fmt_mean_sd(b[2], 64, &st->causal, 4);
                fmt_interval(b[3], 64, &st->causal, 4);
                fprintf(f, "| %s | %s | %s | %d | %s | %s |", pass ? "-" : xv,
                        pass ? "(the key does not apply)" : d->series[s][0] ? d->series[s] : "-",
                        rs->g.groups[best].name, st->used, b[0], b[1]);
                if (rs->baseline >= 0) {
                    fmt_p(b[4], 64, st->vs_topk.p);
                    fprintf(f, " %s | %s |",
                            best == rs->baseline ? "baseline"
                                                 : fmt_num(b[5], 64, st->vs_topk.diff, 4, true),
                            best == rs->baseline ? "" : b[4]);
                }
                fprintf(f, " %s | %s |\n", b[2], b[3]);
            }
            free(done);
        }
}

static void write_csv(FILE *f, const sweep_data *d)
{
    const an_runset *rs = d->rs;
    fprintf(f, "value,series,group,n,loss_topk_mean,loss_topk_sd,loss_topk_ci_lo,"
               "loss_topk_ci_hi,loss_causal_mean,loss_causal_sd,loss_causal_ci_lo,"
               "loss_causal_ci_hi,diff_topk,p_topk\n");
    for (int j = 0; j < rs->g.n_groups; j++) {
        const an_group_stats *st = &rs->stats[j];
        const sample_summary *s2[2] = { &st->topk, &st->causal };
        if (d->series_of[j] >= 0) {
            fprintf(f, "%.17g,", d->x[j]);
            csv_field(f, d->series[d->series_of[j]]);
        } else {
            fputc(',', f);
        }
        fputc(',', f);
        csv_field(f, rs->g.groups[j].name);
        fprintf(f, ",%d", st->used);
        for (int k = 0; k < 2; k++) {
            csv_num(f, s2[k]->mean);
            csv_num(f, s2[k]->sd);
            csv_num(f, s2[k]->ci_lo);
            csv_num(f, s2[k]->ci_hi);
        }
        csv_num(f, st->vs_topk.diff);
        csv_num(f, st->vs_topk.p);
        fputc('\n', f);
    }
}

/* ---- the figure --------------------------------------------------------------- */

static void draw_sweep(cairo_t *cr, void *user)
{
    const sweep_data *d = user;
    const an_runset *rs = d->rs;
    int G = rs->g.n_groups;
    plot_color(cr, rgb_hex(COLOR_TEXT), 1.0);
    plot_font(cr, 15, true, false);
    plot_text(cr, 20, 14, 0.0, 0.0, d->title);
    plot_font(cr, 12, false, false);
    plot_color(cr, rgb_hex(COLOR_AXIS), 1.0);
    plot_text(cr, 20, 36, 0.0, 0.0, "final held-out loss (top-k): mean of the replicates and "
              "its 95% interval; bands: groups the key does not apply to");
    double y0 = HUGE_VAL, y1 = -HUGE_VAL, x0 = HUGE_VAL, x1 = -HUGE_VAL;
    for (int j = 0; j < G; j++) {
        const sample_summary *s = &rs->stats[j].topk;
        const double v[3] = { s->mean, s->ci_lo, s->ci_hi };
        for (int k = 0; k < 3; k++)
            if (isfinite(v[k])) {
                y0 = fmin(y0, v[k]);
                y1 = fmax(y1, v[k]);
            }
        if (d->series_of[j] >= 0) {
            x0 = fmin(x0, d->x[j]);
            x1 = fmax(x1, d->x[j]);
        }
    }
    if (!isfinite(y0)) {
        y0 = 0.0;
        y1 = 1.0;
    }
    double ypad = y1 > y0 ? 0.08 * (y1 - y0) : 0.05;
    double xpad = d->logx ? pow(x1 / x0, 0.06) : 0.06 * (x1 - x0);
    plot_axes ax = { .x = 84, .y = SW_TOP + 30, .w = d->width - 120, .h = SW_PANEL_H - 90,
                     .x0 = d->logx ? x0 / xpad : x0 - xpad, .x1 = d->logx ? x1 * xpad : x1 + xpad,
                     .y0 = y0 - ypad, .y1 = y1 + ypad, .logx = d->logx };
    plot_axes_draw(cr, &ax, NULL, d->key, "held-out loss (nats/token)");
    for (int j = 0, b = 0; j < G; j++)
        if (d->series_of[j] < 0) {
            const sample_summary *s = &rs->stats[j].topk;
            plot_hband(cr, &ax, s->ci_lo, s->mean, s->ci_hi, palette_color(d->n_series + b++),
                       j != rs->baseline);
        }
    double *px = malloc((size_t)G * sizeof(double)), *py = malloc((size_t)G * sizeof(double));
    for (int s = 0; px && py && s < d->n_series; s++) {
        int n = 0;
        for (int j = 0; j < G; j++) { /* insertion in ascending x */
            if (d->series_of[j] != s)
                continue;
            int i = n++;
            for (; i > 0 && px[i - 1] > d->x[j]; i--) {
                px[i] = px[i - 1];
                py[i] = py[i - 1];
            }
            px[i] = d->x[j];
            py[i] = rs->stats[j].topk.mean;
        }
        plot_polyline(cr, &ax, px, py, n, palette_color(s), 1.6, false, false);
        double dx = d->n_series > 1 ? (s - (d->n_series - 1) / 2.0) * 7.0 : 0.0;
        for (int j = 0; j < G; j++) {
            if (d->series_of[j] != s)
                continue;
            const sample_summary *st = &rs->stats[j].topk;
            plot_error_bar(cr, &ax, d->x[j], dx, st->ci_lo, st->ci_hi, palette_color(s), 8.0);
            if (isfinite(st->mean))
                plot_dot_at(cr, axes_px(&ax, d->x[j]) + dx, axes_py(&ax, st->mean), 4.0,
                            palette_color(s));
        }
    }
    free(px);
    free(py);
    plot_legend(cr, 84, SW_TOP + SW_PANEL_H, SW_LEGEND_COL, d->legend_cols, d->items, d->n_items);
}

int cmd_sweep(const an_args *a)
{
    an_runset rs;
    sweep_data d = { .rs = &rs, .key = a->key };
    char stem[128], name[160], path[RUN_PATH_LEN + 200];
    an_text t = { 0 };
    if (an_read_runs(a, &rs))
        return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT, G = rs.g.n_groups;
    if (build_series(a, &d))
        goto done;
    d.items = calloc((size_t)G + 1, sizeof(legend_item));
    if (!d.items) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    for (int s = 0; s < d.n_series; s++) {
        legend_item *it = &d.items[d.n_items++];
        snprintf(it->label, sizeof(it->label), "%.79s", d.series[s][0] ? d.series[s] : d.key);
        it->color = palette_color(s);
        it->mark = MARK_LINE;
    }
    for (int j = 0, b = 0; j < G; j++)
        if (d.series_of[j] < 0) {
            legend_item *it = &d.items[d.n_items++];
            snprintf(it->label, sizeof(it->label), "%.50s (n=%d)%s", rs.g.groups[j].name,
                     rs.stats[j].used, j == rs.baseline ? ", baseline" : "");
            it->color = palette_color(d.n_series + b++);
            it->mark = j == rs.baseline ? MARK_LINE : MARK_DASH;
        }
    snprintf(d.title, sizeof(d.title), "Held-out loss against %s", d.key);
    d.width = SW_W;
    d.legend_cols = (d.width - 100) / SW_LEGEND_COL;
    d.height = SW_TOP + SW_PANEL_H + legend_rows(d.n_items, d.legend_cols) * LEGEND_ROW_H + 12;
    file_stem(d.key, stem, (int)sizeof(stem));
    write_md(stdout, &d);
    snprintf(name, sizeof(name), "%s.md", stem);
    if (an_out_path(a, NULL, name, path, (int)sizeof(path)) || an_text_begin(a, &t, path))
        goto done;
    write_md(t.f, &d);
    snprintf(name, sizeof(name), "%s.csv", stem);
    if (an_text_commit(a, &t) || an_out_path(a, NULL, name, path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        goto done;
    write_csv(t.f, &d);
    snprintf(name, sizeof(name), "%s.png", stem);
    if (an_text_commit(a, &t) || an_out_path(a, NULL, name, path, (int)sizeof(path)))
        goto done;
    rc = an_save_figure(a, path, d.width, d.height, draw_sweep, &d);
done:
    an_text_abort(&t);
    free(d.series);
    free(d.series_of);
    free(d.x);
    free(d.items);
    an_free_runs(&rs);
    return rc;
}
