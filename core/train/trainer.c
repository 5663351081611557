#include "core/train/trainer.h"

#include "core/comm/comm.h"
#include "core/io/checkpoint.h"
#include "core/io/runfile.h"
#include "core/kernels/matmul.h"
#include "core/train/optim.h"
#include "core/train/shard.h"
#include "core/util/pool.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

long config_planned_steps(const run_config *c, double train_flops_per_step)
{
    if (c->flops_budget > 0.0)
        return (long)floor(c->flops_budget / train_flops_per_step);
    return c->steps;
}

void run_paths(const run_config *c, char *dir, char *run_h5, char *ckpt_h5, size_t len)
{
    snprintf(dir, len, "%s/%s", c->out, c->name);
    snprintf(run_h5, len, "%s/%s/run.h5", c->out, c->name);
    snprintf(ckpt_h5, len, "%s/%s/ckpt.h5", c->out, c->name);
}

long eval_window_index(long i, long n, long avail)
{
    return n >= avail ? i : (long)((double)i * (double)avail / (double)n);
}

static int agree_msg(mode_ctx *ctx, int rc, char *err, int err_len);

int evaluate(model *m, mode_ctx *ctx, const dataset *d, long n_windows, fwd_mode mode,
             eval_result *out, char *err, int err_len)
{
    int S = m->dims.seq_len, P = ctx ? ctx->size : 1, rank = ctx ? ctx->rank : 0;
    long avail = dataset_eval_windows(d, S);
    long n = (n_windows <= 0 || n_windows > avail) ? avail : n_windows;
    out->local_failure = false;
    token_t *tok = malloc((size_t)m->max_seq * (size_t)(S + 1) * sizeof(token_t));
    double *seq_ce = malloc((size_t)m->max_seq * sizeof(double));
    int rc = tok && seq_ce ? 0 : -ENOMEM;
    if (rc)
        snprintf(err, (size_t)err_len, "evaluation: out of memory");
    /* sums over windows of the mean loss and of its square: the mean and
     * the spread of the per-window losses */
    double sums[2] = { 0.0, 0.0 };
    /* rank r takes the list's entries r, r+P, ...; in chunks of the model's
     * batch.  Every rank runs the same number of forwards of the same size
     * (layers may talk to other ranks), padding with window 0 that does not
     * count. */
    long per_rank = (n + P - 1) / P;
    for (long i0 = 0; i0 < per_rank; i0 += m->max_seq) {
        int cnt = (int)(per_rank - i0 < m->max_seq ? per_rank - i0 : m->max_seq), real = 0;
        for (int i = 0; i < cnt && !rc; i++) {
            long k = rank + (i0 + i) * P;
            real += k < n;
            rc = dataset_eval_window(d, tok + (size_t)i * (S + 1), S,
                                     k < n ? eval_window_index(k, n, avail) : 0, err, err_len);
        }
        /* a bad token on any rank: every rank stops at this chunk, before
         * its forward, with that rank's message */
        if (ctx && (rc = agree_msg(ctx, rc, err, err_len)))
            break;
        if (rc)
            break;
        batch b = { .tokens = tok, .nseq = cnt, .step = 0, .seq0 = rank + i0 * P,
                    .global_seqs = (int)n, .n_counted = real > 0 ? real : -1,
                    .seq_ce = seq_ce };
        fwd_result r;
        if ((rc = model_forward(m, ctx, &b, mode, &r))) {
            snprintf(err, (size_t)err_len, "evaluation: forward failed (%s)", strerror(-rc));
            out->local_failure = true;
            break;
        }
        for (int i = 0; i < real; i++) {
            double l = seq_ce[i] / S;
            sums[0] += l;
            sums[1] += l * l;
        }
    }
    free(tok);
    free(seq_ce);
    if (rc)
        return rc;
    rc = comm_fault(ctx ? ctx->comm : NULL, "eval");
    if (!rc)
        rc = comm_allreduce_sum_double(ctx ? ctx->comm : NULL, sums, 2);
    if (rc) {
        snprintf(err, (size_t)err_len, "evaluation: its all-reduce failed (%s)", strerror(-rc));
        out->local_failure = true;
        return rc;
    }
    double mean = n > 0 ? sums[0] / (double)n : (double)NAN;
    double var = n > 1 ? (sums[1] - (double)n * mean * mean) / (double)(n - 1) : (double)NAN;
    out->loss = mean;
    out->se = n > 1 ? sqrt(var > 0.0 ? var : 0.0) / sqrt((double)n) : (double)NAN;
    out->windows = n;
    return 0;
}

/* An agreement point (docs/robustness.md): every rank learns whether any
 * rank failed, and ends with the message of the lowest failing rank, so the
 * program prints one line from rank 0 and nobody hangs. */
static int agree_msg(mode_ctx *ctx, int rc, char *err, int err_len)
{
    return comm_agree(ctx->comm, rc, err, err_len);
}

static int make_dirs(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(buf, 0777) && errno != EEXIST)
        return -errno;
    return 0;
}

/* Fail before training when the output folder cannot take our files. */
static int check_writable(const char *dir, char *err, int err_len)
{
    int rc = make_dirs(dir);
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: cannot create the output folder: %s", dir,
                 strerror(-rc));
        return rc;
    }
    char probe[4200];
    snprintf(probe, sizeof(probe), "%s/.write-probe", dir);
    FILE *f = fopen(probe, "w");
    if (!f || fputs("ok\n", f) < 0 || fclose(f)) {
        snprintf(err, (size_t)err_len, "%s: output folder is not writable", dir);
        return -EACCES;
    }
    remove(probe);
    return 0;
}

