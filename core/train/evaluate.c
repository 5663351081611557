#include "core/train/trainer.h"

#include "core/comm/comm.h"
#include "core/util/signals.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long eval_window_index(long i, long n, long avail)
{
    return n >= avail ? i : (long)((double)i * (double)avail / (double)n);
}

int eval_windows_agreed(mode_ctx *ctx, const dataset *d, int seq_len, long n_windows,
                        long *avail, long *n, char *err, int err_len)
{
    *avail = dataset_eval_windows(d, seq_len);
    *n = (n_windows <= 0 || n_windows > *avail) ? *avail : n_windows;
    char text[700];
    snprintf(text, sizeof(text), "%ld of %ld held-out windows of %.600s", *n, *avail,
             d->eval.c->path);
    return comm_agree_text(ctx ? ctx->comm : NULL, text, err, err_len);
}

int evaluate(model *m, mode_ctx *ctx, const dataset *d, long n_windows, fwd_mode mode,
             eval_result *out, char *err, int err_len)
{
    int S = m->dims.seq_len, P = ctx ? ctx->size : 1, rank = ctx ? ctx->rank : 0;
    long avail = 0, n = 0;
    out->local_failure = false;
    int rc = eval_windows_agreed(ctx, d, S, n_windows, &avail, &n, err, err_len);
    if (rc)
        return rc;
    token_t *tok = malloc((size_t)m->max_seq * (size_t)(S + 1) * sizeof(token_t));
    double *seq_ce = malloc((size_t)m->max_seq * sizeof(double));
    long *win = malloc((size_t)m->max_seq * sizeof(long));
    rc = tok && seq_ce && win ? 0 : -ENOMEM;
    if (rc)
        snprintf(err, (size_t)err_len, "evaluation: out of memory");
    /* sums over windows of the mean loss and of its square: the mean and
     * the spread of the per-window losses */
    /* and the executed forward FLOPs, the nats of every predicted token and
     * the bytes of text they stand for (bits per byte) */
    double sums[5] = { 0.0, 0.0, 0.0, 0.0, 0.0 };
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
            win[i] = k < n ? eval_window_index(k, n, avail) : 0;
            rc = dataset_eval_window(d, tok + (size_t)i * (S + 1), S, win[i], err, err_len);
        }
        /* a stop signal (training: core/util/signals.h) ends the evaluation
         * between chunks, so that a run stops within a chunk's time */
        if (!rc && stop_signal_pending()) {
            snprintf(err, (size_t)err_len, "evaluation stopped by signal %d",
                     stop_signal_pending());
            rc = -EINTR;
        }
        /* a bad token or a signal on any rank: every rank stops at this
         * chunk, before its forward, with that rank's message */
        if (ctx && (rc = comm_agree(ctx->comm, rc, err, err_len)))
            break;
        if (rc)
            break;
        batch b = { .tokens = tok, .nseq = cnt, .step = 0, .seq0 = rank + i0 * P,
                    .global_seqs = n, .n_counted = real > 0 ? real : -1,
                    .seq_ce = seq_ce, .window = win };
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
            sums[3] += seq_ce[i];
            const token_t *t = tok + (size_t)i * (S + 1) + 1; /* the predicted tokens */
            for (int p = 0; d->token_bytes && p < S; p++)
                sums[4] += (double)d->token_bytes[t[p]];
        }
        sums[2] += r.flops_executed * real / cnt; /* the padding's share left out */
    }
    free(tok);
    free(seq_ce);
    free(win);
    if (rc)
        return rc;
    rc = comm_fault(ctx ? ctx->comm : NULL, "eval");
    if (!rc)
        rc = comm_allreduce_sum_double(ctx ? ctx->comm : NULL, sums, 5);
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
    out->flops_per_token = n > 0 ? sums[2] / ((double)n * S) : (double)NAN;
    out->bpb = d->token_bytes && sums[4] > 0.0 ? sums[3] / sums[4] / log(2.0) : (double)NAN;
    return 0;
}
