/* mode-analyze counterfactual and dial: the figures of mode-exp eval's
 * tables (eval --routing ... --csv, eval --dial ... --csv).
 *   counterfactual: each policy's paired difference to the learned
 *     decisions with its 95% interval (1.96 standard errors over windows),
 *     overall and per token class, one panel per CSV;
 *     and pooled over the replicates of one model (checkpoints whose folders
 *     differ only in a trailing -s<seed>): each difference's mean over the
 *     seeds, its sd, 95% interval and one-sample t-test, beside the mean
 *     within-run standard error (counterfactual.md, counterfactual.csv);
 *   dial: held-out loss against executed forward FLOPs per token, one
 *     curve per checkpoint, 95% intervals from the standard errors. */
#include "analysis/analyze.h"
#include "analysis/runset.h"
#include "analysis/stats.h"
#include "core/util/file.h"
#include "core/util/num.h"
#include "core/util/student.h"
#include "core/util/text.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CF_MAX_ROWS = 4096, CF_FIELDS = 16, CF_FIELD = 256 };

typedef struct csv_rows {
    char head[CF_FIELDS][CF_FIELD];
    int n_head;
    char (*cell)[CF_FIELDS][CF_FIELD];
    int n;
} csv_rows;

/* Split a line at commas (no quoting: mode-exp writes none in these). */
static int split(char *line, char out[CF_FIELDS][CF_FIELD])
{
    int n = 0;
    char *s = line;
    for (;;) {
        char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strcspn(s, "\r\n");
        if (n < CF_FIELDS) {
            snprintf(out[n], CF_FIELD, "%.*s", (int)(len < CF_FIELD - 1 ? len : CF_FIELD - 1), s);
            n++;
        }
        if (!e)
            return n;
        s = e + 1;
    }
}

/* The columns the figures read as numbers. */
static const char *const numeric_cols[] = { "tokens", "windows", "loss", "se", "diff",
                                            "diff_se", "p", "flops_per_token", NULL };

/* Whether a cell of a numeric column of row i is not a finite number (an
 * empty cell, as eval writes a value it has not, is allowed), said in why. */
static bool bad_number(const csv_rows *r, int i, char *why, size_t n)
{
    for (int c = 0; c < r->n_head; c++)
        for (int k = 0; numeric_cols[k]; k++) {
            const char *v = r->cell[i][c];
            double x;
            if (strcmp(r->head[c], numeric_cols[k]) || !v[0] ||
                num_parse_double(v, -HUGE_VAL, HUGE_VAL, &x))
                continue;
            snprintf(why, n, "%s = '%.*s': expected a finite number (or nothing)", r->head[c],
                     CF_FIELD - 1, v);
            return true;
        }
    return false;
}

static int read_csv(const an_args *a, const char *path, const char *first_col, csv_rows *r)
{
    memset(r, 0, sizeof(*r));
    char why[600];
    FILE *f = file_fopen_regular(path, "r", why, sizeof(why));
    if (!f)
        return an_fail(a, EXIT_BAD_INPUT, "%s", why);
    /* parsed text: a line that is not UTF-8 or holds a NUL is refused */
    text_lines lines = { .f = f };
    char line[8192];
    size_t len;
    int got = text_next_line(&lines, line, sizeof(line), &len, why, sizeof(why));
    if (got < 0) {
        fclose(f);
        return an_fail(a, EXIT_BAD_INPUT, "%s:%d: %s", path, lines.line, why);
    }
    if (!got || (r->n_head = split(line, r->head)) < 2 ||
        strcmp(r->head[0], "checkpoint") || strcmp(r->head[2], first_col)) {
        fclose(f);
        return an_fail(a, EXIT_BAD_INPUT, "%s: not a table of mode-exp eval %s --csv (expected "
                       "the header checkpoint,mode,%s,...)", path,
                       strcmp(first_col, "policy") ? "--dial" : "--routing", first_col);
    }
    r->cell = malloc(CF_MAX_ROWS * sizeof(*r->cell));
    /* every row as wide as the header, every numeric cell empty or finite */
    int nf = 0;
    char bad[CF_FIELD + 96] = "";
    while (r->cell && !bad[0] &&
           (got = text_next_line(&lines, line, sizeof(line), &len, why, sizeof(why))) > 0) {
        if (!line[strspn(line, " \t\r\n")])
            continue; /* a blank line */
        if (r->n == CF_MAX_ROWS)
            snprintf(bad, sizeof(bad), "more than the %d rows a figure takes", CF_MAX_ROWS);
        else if ((nf = split(line, r->cell[r->n])) != r->n_head)
            snprintf(bad, sizeof(bad), "%d fields, where the header has %d", nf, r->n_head);
        else
            bad_number(r, r->n++, bad, sizeof(bad));
    }
    fclose(f);
    if (got < 0 || bad[0]) {
        free(r->cell);
        r->cell = NULL;
        return an_fail(a, EXIT_BAD_INPUT, "%s:%d: %s", path, lines.line, got < 0 ? why : bad);
    }
    if (!r->cell)
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    if (!r->n)
        return an_fail(a, EXIT_BAD_INPUT, "%s: no rows", path);
    return 0;
}

