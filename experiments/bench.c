/* mode-exp bench: time training steps of a config on random tokens, beside
 * cblas_sgemm measured in the same run at the same thread count. */
#include "experiments/cli.h"
#include "experiments/json.h"

#include "core/comm/comm.h"
#include "core/kernels/bf16.h"
#include "core/kernels/matmul.h"
#include "core/rng/pcg32.h"
#include "core/rng/streams.h"
#include "core/train/optim.h"
#include "core/train/shard.h"
#include "core/train/step.h"
#include "core/util/pool.h"
#include "moe/registry.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char usage_bench[] =
    "usage: mode-exp bench CONFIG.ini [section.key=value ...] [--steps N] [--json] [--threads N]\n"
    "  Times N training steps (default 10) after 2 warm-up steps on random tokens and\n"
    "  prints tokens/s, steps/s, training GFLOP/s (nominal and executed, MODEL.md), the\n"
    "  ratio to cblas_sgemm GFLOP/s measured in the same run at the model's shapes and\n"
    "  the same threads (summed over ranks, the better of a measurement before and\n"
    "  one after the steps; with run.precision=bf16 also the bf16 products' own\n"
    "  GFLOP/s and the path they took: amx, avx512-bf16 or emulated, forced with\n"
    "  MODE_BF16_KERNEL), the time by phase, the peak RSS and the\n"
    "  activations, caches and work space resident after the warm-up steps (the\n"
    "  resident memory then, less what was resident before the model was built and\n"
    "  the parameter state), and the Adam moments a rank keeps (1/P of the shared\n"
    "  tensors' with [optim] shard): allocated, and measured as the resident memory\n"
    "  that freeing them gives back.\n";

static const char *const phase_names[PHASE_COUNT] = {
    "matmul", "attention", "routing", "experts", "comm", "optimizer", "other",
};

typedef struct bench_result {
    double step_s, tokens_s, gflops_nominal, gflops_executed, sgemm, bf16;
    double phase[PHASE_COUNT];
    double rss_mb, param_mb, expert_mb, act_mb;
    double optim_mb, optim_rss_mb; /* the Adam moments: allocated, and measured resident */
} bench_result;

/* Resident memory now, MiB (/proc/self/statm; 0 where there is none). */
static double current_rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f)
        return 0.0;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static int time_steps(model *m, const shard_plan *sp, mode_ctx *ctx, const run_config *cfg,
                      int steps, bench_result *br)
{
    int S = cfg->seq_len, local = cfg->batch / ctx->size;
    token_t *tok = malloc((size_t)local * (S + 1) * sizeof(token_t));
    if (!tok)
        return -ENOMEM;
    optim_cfg oc = optim_of_config(cfg);
    oc.total_steps = steps + 2;
    double t = 0.0, executed = 0.0;
    int rc = 0;
    for (int s = 0; s < steps + 2 && !rc; s++) {
        pcg32 r;
        pcg32_keyed(&r, cfg->seed, PCG_KEY_BENCH, (uint64_t)s, (uint64_t)ctx->rank);
        for (int i = 0; i < local * (S + 1); i++)
            tok[i] = (token_t)pcg32_bounded(&r, (uint32_t)cfg->vocab);
        if (s == 2) { /* two warm-up steps */
            memset(ctx->timers, 0, sizeof(ctx->timers));
            /* resident now, from before the model was built: every buffer
             * (allocated and zeroed up front, or touched by the steps) */
            br->act_mb = current_rss_mb();
        }
        comm_barrier(ctx->comm);
        double t0 = mode_now();
        batch b = { .tokens = tok, .nseq = local, .step = s, .seq0 = (long)ctx->rank * local,
                    .global_seqs = cfg->batch };
        step_out so;
        rc = train_step(m, sp, ctx, &b, &oc, s, NULL, &so);
        if (s >= 2) {
            t += mode_now() - t0;
            executed += MODE_TRAIN_FLOPS_PER_FORWARD * so.flops_executed; /* all ranks' */
        }
    }
    free(tok);
    double fps = model_flops_per_seq(m, NULL);
    br->step_s = t / steps;
    br->tokens_s = (double)cfg->batch * S / br->step_s;
    br->gflops_nominal = MODE_TRAIN_FLOPS_PER_FORWARD * fps * cfg->batch / br->step_s * 1e-9;
    br->gflops_executed = executed / t * 1e-9;
    double other = t;
    for (int p = 0; p < PHASE_COUNT; p++) {
        br->phase[p] = ctx->timers[p] / steps;
        other -= ctx->timers[p];
    }
    br->phase[PHASE_OTHER] += other / steps; /* what no phase claimed */
    return rc;
}

