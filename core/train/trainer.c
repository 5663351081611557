#include "core/train/trainer_impl.h"

#include "core/util/file.h"
#include "core/data/mix.h"
#include "core/comm/comm.h"
#include "core/io/checkpoint.h"
#include "core/io/runfile.h"
#include "core/kernels/bf16.h"
#include "core/kernels/matmul.h"
#include "core/train/optim.h"
#include "core/train/shard.h"
#include "core/train/step.h"
#include "core/util/fault.h"
#include "core/util/pool.h"
#include "core/util/signals.h"
#include "core/util/outfile.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* An agreement point (docs/robustness.md): every rank learns whether any
 * rank failed, and ends with the message of the lowest failing rank, so the
 * program prints one line from rank 0 and nobody hangs. */
static int agree_msg(mode_ctx *ctx, int rc, char *err, int err_len)
{
    return comm_agree(ctx->comm, rc, err, err_len);
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
    ckpt_header h = { .config = t->ini, .step = step, .seed = t->cfg->seed,
                      .data = ctx->rank == 0 ? t->data : NULL,
                      .train_flops_executed = t->flops_spent };
    if ((rc = checkpoint_save(t->ckpt_h5, t->m, &h, ctx->comm, err, err_len)))
        return rc;
    if (last && ctx->rank == 0)
        rc = run_record_finish(t->run_h5, err, err_len);
    return agree_msg(ctx, rc, err, err_len);
}

/* run.flops_count = executed: the steps re-planned after step done from
 * the executed training FLOPs spent so far, so that the run ends when its
 * spending reaches run.flops_budget (docs/instruments.md): with e the mean
 * executed FLOPs of a step so far, total = done + round((budget - spent) /
 * e), at least done.  The same on every rank (spent is a global sum). */
static void replan(trainer *t, long done)
{
    const run_config *c = t->cfg;
    if (strcmp(c->flops_count, "executed") || c->flops_budget <= 0.0 || done <= 0 ||
        !(t->flops_spent > 0.0))
        return;
    double e = t->flops_spent / (double)done, left = c->flops_budget - t->flops_spent;
    double more = left > 0.0 ? floor(left / e + 0.5) : 0.0;
    double total = (double)done + more;
    t->total = total > (double)MODE_MAX_STEPS ? MODE_MAX_STEPS : (long)total;
}