static int col_of(const csv_rows *r, const char *name)
{
    for (int i = 0; i < r->n_head; i++)
        if (!strcmp(r->head[i], name))
            return i;
    return -1;
}

static double num(const csv_rows *r, int row, const char *name)
{
    int c = col_of(r, name);
    if (c < 0 || !r->cell[row][c][0])
        return (double)NAN;
    return strtod(r->cell[row][c], NULL); /* checked by read_csv */
}

/* ---- counterfactual ------------------------------------------------------------ */

enum { CF_PANEL_W = 760, CF_PANEL_H = 330 };

typedef struct cf_fig {
    csv_rows *t;
    int n;
    const char *const *names;
} cf_fig;

static void draw_cf(cairo_t *cr, void *user)
{
    const cf_fig *fg = user;
    for (int p = 0; p < fg->n; p++) {
        const csv_rows *t = &fg->t[p];
        /* categories: the classes (all first); series: the policies */
        char cats[32][CF_FIELD], pols[8][CF_FIELD];
        int nc = 0, np = 0;
        double lo = 0.0, hi = 0.0;
        int cc = col_of(t, "class"), pc = col_of(t, "policy");
        for (int i = 0; i < t->n; i++) {
            if (!strcmp(t->cell[i][pc], "learned"))
                continue;
            bool seen = false;
            for (int k = 0; k < nc; k++)
                seen |= !strcmp(cats[k], t->cell[i][cc]);
            if (!seen && nc < 32)
                snprintf(cats[nc++], CF_FIELD, "%s", t->cell[i][cc]);
            seen = false;
            for (int k = 0; k < np; k++)
                seen |= !strcmp(pols[k], t->cell[i][pc]);
            if (!seen && np < 8)
                snprintf(pols[np++], CF_FIELD, "%s", t->cell[i][pc]);
            double d = num(t, i, "diff"), se = num(t, i, "diff_se");
            if (isfinite(d) && isfinite(se)) {
                lo = fmin(lo, d - 1.96 * se);
                hi = fmax(hi, d + 1.96 * se);
            }
        }
        const char *labels[32];
        for (int k = 0; k < nc; k++)
            labels[k] = cats[k];
        double pad = 0.08 * (hi - lo > 0 ? hi - lo : 1e-3);
        plot_axes ax = { .x = 80, .y = CF_PANEL_H * p + 50, .w = CF_PANEL_W - 110,
                         .h = CF_PANEL_H - 110, .x0 = 0, .x1 = nc, .y0 = lo - pad,
                         .y1 = hi + pad, .xcats = labels, .n_xcats = nc };
        char title[CF_FIELD + 96];
        snprintf(title, sizeof(title), "%s (%s): loss under each policy - learned, 95%% interval",
                 fg->names[p], t->cell[0][col_of(t, "mode")]);
        plot_axes_draw(cr, &ax, title, "token class of the predicted token (all: every token)",
                       "paired loss difference (nats)");
        plot_hband(cr, &ax, 0.0, 0.0, 0.0, rgb_hex(COLOR_AXIS), true);
        for (int i = 0; i < t->n; i++) {
            int k = -1, s = -1;
            for (int q = 0; q < nc; q++)
                if (!strcmp(cats[q], t->cell[i][cc]))
                    k = q;
            for (int q = 0; q < np; q++)
                if (!strcmp(pols[q], t->cell[i][pc]))
                    s = q;
            if (k < 0 || s < 0)
                continue;
            double d = num(t, i, "diff"), se = num(t, i, "diff_se");
            double x = k + (s + 1.0) / (np + 1.0);
            if (!isfinite(d))
                continue;
            if (isfinite(se))
                plot_error_bar(cr, &ax, x, 0, d - 1.96 * se, d + 1.96 * se, palette_color(s), 4);
            plot_dot_at(cr, axes_px(&ax, x), axes_py(&ax, d), 3.5, palette_color(s));
        }
        legend_item items[8];
        for (int s = 0; s < np; s++) {
            snprintf(items[s].label, sizeof(items[s].label), "%.60s", pols[s]);
            items[s].color = palette_color(s);
            items[s].mark = MARK_DOT;
        }
        plot_legend(cr, ax.x, ax.y + ax.h + 46, 130, 5, items, np);
    }
}

