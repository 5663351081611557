/* The run's own keys ([run], [data], [model]) as one table, private to
 * core/config: config_table.c holds it with the defaults, config.c reads and
 * checks values through it, config_write.c writes them out. */
#ifndef MODE_CORE_CONFIG_TABLE_H
#define MODE_CORE_CONFIG_TABLE_H

#include "core/config/config.h"

#include <ini.h>
#include <math.h>
#include <stddef.h>

/* inih reads each line into a fixed INI_MAX_LINE buffer and would split a
 * longer one in two, so the reader refuses such lines and no value is accepted
 * that config_to_ini() could not write on one line. */
#define LINE_CHARS (INI_MAX_LINE - 2)

#define MSG_LEN 1024
#define VALUE_LEN 1100 /* any value as text (the layer-spec table is the longest) */

enum { SEC_RUN, SEC_DATA, SEC_MODEL, SEC_COUNT };
extern const char *const section_names[SEC_COUNT];

typedef enum cfg_type {
    K_STR,    /* free text (paths) */
    K_NAME,   /* a folder's name inside another: no '/', not starting with '.' */
    K_SOURCE, /* brown | synthetic | *.txt | *.bin | *.u32 */
    K_HELD_OUT, /* none | brown | *.txt | *.bin | *.u32 */
    K_LAYERS, /* the layer-spec table */
    K_ENUM,   /* one of allowed[] */
    K_U64,
    K_LONG,
    K_INT,
    K_DOUBLE,
} cfg_type;

#define MIN_OPEN 1u /* min itself is excluded */
#define MAX_OPEN 2u
/* Written by config_to_ini only when not its default: keys added after run
 * files existed (data.mix), so those runs' configs keep their bits. */
#define OMIT_DEFAULT 4u
#define NO_MAX HUGE_VAL /* only the type bounds the value */

typedef struct cfg_key {
    int section;
    const char *name;
    cfg_type type;
    size_t offset; /* into run_config */
    size_t size;   /* of the field */
    double min, max;
    unsigned open; /* MIN_OPEN | MAX_OPEN | OMIT_DEFAULT */
    const char *const *allowed; /* K_ENUM: NULL-terminated */
} cfg_key;

/* The table, in the order config_to_ini() writes. */
#define N_KEYS 30
extern const cfg_key config_keys[N_KEYS];

/* schema == NULL: the kinds core provides itself, no other section. */
extern const config_schema config_core_schema;

/* The declared group called section, or -1. */
int config_group_index(const run_config *c, const char *section);
/* A key's value in c as config_to_ini() writes it. */
void config_format_value(const cfg_key *k, const run_config *c, char *out, size_t n);

#endif