static int resume_from(trainer *t, char *err, int err_len)
{
    /* one open for the seal, the metadata and the tensors (checkpoint.h) */
    ckpt_meta meta;
    ckpt_file *f = NULL;
    int rc = checkpoint_open(&f, t->ckpt_h5, &meta, t->ctx->comm, err, err_len);
    if (rc)
        return rc;
    if (!config_same_as(t->cfg, t->ini, meta.config)) {
        char diff[700];
        char *was = config_stored_as(t->cfg, meta.config);
        config_differences(was ? was : meta.config, t->ini, diff, sizeof(diff));
        free(was);
        snprintf(err, (size_t)err_len,
                 "%s: its config does not match this run's (resume needs the same resolved "
                 "config); differing keys, checkpoint -> now: %s", t->ckpt_h5,
                 diff[0] ? diff : "(none found: compare `h5dump -a config`)");
        ckpt_meta_clear(&meta);
        checkpoint_close(&f);
        return -EINVAL;
    }
    /* what the run reads now (the same on every rank: agree_inputs): the
     * same data, or no resume; every rank decides, so all go on together */
    if (meta.data && strcmp(meta.data, t->data) != 0) {
        snprintf(err, (size_t)err_len,
                 "%s: the run read other data: when checkpointed, %.700s; now %.700s (resume "
                 "needs the data the run started on; --overwrite starts anew)", t->ckpt_h5,
                 meta.data, t->data);
        ckpt_meta_clear(&meta);
        checkpoint_close(&f);
        return -EINVAL;
    }
    t->start = meta.step;
    t->ckpt_step = meta.step;
    t->flops_spent = meta.train_flops_executed;
    ckpt_meta_clear(&meta);
    replan(t, t->start);
    /* the experts this rank holds now, whatever rank count wrote the file */
    rc = checkpoint_read(f, t->m, true, t->ctx->comm, err, err_len);
    checkpoint_close(&f);
    if (rc)
        return rc;
    if (t->rec) {
        /* drop what a crash or a stop left past the checkpoint; the clock
         * and the skip count go on from the last row kept */
        rc = run_record_rewind(t->run_h5, t->start, err, err_len);
        run_reader *rd = NULL;
        if (!rc && !(rc = open_run_reader(&rd, t->run_h5, err, err_len))) {
            long reach = run_reader_last_step(rd);
            if (reach < t->start) {
                char piece[MODE_PATH_MAX + 128];
                run_record_piece_path(piece, sizeof(piece), t->run_h5, t->start);
                snprintf(err, (size_t)err_len,
                         "%s: its records end at step %ld, but the checkpoint is at step %ld: "
                         "the records of steps %ld..%ld (%.1000s) are missing", t->run_h5, reach,
                         t->start, reach + 1, t->start, piece);
                rc = -EINVAL;
            }
            double *v = NULL;
            long n = 0;
            if (!run_reader_column(rd, "metrics/wall_s", &v, &n) && n > 0)
                t->wall0 -= v[n - 1];
            free(v);
            if (!run_reader_column(rd, "metrics/skipped", &v, &n) && n > 0)
                t->skipped = v[n - 1];
            free(v);
            /* an evaluation of the checkpoint's step that a signal cut short is
             * made now, before the next step (train_steps) */
            double last_eval_step = -1.0;
            if (!run_reader_column(rd, "eval/step", &v, &n) && n > 0)
                last_eval_step = v[n - 1];
            free(v);
            if (!run_reader_column(rd, "eval/loss_topk", &v, &n) && n > 0)
                t->last_eval = v[n - 1];
            free(v);
            long ev = t->cfg->eval_every;
            t->eval_pending = t->start > 0 && ev > 0 &&
                              (t->start % ev == 0 || t->start == t->total) &&
                              last_eval_step < (double)t->start;
            close_run_reader(&rd);
            t->rec->flushed_through = t->start;
        }
    }
    return rc;
}

/* data.mix = difficulty: the scores of data.difficulty (auto: beside the
 * source) split the training documents at their median. */
