#include "analysis/runset.h"

#include "analysis/rundir.h"
#include "moe/registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const rule_cols[RT_COUNT] = { "precision", "recall", "causal_capacity" };
#define TAIL_SHARE 0.1 /* the causal rule's statistics: mean of the last 10% of steps */

static void capacity_text(const run_info *ri, char *buf, int len)
{
    int w = 0;
    double seen[MODE_MAX_LAYERS];
    int n = 0;
    buf[0] = '\0';
    for (int l = 0; l < ri->cfg.n_layers && w < len; l++) {
        double c = run_layer_capacity(ri, l);
        bool dup = false;
        for (int j = 0; j < n; j++)
            dup |= seen[j] == c;
        if (!(run_layer_decides(ri, l) & DECIDES_TAKE) || dup || isnan(c))
            continue;
        seen[n++] = c;
        w += snprintf(buf + w, (size_t)(len - w), "%s%g", n > 1 ? "/" : "", c);
    }
    if (!n)
        snprintf(buf, (size_t)len, "-");
}

/* The last evaluation: its step and, where the file has them, its
 * standard errors and windows (older files have losses only). */
static void read_eval(const run_info *ri, an_run *r)
{
    long n = 0;
    double step = run_last_value(ri, "eval/step", &n);
    r->eval_step = n > 0 && isfinite(step) ? (long)step : -1;
    r->loss_topk = run_last_value(ri, "eval/loss_topk", NULL);
    r->bpb_topk = run_last_value(ri, "eval/bpb_topk", NULL);
    r->loss_causal = run_last_value(ri, "eval/loss_causal", NULL);
    r->se_topk = run_last_value(ri, "eval/se_topk", NULL);
    r->se_causal = run_last_value(ri, "eval/se_causal", NULL);
    r->windows = run_last_value(ri, "eval/windows", NULL);
}

static void read_rule(const run_info *ri, an_run *r)
{
    for (int k = 0; k < RT_COUNT; k++) {
        double sum = 0.0;
        int n_layers = 0;
        for (int l = 0; l < ri->cfg.n_layers; l++) {
            char col[96];
            double *v = NULL;
            long n = 0;
            snprintf(col, sizeof(col), "layer_stats/%d/%s", l, rule_cols[k]);
            if (run_has_dataset(ri, col) && !run_read_column(ri, col, &v, &n) && n > 0) {
                sum += tail_mean(v, n, TAIL_SHARE);
                n_layers++;
            }
            free(v);
        }
        r->rule[k] = n_layers ? sum / n_layers : (double)NAN;
    }
}