/* ---- counterfactual, pooled over seeds --------------------------------------------- */

enum { CF_KEYS = 512, CF_SEEDS = 64 };

typedef struct cf_key {
    char group[CF_FIELD], mode[32], policy[CF_FIELD], cls[64];
    double diff[CF_SEEDS], se[CF_SEEDS], loss[CF_SEEDS];
    int n, alone; /* the seeds, those whose own paired test gives p < 0.05 */
} cf_key;

/* The model a checkpoint is a replicate of: its folder's name without a
 * trailing -s<digits> (mode-exp sweep's seeds), else the file's path. */
static void cf_group(const char *ckpt, char *out, int len)
{
    const char *slash = strrchr(ckpt, '/');
    if (!slash || slash == ckpt) {
        snprintf(out, (size_t)len, "%s", ckpt);
        return;
    }
    const char *start = slash - 1;
    while (start > ckpt && start[-1] != '/')
        start--;
    int n = (int)(slash - start);
    int e = n;
    while (e > 0 && start[e - 1] >= '0' && start[e - 1] <= '9')
        e--;
    if (e < n && e >= 2 && start[e - 1] == 's' && start[e - 2] == '-')
        n = e - 2;
    snprintf(out, (size_t)len, "%.*s", n, start);
}

static int cf_pool(const csv_rows *t, int n_tables, cf_key *keys)
{
    int nk = 0;
    for (int f = 0; f < n_tables; f++) {
        int pc = col_of(&t[f], "policy"), cc = col_of(&t[f], "class"),
            mc = col_of(&t[f], "mode");
        for (int i = 0; i < t[f].n; i++) {
            if (!strcmp(t[f].cell[i][pc], "learned"))
                continue;
            char g[CF_FIELD];
            cf_group(t[f].cell[i][0], g, (int)sizeof(g));
            int k = 0;
            while (k < nk && (strcmp(keys[k].group, g) || strcmp(keys[k].mode, t[f].cell[i][mc]) ||
                              strcmp(keys[k].policy, t[f].cell[i][pc]) ||
                              strcmp(keys[k].cls, t[f].cell[i][cc])))
                k++;
            if (k == nk) {
                if (nk == CF_KEYS)
                    continue;
                memset(&keys[nk], 0, sizeof(keys[nk]));
                snprintf(keys[nk].group, CF_FIELD, "%s", g);
                snprintf(keys[nk].mode, 32, "%s", t[f].cell[i][mc]);
                snprintf(keys[nk].policy, CF_FIELD, "%s", t[f].cell[i][pc]);
                snprintf(keys[nk].cls, 64, "%s", t[f].cell[i][cc]);
                nk++;
            }
            cf_key *q = &keys[k];
            if (q->n == CF_SEEDS)
                continue;
            q->diff[q->n] = num(&t[f], i, "diff");
            q->se[q->n] = num(&t[f], i, "diff_se");
            q->loss[q->n] = num(&t[f], i, "loss");
            q->alone += num(&t[f], i, "p") < 0.05;
            q->n++;
        }
    }
    return nk;
}

/* mean -+ sd over the seeds, the 95% interval, the one-sample t-test's p */
static void cf_row(const cf_key *q, sample_summary *s, double *p, double *se)
{
    summarize(q->diff, q->n, s);
    *p = (double)NAN;
    if (s->n >= 2 && s->sd > 0.0) {
        *p = student_t_p_two_sided(s->mean / (s->sd / sqrt(s->n)), s->n - 1);
    }
    double sum = 0.0;
    int m = 0;
    for (int i = 0; i < q->n; i++)
        if (isfinite(q->se[i])) {
            sum += q->se[i];
            m++;
        }
    *se = m ? sum / m : (double)NAN;
}

