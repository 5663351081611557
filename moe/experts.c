/* Token-choice experts with expert parallelism (see experts.h).  The
 * forward pass, on the rank that holds the tokens ("token side") and on the
 * ranks that compute the experts ("expert side"):
 *   gate: l = m Wg, p = softmax(l), top_k columns (ties to the lower index);
 *   admission per sequence in position order under the expert capacity
 *   (these two, with the router's policies and losses: experts_gate.c);
 *   dispatch: the kept rows go to their expert's rank, sorted by expert;
 *   experts: SwiGLU_e on the rows it received;
 *   combine: outputs go back, y += p_e out.
 * The backward pass sends the output gradients the same way and the input
 * gradients back: the four transfers are one routine, comm_alltoallv. */
#include "moe/experts.h"
#include "moe/experts_state.h"

#include "core/comm/comm.h"
#include "core/kernels/matmul.h"
#include "core/model/lanes.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const int32_t *experts_choices(const experts *ex)
{
    return ex->choice;
}

const float *experts_weights(const experts *ex)
{
    return ex->weight;
}


void free_experts(experts **px)
{
    experts *ex = *px;
    if (!ex)
        return;
    free(ex->rows_block);
    free(ex->assign_block);
    free(ex->recv_block);
    free(ex->send_counts);
    free(ex->recv_counts);
    if (ex->cache)
        for (int e = 0; e < ex->local; e++)
            free_ffn_cache(&ex->cache[e]);
    free(ex->ws);
    free(ex->sh_ws);
    free_ffn_cache(&ex->sh_cache);
    free_ffn_cache(&ex->sh_dec_cache);
    free_ffn_cache(&ex->dec_cache);
    free(ex->lane_block);
    free_ffn_cache(&ex->lane_cache);
    free_ffn_cache(&ex->sh_lane_cache);
    free(ex->fixed_block);
    free(ex);
    *px = NULL;
}

int build_experts(experts **out, const experts_cfg *c, const model_dims *dims, int layer_index)
{
    experts *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return -ENOMEM;
    experts_init(ex, c, dims);
    ex->layer = layer_index;
    buf_plan p = buf_counting(BUF_ALIGN);
    experts_fixed_layout(&p, ex);
    if (buf_alloc(&p, &ex->fixed_block) || build_ffn_cache(&ex->dec_cache, 1, c->d_ff) ||
        (c->shared > 0 && build_ffn_cache(&ex->sh_dec_cache, 1, c->shared * c->d_ff))) {
        free_experts(&ex);
        return -ENOMEM;
    }
    experts_fixed_layout(&p, ex);
    *out = ex;
    return 0;
}

/* Buffers whose size follows the routing, each group one block from its
 * layout: grown (never shrunk), contents not kept.  need: the rows asked
 * for; the block is grown to at least twice what it held (the assignments
 * and received rows, which vary step by step: doubling) or to need (the
 * token rows: at most the batch's). */
static int grow(experts *ex, void **block, int *cap, int need, bool doubling,
                void (*layout)(buf_plan *, experts *, int))
{
    if (need <= *cap && *block)
        return 0;
    int c = need;
    if (doubling) {
        c = need > 2 * *cap ? need : 2 * *cap;
        c = c > 0 ? c : 16; /* never NULL, even when no row moves */
    }
    free(*block);
    *block = NULL;
    *cap = 0;
    buf_plan p = buf_counting(BUF_ALIGN);
    layout(&p, ex, c);
    if (buf_alloc(&p, block))
        return -ENOMEM;
    layout(&p, ex, c);
    *cap = c;
    return 0;
}

static int ensure_rows(experts *ex, int n)
{
    return grow(ex, &ex->rows_block, &ex->cap_rows, n, false, experts_rows_layout);
}

static int ensure_assign(experts *ex, int n)
{
    return grow(ex, &ex->assign_block, &ex->cap_assign, n, true, experts_assign_layout);
}

static int ensure_recv(experts *ex, int n)
{
    return grow(ex, &ex->recv_block, &ex->cap_recv, n, true, experts_recv_layout);
}

