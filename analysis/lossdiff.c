/* mode-analyze lossdiff: where one checkpoint wins or loses against another
 * on the same held-out windows (two `mode-exp eval --record` files): the
 * per-token loss difference B - A by class of the predicted token and by
 * position bucket, each with its standard error over windows (the ratio
 * estimator of docs/instruments.md) and a paired t-test.  Given several
 * pairs (replicates: A1 B1 A2 B2 ...), each pair's table and the
 * differences pooled over the pairs: mean, sd, the 95% interval and a
 * one-sample t-test over the pairs, the mean within-pair standard error. */
#include "analysis/analyze.h"
#include "analysis/runset.h"
#include "analysis/stats.h"
#include "core/util/finite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LD_BUCKETS = 8, LD_MAX_CLASSES = 32, LD_MAX_PAIRS = 16 };

typedef struct ld_side {
    run_reader *rd;
    long n;
    long *win;
    float *loss;    /* [n][S] */
    uint8_t *lab;   /* [n][S+1] or NULL */
    int S;
} ld_side;

typedef struct ld_cell {
    double tokens, mean_a, mean_b, diff, se, p;
    double lo, hi; /* the drawn 95% interval: diff -+ 1.96 se, or over the pairs */
    int n, alone;  /* pooled: the pairs, those whose own paired test gives p < 0.05 */
} ld_cell;

typedef struct ld_report {
    const char *a, *b;
    ld_cell all, cls[LD_MAX_CLASSES], pos[LD_BUCKETS];
    int n_classes, bucket_len, S;
    long windows;
    const char *const *class_names;
    int pairs; /* 0: one pair's report; > 0: pooled over this many */
} ld_report;

static void free_side(ld_side *s)
{
    close_run_reader(&s->rd);
    free(s->win);
    free(s->loss);
    free(s->lab);
}

