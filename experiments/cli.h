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

/* The options of mode-exp's subcommands, one bit each: a subcommand names
 * those it reads (cli_opts), and parse_cli refuses the others, and any given
 * twice, before any work. */
enum cli_opt {
    CLI_RESUME = 1u << 0, CLI_OVERWRITE = 1u << 1, CLI_INIT_FROM = 1u << 2,
    CLI_UPCYCLE_NOISE = 1u << 3, CLI_UPCYCLE_REINIT = 1u << 4, CLI_IDS = 1u << 5,
    CLI_PROMPT_IDS = 1u << 6, CLI_QUIET = 1u << 7, CLI_JSONL = 1u << 8, CLI_JSON = 1u << 9,
    CLI_THREADS = 1u << 10, CLI_RANKS = 1u << 11, CLI_MAX_STEPS = 1u << 12, CLI_STEPS = 1u << 13,
    CLI_WINDOWS = 1u << 14, CLI_TOKENS = 1u << 15, CLI_BENCH = 1u << 16, CLI_TOP_K = 1u << 17,
    CLI_SEED = 1u << 18, CLI_TEMPERATURE = 1u << 19, CLI_DATA = 1u << 20, CLI_MODE = 1u << 21,
    CLI_PROMPT = 1u << 22, CLI_ROUTING = 1u << 23, CLI_ROUTING_LAYERS = 1u << 24,
    CLI_RECORD = 1u << 25, CLI_CSV = 1u << 26, CLI_DIAL = 1u << 27, CLI_WITH_OPTIM = 1u << 28,
    CLI_NO_TENSORBOARD = 1u << 29,
};

/* A subcommand's name (in messages: "mode-exp eval: ...") and the options
 * it reads (CLI_* bits). */
typedef struct cli_opts {
    const char *name;
    unsigned takes;
} cli_opts;

typedef struct cli {
    const char *config;
    unsigned given; /* the CLI_* options on the command line */
    int n_over;
    char **over;
    bool resume, overwrite, quiet, jsonl, json, ids, with_optim, no_tensorboard;
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
 * exits 0.  An option the subcommand does not read (not in sub->takes) or
 * one given twice is refused naming it, the subcommand and the options it
 * takes.  Returns non-zero (after a message from rank 0) on a bad command
 * line. */
int parse_cli(cli *c, int argc, char **argv, const char *usage, const cli_opts *sub, int rank);
/* Whether two "section.key=value" overrides name one key. */
bool cli_same_key(const char *a, const char *b);
/* Whether option bit o was given. */
static inline bool cli_given(const cli *c, unsigned o)
{
    return (c->given & o) != 0;
}
/* The overrides of a command that reads a config (training, flops, bench,
 * plan): one of a kind's section that no layer of cfg reads would change
 * nothing, and is refused (err says so, naming the model's kinds). */
int cli_check_overrides(const run_config *cfg, int n_over, char *const *over, char *err,
                        int err_len);
/* A config file may set a kind's section that no layer of its model reads
 * (one file for several models, a sweep's base): a note on stderr names
 * each such section whose values differ from the defaults. */
void cli_note_unread(const run_config *cfg, const char *path);
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
int cmd_score(int argc, char **argv);
int cmd_bench(mode_ctx *ctx, int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_sweep(mode_ctx *ctx, int argc, char **argv);
int cmd_export(mode_ctx *ctx, int argc, char **argv);

#endif