/* Per-step statistics of the layers whose kind has them: one table each. */
typedef struct layer_stats {
    int n_sums;       /* raw sums of all layers, concatenated */
    int *sums;        /* [n_layers] the raw sums of each layer */
    int *cols;        /* [n_layers] its columns (0: no statistics) */
    int *table;       /* [n_layers] its table in rec->extra (rank 0), -1 without */
    int max_cols;
} layer_stats;

/* The held-out windows whose routing decisions are recorded. */
typedef struct routing_windows {
    int n;            /* windows (0: no routing records) */
    long *index;      /* [n] their indices in the held-out split */
    token_t *tokens;  /* [n][S+1] */
} routing_windows;

typedef struct trainer {
    const run_config *cfg;
    mode_ctx *ctx;
    model *m;
    shard_plan *shard; /* which gradients are summed and updated where */
    dataset *d;
    run_record *rec;   /* rank 0: the rows and records not yet written */
    char *ini;
    char dir[4096], run_h5[4096], ckpt_h5[4096];
    long total, start;
    double flops_per_seq;
    layer_stats st;
    routing_windows rw;
    double wall0, skipped; /* the run's clock (continued over resumes) and skipped steps */
} trainer;

/* Whether the folder may take this run, before anything is created: a run
 * there (run.h5, ckpt.h5 or pieces) is refused unless it is resumed or
 * overwritten, and a resume needs its checkpoint. */
static int check_folder(const trainer *t, const trainer_opts *o, char *err, int err_len)
{
    struct stat st;
    char records[4200];
    snprintf(records, sizeof(records), "%s/records", t->dir);
    bool ckpt = !stat(t->ckpt_h5, &st), run = !stat(t->run_h5, &st) || !stat(records, &st);
    if (o->resume && !ckpt) {
        snprintf(err, (size_t)err_len, "%s: no checkpoint to resume (%s is missing): start "
                 "the run without --resume", t->dir, t->ckpt_h5);
        return -ENOENT;
    }
    if (!o->resume && !o->overwrite && (ckpt || run)) {
        snprintf(err, (size_t)err_len, "%s holds a run (%s%s%s): --resume continues it, "
                 "--overwrite replaces it, or choose another run.name or run.out", t->dir,
                 run ? "run.h5" : "", run && ckpt ? ", " : "", ckpt ? "ckpt.h5" : "");
        return -EEXIST;
    }
    return 0;
}

/* --overwrite, once every check has passed: the earlier run's files go, so
 * that nothing of it can be resumed into the new one. */
static int clear_folder(const trainer *t)
{
    if (remove(t->ckpt_h5) && errno != ENOENT)
        return -errno;
    if (remove(t->run_h5) && errno != ENOENT)
        return -errno;
    return run_record_remove_pieces(t->run_h5);
}


static int setup_stat_tables(trainer *t)
{
    int L = t->m->dims.n_layers;
    layer_stats *st = &t->st;
    st->sums = calloc((size_t)L, sizeof(int));
    st->cols = calloc((size_t)L, sizeof(int));
    st->table = malloc((size_t)L * sizeof(int));
    if (!st->sums || !st->cols || !st->table)
        return -ENOMEM;
    for (int l = 0; l < L; l++) {
        const layer *ly = &t->m->layers[l];
        st->table[l] = -1;
        if (!ly->kind->stat_count)
            continue;
        int nc = ly->kind->stat_count(ly, &st->sums[l]);
        st->cols[l] = nc;
        st->n_sums += st->sums[l];
        st->max_cols = nc > st->max_cols ? nc : st->max_cols;
        if (!t->rec)
            continue;
        /* "step" then the kind's names */
        char (*names)[RUN_COL_LEN] = malloc((size_t)(nc + 1) * sizeof(*names));
        const char **cols = malloc((size_t)(nc + 1) * sizeof(char *));
        int rc = names && cols ? 0 : -ENOMEM;
        for (int c = 0; !rc && c <= nc; c++) {
            if (c == 0)
                snprintf(names[c], RUN_COL_LEN, "step");
            else
                ly->kind->stat_name(ly, c - 1, names[c], RUN_COL_LEN);
            cols[c] = names[c];
        }
        char group[32];
        snprintf(group, sizeof(group), "layer_stats/%d", l);
        if (!rc)
            rc = st->table[l] = run_record_add_table(t->rec, group, cols, nc + 1);
        free(names);
        free(cols);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void free_layer_stats(layer_stats *st)
{
    free(st->sums);
    free(st->cols);
    free(st->table);
    memset(st, 0, sizeof(*st));
}

/* After a training step: sum every layer's statistics over the ranks and
 * append one row per layer (rank 0).  Collective. */
static int record_stats(trainer *t, long done)
{
    layer_stats *st = &t->st;
    if (!st->n_sums)
        return 0;
    int L = t->m->dims.n_layers, off = 0;
    double *all = malloc((size_t)(st->n_sums + st->max_cols + 1) * sizeof(double));
    if (!all)
        return -ENOMEM;
    double *row = all + st->n_sums;
    for (int l = 0; l < L; l++) {
        const layer *ly = &t->m->layers[l];
        if (st->cols[l]) {
            ly->kind->stat_sums(ly, all + off);
            off += st->sums[l];
        }
    }
    int rc = comm_fault(t->ctx->comm, "stats");
    if (!rc)
        rc = comm_allreduce_sum_double(t->ctx->comm, all, st->n_sums);
    off = 0;
    for (int l = 0; !rc && l < L; l++) {
        const layer *ly = &t->m->layers[l];
        if (!st->cols[l])
            continue;
        if (t->rec) {
            row[0] = (double)done;
            ly->kind->stat_columns(ly, all + off, row + 1);
            rc = run_table_append(&t->rec->extra[st->table[l]], row);
        }
        off += st->sums[l];
    }
    free(all);
    return rc;
}

/* A record sink that concatenates each array over the chunks of windows
 * that go through the model one batch at a time (dimension 0 is the
 * window), keyed by the layer's prefix and the array's name. */
typedef struct concat_part {
    char path[160];
    int type, ndim;
    unsigned long long dims[4];
    size_t row_bytes;
    char *data;
} concat_part;

typedef struct concat_sink {
    record_sink sink;
    char prefix[96];
    int n, cap;
    concat_part *part;
    int rc;
} concat_sink;

static size_t record_elem(int type)
{
    return type == RECORD_UINT8 ? 1 : 4;
}

static int concat_put(record_sink *s, const char *name, int type, int ndim,
                      const unsigned long long *dims, const void *data)
{
    concat_sink *c = (concat_sink *)s;
    char path[160];
    snprintf(path, sizeof(path), "%s/%s", c->prefix, name);
    size_t row = record_elem(type);
    for (int i = 1; i < ndim; i++)
        row *= (size_t)dims[i];
    concat_part *p = NULL;
    for (int i = 0; i < c->n && !p; i++)
        if (!strcmp(c->part[i].path, path))
            p = &c->part[i];
    if (!p) {
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 16;
            concat_part *q = realloc(c->part, (size_t)cap * sizeof(concat_part));
            if (!q)
                return c->rc = -ENOMEM;
            c->part = q;
            c->cap = cap;
        }
        p = &c->part[c->n++];
        memset(p, 0, sizeof(*p));
        snprintf(p->path, sizeof(p->path), "%s", path);
        p->type = type;
        p->ndim = ndim;
        memcpy(p->dims, dims, (size_t)ndim * sizeof(dims[0]));
        p->dims[0] = 0;
        p->row_bytes = row;
    }
    char *grown = realloc(p->data, (size_t)(p->dims[0] + dims[0]) * row + 1);
    if (!grown)
        return c->rc = -ENOMEM;
    p->data = grown;
    memcpy(p->data + (size_t)p->dims[0] * row, data, (size_t)dims[0] * row);
    p->dims[0] += dims[0];
    return 0;
}

static void free_concat_sink(concat_sink *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->part[i].data);
    free(c->part);
    memset(c, 0, sizeof(*c));
}

