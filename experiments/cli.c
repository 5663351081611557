#include "experiments/cli.h"

#include "core/data/data.h"

#include "core/util/file.h"
#include "core/comm/comm.h"
#include "core/io/checkpoint.h"
#include "core/kernels/matmul.h"
#include "core/util/names.h"
#include "core/util/num.h"
#include "core/util/pool.h"
#include "moe/registry.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* The options of every subcommand: one table, so each is parsed and checked
 * the same way wherever it appears. */
typedef enum opt_type { OPT_FLAG, OPT_STRING, OPT_LONG, OPT_POSITIVE, OPT_DOUBLE } opt_type;
typedef struct opt {
    const char *name;
    opt_type type;
    size_t offset;
    double max; /* numbers: the largest accepted (a bound on what it sizes) */
    unsigned bit; /* its CLI_* */
} opt;

#define OFF(f) offsetof(cli, f)
static const opt options[] = {
    { "--resume", OPT_FLAG, OFF(resume), 0, CLI_RESUME },
    { "--overwrite", OPT_FLAG, OFF(overwrite), 0, CLI_OVERWRITE },
    { "--init-from", OPT_STRING, OFF(init_from), 0, CLI_INIT_FROM },
    { "--upcycle-noise", OPT_DOUBLE, OFF(upcycle_noise), 1e9, CLI_UPCYCLE_NOISE },
    { "--upcycle-reinit", OPT_DOUBLE, OFF(upcycle_reinit), 1, CLI_UPCYCLE_REINIT },
    { "--ids", OPT_FLAG, OFF(ids), 0, CLI_IDS },
    { "--prompt-ids", OPT_STRING, OFF(prompt_ids), 0, CLI_PROMPT_IDS },
    { "--quiet", OPT_FLAG, OFF(quiet), 0, CLI_QUIET },
    { "--jsonl", OPT_FLAG, OFF(jsonl), 0, CLI_JSONL },
    { "--json", OPT_FLAG, OFF(json), 0, CLI_JSON },
    { "--threads", OPT_POSITIVE, OFF(threads), CLI_MAX_THREADS, CLI_THREADS },
    { "--ranks", OPT_POSITIVE, OFF(ranks), 1 << 20, CLI_RANKS },
    { "--max-steps", OPT_POSITIVE, OFF(max_steps), (double)MODE_MAX_STEPS, CLI_MAX_STEPS },
    { "--steps", OPT_POSITIVE, OFF(steps), 1e6, CLI_STEPS },
    { "--windows", OPT_POSITIVE, OFF(windows), 1e12, CLI_WINDOWS },
    { "--tokens", OPT_LONG, OFF(tokens), 1e9, CLI_TOKENS },
    { "--bench", OPT_POSITIVE, OFF(bench), 1e6, CLI_BENCH },
    { "--top-k", OPT_LONG, OFF(top_k), 2147483647.0, CLI_TOP_K },
    { "--seed", OPT_LONG, OFF(seed), 9.2e18, CLI_SEED },
    { "--temperature", OPT_DOUBLE, OFF(temperature), 1e9, CLI_TEMPERATURE },
    { "--data", OPT_STRING, OFF(data), 0, CLI_DATA },
    { "--mode", OPT_STRING, OFF(mode), 0, CLI_MODE },
    { "--prompt", OPT_STRING, OFF(prompt), 0, CLI_PROMPT },
    { "--routing", OPT_STRING, OFF(routing), 0, CLI_ROUTING },
    { "--routing-layers", OPT_STRING, OFF(routing_layers), 0, CLI_ROUTING_LAYERS },
    { "--record", OPT_STRING, OFF(record), 0, CLI_RECORD },
    { "--csv", OPT_STRING, OFF(csv), 0, CLI_CSV },
    { "--dial", OPT_STRING, OFF(dial), 0, CLI_DIAL },
    { "--with-optim", OPT_FLAG, OFF(with_optim), 0, CLI_WITH_OPTIM },
    { "--no-tensorboard", OPT_FLAG, OFF(no_tensorboard), 0, CLI_NO_TENSORBOARD },
};

