/* The layer-spec table of [model] layers: "dense, (dense, KIND) x 2" and the
 * like, expanded into one layer_spec kind per layer. */
#include "core/config/layers.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
#define NAMES_LEN 1024 /* the list of known kinds in a message */
#define MAX_DEPTH 32   /* nesting of ( ) groups */

void join_kinds(char *out, size_t n, const layer_kind *const *kinds)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; kinds[i] && i < MODE_MAX_LAYERS && used < n; i++) {
        int w = snprintf(out + used, n - used, "%s%s", i ? ", " : "", kinds[i]->name);
        used += w > 0 ? (size_t)w : 0;
    }
    if (!out[0])
        snprintf(out, n, "none");
}

/* Grammar: list := item (',' item)* ; item := (NAME | '(' list ')') ['x' N].
 * The expansion is written straight into c->layers[].kind. */
typedef struct layer_parser {
    const char *text, *p;
    const layer_kind *const *kinds;
    layer_spec *out;
    int n;
    char *why;
    size_t why_len;
} layer_parser;

static void skip_space(layer_parser *P)
{
    while (isspace((unsigned char)*P->p))
        P->p++;
}

static int expect_at(layer_parser *P, const char *what)
{
    snprintf(P->why, P->why_len, "%s at character %d", what, (int)(P->p - P->text) + 1);
    return -EINVAL;
}

static int parse_name(layer_parser *P)
{
    const char *s = P->p;
    while (isalnum((unsigned char)*P->p) || *P->p == '_' || *P->p == '-')
        P->p++;
    int len = (int)(P->p - s);
    if (len == 0)
        return expect_at(P, "a layer kind or '('");
    char name[MODE_NAME_LEN];
    snprintf(name, sizeof(name), "%.*s", len, s);
    const layer_kind *kind = len < MODE_NAME_LEN ? layer_kind_lookup(P->kinds, name) : NULL;
    if (!kind) {
        char names[NAMES_LEN];
        join_kinds(names, sizeof(names), P->kinds);
        snprintf(P->why, P->why_len, "a layer kind among %s, not '%.*s'", names, len, s);
        return -EINVAL;
    }
    if (P->n >= MODE_MAX_LAYERS)
        return expect_at(P, "at most " STRINGIFY(MODE_MAX_LAYERS) " layers, reached");
    snprintf(P->out[P->n++].kind, MODE_NAME_LEN, "%s", kind->name);
    return 0;
}

/* "x N" after an item: repeat layers [start, n) N times in all. */
static int parse_repeat(layer_parser *P, int start)
{
    P->p++; /* the 'x' */
    skip_space(P);
    if (!isdigit((unsigned char)*P->p))
        return expect_at(P, "a repeat count after 'x'");
    char *end;
    long count = strtol(P->p, &end, 10);
    if (count < 1 || count > MODE_MAX_LAYERS)
        return expect_at(P, "a repeat count in [1, " STRINGIFY(MODE_MAX_LAYERS) "]");
    P->p = end;
    long len = P->n - start;
    if (start + len * count > MODE_MAX_LAYERS)
        return expect_at(P, "at most " STRINGIFY(MODE_MAX_LAYERS) " layers in all");
    for (long r = 1; r < count; r++)
        for (long i = 0; i < len; i++)
            P->out[P->n++] = P->out[start + i];
    return 0;
}

static int parse_list(layer_parser *P, int depth);

static int parse_item(layer_parser *P, int depth)
{
    int start = P->n;
    skip_space(P);
    if (*P->p == '(') {
        if (depth >= MAX_DEPTH)
            return expect_at(P, "at most " STRINGIFY(MAX_DEPTH) " nested groups");
        P->p++;
        if (parse_list(P, depth + 1))
            return -EINVAL;
        if (*P->p != ')')
            return expect_at(P, "',' or ')'");
        P->p++;
    } else if (parse_name(P)) {
        return -EINVAL;
    }
    skip_space(P);
    /* 'x' followed by a name character would be a name: "dense x2" repeats,
     * "xl" would not. */
    if (*P->p == 'x' && !isalpha((unsigned char)P->p[1]) && P->p[1] != '_')
        return parse_repeat(P, start);
    return 0;
}

static int parse_list(layer_parser *P, int depth)
{
    for (;;) {
        if (parse_item(P, depth))
            return -EINVAL;
        skip_space(P);
        if (*P->p != ',')
            return 0;
        P->p++;
    }
}

int parse_layer_table(const char *text, const layer_kind *const *kinds, layer_spec *out,
                      int *n_layers, char *why, size_t why_len)
{
    layer_parser P = { .text = text, .p = text, .kinds = kinds, .out = out, .why = why,
                       .why_len = why_len };
    if (parse_list(&P, 0))
        return -EINVAL;
    if (*P.p)
        return expect_at(&P, "',' or the end");
    *n_layers = P.n;
    return 0;
}
