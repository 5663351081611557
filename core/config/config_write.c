/* The resolved config written out (config_to_ini), every declared key
 * described (config_describe_keys), and the numbers a config implies
 * (FLOPs, planned steps, dimensions). */
#include "core/config/config_table.h"
#include "core/config/layers.h"
#include "core/model/model.h"
#include "core/model/plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* [layer.N] for the keys where layer l differs from the sections: only keys
 * of its kind can differ, since only those can be set. */
static void write_layer(FILE *f, const run_config *c, int l)
{
    bool header = false;
    const layer_spec *s = &c->layers[l];
    const layer_kind *kind = layer_kind_lookup(c->kinds, s->kind);
    for (const kind_group *g = kind ? kind->groups : NULL; g && g->group; g++) {
        int gi = config_group_index(c, g->group->section);
        for (const kind_key *k = g->group->keys; gi >= 0 && k->name; k++) {
            char mine[VALUE_LEN], section[VALUE_LEN];
            key_format(k, layer_group_cvalues(s, g), mine, sizeof(mine));
            key_format(k, c->group_values[gi], section, sizeof(section));
            if (strcmp(mine, section) == 0)
                continue;
            if (!header)
                fprintf(f, "\n[layer.%d]\n", l);
            header = true;
            char name[96];
            layer_key_name(kind, g, k, name, sizeof(name));
            fprintf(f, "%s = %s\n", name, mine);
        }
    }
}