static int set_option(cli *c, const opt *o, const char *v, FILE *err)
{
    char *f = (char *)c + o->offset;
    switch (o->type) {
    case OPT_FLAG: *(bool *)(void *)f = true; return 0;
    case OPT_STRING: *(const char **)(void *)f = v; return 0;
    case OPT_DOUBLE: {
        double x;
        if (!num_parse_double(v, 0.0, o->max, &x) || !(x < o->max))
            break;
        *(double *)(void *)f = x;
        return 0;
    }
    default: {
        long n;
        if (!num_parse_long(v, o->type == OPT_POSITIVE ? 1 : 0, (long)o->max, &n))
            break;
        if (o->offset == OFF(threads))
            c->threads = (int)n;
        else
            *(long *)(void *)f = n;
        return 0;
    }
    }
    if (o->type == OPT_DOUBLE)
        fprintf(err, "mode-exp: %s %s: expected a number in [0, %g)\n", o->name, v, o->max);
    else
        fprintf(err, "mode-exp: %s %s: expected %s integer up to %.0f\n", o->name, v,
                o->type == OPT_POSITIVE ? "a positive" : "a non-negative", o->max);
    return -EINVAL;
}

/* "--data, --mode, ..." : the options of sub, or "none". */
static void option_names(unsigned takes, char *out, size_t n)
{
    out[0] = '\0';
    for (size_t k = 0; k < sizeof(options) / sizeof(options[0]); k++)
        if (takes & options[k].bit)
            names_add(out, n, options[k].name);
    if (!out[0])
        snprintf(out, n, "none");
}

/* Whether two "section.key=value" overrides name one key (spaces around
 * the parts aside, as the config reads them). */
bool cli_same_key(const char *a, const char *b)
{
    const char *ea = strchr(a, '='), *eb = strchr(b, '=');
    if (!ea || !eb)
        return false;
    while (ea > a && (ea[-1] == ' ' || ea[-1] == '\t'))
        ea--;
    while (eb > b && (eb[-1] == ' ' || eb[-1] == '\t'))
        eb--;
    while (*a == ' ' || *a == '\t')
        a++;
    while (*b == ' ' || *b == '\t')
        b++;
    return ea - a == eb - b && !strncmp(a, b, (size_t)(ea - a));
}

/* Whether the comma-separated list holds the item name. */
static bool list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *s = list; s && *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && !strncmp(s, name, n))
            return true;
        s = e ? e + 1 : s + len;
    }
    return false;
}

/* The options that only act through another, given without it (or with
 * one that excludes them): refused naming the rule, as they would do
 * nothing.  Options a subcommand does not take were refused already. */
static int check_depends(const cli *c, const cli_opts *sub, FILE *err)
{
    const char *why = NULL;
    bool draws_sampler = cli_given(c, CLI_TEMPERATURE) ? c->temperature > 0.0
                                                       : (sub->takes & CLI_TEMPERATURE) != 0;
    if (cli_given(c, CLI_RESUME) && cli_given(c, CLI_OVERWRITE | CLI_INIT_FROM))
        why = "--resume continues a run: it goes with neither --overwrite nor --init-from";
    else if (!cli_given(c, CLI_INIT_FROM) && cli_given(c, CLI_UPCYCLE_NOISE | CLI_UPCYCLE_REINIT))
        why = "--upcycle-noise and --upcycle-reinit shape what --init-from CKPT copies: give it";
    else if (cli_given(c, CLI_QUIET) && cli_given(c, CLI_JSONL))
        why = "--quiet prints nothing but errors, so --jsonl would print nothing: give one";
    else if (cli_given(c, CLI_ROUTING_LAYERS) && !cli_given(c, CLI_ROUTING))
        why = "--routing-layers says where --routing applies: give --routing too";
    else if (cli_given(c, CLI_TOP_K) && !draws_sampler)
        why = "--top-k narrows the draw at a temperature above 0, and --temperature 0 takes the "
              "most likely token: it would change nothing";
    else if (cli_given(c, CLI_SEED) && !draws_sampler && !list_has(c->routing, "random"))
        why = (sub->takes & CLI_TEMPERATURE)
                  ? "--seed keys the draws of a temperature above 0 and of --routing random; "
                    "at --temperature 0 without --routing random nothing is drawn"
                  : "--seed keys the draws of --routing random; without it nothing is drawn";
    for (int j = 0; !why && cli_given(c, CLI_DIAL) && j < c->n_over; j++)
        if (cli_same_key(c->over[j], c->dial)) {
            fprintf(err, "mode-exp %s: %s and --dial %s: the dial sets the key at each of its "
                    "values, so the override would be ignored: give one\n", sub->name,
                    c->over[j], c->dial);
            return -EINVAL;
        }
    if (!why)
        return 0;
    fprintf(err, "mode-exp %s: %s\n", sub->name, why);
    return -EINVAL;
}