static int use_mix(dataset *d, const run_config *cfg, char *err, int err_len)
{
    char path[CFG_PATH_LEN + 16];
    if (!strcmp(cfg->difficulty, "auto"))
        mix_default_path(d->source, path, (int)sizeof(path));
    else
        snprintf(path, sizeof(path), "%s", cfg->difficulty);
    return dataset_use_mix(d, path, cfg->seq_len, err, err_len);
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

int train_stop_signal(void)
{
    return stop_signal_pending();
}

/* A testing aid (docs/robustness.md): MODE_FAULT=nan@STEP puts a NaN into a
 * gradient at that step; MODE_FAULT=error@RANK:STEP makes that world rank
 * fail, once in the process (a sweep's group goes on to its next run). */
static int injected_fault(const mode_ctx *ctx, long done, model *m)
{
    static bool error_fired;
    fault_spec f = fault_from_env();
    if (f.set && !strcmp(f.site, "nan") && f.step == done) {
        m->grads[m->tensors[m->n_tensors / 2].offset] = NAN;
        return 0;
    }
    if (f.set && !strcmp(f.site, "error") && !error_fired &&
        f.rank == (ctx->comm ? comm_world_rank(ctx->comm) : ctx->rank) && f.step == done) {
        error_fired = true;
        return -EIO;
    }
    return 0;
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

/* A copy of the tokenizer model in the run folder (tokenizer.model), so
 * that the checkpoint beside it decodes without the original path. */
static int keep_tokenizer(trainer *t, const char *path, char *err, int err_len)
{
    char dst[MODE_PATH_MAX + 32], why[MODE_PATH_MAX + 256] = "";
    snprintf(dst, sizeof(dst), "%s/tokenizer.model", t->dir);
    out_file o;
    FILE *in = file_fopen_regular(path, "rb", why, (int)sizeof(why));
    int rc = in ? out_open(&o, dst, why, (int)sizeof(why)) : -EIO;
    char buf[65536];
    size_t n;
    while (!rc && (n = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, n, o.f) != n)
            rc = -EIO;
    if (!rc && ferror(in))
        rc = -EIO;
    if (in)
        fclose(in);
    if (!rc)
        rc = out_commit(&o, why, (int)sizeof(why));
    else if (in)
        out_abort(&o);
    if (rc && !in)
        snprintf(err, (size_t)err_len, "tokenizer %s", why);
    else if (rc)
        snprintf(err, (size_t)err_len, "%s: cannot copy the tokenizer %s there (%s)", dst, path,
                 why[0] ? why : strerror(-rc));
    return rc;
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
    t->last_eval = topk.loss;
    lg->eval_topk = topk.loss;
    lg->eval_causal = causal.loss;
    lg->eval_se = topk.se;
    lg->eval_bpb = topk.bpb;
    lg->eval_windows = topk.windows;
    if (!t->rec)
        return 0;
    double row[RUN_EVAL_COUNT] = {
        [RUN_EVAL_STEP] = (double)done,
        [RUN_EVAL_LOSS_TOPK] = topk.loss,
        [RUN_EVAL_LOSS_CAUSAL] = causal.loss,
        [RUN_EVAL_SE_TOPK] = topk.se,
        [RUN_EVAL_SE_CAUSAL] = causal.se,
        [RUN_EVAL_WINDOWS] = (double)topk.windows,
        [RUN_EVAL_BPB_TOPK] = topk.bpb,
        [RUN_EVAL_BPB_CAUSAL] = causal.bpb,
    };
    return record_row(t, &t->rec->eval, row);
}

/* What the run has to go on from, checked when it is said (one process
 * reads the checkpoint's seal and step): "the checkpoint PATH of step N is
 * whole", or that there is none, or why it cannot be read.  For the
 * messages of a run that stops: they never promise a file unchecked. */
static void checkpoint_state(const trainer *t, char *out, size_t n)
{
    const run_config *c = t->cfg;
    if (t->ckpt_step <= 0) {
        long due = c->ckpt_every > 0 && c->ckpt_every < t->total ? c->ckpt_every : t->total;
        snprintf(out, n, "no checkpoint was written (the first is due at step %ld), so a "
                 "--resume has nothing to go on from: the run starts anew with --overwrite", due);
        return;
    }
    ckpt_meta meta;
    char why[1024];
    int rc = checkpoint_read_meta(t->ckpt_h5, &meta, NULL, why, sizeof(why));
    if (rc)
        snprintf(out, n, "the checkpoint of step %ld cannot be read now: %.900s", t->ckpt_step,
                 why);
    else if (meta.step != t->ckpt_step)
        snprintf(out, n, "%.900s is of step %ld, not of step %ld, the last this run wrote",
                 t->ckpt_h5, meta.step, t->ckpt_step);
    else
        snprintf(out, n, "the checkpoint %.900s of step %ld is whole and --resume goes on "
                 "from it", t->ckpt_h5, meta.step);
    ckpt_meta_clear(&meta);
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
        char msg[3200], state[1200];
        checkpoint_state(t, state, sizeof(state));
        snprintf(msg, sizeof(msg), "rank %d: %.1000s; stopping every rank (%s)", t->ctx->rank,
                 err, state);
        o->fatal(t->ctx, msg);
    }
    return rc;
}

/* On resume: the evaluation of the checkpoint's step that a signal cut
 * short, into a late piece of that step (the checkpoint's piece is written
 * already), and the run gathered when that was its last step.  Collective. */
static int evaluate_pending(trainer *t, const trainer_opts *o, char *err, int err_len)
{
    const run_config *c = t->cfg;
    long done = t->start;
    bool last = done == t->total, local = false;
    train_log lg = { .step = done, .total = t->total, .loss = (double)NAN, .eval_late = true,
                     .wall_s = mode_now() - t->wall0 };
    int rc = evaluate_both(t, done, last ? c->final_eval_windows : c->eval_windows, &lg, err,
                           err_len, &local);
    if (rc == -EINTR && !local) {
        char state[1200] = "";
        if (t->ctx->rank == 0)
            checkpoint_state(t, state, sizeof(state));
        snprintf(err, (size_t)err_len, "stopped by signal %d at step %ld, before its "
                 "evaluation was made%s%s",
                 stop_signal_pending() ? stop_signal_pending() : SIGTERM, done,
                 state[0] ? "; " : "", state);
        return rc;
    }
    if (rc) {
        if (local)
            fail_in_step(t, o, done, rc, "evaluation", err, err_len);
        else
            prefix_step(err, err_len, done);
        return rc;
    }
    if (t->ctx->rank == 0 && t->tb)
        rc = tfevents_write(t->tb, done, err, err_len);
    if (t->ctx->rank == 0 && !rc) {
        rc = run_record_flush_late(t->rec, t->run_h5, done, err, err_len);
        if (!rc && last)
            rc = run_record_finish(t->run_h5, err, err_len);
    }
    if ((rc = agree_msg(t->ctx, rc, err, err_len)))
        return rc;
    t->eval_pending = 0;
    /* the run's result when it was the last step's: shown as an
     * uninterrupted run shows it */
    if (o->log && t->ctx->rank == 0)
        o->log(&lg, o->log_user);
    return 0;
}

/* The trainer's say in a step (core/train/step.h). */
typedef struct step_ctx {
    trainer *t;
    long done;
    int local;
    bool skip_bad;
    char *err;
    int err_len;
} step_ctx;

/* After backward, an agreement point: the injected faults of the tests. */
static int step_after_backward(void *user, int rc)
{
    step_ctx *sc = user;
    mode_ctx *ctx = sc->t->ctx;
    if ((rc = injected_fault(ctx, sc->done, sc->t->m)))
        snprintf(sc->err, (size_t)sc->err_len, "step %ld: forward/backward failed (%s)", sc->done,
                 strerror(-rc));
    return agree_msg(ctx, rc, sc->err, sc->err_len);
}

/* Before the update: a non-finite loss or norm (every rank sees the same
 * summed ones) is named, its batch recorded, then it stops the run or the
 * step makes no update (run.nonfinite). */
static int step_before_update(void *user, const step_out *so, bool *update)
{
    step_ctx *sc = user;
    trainer *t = sc->t;
    long done = sc->done;
    if (isfinite(so->loss) && isfinite(so->norm))
        return 0;
    char what[160];
    describe_nonfinite(t, sc->local, what, sizeof(what));
    /* rank 0 records the batch: agreed, so that every rank stops or goes on
     * together under either policy */
    int rc = record_batch(t, done, "nonfinite");
    if (rc)
        snprintf(sc->err, (size_t)sc->err_len, "step %ld: recording the non-finite batch failed "
                 "(%s)", done, strerror(-rc));
    if ((rc = agree_msg(t->ctx, rc, sc->err, sc->err_len)))
        return rc;
    if (!sc->skip_bad) {
        /* rank 0 writes the records (the batch among them), then says where
         * they are and what checkpoint stays, each as it found it */
        char piece[MODE_PATH_MAX + 128], where[MODE_PATH_MAX + 1200], state[1200] = "";
        run_record_piece_path(piece, sizeof(piece), t->run_h5, done);
        char why[1024];
        if (t->rec && run_record_flush(t->rec, t->run_h5, done, why, sizeof(why)))
            snprintf(where, sizeof(where), "writing its batch failed: %.1000s", why);
        else
            snprintf(where, sizeof(where), "the batch is in %.1000s under /nonfinite", piece);
        if (t->ctx->rank == 0)
            checkpoint_state(t, state, sizeof(state));
        snprintf(sc->err, (size_t)sc->err_len,
                 "step %ld: non-finite %s (loss %g, gradient norm %g), first in %s; %s%s%s",
                 done, isfinite(so->loss) ? "gradient" : "loss", so->loss, so->norm, what, where,
                 state[0] ? "; " : "", state);
        return -ERANGE;
    }
    t->skipped += 1.0; /* [run] nonfinite = skip: no update this step */
    *update = false;
    return 0;
}

static int train_steps(trainer *t, const trainer_opts *o, char *err, int err_len)
{
    const run_config *c = t->cfg;
    mode_ctx *ctx = t->ctx;
    model *m = t->m;
    int S = c->seq_len, P = ctx->size, local = c->batch / P;
    long seq0 = (long)ctx->rank * local;
    bool skip_bad = !strcmp(c->nonfinite, "skip");
    optim_cfg oc = optim_of_config(c);
    oc.total_steps = t->total;
    token_t *tok = malloc((size_t)local * (S + 1) * sizeof(token_t));
    if (!tok)
        return -ENOMEM;
    comm_bcast(ctx->comm, &t->skipped, sizeof(t->skipped), 0);
    comm_bcast(ctx->comm, &t->wall0, sizeof(t->wall0), 0);
    double train_flops_step = MODE_TRAIN_FLOPS_PER_FORWARD * t->flops_per_seq * c->batch;
    int rc = 0;
    if (t->eval_pending && (rc = evaluate_pending(t, o, err, err_len))) {
        free(tok);
        return rc;
    }
    for (long step = t->start; step < t->total && !rc; step++) {
        long done = step + 1;
        double t0 = mode_now();
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
        step_ctx sc = { .t = t, .done = done, .local = local, .skip_bad = skip_bad, .err = err,
                        .err_len = err_len };
        step_hooks hooks = { .after_backward = step_after_backward,
                             .before_update = step_before_update, .user = &sc };
        step_out so;
        rc = train_step(m, t->shard, ctx, &b, &oc, step, &hooks, &so);
        if (rc && so.failed) { /* where other ranks may wait in a collective */
            fail_in_step(t, o, done, rc, so.failed, err, err_len);
            break;
        }
        if (rc) /* agreed at a hook: err says what */
            break;
        bool bad = !so.updated;
        double loss = so.loss, ce = so.ce, norm = so.norm, lr = so.lr;
        double sums[4] = { so.ce_sum, so.aux, so.side, so.flops_executed };
        double comm_s = so.comm_s, compute = so.compute_s;
        t->reached = done;
        t->flops_spent += MODE_TRAIN_FLOPS_PER_FORWARD * so.flops_executed;
        replan(t, done);
        oc.total_steps = t->total; /* the schedule ends at the plan's last step */
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
            double row[RUN_METRIC_COUNT] = {
                [RUN_METRIC_STEP] = (double)done,
                [RUN_METRIC_LOSS] = loss,
                [RUN_METRIC_CE] = ce,
                [RUN_METRIC_AUX_LOSS] = sums[1],
                [RUN_METRIC_SIDE_LOSS] = sums[2],
                [RUN_METRIC_LR] = lr,
                [RUN_METRIC_GRAD_NORM] = norm,
                [RUN_METRIC_TOKENS_PER_S] = lg.tokens_per_s,
                [RUN_METRIC_TRAIN_FLOPS] = config_nominal_flops_through(c, train_flops_step, done),
                [RUN_METRIC_TRAIN_FLOPS_EXECUTED] = MODE_TRAIN_FLOPS_PER_FORWARD * sums[3],
                [RUN_METRIC_WALL_S] = wall,
                [RUN_METRIC_COMM_BYTES] = (double)comm_bytes_sent(ctx->comm),
                [RUN_METRIC_COMM_S] = comm_s,
                [RUN_METRIC_COMPUTE_S] = compute,
                [RUN_METRIC_SKIPPED] = t->skipped,
            };
            local_rc = record_row(t, &t->rec->metrics, row);
        }
        int sig = stop_signal_pending();
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
        bool eval_local = false, cut = false;
        if (c->eval_every > 0 && (done % c->eval_every == 0 || last) &&
            (rc = evaluate_both(t, done, last ? c->final_eval_windows : c->eval_windows, &lg,
                                err, err_len, &eval_local))) {
            if (rc == -EINTR && !eval_local) {
                /* a signal during the evaluation, agreed between its chunks:
                 * stop with a checkpoint; the resume makes the evaluation */
                cut = true;
                rc = 0;
                sig = stop_signal_pending();
                comm_allreduce_max_int(ctx->comm, &sig);
                sig = sig ? sig : SIGTERM;
                stop = true;
            } else {
                if (eval_local) /* the other ranks may wait in the forward's collectives */
                    fail_in_step(t, o, done, rc, "evaluation", err, err_len);
                else /* agreed by every rank (a bad token in a window) */
                    prefix_step(err, err_len, done);
                break;
            }
        }
        /* the step's scalars, one event: a reader of the file sees it now */
        char why[1024] = "";
        if (!local_rc && !rc && t->tb && (local_rc = comm_fault(ctx->comm, "tfevents")))
            snprintf(why, sizeof(why), "%s: writing the event of step %ld failed (injected)",
                     tfevents_path(t->tb), done);
        else if (!local_rc && !rc && t->tb)
            local_rc = tfevents_write(t->tb, done, why, sizeof(why));
        if (local_rc) {
            rc = local_rc;
            if (why[0])
                snprintf(err, (size_t)err_len, "step %ld: %s", done, why);
            else
                snprintf(err, (size_t)err_len, "step %ld: recording the metrics failed (%s)",
                         done, strerror(-rc));
        }
        if ((rc = agree_msg(ctx, rc, err, err_len)))
            break;
        if (o->log && ctx->rank == 0 &&
            (lg.has_eval || last || stop || (c->log_every > 0 && done % c->log_every == 0)))
            o->log(&lg, o->log_user);
        if ((c->ckpt_every > 0 && done % c->ckpt_every == 0) || last || stop) {
            double ts = mode_now();
            /* a run whose last evaluation was cut short is not gathered: the
             * resume adds the evaluation (a late piece), then gathers */
            rc = save_all(t, done, last && !cut, err, err_len);
            if (rc) /* agreed: the same message on every rank */
                prefix_step(err, err_len, done);
            else
                t->ckpt_step = done;
            if (!rc && o->checkpoint && ctx->rank == 0)
                o->checkpoint(done, mode_now() - ts, o->log_user);
        }
        if (!rc && sig) {
            char state[1200] = "";
            if (ctx->rank == 0)
                checkpoint_state(t, state, sizeof(state));
            snprintf(err, (size_t)err_len, "stopped by signal %d after step %ld%s%s%s", sig,
                     done, cut ? " (during its evaluation, which the resume makes)" : "",
                     state[0] ? "; " : "", state);
            stop_signal_set(sig);
            rc = -EINTR;
        }
        if (stop)
            break;
    }
    free(tok);
    return rc;
}