/* Routing records: the recorded held-out windows through top-k forwards,
 * a batch at a time; each routed layer describes its decisions.  Every
 * rank runs the same forwards (kinds that talk across ranks work); rank 0
 * keeps the arrays.  Collective. */
static int record_routing(trainer *t, long done)
{
    int S = t->cfg->seq_len, L = t->m->dims.n_layers;
    int rc = comm_fault(t->ctx->comm, "routing");
    concat_sink cs = { .sink = { .put = concat_put } };
    token_t *tok = t->rw.tokens;
    for (int i0 = 0; !rc && i0 < t->rw.n; i0 += t->m->max_seq) {
        int cnt = t->rw.n - i0 < t->m->max_seq ? t->rw.n - i0 : t->m->max_seq;
        /* keyed by the step, so a random router's records change over
         * training; by the window's place in the list, not the rank */
        batch b = { .tokens = tok + (size_t)i0 * (S + 1), .nseq = cnt, .step = done,
                    .seq0 = i0, .global_seqs = t->rw.n };
        fwd_result r;
        rc = model_forward(t->m, t->ctx, &b, FWD_EVAL_TOPK, &r);
        fwd_args a = { .ctx = t->ctx, .dims = &t->m->dims, .nseq = cnt, .seq_len = S,
                       .mode = FWD_EVAL_TOPK };
        for (int l = 0; !rc && l < L; l++) {
            const layer *ly = &t->m->layers[l];
            if (!ly->kind->record)
                continue;
            snprintf(cs.prefix, sizeof(cs.prefix), "routing/step_%06ld/layer_%d", done, l);
            rc = ly->kind->record(ly, &a, &cs.sink);
            rc = rc ? rc : cs.rc;
        }
    }
    for (int i = 0; !rc && t->rec && i < cs.n; i++) {
        const concat_part *p = &cs.part[i];
        rc = run_record_add_blob(t->rec, p->path, p->type, p->ndim, p->dims, p->data, done);
    }
    free_concat_sink(&cs);
    return rc;
}

/* The recorded held-out windows: run.routing_windows of them spread evenly
 * over the held-out split (the same whatever the rank count), with their
 * tokens, labels (where the source has them) and indices stored once in
 * the run file's fixed part. */