/* One run file into r; the file is closed again. */
static int read_one(const an_args *a, const char *path, an_run *r)
{
    run_info *ri = NULL;
    char err[RUN_PATH_LEN + 512];
    if (build_run_info(&ri, path, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    int rc = EXIT_BAD_INPUT;
    snprintf(r->path, sizeof(r->path), "%s", ri->path);
    snprintf(r->dir, sizeof(r->dir), "%s", ri->dir);
    snprintf(r->name, sizeof(r->name), "%s", ri->name);
    if (!(r->cfg = malloc(sizeof(run_config)))) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    *r->cfg = ri->cfg;
    r->data = ri->data;
    ri->data = NULL;
    if (config_run_keys(&ri->cfg, mode_kinds, &r->keys)) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    const char *kind_names[MODE_MAX_LAYERS];
    for (int l = 0; l < ri->cfg.n_layers; l++)
        kind_names[l] = ri->cfg.layers[l].kind;
    kinds_summary(r->kinds, (int)sizeof(r->kinds), kind_names, ri->cfg.n_layers);
    capacity_text(ri, r->capacity, (int)sizeof(r->capacity));
    if (run_model_size(ri, &r->size, err, (int)sizeof(err))) {
        an_fail(a, rc, "%s", err);
        goto done;
    }
    double done = run_last_value(ri, "metrics/step", NULL);
    r->done = isfinite(done) ? (long)done : 0;
    r->planned = config_planned_steps(&ri->cfg, r->size.train_flops_per_step);
    /* the training FLOPs spent, both counts: nominal as training counted it
     * (a schedule's steps summed), executed summed over the steps' records */
    r->executed = !strcmp(ri->cfg.flops_count, "executed");
    r->flops_nominal =
        config_nominal_flops_through(&ri->cfg, r->size.train_flops_per_step, r->done);
    double *ex = NULL;
    long n_ex = 0;
    r->flops_executed = 0.0;
    if (!run_read_column(ri, "metrics/train_flops_executed", &ex, &n_ex))
        for (long i = 0; i < n_ex; i++)
            r->flops_executed += isfinite(ex[i]) ? ex[i] : 0.0;
    free(ex);
    r->train_flops = r->executed ? r->flops_executed : r->flops_nominal;
    if (r->executed && ri->cfg.flops_budget > 0.0 && r->done > 0)
        /* re-planned as it ran (docs/instruments.md): complete once within
         * half a step's spending of the budget */
        r->complete = ri->cfg.flops_budget - r->flops_executed <=
                      0.5 * r->flops_executed / (double)r->done * (1.0 + 1e-9);
    else
        r->complete = r->done >= r->planned;
    r->wall_s = run_last_value(ri, "metrics/wall_s", NULL);
    r->steps_per_s = r->wall_s > 0 ? (double)r->done / r->wall_s : (double)NAN;
    read_eval(ri, r);
    read_rule(ri, r);
    rc = 0;
done:
    free_run_info(&ri);
    return rc;
}

/* Names that tell the runs apart: [run] name, or the folder holding the
 * file where two runs share a name. */
static void unique_names(an_runset *rs)
{
    for (int i = 0; i < rs->n; i++) {
        bool clash = false;
        for (int j = 0; j < rs->n; j++)
            clash |= j != i && !strcmp(rs->runs[i].cfg->name, rs->runs[j].cfg->name);
        if (clash)
            snprintf(rs->runs[i].name, sizeof(rs->runs[i].name), "%.127s", rs->runs[i].dir);
    }
}

bool an_run_used(const an_runset *rs, int i)
{
    const an_group_stats *st = &rs->stats[rs->g.group_of[i]];
    return !isfinite(rs->runs[i].loss_topk) ? false : st->in_progress || rs->runs[i].complete;
}

static void group_stats(an_runset *rs, int gi)
{
    const run_group *grp = &rs->g.groups[gi];
    an_group_stats *st = &rs->stats[gi];
    memset(st, 0, sizeof(*st));
    st->in_progress = true;
    for (int m = 0; m < grp->n; m++)
        st->in_progress &= !(rs->runs[grp->members[m]].complete &&
                             isfinite(rs->runs[grp->members[m]].loss_topk));
    double flops = 0.0;
    double *topk = malloc((size_t)grp->n * sizeof(double));
    double *causal = malloc((size_t)grp->n * sizeof(double));
    double se[2] = { 0, 0 }, sps = 0.0, bpb = 0.0, rule[RT_COUNT] = { 0 };
    int n_se[2] = { 0, 0 }, n_sps = 0, n_rule[RT_COUNT] = { 0 };
    st->eval_lo = -1;
    st->eval_hi = -1;
    for (int m = 0; topk && causal && m < grp->n; m++) {
        int i = grp->members[m];
        const an_run *r = &rs->runs[i];
        if (!an_run_used(rs, i))
            continue;
        topk[st->used] = r->loss_topk;
        causal[st->used++] = r->loss_causal;
        flops += r->train_flops;
        if (st->eval_lo < 0 || r->eval_step < st->eval_lo)
            st->eval_lo = r->eval_step;
        if (r->eval_step > st->eval_hi)
            st->eval_hi = r->eval_step;
        const double v[2] = { r->se_topk, r->se_causal };
        for (int k = 0; k < 2; k++)
            if (isfinite(v[k])) {
                se[k] += v[k];
                n_se[k]++;
            }
        if (isfinite(r->steps_per_s)) {
            sps += r->steps_per_s;
            n_sps++;
        }
        bpb += r->bpb_topk; /* NaN when any replicate's is unknown */
        for (int k = 0; k < RT_COUNT; k++)
            if (isfinite(r->rule[k])) {
                rule[k] += r->rule[k];
                n_rule[k]++;
            }
    }
    summarize(topk, st->used, &st->topk);
    summarize(causal, st->used, &st->causal);
    st->train_flops = st->used ? flops / st->used : (double)NAN;
    st->bpb_topk = st->used ? bpb / st->used : (double)NAN;
    st->mult = multiplier_none();
    if (rs->ladder.n_points >= 2 && topk)
        st->mult = ladder_multiplier(&rs->ladder, topk, st->used, st->train_flops,
                                     (uint64_t)gi + 1);
    st->se_topk = n_se[0] ? se[0] / n_se[0] : (double)NAN;
    st->se_causal = n_se[1] ? se[1] / n_se[1] : (double)NAN;
    st->steps_per_s = n_sps ? sps / n_sps : (double)NAN;
    for (int k = 0; k < RT_COUNT; k++)
        st->rule[k] = n_rule[k] ? rule[k] / n_rule[k] : (double)NAN;
    free(topk);
    free(causal);
}

static int choose_baseline(const an_args *a, an_runset *rs)
{
    rs->baseline = find_group(&rs->g, a->baseline ? a->baseline : "dense");
    if (rs->baseline < 0 && a->baseline) {
        char list[1024];
        int w = 0;
        list[0] = '\0';
        for (int j = 0; j < rs->g.n_groups && w < (int)sizeof(list); j++)
            w += snprintf(list + w, sizeof(list) - (size_t)w, "%s%s", j ? ", " : "",
                          rs->g.groups[j].name);
        return an_fail(a, EXIT_BAD_INPUT, "--baseline %s: no such group (the groups: %s)",
                       a->baseline, list);
    }
    for (int j = 0; j < rs->g.n_groups; j++) {
        an_group_stats *st = &rs->stats[j];
        if (rs->baseline < 0) {
            st->vs_topk.diff = st->vs_topk.t = st->vs_topk.df = st->vs_topk.p = (double)NAN;
            st->vs_causal = st->vs_topk;
            continue;
        }
        const an_group_stats *b = &rs->stats[rs->baseline];
        welch_test(&st->topk, &b->topk, &st->vs_topk);
        welch_test(&st->causal, &b->causal, &st->vs_causal);
    }
    return 0;
}

/* Losses side by side only of runs on the same data (docs/robustness.md):
 * nats per token over another vocabulary, corpus or held-out split are
 * other units or another test.  Each of runs[n] against ref; what names
 * the set in the message ("" or "--ladder DIR: "). */
static int comparable(const an_args *a, const an_run *ref, const an_run *runs, int n,
                      const char *what)
{
    for (int i = 0; i < n; i++) {
        char diff[2 * CFG_PATH_LEN + 64];
        if (run_data_differs(runs[i].cfg, runs[i].data, ref->cfg, ref->data, diff,
                             (int)sizeof(diff)))
            return an_fail(a, EXIT_BAD_INPUT, "%s%s and %s are not comparable: %s; their "
                           "losses are over other data or another vocabulary (nats per "
                           "token of different tokens): compare each data set's runs apart",
                           what, runs[i].path, ref->path, diff);
    }
    return 0;
}

/* --ladder DIR: the dense ladder from the runs of another folder and rs's
 * own dense runs (a study's dense baseline is the ladder's rung at its
 * budget). */
static int read_ladder(const an_args *a, const an_runset *rs, ladder_fit *f)
{
    char **paths = NULL, err[2 * RUN_PATH_LEN + 256];
    int n = 0;
    if (list_run_files(a->ladder, &paths, &n, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "--ladder %s", err);
    an_args b = *a;
    b.ladder = NULL;
    b.baseline = NULL;
    b.no_ladder = true;
    an_runset lr;
    int rc = an_read_run_paths(&b, (const char *const *)paths, n, &lr);
    free_run_files(&paths, n);
    if (rc)
        return rc;
    char what[RUN_PATH_LEN + 32];
    snprintf(what, sizeof(what), "--ladder %s: ", a->ladder);
    if (rs->n > 0 && comparable(a, &rs->runs[0], lr.runs, lr.n, what)) {
        an_free_runs(&lr);
        return EXIT_BAD_INPUT;
    }
    err[0] = '\0';
    int ok = ladder_from_runs(rs, &lr, f, err, (int)sizeof(err));
    an_free_runs(&lr);
    if (ok < 0)
        return an_fail(a, EXIT_BAD_INPUT, "--ladder %s: %s", a->ladder, err);
    if (!ok)
        return an_fail(a, EXIT_BAD_INPUT, "--ladder %s: no dense ladder there (complete runs of "
                       "dense layers only, at two training budgets or more, whose loss falls "
                       "with the FLOPs)", a->ladder);
    return 0;
}

int an_read_run_paths(const an_args *a, const char *const *paths, int n, an_runset *rs)
{
    memset(rs, 0, sizeof(*rs));
    rs->baseline = -1;
    rs->runs = calloc((size_t)(n > 0 ? n : 1), sizeof(an_run));
    if (!rs->runs)
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    for (int i = 0; i < n; i++) {
        if (read_one(a, paths[i], &rs->runs[i])) {
            rs->n = i + 1; /* what was read so far, freed by an_free_runs */
            an_free_runs(rs);
            return EXIT_BAD_INPUT;
        }
    }
    rs->n = n;
    if (n > 1 && comparable(a, &rs->runs[0], rs->runs + 1, n - 1, "")) {
        an_free_runs(rs);
        return EXIT_BAD_INPUT;
    }
    unique_names(rs);
    run_keys *keys = malloc((size_t)(n > 0 ? n : 1) * sizeof(run_keys));
    const char **names = malloc((size_t)(n > 0 ? n : 1) * sizeof(char *));
    int rc = keys && names ? 0 : -1;
    for (int i = 0; !rc && i < n; i++) {
        keys[i] = rs->runs[i].keys;
        names[i] = rs->runs[i].name;
    }
    if (!rc)
        rc = group_runs(keys, names, n, &rs->g);
    free(keys);
    free(names);
    if (!rc && !(rs->stats = calloc((size_t)(rs->g.n_groups ? rs->g.n_groups : 1),
                                    sizeof(an_group_stats))))
        rc = -1;
    if (rc) {
        an_free_runs(rs);
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    }
    for (int j = 0; j < rs->g.n_groups; j++)
        group_stats(rs, j);
    /* the dense ladder: these runs' own dense ones, and --ladder's */
    if (a->ladder && read_ladder(a, rs, &rs->ladder)) {
        an_free_runs(rs);
        return EXIT_BAD_INPUT;
    }
    if (!a->ladder && !a->no_ladder) {
        char err[2 * RUN_PATH_LEN + 256];
        if (ladder_from_runs(rs, NULL, &rs->ladder, err, (int)sizeof(err)) < 0)
            fprintf(stderr, "mode-analyze: no dense-equivalent multiplier: %s\n", err);
    }
    for (int j = 0; rs->ladder.n_points >= 2 && j < rs->g.n_groups; j++)
        group_stats(rs, j);
    if (choose_baseline(a, rs)) {
        an_free_runs(rs);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

int an_read_runs(const an_args *a, an_runset *rs)
{
    return an_read_run_paths(a, a->files, a->n_files, rs);
}

void an_free_runs(an_runset *rs)
{
    for (int i = 0; rs->runs && i < rs->n; i++) {
        free(rs->runs[i].cfg);
        free(rs->runs[i].data);
        free_run_keys(&rs->runs[i].keys);
    }
    free(rs->runs);
    free(rs->stats);
    free_ladder_fit(&rs->ladder);
    free_run_grouping(&rs->g);
    memset(rs, 0, sizeof(*rs));
    rs->baseline = -1;
}

/* ---- formatting ------------------------------------------------------------ */

const char *fmt_num(char *buf, int len, double v, int digits, bool sign)
{
    if (!isfinite(v))
        snprintf(buf, (size_t)len, "-");
    else
        snprintf(buf, (size_t)len, sign ? "%+.*f" : "%.*f", digits, v);
    return buf;
}

void fmt_mean_sd(char *buf, int len, const sample_summary *s, int digits)
{
    if (s->n == 0)
        snprintf(buf, (size_t)len, "-");
    else if (s->n == 1)
        snprintf(buf, (size_t)len, "%.*f ± -", digits, s->mean);
    else
        snprintf(buf, (size_t)len, "%.*f ± %.*f", digits, s->mean, digits, s->sd);
}

void fmt_interval(char *buf, int len, const sample_summary *s, int digits)
{
    if (s->n < 2)
        snprintf(buf, (size_t)len, "-");
    else
        snprintf(buf, (size_t)len, "[%.*f, %.*f]", digits, s->ci_lo, digits, s->ci_hi);
}

void fmt_p(char *buf, int len, double p)
{
    if (!isfinite(p))
        snprintf(buf, (size_t)len, "-");
    else if (p < 0.001)
        snprintf(buf, (size_t)len, "<0.001");
    else
        snprintf(buf, (size_t)len, "%.3f", p);
}

void fmt_params(char *buf, int len, double n)
{
    if (!isfinite(n))
        snprintf(buf, (size_t)len, "-");
    else if (n >= 1e12)
        snprintf(buf, (size_t)len, "%.2fT", n / 1e12);
    else if (n >= 1e9)
        snprintf(buf, (size_t)len, "%.2fG", n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, (size_t)len, "%.2fM", n / 1e6);
    else if (n >= 1e3)
        snprintf(buf, (size_t)len, "%.1fk", n / 1e3);
    else
        snprintf(buf, (size_t)len, "%.0f", n);
}

void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void csv_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, ",%.17g", v);
    else
        fputc(',', f);
}

void csv_multiplier(FILE *f, const multiplier *m)
{
    csv_num(f, m->m);
    csv_num(f, m->lo);
    csv_num(f, m->hi);
    fprintf(f, ",%d,", m->extrapolated);
    if (m->bound)
        fprintf(f, "%c%.17g", m->bound, m->bound_m);
}
