/* mode-exp: train, evaluate and count FLOPs of MoD / MoE / MoDE models.
 *   mode-exp CONFIG.ini [section.key=value ...] [--resume] [--quiet] [--jsonl]
 *            [--no-tensorboard]
 *   mode-exp eval CKPT [--data PATH] [--mode topk|causal] [--windows N] [--json]
 *   mode-exp flops CONFIG.ini [section.key=value ...]
 *   mode-exp sample CKPT --prompt TEXT --tokens N [--temperature T] [--top-k K] [--seed S]
 *   mode-exp export CKPT OUT [--with-optim]
 * Every subcommand takes --help. */
#include "core/comm/comm.h"
#include "core/config/config.h"
#include "core/io/checkpoint.h"
#include "core/io/runfile.h"
#include "core/kernels/bf16.h"
#include "core/kernels/matmul.h"
#include "core/rng/pcg32.h"
#include "core/train/trainer.h"
#include "core/util/file.h"
#include "core/util/pool.h"
#include "experiments/cli.h"
#include "experiments/json.h"
#include "moe/registry.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static const char usage_main[] =
    "usage: mode-exp CONFIG.ini [section.key=value ...] [options]   train\n"
    "       mode-exp eval CKPT [options]                              held-out loss\n"
    "       mode-exp flops CONFIG.ini [section.key=value ...]         FLOPs per layer and step\n"
    "       mode-exp sample CKPT --prompt TEXT --tokens N [options]   generate text\n"
    "       mode-exp bench CONFIG.ini [section.key=value ...] [--steps N] [--json]\n"
    "       mode-exp sweep SWEEP.ini [section.key=value ...] [options]   a grid or isoFLOP sweep\n"
    "       mode-exp plan CONFIG.ini [section.key=value ...] [--ranks P]  memory per rank\n"
    "       mode-exp tokenize TEXT OUT --vocab V [options]            a SentencePiece tokenizer\n"
    "       mode-exp export CKPT OUT [--with-optim]                   to safetensors and back\n"
    "       mode-exp score SOURCE [--out PATH]                        documents' difficulty\n"
    "       mode-exp --version                                        build, libraries, kernels\n"
    "       mode-exp --help-keys [--markdown]                         the declared keys\n"
    "\n"
    "Training options:\n"
    "  --resume       continue the run in <run.out>/<run.name>/ from its checkpoint\n"
    "  --overwrite    start anew in a folder that holds a run (replacing it); without\n"
    "                 --resume or --overwrite, such a folder is refused, untouched\n"
    "  --init-from CKPT  a new run whose parameters start from CKPT's (longer training,\n"
    "                 fine-tuning, upcycling), with this config: tensors CKPT has are read\n"
    "                 (same shapes), experts it lacks start as its dense MLP (each a copy,\n"
    "                 or a slice when narrower), the rest (gates, routers) fresh\n"
    "  --upcycle-noise S   with --init-from: noise of S x the init std on copied experts\n"
    "  --upcycle-reinit R  with --init-from: a share R of each copied expert's hidden\n"
    "                 units drawn afresh (Drop-Upcycling); docs/upcycling.md\n"
    "  --quiet        print nothing but errors\n"
    "  --jsonl        one JSON object per logged step instead of text\n"
    "  --no-tensorboard  no TensorBoard event file beside run.h5 (written by default:\n"
    "                 `tensorboard --logdir <run.out>` follows the run; docs/tensorboard.md)\n"
    "  --threads N    threads per rank (default: $OPENBLAS_NUM_THREADS, else cores /\n"
    "                 ranks on the node); eval, sample, bench and sweep take it too\n"
    "  --max-steps N  stop after N steps of this invocation (with a checkpoint);\n"
    "                 --resume goes on exactly as an uninterrupted run would\n"
    "  --help         this text\n"
    "Run under MPI with `mpirun -n P mode-exp ...`; without mpirun it is one rank.\n"
    "Config keys and the layer-spec table are in the README.\n";