static int parse_args(cli *c, int argc, char **argv, const char *usage, const cli_opts *sub,
                      FILE *err)
{
    memset(c, 0, sizeof(*c));
    c->temperature = 1.0;
    c->seed = 1;
    c->over = calloc((size_t)argc + 1, sizeof(char *));
    if (!c->over)
        return -ENOMEM;
    const char *seen[sizeof(options) / sizeof(options[0])] = { 0 };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (a[0] == '-' && a[1] == '-') {
            size_t k = 0;
            while (k < sizeof(options) / sizeof(options[0]) && strcmp(a, options[k].name))
                k++;
            if (k == sizeof(options) / sizeof(options[0])) {
                fprintf(err, "mode-exp: unknown option %s\n%s", a, usage);
                return -EINVAL;
            }
            const opt *o = &options[k];
            bool train = !strcmp(sub->name, "training");
            if (!(sub->takes & o->bit)) {
                /* the one table holds every subcommand's options: one that
                 * this one does not read would be accepted and do nothing */
                char names[512];
                option_names(sub->takes, names, sizeof(names));
                fprintf(err, "mode-exp %s: %s is not an option of %s, which would ignore it; "
                        "%s takes %s (mode-exp %s%s--help)\n", sub->name, a, sub->name,
                        sub->name, names, train ? "" : sub->name, train ? "" : " ");
                return -EINVAL;
            }
            if (o->type != OPT_FLAG && i + 1 >= argc) {
                fprintf(err, "mode-exp: %s needs a value\n%s", a, usage);
                return -EINVAL;
            }
            const char *v = o->type == OPT_FLAG ? a : argv[i + 1];
            if (seen[k]) {
                /* the last would win over the first without a word */
                if (o->type == OPT_FLAG)
                    fprintf(err, "mode-exp %s: %s given twice: give each option once\n",
                            sub->name, a);
                else
                    fprintf(err, "mode-exp %s: %s given twice (%s, then %s): give each option "
                            "once\n", sub->name, a, seen[k], v);
                return -EINVAL;
            }
            seen[k] = v;
            c->given |= o->bit;
            if (set_option(c, o, o->type == OPT_FLAG ? NULL : argv[++i], err))
                return -EINVAL;
        } else if (!c->config) {
            c->config = a;
        } else {
            for (int j = 0; j < c->n_over; j++)
                if (cli_same_key(c->over[j], a)) {
                    fprintf(err, "mode-exp %s: %s, then %s: one key given twice (the last "
                            "would win): give it once\n", sub->name, c->over[j], a);
                    return -EINVAL;
                }
            c->over[c->n_over++] = argv[i];
        }
    }
    if (!c->config) {
        fputs(usage, err);
        return -EINVAL;
    }
    if (check_depends(c, sub, err))
        return -EINVAL;
    return c->threads ? 0 : cli_env_threads(&c->threads);
}