/* A run that ends in nonsense is not a success: its last evaluation not
 * finite, or most of its steps skipped (run.nonfinite = skip).  The
 * records stay; the exit says what happened.  Every rank has the numbers. */
static int check_outcome(const trainer *t, char *err, int err_len)
{
    const run_config *c = t->cfg;
    if (t->reached < t->total) /* stopped early (--max-steps): judged when it ends */
        return 0;
    if (t->skipped * 2.0 > (double)t->total) {
        snprintf(err, (size_t)err_len,
                 "the run skipped %.0f of its %ld steps for non-finite losses or gradients "
                 "(run.nonfinite = skip): most of it made no update, so it is no result; its "
                 "records are in %.1000s", t->skipped, t->total, t->run_h5);
        return -ERANGE;
    }
    if (c->eval_every > 0 && !isfinite(t->last_eval)) {
        snprintf(err, (size_t)err_len,
                 "the run ended with a held-out loss of %g at step %ld: not a result (%.0f "
                 "steps skipped); its records are in %.1000s", t->last_eval, t->total,
                 t->skipped, t->run_h5);
        return -ERANGE;
    }
    return 0;
}

/* What this rank read, compared with every other rank's before the first
 * collective that depends on it (comm_agree_text): the data's split and
 * fingerprints, and the resolved config a key a line, under its section. */
