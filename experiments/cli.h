/* What the subcommands of mode-exp share: the command line, threads,
 * loading a checkpoint into a model. */
#ifndef MODE_EXPERIMENTS_CLI_H
#define MODE_EXPERIMENTS_CLI_H

#include "core/config/config.h"
#include "core/model/model.h"
#include "core/util/ctx.h"

#include <stdbool.h>

/* The most threads a rank may ask for. */
#define CLI_MAX_THREADS 4096

typedef struct cli {
    const char *config;
    int n_over;
    char **over;
    bool resume, overwrite, quiet, jsonl, json, ids;
    int threads;
    long ranks;
    long max_steps;
    const char *data, *mode, *prompt, *prompt_ids, *init_from;
    long windows, tokens, top_k, seed, steps;
    double temperature;
} cli;

/* Parse options and positional arguments (the first is the config or
 * checkpoint, the rest section.key=value overrides); --help prints usage and
 * exits 0.  Returns non-zero (after a message) on a bad command line. */
int parse_cli(cli *c, int argc, char **argv, const char *usage);
/* Threads per rank: --threads, else $OPENBLAS_NUM_THREADS, else cores /
 * ranks on the node (ranks x threads <= cores).  They become ctx->pool,
 * which runs the products (BLAS itself then keeps to one thread), attention
 * and the element-wise loops. */
int choose_threads(const cli *c, mode_ctx *ctx);
/* A checkpoint's config and parameters in a model for nseq sequences; with
 * sharded each rank holds its share of the experts, else all of them.
 * Collective. */
int load_checkpoint_model(const char *path, run_config *cfg, model **m, int nseq, mode_ctx *ctx,
                          bool sharded, char *err, int err_len);

/* A failure where other ranks may wait in a collective this rank will not
 * reach (docs/robustness.md): one line "mode-exp: MSG" on stderr, then
 * every rank ends (MPI_Abort). */
void cli_fatal_stop(mode_ctx *ctx, const char *msg);

int cmd_sample(mode_ctx *ctx, int argc, char **argv);
int cmd_bench(mode_ctx *ctx, int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_sweep(mode_ctx *ctx, int argc, char **argv);

#endif
