/* The run configuration: an INI file (read with inih) plus command-line
 * overrides "section.key=value", both through the same strict checks.  The
 * run's own sections ([run], [data], [model]) are config_keys[] in
 * config.c; every other section is a key group declared where it belongs
 * (core/model/keys.h: the kinds' sections, the optimizer's [optim]),
 * handed in by a schema.  One set of declarations drives the reader, the validator, the resolved-config writer, the checkpoint's
 * attributes and the documentation (mode-exp --help-keys). */
#ifndef MODE_CORE_CONFIG_CONFIG_H
#define MODE_CORE_CONFIG_CONFIG_H

#include "core/model/keys.h"
#include "core/model/kind.h"
#include "core/model/spec.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CFG_PATH_LEN 512
#define CFG_ERR_LEN 512
/* The most steps a run may take (run.steps, or what run.flops_budget buys):
 * far beyond any run, well inside a long and a double's exact integers. */
#define MODE_MAX_STEPS 1000000000000L
/* The most token positions a step may hold on one rank or in all
 * (data.batch x data.seq_len): row counts are ints in the kernels. */
#define MODE_MAX_POSITIONS (1L << 30)
/* Sections declared elsewhere (key groups) a config may have. */
#define MODE_MAX_GROUPS 16

/* What a config may hold beyond the run's own keys: the layer-spec table
 * (the kinds' descriptions, with their key groups) and more sections. */
typedef struct config_schema {
    const layer_kind *const *kinds; /* NULL-terminated */
    const key_group *const *groups; /* NULL-terminated, or NULL */
} config_schema;

typedef struct run_config {
    /* [run] */
    char name[128];
    uint64_t seed;        /* a replicate's seed: init_seed and data_seed follow it unless set */
    uint64_t init_seed;   /* initialisation and the kinds' fixed random streams */
    uint64_t data_seed;   /* the training samples' offsets */
    long steps;           /* 0 with flops_budget set: derived from the budget */
    double flops_budget;  /* training FLOPs (nominal); 0 = unset */
    char out[CFG_PATH_LEN];
    long log_every, eval_every, eval_windows, ckpt_every, routing_every;
    long final_eval_windows; /* the last evaluation's windows (0: all of the held-out split) */
    long routing_windows;    /* held-out windows in the routing records */
    char nonfinite[16];   /* stop | skip: what a non-finite loss or gradient does */
    char precision[8];    /* fp32 | bf16: the model's matrix products (kernels/bf16.h) */
    char flops_count[12]; /* nominal | executed: what run.flops_budget counts */
    /* [data] */
    char source[CFG_PATH_LEN]; /* brown | synthetic | path to .txt, .bin or .u32 */
    int seq_len;
    int batch;                 /* global sequences per step */
    double val_fraction;       /* unused when val_source is set */
    char val_source[CFG_PATH_LEN]; /* none | brown | path to .txt, .bin or .u32: held out whole */
    int vocab;                 /* for .bin (<= 65536) and .u32 sources; 256 for text */
    char tokenizer[CFG_PATH_LEN]; /* none | the SentencePiece model of a token file */
    char mix[16];              /* uniform | difficulty: half of each batch below the median
                                  document score, half above (docs/data-mix.md) */
    char difficulty[CFG_PATH_LEN]; /* auto (SOURCE.difficulty) | the score file */
    /* [model] */
    int d_model, n_heads, d_ff;
    int n_layers;
    layer_spec layers[MODE_MAX_LAYERS]; /* resolved: the kind's defaults, the sections of
                                           its groups, then [layer.N] */
    char layers_text[1024];             /* the layer-spec table as written */
    /* The sections declared elsewhere: each group's values as set (where a
     * layer of a kind that reads it starts), in the writer's order. */
    const layer_kind *const *kinds;     /* the schema's table */
    int n_groups;
    const key_group *groups[MODE_MAX_GROUPS];
    _Alignas(16) unsigned char group_values[MODE_MAX_GROUPS][MODE_PARAMS_BYTES];
} run_config;

/* Defaults for every key (a small dense model on the synthetic corpus);
 * schema NULL: core's kinds (dense) and no other section. */
void config_defaults(run_config *c, const config_schema *schema);
/* Every layer is the plain dense block (layer_kind.plain): a dense
 * baseline's model. */
bool run_config_dense(const run_config *c);
/* The values of group g's section (the group's struct), or NULL when the
 * config's schema has no such group. */
const void *config_group(const run_config *c, const key_group *g);

