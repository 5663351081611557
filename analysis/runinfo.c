#include "analysis/runinfo.h"

#include "core/data/data.h"
#include "core/io/h5util.h"
#include "core/util/finite.h"
#include "core/util/file.h"
#include "moe/registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Read a whole dataset of up to 4 dimensions as mem_type into a malloc'd
 * array; -ENOENT when it is absent. */
static int read_array(const run_info *ri, const char *name, hid_t mem_type, size_t elem,
                      void **out, int *ndim, hsize_t *dims)
{
    unsigned long long d[4];
    int rc = run_reader_array(ri->rd, name, mem_type, elem, out, ndim, d, NULL);
    for (int i = 0; !rc && i < *ndim; i++)
        dims[i] = d[i];
    return rc;
}

bool run_has_dataset(const run_info *ri, const char *name)
{
    return run_reader_has(ri->rd, name);
}

int run_read_column(const run_info *ri, const char *name, double **out, long *n)
{
    return run_reader_column(ri->rd, name, out, n);
}

double run_last_value(const run_info *ri, const char *name, long *count)
{
    double *v = NULL, x = (double)NAN;
    long n = 0;
    if (!run_read_column(ri, name, &v, &n) && n > 0)
        x = v[n - 1];
    if (count)
        *count = n;
    free(v);
    return x;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* The recorded windows (tokens, labels) and steps under /routing. */
static int read_routing(run_info *ri, char *err, int err_len)
{
    char **names = NULL;
    int n = 0;
    int rc = run_reader_children(ri->rd, "routing", &names, &n);
    for (int i = 0; !rc && i < n; i++) {
        long step;
        char tail;
        if (sscanf(names[i], "step_%ld%c", &step, &tail) != 1)
            continue;
        long *p = realloc(ri->steps, (size_t)(ri->n_steps + 1) * sizeof(long));
        if (!p) {
            rc = -ENOMEM;
            break;
        }
        ri->steps = p;
        ri->steps[ri->n_steps++] = step;
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc)
        return rc;
    if (ri->n_steps > 1)
        qsort(ri->steps, (size_t)ri->n_steps, sizeof(long), cmp_long);
    hsize_t dims[4];
    int nd = 0;
    rc = read_array(ri, "routing/tokens", H5T_NATIVE_INT32, sizeof(int32_t),
                        (void **)&ri->tokens, &nd, dims);
    if (rc == -ENOENT)
        return 0;
    if (rc || nd != 2 || dims[1] < 2) {
        snprintf(err, (size_t)err_len, "%s: /routing/tokens is not [R][S+1]", ri->path);
        return -EINVAL;
    }
    ri->R = (int)dims[0];
    ri->S = (int)dims[1] - 1;
    hsize_t ldims[4];
    rc = read_array(ri, "routing/labels", H5T_NATIVE_UINT8, 1, (void **)&ri->labels, &nd,
                    ldims);
    if (rc == -ENOENT)
        return 0;
    if (rc || nd != 2 || ldims[0] != dims[0] || ldims[1] != dims[1]) {
        snprintf(err, (size_t)err_len, "%s: /routing/labels is not shaped like /routing/tokens",
                 ri->path);
        return -EINVAL;
    }
    return 0;
}

static void set_names(run_info *ri)
{
    snprintf(ri->dir, sizeof(ri->dir), "%s", ri->path);
    char *slash = strrchr(ri->dir, '/');
    if (slash)
        *(slash == ri->dir ? slash + 1 : slash) = '\0';
    else
        snprintf(ri->dir, sizeof(ri->dir), ".");
    const char *base = strrchr(ri->dir, '/');
    base = base ? base + 1 : ri->dir;
    snprintf(ri->name, sizeof(ri->name), "%.127s", ri->cfg.name[0] ? ri->cfg.name : base);
    /* the labels are those of the held-out windows: data.val_source's when set */
    const char *held = strcmp(ri->cfg.val_source, "none") ? ri->cfg.val_source : ri->cfg.source;
    if (!strcmp(held, "brown")) {
        ri->n_classes = BROWN_CLASSES;
        ri->class_names = brown_label_names;
    } else if (!strcmp(held, "synthetic")) {
        ri->n_classes = SYNTH_CLASSES;
        ri->class_names = synthetic_label_names;
    } else if (strcmp(ri->cfg.tokenizer, "none") != 0 ||
               (strlen(held) > 4 && (!strcmp(held + strlen(held) - 4, ".bin") ||
                                     !strcmp(held + strlen(held) - 4, ".u32")))) {
        /* a token file with Brown's classes beside it (mode-exp tokenize
         * --labels): the run recorded them when it had them */
        ri->n_classes = BROWN_CLASSES;
        ri->class_names = brown_label_names;
    }
}

/* provenance/data of run.h5, or NULL (files written before it was kept);
 * the seal was checked when the reader opened the file (a version gathered
 * since holds the same run's fingerprint) */
static char *read_data_fingerprint(const char *path)
{
    hid_t f = h5_open_input(path, NULL, 0);
    if (f < 0)
        return NULL;
    char *fp = NULL;
    if (H5Lexists(f, "provenance", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(f, "provenance", H5P_DEFAULT);
        if (g >= 0) {
            fp = H5Aexists(g, "data") > 0 ? h5_attr_read_string(g, "data") : NULL;
            H5Gclose(g);
        }
    }
    H5Fclose(f);
    return fp;
}

long run_ranks(const run_info *ri)
{
    hid_t f = h5_open_input(ri->path, NULL, 0);
    if (f < 0)
        return -1;
    long ranks = -1;
    if (H5Lexists(f, "provenance", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(f, "provenance", H5P_DEFAULT);
        if (g >= 0) {
            if (H5Aexists(g, "ranks") > 0) {
                hid_t a = H5Aopen(g, "ranks", H5P_DEFAULT);
                if (a < 0 || H5Aread(a, H5T_NATIVE_LONG, &ranks) < 0)
                    ranks = -1;
                if (a >= 0)
                    H5Aclose(a);
            }
            H5Gclose(g);
        }
    }
    H5Fclose(f);
    return ranks;
}

int build_run_info(run_info **out, const char *path, char *err, int err_len)
{
    int rc = -EINVAL;
    char *config = NULL;
    *out = NULL;
    run_info *ri = calloc(1, sizeof(*ri));
    if (!ri)
        return -ENOMEM;
    snprintf(ri->path, sizeof(ri->path), "%s", path);
    h5_quiet();
    /* the one checked open first (core/util/file.h): a FIFO or a folder is
     * named as one, and never reaches HDF5's own open */
    int fd = file_open_regular(path, err, err_len);
    if (fd == -ENOENT)
        snprintf(err, (size_t)err_len, "%s: no such file", path);
    if (fd < 0)
        goto fail;
    close(fd);
    if (H5Fis_hdf5(path) <= 0) {
        snprintf(err, (size_t)err_len, "%s: not an HDF5 file", path);
        goto fail;
    }
    if (open_run_reader(&ri->rd, path, err, err_len))
        goto fail;
    /* a run file, or an eval --record file: routing records without training */
    if (!run_reader_has(ri->rd, "metrics/step") && !run_reader_has(ri->rd, "routing/loss")) {
        snprintf(err, (size_t)err_len, "%s: %s", path,
                 run_reader_has(ri->rd, "tok_emb")
                     ? "a checkpoint, not a run file (give the run.h5 beside it)"
                     : "no /metrics/step dataset: not a mode run file (or no step recorded "
                       "yet)");
        goto fail;
    }
    char cerr[CFG_ERR_LEN];
    if (config_load_string(&ri->cfg, run_reader_config(ri->rd), path, 0, NULL, &mode_schema, 0,
                           cerr, (int)sizeof(cerr))) {
        snprintf(err, (size_t)err_len, "%s: its config attribute does not load: %s", path, cerr);
        goto fail;
    }
    set_names(ri);
    if ((rc = read_routing(ri, err, err_len)))
        goto fail;
    ri->data = read_data_fingerprint(path);
    free(config);
    *out = ri;
    return 0;
fail:
    free(config);
    free_run_info(&ri);
    return rc ? rc : -EINVAL;
}

void free_run_info(run_info **pri)
{
    run_info *ri = *pri;
    if (!ri)
        return;
    close_run_reader(&ri->rd);
    free(ri->data);
    free(ri->steps);
    free(ri->tokens);
    free(ri->labels);
    free(ri);
    *pri = NULL;
}

const layer_kind *run_layer_kind(const run_info *ri, int l)
{
    return layer_kind_lookup(mode_kinds, ri->cfg.layers[l].kind);
}

unsigned run_layer_decides(const run_info *ri, int l)
{
    const layer_kind *k = run_layer_kind(ri, l);
    return k ? k->decides.decides : 0;
}

double run_layer_value(const run_info *ri, int l, const char *key)
{
    double v;
    if (!key || layer_spec_number(&ri->cfg.layers[l], run_layer_kind(ri, l), key, &v))
        return (double)NAN;
    return v;
}

/* Layer l's declaration when it makes the decisions of bit, else NULL. */
static const decision_decl *declaration(const run_info *ri, int l, unsigned bit)
{
    const layer_kind *k = run_layer_kind(ri, l);
    return k && (k->decides.decides & bit) ? &k->decides : NULL;
}

double run_layer_capacity(const run_info *ri, int l)
{
    const decision_decl *d = declaration(ri, l, DECIDES_TAKE);
    return d ? run_layer_value(ri, l, d->share_key) : (double)NAN;
}

void run_no_routing_reason(const run_info *ri, char *buf, int len)
{
    bool routed = false;
    for (int l = 0; l < ri->cfg.n_layers; l++)
        routed |= (run_layer_decides(ri, l) & (DECIDES_TAKE | DECIDES_EXPERTS)) != 0;
    if (!routed)
        snprintf(buf, (size_t)len, "the model has no routed layer (layers = %s)",
                 ri->cfg.layers_text);
    else if (ri->cfg.routing_every <= 0)
        snprintf(buf, (size_t)len, "run.routing_every = %ld", ri->cfg.routing_every);
    else
        snprintf(buf, (size_t)len, "none written yet (run.routing_every = %ld)",
                 ri->cfg.routing_every);
}

int run_step_index(const run_info *ri, long step)
{
    for (int i = 0; i < ri->n_steps; i++)
        if (ri->steps[i] == step)
            return i;
    return -1;
}

void run_steps_list(const run_info *ri, char *buf, int len)
{
    int w = 0;
    buf[0] = '\0';
    for (int i = 0; i < ri->n_steps; i++) {
        int k = 0;
        if (ri->n_steps > 12 && i == 5) { /* the first five, ..., the last five */
            k = snprintf(buf + w, (size_t)(len - w), ", ...");
            i = ri->n_steps - 5;
        }
        if (k >= 0 && w + k < len)
            w += k;
        k = snprintf(buf + w, (size_t)(len - w), "%s%ld", i ? ", " : "", ri->steps[i]);
        if (k < 0 || w + k >= len)
            break;
        w += k;
    }
}

/* One dataset of the record: it must be [R][S] (or [R][S][K] when k_out). */
static int read_part(const run_info *ri, const char *group, const char *what, hid_t type,
                     size_t elem, void **out, int *k_out, char *err, int err_len)
{
    char name[256];
    snprintf(name, sizeof(name), "%s/%s", group, what);
    hsize_t dims[4];
    int nd = 0;
    int rc = read_array(ri, name, type, elem, out, &nd, dims);
    if (rc == -ENOENT)
        return 0;
    bool ok = !rc && nd == (k_out ? 3 : 2) && (int)dims[0] == ri->R && (int)dims[1] == ri->S;
    if (ok && k_out)
        *k_out = (int)dims[2];
    size_t n = ok ? (size_t)dims[0] * dims[1] * (k_out ? dims[2] : 1) : 0;
    long bad = ok && type == H5T_NATIVE_FLOAT ? first_nonfinite(*out, n) : -1;
    if (bad >= 0) { /* router scores: a histogram or margin of NaN is no figure */
        snprintf(err, (size_t)err_len, "%s: /%s: element %ld is %g, not a finite number",
                 ri->path, name, bad, (double)((const float *)*out)[bad]);
        free(*out);
        *out = NULL;
        return -EINVAL;
    }
    if (!ok) {
        snprintf(err, (size_t)err_len, "%s: /%s is not [%d][%d]%s as /routing/tokens says",
                 ri->path, name, ri->R, ri->S, k_out ? "[top_k]" : "");
        free(*out);
        *out = NULL;
        return rc ? rc : -EINVAL;
    }
    return 0;
}

/* Whether every value of a record's dataset (n of them, int32 or uint8)
 * is in [lo, hi]; else err names the file, the dataset, the first value
 * outside and its index.  Values read from a file index tables here
 * (depth histograms, expert colours): they are checked before use. */
static bool part_in_range(const run_info *ri, const char *group, const char *what,
                          const void *data, bool bytes, long n, long lo, long hi, char *err,
                          int err_len)
{
    for (long t = 0; data && t < n; t++) {
        long v = bytes ? ((const uint8_t *)data)[t] : ((const int32_t *)data)[t];
        if (v >= lo && v <= hi)
            continue;
        snprintf(err, (size_t)err_len, "%s: /%s/%s holds %ld at element %ld: expected an "
                 "integer in [%ld, %ld]", ri->path, group, what, v, t, lo, hi);
        return false;
    }
    return true;
}

/* Where part i of a decision lies in a layer_record (the same fields,
 * ROUTE_DECISION_PARTS). */
static void **record_part(layer_record *rec, int i)
{
    static const size_t at[DECISION_PART_COUNT] = {
#define LAYER_RECORD_AT(name, type, code, slots, bit) [DECISION_PART_##name] = offsetof(layer_record, name),
        ROUTE_DECISION_PARTS(LAYER_RECORD_AT)
#undef LAYER_RECORD_AT
    };
    return (void **)((char *)rec + at[i]);
}

int read_layer_record(const run_info *ri, long step, int l, layer_record *rec, char *err,
                      int err_len)
{
    memset(rec, 0, sizeof(*rec));
    rec->layer = l;
    rec->step = step;
    if (!ri->tokens) {
        snprintf(err, (size_t)err_len, "%s: no /routing/tokens: no routing records", ri->path);
        return -ENOENT;
    }
    char group[96];
    snprintf(group, sizeof(group), "routing/step_%06ld/layer_%d", step, l);
    /* every part of a decision the record holds (the writer's names,
     * decision.h) */
    int rc = 0;
    for (int i = 0; !rc && i < DECISION_PART_COUNT; i++) {
        const decision_part *p = &decision_parts[i];
        bool bytes = p->type == RECORD_UINT8;
        hid_t type = bytes ? H5T_NATIVE_UINT8
                     : p->type == RECORD_INT32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
        rc = read_part(ri, group, p->name, type, bytes ? 1 : 4, record_part(rec, i),
                       p->slots ? &rec->top_k : NULL, err, err_len);
    }
    if (!rc && rec->experts) {
        double E = run_layer_experts(ri, l);
        rec->n_experts = isfinite(E) && E >= 1 && E <= 1e6 ? (int)E : 0;
    }
    long RS = (long)ri->R * ri->S;
    double R = run_layer_recursions(ri, l);
    long max_depth = isfinite(R) && R >= 1 && R <= 1e6 ? (long)R : 0;
    /* experts: -2 skipped (staged), -1 dropped, a column, E the no-op */
    const decision_part *P = decision_parts;
    if (!rc && (!part_in_range(ri, group, P[DECISION_PART_selected].name, rec->selected, true, RS,
                               0, 1, err, err_len) ||
                !part_in_range(ri, group, P[DECISION_PART_causal].name, rec->causal, true, RS, 0,
                               1, err, err_len) ||
                !part_in_range(ri, group, P[DECISION_PART_exited].name, rec->exited, true, RS, 0,
                               1, err, err_len) ||
                !part_in_range(ri, group, P[DECISION_PART_experts].name, rec->experts, false,
                               RS * rec->top_k, -2, rec->n_experts, err, err_len) ||
                !part_in_range(ri, group, P[DECISION_PART_depth].name, rec->depth, false, RS, 0,
                               max_depth, err, err_len)))
        rc = -EINVAL;
    if (rc)
        free_layer_record(rec);
    return rc;
}

double run_layer_recursions(const run_info *ri, int l)
{
    const decision_decl *d = declaration(ri, l, DECIDES_DEPTH);
    return d ? run_layer_value(ri, l, d->most_key) : (double)NAN;
}

double run_layer_experts(const run_info *ri, int l)
{
    const decision_decl *d = declaration(ri, l, DECIDES_EXPERTS);
    if (!d)
        return (double)NAN;
    double E = run_layer_value(ri, l, d->experts_key), m = run_layer_value(ri, l, d->split_key);
    return isfinite(m) && m >= 1 ? E * m : E;
}

void free_layer_record(layer_record *rec)
{
    for (int i = 0; i < DECISION_PART_COUNT; i++) {
        void **p = record_part(rec, i);
        free(*p);
        *p = NULL;
    }
}

bool layer_record_any(const layer_record *rec)
{
    return rec->selected || rec->experts;
}

bool layer_record_taken(const layer_record *rec, int S, int r, int i)
{
    long at = (long)r * S + i;
    if (rec->selected)
        return rec->selected[at] != 0;
    return layer_record_expert(rec, S, r, i) >= 0;
}

int layer_record_expert(const layer_record *rec, int S, int r, int i)
{
    if (!rec->experts)
        return -1;
    const int32_t *slot = rec->experts + ((long)r * S + i) * rec->top_k;
    for (int k = 0; k < rec->top_k; k++)
        if (slot[k] >= 0 && slot[k] < rec->n_experts)
            return slot[k];
    return -1;
}

static const char *last_component(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A fingerprint without its paths: "PATH: bytes N fnv1a64 H (whole); ...;
 * tokenizer PATH: bytes ..." as the parts after each path, in order.  The
 * difficulty scores of a mixed run ("; difficulty PATH: ...") are left out:
 * they choose which windows train, not what the losses are over (a mixed
 * run and a uniform one on one corpus are compared, as are two data seeds). */
static void fingerprint_bytes(const char *fp, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (const char *p = fp; p && *p;) {
        const char *end = strstr(p, "; ");
        if (!strncmp(p, DATA_FP_DIFFICULTY, strlen(DATA_FP_DIFFICULTY))) {
            p = end ? end + 2 : NULL;
            continue;
        }
        const char *colon = strstr(p, ": ");
        if (colon && (!end || colon < end))
            p = colon + 2;
        int n = end ? (int)(end - p) : (int)strlen(p);
        if (at < len)
            at += (size_t)snprintf(out + at, len - at, "%s%.*s", at ? "; " : "", n, p);
        p = end ? end + 2 : NULL;
    }
}

bool run_data_differs(const run_config *a, const char *fa, const run_config *b, const char *fb,
                      char *what, int len)
{
    const struct {
        const char *key, *x, *y;
    } paths[] = { { "data.source", a->source, b->source },
                  { "data.val_source", a->val_source, b->val_source },
                  { "data.tokenizer", a->tokenizer, b->tokenizer } };
    if (a->vocab != b->vocab) { /* first: nats per token of other units */
        snprintf(what, (size_t)len, "data.vocab is %d against %d", a->vocab, b->vocab);
        return true;
    }
    if (fa && fb) { /* the bytes themselves, wherever the files were */
        char x[1024], y[1024];
        fingerprint_bytes(fa, x, sizeof(x));
        fingerprint_bytes(fb, y, sizeof(y));
        if (strcmp(x, y)) {
            snprintf(what, (size_t)len, "their data differ (provenance/data: %s against %s)",
                     fa, fb);
            return true;
        }
    }
    for (size_t i = 0; !(fa && fb) && i < sizeof(paths) / sizeof(paths[0]); i++)
        if (strcmp(last_component(paths[i].x), last_component(paths[i].y))) {
            snprintf(what, (size_t)len, "%s is %s against %s", paths[i].key, paths[i].x,
                     paths[i].y);
            return true;
        }
    if (a->val_fraction != b->val_fraction && !strcmp(a->val_source, "none")) {
        snprintf(what, (size_t)len, "data.val_fraction is %g against %g (other held-out "
                 "windows)", a->val_fraction, b->val_fraction);
        return true;
    }
    return false;
}
