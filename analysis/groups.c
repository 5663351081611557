#include "analysis/groups.h"
#include "core/util/num.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const replicate_keys[] = { "run.name", "run.out", "run.seed", "run.init_seed",
                                              "run.data_seed", NULL };

/* The keys that tell replicates apart: run.name, out, seed, init_seed, data_seed. */
static bool key_is_replicate(const char *name)
{
    for (int i = 0; replicate_keys[i]; i++)
        if (!strcmp(name, replicate_keys[i]))
            return true;
    return false;
}

/* Whether kind k reads key of section (one of its key groups'). */
static bool kind_reads(const layer_kind *k, const char *section, const char *key)
{
    const kind_group *g;
    return layer_key(k, key, &g) && !strcmp(g->group->section, section);
}

/* Whether some kind of the table reads section (a layer section). */
static bool layer_section(const layer_kind *const *kinds, const char *section)
{
    for (int i = 0; kinds[i]; i++)
        for (const kind_group *g = kinds[i]->groups; g && g->group; g++)
            if (!strcmp(g->group->section, section))
                return true;
    return false;
}

/* A layer section's key's value over the layers that read it (groups.h). */
static char *layer_key_value(const run_config *c, const layer_kind *const *kinds,
                             const char *section, const char *key)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    char first[64] = "";
    int readers = 0;
    bool agree = true;
    for (int pass = 0; pass < 2; pass++) {
        for (int l = 0; l < c->n_layers; l++) {
            const layer_kind *k = layer_kind_lookup(kinds, c->layers[l].kind);
            if (!kind_reads(k, section, key))
                continue;
            char v[64];
            if (layer_spec_text(&c->layers[l], k, key, v, sizeof(v)))
                snprintf(v, sizeof(v), "?");
            if (pass == 0) {
                if (!readers++)
                    snprintf(first, sizeof(first), "%s", v);
                agree &= !strcmp(first, v);
            } else {
                fprintf(f, "%s%s", readers++ ? ", " : "", v);
            }
        }
        if (pass == 0) {
            if (!readers || agree) {
                fputs(readers ? first : "-", f);
                break;
            }
            readers = 0;
        }
    }
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The layer kinds, one after the other: what model.layers compares as. */
static char *kinds_list(const run_config *c)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    for (int l = 0; l < c->n_layers; l++)
        fprintf(f, "%s%s", l ? ", " : "", c->layers[l].kind);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int add_key(run_keys *k, const char *section, const char *key, const char *value)
{
    run_key *grown = realloc(k->keys, (size_t)(k->n + 1) * sizeof(run_key));
    if (!grown)
        return -ENOMEM;
    k->keys = grown;
    run_key *r = &k->keys[k->n];
    snprintf(r->name, sizeof(r->name), "%s.%s", section, key);
    r->value = strdup(value);
    r->canon = NULL;
    if (!r->value)
        return -ENOMEM;
    k->n++;
    return 0;
}

int config_run_keys(const run_config *c, const layer_kind *const *kinds, run_keys *out)
{
    out->keys = NULL;
    out->n = 0;
    /* the resolved config's every key, in the writer's order; the [layer.N]
     * sections are left out: the [mod]/[moe] keys carry every layer's value */
    char *ini = config_to_ini(c);
    if (!ini)
        return -ENOMEM;
    int rc = 0;
    char section[64] = "";
    for (char *line = ini, *next; !rc && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (line[0] == '[') {
            snprintf(section, sizeof(section), "%.*s", (int)strcspn(line + 1, "]"), line + 1);
            continue;
        }
        char *eq = strstr(line, " = ");
        if (!eq || !strncmp(section, "layer.", 6))
            continue;
        *eq = '\0';
        const char *key = line, *value = eq + 3;
        char *computed = NULL;
        if (layer_section(kinds, section)) {
            if (!(computed = layer_key_value(c, kinds, section, key))) {
                rc = -ENOMEM;
                break;
            }
            value = computed;
        }
        rc = add_key(out, section, key, value);
        free(computed);
        if (!rc && !strcmp(section, "model") && !strcmp(key, "layers") &&
            !(out->keys[out->n - 1].canon = kinds_list(c)))
            rc = -ENOMEM;
    }
    free(ini);
    if (rc)
        free_run_keys(out);
    return rc;
}

void free_run_keys(run_keys *k)
{
    for (int i = 0; i < k->n; i++) {
        free(k->keys[i].value);
        free(k->keys[i].canon);
    }
    free(k->keys);
    k->keys = NULL;
    k->n = 0;
}

static const run_key *find_key(const run_keys *k, const char *name)
{
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->keys[i].name, name))
            return &k->keys[i];
    return NULL;
}

const char *run_key_value(const run_keys *k, const char *name)
{
    const run_key *r = find_key(k, name);
    return r ? r->value : "";
}

static const char *canon_of(const run_key *r)
{
    return r ? (r->canon ? r->canon : r->value) : "";
}

/* Whether a and b differ in key name (a key one lacks counts as ""). */
static bool key_differs(const run_keys *a, const run_keys *b, const char *name)
{
    return strcmp(canon_of(find_key(a, name)), canon_of(find_key(b, name))) != 0;
}

bool same_config(const run_keys *a, const run_keys *b, const char **first_diff)
{
    for (int pass = 0; pass < 2; pass++) {
        const run_keys *x = pass ? b : a, *y = pass ? a : b;
        for (int i = 0; i < x->n; i++)
            if (!key_is_replicate(x->keys[i].name) && key_differs(x, y, x->keys[i].name)) {
                if (first_diff)
                    *first_diff = x->keys[i].name;
                return false;
            }
    }
    return true;
}