int cli_env_threads(int *threads)
{
    /* the bound --threads has holds for the variable too: 99999999999
     * through atoi was 1215752191 threads */
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    long t = 0;
    if (env && *env && !num_parse_long(env, 0, CLI_MAX_THREADS, &t)) {
        fprintf(stderr, "mode-exp: OPENBLAS_NUM_THREADS=%s: expected an integer in [0, %d] "
                "(0: as many as the cores allow), as --threads\n", env, CLI_MAX_THREADS);
        return -EINVAL;
    }
    *threads = (int)t;
    return 0;
}

int parse_cli(cli *c, int argc, char **argv, const char *usage, const cli_opts *sub, int rank)
{
    /* every rank parses; rank 0 alone says what is wrong */
    char *buf = NULL;
    size_t len = 0;
    FILE *err = rank == 0 ? stderr : open_memstream(&buf, &len);
    int rc = parse_args(c, argc, argv, usage, sub, err ? err : stderr);
    if (err && err != stderr)
        fclose(err);
    free(buf);
    if (rc) {
        free(c->over);
        c->over = NULL;
    }
    return rc;
}

int choose_threads(const cli *c, mode_ctx *ctx)
{
    int t = c->threads; /* --threads, else OPENBLAS_NUM_THREADS (parse_cli) */
    if (t <= 0) {
        /* ranks x threads <= cores: more only makes them fight */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        t = (int)(cores / comm_local_size(ctx->comm));
        if (t < 1)
            t = 1;
    }
    /* t threads a rank are a pool of t threads that splits the large
     * products (each part one single-threaded sgemm), the attention heads and
     * the element-wise loops; BLAS itself keeps to one thread, since
     * OpenBLAS's idle threads spin after every call and would take the cores
     * from the pool.  Should the pool not start, BLAS gets the t threads. */
    free_thread_pool(&ctx->pool);
    if (build_thread_pool(&ctx->pool, t) == 0)
        matmul_set_threads(1);
    else
        matmul_set_threads(t);
    return t;
}

/* Whether kind k reads the section of over (its first len characters). */
static bool reads_section(const layer_kind *k, const char *over, size_t len)
{
    for (const kind_group *g = k->groups; g && g->group; g++)
        if (strlen(g->group->section) == len && !strncmp(over, g->group->section, len))
            return true;
    return false;
}

/* An override of eval and sample (the compute dial) must be a key of a
 * section that a layer of this model reads, or of one of its [layer.N]
 * (whose index and key the config checks); else err says which rule it
 * breaks: no section, the run's own or an unknown one (the kinds' sections
 * this model reads are listed), or a kind's that no layer here reads. */
static int check_dial_key(const run_config *c, const char *over, char *err, int err_len)
{
    size_t len;
    if (config_override_split(over, &len) >= 0)
        return 0;
    char kinds[256] = "", sections[256] = "";
    bool kind_reads = false;
    for (const layer_kind *const *k = mode_schema.kinds; *k; k++)
        kind_reads = kind_reads || (len > 0 && reads_section(*k, over, len));
    for (int l = 0; l < c->n_layers; l++) {
        const layer_kind *k = layer_kind_lookup(mode_schema.kinds, c->layers[l].kind);
        if (len > 0 && reads_section(k, over, len))
            return 0;
        names_add(kinds, sizeof(kinds), k->name);
        for (const kind_group *g = k->groups; g && g->group; g++) {
            char name[64];
            snprintf(name, sizeof(name), "[%s]", g->group->section);
            names_add(sections, sizeof(sections), name);
        }
    }
    if (kind_reads) {
        snprintf(err, (size_t)err_len, "%s: no layer of this model (%s) reads [%.*s], so it "
                 "would change nothing", over, kinds, (int)len, over);
    } else if (len == 0) {
        snprintf(err, (size_t)err_len, "%s: expected section.key=value, a kind's key such as "
                 "mod.capacity=0.25 or layer.1.capacity=0.25", over);
    } else if (!sections[0]) {
        snprintf(err, (size_t)err_len, "%s: eval and sample change only the kinds' keys, and "
                 "this model's layers (%s) take none (the run's own keys are the "
                 "checkpoint's)", over, kinds);
    } else {
        snprintf(err, (size_t)err_len, "%s: eval and sample change only the kinds' keys: this "
                 "model's layers (%s) read %s and [layer.N] for N in 0..%d (mode-exp --help-keys "
                 "lists every kind's); [%.*s] is not one of them (the run's own keys are the "
                 "checkpoint's)", over, kinds, sections, c->n_layers - 1, (int)len, over);
    }
    return -EINVAL;
}