static int ensure_ranks(experts *ex, int P)
{
    if (ex->P == P)
        return 0;
    free(ex->send_counts);
    free(ex->recv_counts);
    ex->send_counts = calloc((size_t)P, sizeof(int));
    ex->recv_counts = calloc((size_t)P, sizeof(int));
    ex->P = P;
    return ex->send_counts && ex->recv_counts ? 0 : -ENOMEM;
}

/* The rank that computes expert e for this rank's tokens (experts_held). */
static int owner(const experts_cfg *c, int P, int rank, int e)
{
    if (P <= c->experts)
        return e / (c->experts / P);
    return (rank / c->experts) * c->experts + e; /* the expert's replica in our group */
}

static bool c_learned(const experts *ex)
{
    return ex->c.router == MOE_ROUTER_LEARNED;
}

/* The three matrices of local expert l (expert first + l): the tensors
 * hold this rank's experts only. */
static ffn_weights expert_w(const experts *ex, float *const *w, int l)
{
    size_t df = (size_t)ex->d * ex->c.d_ff;
    int g = ex->slot.w1; /* after the gate, when there is one */
    ffn_weights fw = { .w1 = w[g] + l * df, .w3 = w[g + 1] + l * df, .w2 = w[g + 2] + l * df };
    return fw;
}

static int ensure_cache(experts *ex, int e, int rows)
{
    if (rows <= ex->cache[e].cap_rows)
        return 0;
    free_ffn_cache(&ex->cache[e]);
    int cap = rows < 16 ? 16 : rows + rows / 2;
    return build_ffn_cache(&ex->cache[e], cap, ex->c.d_ff);
}

/* Rows [o0, o0 + cnt) of src, in the experts' gathered order, to back in
 * the order they were received. */
static void to_received(experts *ex, const float *src, int o0, int cnt)
{
    size_t d = (size_t)ex->d;
    for (int o = 0; o < cnt; o++)
        memcpy(ex->back + (size_t)ex->perm[o0 + o] * d, src + (size_t)o * d, d * sizeof(float));
}

/* The rows in back (received order) to the ranks they came from, into dst
 * in the order they were sent: the combine's transfer and its gradient's. */
static int return_rows(experts *ex, const fwd_args *a, float *dst, const char *site)
{
    double t0 = mode_now();
    comm *cm = a->ctx ? a->ctx->comm : NULL;
    int rc = comm_fault(cm, site);
    if (!rc)
        rc = comm_alltoallv(cm, ex->back, ex->recv_counts, dst, ex->send_counts, NULL,
                            (size_t)ex->d * sizeof(float));
    mode_time_add(a->ctx, PHASE_COMM, t0);
    return rc;
}

/* Dispatch: the kept assignments sorted by expert (so by destination
 * rank), rows in order, first choice before second (a counting sort, in
 * time n top_k + E), each row with its expert sent to the expert's rank;
 * what this rank receives lands in ex->recv. */
static int dispatch(experts *ex, const fwd_args *a, const float *m, int n)
{
    const experts_cfg *c = &ex->c;
    comm *cm = a->ctx ? a->ctx->comm : NULL;
    int P = comm_size(cm), rank = comm_rank(cm), d = ex->d, K = c->top_k, E = c->experts, rc;
    double t0 = mode_now();
    int *at = ex->at;
    memset(at, 0, ((size_t)E + 1) * sizeof(int));
    for (int i = 0; i < n * K; i++)
        if (ex->choice[i] >= 0 && ex->choice[i] < E)
            at[ex->choice[i] + 1]++;
    memset(ex->send_counts, 0, (size_t)P * sizeof(int));
    for (int e = 0; e < E; e++) {
        ex->send_counts[owner(c, P, rank, e)] += at[e + 1];
        at[e + 1] += at[e];
    }
    ex->n_assign = at[E];
    if ((rc = ensure_assign(ex, ex->n_assign)))
        return rc;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < K; j++) {
            int e = ex->choice[(size_t)i * K + j];
            if (e < 0 || e >= E)
                continue;
            int k = at[e]++;
            ex->a_row[k] = i;
            ex->a_slot[k] = j;
            float *s = ex->send + (size_t)k * (d + 1);
            memcpy(s, m + (size_t)i * d, (size_t)d * sizeof(float));
            s[d] = (float)e;
        }
    }
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    t0 = mode_now();
    if ((rc = comm_fault(cm, "dispatch")))
        return rc;
    rc = comm_exchange_counts(cm, ex->send_counts, ex->recv_counts);
    ex->n_recv = 0;
    for (int p = 0; !rc && p < P; p++)
        ex->n_recv += ex->recv_counts[p];
    if (!rc)
        rc = ensure_recv(ex, ex->n_recv);
    if (!rc)
        rc = comm_alltoallv(cm, ex->send, ex->send_counts, ex->recv, ex->recv_counts, NULL,
                            (size_t)(d + 1) * sizeof(float));
    mode_time_add(a->ctx, PHASE_COMM, t0);
    return rc;
}

