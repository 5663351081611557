/* Early exit (exit.h, docs/kinds/exit.md).  For every row x_i:
 *     u_i = RMSNorm_exit(x_i);  logits_i = u_i tok_emb^T (the tied head);
 * the layer passes x through unchanged.  Training: weight * CE(logits_i,
 * target_i) averaged as the model's loss is, into the auxiliary losses.
 * Evaluation and decoding: a token still in the stack leaves here when its
 * confidence passes the threshold (max p > t, entropy < t, or
 * KL(previous exit's p || p) < t); its head input becomes u_i. */
#include "mod/exit.h"
#include "mod/exit_state.h"

#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"
#include "core/kernels/parallel.h"
#include "core/model/lanes.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void exit_free(layer *l)
{
    exit_state *s = l->state;
    if (!s)
        return;
    free(s->block);
    free(s);
    l->state = NULL;
}

static int exit_build(layer *l, const model_dims *dims, int max_seq)
{
    exit_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    l->state = s;
    buf_plan p = buf_counting(BUF_ALIGN);
    exit_layout(&p, s, dims, max_seq);
    if (buf_alloc(&p, &s->block)) {
        exit_free(l);
        return -ENOMEM;
    }
    exit_layout(&p, s, dims, max_seq);
    if (!l->shared) { /* built outside a model (kind.h layer shared) */
        exit_free(l);
        return -EINVAL;
    }
    exit_shared_layout(s, l->shared, dims, max_seq);
    return 0;
}

/* logp[V] = log softmax(logits). */
static void log_softmax(float *logp, const float *logits, int V)
{
    float mx = logits[0];
    for (int v = 1; v < V; v++)
        mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++)
        sum += exp((double)(logits[v] - mx));
    float lse = (float)((double)mx + log(sum));
    for (int v = 0; v < V; v++)
        logp[v] = logits[v] - lse;
}

/* The previous exit point's log-probabilities of row i, or NULL (this is
 * the first exit point, or the token had left before it: not read then). */
static const float *previous(const exit_state *s, const model_dims *dims, bool dec, size_t i)
{
    const exit_state *p = s->prev;
    int V = dims->vocab;
    return !p ? NULL : dec ? p->dec + dims->d_model + V : p->logp + i * (size_t)V;
}

/* The confidence of logp[V] (and whether it passes); prev may be NULL. */
static bool confident(const exit_params *p, const float *logp, const float *prev, int V,
                      float *conf)
{
    double c = 0.0;
    if (p->confidence == EXIT_MAX) {
        float mx = logp[0];
        for (int v = 1; v < V; v++)
            mx = logp[v] > mx ? logp[v] : mx;
        c = exp((double)mx);
        *conf = (float)c;
        return c > p->threshold;
    }
    if (p->confidence == EXIT_ENTROPY) {
        for (int v = 0; v < V; v++)
            c -= exp((double)logp[v]) * (double)logp[v];
        *conf = (float)c;
        return c < p->threshold;
    }
    if (!prev) { /* divergence: nothing to compare with at the first exit (-1) */
        *conf = -1.0f;
        return false;
    }
    for (int v = 0; v < V; v++)
        c += exp((double)prev[v]) * ((double)prev[v] - (double)logp[v]);
    *conf = (float)c;
    return c < p->threshold;
}

/* Evaluation's rule on n rows whose u and logits are computed: each row
 * still in the stack whose confidence passes leaves here (left[i], its
 * head input u_i); logp and conf kept for every row. */
static void judge_rows(exit_state *s, const exit_params *p, const model_dims *dm, int n)
{
    int d = dm->d_model, V = dm->vocab;
    for (int i = 0; i < n; i++) {
        float *lp = s->logp + (size_t)i * V;
        log_softmax(lp, s->logits + (size_t)i * V, V);
        s->left[i] = 0;
        s->conf[i] = 0.0f;
        if (!s->active[i])
            continue;
        if (confident(p, lp, previous(s, dm, false, (size_t)i), V, &s->conf[i])) {
            s->active[i] = 0;
            s->left[i] = 1;
            memcpy(s->head_in + (size_t)i * d, s->u + (size_t)i * d, (size_t)d * sizeof(float));
        }
    }
}