static int setup_routing_windows(trainer *t, char *err, int err_len)
{
    int S = t->cfg->seq_len, L = t->m->dims.n_layers;
    bool any = false;
    for (int l = 0; l < L; l++)
        any |= t->m->layers[l].kind->record != NULL;
    long avail = dataset_eval_windows(t->d, S);
    long n = t->cfg->routing_windows < avail ? t->cfg->routing_windows : avail;
    if (!any || t->cfg->routing_every <= 0 || n <= 0)
        return 0;
    routing_windows *rw = &t->rw;
    rw->n = (int)n;
    rw->index = malloc((size_t)n * sizeof(long));
    rw->tokens = malloc((size_t)n * (S + 1) * sizeof(token_t));
    int32_t *tok = malloc((size_t)n * (S + 1) * sizeof(int32_t));
    uint8_t *lab = malloc((size_t)n * (S + 1));
    int rc = rw->index && rw->tokens && tok && lab ? 0 : -ENOMEM;
    bool labels = dataset_eval_labels(t->d, S, 0) != NULL;
    for (long i = 0; !rc && i < n; i++) {
        rw->index[i] = eval_window_index(i, n, avail);
        rc = dataset_eval_window(t->d, rw->tokens + (size_t)i * (S + 1), S, rw->index[i], err,
                                 err_len);
        for (int j = 0; j <= S; j++)
            tok[(size_t)i * (S + 1) + j] = (int32_t)rw->tokens[(size_t)i * (S + 1) + j];
        if (labels)
            memcpy(lab + (size_t)i * (S + 1), dataset_eval_labels(t->d, S, rw->index[i]),
                   (size_t)S + 1);
    }
    unsigned long long dims[2] = { (unsigned long long)n, (unsigned long long)S + 1 };
    if (!rc && t->rec) {
        rc = run_record_add_blob(t->rec, "routing/tokens", RUN_BLOB_INT32, 2, dims, tok, 0);
        if (!rc)
            rc = run_record_add_blob(t->rec, "routing/windows", RUN_BLOB_INT64, 1, dims,
                                     rw->index, 0);
        if (!rc && labels)
            rc = run_record_add_blob(t->rec, "routing/labels", RUN_BLOB_UINT8, 2, dims, lab, 0);
    }
    free(tok);
    free(lab);
    return rc;
}

/* What the model is, for analysis that must not build it: parameters (all
 * of them, and per layer) and nominal forward FLOPs per sequence (per layer,
 * then the head), MODEL.md's counts, in the run file's fixed part. */
static int record_model(trainer *t)
{
    if (!t->rec)
        return 0;
    const model *m = t->m;
    int L = m->dims.n_layers;
    int64_t *lp = calloc((size_t)L + 1, sizeof(int64_t));
    double *fl = malloc(((size_t)L + 2) * sizeof(double));
    int rc = lp && fl ? 0 : -ENOMEM;
    int64_t total = 0;
    for (int i = 0; !rc && i < m->n_tensors; i++) { /* whole tensors: every expert */
        long n = tensor_numel(&m->tensors[i].desc);
        total += n;
        if (m->tensors[i].layer >= 0)
            lp[m->tensors[i].layer] += n;
    }
    if (!rc) {
        double all = model_flops_per_seq(m, fl); /* fl[0..L): the layers */
        fl[L] = model_head_flops_per_seq(&m->dims);
        fl[L + 1] = 3.0 * all * t->cfg->batch;
    }
    unsigned long long one = 1, nl = (unsigned long long)L, nf = (unsigned long long)L + 1;
    if (!rc)
        rc = run_record_add_blob(t->rec, "model/parameters", RUN_BLOB_INT64, 1, &one, &total, 0);
    if (!rc)
        rc = run_record_add_blob(t->rec, "model/layer_parameters", RUN_BLOB_INT64, 1, &nl, lp, 0);
    if (!rc)
        rc = run_record_add_blob(t->rec, "model/forward_flops", RUN_BLOB_DOUBLE, 1, &nf, fl, 0);
    if (!rc)
        rc = run_record_add_blob(t->rec, "model/train_flops_per_step", RUN_BLOB_DOUBLE, 1, &one,
                                 &fl[L + 1], 0);
    free(lp);
    free(fl);
    return rc;
}

static void free_routing_windows(routing_windows *rw)
{
    free(rw->index);
    free(rw->tokens);
    memset(rw, 0, sizeof(*rw));
}

/* A checkpoint: the run file's new rows first, so that a crash between the
 * two leaves records newer than the checkpoint, never older, which resume
 * drops; the last one also gathers the run file into one.  Collective:
 * every rank reaches the agreement at the end. */
static int save_all(trainer *t, long step, bool last, char *err, int err_len)
{
    mode_ctx *ctx = t->ctx;
    int rc = 0;
    if (ctx->rank == 0 && (rc = comm_fault(ctx->comm, "runfile")))
        snprintf(err, (size_t)err_len, "%s: writing the run file's piece failed (injected)",
                 t->run_h5);
    else if (ctx->rank == 0)
        rc = run_record_flush(t->rec, t->run_h5, step, err, err_len);
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        return rc;
    /* every rank writes its share: its experts, some shared tensors */
    if ((rc = checkpoint_save(t->ckpt_h5, t->m, t->ini, step, t->cfg->seed, ctx->comm, err,
                              err_len)))
        return rc;
    if (last && ctx->rank == 0)
        rc = run_record_finish(t->run_h5, err, err_len);
    return agree_msg(ctx, rc, err, err_len);
}

/* The keys whose values differ between two resolved configs (INI text as
 * config_to_ini writes it), as "section.key (a -> b)" in buf. */
