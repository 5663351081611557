/* Layer specs: tensor descriptors, the kind tables' look-up, and a layer's
 * parameters read and written through its kind's key declarations. */
#include "core/model/kind.h"
#include "core/model/spec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

tensor_desc make_tensor_desc(const char *name, int ndim, int s0, int s1, int s2,
                             tensor_init init, float std)
{
    tensor_desc t;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.ndim = ndim;
    t.shape[0] = s0;
    t.shape[1] = s1;
    t.shape[2] = s2;
    t.init = init;
    t.init_std = std;
    t.decay = ndim >= 2;
    return t;
}

const layer_kind *layer_kind_lookup(const layer_kind *const *table, const char *name)
{
    for (int i = 0; table && table[i]; i++)
        if (strcmp(table[i]->name, name) == 0)
            return table[i];
    return NULL;
}

const kind_ops *kind_ops_lookup(const kind_ops *const *table, const char *name)
{
    for (int i = 0; table && table[i]; i++)
        if (strcmp(table[i]->kind->name, name) == 0)
            return table[i];
    return NULL;
}

void layer_spec_init(layer_spec *spec, const layer_kind *k)
{
    memset(spec, 0, sizeof(*spec));
    snprintf(spec->kind, sizeof(spec->kind), "%s", k->name);
    for (const kind_group *g = k->groups; g && g->group; g++)
        key_group_defaults(g->group, layer_group_values(spec, g));
}

const kind_key *layer_key(const layer_kind *k, const char *name, const kind_group **group)
{
    if (!name) /* a declaration without that key (decision.h: share_key of skipdecode) */
        return NULL;
    const char *dot = strchr(name, '.');
    if (dot) { /* "section.key": the key of that group */
        for (const kind_group *g = k ? k->groups : NULL; g && g->group; g++) {
            size_t len = (size_t)(dot - name);
            const kind_key *key = strlen(g->group->section) == len &&
                                          !strncmp(g->group->section, name, len)
                                      ? key_group_find(g->group, dot + 1)
                                      : NULL;
            if (key) {
                if (group)
                    *group = g;
                return key;
            }
        }
        return NULL;
    }
    for (const kind_group *g = k ? k->groups : NULL; g && g->group; g++) {
        const kind_key *key = key_group_find(g->group, name);
        if (key) {
            if (group)
                *group = g;
            return key;
        }
    }
    return NULL;
}

void layer_key_name(const layer_kind *k, const kind_group *g, const kind_key *key, char *out,
                    size_t n)
{
    for (const kind_group *e = k->groups; e && e->group && e != g; e++)
        if (key_group_find(e->group, key->name)) {
            snprintf(out, n, "%s.%s", g->group->section, key->name);
            return;
        }
    snprintf(out, n, "%s", key->name);
}

int layer_spec_set(layer_spec *spec, const layer_kind *k, const char *name, const char *text,
                   char *why, size_t why_len)
{
    const kind_group *g;
    const kind_key *key = layer_key(k, name, &g);
    if (!key)
        return -ENOENT;
    return key_parse(key, layer_group_values(spec, g), text, why, why_len);
}

int layer_spec_text(const layer_spec *spec, const layer_kind *k, const char *name, char *out,
                    size_t n)
{
    const kind_group *g;
    const kind_key *key = layer_key(k, name, &g);
    if (!key)
        return -ENOENT;
    key_format(key, layer_group_cvalues(spec, g), out, n);
    return 0;
}

int layer_spec_number(const layer_spec *spec, const layer_kind *k, const char *name,
                      double *out)
{
    const kind_group *g;
    const kind_key *key = layer_key(k, name, &g);
    if (!key)
        return -ENOENT;
    *out = key_number(key, layer_group_cvalues(spec, g));
    return 0;
}
