/* Reading a sweep file into a plan of runs (sweep.h).  The file is INI-like
 * and as strict as the config reader: unknown sections and keys, repeated
 * keys, empty values and names that are not safe as folder names stop it
 * with FILE:LINE.  The values themselves are checked later, by config_load()
 * on every generated config, and sweep_config_error() points its messages
 * back at the line. */
#include "experiments/sweep.h"

#include "core/util/num.h"
#include "core/config/config.h"
#include "core/model/spec.h"
#include "core/util/file.h"
#include "core/util/text.h"
#include "moe/registry.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

#define KEY_LEN 128
#define MAX_VALUES 64 /* values of one list */

typedef enum sec_type { SEC_SWEEP, SEC_ALL, SEC_GRID, SEC_EXTRA, SEC_ISOFLOP, SEC_KIND } sec_type;

typedef struct entry {
    char key[KEY_LEN];
    char value[SWEEP_LINE_CHARS];
    int line;
} entry;

typedef struct section {
    sec_type type;
    char title[SWEEP_NAME_LEN + 8]; /* as written between [ ] */
    int name_at;                    /* the name after "extra." or "kind.": title + name_at */
    int line, n;
    entry *e;
} section;

typedef struct parser {
    sweep_plan *p;
    section *s;
    int n_s;
    char *err;
    int err_len;
} parser;

/* A list of values split out of one line. */
typedef struct value_list {
    int n;
    char *v[MAX_VALUES];
    char buf[SWEEP_LINE_CHARS];
} value_list;

static int fail(parser *P, int line, const char *fmt, ...) PRINTF_LIKE(3, 4);
static int fail(parser *P, int line, const char *fmt, ...)
{
    int n = line > 0 ? snprintf(P->err, (size_t)P->err_len, "%s:%d: ", P->p->path, line)
                     : snprintf(P->err, (size_t)P->err_len, "%s: ", P->p->path);
    if (n > 0 && n < P->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(P->err + n, (size_t)(P->err_len - n), fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* A comment starts a line with ';' or '#', or follows whitespace. */
static void strip_comment(char *s)
{
    for (char *c = s; *c; c++)
        if ((*c == ';' || *c == '#') && (c == s || isspace((unsigned char)c[-1]))) {
            *c = '\0';
            return;
        }
}

/* ---- the file: sections of key = value lines ----------------------------- */

/* The name of an [extra.NAME] or [kind.NAME] section (the array of sections
 * moves as it grows: no pointers into it are kept). */
static const char *sec_name(const section *s)
{
    return s->title + s->name_at;
}

static section *find_section(parser *P, const char *title)
{
    for (int i = 0; i < P->n_s; i++)
        if (!strcmp(P->s[i].title, title))
            return &P->s[i];
    return NULL;
}

/* Letters, digits and . _ + - (not first a dot): safe as a folder name. */
static bool safe_word(const char *s, bool allow_dash)
{
    if (!*s || *s == '.')
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr(allow_dash ? "._+-" : "_", *s))
            return false;
    return true;
}

static int add_section(parser *P, char *title, int line)
{
    section *old = find_section(P, title);
    if (old)
        return fail(P, line, "[%s] appears twice (first at line %d)", title, old->line);
    section s = { .line = line };
    size_t len = strlen(title);
    if (len >= sizeof(s.title))
        return fail(P, line, "[%.40s...]: expected a shorter section name", title);
    memcpy(s.title, title, len + 1);
    if (!strcmp(title, "sweep"))
        s.type = SEC_SWEEP;
    else if (!strcmp(title, "all"))
        s.type = SEC_ALL;
    else if (!strcmp(title, "grid"))
        s.type = SEC_GRID;
    else if (!strcmp(title, "isoflop"))
        s.type = SEC_ISOFLOP;
    else if (!strncmp(title, "extra.", 6))
        s.type = SEC_EXTRA;
    else if (!strncmp(title, "kind.", 5))
        s.type = SEC_KIND;
    else
        return fail(P, line, "[%s]: unknown section (expected [sweep], [all], [grid], "
                             "[extra.NAME], [isoflop] or [kind.NAME])", title);
    section *grown = realloc(P->s, (size_t)(P->n_s + 1) * sizeof(section));
    if (!grown)
        return -ENOMEM;
    P->s = grown;
    section *n = &P->s[P->n_s++];
    *n = s;
    n->name_at = s.type == SEC_EXTRA ? 6 : s.type == SEC_KIND ? 5 : 0;
    if (s.type == SEC_EXTRA && !safe_word(sec_name(n), true))
        return fail(P, line, "[%s]: expected a run name of letters, digits and . _ + - "
                             "(it names the run's folder)", title);
    if (s.type == SEC_KIND && !safe_word(sec_name(n), false))
        return fail(P, line, "[%s]: expected a kind name of letters, digits and _ (it ends "
                             "the run names, after the last '-')", title);
    return 0;
}

static int add_entry(parser *P, section *s, const char *key, const char *value, int line)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->e[i].key, key) && !(s->type == SEC_ISOFLOP && !strcmp(key, "size")))
            return fail(P, line, "[%s] %s is set twice (first at line %d)", s->title, key,
                        s->e[i].line);
    if (strlen(key) >= KEY_LEN)
        return fail(P, line, "[%s] %.40s...: expected a shorter key", s->title, key);
    entry *grown = realloc(s->e, (size_t)(s->n + 1) * sizeof(entry));
    if (!grown)
        return -ENOMEM;
    s->e = grown;
    entry *e = &s->e[s->n++];
    snprintf(e->key, sizeof(e->key), "%s", key);
    snprintf(e->value, sizeof(e->value), "%s", value);
    e->line = line;
    return 0;
}

