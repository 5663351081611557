/* mode-analyze lossdiff: where one checkpoint wins or loses against another
 * on the same held-out windows (two `mode-exp eval --record` files): the
 * per-token loss difference B - A by class of the predicted token and by
 * position bucket, each with its standard error over windows (the ratio
 * estimator of docs/instruments.md) and a paired t-test. */
#include "analysis/analyze.h"
#include "analysis/runset.h"
#include "analysis/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LD_BUCKETS = 8, LD_MAX_CLASSES = 32 };

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
} ld_cell;

typedef struct ld_report {
    const char *a, *b;
    ld_cell all, cls[LD_MAX_CLASSES], pos[LD_BUCKETS];
    int n_classes, bucket_len, S;
    long windows;
    const char *const *class_names;
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
            if (isfinite(cells[k].diff) && isfinite(cells[k].se)) {
                lo = fmin(lo, cells[k].diff - 1.96 * cells[k].se);
                hi = fmax(hi, cells[k].diff + 1.96 * cells[k].se);
            }
        double pad = 0.08 * (hi - lo > 0 ? hi - lo : 1e-3);
        plot_axes ax = { .x = 80, .y = 50 + panel * 320, .w = 660, .h = 220, .x0 = 0, .x1 = n,
                         .y0 = lo - pad, .y1 = hi + pad, .xcats = panel ? plabels : labels,
                         .n_xcats = n };
        snprintf(title, sizeof(title), "%s - %s, per token, 95%% interval", r->b, r->a);
        plot_axes_draw(cr, &ax, panel ? "by position" : title,
                       panel ? "positions" : "class of the predicted token",
                       "loss difference (nats)");
        plot_hband(cr, &ax, 0, 0, 0, rgb_hex(COLOR_AXIS), true);
        for (int k = 0; k < n; k++) {
            if (!isfinite(cells[k].diff))
                continue;
            if (isfinite(cells[k].se))
                plot_error_bar(cr, &ax, k + 0.5, 0, cells[k].diff - 1.96 * cells[k].se,
                               cells[k].diff + 1.96 * cells[k].se, palette_color(0), 5);
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

static void csv_row(FILE *f, const char *what, const char *name, const ld_cell *c)
{
    fprintf(f, "%s,%s,%.0f,%.9g,%.9g,%.9g,%.6g,%.6g\n", what, name, c->tokens, c->mean_a,
            c->mean_b, c->diff, c->se, c->p);
}

int cmd_lossdiff(const an_args *a)
{
    ld_side A, B;
    if (read_side(a, a->files[0], &A))
        return EXIT_BAD_INPUT;
    if (read_side(a, a->files[1], &B)) {
        free_side(&A);
        return EXIT_BAD_INPUT;
    }
    int rc = EXIT_BAD_INPUT;
    bool same = A.n == B.n && A.S == B.S;
    for (long w = 0; same && w < A.n; w++)
        same = A.win[w] == B.win[w];
    if (!same) {
        an_fail(a, rc, "%s and %s hold other windows (%ld and %ld windows of %d and %d tokens): "
                "record both on the same data with the same --windows", a->files[0],
                a->files[1], A.n, B.n, A.S, B.S);
        goto done;
    }
    char err[RUN_PATH_LEN + 256];
    ld_report r = { .a = a->files[0], .b = a->files[1], .S = A.S, .windows = A.n,
                    .bucket_len = (A.S + LD_BUCKETS - 1) / LD_BUCKETS };
    run_info *ri = NULL;
    if (!build_run_info(&ri, a->files[0], err, (int)sizeof(err)) && A.lab) {
        r.n_classes = ri->n_classes < LD_MAX_CLASSES ? ri->n_classes : LD_MAX_CLASSES;
        r.class_names = ri->class_names; /* static tables: they outlive ri */
    }
    free_run_info(&ri);
    long n = A.n;
    int S = A.S, G = 1 + r.n_classes + LD_BUCKETS;
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
            int cells[3] = { 0, -1, 1 + r.n_classes + j / r.bucket_len };
            if (A.lab && r.n_classes) {
                int c = A.lab[w * (S + 1) + j + 1];
                cells[1] = c < r.n_classes ? 1 + c : -1;
            }
            for (int q = 0; q < 3; q++) {
                if (cells[q] < 0)
                    continue;
                sa[(size_t)cells[q] * n + w] += la;
                sb[(size_t)cells[q] * n + w] += lb;
                cnt[(size_t)cells[q] * n + w] += 1;
            }
        }
    finish(&r.all, sa, sb, cnt, n);
    for (int k = 0; k < r.n_classes; k++)
        finish(&r.cls[k], sa + (size_t)(1 + k) * n, sb + (size_t)(1 + k) * n,
               cnt + (size_t)(1 + k) * n, n);
    for (int b = 0; b < LD_BUCKETS; b++) {
        size_t o = (size_t)(1 + r.n_classes + b) * n;
        finish(&r.pos[b], sa + o, sb + o, cnt + o, n);
    }
    free(sa);
    free(sb);
    free(cnt);
    write_md(stdout, &r);
    char path[RUN_PATH_LEN + 64];
    an_text t = { 0 };
    if (an_out_path(a, NULL, "lossdiff.md", path, (int)sizeof(path)) || an_text_begin(a, &t, path))
        goto done;
    write_md(t.f, &r);
    if (an_text_commit(a, &t) || an_out_path(a, NULL, "lossdiff.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        goto done;
    fprintf(t.f, "what,name,tokens,loss_a,loss_b,diff,se,p\n");
    csv_row(t.f, "all", "all", &r.all);
    for (int k = 0; k < r.n_classes; k++)
        csv_row(t.f, "class", r.class_names[k], &r.cls[k]);
    for (int b = 0; b < LD_BUCKETS; b++) {
        char name[32];
        snprintf(name, sizeof(name), "%d", b * r.bucket_len);
        csv_row(t.f, "position", name, &r.pos[b]);
    }
    if (an_text_commit(a, &t) || an_out_path(a, NULL, "lossdiff.png", path, (int)sizeof(path)))
        goto done;
    rc = an_save_figure(a, path, 780, 640, draw, &r);
done:
    free_side(&A);
    free_side(&B);
    return rc;
}