static void config_differences(const char *a, const char *b, char *buf, size_t len)
{
    size_t w = 0;
    buf[0] = '\0';
    const char *texts[2] = { a, b };
    /* every "key = value" line of a under its section, looked up in b, and
     * the lines of b that a lacks */
    for (int pass = 0; pass < 2; pass++) {
        const char *x = texts[pass], *y = texts[1 - pass];
        char sec[64] = "";
        for (const char *p = x; *p;) {
            const char *e = strchr(p, '\n');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            char line[1200];
            snprintf(line, sizeof(line), "%.*s", (int)(l < sizeof(line) - 1 ? l : sizeof(line) - 1),
                     p);
            p += l + (e ? 1 : 0);
            if (line[0] == '[') {
                snprintf(sec, sizeof(sec), "%.*s", (int)strcspn(line + 1, "]"), line + 1);
                continue;
            }
            char *eq = strstr(line, " = ");
            if (!eq)
                continue;
            *eq = '\0';
            const char *val = eq + 3;
            /* the same key's value in y */
            char ysec[64] = "", yval[1200] = "";
            bool found = false;
            for (const char *q = y; *q && !found;) {
                const char *f = strchr(q, '\n');
                size_t m = f ? (size_t)(f - q) : strlen(q);
                char yl[1200];
                snprintf(yl, sizeof(yl), "%.*s", (int)(m < sizeof(yl) - 1 ? m : sizeof(yl) - 1), q);
                q += m + (f ? 1 : 0);
                if (yl[0] == '[') {
                    snprintf(ysec, sizeof(ysec), "%.*s", (int)strcspn(yl + 1, "]"), yl + 1);
                    continue;
                }
                char *yeq = strstr(yl, " = ");
                if (yeq && !strcmp(ysec, sec) && (size_t)(yeq - yl) == strlen(line) &&
                    !strncmp(yl, line, strlen(line))) {
                    found = true;
                    snprintf(yval, sizeof(yval), "%s", yeq + 3);
                }
            }
            if ((found && pass == 1) || (found && !strcmp(val, yval)))
                continue;
            int k = snprintf(buf + w, len - w, "%s%s.%s (%s -> %s)", w ? ", " : "", sec, line,
                             pass == 0 ? val : "unset", pass == 0 ? (found ? yval : "unset") : val);
            if (k < 0 || (size_t)k >= len - w)
                return;
            w += (size_t)k;
        }
    }
}

static int resume_from(trainer *t, char *err, int err_len)
{
    ckpt_meta meta;
    int rc = checkpoint_read_meta(t->ckpt_h5, &meta, t->ctx->comm, err, err_len);
    if (rc)
        return rc;
    if (strcmp(meta.config, t->ini) != 0) {
        char diff[700];
        config_differences(meta.config, t->ini, diff, sizeof(diff));
        snprintf(err, (size_t)err_len,
                 "%s: its config does not match this run's (resume needs the same resolved "
                 "config); differing keys, checkpoint -> now: %s", t->ckpt_h5,
                 diff[0] ? diff : "(none found: compare `h5dump -a config`)");
        ckpt_meta_clear(&meta);
        return -EINVAL;
    }
    t->start = meta.step;
    ckpt_meta_clear(&meta);
    /* the experts this rank holds now, whatever rank count wrote the file */
    if ((rc = checkpoint_load(t->ckpt_h5, t->m, true, t->ctx->comm, err, err_len)))
        return rc;
    if (t->rec) {
        /* drop what a crash or a stop left past the checkpoint; the clock
         * and the skip count go on from the last row kept */
        rc = run_record_rewind(t->run_h5, t->start, err, err_len);
        run_reader *rd = NULL;
        if (!rc && !(rc = open_run_reader(&rd, t->run_h5, err, err_len))) {
            double *v = NULL;
            long n = 0;
            if (!run_reader_column(rd, "metrics/wall_s", &v, &n) && n > 0)
                t->wall0 -= v[n - 1];
            free(v);
            if (!run_reader_column(rd, "metrics/skipped", &v, &n) && n > 0)
                t->skipped = v[n - 1];
            free(v);
            close_run_reader(&rd);
        }
    }
    return rc;
}

static int sample_batch(const trainer *t, token_t *tok, int local, long step, long seq0,
                        char *err, int err_len)
{
    int S = t->cfg->seq_len, rc = 0;
    for (int i = 0; i < local && !rc; i++)
        rc = dataset_sample(t->d, tok + (size_t)i * (S + 1), S, t->cfg->data_seed, step,
                            seq0 + i, err, err_len);
    return rc;
}

/* "step N: " before the message already in err. */
static void prefix_step(char *err, int err_len, long step)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", err);
    snprintf(err, (size_t)err_len, "step %ld: %s", step, msg);
}

/* SIGINT and SIGTERM ask for a checkpoint and a clean stop at the end of the
 * current step.  A signal handler can only set a flag: this is the one
 * static variable of the library. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

int train_stop_signal(void)
{
    return stop_signal;
}

/* A testing aid (docs/robustness.md): MODE_FAULT=nan@STEP puts a NaN into a
 * gradient at that step; MODE_FAULT=error@RANK:STEP makes that rank fail. */
static int injected_fault(const mode_ctx *ctx, long done, model *m)
{
    const char *f = getenv("MODE_FAULT");
    long step = -1, rank = -1;
    if (!f)
        return 0;
    if (sscanf(f, "nan@%ld", &step) == 1 && step == done) {
        m->grads[m->tensors[m->n_tensors / 2].offset] = NAN;
        return 0;
    }
    if (sscanf(f, "error@%ld:%ld", &rank, &step) == 2 && rank == ctx->rank && step == done)
        return -EIO;
    return 0;
}

/* The global batch of a step as rank 0 can rebuild it (samples are keyed
 * by step and sequence), stored with the run so a bad step can be replayed. */
