/* mode-analyze compare: one row per run, printed and written as Markdown
 * (compare.md) and CSV (compare.csv): what the model is, what it costs, how
 * well it does, and how well the causal rule follows top-k (MoD paper,
 * section 3.5). */
#include "analysis/analyze.h"
#include "analysis/modelsize.h"
#include "analysis/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RT_PRECISION, RT_RECALL, RT_CAUSAL_CAP, RT_COUNT };
static const char *const rule_cols[RT_COUNT] = { "precision", "recall", "causal_capacity" };
#define TAIL_SHARE 0.1 /* the causal rule's statistics: mean of the last 10% of steps */

typedef struct compare_row {
    char kinds[256], capacity[96];
    long params;
    bool params_recorded; /* from /model, else counted from the config */
    double flops, steps_per_s, loss_topk, loss_causal;
    double rule[RT_COUNT];   /* NaN: no routed layer has the column */
} compare_row;

static void capacity_text(const run_info *ri, char *buf, int len)
{
    int w = 0;
    double seen[MODE_MAX_LAYERS];
    int n = 0;
    buf[0] = '\0';
    for (int l = 0; l < ri->cfg.n_layers && w < len; l++) {
        double c = ri->cfg.layers[l].capacity;
        bool dup = false;
        for (int j = 0; j < n; j++)
            dup |= seen[j] == c;
        if (!run_layer_has_key(ri, l, "capacity") || dup)
            continue;
        seen[n++] = c;
        w += snprintf(buf + w, (size_t)(len - w), "%s%g", n > 1 ? "/" : "", c);
    }
    if (!n)
        snprintf(buf, (size_t)len, "-");
}

static int fill_row(const an_args *a, const run_info *ri, compare_row *row)
{
    char err[512];
    const char *kind_names[MODE_MAX_LAYERS];
    for (int l = 0; l < ri->cfg.n_layers; l++)
        kind_names[l] = ri->cfg.layers[l].kind;
    kinds_summary(row->kinds, (int)sizeof(row->kinds), kind_names, ri->cfg.n_layers);
    capacity_text(ri, row->capacity, (int)sizeof(row->capacity));
    model_size size;
    if (run_model_size(ri, &size, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    row->flops = size.forward_flops;
    row->params = (long)size.params;
    row->params_recorded = size.recorded;
    double steps = run_last_value(ri, "metrics/step", NULL);
    double wall = run_last_value(ri, "metrics/wall_s", NULL);
    row->steps_per_s = wall > 0 ? steps / wall : (double)NAN;
    row->loss_topk = run_last_value(ri, "eval/loss_topk", NULL);
    row->loss_causal = run_last_value(ri, "eval/loss_causal", NULL);
    for (int k = 0; k < RT_COUNT; k++) {
        double sum = 0.0;
        int n_layers = 0;
        for (int l = 0; l < ri->cfg.n_layers; l++) {
            char col[96];
            double *v = NULL;
            long n = 0;
            snprintf(col, sizeof(col), "layer_stats/%d/%s", l, rule_cols[k]);
            if (!run_read_column(ri, col, &v, &n) && n > 0) {
                sum += tail_mean(v, n, TAIL_SHARE);
                n_layers++;
            }
            free(v);
        }
        row->rule[k] = n_layers ? sum / n_layers : (double)NAN;
    }
    return 0;
}

/* v with digits decimals (or 17 significant digits when digits < 0), or
 * "-" for NaN. */
static const char *fmt(char *buf, int digits, double v)
{
    if (isnan(v))
        return "-";
    if (digits < 0)
        snprintf(buf, 32, "%.17g", v);
    else
        snprintf(buf, 32, "%.*f", digits, v);
    return buf;
}

static void params_text(char *buf, long n)
{
    if (n >= 1000000)
        snprintf(buf, 32, "%.2fM", (double)n / 1e6);
    else if (n >= 1000)
        snprintf(buf, 32, "%.1fk", (double)n / 1e3);
    else
        snprintf(buf, 32, "%ld", n);
}

static void write_md(FILE *f, run_info **ris, const compare_row *rows, int n)
{
    fprintf(f, "| run | layers | capacity | params | FLOPs/fwd/seq | steps/s | loss top-k | "
               "loss causal | precision | recall | causal capacity |\n");
    fprintf(f, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int r = 0; r < n; r++) {
        const compare_row *w = &rows[r];
        char b[8][32];
        params_text(b[0], w->params);
        number_label(b[1], 32, w->flops, 3);
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", ris[r]->name,
                w->kinds, w->capacity, b[0], b[1], fmt(b[2], 2, w->steps_per_s),
                fmt(b[3], 4, w->loss_topk), fmt(b[4], 4, w->loss_causal),
                fmt(b[5], 3, w->rule[RT_PRECISION]), fmt(b[6], 3, w->rule[RT_RECALL]),
                fmt(b[7], 3, w->rule[RT_CAUSAL_CAP]));
    }
}

static void write_csv(FILE *f, run_info **ris, const compare_row *rows, int n)
{
    fprintf(f, "run,layers,capacity,params,params_from,flops_per_seq,steps_per_s,loss_topk,"
               "loss_causal,precision,recall,causal_capacity,file\n");
    for (int r = 0; r < n; r++) {
        const compare_row *w = &rows[r];
        char b[6][32];
        fprintf(f, "\"%s\",\"%s\",%s,%ld,%s,%.17g,%s,%s,%s,%s,%s,%s,\"%s\"\n", ris[r]->name,
                w->kinds, w->capacity, w->params, w->params_recorded ? "record" : "config",
                w->flops, fmt(b[0], 4, w->steps_per_s), fmt(b[1], -1, w->loss_topk),
                fmt(b[2], -1, w->loss_causal), fmt(b[3], -1, w->rule[RT_PRECISION]),
                fmt(b[4], -1, w->rule[RT_RECALL]), fmt(b[5], -1, w->rule[RT_CAUSAL_CAP]),
                ris[r]->path);
    }
}

int cmd_compare(const an_args *a)
{
    run_info *ris[AN_MAX_FILES];
    compare_row rows[AN_MAX_FILES];
    char md[RUN_PATH_LEN + 64], csv[RUN_PATH_LEN + 64];
    an_text t = { 0 };
    memset(rows, 0, sizeof(rows));
    if (an_open_runs(a, ris))
        return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT;
    an_unique_names(ris, a->n_files);
    for (int r = 0; r < a->n_files; r++)
        if (fill_row(a, ris[r], &rows[r]))
            goto done;
    if (an_out_path(a, ris[0], "compare.md", md, (int)sizeof(md)) ||
        an_out_path(a, ris[0], "compare.csv", csv, (int)sizeof(csv)))
        goto done;
    write_md(stdout, ris, rows, a->n_files);
    if (an_text_begin(a, &t, md))
        goto done;
    write_md(t.f, ris, rows, a->n_files);
    if (an_text_commit(a, &t) || an_text_begin(a, &t, csv))
        goto done;
    write_csv(t.f, ris, rows, a->n_files);
    if (an_text_commit(a, &t))
        goto done;
    rc = 0;
done:
    an_text_abort(&t);
    an_close_runs(a, ris);
    return rc;
}