char *config_to_ini(const run_config *c)
{
    char *buf = NULL;
    size_t size = 0;
    run_config *def = malloc(sizeof(*def));
    FILE *f = def ? open_memstream(&buf, &size) : NULL;
    if (!f) {
        free(def);
        return NULL;
    }
    config_defaults(def, NULL);
    for (int s = 0; s < SEC_COUNT; s++) {
        fprintf(f, "%s[%s]\n", s ? "\n" : "", section_names[s]);
        for (int k = 0; k < N_KEYS; k++) {
            const cfg_key *key = &config_keys[k];
            if (key->section != s)
                continue;
            char value[VALUE_LEN], fallback[VALUE_LEN];
            config_format_value(key, c, value, sizeof(value));
            config_format_value(key, def, fallback, sizeof(fallback));
            if (!(key->open & OMIT_DEFAULT) || strcmp(value, fallback) != 0)
                fprintf(f, "%s = %s\n", key->name, value);
        }
    }
    free(def);
    for (int g = 0; g < c->n_groups; g++) {
        fprintf(f, "\n[%s]\n", c->groups[g]->section);
        for (const kind_key *k = c->groups[g]->keys; k->name; k++) {
            char value[VALUE_LEN];
            key_format(k, c->group_values[g], value, sizeof(value));
            fprintf(f, "%s = %s\n", k->name, value);
        }
    }
    for (int l = 0; l < c->n_layers && l < MODE_MAX_LAYERS; l++)
        write_layer(f, c, l);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* "a, b": the names of the kinds of the table that read group g. */
static void readers_of(const layer_kind *const *kinds, const key_group *g, char *out, size_t n)
{
    out[0] = '\0';
    for (int i = 0; kinds && kinds[i]; i++)
        for (const kind_group *kg = kinds[i]->groups; kg && kg->group; kg++)
            if (kg->group == g)
                snprintf(out + strlen(out), n - strlen(out), "%s%s", out[0] ? ", " : "",
                         kinds[i]->name);
}

int config_describe_keys(FILE *f, const config_schema *schema, bool markdown)
{
    run_config *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    config_defaults(c, schema);
    if (markdown)
        fprintf(f, "| key | default | takes | read by | meaning |\n| --- | --- | --- | --- | --- |\n");
    for (int g = 0; g < c->n_groups; g++) {
        const key_group *grp = c->groups[g];
        char readers[MSG_LEN];
        readers_of(schema->kinds, grp, readers, sizeof(readers));
        if (!markdown)
            fprintf(f, "%s[%s]%s%s%s\n", g ? "\n" : "", grp->section, readers[0] ? " (read by " : "",
                    readers, readers[0] ? ")" : "");
        for (const kind_key *k = grp->keys; k->name; k++) {
            char def[VALUE_LEN], takes[MSG_LEN];
            key_format(k, c->group_values[g], def, sizeof(def));
            key_expected(k, takes, sizeof(takes));
            if (markdown)
                fprintf(f, "| `[%s] %s` | %s | %s | %s | %s |\n", grp->section, k->name, def, takes,
                        readers[0] ? readers : "the run", k->meaning);
            else
                fprintf(f, "  %s = %s\n      %s; %s\n", k->name, def, takes, k->meaning);
        }
    }
    free(c);
    return ferror(f) ? -EIO : 0;
}

double config_flops_per_seq(const run_config *c, double *per_layer)
{
    const layer_kind *kinds[MODE_MAX_LAYERS];
    for (int l = 0; l < c->n_layers; l++)
        if (!(kinds[l] = layer_kind_lookup(c->kinds, c->layers[l].kind)))
            return (double)NAN;
    model_dims dims = config_dims(c);
    return stack_flops_per_seq(&dims, c->n_layers, c->layers, kinds, per_layer);
}

double config_train_flops_per_step(const run_config *c)
{
    return MODE_TRAIN_FLOPS_PER_FORWARD * config_flops_per_seq(c, NULL) * c->batch;
}

double config_train_flops_at(const run_config *c, long step, long *steady)
{
    const layer_kind *kinds[MODE_MAX_LAYERS];
    *steady = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (!(kinds[l] = layer_kind_lookup(c->kinds, c->layers[l].kind)))
            return (double)NAN;
    model_dims dims = config_dims(c);
    double f = stack_flops_per_seq_at(&dims, c->n_layers, c->layers, kinds, step, steady);
    return MODE_TRAIN_FLOPS_PER_FORWARD * f * c->batch;
}

double config_train_flops_through(const run_config *c, long steps)
{
    long steady = 0;
    config_train_flops_at(c, 0, &steady);
    double sum = 0.0;
    long s = 0;
    for (; s < steps && s < steady; s++)
        sum += config_train_flops_at(c, s, &steady);
    return sum + config_train_flops_per_step(c) * (double)(steps - s);
}

double config_nominal_flops_through(const run_config *c, double train_flops_step, long done)
{
    long steady = 0;
    config_train_flops_at(c, 0, &steady);
    return steady > 0 ? config_train_flops_through(c, done) : train_flops_step * (double)done;
}

long config_planned_steps(const run_config *c, double train_flops_per_step)
{
    if (c->flops_budget <= 0.0)
        return c->steps;
    long steady = 0;
    config_train_flops_at(c, 0, &steady);
    if (steady > 0) {
        /* a schedule: its steps one by one while the budget lasts, then
         * steady steps of train_flops_per_step */
        double spent = 0.0;
        for (long s = 0; s < steady; s++) {
            double f = config_train_flops_at(c, s, &steady);
            if (!(spent + f <= c->flops_budget))
                return s;
            spent += f;
        }
        double more = floor((c->flops_budget - spent) / train_flops_per_step) + (double)steady;
        return more > (double)MODE_MAX_STEPS || !(more == more) ? -1 : (long)more;
    }
    double steps = floor(c->flops_budget / train_flops_per_step);
    return steps > (double)MODE_MAX_STEPS || !(steps == steps) ? -1 : (long)steps;
}

model_dims config_dims(const run_config *c)
{
    return (model_dims){ .vocab = c->vocab, .d_model = c->d_model, .n_heads = c->n_heads,
                         .d_head = c->n_heads > 0 ? c->d_model / c->n_heads : 0,
                         .d_ff = c->d_ff, .n_layers = c->n_layers, .seq_len = c->seq_len,
                         .ranks = 1, .rank = 0 };
}

char *config_to_lines(const run_config *c)
{
    char *ini = config_to_ini(c);
    size_t cap = ini ? strlen(ini) * 2 + 64 : 0, at = 0;
    char *out = ini ? malloc(cap) : NULL, section[128] = "";
    for (const char *p = ini; out && *p;) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        if (n > 0 && p[0] == '[')
            snprintf(section, sizeof(section), "%.*s", n < 120 ? n : 120, p);
        else if (n > 0 && p[0] != '#' && p[0] != ';')
            at += (size_t)snprintf(out + at, cap - at, "config %s %.*s\n", section, n, p);
        p += n + (e ? 1 : 0);
    }
    if (out && !at)
        out[0] = '\0';
    free(ini);
    return out;
}