/* The yardsticks at the model's shapes: g[0], OpenBLAS's own sgemm with all
 * of the rank's threads (training then goes back to one BLAS thread under
 * the pool); g[1], in a bf16 run, the bf16 products on the pool. */
static void yardsticks(const mode_ctx *ctx, int rows, const model_dims *dims, int threads,
                       bool bf16, double *g)
{
    matmul_set_threads(threads);
    g[0] = matmul_measure_gflops(NULL, rows, dims->d_model, dims->d_ff, 3);
    matmul_set_threads(ctx->pool ? 1 : threads);
    matmul_exec x = { .pool = ctx->pool, .bf16 = true };
    g[1] = bf16 && ctx->pool ? matmul_measure_gflops(&x, rows, dims->d_model, dims->d_ff, 3) : 0.0;
}

int cmd_bench(mode_ctx *ctx, int argc, char **argv)
{
    cli c;
    static const cli_opts opts = { "bench", CLI_STEPS | CLI_JSON | CLI_THREADS };
    if (parse_cli(&c, argc - 2, argv + 2, usage_bench, &opts, ctx->rank))
        return 2;
    int steps = c.steps > 0 ? (int)c.steps : 10;
    run_config cfg;
    char err[1024] = "";
    int rc = config_load(&cfg, c.config, c.n_over, c.over, &mode_schema, ctx->size, err,
                         sizeof(err));
    if (!rc)
        rc = cli_check_overrides(&cfg, c.n_over, c.over, err, sizeof(err));
    /* every rank the same config (docs/robustness.md, "Ranks that disagree"),
     * or none measures: the forwards' collectives follow from it */
    bool apart = false; /* ranks started apart: a runtime failure, not a bad config */
    if (!(rc = comm_agree(ctx->comm, rc, err, sizeof(err)))) {
        char *keys = config_to_lines(&cfg);
        apart = (rc = comm_agree_text(ctx->comm, keys ? keys : "", err, sizeof(err))) != 0;
        free(keys);
    }
    if (rc) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp bench: %s\n", err);
        free(c.over);
        return apart ? 1 : 2;
    }
    model *m = NULL;
    model_dims dims = config_dims(&cfg);
    dims.ranks = ctx->size; /* each rank holds its own experts, as in training */
    dims.shard_optim = optim_of_config(&cfg).shard;
    dims.rank = ctx->rank;
    int threads = choose_threads(&c, ctx);
    bool bf16 = !strcmp(cfg.precision, "bf16");
    if (bf16)
        matmul_bf16_prepare();
    int rows = cfg.batch / ctx->size * cfg.seq_len;
    /* every rank measures at once: the machine's aggregate yardstick; first,
     * so that its buffers (and OpenBLAS's) are resident before the model's
     * baseline below */
    comm_barrier(ctx->comm);
    double g[4];
    yardsticks(ctx, rows, &dims, threads, bf16, g);
    /* The model's buffers are allocated and zeroed up front, so what the
     * steps add is nothing: the activations and work space are what is
     * resident after the warm-up steps beyond this baseline and the
     * parameter state (zeroed up front too: all of it resident). */
    double rss_base = current_rss_mb();
    rc = build_model(&m, &dims, cfg.layers, mode_kind_ops, cfg.batch / ctx->size, err,
                     sizeof(err));
    if ((rc = comm_agree(ctx->comm, rc, err, sizeof(err)))) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp bench: %s\n", err);
        free(c.over);
        free_model(&m);
        return 2;
    }
    ctx->seed = cfg.init_seed;
    model_init(m, cfg.init_seed);
    m->bf16 = bf16;
    bench_result br = { 0 };
    /* parameters and gradients whole; the moments whole, or this rank's
     * share with [optim] shard (model_dims shard_optim) */
    br.optim_mb = 2.0 * (double)m->n_moments * sizeof(float) / (1024.0 * 1024.0);
    br.param_mb = 2.0 * (double)m->n_params * sizeof(float) / (1024.0 * 1024.0) + br.optim_mb;
    shard_plan *sp = NULL;
    rc = build_shard_plan(&sp, m, ctx, optim_of_config(&cfg).bucket_kb * 256);
    if (!rc)
        rc = time_steps(m, sp, ctx, &cfg, steps, &br);
    free_shard_plan(&sp);
    comm_barrier(ctx->comm);
    /* the peak of training, before the yardstick's own buffers */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    br.act_mb -= rss_base + br.param_mb;
    int rss_kb = (int)ru.ru_maxrss, act_kb = br.act_mb > 0.0 ? (int)(br.act_mb * 1024.0) : 0;
    yardsticks(ctx, rows, &dims, threads, bf16, g + 2);
    comm_allreduce_sum_double(ctx->comm, g, 4);
    /* the better of before and after: the ratios err low, never high */
    br.sgemm = g[0] > g[2] ? g[0] : g[2];
    br.bf16 = g[1] > g[3] ? g[1] : g[3];
    /* the moments measured: the resident memory their freeing gives back
     * (malloc_trim returns the freed pages of the heap too) */
    malloc_trim(0); /* what else was freed goes first */
    double before_free = current_rss_mb();
    free(m->adam_m);
    free(m->adam_v);
    m->adam_m = m->adam_v = NULL;
    malloc_trim(0);
    double freed = before_free - current_rss_mb();
    int optim_kb = freed > 0.0 ? (int)(freed * 1024.0) : 0;
    comm_allreduce_max_int(ctx->comm, &rss_kb);
    comm_allreduce_max_int(ctx->comm, &act_kb);
    comm_allreduce_max_int(ctx->comm, &optim_kb);
    br.optim_rss_mb = optim_kb / 1024.0;
    br.act_mb = act_kb / 1024.0;
    br.rss_mb = rss_kb / 1024.0;
    /* the expert state this rank holds (parameters, gradients, both moments) */
    double expert_floats = 0.0;
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].desc.expert_dim)
            expert_floats += (double)m->tensors[t].numel;
    br.expert_mb = 4.0 * expert_floats * sizeof(float) / (1024.0 * 1024.0);
    if (rc && ctx->rank == 0)
        fprintf(stderr, "mode-exp bench: a step failed: %s\n", strerror(-rc));
    /* a figure that is not finite (a step timed at 0 s, a yardstick that
     * measured nothing) is an error, not an output */
    const struct {
        const char *name;
        double v;
    } fig[] = { { "the step time", br.step_s }, { "tokens/s", br.tokens_s },
                { "nominal GFLOP/s", br.gflops_nominal },
                { "executed GFLOP/s", br.gflops_executed },
                { "the ratio to sgemm", br.gflops_nominal / br.sgemm } };
    for (size_t i = 0; !rc && i < sizeof(fig) / sizeof(fig[0]); i++)
        if (!isfinite(fig[i].v) || fig[i].v <= 0.0) {
            if (ctx->rank == 0)
                fprintf(stderr, "mode-exp bench: %s is %g, not a finite positive number: "
                        "nothing measured to print\n", fig[i].name, fig[i].v);
            rc = -ERANGE;
        }
    if (!rc && ctx->rank == 0) {
        if (c.json) {
            json_line j = json_begin(stdout, ", ");
            json_str(&j, "config", c.config);
            json_str(&j, "precision", cfg.precision);
            json_str(&j, "bf16_kernel", bf16 ? bf16_path_name(bf16_path_current()) : "none");
            json_int(&j, "ranks", ctx->size);
            json_int(&j, "threads", threads);
            json_int(&j, "steps", steps);
            json_num(&j, "step_s", 6, br.step_s);
            json_num(&j, "tokens_per_s", 6, br.tokens_s);
            json_num(&j, "steps_per_s", 6, 1.0 / br.step_s);
            json_num(&j, "gflops_nominal", 6, br.gflops_nominal);
            json_num(&j, "gflops_executed", 6, br.gflops_executed);
            json_num(&j, "sgemm_gflops", 6, br.sgemm);
            json_num(&j, "ratio_nominal", 4, br.gflops_nominal / br.sgemm);
            json_num(&j, "ratio_executed", 4, br.gflops_executed / br.sgemm);
            json_fixed(&j, "peak_rss_mb", 1, br.rss_mb);
            json_num(&j, "param_state_mb", 6, br.param_mb);
            json_num(&j, "expert_state_mb", 6, br.expert_mb);
            json_num(&j, "optim_state_mb", 6, br.optim_mb);
            json_fixed(&j, "optim_resident_mb", 1, br.optim_rss_mb);
            json_fixed(&j, "activation_mb", 1, br.act_mb);
            json_num(&j, "bf16_gflops", 6, br.bf16);
            for (int p = 0; p < PHASE_COUNT; p++) {
                char key[40];
                snprintf(key, sizeof(key), "%s_s", phase_names[p]);
                json_num(&j, key, 6, br.phase[p]);
            }
            json_end(&j);
        } else {
            printf("%s: %d rank(s) x %d thread(s), %s%s, %d steps\n", c.config, ctx->size,
                   threads, bf16 ? "bf16 products on the path " : "fp32",
                   bf16 ? bf16_path_name(bf16_path_current()) : "", steps);
            printf("  %.1f ms/step  %.2f steps/s  %.0f tokens/s\n", br.step_s * 1e3,
                   1.0 / br.step_s, br.tokens_s);
            printf("  training GFLOP/s: nominal %.1f, executed %.1f; sgemm %.1f GFLOP/s in the "
                   "same run: %.0f%% (nominal), %.0f%% (executed)\n",
                   br.gflops_nominal, br.gflops_executed, br.sgemm,
                   100.0 * br.gflops_nominal / br.sgemm, 100.0 * br.gflops_executed / br.sgemm);
            if (bf16)
                printf("  the bf16 products alone at the model's shapes: %.1f GFLOP/s; training at "
                       "%.0f%% of that (nominal)\n", br.bf16, 100.0 * br.gflops_nominal / br.bf16);
            printf("  per step (rank 0):");
            for (int p = 0; p < PHASE_COUNT; p++)
                printf(" %s %.1f ms", phase_names[p], br.phase[p] * 1e3);
            printf("\n  peak RSS %.0f MiB (parameters, gradients and Adam moments %.0f MiB, of "
                   "which this rank's experts %.0f MiB; activations and work space %.0f MiB)\n",
                   br.rss_mb, br.param_mb, br.expert_mb, br.act_mb);
            printf("  Adam moments %.1f MiB a rank%s (resident: %.1f MiB, measured as what freeing "
                   "them gave back)\n", br.optim_mb, m->optim_shards > 1 ? " ([optim] shard)" : "",
                   br.optim_rss_mb);
        }
    }
    free_model(&m);
    free(c.over);
    return rc ? 1 : 0;
}
