/* Counterfactual evaluation (counterfactual.h). */
#include "core/train/counterfactual.h"

#include "core/comm/comm.h"
#include "core/io/runfile.h"
#include "core/train/trainer.h"
#include "core/util/names.h"
#include "core/util/finite.h"
#include "core/util/signals.h"
#include "core/util/student.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int route_check(const model *m, int policy, const unsigned char *layers, bool decoding,
                char *err, int err_len)
{
    int found = 0;
    char kinds[256] = "";
    for (int l = 0; l < m->dims.n_layers; l++) {
        const layer *ly = &m->layers[l];
        unsigned mask = decoding ? ly->ops->decode_routes : ly->ops->routes;
        names_add(kinds, sizeof(kinds), ly->kind->name);
        if (layers && !layers[l])
            continue;
        if (mask & (1u << policy)) {
            found++;
        } else if (layers) {
            snprintf(err, (size_t)err_len, "--routing %s: layer %d (%s) does not take it%s",
                     route_policy_names[policy], l, ly->kind->name,
                     decoding ? " in decoding" : "");
            return -EINVAL;
        }
    }
    if (!found) {
        snprintf(err, (size_t)err_len, "--routing %s: no layer of this model (%s) takes it%s",
                 route_policy_names[policy], kinds, decoding ? " in decoding" : "");
        return -EINVAL;
    }
    return 0;
}

/* ---- the book's sink: a kind's record() arrays into the rows of its windows */

typedef struct book_sink {
    record_sink sink;
    route_book *book;
    int layer;
    const long *rows; /* [nseq] the book row of each sequence, -1 for padding */
    int nseq, rc;
} book_sink;

static float value_of(const void *data, int type, size_t i)
{
    switch (type) {
    case RECORD_UINT8: return (float)((const unsigned char *)data)[i];
    case RECORD_INT32: return (float)((const int32_t *)data)[i];
    default: return ((const float *)data)[i];
    }
}

static int book_put(record_sink *s, const char *name, int type, int ndim,
                    const unsigned long long *dims, const void *data)
{
    book_sink *bs = (book_sink *)s;
    long elems = 1;
    for (int i = 1; i < ndim; i++)
        elems *= (long)dims[i];
    float *base = route_book_array(bs->book, bs->layer, name, elems, type);
    if (!base)
        return bs->rc = -ENOMEM;
    for (int q = 0; q < bs->nseq && q < (int)dims[0]; q++) {
        if (bs->rows[q] < 0)
            continue;
        float *row = base + (size_t)bs->rows[q] * (size_t)elems;
        for (long e = 0; e < elems; e++)
            row[e] = value_of(data, type, (size_t)q * (size_t)elems + (size_t)e);
    }
    return 0;
}

/* Every array of the book summed over the ranks (each row was filled by
 * the one rank that evaluated its window, the others hold zeros). */
static int book_allreduce(route_book *b, comm *cm)
{
    int li, type;
    const char *name;
    long elems;
    float *data;
    long n = route_book_windows(b, NULL);
    for (int k = 0; route_book_entry(b, k, &li, &name, &elems, &type, &data); k++) {
        int rc = comm_allreduce_sum_float(cm, data, (size_t)n * (size_t)elems);
        if (rc)
            return rc;
    }
    return 0;
}

