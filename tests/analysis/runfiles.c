#include "tests/analysis/runfiles.h"

#include "core/config/config.h"
#include "core/io/runfile.h"
#include "core/model/model.h"
#include "moe/registry.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { KR_R = 4, KR_S = 8, KR_STEPS = 20 };

typedef struct known_run {
    const char *name;
    const char *settings; /* INI lines after the common part */
    int seed;
    double loss;          /* final held-out loss, top-k */
    int taken_windows;    /* windows in which class 1 takes layer 1 */
} known_run;

static const known_run known[] = {
    { "a-s1", "[run]\nseed = 1\n[model]\nlayers = (dense, mod) x 2\n[mod]\ncapacity = 0.25\n", 1,
      1.6507, 1 },
    { "a-s2", "[run]\nseed = 2\n[model]\nlayers = dense, mod, dense, mod\n[mod]\ncapacity = 0.25\n",
      2, 1.6476, 2 },
    { "a-s3",
      "[run]\nseed = 3\ninit_seed = 33\ndata_seed = 3\n[model]\nlayers = (dense, mod) x 2\n"
      "[mod]\ncapacity = 0.25\n", 3, 1.6439, 3 },
    { "b-s1", "[run]\nseed = 1\n[model]\nlayers = (dense, mod) x 2\n[mod]\ncapacity = 0.5\n", 1,
      1.6501, 1 },
    { "b-s2", "[run]\nseed = 2\n[model]\nlayers = (dense, mod) x 2\n[mod]\ncapacity = 0.5\n", 2,
      1.6568, 2 },
    { "b-s3", "[run]\nseed = 3\n[model]\nlayers = (dense, mod) x 2\n[mod]\ncapacity = 0.5\n", 3,
      1.6538, 3 },
    { "dense-s1", "[run]\nseed = 1\n[model]\nlayers = dense x 4\n", 1, 1.6400, 0 },
    { "dense-s2", "[run]\nseed = 2\n[model]\nlayers = dense x 4\n", 2, 1.6420, 0 },
    { "c",
      "[run]\nseed = 1\n[model]\nlayers = (dense, mod) x 2\n[mod]\ncapacity = 0.25\n"
      "router = random\n", 1, 1.7000, 2 },
};

static const char common[] = "[data]\nsource = synthetic\nseq_len = 8\nbatch = 4\n"
                             "[model]\nd_model = 32\nn_heads = 2\nd_ff = 64\n";