static int read_side(const an_args *a, const char *path, ld_side *s)
{
    memset(s, 0, sizeof(*s));
    char err[RUN_PATH_LEN + 256];
    if (open_run_reader(&s->rd, path, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    int nd;
    unsigned long long dims[4];
    void *w = NULL, *l = NULL, *lb = NULL;
    if (run_reader_array(s->rd, "routing/windows", H5T_NATIVE_LONG, sizeof(long), &w, &nd, dims,
                         NULL) ||
        run_reader_array(s->rd, "routing/loss", H5T_NATIVE_FLOAT, sizeof(float), &l, &nd, dims,
                         NULL)) {
        free(w);
        return an_fail(a, EXIT_BAD_INPUT, "%s: no per-token losses (routing/loss): give files "
                       "that mode-exp eval --record wrote", path);
    }
    s->win = w;
    s->loss = l;
    s->n = (long)dims[0];
    s->S = (int)dims[1];
    long bad = first_nonfinite(s->loss, (size_t)s->n * (size_t)s->S);
    if (bad >= 0) {
        an_fail(a, EXIT_BAD_INPUT, "%s: routing/loss: token %ld of window %ld is %g, not a "
                "finite number", path, bad % s->S, bad / s->S, (double)s->loss[bad]);
        free_side(s);
        return EXIT_BAD_INPUT;
    }
    if (!run_reader_array(s->rd, "routing/labels", H5T_NATIVE_UINT8, 1, &lb, &nd, dims, NULL))
        s->lab = lb;
    return 0;
}

/* sums[w] of a and b and counts over windows: the cell's means, its
 * difference, its ratio-estimator standard error and paired p. */
static void finish(ld_cell *c, const double *sa, const double *sb, const double *cnt, long n)
{
    double ta = 0, tb = 0, tn = 0, m = 0;
    for (long w = 0; w < n; w++) {
        ta += sa[w];
        tb += sb[w];
        tn += cnt[w];
        m += cnt[w] > 0;
    }
    c->tokens = tn;
    c->mean_a = tn > 0 ? ta / tn : (double)NAN;
    c->mean_b = tn > 0 ? tb / tn : (double)NAN;
    c->diff = c->mean_b - c->mean_a;
    double q = 0;
    for (long w = 0; w < n && tn > 0; w++) {
        double dw = sb[w] - sa[w] - c->diff * cnt[w];
        q += dw * dw;
    }
    c->se = m > 1 ? sqrt(m / (m - 1) * q) / tn : (double)NAN;
    c->p = c->se > 0 ? student_t_p_two_sided(c->diff / c->se, m - 1) : (double)NAN;
    c->lo = c->diff - STATS_Z95 * c->se;
    c->hi = c->diff + STATS_Z95 * c->se;
}

/* Cell c of k pairs' reports pooled: the means of the two losses, the
 * differences' mean, sd (in se), interval and one-sample t-test over the
 * pairs, and the mean within-pair standard error (in tokens' place the
 * mean tokens of a pair). */
static void pool_cell(ld_cell *out, const ld_cell *const *c, int k, double *within)
{
    double d[LD_MAX_PAIRS], sa = 0, sb = 0, st = 0, sw = 0;
    int m = 0;
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < k; i++) {
        d[i] = c[i]->diff;
        sa += c[i]->mean_a;
        sb += c[i]->mean_b;
        st += c[i]->tokens;
        if (isfinite(c[i]->se)) {
            sw += c[i]->se;
            m++;
        }
        out->alone += c[i]->p < 0.05;
    }
    sample_summary s;
    summarize(d, k, &s);
    out->n = s.n;
    out->tokens = st / k;
    out->mean_a = sa / k;
    out->mean_b = sb / k;
    out->diff = s.mean;
    out->se = s.sd;
    out->lo = s.ci_lo;
    out->hi = s.ci_hi;
    out->p = s.n >= 2 && s.sd > 0.0
                 ? student_t_p_two_sided(s.mean / (s.sd / sqrt(s.n)), s.n - 1)
                 : (double)NAN;
    *within = m ? sw / m : (double)NAN;
}

static void draw(cairo_t *cr, void *user)
{
    const ld_report *r = user;
    char title[RUN_PATH_LEN];
    const char *labels[LD_MAX_CLASSES];
    char poslab[LD_BUCKETS][32];
    const char *plabels[LD_BUCKETS];
    for (int k = 0; k < r->n_classes; k++)
        labels[k] = r->class_names ? r->class_names[k] : "?";
    for (int b = 0; b < LD_BUCKETS; b++) {
        snprintf(poslab[b], sizeof(poslab[b]), "%d-%d", b * r->bucket_len,
                 (b + 1) * r->bucket_len - 1 < r->S - 1 ? (b + 1) * r->bucket_len - 1 : r->S - 1);
        plabels[b] = poslab[b];
    }
    for (int panel = 0; panel < 2; panel++) {
        const ld_cell *cells = panel ? r->pos : r->cls;
        int n = panel ? LD_BUCKETS : r->n_classes;
        if (!n)
            continue;
        double lo = 0, hi = 0;
        for (int k = 0; k < n; k++)
            if (isfinite(cells[k].lo) && isfinite(cells[k].hi)) {
                lo = fmin(lo, cells[k].lo);
                hi = fmax(hi, cells[k].hi);
            }
        double pad = 0.08 * (hi - lo > 0 ? hi - lo : 1e-3);
        plot_axes ax = { .x = 80, .y = 50 + panel * 320, .w = 660, .h = 220, .x0 = 0, .x1 = n,
                         .y0 = lo - pad, .y1 = hi + pad, .xcats = panel ? plabels : labels,
                         .n_xcats = n };
        if (r->pairs)
            snprintf(title, sizeof(title), "B - A, mean over %d pairs, 95%% interval over the pairs",
                     r->pairs);
        else
            snprintf(title, sizeof(title), "%s - %s, per token, 95%% interval", r->b, r->a);
        plot_axes_draw(cr, &ax, panel ? "by position" : title,
                       panel ? "positions" : "class of the predicted token",
                       "loss difference (nats)");
        plot_hband(cr, &ax, 0, 0, 0, rgb_hex(COLOR_AXIS), true);
        for (int k = 0; k < n; k++) {
            if (!isfinite(cells[k].diff))
                continue;
            if (isfinite(cells[k].lo) && isfinite(cells[k].hi))
                plot_error_bar(cr, &ax, k + 0.5, 0, cells[k].lo, cells[k].hi, palette_color(0), 5);
            plot_dot_at(cr, axes_px(&ax, k + 0.5), axes_py(&ax, cells[k].diff), 4,
                        palette_color(0));
        }
    }
}

static void md_row(FILE *f, const char *name, const ld_cell *c)
{
    char p[32];
    fmt_p(p, sizeof(p), c->p);
    fprintf(f, "| %s | %.0f | %.4f | %.4f | %+.4f | %.4f | %s |\n", name, c->tokens, c->mean_a,
            c->mean_b, c->diff, c->se, p);
}

static void write_md(FILE *f, const ld_report *r)
{
    fprintf(f, "# %s against %s on the same %ld held-out windows\n\n"
               "Per-token next-token loss, B = %s, A = %s; difference B - A with its standard "
               "error over windows (a ratio estimator: windows are the independent units) and "
               "the two-sided paired t-test.\n\n| tokens | n | loss A | loss B | B - A | se | "
               "p |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            r->b, r->a, r->windows, r->b, r->a);
    md_row(f, "all", &r->all);
    for (int k = 0; k < r->n_classes; k++)
        if (r->cls[k].tokens > 0)
            md_row(f, r->class_names ? r->class_names[k] : "?", &r->cls[k]);
    for (int b = 0; b < LD_BUCKETS; b++) {
        char name[48];
        snprintf(name, sizeof(name), "positions %d-%d", b * r->bucket_len,
                 (b + 1) * r->bucket_len - 1);
        if (r->pos[b].tokens > 0)
            md_row(f, name, &r->pos[b]);
    }
}

static void csv_row(FILE *f, const char *what, const char *name, const ld_cell *c, int pair)
{
    fprintf(f, "%s,%s,%.0f,%.9g,%.9g,%.9g,%.6g,%.6g,%d\n", what, name, c->tokens, c->mean_a,
            c->mean_b, c->diff, c->se, c->p, pair);
}

/* The name of cell g (0 all, then the classes, then the position buckets)
 * of a report, for tables; what: its kind. */
static void cell_name(const ld_report *r, int g, char *name, int len, const char **what)
{
    if (g == 0) {
        *what = "all";
        snprintf(name, (size_t)len, "all");
    } else if (g <= r->n_classes) {
        *what = "class";
        snprintf(name, (size_t)len, "%s", r->class_names ? r->class_names[g - 1] : "?");
    } else {
        int b = g - 1 - r->n_classes;
        *what = "position";
        snprintf(name, (size_t)len, "positions %d-%d", b * r->bucket_len,
                 (b + 1) * r->bucket_len - 1);
    }
}

static ld_cell *cell_at(ld_report *r, int g)
{
    return g == 0 ? &r->all : g <= r->n_classes ? &r->cls[g - 1] : &r->pos[g - 1 - r->n_classes];
}

/* k pairs' reports pooled into *out, its table in md and csv. */
static void write_pooled(FILE *md, FILE *csv, ld_report *rs, int k, ld_report *out)
{
    fprintf(md, "# B - A pooled over %d pairs of checkpoints\n\nEach pair's per-token loss "
                "difference B - A on its own held-out windows (the tables below); here their "
                "mean ± sd over the pairs, the 95%% interval of the mean (Student's t, %d degrees "
                "of freedom) and a one-sample t-test of it against 0 (p); loss A and loss B are "
                "means over the pairs, n the mean tokens of a pair; SE: the mean within-pair "
                "paired standard error (windows as units); alone: the pairs whose own paired "
                "test gives p < 0.05.\n\n| tokens | n | loss A | loss B | B - A | 95%% CI | p | "
                "SE | alone |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            k, k - 1);
    if (csv)
        fputs("what,name,pairs,tokens,loss_a,loss_b,diff_mean,diff_sd,diff_ci_lo,diff_ci_hi,p,"
              "se_within,alone\n", csv);
    int G = 1 + out->n_classes + LD_BUCKETS;
    for (int g = 0; g < G; g++) {
        const ld_cell *c[LD_MAX_PAIRS];
        for (int i = 0; i < k; i++)
            c[i] = cell_at(&rs[i], g);
        ld_cell *o = cell_at(out, g);
        double within;
        pool_cell(o, c, k, &within);
        if (!(o->tokens > 0))
            continue;
        char name[64], b[4][64];
        const char *what;
        cell_name(out, g, name, (int)sizeof(name), &what);
        sample_summary s = { .n = o->n, .mean = o->diff, .sd = o->se, .ci_lo = o->lo,
                             .ci_hi = o->hi };
        fmt_mean_sd(b[0], 64, &s, 4);
        fmt_interval(b[1], 64, &s, 4);
        fmt_p(b[2], 64, o->p);
        fprintf(md, "| %s | %.0f | %.4f | %.4f | %s | %s | %s | %s | %d/%d |\n", name, o->tokens,
                o->mean_a, o->mean_b, b[0], b[1], b[2], fmt_num(b[3], 64, within, 4, false),
                o->alone, o->n);
        if (csv) { /* a position bucket by its first position, as in lossdiff.csv */
            if (g > out->n_classes)
                snprintf(name, sizeof(name), "%d", (g - 1 - out->n_classes) * out->bucket_len);
            fprintf(csv, "%s,%s,%d,%.0f,%.9g,%.9g,%.9g,%.6g,%.6g,%.6g,%.6g,%.6g,%d\n", what, name,
                    o->n, o->tokens, o->mean_a, o->mean_b, o->diff, o->se, o->lo, o->hi, o->p,
                    within, o->alone);
        }
    }
    fputc('\n', md);
}

/* Pair (fa, fb) read and compared into *r (its names: the files'). */
static int one_pair(const an_args *a, const char *fa, const char *fb, ld_report *r)
{
    ld_side A, B;
    if (read_side(a, fa, &A))
        return EXIT_BAD_INPUT;
    if (read_side(a, fb, &B)) {
        free_side(&A);
        return EXIT_BAD_INPUT;
    }
    int rc = EXIT_BAD_INPUT;
    bool same = A.n == B.n && A.S == B.S;
    for (long w = 0; same && w < A.n; w++)
        same = A.win[w] == B.win[w];
    if (!same) {
        an_fail(a, rc, "%s and %s hold other windows (%ld and %ld windows of %d and %d tokens): "
                "record both on the same data with the same --windows", fa, fb, A.n, B.n, A.S,
                B.S);
        goto done;
    }
    char err[RUN_PATH_LEN + 256];
    *r = (ld_report){ .a = fa, .b = fb, .S = A.S, .windows = A.n,
                      .bucket_len = (A.S + LD_BUCKETS - 1) / LD_BUCKETS };
    run_info *ri = NULL, *rb = NULL;
    bool read_a = !build_run_info(&ri, fa, err, (int)sizeof(err));
    if (read_a && A.lab) {
        r->n_classes = ri->n_classes < LD_MAX_CLASSES ? ri->n_classes : LD_MAX_CLASSES;
        r->class_names = ri->class_names; /* static tables: they outlive ri */
    }
    /* the same windows of other data (another corpus, vocabulary or
     * tokenizer) are other tokens: their losses do not pair */
    char diff[2 * CFG_PATH_LEN + 64];
    bool differs = read_a && !build_run_info(&rb, fb, err, (int)sizeof(err)) &&
                   run_data_differs(&ri->cfg, ri->data, &rb->cfg, rb->data, diff,
                                    (int)sizeof(diff));
    free_run_info(&ri);
    free_run_info(&rb);
    if (differs) {
        an_fail(a, rc, "%s and %s are not comparable: %s; their losses are over other data or "
                "another vocabulary (nats per token of different tokens)", fa, fb, diff);
        goto done;
    }
    long n = A.n;
    int S = A.S, G = 1 + r->n_classes + LD_BUCKETS;
    double *sa = calloc((size_t)n * G, sizeof(double)), *sb = calloc((size_t)n * G, sizeof(double));
    double *cnt = calloc((size_t)n * G, sizeof(double));
    if (!sa || !sb || !cnt) {
        an_fail(a, rc, "out of memory");
        free(sa);
        free(sb);
        free(cnt);
        goto done;
    }
    /* cell g of window w at [g * n + w]: all, the classes, the buckets */
    for (long w = 0; w < n; w++)
        for (int j = 0; j < S; j++) {
            double la = (double)A.loss[w * S + j], lb = (double)B.loss[w * S + j];
            int cells[3] = { 0, -1, 1 + r->n_classes + j / r->bucket_len };
            if (A.lab && r->n_classes) {
                int c = A.lab[w * (S + 1) + j + 1];
                cells[1] = c < r->n_classes ? 1 + c : -1;
            }
            for (int q = 0; q < 3; q++) {
                if (cells[q] < 0)
                    continue;
                sa[(size_t)cells[q] * n + w] += la;
                sb[(size_t)cells[q] * n + w] += lb;
                cnt[(size_t)cells[q] * n + w] += 1;
            }
        }
    for (int g = 0; g < G; g++)
        finish(cell_at(r, g), sa + (size_t)g * n, sb + (size_t)g * n, cnt + (size_t)g * n, n);
    free(sa);
    free(sb);
    free(cnt);
    rc = 0;
done:
    free_side(&A);
    free_side(&B);
    return rc;
}

int cmd_lossdiff(const an_args *a)
{
    if (a->n_files % 2)
        return an_fail(a, EXIT_USAGE, "give pairs of eval --record files (A B, or A1 B1 A2 B2 "
                       "...): %d files", a->n_files);
    int k = a->n_files / 2;
    ld_report *rs = calloc((size_t)k, sizeof(*rs)), pooled = { 0 };
    if (!rs)
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    int rc = EXIT_BAD_INPUT;
    for (int i = 0; i < k; i++) {
        if (one_pair(a, a->files[2 * i], a->files[2 * i + 1], &rs[i]))
            goto done;
        if (rs[i].S != rs[0].S || rs[i].n_classes != rs[0].n_classes) {
            an_fail(a, rc, "%s: windows of %d tokens and %d token classes, but %s: %d and %d: "
                    "pairs must be of one kind of model and data", rs[i].a, rs[i].S,
                    rs[i].n_classes, rs[0].a, rs[0].S, rs[0].n_classes);
            goto done;
        }
    }
    char path[RUN_PATH_LEN + 64];
    an_text t = { 0 }, tc = { 0 };
    if (k > 1) {
        pooled = rs[0];
        pooled.pairs = k;
        write_pooled(stdout, NULL, rs, k, &pooled);
    }
    for (int i = 0; i < k; i++)
        write_md(stdout, &rs[i]);
    if (an_out_path(a, NULL, "lossdiff.md", path, (int)sizeof(path)) || an_text_begin(a, &t, path))
        goto done;
    if (k > 1) {
        if (an_out_path(a, NULL, "lossdiff_pooled.csv", path, (int)sizeof(path)) ||
            an_text_begin(a, &tc, path)) {
            an_text_abort(&t);
            goto done;
        }
        write_pooled(t.f, tc.f, rs, k, &pooled);
        if (an_text_commit(a, &tc)) {
            an_text_abort(&t);
            goto done;
        }
    }
    for (int i = 0; i < k; i++) {
        write_md(t.f, &rs[i]);
        if (i + 1 < k)
            fputc('\n', t.f);
    }
    if (an_text_commit(a, &t) || an_out_path(a, NULL, "lossdiff.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        goto done;
    fprintf(t.f, "what,name,tokens,loss_a,loss_b,diff,se,p,pair\n");
    for (int i = 0; i < k; i++) {
        ld_report *r = &rs[i];
        csv_row(t.f, "all", "all", &r->all, i + 1);
        for (int c = 0; c < r->n_classes; c++)
            csv_row(t.f, "class", r->class_names[c], &r->cls[c], i + 1);
        for (int b = 0; b < LD_BUCKETS; b++) {
            char name[32];
            snprintf(name, sizeof(name), "%d", b * r->bucket_len);
            csv_row(t.f, "position", name, &r->pos[b], i + 1);
        }
    }
    if (an_text_commit(a, &t) || an_out_path(a, NULL, "lossdiff.png", path, (int)sizeof(path)))
        goto done;
    rc = an_save_figure(a, path, 780, 640, draw, k > 1 ? &pooled : &rs[0]);
done:
    free(rs);
    return rc;
}