/* Read path into c (defaults first), then apply the overrides (each
 * "section.key=value"), then validate the whole.  schema: the layer-spec
 * table (the layer names allowed) and the sections (NULL: core's alone).
 * ranks: the rank count the run will use
 * (0 = do not check it).  On error returns non-zero and err holds one line:
 * "FILE:LINE: [section] key = value: what was expected" (or
 * "command line: section.key=value: ..."). */
int config_load(run_config *c, const char *path, int n_over, char *const *over,
                const config_schema *schema, int ranks, char *err, int err_len);

/* The same from INI text in memory (path is only used in messages); used by
 * checkpoints, which carry their config. */
int config_load_string(run_config *c, const char *text, const char *path, int n_over,
                       char *const *over, const config_schema *schema, int ranks, char *err,
                       int err_len);

/* The resolved configuration as INI text that config_load_string() reads back
 * to the same run_config: every key, [layer.N] sections for every layer whose
 * kind keys differ from its section's defaults.  Returns a malloc'd string. */
char *config_to_ini(const run_config *c);
/* The same keys one a line under their sections, "config [model] d_ff = 64"
 * (malloc'd, NULL when out of memory): what ranks compare before they
 * compute (comm_agree_text names the first line that differs). */
char *config_to_lines(const run_config *c);

/* Whether stored, the resolved config a run file or checkpoint carries, is
 * the run c whose config_to_ini() text is ini: the same text, or the same
 * once this build reads it, which gives the keys added since it was written
 * their defaults (a new key's default is the behaviour from before it; a
 * key this build does not know makes it another config); a run.out that
 * names c's folder another way (absolute or relative) is c's. */
bool config_same_as(const run_config *c, const char *ini, const char *stored);
/* stored as this build resolves it with c's schema (keys it lacks at their
 * defaults), malloc'd; NULL when it does not read.  What resume's message
 * compares, so that a key added since is not named as a difference. */
char *config_stored_as(const run_config *c, const char *stored);
/* Whether the model of the stored config (a checkpoint's, named label in
 * messages) has c's head count, layer count, vocabulary and sequence
 * length, which a tensor's shape does not show (--init-from): 0, or
 * -EINVAL with err naming the key and both values. */
int config_same_widths(const run_config *c, const char *stored, const char *label, char *err,
                       int err_len);

/* The declared sections of a schema (the kinds' key groups, then its
 * others), every key with its default, what it takes and its meaning, and
 * the kinds that read it: as text, or as the rows of a Markdown table
 * (the README's).  Returns non-zero when writing to f failed. */
int config_describe_keys(FILE *f, const config_schema *schema, bool markdown);

/* s without its leading and trailing white space (cut in place): how the INI
 * reader, overrides and sweep files read keys and values. */
char *config_trim(char *s);

/* Where an override "section.key=value" splits, as config_load reads it:
 * the section is over's first *sec_len characters, the key follows the dot
 * after them.  A layer's section is "layer.N", whose key may name a section
 * of its own ("layer.2.moe.router", as `[layer.2] moe.router` in a file);
 * any other section ends at the last dot before the '='.  Returns N for a
 * [layer.N] override, else -1; *sec_len is 0 when over has no dot before
 * its '=' (no section). */
int config_override_split(const char *over, size_t *sec_len);

/* The model sizes the config describes. */
model_dims config_dims(const run_config *c);

/* The config's nominal forward FLOPs of one sequence (MODEL.md, through
 * stack_flops_per_seq: the one count), per layer into per_layer[n_layers]
 * when not NULL; and of a training step (MODE_TRAIN_FLOPS_PER_FORWARD x the
 * forward of data.batch sequences). */
double config_flops_per_seq(const run_config *c, double *per_layer);
double config_train_flops_per_step(const run_config *c);
/* Steps the config asks for: run.steps, or what run.flops_budget buys at
 * train_flops_per_step; -1 when that is more than MODE_MAX_STEPS. */
long config_planned_steps(const run_config *c, double train_flops_per_step);
/* Training FLOPs at step (0-based) under the layers' schedules
 * (layer_kind.flops_at), and *steady the first step from which every
 * step costs config_train_flops_per_step (0: no schedule); the sum of the
 * first `steps` steps' (what run.flops_budget buys integrates it). */
double config_train_flops_at(const run_config *c, long step, long *steady);
double config_train_flops_through(const run_config *c, long steps);
/* The nominal training FLOPs of the first done steps, as the run file's
 * metrics/train_flops counts them: done steps of train_flops_step, or the
 * layers' schedules' sum (config_train_flops_through) when a layer has one. */
double config_nominal_flops_through(const run_config *c, double train_flops_step, long done);

#endif