static int exit_forward(layer *l, const fwd_args *a, float *y, const float *x)
{
    exit_state *s = l->state;
    const exit_params *p = exit_params_of(&l->spec);
    const model_dims *dm = a->dims;
    int d = dm->d_model, V = dm->vocab, n = a->nseq * a->seq_len;
    memcpy(y, x, (size_t)n * d * sizeof(float));
    double t0 = mode_now();
    rmsnorm_forward_pool(a->mm.pool, s->u, s->rstd, x, l->w[0], n, d);
    matmul_pool(&a->mm, s->logits, V, s->u, d, false, s->tok_emb, d, true, n, V, d, 0.0f);
    if (a->flops_executed)
        *a->flops_executed += 2.0 * n * (double)d * V;
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    if (a->mode == FWD_TRAIN) {
        /* the loss, and the logits turned into its gradient for backward */
        float scale = (float)(p->weight * (double)a->seq_scale / a->seq_len);
        double ce = cross_entropy(s->logits, s->logits, s->targets, n, V, scale);
        s->sums[0] = ce;
        s->sums[1] = n;
        if (a->aux_loss)
            *a->aux_loss += p->weight * ce * (double)a->seq_scale / a->seq_len;
        return 0;
    }
    judge_rows(s, p, dm, n);
    return 0;
}

static int exit_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x)
{
    exit_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model, V = dm->vocab, n = a->nseq * a->seq_len;
    float *du = a->ws;
    for (size_t i = 0; i < (size_t)n * d; i++)
        dx[i] += dy[i]; /* the stream passes through */
    /* s->logits holds d loss / d logits: d u = dlogits tok_emb, d tok_emb += dlogits^T u */
    matmul_pool(&a->mm, du, d, s->logits, V, false, s->tok_emb, d, false, n, d, V, 0.0f);
    matmul_pool(&a->mm, s->dtok_emb, d, s->logits, V, true, s->u, d, false, V, d, n, 1.0f);
    rmsnorm_backward_pool(a->mm.pool, dx, l->dw[0], du, x, l->w[0], s->rstd, n, d);
    return 0;
}

static int exit_record(const layer *l, const fwd_args *a, record_sink *sink)
{
    const exit_state *s = l->state;
    route_decision d = { .nseq = a->nseq, .seq_len = a->seq_len, .exited = s->left,
                         .confidence = s->conf };
    return route_decision_record(&d, sink);
}

static int exit_stat_count(const layer *l, int *n_sums)
{
    *n_sums = 2;
    return 1;
}

static void exit_stat_name(const layer *l, int col, char *buf, int len)
{
    snprintf(buf, (size_t)len, "exit_ce");
}

static void exit_stat_sums(const layer *l, double *sums)
{
    const exit_state *s = l->state;
    memcpy(sums, s->sums, sizeof(s->sums));
}

static void exit_stat_columns(const layer *l, const double *m, double *cols)
{
    cols[0] = m[1] > 0 ? m[0] / m[1] : 0.0;
}

static int exit_decode_begin(layer *l, const model_dims *dims, int max_len)
{
    return 0;
}

static int exit_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos)
{
    exit_state *s = l->state;
    const exit_params *p = exit_params_of(&l->spec);
    const model_dims *dm = a->dims;
    int d = dm->d_model, V = dm->vocab;
    float *u = s->dec, *logits = u + d, *logp = logits + V, rstd, conf;
    memcpy(y, x, (size_t)d * sizeof(float));
    /* a token that left at an earlier exit point is not judged again: the
     * forward skips it, and its head input stays the one it left with */
    if (!s->active[0])
        return 0;
    rmsnorm_forward(u, &rstd, x, l->w[0], 1, d);
    matmul(logits, V, u, d, false, s->tok_emb, d, true, 1, V, d, 0.0f);
    /* logits' storage is then this row's log-probabilities' (the next exit reads them) */
    log_softmax(logp, logits, V);
    memcpy(logits, logp, (size_t)V * sizeof(float));
    if (!confident(p, logp, previous(s, dm, true, 0), V, &conf))
        return 0;
    s->active[0] = 0;
    memcpy(s->head_in, u, (size_t)d * sizeof(float));
    return 1;
}