static const char usage_flops[] =
    "usage: mode-exp flops CONFIG.ini [section.key=value ...]\n"
    "  Forward FLOPs per sequence for every layer, the LM head, and per training step\n"
    "  (3 x forward x batch), nominal as MODEL.md counts them.\n";


typedef struct log_opts {
    bool quiet, jsonl;
    mode_ctx *ctx;
} log_opts;

static void print_log(const train_log *l, void *user)
{
    const log_opts *o = user;
    if (o->quiet || ferror(stdout)) /* a closed pipe: the log stops, the run goes on */
        return;
    if (o->jsonl) {
        json_line j = json_begin(stdout, ",");
        json_int(&j, "step", l->step);
        json_int(&j, "total", l->total);
        if (!l->eval_late) { /* a late evaluation's step had its line before the stop */
            json_num(&j, "loss", 6, l->loss);
            json_num(&j, "ce", 6, l->ce);
            json_num(&j, "aux", 6, l->aux);
            json_num(&j, "lr", 6, l->lr);
            json_num(&j, "grad_norm", 6, l->grad_norm);
            json_fixed(&j, "tokens_per_s", 1, l->tokens_per_s);
            json_fixed(&j, "gflops", 2, l->gflops);
            json_fixed(&j, "eta_s", 1, l->eta_s);
        }
        json_fixed(&j, "wall_s", 2, l->wall_s);
        if (l->has_eval) {
            json_num(&j, "eval_topk", 6, l->eval_topk);
            json_num(&j, "eval_causal", 6, l->eval_causal);
            json_num(&j, "eval_se", 4, l->eval_se);
            json_int(&j, "eval_windows", l->eval_windows);
            json_num(&j, "eval_bpb", 6, l->eval_bpb);
        }
        json_end(&j);
    } else {
        char eta[32];
        mode_format_duration(eta, sizeof(eta), l->eta_s);
        if (!l->eval_late)
            printf("step %6ld/%ld  loss %.4f  lr %.2e  |g| %.3f  %7.0f tok/s  %6.1f GFLOP/s  "
                   "ETA %s\n", l->step, l->total, l->loss, l->lr, l->grad_norm, l->tokens_per_s,
                   l->gflops, eta);
        if (l->has_eval) {
            char bpb[48] = "";
            if (isfinite(l->eval_bpb))
                snprintf(bpb, sizeof(bpb), "  %.4f bits per byte", l->eval_bpb);
            printf("eval   %6ld  held-out loss: topk %.4f  causal %.4f  (+- %.4f, %ld windows)%s\n",
                   l->step, l->eval_topk, l->eval_causal, l->eval_se, l->eval_windows, bpb);
        }
    }
    fflush(stdout);
}

static void print_init_note(const char *summary, void *user)
{
    const log_opts *o = user;
    if (o->quiet || o->jsonl || ferror(stdout))
        return;
    printf("# --init-from: %s\n", summary);
    fflush(stdout);
}

static void print_checkpoint(long step, double seconds, void *user)
{
    const log_opts *o = user;
    if (o->quiet || ferror(stdout)) /* a closed pipe: the log stops, the run goes on */
        return;
    if (o->jsonl) {
        json_line j = json_begin(stdout, ",");
        json_int(&j, "checkpoint", step);
        json_fixed(&j, "seconds", 3, seconds);
        json_end(&j);
    } else
        printf("ckpt   %6ld  written in %.2f s\n", step, seconds);
    fflush(stdout);
}