static int make_dir(const char *path, char *err, int err_len)
{
    if (mkdir(path, 0777) && errno != EEXIST) {
        snprintf(err, (size_t)err_len, "%s: cannot create (%s)", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The resolved config text of name: what the trainer stores. */
static int resolve(const char *name, const char *out, const char *base, const char *settings,
                   run_config *c, char **ini, char *err, int err_len)
{
    char text[2048];
    snprintf(text, sizeof(text), "%s%s[run]\nname = %s\nout = %s\n", base, settings, name, out);
    int rc = config_load_string(c, text, name, 0, NULL, &mode_schema, 0, err, err_len);
    if (!rc && !(*ini = config_to_ini(c)))
        rc = -ENOMEM;
    return rc;
}

/* metrics rows at the steps given; eval rows at the last two */
static int add_rows(run_record *r, const long *steps, int n, double wall_end, double flops_step,
                    double loss, double loss_causal)
{
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        double row[32] = { 0 };
        row[0] = (double)steps[i];
        row[run_table_col(&r->metrics, "loss")] = loss + 0.5;
        row[run_table_col(&r->metrics, "train_flops")] = flops_step * (double)steps[i];
        row[run_table_col(&r->metrics, "wall_s")] = wall_end * (double)steps[i] / steps[n - 1];
        rc = run_table_append(&r->metrics, row);
    }
    for (int i = n > 1 ? n - 2 : 0; !rc && i < n; i++) { /* one row: one evaluation */
        double late = i == n - 1 ? 0.0 : 0.05; /* the earlier evaluation is worse */
        double row[RUN_EVAL_COUNT] = { (double)steps[i], loss + late, loss_causal + late, 0.002, 0.003,
                          i == n - 1 ? 2048 : 16, (loss + late) / log(2.0),
                          (loss_causal + late) / log(2.0) }; /* bytes: bpb = nats / ln 2 */
        rc = run_table_append(&r->eval, row);
    }
    return rc;
}

/* Layer 1's routing at step 20 and the causal rule's statistics of the mod
 * layers (1 and 3): precision 0.9, recall 0.8, causal capacity 0.25. */
static int add_routing(run_record *r, int taken_windows)
{
    int32_t tokens[KR_R][KR_S + 1];
    uint8_t labels[KR_R][KR_S + 1], selected[KR_R][KR_S];
    float scores[KR_R][KR_S];
    int64_t windows[KR_R];
    for (int w = 0; w < KR_R; w++) {
        windows[w] = 3 * w;
        for (int i = 0; i <= KR_S; i++) {
            tokens[w][i] = 'a' + i;
            labels[w][i] = (uint8_t)(i % 4);
        }
        for (int i = 0; i < KR_S; i++) {
            selected[w][i] = labels[w][i] == 0 || (labels[w][i] == 1 && w < taken_windows);
            scores[w][i] = (selected[w][i] ? 1.0f : -1.0f) * (1.0f + 0.1f * (float)i);
        }
    }
    unsigned long long tdims[2] = { KR_R, KR_S + 1 }, sdims[2] = { KR_R, KR_S }, wdims = KR_R;
    int rc = run_record_add_blob(r, "routing/tokens", RUN_BLOB_INT32, 2, tdims, tokens, 0);
    if (!rc)
        rc = run_record_add_blob(r, "routing/labels", RUN_BLOB_UINT8, 2, tdims, labels, 0);
    if (!rc)
        rc = run_record_add_blob(r, "routing/windows", RUN_BLOB_INT64, 1, &wdims, windows, 0);
    if (!rc)
        rc = run_record_add_blob(r, "routing/step_000020/layer_1/selected", RUN_BLOB_UINT8, 2,
                                 sdims, selected, KR_STEPS);
    if (!rc)
        rc = run_record_add_blob(r, "routing/step_000020/layer_1/scores", RUN_BLOB_FLOAT, 2,
                                 sdims, scores, KR_STEPS);
    static const char *const cols[] = { "step", "precision", "recall", "causal_capacity" };
    for (int l = 1; !rc && l <= 3; l += 2) {
        char group[32];
        snprintf(group, sizeof(group), "layer_stats/%d", l);
        int t = run_record_add_table(r, group, cols, 4);
        if (t < 0)
            return t;
        for (long s = 2; !rc && s <= KR_STEPS; s += 2) {
            double row[4] = { (double)s, s == KR_STEPS ? 0.9 : 0.5, s == KR_STEPS ? 0.8 : 0.5,
                              0.25 };
            rc = run_table_append(&r->extra[t], row);
        }
    }
    return rc;
}

/* run.h5 of the record in dir/name: the header (with the blobs it holds
 * then), one piece, then the gathered file. */
static int write_record(run_record *r, const char *dir, const char *name, long last, char *err,
                        int err_len)
{
    char sub[1024], path[1100];
    snprintf(sub, sizeof(sub), "%s/%s", dir, name);
    if (make_dir(sub, err, err_len))
        return -1;
    snprintf(path, sizeof(path), "%s/run.h5", sub);
    /* the fixed arrays go with the header, the step's records with the piece */
    run_blob *later = NULL;
    int n_later = 0;
    for (int i = 0; i < r->n_blobs; i++)
        n_later += r->blobs[i].step > 0;
    if (n_later && !(later = malloc((size_t)n_later * sizeof(run_blob))))
        return -ENOMEM;
    for (int i = 0, k = 0, j = 0; i < r->n_blobs; i++) {
        if (r->blobs[i].step > 0)
            later[k++] = r->blobs[i];
        else
            r->blobs[j++] = r->blobs[i];
    }
    r->n_blobs -= n_later;
    int rc = run_record_write_header(r, path, err, err_len);
    for (int i = 0; i < n_later; i++) {
        if (!rc)
            rc = run_record_add_blob(r, later[i].path, later[i].type, later[i].ndim, later[i].dims,
                                     later[i].data, later[i].step);
        free(later[i].data);
    }
    free(later);
    if (!rc)
        rc = run_record_flush(r, path, last, err, err_len);
    if (!rc)
        rc = run_record_finish(path, err, err_len);
    return rc;
}

/* Makes dir and dir/sub (its path into out) and a config to resolve the
 * runs into: NULL with *rc set when either fails. */
static run_config *begin_runs(const char *dir, const char *sub, char *out, size_t out_len,
                              int *rc, char *err, int err_len)
{
    snprintf(out, out_len, "%s/%s", dir, sub);
    if (make_dir(dir, err, err_len) || make_dir(out, err, err_len)) {
        *rc = -1;
        return NULL;
    }
    run_config *c = malloc(sizeof(run_config));
    *rc = c ? 0 : -ENOMEM;
    return c;
}

int write_known_runs(const char *dir, char *err, int err_len)
{
    char out[1024];
    int rc;
    run_config *c = begin_runs(dir, "known", out, sizeof(out), &rc, err, err_len);
    if (!c)
        return rc;
    for (size_t i = 0; !rc && i < sizeof(known) / sizeof(known[0]); i++) {
        const known_run *k = &known[i];
        char *ini = NULL;
        char settings[512];
        snprintf(settings, sizeof(settings), "%s[run]\nsteps = %d\neval_every = 10\n",
                 k->settings, KR_STEPS);
        run_record *r = NULL;
        if ((rc = resolve(k->name, out, common, settings, c, &ini, err, err_len)))
            break;
        rc = build_run_record(&r, ini);
        free(ini);
        static const long steps[] = { 5, 10, 15, 20 };
        if (!rc)
            rc = add_rows(r, steps, 4, 4.0, 1e9, k->loss, k->loss + 0.0001 * k->seed);
        if (!rc && k->taken_windows)
            rc = add_routing(r, k->taken_windows);
        if (!rc)
            rc = write_record(r, out, k->name, KR_STEPS, err, err_len);
        free_run_record(&r);
    }
    free(c);
    return rc;
}

/* /model as the trainer records it, from the kind table's rows (into r
 * when record is set; the training FLOPs of a step in any case). */
static int add_model_records(run_record *r, bool record, const run_config *c, double *train_step)
{
    model_dims dims = config_dims(c);
    int L = c->n_layers;
    int64_t *lp = calloc((size_t)L, sizeof(int64_t)), total = (int64_t)dims.vocab * dims.d_model +
                                                             dims.d_model;
    double *fl = malloc(((size_t)L + 1) * sizeof(double));
    tensor_desc descs[16];
    int rc = lp && fl ? 0 : -ENOMEM;
    double all = model_head_flops_per_seq(&dims);
    for (int l = 0; !rc && l < L; l++) {
        const layer_kind *k = layer_kind_lookup(mode_kinds, c->layers[l].kind);
        int n = k->tensors(&c->layers[l], &dims, descs, 16);
        for (int t = 0; t < n; t++)
            lp[l] += tensor_numel(&descs[t]);
        total += lp[l];
        fl[l] = k->flops(&c->layers[l], &dims, l);
        all += fl[l];
    }
    if (!rc) {
        fl[L] = model_head_flops_per_seq(&dims);
        *train_step = 3.0 * all * c->batch;
    }
    unsigned long long one = 1, nl = (unsigned long long)L, nf = (unsigned long long)L + 1;
    if (!rc && record)
        rc = run_record_add_blob(r, "model/parameters", RUN_BLOB_INT64, 1, &one, &total, 0);
    if (!rc && record)
        rc = run_record_add_blob(r, "model/layer_parameters", RUN_BLOB_INT64, 1, &nl, lp, 0);
    if (!rc && record)
        rc = run_record_add_blob(r, "model/forward_flops", RUN_BLOB_DOUBLE, 1, &nf, fl, 0);
    if (!rc && record)
        rc = run_record_add_blob(r, "model/train_flops_per_step", RUN_BLOB_DOUBLE, 1, &one,
                                 train_step, 0);
    free(lp);
    free(fl);
    return rc;
}

int write_huge_runs(const char *dir, char *err, int err_len)
{
    char out[1024];
    int rc;
    run_config *c = begin_runs(dir, "huge", out, sizeof(out), &rc, err, err_len);
    if (!c)
        return rc;
    for (int seed = 1; !rc && seed <= 2; seed++) {
        char name[64], settings[512], *ini = NULL;
        snprintf(name, sizeof(name), "iso-1e21-d8192x64-moe-s%d", seed);
        snprintf(settings, sizeof(settings),
                 "[run]\nseed = %d\nflops_budget = 1e21\n[data]\nseq_len = 2048\nbatch = 8\n"
                 "[model]\nd_model = 8192\nn_heads = 64\nd_ff = 22016\nlayers = (dense, moe) x 32\n"
                 "[moe]\nexperts = 64\ntop_k = 2\n", seed);
        run_record *r = NULL;
        if ((rc = resolve(name, out, "", settings, c, &ini, err, err_len)))
            break;
        rc = build_run_record(&r, ini);
        free(ini);
        double step_flops = 0.0;
        if (!rc) /* seed 1: an older run file, without /model */
            rc = add_model_records(r, seed == 2, c, &step_flops);
        long planned = (long)(c->flops_budget / step_flops);
        const long steps[] = { planned / 2, planned };
        if (!rc)
            rc = add_rows(r, steps, 2, 3.6e6, step_flops, 1.2 + 0.01 * seed, 1.2 + 0.01 * seed);
        if (!rc)
            rc = write_record(r, out, name, planned, err, err_len);
        free_run_record(&r);
    }
    free(c);
    return rc;
}

/* The losses of an isoFLOP study with known optima: seed s of kind k has
 * loss 0.5 (ln N - ln N*_s)^2 + L*_{k,s}, ln N*_s = the middle of the sizes'
 * ln N + 0.1 (s - 2), L*_{dense,s} = 1.50 + 0.01 s, L*_{mod,s} = that + 0.02. */
/* The parameter count add_model_records wrote into r. */
static double record_params(const run_record *r)
{
    for (int i = 0; i < r->n_blobs; i++)
        if (!strcmp(r->blobs[i].path, "model/parameters"))
            return (double)*(const int64_t *)r->blobs[i].data;
    return 0.0;
}

int write_iso_runs(const char *dir, char *err, int err_len)
{
    static const int widths[3][2] = { { 16, 32 }, { 24, 48 }, { 32, 64 } }; /* d_model, d_ff */
    static const char *const kinds[2][2] = { { "dense", "dense x 2" }, { "mod", "dense, mod" } };
    char out[1024];
    int rc;
    run_config *c = begin_runs(dir, "iso", out, sizeof(out), &rc, err, err_len);
    if (!c)
        return rc;
    /* the sizes' parameters, for the middle of their ln N */
    double ln_lo = 0.0, ln_hi = 0.0;
    for (int pass = 0; !rc && pass < 2; pass++)
        for (int k = 0; !rc && k < 2; k++)
            for (int z = 0; !rc && z < 3; z++)
                for (int seed = 1; !rc && seed <= 3; seed++) {
                    char name[96], settings[512], *ini = NULL;
                    snprintf(name, sizeof(name), "iso-1e9-d%dx2-%s-s%d", widths[z][0],
                             kinds[k][0], seed);
                    snprintf(settings, sizeof(settings),
                             "[run]\nseed = %d\nflops_budget = 1e9\n[model]\nd_model = %d\n"
                             "n_heads = 2\nd_ff = %d\nlayers = %s\n[mod]\ncapacity = 0.25\n",
                             seed, widths[z][0], widths[z][1], kinds[k][1]);
                    if ((rc = resolve(name, out, "[data]\nseq_len = 8\nbatch = 4\n", settings, c,
                                      &ini, err, err_len)))
                        break;
                    double step_flops = 0.0;
                    run_record *r = NULL;
                    rc = build_run_record(&r, ini);
                    free(ini);
                    if (!rc)
                        rc = add_model_records(r, true, c, &step_flops);
                    double params = rc ? 0.0 : record_params(r);
                    if (pass == 0) { /* the range of ln N over the dense sizes */
                        if (k == 0 && z == 0)
                            ln_lo = log(params);
                        if (k == 0 && z == 2)
                            ln_hi = log(params);
                        free_run_record(&r);
                        continue;
                    }
                    double x_opt = 0.5 * (ln_lo + ln_hi) + 0.1 * (seed - 2);
                    double loss_opt = 1.50 + 0.01 * seed + 0.02 * k;
                    double dx = log(params) - x_opt, loss = 0.5 * dx * dx + loss_opt;
                    long planned = (long)(c->flops_budget / step_flops);
                    const long steps[] = { planned / 2, planned };
                    if (!rc)
                        rc = add_rows(r, steps, 2, 10.0, step_flops, loss, loss);
                    if (!rc)
                        rc = write_record(r, out, name, planned, err, err_len);
                    free_run_record(&r);
                }
    free(c);
    return rc;
}

int write_ladder_runs(const char *dir, char *err, int err_len)
{
    static const double budgets[3] = { 1e9, 2e9, 4e9 };
    /* dense; mod at the loss dense reaches with twice its FLOPs; far below
     * every rung (8 times); short above every rung (a quarter) */
    static const char *const kinds[4] = { "dense", "mod", "far", "short" };
    static const double worth[4] = { 1.0, 2.0, 8.0, 0.25 };
    char out[1024], base[1100];
    int rc;
    run_config *c = begin_runs(dir, "ladder", out, sizeof(out), &rc, err, err_len);
    if (!c)
        return rc;
    for (int k = 0; !rc && k < 4; k++) {
        snprintf(base, sizeof(base), "%s/%s", out, kinds[k]);
        if (make_dir(base, err, err_len)) {
            rc = -1;
            break;
        }
        for (int b = 0; !rc && b < 3; b++)
            for (int seed = 1; !rc && seed <= 2; seed++) {
                if (k && b != 1)
                    continue; /* the routed ones at the middle budget only */
                char name[96], settings[512], *ini = NULL;
                snprintf(name, sizeof(name), "%s-%.0e-s%d", kinds[k], budgets[b], seed);
                snprintf(settings, sizeof(settings),
                         "[run]\nseed = %d\nflops_budget = %g\n[model]\nd_model = 16\n"
                         "n_heads = 2\nd_ff = 32\nlayers = %s\n[mod]\ncapacity = 0.25\n",
                         seed, budgets[b], k ? "dense, mod" : "dense x 2");
                if ((rc = resolve(name, base, "[data]\nseq_len = 8\nbatch = 4\n", settings, c, &ini,
                                  err, err_len)))
                    break;
                double step_flops = 0.0;
                run_record *r = NULL;
                rc = build_run_record(&r, ini);
                free(ini);
                if (!rc)
                    rc = add_model_records(r, true, c, &step_flops);
                long planned = (long)(c->flops_budget / step_flops);
                /* dense on the line L = 3 (C / 1e9)^-0.1 of its training FLOPs C;
                 * the others at the loss dense reaches with worth[k] times theirs */
                double C = step_flops * (double)planned * worth[k];
                double loss = 3.0 * pow(C / 1e9, -0.1);
                const long steps[] = { planned / 2, planned };
                if (!rc)
                    rc = add_rows(r, steps, 2, 10.0, step_flops, loss, loss);
                if (!rc)
                    rc = write_record(r, base, name, planned, err, err_len);
                free_run_record(&r);
            }
    }
    free(c);
    return rc;
}

int write_law_runs(const char *dir, bool partial, char *err, int err_len)
{
    static const double budgets[3] = { 1e9, 2e9, 4e9 };
    static const int widths[4][2] = { { 16, 32 }, { 24, 48 }, { 32, 64 }, { 48, 96 } };
    char out[1024];
    int rc;
    run_config *c = begin_runs(dir, partial ? "lawp" : "law", out, sizeof(out), &rc, err, err_len);
    if (!c)
        return rc;
    for (int b = 0; !rc && b < 3; b++)
        for (int z = 0; !rc && z < 4; z++)
            for (int seed = 1; !rc && seed <= 2; seed++) {
                char name[96], settings[512], *ini = NULL;
                snprintf(name, sizeof(name), "law-%.0e-d%d-s%d", budgets[b], widths[z][0], seed);
                snprintf(settings, sizeof(settings),
                         "[run]\nseed = %d\nflops_budget = %g\n[model]\nd_model = %d\n"
                         "n_heads = 2\nd_ff = %d\nlayers = dense x 2\n",
                         seed, budgets[b], widths[z][0], widths[z][1]);
                if ((rc = resolve(name, out, "[data]\nseq_len = 8\nbatch = 4\n", settings, c,
                                  &ini, err, err_len)))
                    break;
                double step_flops = 0.0;
                run_record *r = NULL;
                rc = build_run_record(&r, ini);
                free(ini);
                if (!rc)
                    rc = add_model_records(r, true, c, &step_flops);
                double params = rc ? 0.0 : record_params(r);
                long planned = (long)(c->flops_budget / step_flops);
                /* on the law of runfiles.h, D the tokens of the planned steps */
                double tokens = (double)planned * 4 * 8;
                double loss = LAW_E + LAW_A * pow(params, -LAW_ALPHA) + LAW_B * pow(tokens, -LAW_BETA);
                const long steps[] = { planned / 2, planned };
                /* partial: the largest budget's runs stopped half-way */
                int n_steps = partial && b == 2 ? 1 : 2;
                if (!rc)
                    rc = add_rows(r, steps, n_steps, 10.0, step_flops, loss, loss);
                if (!rc)
                    rc = write_record(r, out, name, planned, err, err_len);
                free_run_record(&r);
            }
    free(c);
    return rc;
}

int write_started_run(const char *dir, char *err, int err_len)
{
    char out[1024], sub[1100], path[1200];
    int rc;
    run_config *c = begin_runs(dir, "started", out, sizeof(out), &rc, err, err_len);
    if (!c)
        return rc;
    char *ini = NULL;
    run_record *r = NULL;
    double step_flops = 0.0;
    rc = resolve("mod-started", out, "[data]\nseq_len = 8\nbatch = 4\n",
                 "[run]\nseed = 3\nflops_budget = 2e9\n[model]\nd_model = 16\nn_heads = 2\n"
                 "d_ff = 32\nlayers = dense, mod\n[mod]\ncapacity = 0.25\n",
                 c, &ini, err, err_len);
    if (!rc)
        rc = build_run_record(&r, ini);
    free(ini);
    if (!rc)
        rc = add_model_records(r, true, c, &step_flops);
    snprintf(sub, sizeof(sub), "%s/mod-started", out);
    snprintf(path, sizeof(path), "%s/run.h5", sub);
    /* what a trainer has written before its first records piece: the header */
    if (!rc && !(rc = make_dir(sub, err, err_len)))
        rc = run_record_write_header(r, path, err, err_len);
    free_run_record(&r);
    free(c);
    return rc;
}

/* every parameter but the experts' (tensors with an expert dimension) */
static int shared_params(const run_config *c, double *out)
{
    model_dims dims = config_dims(c);
    double n = (double)dims.vocab * dims.d_model + dims.d_model;
    tensor_desc descs[32];
    for (int l = 0; l < c->n_layers; l++) {
        const layer_kind *k = layer_kind_lookup(mode_kinds, c->layers[l].kind);
        if (!k)
            return -EINVAL;
        int m = k->tensors(&c->layers[l], &dims, descs, 32);
        for (int t = 0; t < m; t++)
            if (!descs[t].expert_dim)
                n += (double)tensor_numel(&descs[t]);
    }
    *out = n;
    return 0;
}

int write_cluster_runs(const char *dir, char *err, int err_len)
{
    char out[1024];
    int rc;
    run_config *c = begin_runs(dir, "cluster", out, sizeof(out), &rc, err, err_len);
    if (!c)
        return rc;
    static const struct {
        const char *name;
        int ranks, d;
        double compute, comm, bytes;
        bool moe;
    } runs[] = { { "c-p1", 1, 32, 0.8, 0.0, 0.0, false }, { "c-p2", 2, 32, 0.5, 0.1, 1e6, false },
                 { "c-p4", 4, 32, 0.35, 0.2, 1.5e6, false }, { "o-p2", 2, 48, 0.5, 0.1, 1e6, false },
                 { "e-p1", 1, 32, 0.8, 0.0, 0.0, true }, { "e-p2", 2, 32, 0.5, 0.1, 5e5, true } };
    for (size_t i = 0; !rc && i < sizeof(runs) / sizeof(runs[0]); i++) {
        char settings[256], *ini = NULL;
        snprintf(settings, sizeof(settings), "[run]\nsteps = 5\n[model]\nd_model = %d\n"
                 "n_heads = 2\nd_ff = 64\nlayers = %s\n%s", runs[i].d,
                 runs[i].moe ? "dense, moe" : "dense x 2", runs[i].moe ? "[moe]\nexperts = 2\n" : "");
        run_record *r = NULL;
        if ((rc = resolve(runs[i].name, out, "[data]\nseq_len = 8\nbatch = 4\n", settings, c,
                          &ini, err, err_len)))
            break;
        double bytes = runs[i].bytes;
        if (runs[i].moe && runs[i].ranks > 1) { /* the all-reduce of the shared gradients too */
            double shared = 0;
            rc = shared_params(c, &shared);
            bytes += 2.0 * (runs[i].ranks - 1) / runs[i].ranks * 4.0 * shared;
        }
        rc = build_run_record(&r, ini);
        free(ini);
        if (!rc)
            r->prov.ranks = runs[i].ranks;
        for (int s = 1; !rc && s <= 5; s++) {
            /* step 1 a warm-up the model leaves out */
            double w = s == 1 ? 9.0 : 1.0, row[32] = { 0 };
            row[0] = s;
            row[run_table_col(&r->metrics, "train_flops")] = 1e9 * s;
            row[run_table_col(&r->metrics, "compute_s")] = w * runs[i].compute;
            row[run_table_col(&r->metrics, "comm_s")] = w * runs[i].comm;
            row[run_table_col(&r->metrics, "comm_bytes")] = bytes;
            rc = run_table_append(&r->metrics, row);
        }
        if (!rc)
            rc = write_record(r, out, runs[i].name, 5, err, err_len);
        free_run_record(&r);
    }
    free(c);
    return rc;
}