/* The expert side: the received rows gathered by local expert (received
 * order within each: a counting sort), SwiGLU_e on each expert's rows,
 * the outputs back in received order (ex->back). */
static int compute(experts *ex, const fwd_args *a, float *const *w)
{
    const experts_cfg *c = &ex->c;
    int d = ex->d, L = ex->local, *start = ex->exp_start, *at = ex->at, rc = 0;
    double t0 = mode_now();
    memset(start, 0, ((size_t)L + 1) * sizeof(int));
    for (int r = 0; r < ex->n_recv; r++) {
        int l = (int)ex->recv[(size_t)r * (d + 1) + d] - ex->first;
        if (l < 0 || l >= L) /* a row for an expert this rank does not hold */
            return -EPROTO;
        start[l + 1]++;
    }
    for (int l = 0; l < L; l++)
        start[l + 1] += start[l];
    memcpy(at, start, (size_t)L * sizeof(int));
    for (int r = 0; r < ex->n_recv; r++) {
        int o = at[(int)ex->recv[(size_t)r * (d + 1) + d] - ex->first]++;
        ex->perm[o] = r;
        memcpy(ex->xin + (size_t)o * d, ex->recv + (size_t)r * (d + 1), (size_t)d * sizeof(float));
    }
    for (int e = 0; e < L && !rc; e++) {
        int r0 = ex->exp_start[e], cnt = ex->exp_start[e + 1] - r0;
        if (cnt == 0)
            continue;
        if ((rc = ensure_cache(ex, e, cnt)))
            break;
        ffn_weights fw = expert_w(ex, w, e);
        ffn_forward(&a->mm, &ex->cache[e], ex->yout + (size_t)r0 * d, ex->xin + (size_t)r0 * d,
                    cnt, &fw, d, c->d_ff, 0.0f);
    }
    to_received(ex, ex->yout, 0, ex->n_recv);
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    return rc;
}