static int cmd_train(mode_ctx *ctx, int argc, char **argv)
{
    cli c;
    static const cli_opts opts = { "training", CLI_RESUME | CLI_OVERWRITE | CLI_INIT_FROM |
                                   CLI_UPCYCLE_NOISE | CLI_UPCYCLE_REINIT | CLI_QUIET |
                                   CLI_JSONL | CLI_THREADS | CLI_MAX_STEPS |
                                   CLI_NO_TENSORBOARD };
    if (parse_cli(&c, argc - 1, argv + 1, usage_main, &opts, ctx->rank))
        return 2;
    run_config cfg;
    char err[1024] = "";
    int rc = config_load(&cfg, c.config, c.n_over, c.over, &mode_schema, ctx->size, err,
                         sizeof(err));
    if (!rc)
        rc = cli_check_overrides(&cfg, c.n_over, c.over, err, sizeof(err));
    /* a config file that one rank cannot read (another file there): every
     * rank stops, with that rank's message */
    if ((rc = comm_agree(ctx->comm, rc, err, sizeof(err)))) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp: %s\n", err);
        free(c.over);
        return 2;
    }
    if (ctx->rank == 0)
        cli_note_unread(&cfg, c.config);
    int threads = choose_threads(&c, ctx);
    if (ctx->rank == 0 && !c.quiet && !c.jsonl) {
        char *ini = config_to_ini(&cfg);
        printf("# mode-exp %s: %d rank(s) x %d thread(s)%s%s\n# resolved config:\n%s\n",
               c.config, ctx->size, threads,
               strcmp(cfg.precision, "bf16") ? "" : ", bf16 products on the path ",
               strcmp(cfg.precision, "bf16") ? "" : bf16_path_name(bf16_path_current()),
               ini ? ini : "");
        free(ini);
    }
    log_opts lo = { .quiet = c.quiet, .jsonl = c.jsonl, .ctx = ctx };
    trainer_opts o = { .resume = c.resume, .overwrite = c.overwrite, .init_from = c.init_from,
                       .no_tensorboard = c.no_tensorboard,
                       .upcycle_noise = c.upcycle_noise, .upcycle_reinit = c.upcycle_reinit,
                       .init_note = print_init_note,
                       .log = print_log, .log_user = &lo, .argc = argc,
                       .argv = argv, .blas_threads = threads,
                       .max_steps = c.max_steps, .fatal = cli_fatal_stop,
                       .checkpoint = print_checkpoint };
    rc = train(&cfg, mode_kind_ops, ctx, &o, err, sizeof(err));
    if (rc && ctx->rank == 0)
        fprintf(stderr, "mode-exp: %s\n", err[0] ? err : strerror(-rc));
    if (!rc && ctx->rank == 0 && !c.quiet && !c.jsonl) {
        char dir[MODE_PATH_MAX], run_h5[MODE_PATH_MAX], ckpt[MODE_PATH_MAX];
        run_paths(&cfg, dir, run_h5, ckpt, sizeof(dir));
        printf("# wrote %s and %s\n", run_h5, ckpt);
    }
    free(c.over);
    /* stopped by a signal, checkpoint written: 128 + the signal, as shells do */
    return rc == -EINTR ? 128 + train_stop_signal() : rc ? 1 : 0;
}

static int cmd_flops(int argc, char **argv)
{
    cli c;
    static const cli_opts opts = { "flops", 0 };
    if (parse_cli(&c, argc - 2, argv + 2, usage_flops, &opts, 0))
        return 2;
    run_config cfg;
    char err[1024];
    if (config_load(&cfg, c.config, c.n_over, c.over, &mode_schema, 0, err, sizeof(err)) ||
        cli_check_overrides(&cfg, c.n_over, c.over, err, sizeof(err))) {
        fprintf(stderr, "mode-exp: %s\n", err);
        free(c.over);
        return 2;
    }
    cli_note_unread(&cfg, c.config);
    model_dims dims = config_dims(&cfg);
    double per_layer[MODE_MAX_LAYERS];
    double total = config_flops_per_seq(&cfg, per_layer);
    double dense_layer = dense_kind.flops(&cfg.layers[0], &dims, 0);
    double dense = model_head_flops_per_seq(&dims) + cfg.n_layers * dense_layer;
    printf("%-6s %-12s %16s %14s\n", "layer", "kind", "forward/seq", "vs dense");
    for (int l = 0; l < cfg.n_layers; l++)
        printf("%-6d %-12s %16.4g %13.1f%%\n", l, cfg.layers[l].kind, per_layer[l],
               100.0 * per_layer[l] / dense_layer);
    printf("%-6s %-12s %16.4g\n", "head", "lm head", model_head_flops_per_seq(&dims));
    double fwd_step = total * cfg.batch, train_step = config_train_flops_per_step(&cfg);
    printf("forward per sequence    %.4g FLOPs (%.1f%% of the same shape all dense)\n", total,
           100.0 * total / dense);
    printf("forward per step        %.4g FLOPs (batch %d)\n", fwd_step, cfg.batch);
    printf("training per step       %.4g FLOPs (%g x forward)\n", train_step,
           MODE_TRAIN_FLOPS_PER_FORWARD);
    long steps = config_planned_steps(&cfg, train_step);
    if (steps < 0) {
        fprintf(stderr, "mode-exp flops: run.flops_budget %g buys more than the %ld steps a run "
                "may take (one costs %g FLOPs)\n", cfg.flops_budget, MODE_MAX_STEPS, train_step);
        free(c.over);
        return 2;
    }
    printf("training steps          %ld%s\n", steps,
           cfg.flops_budget > 0 ? " (from run.flops_budget)" : "");
    long steady = 0;
    config_train_flops_at(&cfg, 0, &steady);
    if (steady > 0) /* a capacity schedule: its steps cost more, the budget sums them */
        printf("first step              %.4g FLOPs (a schedule until step %ld)\n",
               config_train_flops_at(&cfg, 0, &steady), steady);
    printf("training in all         %.4g FLOPs\n", config_train_flops_through(&cfg, steps));
    free(c.over);
    return 0;
}

