/* mode-analyze cluster: step time and parallel efficiency at 1 to 256 nodes,
 * and the wall time of a sweep whose runs go side by side, from runs of one
 * config measured at several rank counts (the model: clustermodel.h). */
#include "analysis/analyze.h"
#include "analysis/clustermodel.h"
#include "analysis/groups.h"
#include "analysis/modelsize.h"
#include "moe/registry.h"
#include "core/util/num.h"

#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_NODES = 64, MAX_SWEEP = 16 };

typedef struct cl_run {
    run_info *ri;
    run_keys keys;
    long ranks;
    double compute_s, comm_s, comm_bytes, flops_step;
} cl_run;

/* the median of column name over the steps after the first (a warm-up),
 * or over the one step there is */
static int median_col(const run_info *ri, const char *name, double *out)
{
    double *v = NULL;
    long n = 0;
    if (run_read_column(ri, name, &v, &n) || n < 1) {
        free(v);
        return -1;
    }
    long skip = n > 1 ? 1 : 0;
    gsl_sort(v + skip, 1, (size_t)(n - skip));
    *out = gsl_stats_median_from_sorted_data(v + skip, 1, (size_t)(n - skip));
    bool ok = isfinite(*out);
    free(v);
    return ok ? 0 : -1;
}

static int read_run(const an_args *a, const char *path, cl_run *r)
{
    char err[RUN_PATH_LEN + 256];
    if (build_run_info(&r->ri, path, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    if (config_run_keys(&r->ri->cfg, mode_kinds, &r->keys))
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    r->ranks = run_ranks(r->ri);
    if (r->ranks < 1)
        return an_fail(a, EXIT_BAD_INPUT, "%s: no provenance/ranks: the ranks it trained on "
                       "are not known", path);
    static const char *const cols[] = { "metrics/compute_s", "metrics/comm_s",
                                        "metrics/comm_bytes" };
    double *dst[] = { &r->compute_s, &r->comm_s, &r->comm_bytes };
    for (int i = 0; i < 3; i++)
        if (median_col(r->ri, cols[i], dst[i]))
            return an_fail(a, EXIT_BAD_INPUT, "%s: no finite %s per step (a run file of "
                           "mode-exp training, with at least one step, expected)", path, cols[i]);
    long n = 0;
    double last_flops = run_last_value(r->ri, "metrics/train_flops", &n),
           last_step = run_last_value(r->ri, "metrics/step", NULL);
    r->flops_step = n > 0 && last_step > 0 ? last_flops / last_step : (double)NAN;
    return 0;
}

/* "1,2,4" into nodes[], ascending, each 1..65536 */
static int parse_nodes(const an_args *a, const char *s, int *nodes, int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char item[32];
        size_t len = strcspn(p, ",");
        long v = 0;
        snprintf(item, sizeof(item), "%.*s", (int)(len < 31 ? len : 31), p);
        if (*n == MAX_NODES || len >= 31 || !num_parse_long(item, 1, 65536, &v) ||
            (*n && v <= nodes[*n - 1]))
            return an_fail(a, EXIT_USAGE, "--nodes %s: expected node counts 1..65536, ascending, "
                           "separated by commas (at most %d), e.g. 1,2,4,64", s, MAX_NODES);
        nodes[(*n)++] = (int)v;
        p += len;
        if (*p == ',' && *++p == '\0')
            return an_fail(a, EXIT_USAGE, "--nodes %s: a trailing comma", s);
    }
    return *n ? 0 : an_fail(a, EXIT_USAGE, "--nodes: expected at least one node count");
}

struct cl_report;
static int parse_sweep(const an_args *a, const char *s, struct cl_report *r);

typedef struct cl_report {
    const an_args *a;
    const char *name, *parallel;
    const run_info *ri0;
    double shared;           /* parameters outside the experts (their gradients all-reduced) */
    int n_a2a;               /* all-to-alls a step: 4 an expert layer */
    cm_point pts[64];
    int n_pts, runs_at[64];
    cm_fit fit;
    cm_net net;
    int nodes[MAX_NODES], n_nodes;
    long batch, seq_len;
    double params, target, flops_step;
    int n_sweep;             /* groups of runs of a sweep (0: none) */
    long sweep_runs[MAX_SWEEP], total_runs;
    double sweep_flops[MAX_SWEEP], total_flops;
} cl_report;

/* "42,1e12+42,2e12" into r's sweep groups */
static int parse_sweep(const an_args *a, const char *s, cl_report *r)
{
    const char *p = s;
    r->n_sweep = 0;
    while (*p) {
        char item[64], count[32];
        size_t len = strcspn(p, "+");
        snprintf(item, sizeof(item), "%.*s", (int)(len < 63 ? len : 63), p);
        const char *comma = strchr(item, ',');
        snprintf(count, sizeof(count), "%.*s", comma ? (int)(comma - item) : 0, item);
        long n = 0;
        double f = 0;
        if (r->n_sweep == MAX_SWEEP || len >= 63 || !comma ||
            !num_parse_long(count, 1, 1000000, &n) || !num_parse_double(comma + 1, 1, 1e30, &f))
            return an_fail(a, EXIT_USAGE, "--sweep %s: expected N,F: N runs (1..1000000) of "
                           "F training FLOPs each, groups joined by + (at most %d; e.g. "
                           "42,1e12+42,2e12+42,4e12)", s, MAX_SWEEP);
        r->sweep_runs[r->n_sweep] = n;
        r->sweep_flops[r->n_sweep++] = f;
        r->total_runs += n;
        r->total_flops += (double)n * f;
        p += len;
        if (*p == '+' && *++p == '\0')
            return an_fail(a, EXIT_USAGE, "--sweep %s: a trailing +", s);
    }
    return r->n_sweep ? 0 : an_fail(a, EXIT_USAGE, "--sweep: expected N,F");
}

/* the k of a sweep's runs: 1 rank a run, and one node a run (at most the
 * batch: a run's sequences split over its ranks, as sweep --ranks-per-run
 * requires) */
static int sweep_ks(const cl_report *r, int *ks)
{
    ks[0] = 1;
    int k = r->net.cores < r->batch ? r->net.cores : (int)r->batch;
    return k > 1 ? (ks[1] = k, 2) : 1;
}

static double sweep_hours(const cl_report *r, int nodes, int k)
{
    cm_net one = r->net;
    one.cores = k;
    cm_pred p = cm_predict(&r->fit, &one, 1, r->batch, 1.0, 1.0);
    double *secs = malloc((size_t)r->total_runs * sizeof(double));
    if (!secs)
        return (double)NAN;
    long n = 0;
    for (int g = 0; g < r->n_sweep; g++)
        for (long i = 0; i < r->sweep_runs[g]; i++)
            secs[n++] = r->sweep_flops[g] / r->flops_step * p.step_s;
    double h = cm_lpt_makespan(secs, (int)n, nodes * r->net.cores / k) / 3600.0;
    free(secs);
    return h;
}

static void write_md(FILE *f, const cl_report *r)
{
    fprintf(f, "# Cluster model of %s (%s parallelism)\n\n", r->name, r->parallel);
    fprintf(f, "| ranks | runs | compute ms/step | comm ms/step | bytes sent a rank a step |\n"
               "| --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < r->n_pts; i++)
        fprintf(f, "| %d | %d | %.1f | %.1f | %.4g |\n", r->pts[i].ranks, r->runs_at[i],
                1e3 * r->pts[i].compute_s, 1e3 * r->pts[i].comm_s, r->pts[i].comm_bytes);
    const cm_fit *ft = &r->fit;
    fprintf(f, "\nCompute fit: %s", ft->form == CM_EFF ? "t(P) = t(P0) P0 / (P e)" : "t(P) = a + b/P");
    fprintf(f, "; eff form: P0 %d, t(P0) %.1f ms, e %.3f (rms %.1f%%); a + b/P form: a %.1f ms, "
               "b %.1f ms (rms %.1f%%)%s.\n", ft->p0, 1e3 * ft->c0, ft->e, 100 * ft->rms_eff,
            1e3 * ft->a, 1e3 * ft->b, 100 * ft->rms_amdahl,
            r->n_pts < 3 ? "; 2 rank counts fit both exactly: eff is taken (it carries the "
                           "measured loss of efficiency; a + b/P reads a serial part from two "
                           "points)" : "; the smaller rms is taken");
    if (r->n_a2a > 0)
        fprintf(f, "Bytes: K = %.6g bytes all-reduced a step (4 a parameter outside the experts, "
                   "%.4g of them; a ring: 2 (P-1)/P K a rank); the %d all-to-alls a step: "
                   "alpha = %.4g bytes a sequence a rank holds, times (P-1)/P (the measured "
                   "bytes beyond the all-reduce); within a node %.3g GB/s (the highest of "
                   "the points' bytes over comm seconds, waits included).\n\n", ft->grad_bytes, r->shared, r->n_a2a,
                ft->a2a_bytes, ft->shm_bytes_s * 1e-9);
    else
        fprintf(f, "Bytes: K = %.4g bytes all-reduced a step (a ring: 2 (P-1)/P K a rank; "
                   "%.3g bytes a parameter); within a node %.3g GB/s (the highest of the "
                   "points' bytes over comm seconds, waits included).\n\n", ft->grad_bytes, ft->grad_bytes / r->params,
                ft->shm_bytes_s * 1e-9);
    fprintf(f, "| model | nodes | ranks | batch | compute ms | comm ms | step ms | tokens/s | "
               "efficiency |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < r->n_nodes; i++) {
            double scale = m ? r->target / r->params : 1.0;
            cm_pred p = cm_predict(ft, &r->net, r->nodes[i], r->batch, scale, sqrt(scale));
            char label[64];
            snprintf(label, sizeof(label), m ? "%.3g params (scaled)" : "measured", r->target);
            fprintf(f, "| %s | %d | %d | %ld | %.1f | %.1f | %.1f | %.0f | %.3f |\n", label,
                    r->nodes[i], p.ranks, p.batch, 1e3 * p.compute_s, 1e3 * p.comm_s,
                    1e3 * p.step_s, (double)p.batch * r->seq_len / p.step_s, p.efficiency);
        }
    if (r->n_sweep > 0) {
        int ks[2], nk = sweep_ks(r, ks);
        fprintf(f, "\nSweep of %ld runs, %.3g training FLOPs in all (", r->total_runs,
                r->total_flops);
        for (int g = 0; g < r->n_sweep; g++)
            fprintf(f, "%s%ld of %.3g", g ? ", " : "", r->sweep_runs[g], r->sweep_flops[g]);
        fprintf(f, "), side by side, longest first, at %.3g FLOP/s a rank alone:\n\n| nodes |",
                r->flops_step / cm_compute(&r->fit, 1.0));
        for (int j = 0; j < nk; j++)
            fprintf(f, " hours, %d rank%s a run |", ks[j], ks[j] == 1 ? "" : "s");
        fprintf(f, "\n| --- |%s\n", nk == 2 ? " --- | --- |" : " --- |");
        for (int i = 0; i < r->n_nodes; i++) {
            fprintf(f, "| %d |", r->nodes[i]);
            for (int j = 0; j < nk; j++)
                fprintf(f, " %.3g |", sweep_hours(r, r->nodes[i], ks[j]));
            fprintf(f, "\n");
        }
    }
    fprintf(f, "\nAssumptions: nodes of %d ranks (one a core), %.4g Gbit/s and %.4g us between "
               "nodes, the all-reduce hierarchical (within a node at the measured rate, then a "
               "ring over the nodes); the global batch %ld, raised to one sequence a rank where "
               "the ranks outnumber it (weak scaling); efficiency: one rank's compute for the "
               "same sequences over the ranks' time. The %.3g-parameter model: compute "
               "and all-reduced bytes scaled by parameters (%.3g / %.3g), the same tokens a "
               "step and FLOPs per parameter a token as the measured one, and the depth: the "
               "width, and the all-to-alls' bytes, by the square root.%s\n",
            r->net.cores, r->net.bytes_s * 8e-9, r->net.latency_s * 1e6, r->batch, r->target,
            r->target, r->params,
            r->n_a2a ? " Experts: sharded over all the ranks, their all-to-alls sent pairwise "
                       "(one latency for each other node)." : "");
    if (r->n_sweep > 0)
        fprintf(f, "A sweep's runs: all at the measured model's rate, each on k ranks of one "
                   "node (at most the batch, %ld), as many groups as the nodes hold.\n",
                r->batch);
}

static void write_csv(FILE *f, const cl_report *r)
{
    fprintf(f, "model,parallelism,nodes,ranks,batch,compute_s,comm_s,step_s,tokens_per_s,"
               "efficiency\n");
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < r->n_nodes; i++) {
            double scale = m ? r->target / r->params : 1.0;
            cm_pred p = cm_predict(&r->fit, &r->net, r->nodes[i], r->batch, scale, sqrt(scale));
            fprintf(f, "%s,%s,%d,%d,%ld,%.6g,%.6g,%.6g,%.6g,%.6g\n", m ? "scaled" : "measured",
                    r->parallel, r->nodes[i], p.ranks, p.batch, p.compute_s, p.comm_s, p.step_s,
                    (double)p.batch * r->seq_len / p.step_s, p.efficiency);
        }
    if (r->n_sweep > 0) {
        int ks[2], nk = sweep_ks(r, ks);
        for (int i = 0; i < r->n_nodes; i++)
            for (int j = 0; j < nk; j++)
                fprintf(f, "sweep-k%d,%s,%d,%d,,,,%.6g,,\n", ks[j], r->parallel, r->nodes[i],
                        r->nodes[i] * r->net.cores, 3600.0 * sweep_hours(r, r->nodes[i], ks[j]));
    }
}

static int emit(const an_args *a, const cl_report *r)
{
    write_md(stdout, r);
    char path[RUN_PATH_LEN + 64];
    an_text t;
    if (an_out_path(a, NULL, "cluster.md", path, (int)sizeof(path)) || an_text_begin(a, &t, path))
        return EXIT_BAD_INPUT;
    write_md(t.f, r);
    if (an_text_commit(a, &t) || an_out_path(a, NULL, "cluster.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        return EXIT_BAD_INPUT;
    write_csv(t.f, r);
    return an_text_commit(a, &t) ? EXIT_BAD_INPUT : 0;
}

/* The parameters outside the experts (tensors without an expert dimension,
 * the embedding and final norm) and the all-to-alls a step; 0 or -1 after a
 * message. */
static int expert_layout(const an_args *a, const run_info *ri, cl_report *r)
{
    model_dims dims = config_dims(&ri->cfg);
    double experts = 0;
    tensor_desc descs[32];
    r->ri0 = ri;
    r->parallel = "data";
    for (int l = 0; l < ri->cfg.n_layers; l++) {
        const layer_kind *k = run_layer_kind(ri, l);
        if (!k)
            return an_fail(a, EXIT_BAD_INPUT, "%s: layer %d: a kind this program does not know",
                           ri->path, l), -1;
        int n = k->tensors(&ri->cfg.layers[l], &dims, descs, 32);
        bool any = false;
        for (int t = 0; t < n; t++)
            if (descs[t].expert_dim) {
                experts += (double)tensor_numel(&descs[t]);
                any = true;
            }
        if (any) {
            r->n_a2a += 4; /* dispatch and combine, forward and backward */
            r->parallel = "data+expert";
        }
    }
    r->shared = r->params - experts;
    return 0;
}

int cmd_cluster(const an_args *a)
{
    cl_report *r = calloc(1, sizeof(*r));
    cl_run *runs = calloc((size_t)a->n_files, sizeof(cl_run));
    int rc = r && runs ? 0 : an_fail(a, EXIT_BAD_INPUT, "out of memory");
    if (!rc) {
        r->a = a;
        r->net = (cm_net){ (int)a->cores, a->link_gbit * 1e9 / 8, a->latency_us * 1e-6 };
    }
    if (!rc && a->sweep)
        rc = parse_sweep(a, a->sweep, r);
    rc = rc ? rc : parse_nodes(a, a->nodes ? a->nodes : "1,2,4,8,16,32,64,128,256", r->nodes,
                               &r->n_nodes);
    for (int i = 0; !rc && i < a->n_files; i++)
        rc = read_run(a, a->files[i], &runs[i]);
    for (int i = 1; !rc && i < a->n_files; i++) {
        const char *diff = NULL;
        if (!same_config(&runs[0].keys, &runs[i].keys, &diff))
            rc = an_fail(a, EXIT_BAD_INPUT, "%s and %s are runs of different configs (%s: %s "
                         "against %s): the model fits one config at several rank counts",
                         a->files[0], a->files[i], diff, run_key_value(&runs[0].keys, diff),
                         run_key_value(&runs[i].keys, diff));
    }
    /* one point per rank count: the mean of its runs */
    for (int i = 0; !rc && i < a->n_files; i++) {
        int j = 0;
        while (j < r->n_pts && r->pts[j].ranks != runs[i].ranks)
            j++;
        if (j == r->n_pts) {
            if (j == 64) {
                rc = an_fail(a, EXIT_BAD_INPUT, "more than 64 rank counts");
                break;
            }
            r->pts[r->n_pts++] = (cm_point){ (int)runs[i].ranks, 0, 0, 0 };
        }
        r->pts[j].compute_s += runs[i].compute_s;
        r->pts[j].comm_s += runs[i].comm_s;
        r->pts[j].comm_bytes += runs[i].comm_bytes;
        r->runs_at[j]++;
    }
    if (!rc) {
        model_size ms;
        char err[RUN_PATH_LEN + 256];
        if (run_model_size(runs[0].ri, &ms, err, (int)sizeof(err)))
            rc = an_fail(a, EXIT_BAD_INPUT, "%s", err);
        r->params = (double)ms.params;
        r->flops_step = isfinite(runs[0].flops_step) ? runs[0].flops_step : ms.train_flops_per_step;
    }
    if (!rc && (rc = expert_layout(a, runs[0].ri, r)))
        rc = EXIT_BAD_INPUT;
    if (!rc && r->n_pts < 2)
        rc = an_fail(a, EXIT_BAD_INPUT, "every run given trained on %d rank%s: the model needs "
                     "one config measured at two rank counts or more (e.g. 1 and 2)",
                     r->pts[0].ranks, r->pts[0].ranks == 1 ? "" : "s");
    if (!rc) {
        for (int j = 0; j < r->n_pts; j++) {
            r->pts[j].compute_s /= r->runs_at[j];
            r->pts[j].comm_s /= r->runs_at[j];
            r->pts[j].comm_bytes /= r->runs_at[j];
        }
        for (int i = 1; i < r->n_pts; i++) /* ascending, with their run counts */
            for (int j = i; j > 0 && r->pts[j].ranks < r->pts[j - 1].ranks; j--) {
                cm_point t = r->pts[j];
                r->pts[j] = r->pts[j - 1], r->pts[j - 1] = t;
                int c = r->runs_at[j];
                r->runs_at[j] = r->runs_at[j - 1], r->runs_at[j - 1] = c;
            }
        char err[256];
        if (cm_fit_points(r->pts, r->n_pts, r->ri0->cfg.batch, r->n_a2a, 4.0 * r->shared,
                          &r->fit, err, (int)sizeof(err)))
            rc = an_fail(a, EXIT_BAD_INPUT, "%s", err);
    }
    if (!rc) {
        const run_info *ri = runs[0].ri;
        r->name = ri->name;
        r->batch = ri->cfg.batch;
        r->seq_len = ri->cfg.seq_len;
        r->target = a->params;
        rc = emit(a, r);
    }
    for (int i = 0; runs && i < a->n_files; i++) {
        free_run_keys(&runs[i].keys);
        free_run_info(&runs[i].ri);
    }
    free(runs);
    free(r);
    return rc;
}