/* Combine: the outputs back to the ranks of their tokens, y += p_e out. */
static int combine(experts *ex, const fwd_args *a, float *y)
{
    int d = ex->d, K = ex->c.top_k, rc = return_rows(ex, a, ex->outs, "combine");
    if (rc)
        return rc;
    double t0 = mode_now();
    for (int q = 0; q < ex->n_assign; q++) {
        int i = ex->a_row[q];
        float wgt = ex->weight[(size_t)i * K + ex->a_slot[q]];
        float *yr = y + (size_t)i * d;
        const float *o = ex->outs + (size_t)q * d;
        for (int e = 0; e < d; e++)
            yr[e] += wgt * o[e];
    }
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

/* The shared experts as one SwiGLU of shared * d_ff hidden units. */
static ffn_weights shared_w(const experts *ex, float *const *w)
{
    int s = ex->slot.shared;
    ffn_weights fw = { .w1 = w[s], .w3 = w[s + 1], .w2 = w[s + 2] };
    return fw;
}

/* y += shared(m) on every row; in training the shared experts' share of
 * the update, |shared_i| / (|shared_i| + |routed_i|), summed over rows
 * (routed: what combine put in sh_rout, added to y here). */
static int shared_forward(experts *ex, const fwd_args *a, float *y, const float *m, int n,
                          float *const *w)
{
    const experts_cfg *c = &ex->c;
    int d = ex->d, sf = c->shared * c->d_ff, rc;
    bool train = a->mode == FWD_TRAIN;
    double t0 = mode_now();
    if (n > ex->sh_cache.cap_rows) {
        free_ffn_cache(&ex->sh_cache);
        if ((rc = build_ffn_cache(&ex->sh_cache, n, sf)))
            return rc;
    }
    ffn_weights fw = shared_w(ex, w);
    ffn_forward(&a->mm, &ex->sh_cache, ex->sh_out, m, n, &fw, d, sf, 0.0f);
    double share = 0.0;
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)i * d;
        const float *so = ex->sh_out + (size_t)i * d, *ro = ex->sh_rout + (size_t)i * d;
        if (!train) { /* the routed part is in y already: no share to measure */
            for (int e = 0; e < d; e++)
                yr[e] += so[e];
            continue;
        }
        double ss = 0.0, rr = 0.0;
        for (int e = 0; e < d; e++) {
            yr[e] += so[e] + ro[e];
            ss += (double)so[e] * (double)so[e];
            rr += (double)ro[e] * (double)ro[e];
        }
        if (ss + rr > 0.0)
            share += sqrt(ss) / (sqrt(ss) + sqrt(rr));
    }
    if (train)
        ex->sums[experts_stat_sums_count(c) - 1] = share;
    if (a->flops_executed)
        *a->flops_executed += 6.0 * n * d * sf;
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    return 0;
}

int experts_forward(experts *ex, const fwd_args *a, float *y, const float *m, const row_set *rs,
                    float *const *w, int capacity)
{
    comm *cm = a->ctx ? a->ctx->comm : NULL;
    int P = comm_size(cm), n = rs->n, rc;
    if (P != ex->ranks) /* the experts were placed for another rank count */
        return -EINVAL;
    if ((rc = ensure_rows(ex, n)) || (rc = ensure_ranks(ex, P)))
        return rc;
    if ((rc = ex->c.expert_choice ? experts_ec_gate(ex, a, m, rs, w[0], capacity)
                                  : experts_gate(ex, a, m, rs, w, capacity)))
        return rc;
    /* with shared experts in training the routed part apart, for its share */
    bool apart = ex->c.shared > 0 && a->mode == FWD_TRAIN;
    if (apart)
        memset(ex->sh_rout, 0, (size_t)n * ex->d * sizeof(float));
    if ((rc = dispatch(ex, a, m, n)) || (rc = compute(ex, a, w)) ||
        (rc = combine(ex, a, apart ? ex->sh_rout : y)))
        return rc;
    if (ex->c.shared > 0 && (rc = shared_forward(ex, a, y, m, n, w)))
        return rc;
    /* the gate on every row; each kept assignment's SwiGLU (counted on the
     * rank of its token: summed over the ranks, every expert's work) */
    if (a->flops_executed)
        *a->flops_executed += (c_learned(ex) ? 2.0 * n * ex->d * ex->N : 0.0) +
                              (double)ex->n_assign * 6.0 * ex->d * ex->c.d_ff;
    return 0;
}

/* The work space of one expert's backward for cnt rows (its layout). */
static int ensure_ws(experts *ex, int cnt, experts_ws *w)
{
    buf_plan p = buf_counting(sizeof(float));
    experts_ws_layout(&p, w, ex, cnt);
    long n = (long)(p.used / sizeof(float));
    if (n > ex->cap_ws) {
        free(ex->ws);
        ex->ws = malloc((size_t)n * sizeof(float));
        ex->cap_ws = ex->ws ? n : 0;
        if (!ex->ws)
            return -ENOMEM;
    }
    p = buf_carving(ex->ws);
    experts_ws_layout(&p, w, ex, cnt);
    return 0;
}

