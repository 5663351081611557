/* Config keys declared where they belong.  A layer kind declares its keys in
 * its own folder, grouped by INI section: name, type (integer, real,
 * boolean, a choice among names), default, bounds, a one-line meaning, and
 * where the value lives in the kind's own typed parameters.  Keys that
 * several kinds read are one group, declared once and shared by every kind
 * that lists it.  Core parses, validates, prints, stores,
 * compares and documents every key through these declarations and knows no
 * kind's key by name (STYLE.md 4).  The optimizer declares its [optim]
 * section the same way (core/train/optim.c).
 *
 * A group's values are a plain struct of the declaring module's (each key
 * at its offset: int for KEY_INT and KEY_CHOICE (the choice's index),
 * long for KEY_LONG, double for KEY_REAL, bool for KEY_BOOL); a kind's
 * parameters (layer_spec.params) hold the structs of its groups at the
 * offsets it gives (kind_group). */
#ifndef MODE_CORE_MODEL_KEYS_H
#define MODE_CORE_MODEL_KEYS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum key_type { KEY_INT, KEY_LONG, KEY_REAL, KEY_BOOL, KEY_CHOICE } key_type;

#define KEY_MIN_OPEN 1u /* the minimum itself is excluded */
#define KEY_MAX_OPEN 2u
#define KEY_NO_MAX HUGE_VAL

typedef struct kind_key {
    const char *name;           /* as in the INI file */
    key_type type;
    size_t offset;              /* of the value in its group's struct */
    const char *def;            /* the default, as the config writes it */
    double min, max;            /* KEY_INT, KEY_LONG, KEY_REAL: the range */
    unsigned open;              /* KEY_MIN_OPEN | KEY_MAX_OPEN */
    const char *const *choices; /* KEY_CHOICE: NULL-terminated, index = value */
    const char *meaning;        /* one line: --help-keys and the README's table */
    unsigned flags;             /* KEY_SHARDED */
} kind_key;

/* The key's value is the number of rows (experts) of the kind's tensors
 * that expert parallelism spreads over the ranks (tensor_desc.expert_dim):
 * the config checks it against the rank count. */
#define KEY_SHARDED 1u

/* A check between keys of a group that failed: "expected KEY REL OTHER
 * TAIL", each key a member of the group, OTHER may be NULL. */
typedef struct key_problem {
    const char *key, *rel, *other, *tail;
} key_problem;

typedef struct key_group {
    const char *section;  /* the INI section without brackets: "optim" */
    const kind_key *keys; /* ending with a key whose name is NULL */
    size_t size;          /* bytes of the group's struct */
    /* checks between the group's keys; NULL: none.  Non-zero with p filled
     * when values cannot stand. */
    int (*check)(const void *values, key_problem *p);
} key_group;

/* A group a kind reads, at an offset of its parameters. */
typedef struct kind_group {
    const key_group *group; /* NULL ends a kind's list */
    size_t offset;
} kind_group;

/* ---- values --------------------------------------------------------------- */

/* Parse text into key k of values (a group's struct), range checked; on
 * failure say what was expected in why. */
int key_parse(const kind_key *k, void *values, const char *text, char *why, size_t why_len);
/* The value as the config writes it (shortest %g that reads back for reals). */
void key_format(const kind_key *k, const void *values, char *out, size_t n);
/* What k takes, for "expected ..." messages and the documentation. */
void key_expected(const kind_key *k, char *out, size_t n);
/* The value as a number (a choice's index, a boolean's 0 or 1). */
double key_number(const kind_key *k, const void *values);
/* Every key of g at its default. */
void key_group_defaults(const key_group *g, void *values);
/* The key of g called name, or NULL. */
const kind_key *key_group_find(const key_group *g, const char *name);

/* The text rules every INI value shares: integers and reals that read back
 * whole; the shortest %g of v that reads back to v. */
bool key_text_long(const char *s, long *v);
bool key_text_double(const char *s, double *v);
void key_format_double(double v, char *out, size_t n);

#endif