static int agree_inputs(trainer *t, char *err, int err_len)
{
    char *keys = config_to_lines(t->cfg);
    size_t cap = (keys ? strlen(keys) : 0) + sizeof(t->data) + 2048;
    char *text = keys ? malloc(cap) : NULL;
    int rc = text ? 0 : -ENOMEM;
    if (text) {
        dataset_describe(t->d, t->data, text, (int)cap);
        size_t at = strlen(text);
        snprintf(text + at, cap - at, "%s", keys);
    } else {
        snprintf(err, (size_t)err_len, "out of memory");
    }
    /* a rank without memory still takes part, with an empty text */
    int agreed = comm_agree_text(t->ctx->comm, text ? text : "", err, err_len);
    free(keys);
    free(text);
    return rc ? rc : agreed;
}

/* The steps the run takes (run.steps, or what run.flops_budget buys). */
static int plan_steps(trainer *t, char *err, int err_len)
{
    const run_config *cfg = t->cfg;
    t->flops_per_seq = model_flops_per_seq(t->m, NULL);
    double step_flops = MODE_TRAIN_FLOPS_PER_FORWARD * t->flops_per_seq * cfg->batch;
    t->total = config_planned_steps(cfg, step_flops);
    if (t->total > 0)
        return 0;
    if (t->total < 0)
        snprintf(err, (size_t)err_len, "run.flops_budget %g buys more than the %ld steps a run "
                 "may take (one costs %g FLOPs)", cfg->flops_budget, MODE_MAX_STEPS, step_flops);
    else
        snprintf(err, (size_t)err_len, "run.flops_budget %g buys no step (one costs %g)",
                 cfg->flops_budget, step_flops);
    return -EINVAL;
}