/* dm += the shared experts' input gradient, their weights' gradients,
 * given dy. */
static int shared_backward(experts *ex, const fwd_args *a, float *dm, const float *dy,
                           const float *m, int n, float *const *w, float *const *dw)
{
    int d = ex->d, sf = ex->c.shared * ex->c.d_ff;
    double t0 = mode_now();
    buf_plan p = buf_counting(sizeof(float));
    ffn_ws f;
    ffn_ws_layout(&p, &f, n, sf);
    long need = (long)(p.used / sizeof(float)) + (long)n * d;
    if (need > ex->cap_sh_ws) {
        free(ex->sh_ws);
        ex->sh_ws = malloc((size_t)need * sizeof(float));
        ex->cap_sh_ws = ex->sh_ws ? need : 0;
        if (!ex->sh_ws)
            return -ENOMEM;
    }
    float *dx = ex->sh_ws + (need - (long)n * d);
    ffn_weights fw = shared_w(ex, w), dfw = shared_w(ex, dw);
    ffn_backward(&a->mm, dx, &dfw, dy, m, &ex->sh_cache, n, &fw, d, sf, ex->sh_ws);
    for (size_t i = 0; i < (size_t)n * d; i++)
        dm[i] += dx[i];
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    return 0;
}

int experts_backward(experts *ex, const fwd_args *a, float *dm, const float *dy, const float *m,
                     const row_set *rs, float *const *w, float *const *dw)
{
    const experts_cfg *c = &ex->c;
    comm *cm = a->ctx ? a->ctx->comm : NULL;
    int d = ex->d, K = c->top_k, N = ex->N, n = rs->n, rc;
    double t0 = mode_now();
    memset(ex->dp, 0, (size_t)n * N * sizeof(float));
    memset(ex->dslot, 0, (size_t)n * K * sizeof(float));
    /* y_i += w out: d out = w dy, d w = <dy, out> */
    for (int q = 0; q < ex->n_assign; q++) {
        int i = ex->a_row[q], j = ex->a_slot[q];
        const float *dyr = dy + (size_t)i * d, *o = ex->outs + (size_t)q * d;
        float wgt = ex->weight[(size_t)i * K + j], dot = 0.0f;
        float *g = ex->grads + (size_t)q * d;
        for (int e = 0; e < d; e++) {
            g[e] = wgt * dyr[e];
            dot += dyr[e] * o[e];
        }
        ex->dslot[(size_t)i * K + j] = dot;
    }
    /* the weights' gradients to the probabilities: w_j = p_cj, or with
     * renormalize w_j = p_cj / s (s the chosen columns' sum): d p_ck =
     * (d w_k - sum_j w_j d w_j) / s */
    for (int i = 0; i < n; i++) {
        const int32_t *ci = ex->col + (size_t)i * K;
        const float *wi = ex->weight + (size_t)i * K, *dsi = ex->dslot + (size_t)i * K;
        float *dpi = ex->dp + (size_t)i * N;
        if (!c->renormalize) {
            for (int j = 0; j < K; j++)
                dpi[ci[j]] += dsi[j];
            continue;
        }
        double sum = 0.0, wd = 0.0;
        for (int j = 0; j < K; j++) {
            sum += (double)ex->probs[(size_t)i * N + ci[j]];
            wd += (double)wi[j] * (double)dsi[j];
        }
        for (int j = 0; j < K && sum > 0.0; j++)
            dpi[ci[j]] += (float)(((double)dsi[j] - wd) / sum);
    }
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    t0 = mode_now();
    /* the gradients of the outputs travel like the rows did */
    rc = comm_fault(cm, "dispatch-grad");
    if (!rc)
        rc = comm_alltoallv(cm, ex->grads, ex->send_counts, ex->back, ex->recv_counts, NULL,
                            (size_t)d * sizeof(float));
    mode_time_add(a->ctx, PHASE_COMM, t0);
    if (rc)
        return rc;
    t0 = mode_now();
    /* expert side: gather dy by expert (yout is free now), backward; every
     * received row belongs to one expert, so back is wholly rewritten */
    for (int o = 0; o < ex->n_recv; o++)
        memcpy(ex->yout + (size_t)o * d, ex->back + (size_t)ex->perm[o] * d,
               (size_t)d * sizeof(float));
    for (int e = 0; e < ex->local && !rc; e++) {
        int r0 = ex->exp_start[e], cnt = ex->exp_start[e + 1] - r0;
        if (cnt == 0)
            continue;
        experts_ws v;
        if ((rc = ensure_ws(ex, cnt, &v)))
            break;
        ffn_weights fw = expert_w(ex, w, e), dfw = expert_w(ex, dw, e);
        ffn_backward(&a->mm, v.dxin, &dfw, ex->yout + (size_t)r0 * d, ex->xin + (size_t)r0 * d,
                     &ex->cache[e], cnt, &fw, d, c->d_ff, v.ffn);
        to_received(ex, v.dxin, r0, cnt);
    }
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    if (rc)
        return rc;
    if ((rc = return_rows(ex, a, ex->grads, "combine-grad")))
        return rc;
    t0 = mode_now();
    for (int q = 0; q < ex->n_assign; q++) {
        float *o = dm + (size_t)ex->a_row[q] * d;
        const float *g = ex->grads + (size_t)q * d;
        for (int e = 0; e < d; e++)
            o[e] += g[e];
    }
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    if (c->shared > 0 && (rc = shared_backward(ex, a, dm, dy, m, n, w, dw)))
        return rc;
    t0 = mode_now();
    if (!c_learned(ex)) { /* random and hash: no gate to train */
        mode_time_add(a->ctx, PHASE_ROUTING, t0);
        return 0;
    }
    /* gate: balance loss through meanP, z-loss through lse, softmax backward */
    for (int b = 0; b < rs->nseq; b++) {
        int r0 = rs->seq_start[b], r1 = rs->seq_start[b + 1], nb = r1 - r0;
        if (nb == 0)
            continue;
        double sc = (double)a->seq_scale;
        for (int e = 0; e < N; e++) {
            float g = (float)(c->balance_weight * N * experts_load_frac(ex, e, r0, r1) / nb * sc);
            for (int i = r0; i < r1; i++)
                ex->dp[(size_t)i * N + e] += g;
        }
        for (int i = r0; i < r1; i++) {
            float *dpi = ex->dp + (size_t)i * N;
            const float *p = ex->probs + (size_t)i * N;
            float dot = 0.0f, zg = (float)(c->z_weight * 2.0 * (double)ex->lse[i] / nb * sc);
            if (c->score == MOE_SCORE_SIGMOID) {
                /* d l = dp p (1 - p) + z-loss's 2 lse softmax(l) / nb */
                const float *l = ex->logit + (size_t)i * N;
                for (int e = 0; e < N; e++)
                    dpi[e] = dpi[e] * p[e] * (1.0f - p[e]) +
                             zg * (float)exp((double)(l[e] - ex->lse[i]));
                continue;
            }
            for (int e = 0; e < N; e++)
                dot += p[e] * dpi[e];
            for (int e = 0; e < N; e++) /* d l = p (dp - <p, dp>) + z-loss's 2 lse p / nb */
                dpi[e] = p[e] * (dpi[e] - dot) + zg * p[e];
            if (c->expert_choice) /* the causal rule's BCE: aux (sigmoid(l) - pick) / nb */
                for (int e = 0; e < N; e++) {
                    double pv = (double)p[e];
                    double l = log(pv > 0.0 ? pv : 1e-45) + (double)ex->lse[i];
                    float pick = ex->choice[(size_t)i * K + e] >= 0 ? 1.0f : 0.0f;
                    dpi[e] += (float)(c->aux_weight * sc / nb) *
                              ((float)(1.0 / (1.0 + exp(-l))) - pick);
                }
        }
    }
    linear_backward(NULL, dm, dw[ex->slot.gate < 0 ? 0 : ex->slot.gate], ex->dp, m,
                    w[ex->slot.gate < 0 ? 0 : ex->slot.gate], n, d, N, 1.0f);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

void experts_decode_reset(experts *ex)
{
    memset(ex->dec_counts, 0, (size_t)ex->N * sizeof(int));
}

int experts_decode(experts *ex, const fwd_args *a, float *y, const float *m, float *const *w,
                   int capacity, int32_t pos)
{
    const experts_cfg *c = &ex->c;
    int d = ex->d, N = ex->N, K = c->top_k, E = c->experts;
    if (ex->local != E) /* decoding computes every expert here */
        return -EINVAL;
    if (pos > 0 && pos % ex->S == 0) /* past the context: each S positions anew */
        experts_decode_reset(ex);
    float *p = ex->dec, lse;
    long seq = a->window ? a->window[0] : a->seq0;
    if (c->expert_choice) { /* the causal rule: every expert with l > 0 */
        linear_forward(NULL, p, m, w[0], 1, d, N, 0.0f);
        lse = experts_lse(p, N);
        int first = E;
        for (int e = 0; e < N; e++) {
            bool take = p[e] > 0.0f;
            float pe = (float)exp((double)(p[e] - lse));
            if (!take)
                continue;
            first = first < E ? first : e;
            ffn_weights fw = expert_w(ex, w, e);
            float *out = ex->dec + N;
            ffn_forward(NULL, &ex->dec_cache, out, m, 1, &fw, d, c->d_ff, 0.0f);
            for (int q = 0; q < d; q++)
                y[q] += pe * out[q];
        }
        return first;
    }
    experts_gate_token(ex, a, p, &lse, m, w, seq, pos);
    for (int j = 0; j < K; j++) {
        int best = ex->dec_col[j];
        /* the same admission as the forward: position order, capacity; the
         * no-op costs nothing and is never dropped */
        if (best == E || ex->dec_counts[best] >= capacity)
            continue;
        ex->dec_counts[best]++;
        ffn_weights fw = expert_w(ex, w, best);
        float *out = ex->dec + N;
        ffn_forward(NULL, &ex->dec_cache, out, m, 1, &fw, d, c->d_ff, 0.0f);
        for (int e = 0; e < d; e++)
            y[e] += ex->dec_weight[j] * out[e];
    }
    if (c->shared > 0) {
        ffn_weights fw = shared_w(ex, w);
        float *out = ex->dec + N;
        ffn_forward(NULL, &ex->sh_dec_cache, out, m, 1, &fw, d, c->shared * c->d_ff, 0.0f);
        for (int e = 0; e < d; e++)
            y[e] += out[e];
    }
    return ex->dec_col[0];
}

/* The most expert slots one token of a batched step can fill: top-k's K,
 * or, under expert choice's causal rule, every expert. */
static int lane_slots(const experts_cfg *c)
{
    return c->expert_choice ? c->experts : c->top_k;
}

int experts_decode_lanes(experts *ex, int lanes)
{
    const experts_cfg *c = &ex->c;
    if (ex->local != c->experts)
        return -EINVAL;
    int N = ex->N, K = lane_slots(c);
    size_t d = (size_t)ex->d, r = (size_t)lanes;
    if (lanes > ex->lanes) {
        free(ex->lane_block);
        free_ffn_cache(&ex->lane_cache);
        free_ffn_cache(&ex->sh_lane_cache);
        ex->lanes = 0;
        size_t ints = r * N + 2 * r * K + r, floats = r * K + 2 * r * d;
        ex->lane_block = malloc(ints * sizeof(int) + floats * sizeof(float));
        if (!ex->lane_block || build_ffn_cache(&ex->lane_cache, lanes, c->d_ff) ||
            (c->shared > 0 && build_ffn_cache(&ex->sh_lane_cache, lanes, c->shared * c->d_ff)))
            return -ENOMEM;
        ex->lane_counts = ex->lane_block;
        ex->lane_row = ex->lane_counts + r * N;
        ex->lane_exp = ex->lane_row + r * K;
        ex->lane_first = ex->lane_exp + r * K;
        ex->lane_w = (float *)(ex->lane_first + r);
        ex->lane_in = ex->lane_w + r * K;
        ex->lane_out = ex->lane_in + r * d;
        ex->lanes = lanes;
    }
    memset(ex->lane_counts, 0, (size_t)ex->lanes * N * sizeof(int));
    return 0;
}

int experts_decode_rows(experts *ex, const fwd_args *a, float *y, const float *m,
                        float *const *w, int capacity, const int *lane, int n, int32_t pos)
{
    const experts_cfg *c = &ex->c;
    int d = ex->d, N = ex->N, K = c->top_k, E = c->experts;
    if (ex->local != E || n > ex->lanes)
        return -EINVAL;
    if (pos > 0 && pos % ex->S == 0) /* past the context: each S positions anew */
        memset(ex->lane_counts, 0, (size_t)ex->lanes * N * sizeof(int));
    int kept = 0;
    for (int i = 0; c->expert_choice && i < n; i++) {
        /* experts_decode's causal rule, row by row: every expert whose
         * logit is positive, weighted by its softmax probability */
        float *p = ex->dec;
        linear_forward(NULL, p, m + (size_t)i * d, w[0], 1, d, N, 0.0f);
        float lse = experts_lse(p, N);
        ex->lane_first[i] = E;
        for (int e = 0; e < N; e++) {
            if (!(p[e] > 0.0f))
                continue;
            ex->lane_first[i] = ex->lane_first[i] < E ? ex->lane_first[i] : e;
            ex->lane_row[kept] = i;
            ex->lane_exp[kept] = e;
            ex->lane_w[kept] = (float)exp((double)(p[e] - lse));
            kept++;
        }
    }
    for (int i = 0; !c->expert_choice && i < n; i++) {
        fwd_args ai = lane_args(a, lane[i]); /* its lane's sequence and token */
        float lse;
        experts_gate_token(ex, &ai, ex->dec, &lse, m + (size_t)i * d, w, ai.seq0, pos);
        int *counts = ex->lane_counts + (size_t)lane[i] * N;
        ex->lane_first[i] = ex->dec_col[0];
        for (int j = 0; j < K; j++) {
            int best = ex->dec_col[j];
            /* experts_decode's admission: the no-op costs nothing */
            if (best == E || counts[best] >= capacity)
                continue;
            counts[best]++;
            ex->lane_row[kept] = i;
            ex->lane_exp[kept] = best;
            ex->lane_w[kept] = ex->dec_weight[j];
            kept++;
        }
    }
    matmul_exec mx = decode_rows_exec(a);
    for (int e = 0; e < E; e++) { /* each expert's rows, one product */
        int cnt = 0;
        for (int q = 0; q < kept; q++)
            if (ex->lane_exp[q] == e)
                memcpy(ex->lane_in + (size_t)cnt++ * d, m + (size_t)ex->lane_row[q] * d,
                       (size_t)d * sizeof(float));
        if (!cnt)
            continue;
        ffn_weights fw = expert_w(ex, w, e);
        ffn_forward(&mx, &ex->lane_cache, ex->lane_out, ex->lane_in, cnt, &fw, d, c->d_ff, 0.0f);
        cnt = 0;
        for (int q = 0; q < kept; q++) {
            if (ex->lane_exp[q] != e)
                continue;
            float *yr = y + (size_t)ex->lane_row[q] * d;
            const float *o = ex->lane_out + (size_t)cnt++ * d;
            for (int k = 0; k < d; k++)
                yr[k] += ex->lane_w[q] * o[k];
        }
    }
    if (c->shared > 0 && !c->expert_choice) { /* as experts_decode: none under expert choice */
        ffn_weights fw = shared_w(ex, w);
        ffn_forward(&mx, &ex->sh_lane_cache, ex->lane_out, m, n, &fw, d, c->shared * c->d_ff,
                    0.0f);
        for (size_t k = 0; k < (size_t)n * d; k++)
            y[k] += ex->lane_out[k];
    }
    return 0;
}

int experts_decode_first(const experts *ex, int row)
{
    return ex->lane_first[row];
}
