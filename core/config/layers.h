/* Internal to core/config: the layer-spec table's grammar.
 *   list := item (',' item)* ;  item := (NAME | '(' list ')') ['x' N] */
#ifndef MODE_CORE_CONFIG_LAYERS_H
#define MODE_CORE_CONFIG_LAYERS_H

#include "core/model/kind.h"

#include <stddef.h>

/* Expand text into out[].kind (names looked up in kinds) and *n_layers;
 * on error returns -EINVAL with what was expected, and where, in why. */
int parse_layer_table(const char *text, const layer_kind *const *kinds, layer_spec *out,
                      int *n_layers, char *why, size_t why_len);
/* The kinds' names joined by ", ", or "none". */
void join_kinds(char *out, size_t n, const layer_kind *const *kinds);

#endif
