#include "core/train/trainer_impl.h"

#include "core/comm/comm.h"
#include "core/io/runfile.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int setup_stat_tables(trainer *t)
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
        if (!ly->ops->stat_count)
            continue;
        int nc = ly->ops->stat_count(ly, &st->sums[l]);
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
                ly->ops->stat_name(ly, c - 1, names[c], RUN_COL_LEN);
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

void free_layer_stats(layer_stats *st)
{
    free(st->sums);
    free(st->cols);
    free(st->table);
    memset(st, 0, sizeof(*st));
}

int record_row(trainer *t, run_table *tab, const double *row)
{
    int rc = run_table_append(tab, row);
    for (int c = 1; !rc && t->tb && c < tab->n_cols; c++) {
        char tag[sizeof(tab->group) + RUN_COL_LEN + 2];
        snprintf(tag, sizeof(tag), "%s/%s", tab->group, tab->cols[c]);
        rc = tfevents_add(t->tb, tag, row[c]);
    }
    return rc;
}

/* After a training step: sum every layer's statistics over the ranks and
 * append one row per layer (rank 0).  Collective. */
int record_stats(trainer *t, long done)
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
            ly->ops->stat_sums(ly, all + off);
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
            ly->ops->stat_columns(ly, all + off, row + 1);
            rc = record_row(t, &t->rec->extra[st->table[l]], row);
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
int record_routing(trainer *t, long done)
{
    int S = t->cfg->seq_len, L = t->m->dims.n_layers;
    int rc = comm_fault(t->ctx->comm, "routing");
    concat_sink cs = { .sink = { .put = concat_put } };
    token_t *tok = t->rw.tokens;
    for (int i0 = 0; !rc && i0 < t->rw.n; i0 += t->m->max_seq) {
        int cnt = t->rw.n - i0 < t->m->max_seq ? t->rw.n - i0 : t->m->max_seq;
        /* keyed by the step, so records of random routing change over
         * training; by the window (its index in the held-out split), as evaluation is */
        batch b = { .tokens = tok + (size_t)i0 * (S + 1), .nseq = cnt, .step = done,
                    .seq0 = i0, .global_seqs = t->rw.n, .window = t->rw.index + i0 };
        fwd_result r;
        rc = model_forward(t->m, t->ctx, &b, FWD_EVAL_TOPK, &r);
        fwd_args a = { .ctx = t->ctx, .dims = &t->m->dims, .nseq = cnt, .seq_len = S,
                       .mode = FWD_EVAL_TOPK, .window = t->rw.index + i0 };
        for (int l = 0; !rc && l < L; l++) {
            const layer *ly = &t->m->layers[l];
            if (!ly->ops->record)
                continue;
            snprintf(cs.prefix, sizeof(cs.prefix), "routing/step_%06ld/layer_%d", done, l);
            rc = ly->ops->record(ly, &a, &cs.sink);
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
int setup_routing_windows(trainer *t, char *err, int err_len)
{
    int S = t->cfg->seq_len, L = t->m->dims.n_layers;
    bool any = false;
    for (int l = 0; l < L; l++)
        any |= t->m->layers[l].ops->record != NULL;
    /* the routing records' forwards count the windows: the same on every
     * rank (collective, before any rank may return) */
    long avail = 0, n = 0;
    int rc = eval_windows_agreed(t->ctx, t->d, S, 0, &avail, &n, err, err_len);
    n = t->cfg->routing_windows < avail ? t->cfg->routing_windows : avail;
    if (rc || !any || t->cfg->routing_every <= 0 || n <= 0)
        return rc;
    routing_windows *rw = &t->rw;
    rw->n = (int)n;
    rw->index = malloc((size_t)n * sizeof(long));
    rw->tokens = malloc((size_t)n * (S + 1) * sizeof(token_t));
    int32_t *tok = malloc((size_t)n * (S + 1) * sizeof(int32_t));
    uint8_t *lab = malloc((size_t)n * (S + 1));
    rc = rw->index && rw->tokens && tok && lab ? 0 : -ENOMEM;
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
int record_model(trainer *t)
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
        fl[L + 1] = MODE_TRAIN_FLOPS_PER_FORWARD * all * t->cfg->batch;
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

void free_routing_windows(routing_windows *rw)
{
    free(rw->index);
    free(rw->tokens);
    memset(rw, 0, sizeof(*rw));
}

/* The global batch of a step as rank 0 can rebuild it (samples are keyed
 * by step and sequence), stored with the run so a bad step can be replayed. */
int record_batch(trainer *t, long done, const char *group)
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
