/* The configuration: every kind of bad file or override is refused with one
 * line that names the place, the key, the value and what was expected; good
 * files resolve as documented; config_to_ini() reads back to the same config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/config/config.h"
#include "core/train/optim.h"
#include "core/util/num.h"
#include "core/util/text.h"

#include <errno.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Kinds of the test's own, declared as any kind is (core/model/keys.h):
 * "routed" and "picky" read a [mod] group, whose validate refuses small
 * capacities, "experty" a [moe] group with a check between two keys.  The
 * config knows them only through these declarations. */
typedef struct tmod {
    double capacity;
    int router, gate, causal;
    double aux_weight;
} tmod;
typedef struct tmoe {
    int experts, top_k;
    double capacity_factor;
    int d_ff;
    double balance_weight, z_weight;
} tmoe;

static const char *const router_names[] = { "learned", "random", NULL };
static const char *const gate_names[] = { "raw", "sigmoid", NULL };
static const char *const causal_names[] = { "aux", "predictor", "none", NULL };

static const kind_key tmod_keys[] = {
    { "capacity", KEY_REAL, offsetof(tmod, capacity), "0.125", 0, 1, KEY_MIN_OPEN, NULL, "c", 0 },
    { "router", KEY_CHOICE, offsetof(tmod, router), "learned", 0, 0, 0, router_names, "r", 0 },
    { "gate", KEY_CHOICE, offsetof(tmod, gate), "sigmoid", 0, 0, 0, gate_names, "g", 0 },
    { "causal", KEY_CHOICE, offsetof(tmod, causal), "aux", 0, 0, 0, causal_names, "c", 0 },
    { "aux_weight", KEY_REAL, offsetof(tmod, aux_weight), "0.01", 0, KEY_NO_MAX, 0, NULL, "a", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
static const key_group tmod_group = { .section = "mod", .keys = tmod_keys, .size = sizeof(tmod) };

static int tmoe_check(const void *values, key_problem *p)
{
    const tmoe *e = values;
    if (e->top_k <= e->experts)
        return 0;
    *p = (key_problem){ .key = "top_k", .rel = " to be at most ", .other = "experts", .tail = "" };
    return -1;
}

static const kind_key tmoe_keys[] = {
    { "experts", KEY_INT, offsetof(tmoe, experts), "8", 1, KEY_NO_MAX, 0, NULL, "e", 0 },
    { "top_k", KEY_INT, offsetof(tmoe, top_k), "1", 1, KEY_NO_MAX, 0, NULL, "k", 0 },
    { "capacity_factor", KEY_REAL, offsetof(tmoe, capacity_factor), "1.25", 0, KEY_NO_MAX, 0,
      NULL, "cf", 0 },
    { "d_ff", KEY_INT, offsetof(tmoe, d_ff), "0", 0, KEY_NO_MAX, 0, NULL, "f", 0 },
    { "balance_weight", KEY_REAL, offsetof(tmoe, balance_weight), "0.01", 0, KEY_NO_MAX, 0, NULL,
      "b", 0 },
    { "z_weight", KEY_REAL, offsetof(tmoe, z_weight), "0.001", 0, KEY_NO_MAX, 0, NULL, "z", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
static const key_group tmoe_group = { .section = "moe", .keys = tmoe_keys, .size = sizeof(tmoe),
                                      .check = tmoe_check };

static const kind_group mod_groups[] = { { &tmod_group, 0 }, { NULL, 0 } };
static const kind_group moe_groups[] = { { &tmoe_group, 0 }, { NULL, 0 } };

static const tmod *tmod_of(const layer_spec *s)
{
    return (const tmod *)(const void *)s->params;
}

static int picky_validate(const layer_spec *spec, const model_dims *dims, char *err, int err_len)
{
    double capacity = tmod_of(spec)->capacity;
    if (capacity * dims->seq_len >= 1.0)
        return 0;
    snprintf(err, (size_t)err_len, "capacity %g selects no token of %d", capacity, dims->seq_len);
    return -1;
}

static int no_tensors(const layer_spec *s, const model_dims *d, tensor_desc *out, int max)
{
    return 0;
}

static const layer_kind routed_kind = { .name = "routed", .groups = mod_groups,
                                        .tensors = no_tensors };
static const layer_kind picky_kind = { .name = "picky", .groups = mod_groups,
                                       .validate = picky_validate, .tensors = no_tensors };
static const layer_kind experty_kind = { .name = "experty", .groups = moe_groups,
                                         .tensors = no_tensors };
static const layer_kind *const kind_table[] = { &dense_kind, &routed_kind, &picky_kind,
                                                &experty_kind, NULL };
static const key_group *const more_groups[] = { &optim_group, NULL };
static const config_schema schema = { .kinds = kind_table, .groups = more_groups };
static const config_schema *const kinds = &schema;

typedef struct bad_case {
    const char *ini;
    const char *over;   /* one override, or NULL */
    int ranks;
    const char *expect; /* a substring of the message */
} bad_case;

static const bad_case bad_cases[] = {
    /* structure */
    { "[run]\nseed = 2\n[foo]\nx = 1\n", NULL, 0,
      "cfg.ini:4: [foo] x = 1: expected a section among [run], [data]" },
    { "[run]\nnme = x\n", NULL, 0, "cfg.ini:2: [run] nme = x: expected a key of [run] among name, seed" },
    { "[run]\nseed = 1\n\n[data]\nbatch = 4\n[run]\nseed = 2\n", NULL, 0,
      "cfg.ini:7: [run] seed = 2: expected each key once per section (set before at line 2)" },
    { "seed = 1\n", NULL, 0, "cfg.ini:1: [] seed = 1: expected a [section] line before the first key" },
    { "[run\nseed = 1\n", NULL, 0, "cfg.ini:1: syntax error: expected [section]" },
    { "[run]\nseed = 1\njunk\n", NULL, 0, "cfg.ini:3: syntax error" },
    { "[run]\nname = a\n  seed = 2\n", NULL, 0, "cfg.ini:3: expected no indentation" },
    { "[layer.x]\ncapacity = 0.5\n", NULL, 0, "cfg.ini:2: [layer.x] capacity = 0.5: expected a section" },
    /* types */
    { "[run]\nseed = abc\n", NULL, 0, "cfg.ini:2: [run] seed = abc: expected an integer in [0, 18446744073709551615]" },
    { "[run]\nseed = -1\n", NULL, 0, "cfg.ini:2: [run] seed = -1: expected an integer in [0," },
    { "[run]\nsteps = 12x\n", NULL, 0, "cfg.ini:2: [run] steps = 12x: expected an integer in [0, 1e+12]" },
    { "[run]\nsteps =\n", NULL, 0, "cfg.ini:2: [run] steps = : expected an integer in [0, 1e+12]" },
    { "[data]\nbatch = 99999999999999999999\n", NULL, 0, "cfg.ini:2: [data] batch = 99999999999999999999: expected an integer in [1, 2147483647]" },
    { "[data]\nbatch = 2147483648\n", NULL, 0, "cfg.ini:2: [data] batch = 2147483648: expected an integer in [1, 2147483647]" },
    { "[run]\nseed = 18446744073709551616\n", NULL, 0, "cfg.ini:2: [run] seed = 18446744073709551616: expected an integer in [0, 18446744073709551615]" },
    { "[run]\nseed = 12x\n", NULL, 0, "cfg.ini:2: [run] seed = 12x: expected an integer in [0," },
    { "[optim]\nlr = 1e-3x\n", NULL, 0, "cfg.ini:2: [optim] lr = 1e-3x: expected a number > 0" },
    { "[optim]\nlr = inf\n", NULL, 0, "cfg.ini:2: [optim] lr = inf: expected a number > 0" },
    /* ranges */
    { "[data]\nseq_len = 1\n", NULL, 0, "cfg.ini:2: [data] seq_len = 1: expected an integer in [2, 65536]" },
    { "[data]\nval_fraction = 1\n", NULL, 0, "cfg.ini:2: [data] val_fraction = 1: expected a number in (0, 1)" },
    { "[optim]\nbeta2 = 1\n", NULL, 0, "cfg.ini:2: [optim] beta2 = 1: expected a number in [0, 1)" },
    { "[optim]\neps = 0\n", NULL, 0, "cfg.ini:2: [optim] eps = 0: expected a number > 0" },
    { "[mod]\ncapacity = 0\n", NULL, 0, "cfg.ini:2: [mod] capacity = 0: expected a number in (0, 1]" },
    { "[mod]\ncapacity = 1.5\n", NULL, 0, "cfg.ini:2: [mod] capacity = 1.5: expected a number in (0, 1]" },
    { "[mod]\nrouter = smart\n", NULL, 0, "cfg.ini:2: [mod] router = smart: expected one of learned, random" },
    { "[moe]\nexperts = 0\n", NULL, 0, "cfg.ini:2: [moe] experts = 0: expected an integer in [1, 2147483647]" },
    /* widths and counts that size buffers: bounded where they would wrap */
    { "[model]\nd_model = 1048577\n", NULL, 0, "cfg.ini:2: [model] d_model = 1048577: expected an integer in [1, 1048576]" },
    { "[model]\nd_ff = 3000000000\n", NULL, 0, "cfg.ini:2: [model] d_ff = 3000000000: expected an integer in [1, 1048576]" },
    { "[run]\nrouting_windows = 1048577\n", NULL, 0, "cfg.ini:2: [run] routing_windows = 1048577: expected an integer in [0, 1048576]" },
    { "[run]\nname = a;b\n", NULL, 0,
      "cfg.ini:2: [run] name = a;b: expected a folder name inside run.out" },
    /* a name that is a path would leave run.out */
    { "[run]\nname = ../x\n", NULL, 0, "cfg.ini:2: [run] name = ../x: expected a folder name" },
    { "[run]\nname = ..\n", NULL, 0, "cfg.ini:2: [run] name = ..: expected a folder name" },
    { "[run]\nname = a/b\n", NULL, 0, "cfg.ini:2: [run] name = a/b: expected a folder name" },
    { "", "run.name=.", 0, "command line: run.name=.: expected a folder name inside run.out" },
    /* numbers that would overflow what they size */
    { "[run]\nsteps = 2000000000000\n", NULL, 0,
      "cfg.ini:2: [run] steps = 2000000000000: expected an integer in [0, 1e+12]" },
    { "[data]\nbatch = 100000\nseq_len = 65536\n", NULL, 0,
      "cfg.ini:3: [data] seq_len = 65536: expected [data] batch = 100000 (line 2) times "
      "[data] seq_len to be at most 2^30 token positions a step" },
    /* between keys */
    { "[model]\nd_model = 100\nn_heads = 3\n", NULL, 0,
      "cfg.ini:3: [model] n_heads = 3: expected [model] d_model = 100 (line 2) to be a "
      "multiple of [model] n_heads" },
    { "[model]\nn_heads = 4\nd_model = 12\n", NULL, 0,
      "cfg.ini:3: [model] d_model = 12: expected [model] d_model divided by [model] n_heads = 4 "
      "(line 2) to be even" },
    { "[moe]\ntop_k = 3\nexperts = 2\n", NULL, 0,
      "cfg.ini:3: [moe] experts = 2: expected [moe] top_k = 3 (line 2) to be at most [moe] experts" },
    { "[data]\nbatch = 6\n", NULL, 4, "cfg.ini:2: [data] batch = 6: expected a multiple of the 4 ranks" },
    { "[data]\nbatch = 2\n", NULL, 4,
      "cfg.ini:2: [data] batch = 2: expected at least 4, one sequence per rank (more ranks than sequences)" },
    { "", NULL, 3, "cfg.ini: [data] batch = 8 (default): expected a multiple of the 3 ranks" },
    { "[data]\nvocab = 300\n", NULL, 0,
      "cfg.ini:2: [data] vocab = 300: expected [data] vocab to be 256 (byte tokens) with the text "
      "source [data] source = synthetic (default)" },
    { "[data]\nsource = foo.csv\n", NULL, 0,
      "cfg.ini:2: [data] source = foo.csv: expected brown, synthetic or a path ending .txt, .bin "
      "or .u32" },
    { "[data]\nval_source = synthetic\n", NULL, 0,
      "cfg.ini:2: [data] val_source = synthetic: expected none, brown or a path ending .txt, .bin "
      "or .u32" },
    { "[data]\nval_source = held.csv\n", NULL, 0,
      "cfg.ini:2: [data] val_source = held.csv: expected none, brown or a path ending .txt" },
    { "[data]\nval_source =\n", NULL, 0, "cfg.ini:2: [data] val_source = : expected none, brown" },
    { "[data]\nval_source = held.bin\n", NULL, 0,
      "cfg.ini:2: [data] val_source = held.bin: expected [data] val_source to be of the same kind "
      "as [data] source = synthetic (default): byte text (brown, .txt) with a text source, token "
      "files (.bin, .u32) with a token file" },
    { "[data]\nsource = t.bin\nvocab = 1000\nval_source = brown\n", NULL, 0,
      "cfg.ini:4: [data] val_source = brown: expected [data] val_source to be of the same kind as "
      "[data] source = t.bin (line 2)" },
    { "[data]\nval_source = h.txt\n", "data.source=t.u32", 0,
      "command line: data.source=t.u32: expected [data] val_source = h.txt (line 2) to be of the "
      "same kind as [data] source" },
    { "[data]\nsource = t.u32\nvocab = 1\n", NULL, 0,
      "cfg.ini:3: [data] vocab = 1: expected an integer in [2, 2147483647]" },
    { "[data]\nsource = t.u32\nvocab = 2147483648\n", NULL, 0,
      "cfg.ini:3: [data] vocab = 2147483648: expected an integer in [2, 2147483647]" },
    { "[run]\nsteps = 0\n", NULL, 0,
      "cfg.ini:2: [run] steps = 0: expected [run] steps or [run] flops_budget = 0 (default) to be "
      "> 0: set run.steps or run.flops_budget" },
    /* the layer-spec table */
    { "[model]\nlayers = dense, moe, dense\n", NULL, 0,
      "cfg.ini:2: [model] layers = dense, moe, dense: expected a layer kind among dense, routed, "
      "picky, experty, not 'moe'" },
    { "[model]\nlayers = (dense, routed x 2\n", NULL, 0,
      "cfg.ini:2: [model] layers = (dense, routed x 2: expected ',' or ')' at character 19" },
    { "[model]\nlayers = dense x 0\n", NULL, 0,
      "cfg.ini:2: [model] layers = dense x 0: expected a repeat count in [1, 256] at character 9" },
    { "[model]\nlayers =\n", NULL, 0, "cfg.ini:2: [model] layers = : expected a layer-spec table such as" },
    { "[model]\nlayers = dense,, dense\n", NULL, 0, "expected a layer kind or '(' at character 7" },
    { "[model]\nlayers = dense dense\n", NULL, 0, "expected ',' or the end at character 7" },
    { "[model]\nlayers = (dense x 16) x 17\n", NULL, 0, "expected at most 256 layers in all" },
    { "[layer.9]\ncapacity = 0.5\n", NULL, 0,
      "cfg.ini:2: [layer.9] capacity = 0.5: expected a layer index in 0..3 ([model] layers has 4 layers)" },
    { "[layer.0]\ncapacity = 0.5\n", NULL, 0,
      "cfg.ini:2: [layer.0] capacity = 0.5: layer 0 is 'dense', which takes no key 'capacity' (it takes: none)" },
    { "[model]\nlayers = dense, routed\n[layer.1]\nexperts = 2\n", NULL, 0,
      "cfg.ini:4: [layer.1] experts = 2: layer 1 is 'routed', which takes no key 'experts' (it "
      "takes: capacity, router, gate, causal, aux_weight)" },
    /* a group's check on one layer: named where each value was set */
    { "[model]\nlayers = dense, experty\n[moe]\nexperts = 2\n[layer.1]\ntop_k = 3\n", NULL, 0,
      "cfg.ini:6: [layer.1] top_k = 3: expected [layer.1] top_k to be at most [moe] experts = 2 "
      "(line 4)" },
    { "[model]\nlayers = dense, routed\n[layer.1]\ncapacity = 2\n", NULL, 0,
      "cfg.ini:4: [layer.1] capacity = 2: expected a number in (0, 1]" },
    { "[model]\nlayers = routed\n[layer.0]\nrouter = a\nrouter = random\n", NULL, 0,
      "cfg.ini:5: [layer.0] router = random: expected each key once per section (set before at line 4)" },
    { "[data]\nseq_len = 4\n[model]\nlayers = dense, picky\n[layer.1]\ncapacity = 0.125\n", NULL, 0,
      "cfg.ini:4: [model] layers = dense, picky: layer 1 (picky): capacity 0.125 selects no token of 4" },
    /* overrides */
    { "", "foo", 0, "command line: foo: expected section.key=value" },
    { "", "run.seed", 0, "command line: run.seed: expected section.key=value" },
    { "", "=3", 0, "command line: =3: expected section.key=value" },
    { "", ".seed=3", 0, "command line: .seed=3: expected section.key=value" },
    { "", "run.nope=1", 0, "command line: run.nope=1: expected a key of [run] among name" },
    { "", "run.seed=abc", 0, "command line: run.seed=abc: expected an integer in [0," },
    { "", "layer.1.capacity=0.5", 0,
      "command line: layer.1.capacity=0.5: layer 1 is 'dense', which takes no key 'capacity'" },
    { "[data]\nbatch = 8\n", "data.batch=6", 4, "command line: data.batch=6: expected a multiple of the 4 ranks" },
    { "[model]\nn_heads = 3\n", "model.d_model=99", 0,
      "command line: model.d_model=99: expected [model] d_model divided by [model] n_heads = 3 (line 2) to be even" },
};

static char tmpdir[] = "/tmp/test_config.XXXXXX";

static int setup_dir(void **state)
{
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    char path[sizeof(tmpdir) + 16];
    snprintf(path, sizeof(path), "%s/cfg.ini", tmpdir);
    unlink(path);
    return rmdir(tmpdir);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void expect_error(int i, int rc, const char *err, const char *expect)
{
    if (rc == 0 || !strstr(err, expect) || strchr(err, '\n'))
        print_error("case %d: rc %d, message \"%s\", expected \"%s\"\n", i, rc, err, expect);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, expect));
    assert_null(strchr(err, '\n')); /* one line */
}

/* Each case from memory and from a file (whose path ends in cfg.ini). */
static void test_bad(void **state)
{
    char path[sizeof(tmpdir) + 16];
    snprintf(path, sizeof(path), "%s/cfg.ini", tmpdir);
    int n = (int)(sizeof(bad_cases) / sizeof(bad_cases[0]));
    assert_true(n >= 25);
    for (int i = 0; i < n; i++) {
        const bad_case *b = &bad_cases[i];
        char *over[1] = { (char *)b->over };
        int n_over = b->over ? 1 : 0;
        run_config c;
        char err[CFG_ERR_LEN] = "";
        int rc = config_load_string(&c, b->ini, "cfg.ini", n_over, over, kinds, b->ranks, err,
                                    sizeof(err));
        expect_error(i, rc, err, b->expect);
        write_file(path, b->ini);
        err[0] = '\0';
        rc = config_load(&c, path, n_over, over, kinds, b->ranks, err, sizeof(err));
        expect_error(i, rc, err, b->expect);
    }
}

static void test_long_line(void **state)
{
    char text[512];
    snprintf(text, sizeof(text), "[run]\nseed = 1\nname = %0300d\n", 7);
    run_config c;
    char err[CFG_ERR_LEN];
    int rc = config_load_string(&c, text, "cfg.ini", 0, NULL, kinds, 0, err, sizeof(err));
    expect_error(0, rc, err, "cfg.ini:3: expected lines of at most 198 characters");
    /* a value the writer could not put on one line is refused as well */
    char over[600];
    snprintf(over, sizeof(over), "run.out=%0250d", 7);
    char *o[1] = { over };
    rc = config_load_string(&c, "", "cfg.ini", 1, o, kinds, 0, err, sizeof(err));
    expect_error(1, rc, err, "expected a text of 1 to 192 characters");
}

/* Parsed text is UTF-8 without NULs (core/util/text.h): the code points at
 * the edges of RFC 3629's table pass, overlong forms, surrogates, past
 * U+10FFFF, stray and cut sequences are refused at their first byte. */
static void test_utf8(void **state)
{
    static const char *const good[] = { "a", "\x7f", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80",
                                        "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbb\xbf",
                                        "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf" };
    static const char *const bad[] = { "\x80", "\xc0\xaf", "\xc1\xbf", "\xe0\x9f\xbf",
                                       "\xed\xa0\x80", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80",
                                       "\xf5\x80\x80\x80", "\xff", "\xe2\x82", "\xc3" };
    char why[200];
    size_t at = 99;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(text_check(good[i], strlen(good[i]), 0, &at, why, sizeof(why)), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char s[16];
        int n = snprintf(s, sizeof(s), "ok%s", bad[i]);
        assert_int_equal(text_check(s, (size_t)n, 0, &at, why, sizeof(why)), -EILSEQ);
        assert_int_equal(at, 2);
    }
    assert_int_equal(text_check("a\0b", 3, 0, &at, why, sizeof(why)), -EILSEQ);
    assert_non_null(strstr(why, "byte offset 1 is 0x00, a NUL byte"));
    /* a config's lines: a NUL is refused, not read as the end of the line */
    char path[sizeof(tmpdir) + 16];
    snprintf(path, sizeof(path), "%s/utf8.ini", tmpdir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("[run]\nseed = 1\n\0name = x\n", 1, 25, f);
    fclose(f);
    run_config c;
    char err[CFG_ERR_LEN];
    int rc = config_load(&c, path, 0, NULL, kinds, 0, err, sizeof(err));
    expect_error(0, rc, err, "utf8.ini:3: byte offset 0 of the line (15 of the file) is 0x00, a "
                             "NUL byte");
    rc = config_load_string(&c, "[run]\nname = caf\xe9\n", "cfg.ini", 0, NULL, kinds, 0, err,
                            sizeof(err));
    expect_error(0, rc, err, "cfg.ini:2: byte offset 10 of the line (16 of the file) is 0xe9, not "
                             "UTF-8");
    char over[] = "run.name=caf\xe9";
    char *o[1] = { over };
    rc = config_load_string(&c, "", "cfg.ini", 1, o, kinds, 0, err, sizeof(err));
    expect_error(1, rc, err, "command line: run.name=caf...: byte offset 12 is 0xe9, not UTF-8");
    remove(path);
}

static void test_missing_file(void **state)
{
    run_config c;
    char err[CFG_ERR_LEN];
    assert_int_not_equal(config_load(&c, "/nonexistent/x.ini", 0, NULL, kinds, 0, err,
                                     sizeof(err)), 0);
    assert_non_null(strstr(err, "/nonexistent/x.ini: cannot open it"));
}

static void test_defaults(void **state)
{
    run_config c, d;
    char err[CFG_ERR_LEN];
    assert_int_equal(config_load_string(&c, "", "cfg.ini", 0, NULL, kinds, 8, err, sizeof(err)),
                     0);
    config_defaults(&d, kinds);
    assert_string_equal(c.name, "run");
    assert_int_equal(c.steps, 200);
    assert_int_equal(optim_of_config(&c).warmup, 20);
    assert_int_equal(optim_of_config(&c).total_steps, 200);
    assert_string_equal(c.source, "synthetic");
    assert_string_equal(c.val_source, "none");
    assert_int_equal(c.n_layers, 4);
    assert_string_equal(c.layers_text, "dense x 4");
    for (int l = 0; l < 4; l++)
        assert_string_equal(c.layers[l].kind, "dense");
    /* the sections at their declared defaults */
    assert_true(((const tmod *)config_group(&c, &tmod_group))->capacity == 0.125);
    assert_int_equal(((const tmoe *)config_group(&d, &tmoe_group))->experts, 8);
    assert_true(optim_of_config(&d).lr == 1e-3);
    model_dims dims = config_dims(&c);
    assert_int_equal(dims.vocab, 256);
    assert_int_equal(dims.d_model, 128);
    assert_int_equal(dims.n_heads, 4);
    assert_int_equal(dims.d_head, 32);
    assert_int_equal(dims.d_ff, 352);
    assert_int_equal(dims.n_layers, 4);
    assert_int_equal(dims.seq_len, 128);
    /* NULL kinds: core's own (dense) */
    assert_int_equal(config_load_string(&c, "", NULL, 0, NULL, NULL, 0, err, sizeof(err)), 0);
}

static void load_ok(run_config *c, const char *text, int n_over, char *const *over)
{
    char err[CFG_ERR_LEN] = "";
    int rc = config_load_string(c, text, "cfg.ini", n_over, over, kinds, 0, err, sizeof(err));
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);
}

static void test_layer_table(void **state)
{
    run_config c;
    load_ok(&c, "[model]\nlayers = (dense, dense) x 2\n", 0, NULL);
    assert_int_equal(c.n_layers, 4);
    for (int l = 0; l < 4; l++)
        assert_string_equal(c.layers[l].kind, "dense");
    assert_string_equal(c.layers_text, "(dense, dense) x 2");

    load_ok(&c, "[model]\nlayers = dense x 2, (dense, (routed, dense) x 2) x 2\n", 0, NULL);
    static const char *const want[] = { "dense", "dense",  "dense", "routed", "dense", "routed",
                                        "dense", "dense",  "routed", "dense", "routed", "dense" };
    assert_int_equal(c.n_layers, 12);
    for (int l = 0; l < 12; l++)
        assert_string_equal(c.layers[l].kind, want[l]);

    load_ok(&c, "[model]\nlayers=routed,dense x3,(routed)x1\n", 0, NULL);
    assert_int_equal(c.n_layers, 5);
    assert_string_equal(c.layers[4].kind, "routed");
}

/* [layer.N] lands on that layer only, on top of [mod] wherever [mod] is. */
static void test_layer_override(void **state)
{
    run_config c;
    load_ok(&c,
            "[model]\nlayers = routed, routed, dense\n"
            "[layer.1]\ncapacity = 0.25\n"
            "[mod]\ncapacity = 0.5\nrouter = random\n",
            0, NULL);
    assert_true(tmod_of(&c.layers[1])->capacity == 0.25);
    assert_true(tmod_of(&c.layers[0])->capacity == 0.5);
    assert_int_equal(tmod_of(&c.layers[1])->router, 1); /* random */
    assert_true(((const tmod *)config_group(&c, &tmod_group))->capacity == 0.5);
}

static void test_overrides_win(void **state)
{
    run_config c;
    char *over[] = { (char[]){ "run.seed=7" }, (char[]){ " data.source = corpus.bin " },
                     (char[]){ "data.vocab=1000" }, (char[]){ "model.layers=routed x 2" },
                     (char[]){ "layer.1.capacity=0.75" }, (char[]){ "run.name=from cli" } };
    load_ok(&c, "[run]\nseed = 5\nname = file\n[data]\nsource = brown\n", 6, over);
    assert_int_equal(c.seed, 7);
    assert_string_equal(c.name, "from cli");
    assert_string_equal(c.source, "corpus.bin");
    assert_int_equal(c.vocab, 1000);
    assert_int_equal(c.n_layers, 2);
    assert_true(tmod_of(&c.layers[1])->capacity == 0.75);
    assert_true(tmod_of(&c.layers[0])->capacity == 0.125);

    /* an override replaces a [layer.N] key of the file */
    char *over2[] = { (char[]){ "layer.0.capacity=0.5" } };
    load_ok(&c, "[model]\nlayers = routed\n[layer.0]\ncapacity = 0.25\n", 1, over2);
    assert_true(tmod_of(&c.layers[0])->capacity == 0.5);
}

/* One split rule for an override's section (the config's and eval's dial):
 * a layer's section is layer.N, whose key may name a section of its own. */
static void test_override_split(void **state)
{
    size_t n;
    assert_int_equal(config_override_split("layer.3.capacity=0.5", &n), 3);
    assert_int_equal(n, 7);
    assert_int_equal(config_override_split("layer.12.moe.router=hash", &n), 12);
    assert_int_equal(n, 8);
    assert_int_equal(config_override_split("mod.capacity=0.5", &n), -1);
    assert_int_equal(n, 3);
    assert_int_equal(config_override_split("layer.x.capacity=1", &n), -1);
    assert_int_equal(n, 7); /* "layer.x": no [layer.N], refused as a section */
    assert_int_equal(config_override_split("capacity=0.5", &n), -1);
    assert_int_equal(n, 0);
    assert_int_equal(config_override_split("layer.3=1", &n), -1);
    assert_int_equal(n, 5);
    /* on the command line as in a file: [layer.1] mod.capacity = 0.75 */
    run_config c;
    char *over[] = { (char[]){ "layer.1.mod.capacity=0.75" } };
    load_ok(&c, "[model]\nlayers = routed x 2\n", 1, over);
    assert_true(tmod_of(&c.layers[1])->capacity == 0.75);
    assert_true(tmod_of(&c.layers[0])->capacity == 0.125);
}

static void test_sources(void **state)
{
    run_config c;
    load_ok(&c, "[data]\nsource = brown\nvocab = 256\n", 0, NULL);
    assert_int_equal(c.vocab, 256);
    load_ok(&c, "[data]\nsource = a/b.txt\n", 0, NULL);
    assert_int_equal(c.vocab, 256);
    load_ok(&c, "[data]\nsource = tokens.bin\nvocab = 50000\n", 0, NULL);
    assert_int_equal(c.vocab, 50000);
    load_ok(&c, "[data]\nsource = tokens.bin\nvocab = 65536\n", 0, NULL);
    assert_int_equal(c.vocab, 65536);
    /* .u32: uint32 tokens, any vocab */
    load_ok(&c, "[data]\nsource = tokens.u32\nvocab = 151936\n", 0, NULL);
    assert_string_equal(c.source, "tokens.u32");
    assert_int_equal(c.vocab, 151936);
    load_ok(&c, "[data]\nsource = tokens.u32\nvocab = 300\n", 0, NULL);
    assert_int_equal(c.vocab, 300);
    /* a .bin past 65536: llm.c's version 7 holds uint32 tokens; the file's
     * header says which when it is opened (tests/test_data.c) */
    load_ok(&c, "[data]\nsource = llama.bin\nvocab = 128256\n", 0, NULL);
    assert_int_equal(c.vocab, 128256);
    /* a held-out file of the same kind as the source; val_fraction may stay
     * set (the resolved config always holds it) and does not apply */
    load_ok(&c, "[data]\nsource = a.bin\nvocab = 1000\nval_source = held/b.u32\n", 0, NULL);
    assert_string_equal(c.val_source, "held/b.u32");
    load_ok(&c, "[data]\nsource = a.txt\nval_fraction = 0.3\nval_source = brown\n", 0, NULL);
    assert_string_equal(c.val_source, "brown");
    assert_true(c.val_fraction == 0.3);
    load_ok(&c, "[data]\nsource = brown\nval_source = held.txt\n", 0, NULL);
    load_ok(&c, "[data]\nval_source = held.txt\n", 0, NULL); /* synthetic is text */
    char *over[] = { (char[]){ "data.val_source=none" } };
    load_ok(&c, "[data]\nval_source = held.txt\n", 1, over);
    assert_string_equal(c.val_source, "none");
    /* a budget instead of steps */
    load_ok(&c, "[run]\nsteps = 0\nflops_budget = 1e15\n", 0, NULL);
    assert_int_equal(c.steps, 0);
    assert_true(c.flops_budget == 1e15);
    assert_int_equal(optim_of_config(&c).total_steps, 0);
}

/* Two layers of one kind with the same value for every key (the params
 * start zeroed, so their bytes compare). */
static void assert_spec_equal(const layer_spec *a, const layer_spec *b)
{
    assert_string_equal(a->kind, b->kind);
    assert_memory_equal(a->params, b->params, sizeof(a->params));
}

static void assert_config_equal(const run_config *a, const run_config *b)
{
    assert_string_equal(a->name, b->name);
    assert_true(a->seed == b->seed);
    assert_int_equal(a->steps, b->steps);
    assert_true(a->flops_budget == b->flops_budget);
    assert_string_equal(a->out, b->out);
    assert_int_equal(a->log_every, b->log_every);
    assert_int_equal(a->eval_every, b->eval_every);
    assert_int_equal(a->eval_windows, b->eval_windows);
    assert_int_equal(a->ckpt_every, b->ckpt_every);
    assert_int_equal(a->routing_every, b->routing_every);
    assert_string_equal(a->source, b->source);
    assert_int_equal(a->seq_len, b->seq_len);
    assert_int_equal(a->batch, b->batch);
    assert_true(a->val_fraction == b->val_fraction);
    assert_string_equal(a->val_source, b->val_source);
    assert_int_equal(a->vocab, b->vocab);
    assert_int_equal(a->d_model, b->d_model);
    assert_int_equal(a->n_heads, b->n_heads);
    assert_int_equal(a->d_ff, b->d_ff);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_string_equal(a->layers_text, b->layers_text);
    for (int l = 0; l < a->n_layers; l++)
        assert_spec_equal(&a->layers[l], &b->layers[l]);
    assert_int_equal(a->n_groups, b->n_groups);
    for (int g = 0; g < a->n_groups; g++) {
        assert_ptr_equal(a->groups[g], b->groups[g]);
        assert_memory_equal(a->group_values[g], b->group_values[g], a->groups[g]->size);
    }
    optim_cfg oa = optim_of_config(a), ob = optim_of_config(b);
    assert_true(oa.lr == ob.lr);
    assert_int_equal(oa.warmup, ob.warmup);
    assert_true(oa.eps == ob.eps);
}

static void round_trip(const run_config *a)
{
    char *ini = config_to_ini(a);
    assert_non_null(ini);
    run_config b;
    char err[CFG_ERR_LEN] = "";
    int rc = config_load_string(&b, ini, "resolved.ini", 0, NULL, kinds, 0, err, sizeof(err));
    if (rc)
        print_error("%s\n%s\n", err, ini);
    assert_int_equal(rc, 0);
    assert_config_equal(a, &b);
    free(ini);
}

static void test_round_trip(void **state)
{
    run_config c;
    load_ok(&c, "", 0, NULL);
    round_trip(&c);
    load_ok(&c,
            "[run]\nname = exp 1\nseed = 18446744073709551615\nsteps = 0\n"
            "flops_budget = 1.2345678901234567e18\nout = runs/a b\nlog_every = 0\n"
            "[data]\nsource = /data/tok.bin\nvocab = 50257\nseq_len = 2\nbatch = 3\n"
            "val_fraction = 0.30000000000000004\nval_source = /data/held out.u32\n"
            "[model]\nd_model = 96\nn_heads = 6\nd_ff = 1\n"
            "layers = routed, (dense, picky x 2) x 3\n"
            "[mod]\ncapacity = 0.7\ngate = raw\ncausal = predictor\naux_weight = 0\n"
            "[moe]\nexperts = 3\ntop_k = 3\ncapacity_factor = 0\nd_ff = 17\n"
            "balance_weight = 1e-300\nz_weight = 3.14159\n"
            "[optim]\nlr = 0.1\nwarmup = 0\nweight_decay = 0\nbeta1 = 0\nbeta2 = 0.999999\n"
            "eps = 2.2250738585072014e-308\nclip = 0\n"
            "[layer.0]\ncapacity = 0.1\nrouter = random\n[layer.5]\ncapacity = 0.5\n",
            0, NULL);
    assert_true(tmod_of(&c.layers[0])->capacity == 0.1);
    assert_true(tmod_of(&c.layers[5])->capacity == 0.5);
    assert_true(tmod_of(&c.layers[2])->capacity == 0.7);
    round_trip(&c);

    /* only the layers that differ get a [layer.N] section */
    char *ini = config_to_ini(&c);
    assert_non_null(strstr(ini, "val_fraction = 0.30000000000000004\n"
                                "val_source = /data/held out.u32\n"));
    assert_non_null(strstr(ini, "[layer.0]\ncapacity = 0.1\nrouter = random\n"));
    assert_non_null(strstr(ini, "[layer.5]\ncapacity = 0.5\n"));
    assert_null(strstr(ini, "[layer.1]"));
    assert_null(strstr(ini, "[layer.2]"));
    free(ini);
}

/* drop the line "line\n" from text (it must be there) */
static char *without_line(const char *text, const char *line)
{
    const char *at = strstr(text, line);
    assert_non_null(at);
    size_t n = strlen(text), k = strlen(line);
    char *out = malloc(n + 1);
    assert_non_null(out);
    memcpy(out, text, (size_t)(at - text));
    memcpy(out + (at - text), at + k, n - (size_t)(at - text) - k + 1);
    return out;
}

/* text with its line "from" (it must be there) replaced by "to" */
static char *replace_line(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    assert_non_null(at);
    size_t n = strlen(text), k = strlen(from), t = strlen(to);
    char *out = malloc(n - k + t + 1);
    assert_non_null(out);
    memcpy(out, text, (size_t)(at - text));
    memcpy(out + (at - text), to, t);
    memcpy(out + (at - text) + t, at + k, n - (size_t)(at - text) - k + 1);
    return out;
}

/* A run's stored config written by a build without a key since added (a
 * core key and a group's): the same run when the key is at its default;
 * another at any other value, or with a key this build does not know. */
static void test_same_as(void **state)
{
    (void)state;
    run_config c;
    load_ok(&c, "[model]\nlayers = dense, routed\n[mod]\ncapacity = 0.25\n", 0, NULL);
    char *ini = config_to_ini(&c);
    assert_true(config_same_as(&c, ini, ini));
    char *old = without_line(ini, "flops_count = nominal\n");
    char *old2 = without_line(old, "aux_weight = 0.01\n");
    assert_true(config_same_as(&c, ini, old));
    assert_true(config_same_as(&c, ini, old2));
    /* the key at another value: another run */
    char *other = without_line(ini, "capacity = 0.25\n");
    assert_false(config_same_as(&c, ini, other));
    run_config e;
    load_ok(&e, "[model]\nlayers = dense, routed\n[mod]\ncapacity = 0.25\n[run]\n"
                "flops_count = executed\n", 0, NULL);
    char *exe = config_to_ini(&e);
    assert_false(config_same_as(&c, ini, exe));
    assert_false(config_same_as(&e, exe, old));
    /* a key this build does not know */
    size_t n = strlen(ini);
    char *unknown = malloc(n + 32);
    assert_non_null(unknown);
    snprintf(unknown, n + 32, "%s[mod]\nlater = 1\n", ini);
    assert_false(config_same_as(&c, ini, unknown));
    free(unknown);
    /* run.out spelt absolute where this run's is relative: the same folder,
     * the same run; a folder that is another (or not there) is another */
    char here[4096], tmp[] = "/tmp/mode-same-XXXXXX", line[4200];
    assert_non_null(getcwd(here, sizeof(here)));
    assert_non_null(mkdtemp(tmp));
    assert_int_equal(chdir(tmp), 0);
    assert_string_equal(c.out, "out");
    assert_int_equal(mkdir("out", 0755), 0);
    snprintf(line, sizeof(line), "out = %s/out\n", tmp);
    char *abs = replace_line(ini, "out = out\n", line);
    assert_true(config_same_as(&c, ini, abs));
    char *elsewhere = replace_line(ini, "out = out\n", "out = /nonexistent-mode-out\n");
    assert_false(config_same_as(&c, ini, elsewhere));
    assert_int_equal(rmdir("out"), 0);
    assert_int_equal(chdir(here), 0);
    assert_int_equal(rmdir(tmp), 0);
    free(elsewhere);
    free(abs);
    free(exe);
    free(other);
    free(old2);
    free(old);
    free(ini);
}

/* The one parser and the one narrowing (core/util/num.h), at their bounds. */
static void test_numbers(void **state)
{
    (void)state;
    long l = -5;
    assert_true(num_parse_long("4096", 1, 4096, &l) && l == 4096);
    assert_true(num_parse_long(" 7 ", 1, 4096, &l) && l == 7);
    l = -5;
    assert_false(num_parse_long("4097", 1, 4096, &l));
    assert_false(num_parse_long("0", 1, 4096, &l));
    /* past a long: refused, not LONG_MAX (strtol) nor 1215752191 (atoi) */
    assert_false(num_parse_long("99999999999", 1, 4096, &l));
    assert_false(num_parse_long("99999999999999999999", LONG_MIN, LONG_MAX, &l));
    assert_false(num_parse_long("12x", 0, 100, &l));
    assert_false(num_parse_long("1e3", 0, 10000, &l));
    assert_false(num_parse_long("", 0, 100, &l));
    assert_false(num_parse_long(NULL, 0, 100, &l));
    assert_int_equal(l, -5); /* untouched by every refusal */
    double d = 0.0;
    assert_true(num_parse_double("1e9", 0.0, HUGE_VAL, &d) && d == 1e9);
    assert_false(num_parse_double("inf", -HUGE_VAL, HUGE_VAL, &d));
    assert_false(num_parse_double("nan", -HUGE_VAL, HUGE_VAL, &d));
    assert_false(num_parse_double("1e999", -HUGE_VAL, HUGE_VAL, &d));
    assert_false(num_parse_double("0.5", 1.0, 2.0, &d));
    assert_false(num_parse_double("1e-3x", 0.0, 1.0, &d));
    uint64_t u = 0;
    assert_true(num_parse_u64("18446744073709551615", &u) && u == UINT64_MAX);
    assert_false(num_parse_u64("18446744073709551616", &u));
    assert_false(num_parse_u64("-1", &u));
    assert_false(num_parse_u64(" -1", &u));
    assert_false(num_parse_u64("7 8", &u));
    /* floor and ceil clamped before narrowing: ec.capacity_factor = 1e9 at
     * S 128, E 8 is 1.6e10, which a cast wrapped to a capacity of 1 */
    assert_int_equal(num_floor_int(1e9 * 128 / 8, 1, 128), 128);
    assert_int_equal(num_floor_int(8.0 * 128 / 8, 1, 128), 128);
    assert_int_equal(num_floor_int(0.01 * 128 / 8, 1, 128), 1);
    assert_int_equal(num_floor_int(2147483648.0, 0, INT_MAX), INT_MAX);
    assert_int_equal(num_floor_int(2147483646.5, 0, INT_MAX), 2147483646);
    assert_int_equal(num_floor_int(-1e300, -3, 3), -3);
    assert_int_equal(num_floor_int((double)NAN, 1, 9), 1);
    assert_int_equal(num_floor_int(HUGE_VAL, 1, 9), 9);
    assert_int_equal(num_ceil_int(2147483646.5, 0, INT_MAX), INT_MAX);
    assert_int_equal(num_ceil_int(1e300, 1, 12), 12);
    assert_int_equal(num_ceil_int(3.75, 1, 12), 4);
    assert_int_equal(num_ceil_int(3.0, 1, 12), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_layer_table),
        cmocka_unit_test(test_layer_override),
        cmocka_unit_test(test_overrides_win),
        cmocka_unit_test(test_override_split),
        cmocka_unit_test(test_sources),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_same_as),
        cmocka_unit_test(test_numbers),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