static int record_batch(trainer *t, long done, const char *group)
{
    if (!t->rec)
        return 0;
    int S = t->cfg->seq_len, B = t->cfg->batch;
    int32_t *tok = malloc((size_t)B * (S + 1) * sizeof(int32_t));
    int32_t *off = malloc((size_t)B * sizeof(int32_t));
    token_t *row = malloc((size_t)(S + 1) * sizeof(token_t));
    int rc = tok && off && row ? 0 : -ENOMEM;
    char why[512]; /* cannot happen: every rank read its sequences of this batch already */
    for (int i = 0; !rc && i < B; i++) {
        rc = dataset_sample(t->d, row, S, t->cfg->data_seed, done - 1, i, why, sizeof(why));
        off[i] = (int32_t)dataset_sample_offset(t->d, S, t->cfg->data_seed, done - 1, i);
        for (int j = 0; j <= S; j++)
            tok[(size_t)i * (S + 1) + j] = (int32_t)row[j];
    }
    char path[96];
    unsigned long long dims[2] = { (unsigned long long)B, (unsigned long long)S + 1 };
    snprintf(path, sizeof(path), "%s/step_%06ld/tokens", group, done);
    if (!rc)
        rc = run_record_add_blob(t->rec, path, RUN_BLOB_INT32, 2, dims, tok, done);
    snprintf(path, sizeof(path), "%s/step_%06ld/offsets", group, done);
    if (!rc)
        rc = run_record_add_blob(t->rec, path, RUN_BLOB_INT32, 1, dims, off, done);
    free(tok);
    free(off);
    free(row);
    return rc;
}

/* Name what went non-finite first: a layer's output in the forward pass
 * (on any rank), else the first gradient tensor.  Collective. */
static void describe_nonfinite(trainer *t, int local, char *buf, size_t len)
{
    int L = t->m->dims.n_layers, first = model_first_nonfinite_activation(t->m, local);
    first = first ? first : L + 2;
    comm_allreduce_min_int(t->ctx->comm, &first);
    /* an expert's gradient lives on its own rank only: agree on the first */
    const model_tensor *g = model_first_nonfinite_grad(t->m);
    int gi = g ? (int)(g - t->m->tensors) : t->m->n_tensors;
    comm_allreduce_min_int(t->ctx->comm, &gi);
    g = gi < t->m->n_tensors ? &t->m->tensors[gi] : NULL;
    if (first <= L)
        snprintf(buf, len, "the output of layer %d (%s) in the forward pass", first - 1,
                 t->m->layers[first - 1].kind->name);
    else if (first == L + 1)
        snprintf(buf, len, "the logits");
    else if (g)
        snprintf(buf, len, "the gradient of %s", g->path);
    else
        snprintf(buf, len, "the loss");
}

/* Both held-out evaluations (collective); their row in the record. */
static int evaluate_both(trainer *t, long done, long windows, train_log *lg, char *err,
                         int err_len, bool *local)
{
    eval_result topk, causal = { 0 };
    int rc = evaluate(t->m, t->ctx, t->d, windows, FWD_EVAL_TOPK, &topk, err, err_len);
    if (!rc)
        rc = evaluate(t->m, t->ctx, t->d, windows, FWD_EVAL_CAUSAL, &causal, err, err_len);
    if (rc) {
        *local = topk.local_failure || causal.local_failure;
        return rc;
    }
    lg->has_eval = true;
    lg->eval_topk = topk.loss;
    lg->eval_causal = causal.loss;
    lg->eval_se = topk.se;
    lg->eval_windows = topk.windows;
    if (!t->rec)
        return 0;
    double row[] = { (double)done, topk.loss, causal.loss, topk.se, causal.se,
                     (double)topk.windows };
    return run_table_append(&t->rec->eval, row);
}

/* A failure where other ranks may wait in a collective this rank will not
 * reach (inside forward and backward, statistics, routing records,
 * evaluation: docs/robustness.md).  With one rank the error goes up as any
 * other; with several, this rank ends the job through o->fatal. */
static int fail_in_step(trainer *t, const trainer_opts *o, long done, int rc, const char *what,
                        char *err, int err_len)
{
    snprintf(err, (size_t)err_len, "step %ld: %s failed (%s)", done, what, strerror(-rc));
    if (t->ctx->size > 1 && o->fatal) {
        char msg[2400];
        snprintf(msg, sizeof(msg), "rank %d: %.1000s; stopping every rank (the checkpoint "
                 "%.1000s is whole)", t->ctx->rank, err, t->ckpt_h5);
        o->fatal(t->ctx, msg);
    }
    return rc;
}