/* What a run's provenance records about the build and the machine: the
 * kernel sets (OpenBLAS's, chosen at run time from the CPU and
 * OPENBLAS_CORETYPE) are what the bits of a run depend on (README, "What is
 * reproducible"). */
static int cmd_version(void)
{
    provenance p;
    provenance_collect(&p, 1, 1, bf16_path_name(bf16_path_current()), 0, NULL);
    printf("mode-exp %s (%s)\n", p.version, p.commit);
    printf("openblas: %s\n", p.openblas);
    printf("openblas kernels: %s\n", openblas_get_corename());
    printf("mpi: %s\nhdf5: %s\ncpu: %s\n", p.mpi, p.hdf5, p.cpu);
    printf("bf16 products: %s (paths here:", p.bf16_kernel);
    const char *sep = " ";
    for (int path = BF16_PATH_COUNT - 1; path >= 0; path--)
        if (bf16_path_available((bf16_path)path)) {
            printf("%s%s", sep, bf16_path_name((bf16_path)path));
            sep = ", ";
        }
    printf("; MODE_BF16_KERNEL chooses one)\n");
    return 0;
}

/* What a command printed must have arrived: a full disk or a closed pipe
 * behind standard output turns a success into exit 1 (docs/robustness.md).
 * Training goes on when its log cannot be written, and says so at the end. */
static int finish_output(int rc, int argc, char **argv)
{
    static const char *const subcommands[] = { "eval", "flops", "sample", "bench", "sweep", "tokenize",
                                               "score", "plan", "export", "--version", "version", "--help", "-h",
                                               "help", "--help-keys", NULL };
    const char *sub = NULL;
    for (int i = 0; argc >= 2 && subcommands[i]; i++)
        if (!strcmp(argv[1], subcommands[i]))
            sub = subcommands[i];
    char err[256];
    if (file_close_stdout(err, sizeof(err)) == 0)
        return rc;
    if (sub)
        fprintf(stderr, "mode-exp %s: %s\n", sub, err);
    else
        fprintf(stderr, "mode-exp: %s; the training went on without its log%s\n", err,
                rc ? "" : " and its files (run.h5, ckpt.h5) are whole");
    return rc ? rc : 1;
}

static int run_command(int argc, char **argv);

/* The arguments, one a line, compared over the ranks (comm_agree_text);
 * --threads N may differ (threads never change the bits: README, "What is
 * reproducible"). */