static int read_file(parser *P, FILE *f)
{
    char buf[SWEEP_LINE_CHARS + 2], why[200];
    int rc = 0, got;
    size_t len;
    section *cur = NULL;
    /* a line that is not UTF-8 or holds a NUL is refused (core/util/text.h) */
    text_lines lines = { .f = f };
    while (!rc && (got = text_next_line(&lines, buf, sizeof(buf), &len, why, sizeof(why)))) {
        int line = lines.line;
        if (got == -E2BIG)
            return fail(P, line, "expected lines of at most %d characters", SWEEP_LINE_CHARS);
        if (got < 0)
            return fail(P, line, "%s", why);
        strip_comment(buf);
        char *s = config_trim(buf);
        if (!*s)
            continue;
        if (*s == '[') {
            char *end = strchr(s, ']');
            if (!end || end[1])
                return fail(P, line, "%s: expected [section]", s);
            *end = '\0';
            if ((rc = add_section(P, config_trim(s + 1), line)))
                return rc;
            cur = &P->s[P->n_s - 1];
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq)
            return fail(P, line, "%s: expected key = value", s);
        *eq = '\0';
        char *key = config_trim(s), *value = config_trim(eq + 1);
        if (!cur)
            return fail(P, line, "%s = %s: expected a [section] first", key, value);
        if (!*key)
            return fail(P, line, "= %s: expected a key before '='", value);
        if (!*value)
            return fail(P, line, "[%s] %s: expected a value after '='", cur->title, key);
        rc = add_entry(P, cur, key, value, line);
    }
    return rc;
}

/* ---- values ----------------------------------------------------------------- */

/* Values separated by ',', or by '|' for model.layers (layer-spec tables
 * contain commas) and on any line that holds a '|'. */
static int split_list(parser *P, const section *s, const entry *e, char sep, value_list *l)
{
    snprintf(l->buf, sizeof(l->buf), "%s", e->value);
    if (!sep)
        sep = strchr(l->buf, '|') || !strcmp(e->key, "model.layers") ? '|' : ',';
    l->n = 0;
    char *p = l->buf;
    for (;;) {
        char *end = strchr(p, sep);
        if (end)
            *end = '\0';
        char *v = config_trim(p);
        if (!*v)
            return fail(P, e->line, "[%s] %s = %s: expected a list of values separated by "
                                    "'%c', found an empty one", s->title, e->key, e->value, sep);
        for (int i = 0; i < l->n; i++)
            if (!strcmp(l->v[i], v))
                return fail(P, e->line, "[%s] %s = %s: the value %s is listed twice", s->title,
                            e->key, e->value, v);
        if (l->n == MAX_VALUES)
            return fail(P, e->line, "[%s] %s: expected at most %d values", s->title, e->key,
                        MAX_VALUES);
        l->v[l->n++] = v;
        if (!end)
            return 0;
        p = end + 1;
    }
}

/* Whether key reads as "section.key" (config overrides check the rest). */
static bool key_syntax(const char *key)
{
    const char *dot = strrchr(key, '.');
    bool ok = dot && dot != key && dot[1];
    for (const char *c = key; ok && *c; c++)
        ok = isalnum((unsigned char)*c) || *c == '_' || *c == '.';
    return ok;
}

