/* Reading the run configuration (config.h): the INI file, the command-line
 * overrides, the range checks and the messages.  One table, config_keys[]
 * (config_table.c), drives them for the sections that are the run's own
 * ([run], [data], [model]); the other sections are key groups declared where
 * they belong (core/model/keys.h: the kinds' sections, the optimizer's
 * [optim]), handed in by the schema, and go through the same reader and
 * messages without this file knowing a key of theirs.  Writing the resolved
 * config out: config_write.c. */
#include "core/config/config_table.h"
#include "core/config/layers.h"
#include "core/model/model.h"
#include "core/util/file.h"
#include "core/util/num.h"
#include "core/util/text.h"

#include <ini.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

#define ORIGIN_DEFAULT 0    /* never set */
#define ORIGIN_CMDLINE (-1) /* an override; > 0 is a line of the file */

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* Keys a declared group may have (their origins are kept per key). */
#define MAX_GROUP_KEYS 64

/* A [layer.N] key, kept as text until the layer-spec table and the kinds'
 * sections are known (they may come later in the file). */
typedef struct layer_entry {
    int layer;
    char *key, *value;
    int origin;
} layer_entry;

/* The state of one config_load*() call. */
typedef struct loader {
    run_config *c;
    const layer_kind *const *kinds;
    const char *path;
    int origin[N_KEYS]; /* where each key was last set */
    int gorigin[MODE_MAX_GROUPS][MAX_GROUP_KEYS]; /* the same for the groups' keys */
    layer_entry *entries;
    int n_entries, cap_entries;
    /* the reader */
    text_lines lines;
    int line;      /* lines handed to inih so far: the handler's line */
    bool indented; /* the current line starts with white space */
    /* the first error */
    bool failed;
    int err_line;
    char err[MSG_LEN];
} loader;

/* One value as a message names it. */
typedef struct cfg_ref {
    const char *section; /* "data", "layer.3" */
    const char *key;
    const char *value;
    int origin;
} cfg_ref;

/* ---- messages ---------------------------------------------------------- */

static void vfail(loader *L, const char *prefix, const char *fmt, va_list ap) PRINTF_LIKE(3, 0);
static void vfail(loader *L, const char *prefix, const char *fmt, va_list ap)
{
    int n = snprintf(L->err, sizeof(L->err), "%s: ", prefix);
    if (n > 0 && (size_t)n < sizeof(L->err))
        vsnprintf(L->err + n, sizeof(L->err) - (size_t)n, fmt, ap);
    L->failed = true;
}

/* "PATH:LINE: [section] key = value", "command line: section.key=value" or
 * "PATH: [section] key = value (default)". */
static void describe(const loader *L, const cfg_ref *r, char *out, size_t n)
{
    if (r->origin > 0)
        snprintf(out, n, "%s:%d: [%s] %s = %s", L->path, r->origin, r->section, r->key, r->value);
    else if (r->origin == ORIGIN_CMDLINE)
        snprintf(out, n, "command line: %s.%s=%s", r->section, r->key, r->value);
    else
        snprintf(out, n, "%s: [%s] %s = %s (default)", L->path, r->section, r->key, r->value);
}

/* Report r; only the first error of a load is kept. */
static int failf(loader *L, const cfg_ref *r, const char *fmt, ...) PRINTF_LIKE(3, 4);
static int failf(loader *L, const cfg_ref *r, const char *fmt, ...)
{
    if (L->failed)
        return -EINVAL;
    char where[MSG_LEN];
    describe(L, r, where, sizeof(where));
    va_list ap;
    va_start(ap, fmt);
    vfail(L, where, fmt, ap);
    va_end(ap);
    L->err_line = r->origin > 0 ? r->origin : 0;
    return -EINVAL;
}

/* Report a line of the file as a whole (line > 0) or an override (line 0). */
static int fail_line(loader *L, int line, const char *fmt, ...) PRINTF_LIKE(3, 4);
static int fail_line(loader *L, int line, const char *fmt, ...)
{
    if (L->failed)
        return -EINVAL;
    char where[MSG_LEN];
    if (line > 0)
        snprintf(where, sizeof(where), "%s:%d", L->path, line);
    else
        snprintf(where, sizeof(where), "command line");
    va_list ap;
    va_start(ap, fmt);
    vfail(L, where, fmt, ap);
    va_end(ap);
    L->err_line = line;
    return -EINVAL;
}

static void origin_text(int origin, char *out, size_t n)
{
    if (origin > 0) /* the message starts with the path already */
        snprintf(out, n, "line %d", origin);
    else
        snprintf(out, n, "%s", origin == ORIGIN_CMDLINE ? "command line" : "default");
}

/* Later settings rank higher: the one the user touched last leads a message. */
static int origin_rank(int origin)
{
    return origin == ORIGIN_CMDLINE ? INT_MAX : origin;
}