static int cf_write_pooled(const an_args *a, const cf_key *keys, int nk)
{
    char path[RUN_PATH_LEN + 64];
    an_text t = { 0 };
    if (an_out_path(a, NULL, "counterfactual.md", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        return EXIT_BAD_INPUT;
    fprintf(t.f, "Counterfactual routing pooled over the replicates of each model (checkpoints "
                 "whose folders differ only in -s<seed>). Δ: the loss under the policy minus "
                 "the loss with the learned decisions on the same windows (paired), mean ± sd "
                 "over the n checkpoints, the 95%% interval of the mean (Student's t, n - 1 "
                 "degrees of freedom) and a one-sample t-test of it against 0 (p); SE: the mean "
                 "within-checkpoint paired standard error (its windows as units); alone: the "
                 "checkpoints whose own paired test gives p < 0.05. Class: of the predicted "
                 "token.\n\n| model | mode | policy | class | n | loss | Δ | 95%% CI | p | SE | "
                 "alone |\n| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
                 "---: |\n");
    for (int k = 0; k < nk; k++) {
        sample_summary s, l;
        double p, se;
        cf_row(&keys[k], &s, &p, &se);
        summarize(keys[k].loss, keys[k].n, &l);
        char b[5][64];
        fmt_mean_sd(b[0], 64, &s, 4);
        fmt_interval(b[1], 64, &s, 4);
        fmt_p(b[2], 64, p);
        fprintf(t.f, "| %s | %s | %s | %s | %d | %.4f | %s | %s | %s | %s | %d/%d |\n",
                keys[k].group, keys[k].mode, keys[k].policy, keys[k].cls, keys[k].n, l.mean,
                b[0], b[1], b[2], fmt_num(b[3], 64, se, 4, false), keys[k].alone, keys[k].n);
    }
    if (an_text_commit(a, &t) ||
        an_out_path(a, NULL, "counterfactual.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path)) {
        an_text_abort(&t);
        return EXIT_BAD_INPUT;
    }
    fputs("model,mode,policy,class,n,loss_mean,diff_mean,diff_sd,diff_ci_lo,diff_ci_hi,p,"
          "se_within,alone\n", t.f);
    for (int k = 0; k < nk; k++) {
        sample_summary s, l;
        double p, se;
        cf_row(&keys[k], &s, &p, &se);
        summarize(keys[k].loss, keys[k].n, &l);
        fprintf(t.f, "%s,%s,%s,%s,%d", keys[k].group, keys[k].mode, keys[k].policy,
                keys[k].cls, keys[k].n);
        csv_num(t.f, l.mean);
        csv_num(t.f, s.mean);
        csv_num(t.f, s.sd);
        csv_num(t.f, s.ci_lo);
        csv_num(t.f, s.ci_hi);
        csv_num(t.f, p);
        csv_num(t.f, se);
        fprintf(t.f, ",%d\n", keys[k].alone);
    }
    int rc = an_text_commit(a, &t) ? EXIT_BAD_INPUT : 0;
    an_text_abort(&t);
    return rc;
}

int cmd_counterfactual(const an_args *a)
{
    cf_fig fg = { .n = a->n_files, .names = a->files };
    fg.t = calloc((size_t)a->n_files, sizeof(csv_rows));
    int rc = fg.t ? 0 : an_fail(a, EXIT_BAD_INPUT, "out of memory");
    for (int i = 0; !rc && i < a->n_files; i++)
        rc = read_csv(a, a->files[i], "policy", &fg.t[i]);
    char path[RUN_PATH_LEN + 64];
    if (!rc && !(rc = an_out_path(a, NULL, "counterfactual.png", path, (int)sizeof(path))))
        rc = an_save_figure(a, path, CF_PANEL_W, CF_PANEL_H * a->n_files + 20, draw_cf, &fg);
    cf_key *keys = rc ? NULL : malloc(CF_KEYS * sizeof(cf_key));
    if (!rc && !keys)
        rc = an_fail(a, EXIT_BAD_INPUT, "out of memory");
    if (!rc)
        rc = cf_write_pooled(a, keys, cf_pool(fg.t, fg.n, keys));
    free(keys);
    for (int i = 0; fg.t && i < a->n_files; i++)
        free(fg.t[i].cell);
    free(fg.t);
    return rc;
}

/* ---- dial ------------------------------------------------------------------------ */

typedef struct dial_fig {
    csv_rows *t;
    int n;
} dial_fig;

static void draw_dial(cairo_t *cr, void *user)
{
    const dial_fig *fg = user;
    double x0 = HUGE_VAL, x1 = -HUGE_VAL, y0 = HUGE_VAL, y1 = -HUGE_VAL;
    for (int p = 0; p < fg->n; p++)
        for (int i = 0; i < fg->t[p].n; i++) {
            double x = num(&fg->t[p], i, "flops_per_token"), y = num(&fg->t[p], i, "loss");
            double se = num(&fg->t[p], i, "se");
            se = isfinite(se) ? se : 0.0;
            x0 = fmin(x0, x);
            x1 = fmax(x1, x);
            y0 = fmin(y0, y - 1.96 * se);
            y1 = fmax(y1, y + 1.96 * se);
        }
    double px = 0.05 * (x1 - x0 > 0 ? x1 - x0 : x1), py = 0.08 * (y1 - y0 > 0 ? y1 - y0 : 0.01);
    plot_axes ax = { .x = 80, .y = 50, .w = 620, .h = 360, .x0 = x0 - px, .x1 = x1 + px,
                     .y0 = y0 - py, .y1 = y1 + py };
    plot_axes_draw(cr, &ax, "The compute dial: held-out loss against executed forward FLOPs",
                   "executed forward FLOPs per token", "held-out loss (nats)");
    legend_item items[10];
    int ni = 0;
    for (int p = 0; p < fg->n; p++) {
        const csv_rows *t = &fg->t[p];
        double *x = malloc((size_t)t->n * sizeof(double)), *y = malloc((size_t)t->n * sizeof(double));
        for (int i = 0; x && y && i < t->n; i++) {
            x[i] = num(t, i, "flops_per_token");
            y[i] = num(t, i, "loss");
            double se = num(t, i, "se");
            if (isfinite(se))
                plot_error_bar(cr, &ax, x[i], 0, y[i] - 1.96 * se, y[i] + 1.96 * se,
                               palette_color(p), 4);
            char lab[CF_FIELD + 8];
            snprintf(lab, sizeof(lab), "%s", t->cell[i][col_of(t, "value")]);
            plot_font(cr, 10, false, false);
            plot_color(cr, palette_color(p), 1.0);
            plot_text(cr, axes_px(&ax, x[i]) + 6, axes_py(&ax, y[i]) - 4, 0.0, 1.0, lab);
        }
        if (x && y)
            plot_polyline(cr, &ax, x, y, t->n, palette_color(p), 1.6, false, true);
        free(x);
        free(y);
        if (ni < 10) {
            snprintf(items[ni].label, sizeof(items[ni].label), "%.40s (%.30s)",
                     t->cell[0][0], t->cell[0][col_of(t, "key")]);
            items[ni].color = palette_color(p);
            items[ni++].mark = MARK_LINE;
        }
    }
    plot_legend(cr, 80, 470, 620, 1, items, ni);
}

int cmd_dial(const an_args *a)
{
    dial_fig fg = { .n = a->n_files };
    fg.t = calloc((size_t)a->n_files, sizeof(csv_rows));
    int rc = fg.t ? 0 : an_fail(a, EXIT_BAD_INPUT, "out of memory");
    for (int i = 0; !rc && i < a->n_files; i++)
        rc = read_csv(a, a->files[i], "key", &fg.t[i]);
    char path[RUN_PATH_LEN + 64];
    if (!rc && !(rc = an_out_path(a, NULL, "dial.png", path, (int)sizeof(path))))
        rc = an_save_figure(a, path, 740, 480 + LEGEND_ROW_H * (a->n_files > 10 ? 10 : a->n_files),
                            draw_dial, &fg);
    for (int i = 0; fg.t && i < a->n_files; i++)
        free(fg.t[i].cell);
    free(fg.t);
    return rc;
}
