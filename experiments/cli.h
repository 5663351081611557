/* What the subcommands of mode-exp share: the command line, threads,
 * loading a checkpoint into a model. */
#ifndef MODE_EXPERIMENTS_CLI_H
#define MODE_EXPERIMENTS_CLI_H

#include "core/config/config.h"
#include "core/io/checkpoint.h"
#include "core/model/route.h"
#include "core/util/file.h"
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
    const char *routing, *routing_layers, *record, *csv, *dial;
    long windows, tokens, top_k, seed, steps;
    long bench; /* sample --bench R: R timed sequences */
    double temperature;
    double upcycle_noise, upcycle_reinit;
} cli;

/* Parse options and positional arguments (the first is the config or
 * checkpoint, the rest section.key=value overrides); --help prints usage and
 * exits 0.  Returns non-zero (after a message) on a bad command line. */
int parse_cli(cli *c, int argc, char **argv, const char *usage);
/* OPENBLAS_NUM_THREADS as --threads reads it: unset, empty or 0 gives 0
 * (as many as the cores allow); else an integer up to CLI_MAX_THREADS, or
 * a message and -EINVAL (a usage error: exit 2). */
int cli_env_threads(int *threads);
/* Threads per rank: --threads, else $OPENBLAS_NUM_THREADS, else cores /
 * ranks on the node (ranks x threads <= cores).  They become ctx->pool,
 * which runs the products (BLAS itself then keeps to one thread), attention
 * and the element-wise loops. */
int choose_threads(const cli *c, mode_ctx *ctx);
/* A checkpoint's config and parameters in a model for nseq sequences; with
 * sharded each rank holds its share of the experts, else all of them.
 * over[0..n_over): "section.key=value" overrides of the kinds' keys (the
 * compute dial: capacities, top_k, capacity factors, the causal rule's
 * settings; layer.N.key for one layer), checked as a config's are; a key of
 * [run], [data], [model] or [optim] or of a section no layer reads, or one
 * that changes a layer's tensors, is refused naming the rule.  The seal,
 * the config and the tensors are read through one open (checkpoint_open):
 * one version of a file a live run replaces.  meta (may be NULL) gets that version's
 * metadata (ckpt_meta_clear it).  Collective. */
int load_checkpoint_model(const char *path, run_config *cfg, model **m, int nseq, mode_ctx *ctx,
                          bool sharded, int n_over, char *const *over, ckpt_meta *meta,
                          char *err, int err_len);

/* The tokenizer of a checkpoint's run (data.tokenizer): "" in path when
 * none; else tokenizer.model beside the checkpoint (the run keeps a copy
 * there), or the config's path, whose fingerprint must be the one the
 * checkpoint recorded (recorded: its ckpt_meta data, of the version
 * loaded; a mismatch is refused naming both). */
int checkpoint_tokenizer(const char *ckpt, const run_config *cfg, const char *recorded,
                         char *path, size_t len, char *err, int err_len);

/* --routing LIST (policy names, "replay:FILE" or "replay:FILE@STEP") and
 * --routing-layers "1,3" of a model of n_layers layers. */
typedef struct routing_cli {
    int policies[ROUTE_COUNT];  /* besides learned, each once, in the order given */
    int n;
    char replay[MODE_PATH_MAX]; /* ROUTE_REPLAY's file */
    long replay_step;           /* its step, or -1: the last recorded */
    unsigned char layers[MODE_MAX_LAYERS];
    bool has_layers;            /* --routing-layers given: layers[] says where */
} routing_cli;
/* 0, or -EINVAL after a message naming the bad part. */
int parse_routing(const cli *c, int n_layers, routing_cli *r);

/* A failure where other ranks may wait in a collective this rank will not
 * reach (docs/robustness.md): one line "mode-exp: MSG" on stderr, then
 * every rank ends (MPI_Abort). */
void cli_fatal_stop(mode_ctx *ctx, const char *msg);

int cmd_eval(mode_ctx *ctx, int argc, char **argv);
int cmd_sample(mode_ctx *ctx, int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(mode_ctx *ctx, int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_sweep(mode_ctx *ctx, int argc, char **argv);

#endif