static int agree_command_line(mode_ctx *ctx, int argc, char **argv, char *why, int why_len)
{
    size_t cap = 64;
    for (int i = 1; i < argc; i++)
        cap += strlen(argv[i]) + 32;
    char *text = malloc(cap);
    if (!text) {
        snprintf(why, (size_t)why_len, "out of memory");
        return -ENOMEM;
    }
    text[0] = '\0';
    for (int i = 1, k = 1, at = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--threads")) {
            i++;
            continue;
        }
        at += snprintf(text + at, cap - (size_t)at, "argument %d=%s\n", k++, argv[i]);
    }
    int rc = comm_agree_text(ctx->comm, text, why, why_len);
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    /* a closed pipe behind stdout stops the printing, never the program:
     * writes then fail with EPIPE, and finish_output reports it */
    signal(SIGPIPE, SIG_IGN);
    return finish_output(run_command(argc, argv), argc, argv);
}

static int run_command(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    /* the bf16 path, before any thread: MODE_BF16_KERNEL, else the fastest;
     * a path this CPU lacks stops every command, on every rank alike */
    char path_err[256];
    int path_rc = bf16_path_from_env(path_err, sizeof(path_err));
    if ((!strcmp(argv[1], "--help-keys") && argc > 2 &&
         (argc > 3 || strcmp(argv[2], "--markdown"))) ||
        ((!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) && argc > 2)) {
        /* what follows would be ignored */
        fprintf(stderr, "mode-exp %s: %s would be ignored: %s takes %s\n", argv[1],
                argc > 3 && !strcmp(argv[2], "--markdown") ? argv[3] : argv[2], argv[1],
                strcmp(argv[1], "--help-keys") ? "nothing more" : "only --markdown, once");
        return 2;
    }
    if (!strcmp(argv[1], "--help-keys"))
        /* every declared key (the kinds', the optimizer's), from the one set
         * of declarations: the README's table is this --markdown */
        return config_describe_keys(stdout, &mode_schema,
                                    argc > 2 && !strcmp(argv[2], "--markdown")) ? 1 : 0;
    if (!strcmp(argv[1], "tokenize"))
        return cmd_tokenize(argc, argv);
    if (!strcmp(argv[1], "score"))
        return cmd_score(argc, argv);
    if (!strcmp(argv[1], "flops") || !strcmp(argv[1], "plan") || !strcmp(argv[1], "--version") ||
        !strcmp(argv[1], "version")) {
        if (path_rc) {
            fprintf(stderr, "mode-exp: %s\n", path_err);
            return 2;
        }
        return !strcmp(argv[1], "flops")  ? cmd_flops(argc, argv)
               : !strcmp(argv[1], "plan") ? cmd_plan(argc, argv)
                                          : cmd_version();
    }
    /* Oversubscribed ranks must yield the core while they wait, or they steal
     * it from the BLAS threads doing the work (unless the user chose). */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    mode_ctx ctx = { 0 };
    if (comm_init(&ctx.comm, &argc, &argv)) {
        fprintf(stderr, "mode-exp: MPI initialisation failed\n");
        return 1;
    }
    ctx.rank = comm_rank(ctx.comm);
    ctx.size = comm_size(ctx.comm);
    if (path_rc) {
        if (ctx.rank == 0)
            fprintf(stderr, "mode-exp: %s\n", path_err);
        comm_finalize(&ctx.comm);
        return 2;
    }
    /* every rank on the same command line (docs/robustness.md, "Ranks that
     * disagree"): an option that one rank lacks would take it down another
     * path, into other collectives */
    char why[1024];
    if (agree_command_line(&ctx, argc, argv, why, sizeof(why))) {
        if (ctx.rank == 0)
            fprintf(stderr, "mode-exp: %s\n", why);
        comm_finalize(&ctx.comm);
        return 1;
    }
    int rc = !strcmp(argv[1], "eval")     ? cmd_eval(&ctx, argc, argv)
             : !strcmp(argv[1], "sample") ? cmd_sample(&ctx, argc, argv)
             : !strcmp(argv[1], "bench")  ? cmd_bench(&ctx, argc, argv)
             : !strcmp(argv[1], "sweep")  ? cmd_sweep(&ctx, argc, argv)
             : !strcmp(argv[1], "export") ? cmd_export(&ctx, argc, argv)
                                          : cmd_train(&ctx, argc, argv);
    free_thread_pool(&ctx.pool);
    comm_finalize(&ctx.comm);
    return rc;
}