/* Batched decoding keeps its lanes in the rows of a forward (the shared
 * head_in and active, u, logits, logp): at most that many lanes. */
static int exit_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes)
{
    (void)dims;
    (void)max_len;
    const exit_state *s = l->state;
    return lanes <= s->rows ? 0 : -E2BIG;
}

/* exit_decode on n lanes: the rows still in the stack judged as in
 * evaluation (the previous exit point's rows for divergence); taken[i]: the
 * token left here.  The lead exit point then keeps the rows that left
 * frozen (exit_stack, STACK_LAYER). */
static int exit_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n,
                            int32_t pos, unsigned char *taken)
{
    (void)pos;
    exit_state *s = l->state;
    const model_dims *dm = a->dims;
    int d = dm->d_model, V = dm->vocab;
    if (n > s->rows)
        return -EINVAL;
    memcpy(y, x, (size_t)n * d * sizeof(float));
    matmul_exec ex = decode_rows_exec(a);
    rmsnorm_forward_pool(ex.pool, s->u, s->rstd, x, l->w[0], n, d);
    matmul_pool(&ex, s->logits, V, s->u, d, false, s->tok_emb, d, true, n, V, d, 0.0f);
    judge_rows(s, exit_params_of(&l->spec), dm, n);
    memcpy(taken, s->left, (size_t)n);
    return 0;
}

/* The stack's points (kind.h stack_event).  When built: the previous exit
 * point (the nearest earlier layer of this kind), whether this is the
 * first, the tied head and the targets.  In evaluation and decoding the
 * first exit point does, for every exit point, what a token that left
 * needs: all rows in the stack at the start; after every layer, the rows
 * of the tokens that left keep their state (their keys and values are
 * read from it); the head reads their head_in. */
static int exit_stack(layer *l, const fwd_args *a, const stack_call *c)
{
    exit_state *s = l->state;
    if (c->event == STACK_BUILT) {
        s->prev = NULL;
        s->lead = true;
        for (int k = l->index - 1; k >= 0; k--) {
            if (c->layers[k].kind != l->kind)
                continue;
            if (!s->prev)
                s->prev = c->layers[k].state;
            s->lead = false;
        }
        s->tok_emb = c->tok_emb;
        s->dtok_emb = c->dtok_emb;
        s->targets = c->targets;
        return 0;
    }
    if (!s->lead || a->mode == FWD_TRAIN)
        return 0;
    size_t d = (size_t)a->dims->d_model;
    int left = 0;
    switch (c->event) {
    case STACK_BEGIN:
        memset(s->active, 1, (size_t)c->rows);
        break;
    case STACK_LAYER: /* a token that left: its state frozen */
        for (int i = 0; i < c->rows; i++) {
            if (c->left)
                c->left[i] = !s->active[i];
            if (!s->active[i]) {
                memcpy(c->y + i * d, c->x + i * d, d * sizeof(float));
                left++;
            }
        }
        break;
    case STACK_HEAD: /* its head input its exit's */
        for (int i = 0; i < c->rows; i++)
            if (!s->active[i])
                memcpy(c->y + i * d, s->head_in + i * d, d * sizeof(float));
        break;
    case STACK_BUILT:
        break;
    }
    return left;
}

const kind_ops exit_ops = {
    .kind = &exit_kind,
    .build = exit_build,
    .free = exit_free,
    .forward = exit_forward,
    .backward = exit_backward,
    .decode_begin = exit_decode_begin,
    .decode = exit_decode,
    .decode_lanes = exit_decode_lanes,
    .decode_rows = exit_decode_rows,
    .record = exit_record,
    .stat_count = exit_stat_count,
    .stat_name = exit_stat_name,
    .stat_sums = exit_stat_sums,
    .stat_columns = exit_stat_columns,
    .stack = exit_stack,
};
