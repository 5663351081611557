/* The run's own keys and their defaults (config_table.h). */
#include "core/config/config_table.h"
#include "core/config/layers.h"
#include "core/model/model.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

const char *const section_names[SEC_COUNT] = { "run", "data", "model" };

static const char *const nonfinite_policies[] = { "stop", "skip", NULL };
static const char *const precisions[] = { "fp32", "bf16", NULL };
static const char *const flops_counts[] = { "nominal", "executed", NULL };
static const char *const data_mixes[] = { "uniform", "difficulty", NULL };

#define FIELD_SIZE(T, f) sizeof(((T *)0)->f)
#define RC(f) offsetof(run_config, f), FIELD_SIZE(run_config, f)

/* The order here is the order config_to_ini() writes. */
const cfg_key config_keys[N_KEYS] = {
    { SEC_RUN, "name", K_NAME, RC(name), 0, 0, 0, NULL },
    { SEC_RUN, "seed", K_U64, RC(seed), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "init_seed", K_U64, RC(init_seed), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "data_seed", K_U64, RC(data_seed), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "steps", K_LONG, RC(steps), 0, (double)MODE_MAX_STEPS, 0, NULL },
    { SEC_RUN, "flops_budget", K_DOUBLE, RC(flops_budget), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "flops_count", K_ENUM, RC(flops_count), 0, 0, 0, flops_counts },
    { SEC_RUN, "out", K_STR, RC(out), 0, 0, 0, NULL },
    { SEC_RUN, "log_every", K_LONG, RC(log_every), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "eval_every", K_LONG, RC(eval_every), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "eval_windows", K_LONG, RC(eval_windows), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "final_eval_windows", K_LONG, RC(final_eval_windows), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "ckpt_every", K_LONG, RC(ckpt_every), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "routing_every", K_LONG, RC(routing_every), 0, NO_MAX, 0, NULL },
    { SEC_RUN, "routing_windows", K_LONG, RC(routing_windows), 0, 1 << 20, 0, NULL },
    { SEC_RUN, "nonfinite", K_ENUM, RC(nonfinite), 0, 0, 0, nonfinite_policies },
    { SEC_RUN, "precision", K_ENUM, RC(precision), 0, 0, 0, precisions },
    { SEC_DATA, "source", K_SOURCE, RC(source), 0, 0, 0, NULL },
    { SEC_DATA, "seq_len", K_INT, RC(seq_len), 2, 65536, 0, NULL },
    { SEC_DATA, "batch", K_INT, RC(batch), 1, NO_MAX, 0, NULL },
    { SEC_DATA, "val_fraction", K_DOUBLE, RC(val_fraction), 0, 1, MIN_OPEN | MAX_OPEN, NULL },
    { SEC_DATA, "val_source", K_HELD_OUT, RC(val_source), 0, 0, 0, NULL },
    { SEC_DATA, "vocab", K_INT, RC(vocab), 2, INT_MAX, 0, NULL },
    { SEC_DATA, "tokenizer", K_STR, RC(tokenizer), 0, 0, 0, NULL },
    { SEC_DATA, "mix", K_ENUM, RC(mix), 0, 0, OMIT_DEFAULT, data_mixes },
    { SEC_DATA, "difficulty", K_STR, RC(difficulty), 0, 0, OMIT_DEFAULT, NULL },
    { SEC_MODEL, "d_model", K_INT, RC(d_model), 1, MODE_MAX_WIDTH, 0, NULL },
    { SEC_MODEL, "n_heads", K_INT, RC(n_heads), 1, NO_MAX, 0, NULL },
    { SEC_MODEL, "d_ff", K_INT, RC(d_ff), 1, MODE_MAX_WIDTH, 0, NULL },
    { SEC_MODEL, "layers", K_LAYERS, RC(layers_text), 0, 0, 0, NULL },
};

static const layer_kind *const core_kinds[] = { &dense_kind, NULL };
const config_schema config_core_schema = { .kinds = core_kinds, .groups = NULL };

int config_group_index(const run_config *c, const char *section)
{
    for (int g = 0; g < c->n_groups; g++)
        if (strcmp(c->groups[g]->section, section) == 0)
            return g;
    return -1;
}

void config_format_value(const cfg_key *k, const run_config *c, char *out, size_t n)
{
    const char *f = (const char *)c + k->offset;
    switch (k->type) {
    case K_U64: snprintf(out, n, "%" PRIu64, *(const uint64_t *)(const void *)f); break;
    case K_LONG: snprintf(out, n, "%ld", *(const long *)(const void *)f); break;
    case K_INT: snprintf(out, n, "%d", *(const int *)(const void *)f); break;
    case K_DOUBLE: key_format_double(*(const double *)(const void *)f, out, n); break;
    default: snprintf(out, n, "%s", f); break;
    }
}

/* The schema's sections beyond the run's own: every group its kinds read
 * (in the table's order, each once), then its other groups. */
static void add_groups(run_config *c, const config_schema *schema)
{
    c->kinds = schema->kinds;
    c->n_groups = 0;
    for (int i = 0; schema->kinds && schema->kinds[i]; i++)
        for (const kind_group *g = schema->kinds[i]->groups; g && g->group; g++)
            if (config_group_index(c, g->group->section) < 0 && c->n_groups < MODE_MAX_GROUPS)
                c->groups[c->n_groups++] = g->group;
    for (int i = 0; schema->groups && schema->groups[i]; i++)
        if (config_group_index(c, schema->groups[i]->section) < 0 && c->n_groups < MODE_MAX_GROUPS)
            c->groups[c->n_groups++] = schema->groups[i];
    for (int g = 0; g < c->n_groups; g++)
        key_group_defaults(c->groups[g], c->group_values[g]);
}

bool run_config_dense(const run_config *c)
{
    for (int l = 0; l < c->n_layers; l++) {
        const layer_kind *k = layer_kind_lookup(c->kinds, c->layers[l].kind);
        if (!k || !k->plain)
            return false;
    }
    return true;
}

void config_defaults(run_config *c, const config_schema *schema)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "run");
    c->seed = 1;
    c->steps = 200;
    snprintf(c->out, sizeof(c->out), "out");
    c->log_every = 10;
    c->eval_every = 100;
    c->eval_windows = 16;
    c->final_eval_windows = 2048;
    c->routing_windows = 32;
    c->ckpt_every = 100;
    c->routing_every = 100;
    snprintf(c->nonfinite, sizeof(c->nonfinite), "stop");
    snprintf(c->precision, sizeof(c->precision), "fp32");
    snprintf(c->flops_count, sizeof(c->flops_count), "nominal");
    snprintf(c->source, sizeof(c->source), "synthetic");
    c->seq_len = 128;
    c->batch = 8;
    c->val_fraction = 0.1;
    snprintf(c->val_source, sizeof(c->val_source), "none");
    snprintf(c->tokenizer, sizeof(c->tokenizer), "none");
    snprintf(c->mix, sizeof(c->mix), "uniform");
    snprintf(c->difficulty, sizeof(c->difficulty), "auto");
    c->vocab = 256;
    c->d_model = 128;
    c->n_heads = 4;
    c->d_ff = 352;
    add_groups(c, schema ? schema : &config_core_schema);
    snprintf(c->layers_text, sizeof(c->layers_text), "dense x 4");
    c->n_layers = 4;
    for (int l = 0; l < c->n_layers; l++)
        layer_spec_init(&c->layers[l], &dense_kind);
}

const void *config_group(const run_config *c, const key_group *g)
{
    for (int i = 0; i < c->n_groups; i++)
        if (c->groups[i] == g)
            return c->group_values[i];
    return NULL;
}