static int train_steps(trainer *t, const trainer_opts *o, char *err, int err_len)
{
    const run_config *c = t->cfg;
    mode_ctx *ctx = t->ctx;
    model *m = t->m;
    int S = c->seq_len, P = ctx->size, local = c->batch / P;
    long seq0 = (long)ctx->rank * local;
    bool skip_bad = !strcmp(c->nonfinite, "skip");
    optim_cfg oc = c->optim;
    oc.total_steps = t->total;
    token_t *tok = malloc((size_t)local * (S + 1) * sizeof(token_t));
    if (!tok)
        return -ENOMEM;
    comm_bcast(ctx->comm, &t->skipped, sizeof(t->skipped), 0);
    comm_bcast(ctx->comm, &t->wall0, sizeof(t->wall0), 0);
    double train_flops_step = 3.0 * t->flops_per_seq * c->batch;
    int rc = 0;
    for (long step = t->start; step < t->total && !rc; step++) {
        long done = step + 1;
        double t0 = mode_now(), comm0 = ctx->timers[PHASE_COMM];
        comm_reset_bytes(ctx->comm);
        comm_set_step(ctx->comm, done);
        /* a token >= V on any rank stops every rank before the forward */
        rc = sample_batch(t, tok, local, step, seq0, err, err_len);
        if (rc)
            prefix_step(err, err_len, done);
        if ((rc = agree_msg(ctx, rc, err, err_len)))
            break;
        batch b = { .tokens = tok, .nseq = local, .step = step, .seq0 = seq0,
                    .global_seqs = c->batch };
        fwd_result r;
        model_zero_grad(m);
        rc = model_forward(m, ctx, &b, FWD_TRAIN, &r);
        if (!rc)
            rc = model_backward(m, ctx, &b);
        if (rc) {
            fail_in_step(t, o, done, rc, "forward/backward", err, err_len);
            break;
        }
        /* a failure at a point every rank reaches: agreed */
        if ((rc = injected_fault(ctx, done, m)))
            snprintf(err, (size_t)err_len, "step %ld: forward/backward failed (%s)", done,
                     strerror(-rc));
        if ((rc = agree_msg(ctx, rc, err, err_len)))
            break;
        double tc = mode_now(), comm_layers = ctx->timers[PHASE_COMM] - comm0;
        double sums[4] = { r.ce_sum, r.aux_loss, r.side_loss, r.flops_executed };
        rc = comm_fault(ctx->comm, "grad-allreduce");
        if (!rc)
            rc = shard_reduce_grads(t->shard, ctx, m);
        if (!rc)
            rc = comm_allreduce_sum_double(ctx->comm, sums, 4);
        mode_time_add(ctx, PHASE_COMM, tc);
        double t_allreduce = ctx->timers[PHASE_COMM] - comm0 - comm_layers;
        /* all communication of the step: the experts' all-to-alls inside the
         * layers and the gradient all-reduce; compute is the rest of forward
         * and backward */
        double comm_s = comm_layers + t_allreduce, compute = tc - t0 - comm_layers;
        if (rc) {
            fail_in_step(t, o, done, rc, "the gradient all-reduce", err, err_len);
            break;
        }
        double ce = sums[0] / ((double)c->batch * S), loss = ce + sums[1];
        double norm = 0.0, lr = lr_at(&oc, step);
        if ((rc = shard_grad_norm(t->shard, ctx, m, &norm))) {
            fail_in_step(t, o, done, rc, "the gradient norm's all-reduce", err, err_len);
            break;
        }
        bool bad = !isfinite(loss) || !isfinite(norm);
        if (bad) {
            /* every rank sees the same summed loss and gradients */
            char what[160];
            describe_nonfinite(t, local, what, sizeof(what));
            /* rank 0 records the batch: agreed, so that every rank stops or
             * goes on together under either policy */
            rc = record_batch(t, done, "nonfinite");
            if (rc)
                snprintf(err, (size_t)err_len, "step %ld: recording the non-finite batch failed "
                         "(%s)", done, strerror(-rc));
            if ((rc = agree_msg(ctx, rc, err, err_len)))
                break;
            if (!skip_bad) {
                char piece[4200];
                run_record_piece_path(piece, sizeof(piece), t->run_h5, done);
                snprintf(err, (size_t)err_len,
                         "step %ld: non-finite %s (loss %g, gradient norm %g), first in %s; the "
                         "batch is in %.1000s under /nonfinite, the last good checkpoint is kept",
                         done, isfinite(loss) ? "gradient" : "loss", loss, norm, what, piece);
                if (t->rec)
                    run_record_flush(t->rec, t->run_h5, done, what, sizeof(what));
                rc = -ERANGE;
                break;
            }
            t->skipped += 1.0; /* [run] nonfinite = skip: no update this step */
        } else {
            double to = mode_now();
            clip_grad_norm(m->grads, m->n_params, norm, oc.clip);
            shard_adamw(t->shard, ctx, m, &oc, step + 1, lr);
            mode_time_add(ctx, PHASE_OPTIMIZER, to);
        }
        double dt = mode_now() - t0, wall = mode_now() - t->wall0;
        train_log lg = {
            .step = done, .total = t->total, .loss = loss, .ce = ce, .aux = sums[1],
            .side = sums[2], .lr = lr, .grad_norm = norm,
            .tokens_per_s = (double)c->batch * S / dt, .gflops = train_flops_step / dt * 1e-9,
            .eta_s = dt * (double)(t->total - done), .wall_s = wall,
        };
        /* From here every rank runs every collective of the step whatever
         * failed locally (a rank-0 record, say): failures are agreed at its
         * end, so no rank waits in a collective that another skipped. */
        int local_rc = 0;
        if (t->rec) {
            double row[] = { (double)done, loss, ce, sums[1], sums[2], lr, norm,
                             lg.tokens_per_s, train_flops_step * (double)done,
                             3.0 * sums[3], wall, (double)comm_bytes_sent(ctx->comm), comm_s,
                             compute, t->skipped };
            local_rc = run_table_append(&t->rec->metrics, row);
        }
        int sig = stop_signal;
        comm_allreduce_max_int(ctx->comm, &sig); /* a signal on any rank stops all */
        bool stop = sig || (o->max_steps > 0 && done - t->start >= o->max_steps);
        bool last = done == t->total;
        if (!bad && (rc = record_stats(t, done))) {
            fail_in_step(t, o, done, rc, "recording statistics", err, err_len);
            break;
        }
        if (t->rw.n > 0 && (done % c->routing_every == 0 || last) &&
            (rc = record_routing(t, done))) {
            fail_in_step(t, o, done, rc, "recording routing", err, err_len);
            break;
        }
        bool eval_local = false;
        if (c->eval_every > 0 && (done % c->eval_every == 0 || last) &&
            (rc = evaluate_both(t, done, last ? c->final_eval_windows : c->eval_windows, &lg,
                                err, err_len, &eval_local))) {
            if (eval_local) /* the other ranks may wait in the forward's collectives */
                fail_in_step(t, o, done, rc, "evaluation", err, err_len);
            else /* agreed by every rank (a bad token in a window) */
                prefix_step(err, err_len, done);
            break;
        }
        if (local_rc) {
            rc = local_rc;
            snprintf(err, (size_t)err_len, "step %ld: recording the metrics failed (%s)", done,
                     strerror(-rc));
        }
        if ((rc = agree_msg(ctx, rc, err, err_len)))
            break;
        if (o->log && ctx->rank == 0 &&
            (lg.has_eval || last || stop || (c->log_every > 0 && done % c->log_every == 0)))
            o->log(&lg, o->log_user);
        if ((c->ckpt_every > 0 && done % c->ckpt_every == 0) || last || stop) {
            double ts = mode_now();
            rc = save_all(t, done, last, err, err_len);
            if (rc) /* agreed: the same message on every rank */
                prefix_step(err, err_len, done);
            else if (o->checkpoint && ctx->rank == 0)
                o->checkpoint(done, mode_now() - ts, o->log_user);
        }
        if (!rc && sig) {
            snprintf(err, (size_t)err_len,
                     "stopped by signal %d after step %ld; the checkpoint is written and "
                     "--resume goes on from it", sig, done);
            rc = -EINTR;
        }
        if (stop)
            break;
    }
    free(tok);
    return rc;
}