/* Why the sweep sets key itself (so a sweep file may not), or NULL. */
static const char *reserved_key(const char *key, bool isoflop)
{
    if (!strcmp(key, "run.name") || !strcmp(key, "run.out"))
        return "set by the sweep (each run is <out>/<run name>; [sweep] out sets out)";
    if (isoflop && (!strcmp(key, "run.steps") || !strcmp(key, "run.flops_budget")))
        return "set by the isoFLOP design ([isoflop] budgets)";
    if (isoflop && !strncmp(key, "model.", 6))
        return "set by the isoFLOP design (a size sets d_model, n_heads, d_ff and depth; a "
               "kind's pattern the layers)";
    return NULL;
}

static int check_key(parser *P, const section *s, const char *key, int line, bool isoflop)
{
    if (!key_syntax(key))
        return fail(P, line, "[%s] %s: expected a config key as section.key (such as "
                             "mod.capacity)", s->title, key);
    const char *why = reserved_key(key, isoflop);
    if (why)
        return fail(P, line, "[%s] %s: %s", s->title, key, why);
    return 0;
}

/* Letters, digits and . _ + - kept, every other run of characters one '-'. */
static void safe_text(char *out, size_t len, const char *in)
{
    size_t w = 0;
    bool dash = true; /* no leading '-' */
    for (; *in && w + 1 < len; in++) {
        unsigned char ch = (unsigned char)*in;
        if (isalnum(ch) || ch == '.' || ch == '_' || ch == '+') {
            out[w++] = (char)ch;
            dash = false;
        } else if (!dash) {
            out[w++] = '-';
            dash = true;
        }
    }
    while (w && out[w - 1] == '-')
        w--;
    out[w] = '\0';
}

/* "1e13", "3e13", "2.5e14": %g without the exponent's '+' and leading zeros. */
static void number_text(char *out, size_t len, double v)
{
    char buf[64], *w = out;
    snprintf(buf, sizeof(buf), "%g", v);
    for (const char *c = buf; *c && (size_t)(w - out) + 1 < len; c++) {
        *w++ = *c;
        if (*c == 'e') {
            if (c[1] == '+')
                c++;
            else if (c[1] == '-')
                *w++ = *++c;
            while (c[1] == '0' && c[2])
                c++;
        }
    }
    *w = '\0';
}

/* ---- the plan ------------------------------------------------------------- */

static int add_over(parser *P, sweep_run *r, int line, const char *key, const char *value)
{
    if (r->n_over == SWEEP_MAX_OVER)
        return fail(P, line, "run %s: more than %d settings", r->name, SWEEP_MAX_OVER);
    sweep_override *o = &r->over[r->n_over++];
    int n = snprintf(o->text, sizeof(o->text), "%s=%s", key, value);
    if (n < 0 || (size_t)n >= sizeof(o->text))
        return fail(P, line, "%s: the value is too long", key);
    o->line = line;
    return 0;
}

