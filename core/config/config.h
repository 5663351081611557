/* The run configuration: an INI file (read with inih) plus command-line
 * overrides "section.key=value", both through the same strict checks.  Every
 * key is documented in the README; config_keys[] below is the one table the
 * reader, the validator, the resolved-config writer and the docs agree on. */
#ifndef MODE_CORE_CONFIG_CONFIG_H
#define MODE_CORE_CONFIG_CONFIG_H

#include "core/model/kind.h"
#include "core/model/spec.h"
#include "core/train/optim.h"

#include <stdint.h>

#define CFG_PATH_LEN 512
#define CFG_ERR_LEN 512
/* The most steps a run may take (run.steps, or what run.flops_budget buys):
 * far beyond any run, well inside a long and a double's exact integers. */
#define MODE_MAX_STEPS 1000000000000L
/* The most token positions a step may hold on one rank or in all
 * (data.batch x data.seq_len): row counts are ints in the kernels. */
#define MODE_MAX_POSITIONS (1L << 30)

typedef struct run_config {
    /* [run] */
    char name[128];
    uint64_t seed;        /* a replicate's seed: init_seed and data_seed follow it unless set */
    uint64_t init_seed;   /* initialisation and the random router's scores */
    uint64_t data_seed;   /* the training samples' offsets */
    long steps;           /* 0 with flops_budget set: derived from the budget */
    double flops_budget;  /* training FLOPs (nominal); 0 = unset */
    char out[CFG_PATH_LEN];
    long log_every, eval_every, eval_windows, ckpt_every, routing_every;
    long final_eval_windows; /* the last evaluation's windows (0: all of the held-out split) */
    long routing_windows;    /* held-out windows in the routing records */
    char nonfinite[16];   /* stop | skip: what a non-finite loss or gradient does */
    char precision[8];    /* fp32 | bf16: the model's matrix products (kernels/bf16.h) */
    /* [data] */
    char source[CFG_PATH_LEN]; /* brown | synthetic | path to .txt, .bin or .u32 */
    int seq_len;
    int batch;                 /* global sequences per step */
    double val_fraction;       /* unused when val_source is set */
    char val_source[CFG_PATH_LEN]; /* none | brown | path to .txt, .bin or .u32: held out whole */
    int vocab;                 /* for .bin (<= 65536) and .u32 sources; 256 for text */
    /* [model] */
    int d_model, n_heads, d_ff;
    int n_layers;
    layer_spec layers[MODE_MAX_LAYERS]; /* resolved: [mod]/[moe] defaults, then [layer.N] */
    char layers_text[1024];             /* the layer-spec table as written */
    layer_spec layer_defaults;          /* [mod] and [moe] as set: where every layer starts */
    /* [optim] */
    optim_cfg optim;           /* total_steps filled from run.steps */
    /* where each value came from, for messages: "file.ini:12" or "command line" */
} run_config;

/* Defaults for every key (a small dense model on the synthetic corpus). */
void config_defaults(run_config *c);

/* Read path into c (defaults first), then apply the overrides (each
 * "section.key=value"), then validate the whole.  kinds is the layer-spec
 * table (the layer names allowed).  ranks: the rank count the run will use
 * (0 = do not check it).  On error returns non-zero and err holds one line:
 * "FILE:LINE: [section] key = value: what was expected" (or
 * "command line: section.key=value: ..."). */
int config_load(run_config *c, const char *path, int n_over, char *const *over,
                const layer_kind *const *kinds, int ranks, char *err, int err_len);

/* The same from INI text in memory (path is only used in messages); used by
 * checkpoints, which carry their config. */
int config_load_string(run_config *c, const char *text, const char *path, int n_over,
                       char *const *over, const layer_kind *const *kinds, int ranks, char *err,
                       int err_len);

/* The resolved configuration as INI text that config_load_string() reads back
 * to the same run_config: every key, [layer.N] sections for every layer whose
 * kind keys differ from its section's defaults.  Returns a malloc'd string. */
char *config_to_ini(const run_config *c);

/* s without its leading and trailing white space (cut in place): how the INI
 * reader, overrides and sweep files read keys and values. */
char *config_trim(char *s);

/* The model sizes the config describes. */
model_dims config_dims(const run_config *c);

#endif
