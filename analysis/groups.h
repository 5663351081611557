/* Replicates (issue 17): runs whose resolved configs are equal except
 * [run] name, out, seed, init_seed and data_seed form a group, the unit every
 * table and figure of mode-analyze reports on (n, mean, sd, 95% interval).
 *
 * Configs are compared key by key after parsing, not as text: every key of
 * the resolved config (config_to_ini's table) with its canonical value, where
 *   - a [mod] or [moe] key takes the values of the layers whose kind reads
 *     it: one value when they agree, each reading layer's value in layer
 *     order when they do not, "-" when no layer reads it (mod.capacity of a
 *     dense model changes nothing, so it neither splits a group nor shows);
 *   - model.layers compares as the list of layer kinds it expands to, so
 *     "(dense, mod) x 2" and "dense, mod, dense, mod" are one model, and
 *     shows as written.
 * Nothing here prints. */
#ifndef MODE_ANALYSIS_GROUPS_H
#define MODE_ANALYSIS_GROUPS_H

#include "core/config/config.h"
#include "core/model/kind.h"

#include <stdbool.h>

enum { RUN_KEY_LEN = 64 };

typedef struct run_key {
    char name[RUN_KEY_LEN]; /* "section.key": "mod.capacity", "run.seed" */
    char *value;            /* as shown; "-" where no layer reads a [mod]/[moe] key */
    char *canon;            /* what equality compares (the value but for model.layers) */
} run_key;

typedef struct run_keys {
    run_key *keys;
    int n;
} run_keys;

/* The keys of a parsed config (kinds: the table its layers come from).
 * Returns 0 or -ENOMEM. */
int config_run_keys(const run_config *c, const layer_kind *const *kinds, run_keys *out);
void free_run_keys(run_keys *k);
/* The value of key name ("" when the config has no such key). */
const char *run_key_value(const run_keys *k, const char *name);
/* Whether a and b are replicates: equal in every other key.  When not,
 * *first_diff (when not NULL) names the first key they differ in. */
bool same_config(const run_keys *a, const run_keys *b, const char **first_diff);

/* A group's name: the run name without a trailing "-s<digits>" (as
 * `mode-exp sweep` names replicates: capacity-0.125-s2), else the name. */
void group_base_name(const char *run_name, char *out, int len);

typedef struct run_group {
    char name[128];
    int n;
    int *members; /* run indices, in the order the runs were given */
} run_group;

typedef struct run_grouping {
    int n_groups;
    run_group *groups;  /* in the order of their first run */
    int *group_of;      /* [n_runs] */
    int n_varying;
    char (*varying)[RUN_KEY_LEN]; /* the non-replicate keys that take two values
                                     or more (other than "-") across the runs, in
                                     config order: the grid's keys */
} run_grouping;

/* Group n runs (keys[i] and names[i]: the name shown for run i, unique
 * among the runs).  Two groups of one base name are told apart by " (2)",
 * " (3)", ...  Returns 0 or -ENOMEM. */
int group_runs(const run_keys *keys, const char *const *names, int n, run_grouping *g);
void free_run_grouping(run_grouping *g);
/* The group called name, or -1. */
int find_group(const run_grouping *g, const char *name);
/* Whether every run's value of key name reads as a number (or is "-"),
 * with at least two distinct numbers: a key a figure can put on an axis. */
bool key_is_numeric(const run_keys *keys, int n, const char *name);

#endif