/* "[section] key" for the value the message starts with, else the full
 * "[section] key = value (where)". */
static void brief(const cfg_ref *r, bool lead, char *out, size_t n)
{
    char where[32];
    origin_text(r->origin, where, sizeof(where));
    if (lead)
        snprintf(out, n, "[%s] %s", r->section, r->key);
    else
        snprintf(out, n, "[%s] %s = %s (%s)", r->section, r->key, r->value, where);
}

/* "expected A rel B tail", led by whichever of a and b was set last. */
static int fail_pair(loader *L, const cfg_ref *a, const char *rel, const cfg_ref *b,
                     const char *tail)
{
    const cfg_ref *lead = origin_rank(b->origin) > origin_rank(a->origin) ? b : a;
    char sa[VALUE_LEN + 64], sb[VALUE_LEN + 64];
    brief(a, lead == a, sa, sizeof(sa));
    brief(b, lead == b, sb, sizeof(sb));
    return failf(L, lead, "expected %s%s%s%s", sa, rel, sb, tail);
}

/* "a, b, c" (or "none"). */
static void join(char *out, size_t n, const char *const *names)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; names && names[i] && used < n; i++) {
        int w = snprintf(out + used, n - used, "%s%s", i ? ", " : "", names[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (!out[0])
        snprintf(out, n, "none");
}

/* ---- the key table ------------------------------------------------------ */

/* The struct a key's offset is relative to. */
static char *key_base(const cfg_key *k, run_config *c)
{
    (void)k;
    return (char *)c;
}

/* Index of key within its group (for its origin). */
static int group_key_index(const key_group *g, const kind_key *key)
{
    return (int)(key - g->keys);
}

static int section_index(const char *name)
{
    for (int s = 0; s < SEC_COUNT; s++)
        if (strcmp(section_names[s], name) == 0)
            return s;
    return -1;
}

static int key_index(int section, const char *name)
{
    for (int k = 0; k < N_KEYS; k++)
        if (config_keys[k].section == section && strcmp(config_keys[k].name, name) == 0)
            return k;
    return -1;
}


/* "layer.N" -> N, else -1. */
static int layer_section(const char *name)
{
    if (strncmp(name, "layer.", 6) != 0)
        return -1;
    const char *p = name + 6;
    size_t n = strlen(p);
    if (n < 1 || n > 9 || strspn(p, "0123456789") != n)
        return -1;
    return (int)strtol(p, NULL, 10);
}

/* A key of the table as a message names it, with its current value. */
static cfg_ref key_ref(const loader *L, int k, char *value, size_t n)
{
    const cfg_key *key = &config_keys[k];
    config_format_value(key, L->c, value, n);
    return (cfg_ref){ section_names[key->section], key->name, value, L->origin[k] };
}

/* A key of declared group gi, in its section, with the section's value. */
static cfg_ref group_key_ref(const loader *L, int gi, const kind_key *key, char *value, size_t n)
{
    const key_group *g = L->c->groups[gi];
    key_format(key, L->c->group_values[gi], value, n);
    return (cfg_ref){ g->section, key->name, value, L->gorigin[gi][group_key_index(g, key)] };
}

/* The longest text value that still fits "key = value" on one INI line. */
static int max_text(const cfg_key *k)
{
    int line = LINE_CHARS - (int)strlen(k->name) - 3;
    int field = (int)k->size - 1;
    return line < field ? line : field;
}

/* ---- values ------------------------------------------------------------- */

static bool only_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

static bool parse_long_text(const char *s, long *v)
{
    return key_text_long(s, v);
}

static bool parse_u64_text(const char *s, uint64_t *v)
{
    return num_parse_u64(s, v);
}

static bool parse_double_text(const char *s, double *v)
{
    return key_text_double(s, v);
}

static bool in_range(const cfg_key *k, double x)
{
    bool lo = (k->open & MIN_OPEN) ? x > k->min : x >= k->min;
    bool hi = k->max == NO_MAX || ((k->open & MAX_OPEN) ? x < k->max : x <= k->max);
    return lo && hi;
}

/* Text a value may hold: what inih hands back unchanged and the writer can
 * put on one line (no ';' comment, no control characters). */
static bool text_ok(const cfg_key *k, const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || (int)n > max_text(k) || isspace((unsigned char)s[0]) ||
        isspace((unsigned char)s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (iscntrl((unsigned char)s[i]) || s[i] == ';')
            return false;
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static bool source_ok(const char *s)
{
    return strcmp(s, "brown") == 0 || strcmp(s, "synthetic") == 0 || ends_with(s, ".txt") ||
           ends_with(s, ".bin") || ends_with(s, ".u32");
}

/* A held-out file: not synthetic, which would be the training corpus again. */
static bool held_out_ok(const char *s)
{
    return strcmp(s, "none") == 0 || (strcmp(s, "synthetic") != 0 && source_ok(s));
}

static bool has_held_out(const run_config *c)
{
    return strcmp(c->val_source, "none") != 0;
}

/* Text sources are byte tokens: V = 256 (MODEL.md "Data"); token files
 * (.bin uint16, .u32 uint32) hold ids below [data] vocab. */
static bool text_source(const char *s)
{
    return !ends_with(s, ".bin") && !ends_with(s, ".u32");
}

static int name_index(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* What a key takes, for "expected ..." messages. */
static void expected_text(const cfg_key *k, char *out, size_t n)
{
    const char *what = k->type == K_DOUBLE ? "a number" : "an integer";
    char names[MSG_LEN];
    switch (k->type) {
    case K_STR:
        snprintf(out, n, "a text of 1 to %d characters without ';', control characters "
                 "or surrounding spaces", max_text(k));
        break;
    case K_NAME:
        snprintf(out, n, "a folder name inside run.out: 1 to %d characters without '/', ';', "
                 "control characters or surrounding spaces, not starting with '.'",
                 max_text(k));
        break;
    case K_SOURCE:
        snprintf(out, n, "brown, synthetic or a path ending .txt, .bin or .u32 (at most %d "
                 "characters)", max_text(k));
        break;
    case K_HELD_OUT:
        snprintf(out, n, "none, brown or a path ending .txt, .bin or .u32 (at most %d "
                 "characters)", max_text(k));
        break;
    case K_ENUM:
        join(names, sizeof(names), k->allowed);
        snprintf(out, n, "one of %.900s", names);
        break;
    case K_U64: snprintf(out, n, "an integer in [0, %" PRIu64 "]", UINT64_MAX); break;
    default:
        if (k->max == NO_MAX && k->type == K_INT) /* the int it is stored in bounds it */
            snprintf(out, n, "%s in %c%.10g, %d]", what, (k->open & MIN_OPEN) ? '(' : '[',
                     k->min, INT_MAX);
        else if (k->max == NO_MAX)
            snprintf(out, n, "%s %s %.10g", what, (k->open & MIN_OPEN) ? ">" : ">=", k->min);
        else
            snprintf(out, n, "%s in %c%.10g, %.10g%c", what, (k->open & MIN_OPEN) ? '(' : '[',
                     k->min, k->max, (k->open & MAX_OPEN) ? ')' : ']');
        break;
    }
}

static int parse_layers(loader *L, const char *text, char *why, size_t n);

/* Parse text into key k's field of base; on failure say what was expected. */
static int parse_value(loader *L, const cfg_key *k, char *base, const char *text, char *why,
                       size_t n)
{
    void *f = base + k->offset;
    long l = 0;
    double d = 0.0;
    bool ok = false;
    switch (k->type) {
    case K_LAYERS: return parse_layers(L, text, why, n);
    case K_STR: ok = text_ok(k, text); break;
    case K_NAME: ok = text_ok(k, text) && !strchr(text, '/') && text[0] != '.'; break;
    case K_SOURCE: ok = text_ok(k, text) && source_ok(text); break;
    case K_HELD_OUT: ok = text_ok(k, text) && held_out_ok(text); break;
    case K_ENUM: ok = name_index(k->allowed, text) >= 0; break;
    case K_U64: ok = parse_u64_text(text, (uint64_t *)f); break;
    case K_LONG:
        if ((ok = parse_long_text(text, &l) && in_range(k, (double)l)))
            *(long *)f = l;
        break;
    case K_INT:
        if ((ok = parse_long_text(text, &l) && l >= INT_MIN && l <= INT_MAX &&
                  in_range(k, (double)l)))
            *(int *)f = (int)l;
        break;
    case K_DOUBLE:
        if ((ok = parse_double_text(text, &d) && in_range(k, d)))
            *(double *)f = d;
        break;
    }
    if (ok && (k->type == K_STR || k->type == K_NAME || k->type == K_SOURCE ||
               k->type == K_HELD_OUT || k->type == K_ENUM))
        snprintf((char *)f, k->size, "%s", text);
    if (!ok)
        expected_text(k, why, n);
    return ok ? 0 : -EINVAL;
}

/* ---- the layer-spec table ---------------------------------------------- */

static int parse_layers(loader *L, const char *text, char *why, size_t n)
{
    const cfg_key *k = &config_keys[key_index(SEC_MODEL, "layers")];
    if (only_space(text)) {
        char names[256];
        join_kinds(names, sizeof(names), L->kinds);
        snprintf(why, n, "a layer-spec table such as \"dense x 4\" or "
                 "\"dense, (dense, KIND) x 2\" (kinds: %s)", names);
        return -EINVAL;
    }
    if (!text_ok(k, text)) {
        snprintf(why, n, "a layer-spec table of at most %d characters", max_text(k));
        return -EINVAL;
    }
    if (parse_layer_table(text, L->kinds, L->c->layers, &L->c->n_layers, why, n))
        return -EINVAL;
    snprintf(L->c->layers_text, sizeof(L->c->layers_text), "%s", text);
    return 0;
}

/* ---- setting values ----------------------------------------------------- */

static int out_of_memory(loader *L, const cfg_ref *r)
{
    failf(L, r, "out of memory");
    return -ENOMEM;
}

static int add_layer_entry(loader *L, int li, const cfg_ref *r)
{
    layer_entry *e = NULL;
    for (int i = 0; i < L->n_entries && !e; i++)
        if (L->entries[i].layer == li && strcmp(L->entries[i].key, r->key) == 0)
            e = &L->entries[i];
    if (e && e->origin > 0 && r->origin > 0)
        return failf(L, r, "expected each key once per section (set before at line %d)",
                     e->origin);
    if (!e) {
        if (L->n_entries == L->cap_entries) {
            int cap = L->cap_entries ? 2 * L->cap_entries : 16;
            layer_entry *grown = realloc(L->entries, (size_t)cap * sizeof(*grown));
            if (!grown)
                return out_of_memory(L, r);
            L->entries = grown;
            L->cap_entries = cap;
        }
        e = &L->entries[L->n_entries++];
        *e = (layer_entry){ .layer = li, .key = strdup(r->key) };
    }
    free(e->value);
    e->value = strdup(r->value);
    e->origin = r->origin;
    return e->key && e->value ? 0 : out_of_memory(L, r);
}

/* "a, b, c": the keys of group g. */
static void group_key_names(const key_group *g, char *out, size_t n)
{
    out[0] = '\0';
    for (const kind_key *k = g->keys; k->name; k++)
        snprintf(out + strlen(out), n - strlen(out), "%s%s", out[0] ? ", " : "", k->name);
}

/* A key of a declared group's section ([optim], a kind's, ...). */
static int set_group_value(loader *L, int gi, const cfg_ref *r)
{
    const key_group *g = L->c->groups[gi];
    const kind_key *k = key_group_find(g, r->key);
    if (!k) {
        char names[MSG_LEN];
        group_key_names(g, names, sizeof(names));
        return failf(L, r, "expected a key of [%s] among %s", g->section, names);
    }
    int *origin = &L->gorigin[gi][group_key_index(g, k)];
    if (r->origin > 0 && *origin > 0)
        return failf(L, r, "expected each key once per section (set before at line %d)", *origin);
    char why[MSG_LEN];
    if (key_parse(k, L->c->group_values[gi], r->value, why, sizeof(why)))
        return failf(L, r, "expected %s", why);
    *origin = r->origin;
    return 0;
}

/* One "key = value" of [section], from the file or the command line: an
 * override replaces what the file said, a key twice in the file is an error. */
static int set_value(loader *L, const char *section, const char *key, const char *value,
                     int origin)
{
    cfg_ref r = { section, key, value, origin };
    int li = layer_section(section);
    if (li >= 0)
        return add_layer_entry(L, li, &r);
    int sec = section_index(section);
    if (sec < 0 && !section[0])
        return failf(L, &r, "expected a [section] line before the first key");
    int gi = sec < 0 ? config_group_index(L->c, section) : -1;
    if (gi >= 0)
        return set_group_value(L, gi, &r);
    if (sec < 0) {
        char names[MSG_LEN] = "";
        for (int i = 0; i < SEC_COUNT + L->c->n_groups; i++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "[%s], ",
                     i < SEC_COUNT ? section_names[i] : L->c->groups[i - SEC_COUNT]->section);
        return failf(L, &r, "expected a section among %sand [layer.N]", names);
    }
    int k = key_index(sec, key);
    if (k < 0) {
        char names[MSG_LEN] = "";
        for (int i = 0; i < N_KEYS; i++)
            if (config_keys[i].section == sec)
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                         names[0] ? ", " : "", config_keys[i].name);
        return failf(L, &r, "expected a key of [%s] among %s", section, names);
    }
    if (origin > 0 && L->origin[k] > 0)
        return failf(L, &r, "expected each key once per section (set before at line %d)",
                     L->origin[k]);
    char why[MSG_LEN];
    if (parse_value(L, &config_keys[k], key_base(&config_keys[k], L->c), value, why, sizeof(why)))
        return failf(L, &r, "expected %s", why);
    L->origin[k] = origin;
    return 0;
}

char *config_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

int config_override_split(const char *over, size_t *sec_len)
{
    const char *eq = strchr(over, '=');
    size_t n = eq ? (size_t)(eq - over) : strlen(over);
    size_t digits = n > 6 && !strncmp(over, "layer.", 6) ? strspn(over + 6, "0123456789") : 0;
    if (digits >= 1 && digits <= 9 && 6 + digits < n && over[6 + digits] == '.') {
        *sec_len = 6 + digits;
        return (int)strtol(over + 6, NULL, 10);
    }
    *sec_len = 0;
    for (size_t i = n; i-- > 0;)
        if (over[i] == '.') {
            *sec_len = i;
            break;
        }
    return -1;
}

/* "section.key=value", split by config_override_split. */
static int apply_override(loader *L, const char *arg)
{
    char why[MSG_LEN];
    size_t at = 0;
    if (text_check(arg, strlen(arg), 0, &at, why, sizeof(why)))
        return fail_line(L, 0, "%.*s...: %s", (int)at, arg, why);
    char *s = strdup(arg);
    if (!s)
        return -ENOMEM;
    char *eq = strchr(s, '=');
    size_t sec_len;
    config_override_split(s, &sec_len);
    bool split = eq && sec_len > 0;
    if (split) {
        *eq = '\0';
        s[sec_len] = '\0';
    }
    char *sec = config_trim(s), *key = split ? config_trim(s + sec_len + 1) : sec;
    int rc;
    if (!split || !*sec || !*key)
        rc = fail_line(L, 0, "%s: expected section.key=value, such as run.steps=1000", arg);
    else
        rc = set_value(L, sec, key, config_trim(eq + 1), ORIGIN_CMDLINE);
    free(s);
    return rc;
}

/* ---- the INI file ------------------------------------------------------- */

/* inih's reader: hands over one whole line and counts it, so that L->line is
 * the line the handler is called for (this inih has no INI_HANDLER_LINENO).
 * A line that is not UTF-8 or holds a NUL byte (a file saved as UTF-16) is
 * refused, never skipped or read up to its NUL (core/util/text.h). */
static char *read_line(char *str, int num, void *stream)
{
    loader *L = stream;
    char why[MSG_LEN];
    size_t n = 0;
    int rc = text_next_line(&L->lines, str, num, &n, why, sizeof(why));
    L->line = L->lines.line;
    if (rc == -E2BIG)
        fail_line(L, L->line, "expected lines of at most %d characters", LINE_CHARS);
    else if (rc < 0)
        fail_line(L, L->line > 0 ? L->line : 1, "%s", why);
    if (rc <= 0)
        return NULL;
    L->indented = isspace((unsigned char)str[0]) && !only_space(str);
    return str;
}

static int on_value(void *user, const char *section, const char *name, const char *value)
{
    loader *L = user;
    if (L->failed)
        return 1; /* the first error is the one reported */
    /* inih reads an indented line as more of the value above */
    if (L->indented)
        return !fail_line(L, L->line, "expected no indentation (inih would read this line "
                                      "as the continuation of the value above)");
    return set_value(L, section, name, value, L->line) == 0;
}

static int parse_ini(loader *L)
{
    int rc = ini_parse_stream(read_line, L, on_value, L);
    if (rc > 0 && (!L->failed || rc < L->err_line)) {
        /* a line inih could not read, before any error of ours */
        L->failed = false;
        return fail_line(L, rc, "syntax error: expected [section], key = value or a comment");
    }
    if (rc < 0 && !L->failed)
        return fail_line(L, L->line > 0 ? L->line : 1, "inih failed (%d): out of memory", rc);
    return L->failed ? -EINVAL : 0;
}

/* ---- checks between keys ------------------------------------------------ */

/* The sources: a held-out file of the same kind as the source (byte text
 * with text, token ids with token ids). */
static int check_source(loader *L)
{
    run_config *c = L->c;
    int kv = key_index(SEC_DATA, "vocab"), ks = key_index(SEC_DATA, "source");
    int kh = key_index(SEC_DATA, "val_source");
    char va[VALUE_LEN], vb[VALUE_LEN];
    /* a .bin's token width is its header's (llm.c's version 7: uint32), so
     * the vocab is checked against it when the file is opened (data.h) */
    if (has_held_out(c) && text_source(c->source) != text_source(c->val_source)) {
        cfg_ref a = key_ref(L, kh, va, sizeof(va)), b = key_ref(L, ks, vb, sizeof(vb));
        return fail_pair(L, &a, " to be of the same kind as ", &b,
                         ": byte text (brown, .txt) with a text source, token files (.bin, .u32) "
                         "with a token file");
    }
    int kt = key_index(SEC_DATA, "tokenizer");
    if (strcmp(c->tokenizer, "none") != 0 && text_source(c->source)) {
        cfg_ref a = key_ref(L, kt, va, sizeof(va)), b = key_ref(L, ks, vb, sizeof(vb));
        return fail_pair(L, &a, " to go with a token file (.bin, .u32: mode-exp tokenize), not "
                         "the byte source ", &b, "");
    }
    if (!text_source(c->source))
        return 0;
    if (L->origin[kv] != ORIGIN_DEFAULT && c->vocab != 256) {
        cfg_ref a = key_ref(L, kv, va, sizeof(va)), b = key_ref(L, ks, vb, sizeof(vb));
        return fail_pair(L, &a, " to be 256 (byte tokens) with the text source ", &b, "");
    }
    c->vocab = 256;
    return 0;
}

/* A mixed batch is half below the median, half above (docs/data-mix.md):
 * an even batch of a corpus with documents. */
static int check_mix(loader *L)
{
    const run_config *c = L->c;
    if (strcmp(c->mix, "difficulty") != 0)
        return 0;
    char va[VALUE_LEN], vb[VALUE_LEN];
    cfg_ref m = key_ref(L, key_index(SEC_DATA, "mix"), vb, sizeof(vb));
    if (c->batch % 2) {
        cfg_ref a = key_ref(L, key_index(SEC_DATA, "batch"), va, sizeof(va));
        return fail_pair(L, &a, " to be even (half below the median, half above) with ", &m,
                         "");
    }
    if (!strcmp(c->source, "synthetic") || !text_source(c->source)) {
        cfg_ref a = key_ref(L, key_index(SEC_DATA, "source"), va, sizeof(va));
        return fail_pair(L, &a, " to be byte text of documents (brown, a .txt) with ", &m,
                         ": the synthetic corpus and token files keep no document boundaries");
    }
    return 0;
}

static int check_steps(loader *L)
{
    if (L->c->steps > 0 || L->c->flops_budget > 0.0)
        return 0;
    char va[VALUE_LEN], vb[VALUE_LEN];
    cfg_ref a = key_ref(L, key_index(SEC_RUN, "steps"), va, sizeof(va));
    cfg_ref b = key_ref(L, key_index(SEC_RUN, "flops_budget"), vb, sizeof(vb));
    return fail_pair(L, &a, " or ", &b, " to be > 0: set run.steps or run.flops_budget");
}

/* The positions of a step (sequences x length) index ints in the kernels. */
static int check_positions(loader *L)
{
    const run_config *c = L->c;
    if ((long)c->batch * c->seq_len <= MODE_MAX_POSITIONS)
        return 0;
    char va[VALUE_LEN], vb[VALUE_LEN];
    cfg_ref a = key_ref(L, key_index(SEC_DATA, "batch"), va, sizeof(va));
    cfg_ref b = key_ref(L, key_index(SEC_DATA, "seq_len"), vb, sizeof(vb));
    return fail_pair(L, &a, " times ", &b, " to be at most 2^30 token positions a step");
}

/* RoPE rotates pairs of a head's coordinates: the head width must be even. */
static int check_heads(loader *L)
{
    const run_config *c = L->c;
    if (c->d_model % c->n_heads == 0 && (c->d_model / c->n_heads) % 2 == 0)
        return 0;
    char va[VALUE_LEN], vb[VALUE_LEN];
    cfg_ref a = key_ref(L, key_index(SEC_MODEL, "d_model"), va, sizeof(va));
    cfg_ref b = key_ref(L, key_index(SEC_MODEL, "n_heads"), vb, sizeof(vb));
    if (c->d_model % c->n_heads)
        return fail_pair(L, &a, " to be a multiple of ", &b, "");
    return fail_pair(L, &a, " divided by ", &b, " to be even (the head width, for RoPE)");
}

/* Every rank takes the same number of whole sequences. */
static int check_ranks(loader *L, int ranks)
{
    int n_seq = L->c->batch;
    if (ranks <= 0 || (n_seq >= ranks && n_seq % ranks == 0))
        return 0;
    char v[VALUE_LEN];
    cfg_ref r = key_ref(L, key_index(SEC_DATA, "batch"), v, sizeof(v));
    if (n_seq < ranks)
        return failf(L, &r, "expected at least %d, one sequence per rank "
                            "(more ranks than sequences)", ranks);
    return failf(L, &r, "expected a multiple of the %d ranks", ranks);
}

/* Layer li's value of key (of group gi): its [layer.N] entry, else the
 * section's (li < 0: the section's). */
static cfg_ref layer_key_ref(const loader *L, int li, int gi, const kind_key *key, char *sec,
                             size_t sec_len, char *value, size_t n)
{
    for (int i = L->n_entries - 1; li >= 0 && i >= 0; i--) {
        const layer_entry *e = &L->entries[i];
        const kind_group *eg = NULL;
        const layer_kind *kind = layer_kind_lookup(L->kinds, L->c->layers[li].kind);
        if (e->layer == li && layer_key(kind, e->key, &eg) == key &&
            !strcmp(eg->group->section, L->c->groups[gi]->section)) {
            snprintf(sec, sec_len, "layer.%d", li);
            return (cfg_ref){ sec, e->key, e->value, e->origin };
        }
    }
    return group_key_ref(L, gi, key, value, n);
}

/* A group's checks between its keys on values (a section's, li < 0, or
 * layer li's), the message naming both keys where they were set. */
static int check_group(loader *L, int gi, const void *values, int li)
{
    const key_group *g = L->c->groups[gi];
    key_problem pr = { 0 };
    if (!g->check || g->check(values, &pr) == 0)
        return 0;
    const kind_key *ka = key_group_find(g, pr.key), *kb = pr.other ? key_group_find(g, pr.other)
                                                                    : NULL;
    char sa[32], sb[32], va[VALUE_LEN], vb[VALUE_LEN];
    cfg_ref a = layer_key_ref(L, li, gi, ka, sa, sizeof(sa), va, sizeof(va));
    if (!kb)
        return failf(L, &a, "expected %s%s", pr.rel ? pr.rel : "another value",
                     pr.tail ? pr.tail : "");
    cfg_ref b = layer_key_ref(L, li, gi, kb, sb, sizeof(sb), vb, sizeof(vb));
    return fail_pair(L, &a, pr.rel, &b, pr.tail ? pr.tail : "");
}

static int check_sections(loader *L)
{
    for (int gi = 0; gi < L->c->n_groups; gi++)
        if (check_group(L, gi, L->c->group_values[gi], -1))
            return -EINVAL;
    return 0;
}

/* ---- layers ------------------------------------------------------------- */

/* "a, b, c": every key a kind takes (or "none"). */
static void kind_key_names(const layer_kind *kind, char *out, size_t n)
{
    out[0] = '\0';
    for (const kind_group *g = kind->groups; g && g->group; g++)
        for (const kind_key *k = g->group->keys; k->name; k++) {
            char name[96];
            layer_key_name(kind, g, k, name, sizeof(name));
            snprintf(out + strlen(out), n - strlen(out), "%s%s", out[0] ? ", " : "", name);
        }
    if (!out[0])
        snprintf(out, n, "none");
}

static int apply_entry(loader *L, const layer_entry *e)
{
    run_config *c = L->c;
    char sec[32];
    snprintf(sec, sizeof(sec), "layer.%d", e->layer);
    cfg_ref r = { sec, e->key, e->value, e->origin };
    if (e->layer >= c->n_layers)
        return failf(L, &r, "expected a layer index in 0..%d ([model] layers has %d layers)",
                     c->n_layers - 1, c->n_layers);
    const layer_kind *kind = layer_kind_lookup(L->kinds, c->layers[e->layer].kind);
    char why[MSG_LEN];
    int rc = layer_spec_set(&c->layers[e->layer], kind, e->key, e->value, why, sizeof(why));
    if (rc == -ENOENT) {
        char keys[MSG_LEN];
        kind_key_names(kind, keys, sizeof(keys));
        return failf(L, &r, "layer %d is '%s', which takes no key '%s' (it takes: %s)", e->layer,
                     kind->name, e->key, keys);
    }
    if (rc)
        return failf(L, &r, "expected %s", why);
    return 0;
}

/* Every layer starts from its kind's defaults, then the sections of the
 * groups it reads; the defaults' "dense x 4" was never
 * checked against the kinds table, so every kind is looked up here. */
static int start_layers(loader *L)
{
    run_config *c = L->c;
    for (int l = 0; l < c->n_layers; l++) {
        layer_spec *s = &c->layers[l];
        const layer_kind *kind = layer_kind_lookup(L->kinds, s->kind);
        if (!kind) {
            char v[VALUE_LEN], names[MSG_LEN];
            cfg_ref r = key_ref(L, key_index(SEC_MODEL, "layers"), v, sizeof(v));
            join_kinds(names, sizeof(names), L->kinds);
            return failf(L, &r, "expected a layer kind among %s, not '%s'", names, s->kind);
        }
        layer_spec_init(s, kind);
        for (const kind_group *g = kind->groups; g && g->group; g++) {
            int gi = config_group_index(c, g->group->section);
            memcpy(layer_group_values(s, g), c->group_values[gi], g->group->size);
        }
    }
    return 0;
}

static int validate_layer(loader *L, int l, const model_dims *dims)
{
    const layer_spec *s = &L->c->layers[l];
    const layer_kind *kind = layer_kind_lookup(L->kinds, s->kind);
    for (const kind_group *g = kind->groups; g && g->group; g++)
        if (check_group(L, config_group_index(L->c, g->group->section), layer_group_cvalues(s, g), l))
            return -EINVAL;
    char msg[MSG_LEN] = "";
    if (!kind->validate || kind->validate(s, dims, msg, (int)sizeof(msg)) == 0)
        return 0;
    char v[VALUE_LEN];
    cfg_ref r = key_ref(L, key_index(SEC_MODEL, "layers"), v, sizeof(v));
    return failf(L, &r, "layer %d (%s): %s", l, kind->name, msg);
}

static int resolve_layers(loader *L)
{
    if (start_layers(L))
        return -EINVAL;
    for (int i = 0; i < L->n_entries; i++)
        if (apply_entry(L, &L->entries[i]))
            return -EINVAL;
    model_dims dims = config_dims(L->c);
    for (int l = 0; l < L->c->n_layers; l++)
        if (validate_layer(L, l, &dims))
            return -EINVAL;
    return 0;
}

/* Expert parallelism: the tensors of E experts are spread over the ranks,
 * each computing E/ranks of them, or ranks/E groups each holding all;
 * nothing else.  E is the value of a kind's KEY_SHARDED key. */
static int check_expert_ranks(loader *L, int ranks)
{
    for (int li = 0; ranks > 1 && li < L->c->n_layers; li++) {
        const layer_spec *s = &L->c->layers[li];
        const layer_kind *k = layer_kind_lookup(L->kinds, s->kind);
        for (const kind_group *g = k->groups; g && g->group; g++) {
            for (const kind_key *key = g->group->keys; key->name; key++) {
                if (!(key->flags & KEY_SHARDED))
                    continue;
                int E = (int)key_number(key, layer_group_cvalues(s, g));
                /* the experts the tensors hold (a kind may split each: the
                 * first dimension of its expert tensors) */
                tensor_desc td[MODE_MAX_LAYER_TENSORS];
                model_dims dims = config_dims(L->c);
                int nt = k->tensors ? k->tensors(s, &dims, td, MODE_MAX_LAYER_TENSORS) : 0;
                for (int t = 0; t < nt; t++)
                    if (td[t].expert_dim)
                        E = td[t].shape[0] > E ? td[t].shape[0] : E;
                if (E > 0 && (E % ranks == 0 || ranks % E == 0))
                    continue;
                char sec[32], v[VALUE_LEN];
                cfg_ref r = layer_key_ref(L, li, config_group_index(L->c, g->group->section), key, sec,
                                          sizeof(sec), v, sizeof(v));
                return failf(L, &r,
                             "expected a multiple or a divisor of the %d ranks (layer %d, %s: "
                             "%d experts; each rank computes experts/ranks of them, or groups "
                             "of `experts` ranks each hold all)", ranks, li, k->name, E);
            }
        }
    }
    return 0;
}

/* init_seed and data_seed follow run.seed unless set: one key for a
 * replicate, two to vary initialisation and data order apart. */
static void resolve_seeds(loader *L)
{
    if (L->origin[key_index(SEC_RUN, "init_seed")] == ORIGIN_DEFAULT)
        L->c->init_seed = L->c->seed;
    if (L->origin[key_index(SEC_RUN, "data_seed")] == ORIGIN_DEFAULT)
        L->c->data_seed = L->c->seed;
}

static int resolve(loader *L, int ranks)
{
    if (check_source(L) || check_mix(L) || check_steps(L) || check_positions(L) || check_heads(L) ||
        check_ranks(L, ranks) || check_sections(L) || resolve_layers(L) ||
        check_expert_ranks(L, ranks))
        return -EINVAL;
    resolve_seeds(L);
    return 0;
}

/* From a file (f) or text; c is written only on success. */
static int load(run_config *c, FILE *f, const char *text, const char *path, int n_over,
                char *const *over, const config_schema *schema, int ranks, char *err,
                int err_len)
{
    int rc = -ENOMEM;
    schema = schema ? schema : &config_core_schema;
    loader L = { .kinds = schema->kinds, .path = path ? path : "config",
                 .lines = { .f = f, .text = text ? text : "" } };
    L.c = malloc(sizeof(*L.c));
    if (!L.c)
        goto fail;
    config_defaults(L.c, schema);
    rc = parse_ini(&L);
    for (int i = 0; rc == 0 && i < n_over; i++)
        rc = apply_override(&L, over[i]);
    if (rc == 0)
        rc = resolve(&L, ranks);
    if (rc == 0)
        *c = *L.c;
fail:
    if (rc && !L.failed)
        snprintf(L.err, sizeof(L.err), "%s: out of memory", L.path);
    if (err && err_len > 0)
        snprintf(err, (size_t)err_len, "%s", rc ? L.err : "");
    for (int i = 0; i < L.n_entries; i++) {
        free(L.entries[i].key);
        free(L.entries[i].value);
    }
    free(L.entries);
    free(L.c);
    return rc;
}

int config_load(run_config *c, const char *path, int n_over, char *const *over,
                const config_schema *schema, int ranks, char *err, int err_len)
{
    char why[CFG_ERR_LEN];
    FILE *f = file_fopen_regular(path, "r", why, sizeof(why));
    if (!f) {
        int e = errno;
        if (err && err_len > 0)
            snprintf(err, (size_t)err_len, "%s", why);
        return e ? -e : -EIO;
    }
    int rc = load(c, f, NULL, path, n_over, over, schema, ranks, err, err_len);
    fclose(f);
    return rc;
}

int config_load_string(run_config *c, const char *text, const char *path, int n_over,
                       char *const *over, const config_schema *schema, int ranks, char *err,
                       int err_len)
{
    return load(c, NULL, text, path, n_over, over, schema, ranks, err, err_len);
}