/* Whether section sec (its first len characters) is a kind's that no layer
 * of cfg reads; kinds: the model's kinds, for the message. */
static bool section_unread(const run_config *cfg, const char *sec, size_t len, char *kinds,
                           size_t kinds_len)
{
    bool kind_reads = false, layer_reads = false;
    for (const layer_kind *const *k = mode_schema.kinds; *k; k++)
        kind_reads = kind_reads || reads_section(*k, sec, len);
    kinds[0] = '\0';
    for (int l = 0; l < cfg->n_layers; l++) {
        const layer_kind *k = layer_kind_lookup(mode_schema.kinds, cfg->layers[l].kind);
        layer_reads = layer_reads || reads_section(k, sec, len);
        names_add(kinds, kinds_len, k->name);
    }
    return kind_reads && !layer_reads;
}

int cli_check_overrides(const run_config *cfg, int n_over, char *const *over, char *err,
                        int err_len)
{
    for (int i = 0; i < n_over; i++) {
        size_t len;
        char kinds[256];
        if (config_override_split(over[i], &len) >= 0 || len == 0)
            continue; /* [layer.N] and malformed ones: the config checks them */
        if (section_unread(cfg, over[i], len, kinds, sizeof(kinds))) {
            snprintf(err, (size_t)err_len, "command line: %s: no layer of this model (%s) reads "
                     "[%.*s], so it would change nothing", over[i], kinds, (int)len, over[i]);
            return -EINVAL;
        }
    }
    return 0;
}

void cli_note_unread(const run_config *cfg, const char *path)
{
    run_config *def = malloc(sizeof(*def));
    if (!def)
        return;
    config_defaults(def, &mode_schema);
    for (int gi = 0; gi < cfg->n_groups; gi++) {
        const key_group *g = cfg->groups[gi];
        const void *d = config_group(def, g);
        char kinds[256];
        if (d && memcmp(d, cfg->group_values[gi], g->size) &&
            section_unread(cfg, g->section, strlen(g->section), kinds, sizeof(kinds)))
            fprintf(stderr, "mode-exp: note: %s sets keys of [%s], which no layer of this model "
                    "(%s) reads: they change nothing here\n", path, g->section, kinds);
    }
    free(def);
}

/* The overrides must keep every layer's tensors: a checkpoint's are fixed. */
static int same_tensors(const run_config *a, const run_config *b, const char *over, char *err,
                        int err_len)
{
    model_dims da = config_dims(a), db = config_dims(b);
    for (int l = 0; l < a->n_layers; l++) {
        const layer_kind *k = layer_kind_lookup(mode_schema.kinds, a->layers[l].kind);
        tensor_desc ta[MODE_MAX_LAYER_TENSORS], tb[MODE_MAX_LAYER_TENSORS];
        int na = k->tensors(&a->layers[l], &da, ta, MODE_MAX_LAYER_TENSORS);
        int nb = k->tensors(&b->layers[l], &db, tb, MODE_MAX_LAYER_TENSORS);
        bool same = na == nb;
        for (int t = 0; same && t < na; t++) {
            same = !strcmp(ta[t].name, tb[t].name) && ta[t].ndim == tb[t].ndim;
            for (int i = 0; same && i < ta[t].ndim; i++)
                same = ta[t].shape[i] == tb[t].shape[i];
        }
        if (!same) {
            snprintf(err, (size_t)err_len, "%s: changes the tensors of layer %d (%s), and a "
                     "checkpoint's tensors are fixed: only keys that keep them (capacities, "
                     "top_k, capacity factors, the causal rule's settings) change at evaluation",
                     over, l, k->name);
            return -EINVAL;
        }
    }
    return 0;
}