int train(const run_config *cfg, const layer_kind *const *kinds, mode_ctx *ctx,
          const trainer_opts *o, char *err, int err_len)
{
    trainer t = { .cfg = cfg, .ctx = ctx, .wall0 = mode_now() };
    model_dims dims = config_dims(cfg);
    int P = ctx->size;
    dims.ranks = P; /* the experts spread over the ranks: each holds its own */
    dims.rank = ctx->rank;
    int rc = -ENOMEM;
    /* the products' precision lives on the pool that runs them */
    thread_pool *own_pool = NULL, *caller_pool = ctx->pool;
    if (!ctx->pool && build_thread_pool(&own_pool, 1))
        return -ENOMEM;
    if (own_pool)
        ctx->pool = own_pool;
    matmul_use_bf16(ctx->pool, !strcmp(cfg->precision, "bf16"));
    ctx->seed = cfg->init_seed; /* the random router's scores */
    run_paths(cfg, t.dir, t.run_h5, t.ckpt_h5, sizeof(t.dir));
    t.ini = config_to_ini(cfg);
    if (!t.ini)
        goto fail;
    rc = load_dataset(&t.d, cfg->source, cfg->val_source, cfg->vocab, cfg->val_fraction,
                      cfg->seq_len, o->data_dir, err, err_len);
    if (!rc)
        rc = build_model(&t.m, &dims, cfg->layers, kinds, cfg->batch / P, err, err_len);
    if (!rc)
        rc = build_shard_plan(&t.shard, t.m, ctx);
    if (!rc && ctx->rank == 0)
        rc = check_folder(&t, o, err, err_len);
    if (!rc && ctx->rank == 0)
        rc = check_writable(t.dir, err, err_len);
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        goto fail;
    model_init(t.m, cfg->init_seed);
    if (o->init_from) { /* the parameters of another run; moments and step start anew */
        ckpt_meta meta;
        rc = checkpoint_read_meta(o->init_from, &meta, ctx->comm, err, err_len);
        ckpt_meta_clear(&meta);
        if (!rc)
            rc = checkpoint_load(o->init_from, t.m, false, ctx->comm, err, err_len);
        if (rc) {
            char why[900];
            snprintf(why, sizeof(why), "%s", err);
            snprintf(err, (size_t)err_len, "--init-from: %s", why);
            goto fail;
        }
    }
    t.flops_per_seq = model_flops_per_seq(t.m, NULL);
    t.total = config_planned_steps(cfg, 3.0 * t.flops_per_seq * cfg->batch);
    if (t.total <= 0) {
        snprintf(err, (size_t)err_len, "run.flops_budget %g buys no step (one costs %g)",
                 cfg->flops_budget, 3.0 * t.flops_per_seq * cfg->batch);
        rc = -EINVAL;
        goto fail;
    }
    if (ctx->rank == 0 && (rc = build_run_record(&t.rec, t.ini)))
        goto fail;
    if ((rc = agree_msg(ctx, setup_stat_tables(&t), err, err_len)))
        goto fail;
    if (o->resume)
        rc = resume_from(&t, err, err_len);
    else if (ctx->rank == 0 && (rc = clear_folder(&t))) /* --overwrite, or a stray piece */
        snprintf(err, (size_t)err_len, "%s: cannot remove the earlier run's files: %s", t.dir,
                 strerror(-rc));
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        goto fail;
    if ((rc = agree_msg(ctx, setup_routing_windows(&t, err, err_len), err, err_len)))
        goto fail;
    if (ctx->rank == 0 && t.start < t.total) {
        provenance_collect(&t.rec->prov, P, o->blas_threads, o->argc, o->argv);
        if (o->init_from)
            snprintf(t.rec->prov.init_from, sizeof(t.rec->prov.init_from), "%s", o->init_from);
        rc = record_model(&t);
        if (!rc)
            rc = run_record_write_header(t.rec, t.run_h5, err, err_len);
    }
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        goto fail;
    struct sigaction sa = { .sa_handler = on_stop_signal }, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    rc = train_steps(&t, o, err, err_len);
    /* a run that was finished already (resumed at its last step): its
     * record is gathered, if a crash came before */
    if (!rc && ctx->rank == 0 && t.start == t.total)
        rc = run_record_finish(t.run_h5, err, err_len);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
fail:
    free_routing_windows(&t.rw);
    free_layer_stats(&t.st);
    free_run_record(&t.rec);
    free_shard_plan(&t.shard);
    free_model(&t.m);
    free_dataset(&t.d);
    free(t.ini);
    matmul_use_bf16(ctx->pool, false);
    ctx->pool = caller_pool;
    free_thread_pool(&own_pool);
    return rc;
}