static int allreduce_doubles(comm *cm, double *v, size_t n)
{
    for (size_t o = 0; o < n; o += INT_MAX / 2) {
        size_t c = n - o < (size_t)(INT_MAX / 2) ? n - o : (size_t)(INT_MAX / 2);
        int rc = comm_allreduce_sum_double(cm, v + o, (int)c);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- the passes ------------------------------------------------------------ */

typedef struct cf_work {
    long n, avail;
    int S, C, n_arms;
    long *wins;          /* [n] */
    double *wl[ROUTE_COUNT + 1];   /* [n] each window's mean loss, per arm */
    double *cs[ROUTE_COUNT + 1];   /* [n][C] each window's CE sum per class, per arm */
    double *cn;          /* [n][C] each window's targets per class */
    double flops[ROUTE_COUNT + 1];
    token_t *tok;        /* [max_seq][S+1] */
    double *seq_ce;      /* [max_seq] */
    float *tok_ce;       /* [max_seq][S] */
    long *win, *rows;    /* [max_seq] */
} cf_work;

static void free_work(cf_work *w)
{
    free(w->wins);
    for (int a = 0; a <= ROUTE_COUNT; a++) {
        free(w->wl[a]);
        free(w->cs[a]);
    }
    free(w->cn);
    free(w->tok);
    free(w->seq_ce);
    free(w->tok_ce);
    free(w->win);
    free(w->rows);
}

/* One pass over every window: arm a with plan (NULL: learned); book, when
 * not NULL, gets the decisions, tokens and labels. */
static int run_pass(model *m, mode_ctx *ctx, const dataset *d, fwd_mode mode, cf_work *w, int a,
                    const route_plan *plan, route_book *book, cf_result *out, char *err,
                    int err_len)
{
    int S = w->S, C = w->C, P = ctx ? ctx->size : 1, rank = ctx ? ctx->rank : 0;
    long n = w->n, per_rank = (n + P - 1) / P;
    int rc = 0;
    for (long i0 = 0; i0 < per_rank; i0 += m->max_seq) {
        int cnt = (int)(per_rank - i0 < m->max_seq ? per_rank - i0 : m->max_seq), real = 0;
        for (int i = 0; i < cnt && !rc; i++) {
            long k = rank + (i0 + i) * P;
            real += k < n;
            w->rows[i] = k < n ? k : -1;
            w->win[i] = k < n ? w->wins[k] : w->wins[0];
            rc = dataset_eval_window(d, w->tok + (size_t)i * (S + 1), S, w->win[i], err,
                                     err_len);
        }
        if (!rc && stop_signal_pending()) {
            snprintf(err, (size_t)err_len, "evaluation stopped by signal %d",
                     stop_signal_pending());
            rc = -EINTR;
        }
        if (ctx && (rc = comm_agree(ctx->comm, rc, err, err_len)))
            return rc;
        if (rc)
            return rc;
        batch b = { .tokens = w->tok, .nseq = cnt, .step = 0, .seq0 = rank + i0 * P,
                    .global_seqs = n, .n_counted = real > 0 ? real : -1,
                    .seq_ce = w->seq_ce, .tok_ce = w->tok_ce, .window = w->win, .route = plan };
        fwd_result r;
        if ((rc = model_forward(m, ctx, &b, mode, &r))) {
            if (plan && plan->miss && plan->miss->bad)
                snprintf(err, (size_t)err_len, "--routing %s: %s%slayer_%d/%s holds %.9g "
                         "(window %ld): expected %s",
                         route_policy_names[plan->policy],
                         plan->book ? route_book_source(plan->book) : "",
                         plan->book && route_book_source(plan->book)[0] ? "/" : "",
                         plan->miss->layer, plan->miss->name, plan->miss->value,
                         plan->miss->window, plan->miss->expect);
            else if (plan && plan->miss && plan->miss->any)
                snprintf(err, (size_t)err_len, "--routing %s: the decisions read back have no "
                         "'%s' of layer %d (%ld values) for window %ld",
                         route_policy_names[plan->policy], plan->miss->name, plan->miss->layer,
                         plan->miss->elems, plan->miss->window);
            else
                snprintf(err, (size_t)err_len, "evaluation: forward failed (%s)",
                         strerror(-rc));
            out->local_failure = true;
            return rc;
        }
        for (int i = 0; i < real; i++) {
            long k = w->rows[i];
            w->wl[a][k] = w->seq_ce[i] / S;
            const uint8_t *lab = C ? dataset_eval_labels(d, S, w->win[i]) : NULL;
            for (int j = 0; lab && j < S; j++) {
                int c = lab[j + 1]; /* the class of the predicted token */
                if (c >= C)
                    continue;
                w->cs[a][(size_t)k * C + c] += (double)w->tok_ce[(size_t)i * S + j];
                if (a == 0)
                    w->cn[(size_t)k * C + c] += 1.0;
            }
        }
        w->flops[a] += r.flops_executed * real / cnt;
        if (!book)
            continue;
        fwd_args fa = { .ctx = ctx, .dims = &m->dims, .nseq = cnt, .seq_len = S, .mode = mode,
                        .window = w->win };
        for (int l = 0; l < m->dims.n_layers; l++) {
            const layer *ly = &m->layers[l];
            if (!ly->ops->record)
                continue;
            book_sink bs = { .sink = { .put = book_put }, .book = book, .layer = l,
                             .rows = w->rows, .nseq = cnt };
            if ((rc = ly->ops->record(ly, &fa, &bs.sink)) || (rc = bs.rc)) {
                snprintf(err, (size_t)err_len, "evaluation: out of memory for the decisions");
                out->local_failure = true;
                return rc;
            }
        }
        /* the windows' tokens and labels, for a record file */
        float *tk = route_book_array(book, -1, "tokens", S + 1, RECORD_INT32);
        float *lb = C ? route_book_array(book, -1, "labels", S + 1, RECORD_UINT8) : NULL;
        float *ls = route_book_array(book, -1, "loss", S, RECORD_FLOAT);
        if (!tk || !ls || (C && !lb)) {
            snprintf(err, (size_t)err_len, "evaluation: out of memory for the decisions");
            out->local_failure = true;
            return -ENOMEM;
        }
        for (int i = 0; i < real; i++) {
            const uint8_t *lab = C ? dataset_eval_labels(d, S, w->win[i]) : NULL;
            memcpy(ls + (size_t)w->rows[i] * S, w->tok_ce + (size_t)i * S, S * sizeof(float));
            for (int j = 0; j <= S; j++) {
                tk[(size_t)w->rows[i] * (S + 1) + j] = (float)w->tok[(size_t)i * (S + 1) + j];
                if (lb)
                    lb[(size_t)w->rows[i] * (S + 1) + j] = (float)lab[j];
            }
        }
    }
    return 0;
}

/* ---- the statistics --------------------------------------------------------- */

static double p_of(double mean, double se, double df)
{
    if (!(se > 0.0))
        return mean == 0.0 ? 1.0 : 0.0;
    return df > 0 ? student_t_p_two_sided(mean / se, df) : (double)NAN;
}

static void arm_stats(const cf_work *w, int a, cf_arm *arm)
{
    long n = w->n;
    double s = 0.0, s2 = 0.0, ds = 0.0, ds2 = 0.0;
    arm->identical = 0.0;
    for (long k = 0; k < n; k++) {
        double v = w->wl[a][k], dv = v - w->wl[0][k];
        s += v;
        s2 += v * v;
        ds += dv;
        ds2 += dv * dv;
        arm->identical += !memcmp(&w->wl[a][k], &w->wl[0][k], sizeof(double));
    }
    double mean = s / (double)n, dmean = ds / (double)n;
    double var = n > 1 ? (s2 - (double)n * mean * mean) / (double)(n - 1) : (double)NAN;
    double dvar = n > 1 ? (ds2 - (double)n * dmean * dmean) / (double)(n - 1) : (double)NAN;
    arm->loss = mean;
    arm->se = n > 1 ? sqrt(var > 0.0 ? var : 0.0) / sqrt((double)n) : (double)NAN;
    arm->diff = dmean;
    arm->diff_se = n > 1 ? sqrt(dvar > 0.0 ? dvar : 0.0) / sqrt((double)n) : (double)NAN;
    arm->p = a == 0 ? 1.0 : p_of(dmean, arm->diff_se, (double)(n - 1));
    arm->flops_per_token = w->flops[a] / ((double)n * w->S);
    for (int c = 0; c < w->C; c++) {
        cf_class *cl = &arm->cls[c];
        double tokens = 0.0, sa = 0.0, sd = 0.0, m = 0.0;
        for (long k = 0; k < n; k++) {
            double nk = w->cn[(size_t)k * w->C + c];
            tokens += nk;
            sa += w->cs[a][(size_t)k * w->C + c];
            sd += w->cs[a][(size_t)k * w->C + c] - w->cs[0][(size_t)k * w->C + c];
            m += nk > 0.0;
        }
        cl->tokens = tokens;
        cl->loss = tokens > 0.0 ? sa / tokens : (double)NAN;
        cl->diff = tokens > 0.0 ? sd / tokens : (double)NAN;
        /* the ratio estimator's variance over the windows that hold the class:
         * m / (m - 1) sum_k (d_k - diff n_k)^2 / tokens^2 */
        double q = 0.0;
        for (long k = 0; k < n && tokens > 0.0; k++) {
            double nk = w->cn[(size_t)k * w->C + c];
            double dk = w->cs[a][(size_t)k * w->C + c] - w->cs[0][(size_t)k * w->C + c];
            q += (dk - cl->diff * nk) * (dk - cl->diff * nk);
        }
        cl->diff_se = m > 1.0 ? sqrt(m / (m - 1.0) * q) / tokens : (double)NAN;
        cl->p = a == 0 ? 1.0 : p_of(cl->diff, cl->diff_se, m - 1.0);
    }
}

int evaluate_counterfactual(model *m, mode_ctx *ctx, const dataset *d, const cf_opts *o,
                            cf_result *out, char *err, int err_len)
{
    memset(out, 0, sizeof(*out));
    cf_work w = { .S = m->dims.seq_len, .n_arms = 1 + o->n_policies };
    comm *cm = ctx ? ctx->comm : NULL;
    int rc = eval_windows_agreed(ctx, d, w.S, o->windows, &w.avail, &w.n, err, err_len);
    if (rc)
        return rc;
    const corpus *ec = d->held_out ? d->held_out : d->source;
    w.C = dataset_eval_labels(d, w.S, 0) ? ec->n_label_classes : 0;
    if (w.n < 1 || o->n_policies < 0 || o->n_policies > ROUTE_COUNT) {
        snprintf(err, (size_t)err_len, "evaluation: no window to evaluate");
        return -EINVAL;
    }
    bool shuffle = false;
    for (int p = 0; p < o->n_policies; p++)
        shuffle |= o->policies[p] == ROUTE_SHUFFLE;
    if (shuffle && w.n < 2) {
        snprintf(err, (size_t)err_len, "--routing shuffle: needs two windows or more");
        return -EINVAL;
    }
    size_t ms = (size_t)m->max_seq, S = (size_t)w.S, C = (size_t)(w.C ? w.C : 1);
    w.wins = malloc((size_t)w.n * sizeof(long));
    w.cn = calloc((size_t)w.n * C, sizeof(double));
    w.tok = malloc(ms * (S + 1) * sizeof(token_t));
    w.seq_ce = malloc(ms * sizeof(double));
    w.tok_ce = malloc(ms * S * sizeof(float));
    w.win = malloc(ms * sizeof(long));
    w.rows = malloc(ms * sizeof(long));
    rc = w.wins && w.cn && w.tok && w.seq_ce && w.tok_ce && w.win && w.rows ? 0 : -ENOMEM;
    for (int a = 0; !rc && a < w.n_arms; a++) {
        w.wl[a] = calloc((size_t)w.n, sizeof(double));
        w.cs[a] = calloc((size_t)w.n * C, sizeof(double));
        rc = w.wl[a] && w.cs[a] ? 0 : -ENOMEM;
    }
    for (long k = 0; !rc && k < w.n; k++)
        w.wins[k] = eval_window_index(k, w.n, w.avail);
    route_book *book = NULL;
    if (!rc && (shuffle || o->keep_book))
        rc = build_route_book(&book, w.wins, w.n);
    /* every rank the same outcome before the first forward */
    if (rc)
        snprintf(err, (size_t)err_len, "evaluation: out of memory");
    if (cm && (rc = comm_agree(cm, rc, err, err_len))) {
        free_work(&w);
        free_route_book(&book);
        return rc;
    }
    for (int p = 0; !rc && p < o->n_policies; p++) {
        if (o->policies[p] != ROUTE_REPLAY)
            continue;
        const long *bw;
        long bn = o->replay ? route_book_windows(o->replay, &bw) : 0;
        for (long k = 0; !rc && k < w.n; k++)
            if (!o->replay || route_book_row(o->replay, w.wins[k]) < 0) {
                snprintf(err, (size_t)err_len, "--routing replay: the file holds the decisions "
                         "of %ld windows (%ld to %ld), not window %ld of this evaluation's %ld: "
                         "evaluate the windows it recorded (a run's routing windows are "
                         "--windows N, N its run.routing_windows, on its held-out data)", bn,
                         bn ? bw[0] : 0, bn ? bw[bn - 1] : 0, w.wins[k], w.n);
                rc = -EINVAL;
            }
    }
    route_miss miss = { 0 };
    for (int a = 0; !rc && a < w.n_arms; a++) {
        route_plan plan = { .seed = o->seed, .layers = o->layers, .miss = &miss };
        if (a > 0) {
            plan.policy = o->policies[a - 1];
            plan.book = plan.policy == ROUTE_SHUFFLE ? book
                        : plan.policy == ROUTE_REPLAY ? o->replay
                                                      : NULL;
        }
        rc = run_pass(m, ctx, d, o->mode, &w, a, a ? &plan : NULL, a ? NULL : book, out, err,
                      err_len);
        if (!rc && a == 0 && book && cm)
            rc = book_allreduce(book, cm);
    }
    if (!rc) {
        for (int a = 0; !rc && a < w.n_arms; a++) {
            rc = allreduce_doubles(cm, w.wl[a], (size_t)w.n);
            if (!rc && w.C)
                rc = allreduce_doubles(cm, w.cs[a], (size_t)w.n * C);
        }
        if (!rc && w.C)
            rc = allreduce_doubles(cm, w.cn, (size_t)w.n * C);
        if (!rc)
            rc = allreduce_doubles(cm, w.flops, (size_t)w.n_arms);
        if (rc) {
            snprintf(err, (size_t)err_len, "evaluation: its all-reduce failed (%s)",
                     strerror(-rc));
            out->local_failure = true;
        }
    }
    if (!rc) {
        out->windows = w.n;
        out->n_classes = w.C;
        out->class_names = w.C ? ec->label_names : NULL;
        out->n_arms = w.n_arms;
        for (int a = 0; a < w.n_arms; a++) {
            out->arms[a].policy = a ? o->policies[a - 1] : ROUTE_LEARNED;
            arm_stats(&w, a, &out->arms[a]);
        }
        if (o->keep_book) {
            out->book = book;
            book = NULL;
        }
    }
    free_route_book(&book);
    free_work(&w);
    return rc;
}

/* ---- record files -------------------------------------------------------------- */

int route_book_save(const route_book *b, const char *path, const char *config_text, long step,
                    int seq_len, char *err, int err_len)
{
    run_record *r = NULL;
    int rc = build_run_record(&r, config_text);
    const long *win;
    long n = route_book_windows(b, &win);
    int64_t *w64 = malloc((size_t)n * sizeof(int64_t));
    if (rc || !w64) {
        free(w64);
        free_run_record(&r);
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        return -ENOMEM;
    }
    for (long k = 0; k < n; k++)
        w64[k] = win[k];
    unsigned long long one[1] = { (unsigned long long)n };
    rc = run_record_add_blob(r, "routing/windows", RUN_BLOB_INT64, 1, one, w64, 0);
    free(w64);
    int li, type;
    const char *name;
    long elems;
    float *data;
    for (int k = 0; !rc && route_book_entry(b, k, &li, &name, &elems, &type, &data); k++) {
        size_t total = (size_t)n * (size_t)elems;
        size_t esz = type == RECORD_UINT8 ? 1 : 4;
        void *buf = malloc(total * esz);
        if (!buf) {
            rc = -ENOMEM;
            break;
        }
        for (size_t i = 0; i < total; i++) {
            if (type == RECORD_UINT8)
                ((unsigned char *)buf)[i] = (unsigned char)data[i];
            else if (type == RECORD_INT32)
                ((int32_t *)buf)[i] = (int32_t)data[i];
            else
                ((float *)buf)[i] = data[i];
        }
        char p[160];
        unsigned long long dims[3] = { (unsigned long long)n, (unsigned long long)seq_len,
                                       (unsigned long long)(elems / seq_len) };
        int ndim = elems == seq_len ? 2 : 3;
        if (li < 0) { /* tokens and labels (S + 1 a window), the losses (S) */
            snprintf(p, sizeof(p), "routing/%s", name);
            dims[1] = (unsigned long long)elems;
            ndim = 2;
        } else {
            snprintf(p, sizeof(p), "routing/step_%06ld/layer_%d/%s", step, li, name);
            if (elems % seq_len) {
                dims[1] = (unsigned long long)elems;
                ndim = 2;
            }
        }
        int blob = type == RECORD_UINT8   ? RUN_BLOB_UINT8
                   : type == RECORD_INT32 ? RUN_BLOB_INT32
                                          : RUN_BLOB_FLOAT;
        rc = run_record_add_blob(r, p, blob, ndim, dims, buf, step);
        free(buf);
    }
    if (!rc)
        rc = run_record_write_header(r, path, err, err_len);
    else
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
    free_run_record(&r);
    return rc;
}

static int read_floats(run_reader *rd, const char *path, route_book *b, int li,
                       const char *name, long n, char *err, int err_len)
{
    void *data = NULL;
    int ndim = 0;
    unsigned long long dims[4] = { 0 };
    int rc = run_reader_array(rd, path, H5T_NATIVE_FLOAT, sizeof(float), &data, &ndim, dims,
                              NULL);
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: unreadable (%s)", path, strerror(-rc));
        return rc;
    }
    long elems = 1;
    for (int i = 1; i < ndim; i++)
        elems *= (long)dims[i];
    if (ndim < 2 || (long)dims[0] != n) {
        snprintf(err, (size_t)err_len, "%s: %llu rows for %ld windows", path, dims[0], n);
        free(data);
        return -EINVAL;
    }
    long bad = first_nonfinite(data, (size_t)n * (size_t)elems);
    if (bad >= 0) { /* a score that is not finite would decide a replay */
        snprintf(err, (size_t)err_len, "%s: element %ld is %g, not a finite number", path, bad,
                 (double)((const float *)data)[bad]);
        free(data);
        return -EINVAL;
    }
    float *base = route_book_array(b, li, name, elems, RECORD_FLOAT);
    if (!base) {
        free(data);
        return -ENOMEM;
    }
    memcpy(base, data, (size_t)n * (size_t)elems * sizeof(float));
    free(data);
    return 0;
}

int route_book_load(route_book **out, const char *path, long step, int seq_len, char *err,
                    int err_len)
{
    *out = NULL;
    run_reader *rd = NULL;
    int rc = open_run_reader(&rd, path, err, err_len);
    if (rc)
        return rc;
    void *wv = NULL;
    int ndim = 0;
    unsigned long long dims[4] = { 0 };
    rc = run_reader_array(rd, "routing/windows", H5T_NATIVE_LONG, sizeof(long), &wv, &ndim, dims,
                          NULL);
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: no routing records (routing/windows)", path);
        close_run_reader(&rd);
        return rc == -ENOENT ? -EINVAL : rc;
    }
    long n = (long)dims[0];
    char **names = NULL, **layers = NULL;
    int n_names = 0, n_layers = 0;
    char group[96] = "";
    rc = run_reader_children(rd, "routing", &names, &n_names);
    for (int i = 0; !rc && i < n_names; i++) {
        long s;
        if (sscanf(names[i], "step_%ld", &s) == 1 && (step < 0 || s == step))
            snprintf(group, sizeof(group), "routing/%s", names[i]); /* sorted: the last */
    }
    if (!rc && !group[0]) {
        if (step >= 0)
            snprintf(err, (size_t)err_len, "%s: no routing records of step %ld", path, step);
        else
            snprintf(err, (size_t)err_len, "%s: no routing records", path);
        rc = -EINVAL;
    }
    if (!rc && !(rc = build_route_book(out, wv, n))) {
        char source[640];
        snprintf(source, sizeof(source), "%.500s: %.96s", path, group);
        route_book_set_source(*out, source);
    }
    if (rc == -EINVAL && !err[0])
        snprintf(err, (size_t)err_len, "%s: routing/windows is not increasing", path);
    if (!rc)
        rc = run_reader_children(rd, group, &layers, &n_layers);
    for (int i = 0; !rc && i < n_layers; i++) {
        int l;
        if (sscanf(layers[i], "layer_%d", &l) != 1)
            continue;
        char lg[160], **arrs = NULL;
        int n_arrs = 0;
        snprintf(lg, sizeof(lg), "%s/%s", group, layers[i]);
        rc = run_reader_children(rd, lg, &arrs, &n_arrs);
        for (int j = 0; !rc && j < n_arrs; j++) {
            char p[256];
            snprintf(p, sizeof(p), "%s/%s", lg, arrs[j]);
            rc = read_floats(rd, p, *out, l, arrs[j], n, err, err_len);
        }
        for (int j = 0; j < n_arrs; j++)
            free(arrs[j]);
        free(arrs);
    }
    for (int i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    for (int i = 0; i < n_layers; i++)
        free(layers[i]);
    free(layers);
    free(wv);
    close_run_reader(&rd);
    if (rc)
        free_route_book(out);
    (void)seq_len;
    return rc;
}