int train(const run_config *cfg, const kind_ops *const *kinds, mode_ctx *ctx,
          const trainer_opts *o, char *err, int err_len)
{
    trainer t = { .cfg = cfg, .ctx = ctx, .wall0 = mode_now(), .lock = folder_lock_none(),
                  .last_eval = (double)NAN };
    model_dims dims = config_dims(cfg);
    int P = ctx->size;
    dims.ranks = P; /* the experts spread over the ranks: each holds its own */
    dims.shard_optim = optim_of_config(cfg).shard;
    dims.rank = ctx->rank;
    int rc = -ENOMEM;
    /* a stop signal from here on is honoured at the next agreement point */
    stop_signals_install();
    /* bf16 products pack into the pool's scratch: a pool even for one thread */
    thread_pool *own_pool = NULL, *caller_pool = ctx->pool;
    if (!ctx->pool && build_thread_pool(&own_pool, 1)) {
        stop_signals_restore();
        return -ENOMEM;
    }
    if (own_pool)
        ctx->pool = own_pool;
    bool bf16 = !strcmp(cfg->precision, "bf16");
    if (bf16)
        matmul_bf16_prepare();
    ctx->seed = cfg->init_seed; /* the kinds' fixed random streams */
    run_paths(cfg, t.dir, t.run_h5, t.ckpt_h5, sizeof(t.dir));
    t.ini = config_to_ini(cfg);
    if (!t.ini)
        goto fail;
    rc = load_dataset(&t.d, cfg->source, cfg->val_source, cfg->vocab, cfg->val_fraction,
                      cfg->seq_len, o->data_dir, err, err_len);
    if (!rc && strcmp(cfg->tokenizer, "none") != 0)
        rc = dataset_use_tokenizer(t.d, cfg->tokenizer, err, err_len);
    if (!rc && !strcmp(cfg->mix, "difficulty"))
        rc = use_mix(t.d, cfg, err, err_len);
    if (!rc)
        rc = dataset_fingerprint(t.d, t.data, sizeof(t.data), err, err_len);
    /* every rank reads the same config and data, or none computes: the
     * number of evaluation windows, the model's shape, every collective
     * count follows from them (docs/robustness.md, "Ranks that disagree") */
    if (!(rc = agree_msg(ctx, rc, err, err_len)))
        rc = agree_inputs(&t, err, err_len);
    if (!rc)
        rc = build_model(&t.m, &dims, cfg->layers, kinds, cfg->batch / P, err, err_len);
    if (!rc)
        t.m->bf16 = bf16;
    if (!rc)
        rc = build_shard_plan(&t.shard, t.m, ctx, optim_of_config(cfg).bucket_kb * 256);
    if (!rc)
        rc = plan_steps(&t, err, err_len);
    /* the folder: refused before anything is created when it cannot take the
     * run; then created, locked, and checked again under the lock (another
     * process may have written there meanwhile) */
    if (!rc && ctx->rank == 0)
        rc = check_folder(&t, o, err, err_len);
    if (!rc && ctx->rank == 0)
        rc = check_writable(t.dir, err, err_len);
    if (!rc && ctx->rank == 0)
        rc = folder_lock_take(&t.lock, t.dir, "training", err, err_len);
    if (!rc && ctx->rank == 0)
        rc = check_folder(&t, o, err, err_len);
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        goto fail;
    model_init(t.m, cfg->init_seed);
    if (o->init_from) { /* the parameters of another run; moments and step start anew */
        ckpt_meta meta;
        rc = checkpoint_read_meta(o->init_from, &meta, ctx->comm, err, err_len);
        if (!rc)
            rc = config_same_widths(cfg, meta.config, o->init_from, err, err_len);
        ckpt_meta_clear(&meta);
        ckpt_upcycle up = { .noise = o->upcycle_noise, .reinit = o->upcycle_reinit,
                            .seed = cfg->init_seed };
        char summary[2048];
        if (!rc)
            rc = checkpoint_init_from(o->init_from, t.m, &up, ctx->comm, summary,
                                      sizeof(summary), err, err_len);
        if (!rc && ctx->rank == 0 && o->init_note)
            o->init_note(summary, o->log_user);
        if (rc) {
            char why[900];
            snprintf(why, sizeof(why), "%s", err);
            snprintf(err, (size_t)err_len, "--init-from: %s", why);
            goto fail;
        }
    }
    if (ctx->rank == 0 && (rc = build_run_record(&t.rec, t.ini)))
        goto fail;
    /* the tokenizer beside the run's files: sample and eval find it there */
    if (ctx->rank == 0 && t.d->tok && (rc = keep_tokenizer(&t, cfg->tokenizer, err, err_len)))
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
    /* rank 0 read the run file: what it found goes to all */
    comm_bcast(ctx->comm, &t.eval_pending, sizeof(t.eval_pending), 0);
    comm_bcast(ctx->comm, &t.last_eval, sizeof(t.last_eval), 0);
    if ((rc = agree_msg(ctx, setup_routing_windows(&t, err, err_len), err, err_len)))
        goto fail;
    if (ctx->rank == 0 && t.start < t.total) {
        provenance_collect(&t.rec->prov, P, o->blas_threads, bf16_path_name(bf16_path_current()),
                           o->argc, o->argv);
        if (o->init_from)
            snprintf(t.rec->prov.init_from, sizeof(t.rec->prov.init_from), "%s", o->init_from);
        snprintf(t.rec->prov.data, sizeof(t.rec->prov.data), "%s", t.data);
        rc = record_model(&t);
        if (!rc)
            rc = run_record_write_header(t.rec, t.run_h5, err, err_len);
    }
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        goto fail;
    /* the TensorBoard events beside run.h5: on resume the old files keep
     * the steps the checkpoint covers, a new file takes the rest */
    if (ctx->rank == 0 && o->resume)
        rc = tfevents_rewind(t.dir, t.start, err, err_len);
    if (!rc && ctx->rank == 0 && !o->no_tensorboard && (t.start < t.total || t.eval_pending))
        rc = tfevents_open(&t.tb, t.dir, err, err_len);
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        goto fail;
    t.reached = t.start;
    rc = train_steps(&t, o, err, err_len);
    /* a run that was finished already (resumed at its last step): its
     * record is gathered, if a crash came before */
    if (!rc && ctx->rank == 0 && t.start == t.total)
        rc = run_record_finish(t.run_h5, err, err_len);
    if ((rc = agree_msg(ctx, rc, err, err_len)))
        goto fail;
    rc = check_outcome(&t, err, err_len);
fail:
    tfevents_close(&t.tb);
    folder_lock_release(&t.lock);
    free_routing_windows(&t.rw);
    free_layer_stats(&t.st);
    free_run_record(&t.rec);
    free_shard_plan(&t.shard);
    free_model(&t.m);
    free_dataset(&t.d);
    free(t.ini);
    ctx->pool = caller_pool;
    free_thread_pool(&own_pool);
    stop_signals_restore();
    return rc;
}