/* Load a checkpoint into a model for nseq sequences (eval, sample): with
 * sharded, each rank holds its share of the experts (eval runs the forward
 * with expert parallelism); without, every rank holds all of them (sampling
 * decodes one token at a time, every expert local).  Collective. */
int load_checkpoint_model(const char *path, run_config *cfg, model **m, int nseq, mode_ctx *ctx,
                          bool sharded, int n_over, char *const *over, ckpt_meta *meta_out,
                          char *err, int err_len)
{
    /* one open for the seal, the config and the tensors: one version of a
     * checkpoint that a live run may be replacing (checkpoint.h) */
    ckpt_meta meta;
    ckpt_file *f = NULL;
    int rc = checkpoint_open(&f, path, &meta, ctx->comm, err, err_len);
    char label[MODE_PATH_MAX + 128];
    snprintf(label, sizeof(label), "%s (config attribute)", path);
    if (!rc)
        rc = config_load_string(cfg, meta.config, label, 0, NULL, &mode_schema, 0, err,
                                err_len);
    for (int i = 0; !rc && i < n_over; i++)
        rc = check_dial_key(cfg, over[i], err, err_len);
    if (!rc && n_over > 0) {
        run_config *dialled = malloc(sizeof(*dialled));
        rc = dialled ? config_load_string(dialled, meta.config, label, n_over, over,
                                          &mode_schema, 0, err, err_len)
                     : -ENOMEM;
        for (int i = 0; !rc && i < n_over; i++) {
            /* each override alone, so that the message names the one that changes them */
            run_config *one = malloc(sizeof(*one));
            rc = one ? config_load_string(one, meta.config, label, 1, over + i, &mode_schema, 0,
                                          err, err_len)
                     : -ENOMEM;
            if (!rc)
                rc = same_tensors(cfg, one, over[i], err, err_len);
            free(one);
        }
        if (!rc)
            rc = same_tensors(cfg, dialled, "the overrides together", err, err_len);
        if (!rc)
            *cfg = *dialled;
        free(dialled);
    }
    if (!rc) {
        model_dims dims = config_dims(cfg);
        if (sharded) {
            dims.ranks = ctx->size;
            dims.rank = ctx->rank;
        }
        rc = build_model(m, &dims, cfg->layers, mode_kind_ops, nseq, err, err_len);
    }
    /* f is NULL on every rank or on none (checkpoint_open agrees) */
    if (f && !(rc = comm_agree(ctx->comm, rc, err, err_len)))
        rc = checkpoint_read(f, *m, false, ctx->comm, err, err_len);
    checkpoint_close(&f);
    if (!rc && meta_out)
        *meta_out = meta;
    else
        ckpt_meta_clear(&meta);
    return rc;
}

