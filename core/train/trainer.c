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

/* Every rank learns whether any rank failed, and every rank ends with the
 * message of the lowest failing rank (prefixed "rank N: " when that is not
 * rank 0), so the program prints one line from rank 0 and nobody hangs. */
static int agree_msg(mode_ctx *ctx, int rc, char *err, int err_len)
{
    int first = rc ? ctx->rank : ctx->size;
    if (comm_allreduce_min_int(ctx->comm, &first))
        return -EIO;
    if (first == ctx->size)
        return 0;
    if (err && ctx->size > 1) {
        char buf[1024];
        if (ctx->rank == first && first == 0)
            snprintf(buf, sizeof(buf), "%.1000s", err);
        else if (ctx->rank == first)
            snprintf(buf, sizeof(buf), "rank %d: %.900s", first, err);
        comm_bcast(ctx->comm, buf, sizeof(buf), first);
        snprintf(err, (size_t)err_len, "%s", buf);
    }
    return rc ? rc : -ECANCELED;
}
#define agree(ctx, rc) agree_msg((ctx), (rc), err, err_len)

int evaluate(model *m, mode_ctx *ctx, const dataset *d, long n_windows, fwd_mode mode,
             double *loss, long *windows_used, char *err, int err_len)
{
    int S = m->dims.seq_len, P = ctx ? ctx->size : 1, rank = ctx ? ctx->rank : 0;
    long avail = dataset_eval_windows(d, S);
    long n = (n_windows <= 0 || n_windows > avail) ? avail : n_windows;
    token_t *tok = malloc((size_t)m->max_seq * (size_t)(S + 1) * sizeof(token_t));
    double sums[2] = { 0.0, 0.0 }; /* ce, positions */
    int rc = tok ? 0 : -ENOMEM;
    if (rc)
        snprintf(err, (size_t)err_len, "evaluation: out of memory");
    /* rank r takes windows r, r+P, ...; in chunks of the model's batch.  Every
     * rank runs the same number of forwards of the same size (layers may talk
     * to other ranks), padding with window 0 that does not count. */
    long per_rank = (n + P - 1) / P;
    for (long i0 = 0; i0 < per_rank; i0 += m->max_seq) {
        int cnt = (int)(per_rank - i0 < m->max_seq ? per_rank - i0 : m->max_seq), real = 0;
        for (int i = 0; i < cnt && !rc; i++) {
            long w = rank + (i0 + i) * P;
            real += w < n;
            rc = dataset_eval_window(d, tok + (size_t)i * (S + 1), S, w < n ? w : 0, err,
                                     err_len);
        }
        /* every rank stops at the same chunk, before its forward: after a bad
         * token (or a failed forward) on any rank */
        int bad = rc != 0;
        comm_allreduce_max_int(ctx ? ctx->comm : NULL, &bad);
        if (bad)
            break; /* agree() below gives every rank the failing rank's message */
        batch b = { .tokens = tok, .nseq = cnt, .step = 0, .seq0 = rank + i0 * P,
                    .global_seqs = (int)n, .n_counted = real > 0 ? real : -1 };
        fwd_result r;
        rc = model_forward(m, ctx, &b, mode, &r);
        if (rc)
            snprintf(err, (size_t)err_len, "evaluation: forward failed (%s)", strerror(-rc));
        if (real > 0) {
            sums[0] += r.ce_sum;
            sums[1] += (double)r.n_positions;
        }
    }
    free(tok);
    if (ctx)
        rc = agree(ctx, rc);
    if (rc)
        return rc;
    comm_allreduce_sum_double(ctx ? ctx->comm : NULL, sums, 2);
    *loss = sums[1] > 0 ? sums[0] / sums[1] : (double)NAN;
    if (windows_used)
        *windows_used = n;
    return 0;
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

typedef struct trainer {
    const run_config *cfg;
    mode_ctx *ctx;
    model *m;
    shard_plan *shard; /* which gradients are summed and updated where */
    dataset *d;
    run_record *rec; /* rank 0 only */
    char *ini;
    char dir[4096], run_h5[4096], ckpt_h5[4096];
    long total, start;
    double flops_per_seq;
    int n_sums;              /* stat sums of all layers, concatenated */
    int *stat_sums;          /* [n_layers] sums of each layer */
    int *stat_table;         /* [n_layers] index into rec->extra, -1 without */
    char (*stat_group)[32];  /* [n_layers] "layer_stats/<l>" */
    const char ***stat_cols; /* [n_layers] "step" + the kind's stat names */
    int n_record;            /* held-out sequences whose routing is recorded */
    token_t *record_tokens;  /* [n_record][S+1] */
} trainer;

/* Tables of per-step layer statistics, one per layer whose kind has them. */
static int setup_stat_tables(trainer *t)
{
    int L = t->m->dims.n_layers;
    t->stat_table = malloc((size_t)L * sizeof(int));
    t->stat_group = calloc((size_t)L, sizeof(*t->stat_group));
    t->stat_cols = calloc((size_t)L, sizeof(*t->stat_cols));
    t->stat_sums = calloc((size_t)L, sizeof(int));
    if (!t->stat_table || !t->stat_group || !t->stat_cols || !t->stat_sums)
        return -ENOMEM;
    for (int l = 0; l < L; l++) {
        const layer *ly = &t->m->layers[l];
        t->stat_table[l] = -1;
        if (!ly->kind->stat_count)
            continue;
        int nc = ly->kind->stat_count(ly, &t->stat_sums[l]);
        t->n_sums += t->stat_sums[l];
        /* "step" then the kind's names, in one allocation */
        char **cols = malloc((size_t)(nc + 1) * (sizeof(char *) + 48));
        if (!cols)
            return -ENOMEM;
        char *names = (char *)(cols + nc + 1);
        for (int c = 0; c <= nc; c++) {
            cols[c] = names + (size_t)c * 48;
            if (c == 0)
                snprintf(cols[c], 48, "step");
            else
                ly->kind->stat_name(ly, c - 1, cols[c], 48);
        }
        t->stat_cols[l] = (const char **)cols;
        snprintf(t->stat_group[l], sizeof(t->stat_group[l]), "layer_stats/%d", l);
        if (t->rec) {
            int idx = run_record_add_table(t->rec, t->stat_group[l], t->stat_cols[l], nc + 1);
            if (idx < 0)
                return idx;
            t->stat_table[l] = idx;
        }
    }
    return 0;
}

/* After a training step: sum every layer's statistics over the ranks and
 * append one row per layer (rank 0). */
static int record_stats(trainer *t, long done)
{
    if (!t->n_sums)
        return 0;
    int L = t->m->dims.n_layers, off = 0, maxc = 0;
    for (int l = 0; l < L; l++) {
        int ns;
        if (t->m->layers[l].kind->stat_count) {
            int nc = t->m->layers[l].kind->stat_count(&t->m->layers[l], &ns);
            maxc = nc > maxc ? nc : maxc;
        }
    }
    double *all = malloc((size_t)(t->n_sums + maxc + 1) * sizeof(double));
    if (!all)
        return -ENOMEM;
    double *row = all + t->n_sums;
    for (int l = 0; l < L; l++) {
        const layer *ly = &t->m->layers[l];
        if (ly->kind->stat_count) {
            ly->kind->stat_sums(ly, all + off);
            off += t->stat_sums[l];
        }
    }
    int rc = comm_allreduce_sum_double(t->ctx->comm, all, t->n_sums);
    off = 0;
    for (int l = 0; !rc && l < L; l++) {
        const layer *ly = &t->m->layers[l];
        if (!ly->kind->stat_count)
            continue;
        if (t->rec) {
            row[0] = (double)done;
            ly->kind->stat_columns(ly, all + off, row + 1);
            rc = run_table_append(&t->rec->extra[t->stat_table[l]], row);
        }
        off += t->stat_sums[l];
    }
    free(all);
    return rc;
}

typedef struct blob_sink {
    record_sink sink;
    run_record *rec;
    char prefix[96];
    long step;
} blob_sink;

static int blob_put(record_sink *s, const char *name, int type, int ndim,
                    const unsigned long long *dims, const void *data)
{
    blob_sink *b = (blob_sink *)s;
    char path[160];
    snprintf(path, sizeof(path), "%s/%s", b->prefix, name);
    return b->rec ? run_record_add_blob(b->rec, path, type, ndim, dims, data, b->step) : 0;
}

/* Routing records: the first held-out windows through a top-k forward; each
 * routed layer describes its decisions (every rank runs the forward, so
 * kinds that talk across ranks work; rank 0 keeps the arrays). */
static int record_routing(trainer *t, long done)
{
    int S = t->cfg->seq_len, L = t->m->dims.n_layers;
    bool any = false;
    for (int l = 0; l < L; l++)
        any |= t->m->layers[l].kind->record != NULL;
    if (!any || t->n_record == 0)
        return 0;
    /* keyed by the step, so a random router's records change over training */
    batch b = { .tokens = t->record_tokens, .nseq = t->n_record, .step = done, .seq0 = 0,
                .global_seqs = t->n_record };
    fwd_result r;
    int rc = model_forward(t->m, t->ctx, &b, FWD_EVAL_TOPK, &r);
    blob_sink bs = { .sink = { .put = blob_put }, .rec = t->rec, .step = done };
    fwd_args a = { .ctx = t->ctx, .dims = &t->m->dims, .nseq = t->n_record, .seq_len = S,
                   .mode = FWD_EVAL_TOPK };
    for (int l = 0; !rc && l < L; l++) {
        const layer *ly = &t->m->layers[l];
        if (!ly->kind->record)
            continue;
        snprintf(bs.prefix, sizeof(bs.prefix), "routing/step_%06ld/layer_%d", done, l);
        rc = ly->kind->record(ly, &a, &bs.sink);
    }
    return rc;
}

/* The fixed held-out sequences of the routing records, with their tokens
 * (and labels, where the source has them) stored once. */
static int setup_records(trainer *t, char *err, int err_len)
{
    int S = t->cfg->seq_len;
    long avail = dataset_eval_windows(t->d, S);
    t->n_record = (int)(avail < 4 ? avail : 4);
    if (t->n_record > t->m->max_seq)
        t->n_record = t->m->max_seq;
    if (t->cfg->routing_every <= 0)
        t->n_record = 0;
    if (t->n_record == 0)
        return 0;
    t->record_tokens = malloc((size_t)t->n_record * (S + 1) * sizeof(token_t));
    int32_t *tok = malloc((size_t)t->n_record * (S + 1) * sizeof(int32_t));
    uint8_t *lab = malloc((size_t)t->n_record * (S + 1));
    int rc = t->record_tokens && tok && lab ? 0 : -ENOMEM;
    bool labels = dataset_eval_labels(t->d, S, 0) != NULL;
    for (int i = 0; !rc && i < t->n_record; i++) {
        rc = dataset_eval_window(t->d, t->record_tokens + (size_t)i * (S + 1), S, i, err,
                                 err_len);
        for (int j = 0; j <= S; j++)
            tok[(size_t)i * (S + 1) + j] = t->record_tokens[(size_t)i * (S + 1) + j];
        if (labels)
            memcpy(lab + (size_t)i * (S + 1), dataset_eval_labels(t->d, S, i), (size_t)S + 1);
    }
    unsigned long long dims[2] = { (unsigned long long)t->n_record, (unsigned long long)S + 1 };
    if (!rc && t->rec && t->rec->n_blobs == 0) { /* a resumed record has them already */
        rc = run_record_add_blob(t->rec, "routing/tokens", RUN_BLOB_INT32, 2, dims, tok, 0);
        if (!rc && labels)
            rc = run_record_add_blob(t->rec, "routing/labels", RUN_BLOB_UINT8, 2, dims, lab, 0);
    }
    free(tok);
    free(lab);
    return rc;
}

static int save_all(trainer *t, long step, char *err, int err_len)
{
    /* rank 0 writes every expert: each one's current copy comes from its rank */
    int rc = shard_sync(t->shard, t->ctx, t->m);
    if (!rc && t->ctx->rank == 0) {
        /* run file first: a crash between the two leaves a run file newer
         * than the checkpoint, which resume truncates */
        rc = run_record_write(t->rec, t->run_h5, err, err_len);
        if (!rc)
            rc = checkpoint_save(t->ckpt_h5, t->m, t->ini, step, t->cfg->seed, err, err_len);
    }
    return agree(t->ctx, rc);
}

static int resume_from(trainer *t, char *err, int err_len)
{
    ckpt_meta meta;
    int rc = checkpoint_read_meta(t->ckpt_h5, &meta, err, err_len);
    if (rc)
        return rc;
    if (strcmp(meta.config, t->ini) != 0) {
        snprintf(err, (size_t)err_len,
                 "%s: its config does not match this run's (resume needs the same resolved "
                 "config; compare with `h5dump -a config`)", t->ckpt_h5);
        ckpt_meta_clear(&meta);
        return -EINVAL;
    }
    t->start = meta.step;
    ckpt_meta_clear(&meta);
    rc = checkpoint_load(t->ckpt_h5, t->m, true, err, err_len);
    if (!rc && t->rec) {
        rc = run_record_load(t->rec, t->run_h5, err, err_len);
        if (!rc)
            run_record_truncate(t->rec, t->start + 1);
    }
    return rc;
}

static int sample_batch(const trainer *t, token_t *tok, int local, long step, long seq0,
                        char *err, int err_len)
{
    int S = t->cfg->seq_len, rc = 0;
    for (int i = 0; i < local && !rc; i++)
        rc = dataset_sample(t->d, tok + (size_t)i * (S + 1), S, t->cfg->seed, step, seq0 + i,
                            err, err_len);
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
        rc = dataset_sample(t->d, row, S, t->cfg->seed, done - 1, i, why, sizeof(why));
        off[i] = (int32_t)dataset_sample_offset(t->d, S, t->cfg->seed, done - 1, i);
        for (int j = 0; j <= S; j++)
            tok[(size_t)i * (S + 1) + j] = row[j];
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
 * (on any rank), else the first gradient tensor. */
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
    double wall0 = mode_now(), skipped = 0.0;
    if (t->rec && t->rec->metrics.n_rows > 0) { /* resumed: wall time and skips go on */
        const run_table *mt = &t->rec->metrics;
        wall0 -= mt->rows[(mt->n_rows - 1) * mt->n_cols + 10];
        skipped = mt->rows[(mt->n_rows - 1) * mt->n_cols + 14];
    }
    comm_bcast(ctx->comm, &skipped, sizeof(skipped), 0);
    double train_flops_step = 3.0 * t->flops_per_seq * c->batch;
    int rc = 0;
    for (long step = t->start; step < t->total && !rc; step++) {
        long done = step + 1;
        double t0 = mode_now(), comm0 = ctx->timers[PHASE_COMM];
        comm_reset_bytes(ctx->comm);
        /* a token >= V on any rank stops every rank before the forward */
        rc = sample_batch(t, tok, local, step, seq0, err, err_len);
        if (rc)
            prefix_step(err, err_len, done);
        if ((rc = agree(ctx, rc)))
            break;
        batch b = { .tokens = tok, .nseq = local, .step = step, .seq0 = seq0,
                    .global_seqs = c->batch };
        fwd_result r;
        model_zero_grad(m);
        rc = model_forward(m, ctx, &b, FWD_TRAIN, &r);
        if (!rc)
            rc = model_backward(m, ctx, &b);
        if (!rc)
            rc = injected_fault(ctx, done, m);
        if (rc)
            snprintf(err, (size_t)err_len, "step %ld: forward/backward failed (%s)", done,
                     strerror(-rc));
        if ((rc = agree(ctx, rc)))
            break;
        double tc = mode_now(), comm_layers = ctx->timers[PHASE_COMM] - comm0;
        double sums[4] = { r.ce_sum, r.aux_loss, r.side_loss, r.flops_executed };
        rc = shard_reduce_grads(t->shard, ctx, m);
        if (!rc)
            rc = comm_allreduce_sum_double(ctx->comm, sums, 4);
        double t_allreduce = mode_now() - tc;
        ctx->timers[PHASE_COMM] += t_allreduce;
        /* all communication of the step: the experts' all-to-alls inside the
         * layers and the gradient all-reduce; compute is the rest of forward
         * and backward */
        double comm_s = comm_layers + t_allreduce, compute = tc - t0 - comm_layers;
        if (rc) {
            snprintf(err, (size_t)err_len, "step %ld: MPI all-reduce failed", done);
            break;
        }
        double ce = sums[0] / ((double)c->batch * S), loss = ce + sums[1];
        double norm = 0.0, lr = lr_at(&oc, step);
        if ((rc = shard_grad_norm(t->shard, ctx, m, &norm))) {
            snprintf(err, (size_t)err_len, "step %ld: MPI all-reduce failed", done);
            break;
        }
        bool bad = !isfinite(loss) || !isfinite(norm);
        if (bad) {
            /* every rank sees the same summed loss and gradients */
            char what[160];
            describe_nonfinite(t, local, what, sizeof(what));
            rc = record_batch(t, done, "nonfinite");
            if (!skip_bad || rc) {
                snprintf(err, (size_t)err_len,
                         "step %ld: non-finite %s (loss %g, gradient norm %g), first in %s; the "
                         "batch is in %s under /nonfinite, the last good checkpoint is kept",
                         done, isfinite(loss) ? "gradient" : "loss", loss, norm, what, t->run_h5);
                if (t->rec)
                    run_record_write(t->rec, t->run_h5, what, sizeof(what));
                rc = -ERANGE;
                break;
            }
            skipped += 1.0; /* [run] nonfinite = skip: no update this step */
        } else {
            double to = mode_now();
            clip_grad_norm(m->grads, m->n_params, norm, oc.clip);
            shard_adamw(t->shard, ctx, m, &oc, step + 1, lr);
            ctx->timers[PHASE_OPTIMIZER] += mode_now() - to;
        }
        double dt = mode_now() - t0, wall = mode_now() - wall0;
        train_log lg = {
            .step = done, .total = t->total, .loss = loss, .ce = ce, .aux = sums[1],
            .side = sums[2], .lr = lr, .grad_norm = norm,
            .tokens_per_s = (double)c->batch * S / dt, .gflops = train_flops_step / dt * 1e-9,
            .eta_s = dt * (double)(t->total - done), .wall_s = wall,
        };
        if (ctx->rank == 0) {
            double row[] = { (double)done, loss, ce, sums[1], sums[2], lr, norm,
                             lg.tokens_per_s, train_flops_step * (double)done,
                             3.0 * sums[3], wall, (double)comm_bytes_sent(ctx->comm), comm_s,
                             compute, skipped };
            rc = run_table_append(&t->rec->metrics, row);
        }
        int sig = stop_signal;
        comm_allreduce_max_int(ctx->comm, &sig); /* a signal on any rank stops all */
        bool stop = sig || (o->max_steps > 0 && done - t->start >= o->max_steps);
        bool last = done == t->total || stop;
        if (!rc && !bad)
            rc = record_stats(t, done);
        if (!rc && t->cfg->routing_every > 0 &&
            (done % t->cfg->routing_every == 0 || done == t->total))
            rc = record_routing(t, done);
        if (rc && !err[0])
            snprintf(err, (size_t)err_len, "step %ld: recording statistics failed", done);
        if (!rc && c->eval_every > 0 && (done % c->eval_every == 0 || done == t->total)) {
            rc = evaluate(m, ctx, t->d, c->eval_windows, FWD_EVAL_TOPK, &lg.eval_topk, NULL,
                          err, err_len);
            if (!rc)
                rc = evaluate(m, ctx, t->d, c->eval_windows, FWD_EVAL_CAUSAL, &lg.eval_causal,
                              NULL, err, err_len);
            lg.has_eval = true;
            if (!rc && ctx->rank == 0) {
                double row[] = { (double)done, lg.eval_topk, lg.eval_causal };
                rc = run_table_append(&t->rec->eval, row);
            }
            if (rc && err[0])
                prefix_step(err, err_len, done);
            else if (rc)
                snprintf(err, (size_t)err_len, "step %ld: evaluation failed", done);
        }
        if (!rc && o->log && ctx->rank == 0 &&
            (lg.has_eval || last || (c->log_every > 0 && done % c->log_every == 0)))
            o->log(&lg, o->log_user);
        if (!rc && ((c->ckpt_every > 0 && done % c->ckpt_every == 0) || last))
            rc = save_all(t, done, err, err_len);
        /* a failure on rank 0 alone (the record) must stop every rank */
        rc = agree(ctx, rc);
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
    trainer t = { .cfg = cfg, .ctx = ctx };
    model_dims dims = config_dims(cfg);
    int P = ctx->size;
    int rc = -ENOMEM;
    /* the products' precision lives on the pool that runs them */
    thread_pool *own_pool = NULL, *caller_pool = ctx->pool;
    if (!ctx->pool && build_thread_pool(&own_pool, 1))
        return -ENOMEM;
    if (own_pool)
        ctx->pool = own_pool;
    matmul_use_bf16(ctx->pool, !strcmp(cfg->precision, "bf16"));
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
        rc = check_writable(t.dir, err, err_len);
    if ((rc = agree(ctx, rc)))
        goto fail;
    model_init(t.m, cfg->seed);
    t.flops_per_seq = model_flops_per_seq(t.m, NULL);
    t.total = config_planned_steps(cfg, 3.0 * t.flops_per_seq * cfg->batch);
    if (t.total <= 0) {
        snprintf(err, (size_t)err_len, "run.flops_budget %g buys no step (one costs %g)",
                 cfg->flops_budget, 3.0 * t.flops_per_seq * cfg->batch);
        rc = -EINVAL;
        goto fail;
    }
    if (ctx->rank == 0) {
        if ((rc = build_run_record(&t.rec, t.ini)))
            goto fail;
        provenance_collect(&t.rec->prov, P, o->blas_threads, o->argc, o->argv);
    }
    if ((rc = agree(ctx, setup_stat_tables(&t))))
        goto fail;
    if (o->resume && (rc = agree(ctx, resume_from(&t, err, err_len))))
        goto fail;
    if ((rc = agree(ctx, setup_records(&t, err, err_len))))
        goto fail;
    if (ctx->rank == 0 && t.rec)
        provenance_collect(&t.rec->prov, P, o->blas_threads, o->argc, o->argv);
    struct sigaction sa = { .sa_handler = on_stop_signal }, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    rc = train_steps(&t, o, err, err_len);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
fail:
    if (t.stat_cols)
        for (int l = 0; l < dims.n_layers; l++)
            free(t.stat_cols[l]);
    free(t.stat_cols);
    free(t.stat_sums);
    free(t.stat_group);
    free(t.stat_table);
    free(t.record_tokens);
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