static int new_run(parser *P, const char *name, int line, sweep_run **out)
{
    sweep_plan *p = P->p;
    if (p->n_runs == SWEEP_MAX_RUNS)
        return fail(P, line, "more than %d runs", SWEEP_MAX_RUNS);
    if (!*name || *name == '.')
        return fail(P, line, "a run would be named '%s': expected a name that can be a folder",
                    name);
    if (strlen(name) >= SWEEP_NAME_LEN)
        return fail(P, line, "the run name %.60s... is longer than %d characters", name,
                    SWEEP_NAME_LEN - 1);
    for (int i = 0; i < p->n_runs; i++)
        if (!strcmp(p->runs[i].name, name))
            return fail(P, line, "two runs would be named %s (the other from line %d): "
                                 "expected values that name the runs apart", name,
                        p->runs[i].line);
    sweep_run *grown = realloc(p->runs, (size_t)(p->n_runs + 1) * sizeof(sweep_run));
    if (!grown)
        return -ENOMEM;
    p->runs = grown;
    sweep_run *r = &p->runs[p->n_runs++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->line = line;
    r->budget = r->size = r->kind = -1;
    *out = r;
    /* [all] first: the run's own settings come later and win */
    const section *all = find_section(P, "all");
    for (int i = 0; all && i < all->n; i++) {
        const entry *e = &all->e[i];
        int rc = check_key(P, all, e->key, e->line, p->isoflop);
        if (!rc)
            rc = add_over(P, r, e->line, e->key, e->value);
        if (rc)
            return rc;
    }
    return 0;
}

/* The cartesian product of [grid]: the first key varies slowest.  A run is
 * named "key-value" joined by '_', key the last part of section.key (the
 * whole key where two grid keys end alike). */
static int expand_grid(parser *P, const section *g)
{
    if (g->n == 0)
        return fail(P, g->line, "[grid]: expected at least one line section.key = v1, v2, ...");
    value_list *lists = calloc((size_t)g->n, sizeof(value_list));
    int *at = calloc((size_t)g->n, sizeof(int));
    const char **label = calloc((size_t)g->n, sizeof(char *));
    int rc = -ENOMEM;
    if (!lists || !at || !label)
        goto done;
    long total = 1;
    for (int k = 0; k < g->n; k++) {
        if ((rc = check_key(P, g, g->e[k].key, g->e[k].line, false)) ||
            (rc = split_list(P, g, &g->e[k], 0, &lists[k])))
            goto done;
        total *= lists[k].n;
        if (total > SWEEP_MAX_RUNS) {
            rc = fail(P, g->e[k].line, "[grid]: more than %d runs", SWEEP_MAX_RUNS);
            goto done;
        }
        const char *last = strrchr(g->e[k].key, '.') + 1;
        label[k] = last;
        for (int j = 0; j < g->n; j++)
            if (j != k && !strcmp(strrchr(g->e[j].key, '.') + 1, last))
                label[k] = g->e[k].key;
    }
    /* a key with one value is common to all runs: only the others name them */
    int varying = 0;
    for (int k = 0; k < g->n; k++)
        varying += lists[k].n > 1;
    for (long i = 0; i < total; i++) {
        char name[4 * SWEEP_NAME_LEN] = "", part[KEY_LEN + SWEEP_NAME_LEN + 4];
        char value[SWEEP_NAME_LEN];
        for (int k = 0; k < g->n; k++) {
            if (varying && lists[k].n == 1)
                continue;
            safe_text(value, sizeof(value), lists[k].v[at[k]]);
            snprintf(part, sizeof(part), "%s%s-%s", name[0] ? "_" : "", label[k], value);
            strncat(name, part, sizeof(name) - strlen(name) - 1);
        }
        sweep_run *r;
        if ((rc = new_run(P, name, g->e[0].line, &r)))
            goto done;
        for (int k = 0; k < g->n && !rc; k++)
            rc = add_over(P, r, g->e[k].line, g->e[k].key, lists[k].v[at[k]]);
        if (rc)
            goto done;
        for (int k = g->n - 1; k >= 0; k--) { /* the odometer */
            if (++at[k] < lists[k].n)
                break;
            at[k] = 0;
        }
    }
    rc = 0;
done:
    free(lists);
    free(at);
    free(label);
    return rc;
}

static int expand_extra(parser *P, const section *x)
{
    sweep_run *r;
    int rc = new_run(P, sec_name(x), x->line, &r);
    for (int i = 0; i < x->n && !rc; i++) {
        rc = check_key(P, x, x->e[i].key, x->e[i].line, false);
        if (!rc)
            rc = add_over(P, r, x->e[i].line, x->e[i].key, x->e[i].value);
    }
    return rc;
}

/* One model size of [isoflop]: "d_model=128 n_heads=4 d_ff=352 depth=4"
 * (the [model] keys d_model, n_heads, d_ff, and depth, the layer count; any
 * other section.key=value is allowed too). */
typedef struct iso_size {
    int line, depth, n;
    char label[SWEEP_NAME_LEN];     /* "d128x4" */
    char key[16][KEY_LEN];          /* overrides */
    char value[16][SWEEP_LINE_CHARS / 4];
} iso_size;

static int parse_size(parser *P, const section *s, const entry *e, iso_size *z)
{
    char buf[SWEEP_LINE_CHARS], *save = NULL, d_model[64] = "";
    snprintf(buf, sizeof(buf), "%s", e->value);
    memset(z, 0, sizeof(*z));
    z->line = e->line;
    for (char *w = strtok_r(buf, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(w, '=');
        if (!eq || eq == w || !eq[1])
            return fail(P, e->line, "[isoflop] size = %s: %s: expected key=value words "
                                    "(no spaces around '='), such as d_model=128 depth=4",
                        e->value, w);
        *eq = '\0';
        const char *key = w, *value = eq + 1;
        char full[KEY_LEN];
        if (!strcmp(key, "depth")) {
            long d;
            if (!num_parse_long(value, 1, MODE_MAX_LAYERS, &d))
                return fail(P, e->line, "[isoflop] size: depth=%s: expected a layer count "
                                        "from 1 to %d", value, MODE_MAX_LAYERS);
            z->depth = (int)d;
            continue;
        }
        if (!strcmp(key, "d_model") || !strcmp(key, "n_heads") || !strcmp(key, "d_ff")) {
            snprintf(full, sizeof(full), "model.%s", key);
            if (!strcmp(key, "d_model"))
                snprintf(d_model, sizeof(d_model), "%s", value);
        } else if (strchr(key, '.')) {
            int rc = check_key(P, s, key, e->line, true);
            if (rc)
                return rc;
            snprintf(full, sizeof(full), "%s", key);
        } else {
            return fail(P, e->line, "[isoflop] size: %s: unknown key (expected d_model, "
                                    "n_heads, d_ff, depth or section.key)", key);
        }
        for (int i = 0; i < z->n; i++)
            if (!strcmp(z->key[i], full))
                return fail(P, e->line, "[isoflop] size: %s is set twice", key);
        if (z->n == 16 || strlen(value) >= sizeof(z->value[0]))
            return fail(P, e->line, "[isoflop] size: too many or too long settings");
        snprintf(z->key[z->n], KEY_LEN, "%s", full);
        snprintf(z->value[z->n++], sizeof(z->value[0]), "%s", value);
    }
    if (!d_model[0] || !z->depth)
        return fail(P, e->line, "[isoflop] size = %s: expected d_model=... and depth=... "
                                "(they name the runs)", e->value);
    char dm[64];
    safe_text(dm, sizeof(dm), d_model);
    snprintf(z->label, sizeof(z->label), "d%sx%d", dm, z->depth);
    return 0;
}

/* The number of layers a kind's pattern makes, from the config reader, with
 * a message at the pattern's line when it does not read. */
static int pattern_layers(parser *P, const entry *pat, const section *kind, int *n)
{
    sweep_run tmp = { .n_over = 1 };
    snprintf(tmp.name, sizeof(tmp.name), "of kind %s", sec_name(kind));
    snprintf(tmp.over[0].text, sizeof(tmp.over[0].text), "model.layers=%s", pat->value);
    tmp.over[0].line = pat->line;
    run_config *c = malloc(sizeof(run_config));
    if (!c)
        return -ENOMEM;
    char msg[1024];
    char *over[1] = { tmp.over[0].text };
    int rc = config_load(c, P->p->base, 1, over, &mode_schema, 0, msg, (int)sizeof(msg));
    if (rc)
        sweep_config_error(P->p, &tmp, msg, P->err, P->err_len);
    else
        *n = c->n_layers;
    free(c);
    return rc;
}

/* [isoflop] budgets x sizes x [kind.*]: run "iso-<budget>-<size>-<kind>"
 * with run.flops_budget, the size's [model] keys, the layers (the kind's
 * pattern repeated to the size's depth) and the kind's other settings. */
static int expand_isoflop(parser *P, const section *iso)
{
    const entry *budgets = NULL;
    iso_size *sizes = calloc((size_t)(iso->n ? iso->n : 1), sizeof(iso_size));
    int n_sizes = 0, rc = -ENOMEM;
    value_list *bl = calloc(1, sizeof(value_list));
    double bv[MAX_VALUES];
    char blabel[MAX_VALUES][32];
    if (!sizes || !bl)
        goto done;
    for (int i = 0; i < iso->n; i++) {
        const entry *e = &iso->e[i];
        if (!strcmp(e->key, "budgets")) {
            budgets = e;
            if ((rc = split_list(P, iso, e, ',', bl)))
                goto done;
            for (int b = 0; b < bl->n; b++) {
                if (!num_parse_double(bl->v[b], 0.0, HUGE_VAL, &bv[b]) || bv[b] <= 0.0) {
                    rc = fail(P, e->line, "[isoflop] budgets: %s: expected training FLOPs "
                                          "(a number > 0, such as 1e13)", bl->v[b]);
                    goto done;
                }
                number_text(blabel[b], sizeof(blabel[b]), bv[b]);
            }
        } else if (!strcmp(e->key, "size")) {
            if ((rc = parse_size(P, iso, e, &sizes[n_sizes++])))
                goto done;
        } else {
            rc = fail(P, e->line, "[isoflop] %s: unknown key (expected budgets or size)", e->key);
            goto done;
        }
    }
    if (!budgets || !n_sizes) {
        rc = fail(P, iso->line, "[isoflop]: expected budgets = B1, B2, ... and at least one "
                                "size = d_model=... depth=... line");
        goto done;
    }
    int n_kinds = 0;
    for (int k = 0; k < P->n_s; k++)
        n_kinds += P->s[k].type == SEC_KIND;
    if (!n_kinds) {
        rc = fail(P, iso->line, "[isoflop]: expected [kind.NAME] sections (pattern = the "
                                "layer group, e.g. dense or dense, mod)");
        goto done;
    }
    for (int b = 0; b < bl->n; b++)
        for (int z = 0; z < n_sizes; z++) {
            int kind_index = 0;
            for (int k = 0; k < P->n_s; k++) {
                const section *ks = &P->s[k];
                if (ks->type != SEC_KIND)
                    continue;
                const entry *pat = NULL;
                for (int i = 0; i < ks->n; i++)
                    if (!strcmp(ks->e[i].key, "pattern"))
                        pat = &ks->e[i];
                if (!pat) {
                    rc = fail(P, ks->line, "[%s]: expected pattern = the layer group its "
                                           "runs repeat (e.g. dense, mod)", ks->title);
                    goto done;
                }
                int len = 0;
                if ((rc = pattern_layers(P, pat, ks, &len)))
                    goto done;
                const iso_size *sz = &sizes[z];
                if (sz->depth % len) {
                    rc = fail(P, sz->line, "[isoflop] size: depth=%d is not a multiple of the "
                                           "%d layers of [%s] pattern = %s (line %d)",
                              sz->depth, len, ks->title, pat->value, pat->line);
                    goto done;
                }
                char name[3 * SWEEP_NAME_LEN], layers[SWEEP_LINE_CHARS + 32];
                snprintf(name, sizeof(name), "iso-%s-%s-%s", blabel[b], sz->label, sec_name(ks));
                if (sz->depth == len)
                    snprintf(layers, sizeof(layers), "%s", pat->value);
                else if (len == 1 && !strpbrk(pat->value, "(), "))
                    snprintf(layers, sizeof(layers), "%s x %d", pat->value, sz->depth);
                else
                    snprintf(layers, sizeof(layers), "(%s) x %d", pat->value, sz->depth / len);
                sweep_run *r;
                if ((rc = new_run(P, name, sz->line, &r)) ||
                    (rc = add_over(P, r, budgets->line, "run.flops_budget", bl->v[b])))
                    goto done;
                r->budget = b;
                r->size = z;
                r->kind = kind_index++;
                for (int i = 0; i < sz->n && !rc; i++)
                    rc = add_over(P, r, sz->line, sz->key[i], sz->value[i]);
                if (!rc)
                    rc = add_over(P, r, pat->line, "model.layers", layers);
                for (int i = 0; i < ks->n && !rc; i++)
                    if (&ks->e[i] != pat &&
                        !(rc = check_key(P, ks, ks->e[i].key, ks->e[i].line, true)))
                        rc = add_over(P, r, ks->e[i].line, ks->e[i].key, ks->e[i].value);
                if (rc)
                    goto done;
            }
        }
    rc = 0;
done:
    free(sizes);
    free(bl);
    return rc;
}

/* [sweep] seeds = s1, s2, ...: every run of the design once per seed, named
 * <run>-s<seed>, with run.seed = seed (its init_seed and data_seed follow
 * it): replicates, which mode-analyze groups back (docs: sweeps.md). */
static int expand_seeds(parser *P, const entry *seeds)
{
    sweep_plan *p = P->p;
    value_list *vl = calloc(1, sizeof(value_list));
    if (!vl)
        return -ENOMEM;
    int rc = split_list(P, find_section(P, "sweep"), seeds, ',', vl);
    if (rc) {
        free(vl);
        return rc;
    }
    for (int i = 0; i < vl->n && !rc; i++) {
        uint64_t v;
        if (!num_parse_u64(vl->v[i], &v))
            rc = fail(P, seeds->line, "[sweep] seeds: %s is not a seed (expected integers >= 0)",
                      vl->v[i]);
    }
    int n = p->n_runs;
    for (int r = 0; r < n && !rc; r++)
        for (int o = 0; o < p->runs[r].n_over && !rc; o++)
            if (!strncmp(p->runs[r].over[o].text, "run.seed=", 9))
                rc = fail(P, p->runs[r].over[o].line, "run.seed: set by [sweep] seeds (line %d) "
                                                      "in every run", seeds->line);
    /* the designed runs, then each again per seed: runs r x seed i */
    sweep_run *base = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof(sweep_run));
    if (!rc && !base)
        rc = -ENOMEM;
    if (!rc) {
        memcpy(base, p->runs, (size_t)n * sizeof(sweep_run));
        p->n_runs = 0;
    }
    for (int r = 0; r < n && !rc; r++) {
        for (int i = 0; i < vl->n && !rc; i++) {
            char name[2 * SWEEP_NAME_LEN];
            snprintf(name, sizeof(name), "%s-s%s", base[r].name, vl->v[i]);
            sweep_run *run;
            if ((rc = new_run(P, name, base[r].line, &run)))
                break;
            char keep[SWEEP_NAME_LEN];
            snprintf(keep, sizeof(keep), "%s", run->name);
            *run = base[r];
            snprintf(run->name, sizeof(run->name), "%s", keep);
            rc = add_over(P, run, seeds->line, "run.seed", vl->v[i]);
        }
    }
    free(base);
    free(vl);
    return rc;
}

/* [sweep] base, out and seeds. */
static int read_sweep_section(parser *P, const entry **seeds)
{
    sweep_plan *p = P->p;
    const section *s = find_section(P, "sweep");
    if (!s)
        return fail(P, 0, "expected a [sweep] section with base = CONFIG.ini");
    const entry *base = NULL, *out = NULL;
    *seeds = NULL;
    for (int i = 0; i < s->n; i++) {
        if (!strcmp(s->e[i].key, "base"))
            base = &s->e[i];
        else if (!strcmp(s->e[i].key, "out"))
            out = &s->e[i];
        else if (!strcmp(s->e[i].key, "seeds"))
            *seeds = &s->e[i];
        else
            return fail(P, s->e[i].line, "[sweep] %s: unknown key (expected base, out or seeds)",
                        s->e[i].key);
    }
    if (!base)
        return fail(P, s->line, "[sweep]: expected base = CONFIG.ini (relative to the sweep "
                                "file's folder)");
    /* base is relative to the sweep file; out, like run.out, to the current folder */
    const char *slash = strrchr(p->path, '/');
    int n = base->value[0] == '/' || !slash
                ? snprintf(p->base, sizeof(p->base), "%s", base->value)
                : snprintf(p->base, sizeof(p->base), "%.*s/%s", (int)(slash - p->path),
                           p->path, base->value);
    if (n < 0 || (size_t)n >= sizeof(p->base))
        return fail(P, base->line, "[sweep] base = %s: the path is too long", base->value);
    char why[700];
    FILE *f = file_fopen_regular(p->base, "r", why, sizeof(why));
    if (!f)
        return fail(P, base->line, "[sweep] base = %s: %s", base->value, why);
    fclose(f);
    if (out) {
        n = snprintf(p->out, sizeof(p->out), "%s", out->value);
    } else { /* out/<the sweep file's name without .ini> */
        const char *file = slash ? slash + 1 : p->path;
        const char *dot = strrchr(file, '.');
        int stem = (int)(dot ? dot - file : (long)strlen(file));
        n = snprintf(p->out, sizeof(p->out), "out/%.*s", stem, file);
    }
    if (n < 0 || (size_t)n >= sizeof(p->out) - SWEEP_NAME_LEN - 16)
        return fail(P, out ? out->line : s->line, "[sweep] out: the path is too long");
    while (n > 1 && p->out[n - 1] == '/')
        p->out[--n] = '\0';
    return 0;
}

int sweep_plan_load(sweep_plan *p, const char *path, int n_cli, char *const *cli, char *err,
                    int err_len)
{
    memset(p, 0, sizeof(*p));
    parser P = { .p = p, .err = err, .err_len = err_len };
    int rc;
    if (strlen(path) >= sizeof(p->path)) {
        snprintf(err, (size_t)err_len, "%.60s...: the path is too long", path);
        return -EINVAL;
    }
    snprintf(p->path, sizeof(p->path), "%s", path);
    FILE *f = file_fopen_regular(path, "r", err, err_len);
    if (!f)
        return errno ? -errno : -EIO;
    rc = read_file(&P, f);
    fclose(f);
    const entry *seeds = NULL;
    if (!rc)
        rc = read_sweep_section(&P, &seeds);
    const section *grid = find_section(&P, "grid"), *iso = find_section(&P, "isoflop");
    p->isoflop = iso != NULL;
    int n_extra = 0, n_kind = 0;
    for (int i = 0; i < P.n_s; i++) {
        n_extra += P.s[i].type == SEC_EXTRA;
        n_kind += P.s[i].type == SEC_KIND;
    }
    if (!rc && iso && (grid || n_extra))
        rc = fail(&P, iso->line, "[isoflop] cannot be combined with [grid] or [extra.*] (a "
                                 "sweep is a grid or an isoFLOP design)");
    else if (!rc && !iso && n_kind)
        rc = fail(&P, 0, "[kind.*] sections belong to an [isoflop] design, and there is none");
    else if (!rc && !iso && !grid && !n_extra)
        rc = fail(&P, 0, "nothing to run: expected [grid], [extra.NAME] or [isoflop]");
    if (!rc && grid)
        rc = expand_grid(&P, grid);
    for (int i = 0; !rc && i < P.n_s; i++)
        if (P.s[i].type == SEC_EXTRA)
            rc = expand_extra(&P, &P.s[i]);
    if (!rc && iso)
        rc = expand_isoflop(&P, iso);
    if (!rc && seeds)
        rc = expand_seeds(&P, seeds);
    /* the command line's overrides, then where the run goes */
    for (int i = 0; !rc && i < n_cli; i++) {
        char key[KEY_LEN], *eq = strchr(cli[i], '=');
        snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - cli[i]) : 0, cli[i]);
        const char *k = config_trim(key), *why = eq ? reserved_key(k, p->isoflop) : NULL;
        char bad[200];
        size_t at = 0;
        if (text_check(cli[i], strlen(cli[i]), 0, &at, bad, sizeof(bad))) {
            snprintf(err, (size_t)err_len, "command line: %.*s...: %s", (int)at, cli[i], bad);
            rc = -EINVAL;
        } else if (!eq || !key_syntax(k) || why) {
            snprintf(err, (size_t)err_len, "command line: %s: %s", cli[i],
                     why ? why : "expected section.key=value, such as run.steps=100");
            rc = -EINVAL;
        }
        for (int r = 0; !rc && r < p->n_runs; r++)
            rc = add_over(&P, &p->runs[r], SWEEP_LINE_CLI, k, config_trim(eq + 1));
    }
    for (int r = 0; !rc && r < p->n_runs; r++) {
        const section *sw = find_section(&P, "sweep");
        rc = add_over(&P, &p->runs[r], sw->line, "run.out", p->out);
        char name[SWEEP_NAME_LEN];
        snprintf(name, sizeof(name), "%s", p->runs[r].name);
        if (!rc)
            rc = add_over(&P, &p->runs[r], p->runs[r].line, "run.name", name);
    }
    for (int i = 0; i < P.n_s; i++)
        free(P.s[i].e);
    free(P.s);
    if (rc)
        sweep_plan_free(p);
    return rc;
}

void sweep_plan_free(sweep_plan *p)
{
    free(p->runs);
    p->runs = NULL;
    p->n_runs = 0;
}

void sweep_config_error(const sweep_plan *p, const sweep_run *r, const char *msg, char *out,
                        int len)
{
    static const char cl[] = "command line: ";
    size_t ncl = sizeof(cl) - 1;
    if (!strncmp(msg, cl, ncl)) {
        const char *rest = msg + ncl;
        for (int i = 0; i < r->n_over; i++) {
            const sweep_override *o = &r->over[i];
            size_t n = strlen(o->text);
            if (strncmp(rest, o->text, n) || (rest[n] != ':' && rest[n]) || o->line <= 0)
                continue;
            /* "section.key=value": the key after the last dot before '=' */
            const char *eq = strchr(o->text, '=');
            const char *dot = eq;
            while (dot > o->text && *dot != '.')
                dot--;
            snprintf(out, (size_t)len, "%s:%d: [%.*s] %.*s = %s%s (run %s)", p->path, o->line,
                     (int)(dot - o->text), o->text, (int)(eq - dot - 1), dot + 1, eq + 1,
                     rest + n, r->name);
            return;
        }
    }
    snprintf(out, (size_t)len, "%s (run %s)", msg, r->name);
}