int parse_routing(const cli *c, int n_layers, routing_cli *r)
{
    memset(r, 0, sizeof(*r));
    r->replay_step = -1;
    const char *s = c->routing ? c->routing : "";
    while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[MODE_PATH_MAX + 32];
        if (len >= sizeof(item)) {
            fprintf(stderr, "mode-exp: --routing: an item of %zu bytes is too long\n", len);
            return -EINVAL;
        }
        memcpy(item, s, len);
        item[len] = '\0';
        int p = -1;
        if (!strncmp(item, "replay:", 7) && item[7]) {
            p = ROUTE_REPLAY;
            char *at = strrchr(item + 7, '@'), *end = NULL;
            if (at) {
                errno = 0;
                r->replay_step = strtol(at + 1, &end, 10);
                if (!at[1] || *end || errno || r->replay_step < 0) {
                    fprintf(stderr, "mode-exp: --routing %s: expected replay:FILE or "
                                    "replay:FILE@STEP (a step >= 0)\n", item);
                    return -EINVAL;
                }
                *at = '\0';
            }
            if (strlen(item + 7) >= sizeof(r->replay)) {
                fprintf(stderr, "mode-exp: --routing: a replay file's path is too long\n");
                return -EINVAL;
            }
            memcpy(r->replay, item + 7, strlen(item + 7) + 1);
        } else {
            p = route_policy_lookup(item);
        }
        if (p < 0 || (p == ROUTE_REPLAY && strncmp(item, "replay:", 7))) {
            fprintf(stderr, "mode-exp: --routing %s: expected a list of learned, random, bottom, "
                            "shuffle, replay:FILE, noop-none, noop-all\n", item);
            return -EINVAL;
        }
        bool seen = false;
        for (int i = 0; i < r->n; i++)
            seen |= r->policies[i] == p;
        if (seen) {
            fprintf(stderr, "mode-exp: --routing: %s given twice\n", route_policy_names[p]);
            return -EINVAL;
        }
        if (p != ROUTE_LEARNED) /* learned is always the first arm */
            r->policies[r->n++] = p;
        s += len + (e ? 1 : 0);
    }
    if (c->routing_layers) {
        r->has_layers = true;
        const char *q = c->routing_layers;
        do {
            char *end = NULL;
            errno = 0;
            long l = strtol(q, &end, 10);
            if (end == q || errno || l < 0 || l >= n_layers || (*end && *end != ',')) {
                fprintf(stderr, "mode-exp: --routing-layers %s: expected layer indices in "
                                "0..%d separated by commas\n", c->routing_layers, n_layers - 1);
                return -EINVAL;
            }
            r->layers[l] = 1;
            q = *end ? end + 1 : end;
        } while (*q);
        if (!c->routing) {
            fprintf(stderr, "mode-exp: --routing-layers says where --routing applies: give "
                            "--routing too\n");
            return -EINVAL;
        }
    }
    return 0;
}

void cli_fatal_stop(mode_ctx *ctx, const char *msg)
{
    fprintf(stderr, "mode-exp: %s\n", msg);
    fflush(stderr);
    comm_abort(ctx ? ctx->comm : NULL, 1);
}

int checkpoint_tokenizer(const char *ckpt, const run_config *cfg, const char *recorded,
                         char *path, size_t len, char *err, int err_len)
{
    if (!path || !len) /* (never; and gcc -O2's format check then knows it) */
        return -EINVAL;
    path[0] = '\0';
    if (!strcmp(cfg->tokenizer, "none"))
        return 0;
    const char *slash = strrchr(ckpt, '/');
    size_t n = strlen(ckpt);
    struct stat st;
    /* an export's copy (mode-exp export: OUT.tokenizer.model beside
     * OUT.safetensors), else the run's beside its checkpoint */
    bool copy = n > 12 && !strcmp(ckpt + n - 12, ".safetensors");
    if (copy) {
        snprintf(path, len, "%.*s.tokenizer.model", (int)(n - 12), ckpt);
        copy = stat(path, &st) == 0;
    }
    if (!copy)
        snprintf(path, len, "%.*stokenizer.model", slash ? (int)(slash - ckpt + 1) : 0, ckpt);
    if (stat(path, &st) != 0)
        snprintf(path, len, "%s", cfg->tokenizer);
    /* the recorded "; tokenizer PATH: FINGERPRINT" */
    const char *rec = recorded ? strstr(recorded, "; tokenizer ") : NULL;
    const char *want = rec ? strstr(rec + 12, ": ") : NULL;
    char have[DATA_FINGERPRINT_LEN];
    int rc = file_fingerprint(path, have, sizeof(have), err, err_len);
    if (!rc && (!want || strcmp(want + 2, have) != 0)) {
        snprintf(err, (size_t)err_len,
                 "%s: the tokenizer %s (%s) is not the one the run used (%s)", ckpt, path, have,
                 want ? want + 2 : "none recorded");
        rc = -EINVAL;
    }
    return rc;
}