void group_base_name(const char *run_name, char *out, int len)
{
    size_t n = strlen(run_name), d = n;
    while (d > 0 && isdigit((unsigned char)run_name[d - 1]))
        d--;
    if (d < n && d >= 3 && run_name[d - 1] == 's' && run_name[d - 2] == '-')
        n = d - 2;
    snprintf(out, (size_t)len, "%.*s", (int)n, run_name);
}

int find_group(const run_grouping *g, const char *name)
{
    for (int i = 0; i < g->n_groups; i++)
        if (!strcmp(g->groups[i].name, name))
            return i;
    return -1;
}

static int add_varying(run_grouping *g, const char *name)
{
    for (int i = 0; i < g->n_varying; i++)
        if (!strcmp(g->varying[i], name))
            return 0;
    char(*grown)[RUN_KEY_LEN] = realloc(g->varying, (size_t)(g->n_varying + 1) * RUN_KEY_LEN);
    if (!grown)
        return -ENOMEM;
    g->varying = grown;
    snprintf(g->varying[g->n_varying++], RUN_KEY_LEN, "%s", name);
    return 0;
}

/* Where key name stands in k (k->n when absent): config order. */
static int key_rank(const run_keys *k, const char *name)
{
    for (int i = 0; k && i < k->n; i++)
        if (!strcmp(k->keys[i].name, name))
            return i;
    return k ? k->n : 0;
}

/* How many values other than "-" key name takes over the runs (2 means
 * two or more). */
static int distinct_values(const run_keys *keys, int n, const char *name)
{
    const char *first = NULL;
    for (int i = 0; i < n; i++) {
        const char *v = canon_of(find_key(&keys[i], name));
        if (!strcmp(v, "-"))
            continue;
        if (!first)
            first = v;
        else if (strcmp(first, v))
            return 2;
    }
    return first ? 1 : 0;
}

static void sort_varying(run_grouping *g, const run_keys *order)
{
    for (int i = 1; i < g->n_varying; i++) { /* insertion: a handful of keys */
        char v[RUN_KEY_LEN];
        memcpy(v, g->varying[i], RUN_KEY_LEN);
        int r = key_rank(order, v), j = i;
        for (; j > 0 && key_rank(order, g->varying[j - 1]) > r; j--)
            memcpy(g->varying[j], g->varying[j - 1], RUN_KEY_LEN);
        memcpy(g->varying[j], v, RUN_KEY_LEN);
    }
}

int group_runs(const run_keys *keys, const char *const *names, int n, run_grouping *g)
{
    memset(g, 0, sizeof(*g));
    g->group_of = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    g->groups = calloc((size_t)(n > 0 ? n : 1), sizeof(run_group));
    if (!g->group_of || !g->groups)
        goto nomem;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < g->n_groups && !same_config(&keys[g->groups[j].members[0]], &keys[i], NULL))
            j++;
        run_group *grp = &g->groups[j];
        if (j == g->n_groups) {
            g->n_groups++;
            group_base_name(names[i], grp->name, (int)sizeof(grp->name));
        }
        int *grown = realloc(grp->members, (size_t)(grp->n + 1) * sizeof(int));
        if (!grown)
            goto nomem;
        grp->members = grown;
        grp->members[grp->n++] = i;
        g->group_of[i] = j;
    }
    /* names stay unique: "x", "x (2)", ... */
    for (int j = 1; j < g->n_groups; j++) {
        int same = 1;
        for (int i = 0; i < j; i++) {
            char base[128];
            group_base_name(names[g->groups[i].members[0]], base, (int)sizeof(base));
            same += !strcmp(base, g->groups[j].name);
        }
        if (same > 1) {
            char tmp[128];
            snprintf(tmp, sizeof(tmp), "%.110s (%d)", g->groups[j].name, same);
            snprintf(g->groups[j].name, sizeof(g->groups[j].name), "%s", tmp);
        }
    }
    /* the keys that vary, in the first run's order, then any only others have */
    for (int i = 1; i < n; i++)
        for (int pass = 0; pass < 2; pass++) {
            const run_keys *x = pass ? &keys[i] : &keys[0], *y = pass ? &keys[0] : &keys[i];
            for (int k = 0; k < x->n; k++)
                if (!key_is_replicate(x->keys[k].name) && key_differs(x, y, x->keys[k].name) &&
                    add_varying(g, x->keys[k].name))
                    goto nomem;
        }
    /* a key that only comes and goes with the layers ("-" where no layer
     * reads it: mod.gate of a dense run) says nothing model.layers does not */
    int kept = 0;
    for (int k = 0; k < g->n_varying; k++)
        if (distinct_values(keys, n, g->varying[k]) >= 2)
            memmove(g->varying[kept++], g->varying[k], RUN_KEY_LEN);
    g->n_varying = kept;
    sort_varying(g, n ? &keys[0] : NULL);
    return 0;
nomem:
    free_run_grouping(g);
    return -ENOMEM;
}

void free_run_grouping(run_grouping *g)
{
    for (int i = 0; g->groups && i < g->n_groups; i++)
        free(g->groups[i].members);
    free(g->groups);
    free(g->group_of);
    free(g->varying);
    memset(g, 0, sizeof(*g));
}

bool key_is_numeric(const run_keys *keys, int n, const char *name)
{
    double first = 0.0;
    bool any = false, two = false;
    for (int i = 0; i < n; i++) {
        const char *v = run_key_value(&keys[i], name);
        if (!strcmp(v, "-"))
            continue;
        double x;
        if (!num_parse_double(v, -HUGE_VAL, HUGE_VAL, &x))
            return false;
        two |= any && x != first;
        if (!any)
            first = x;
        any = true;
    }
    return two;
}
