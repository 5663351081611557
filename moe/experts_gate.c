/* The experts' routing (experts_gate.h): the gate and its policies
 * (learned, random, hash; expert-choice), admission under the expert
 * capacity, the counterfactual policies of evaluation, the balance and z
 * losses, the statistics of a training forward and the balancing bias.
 * The dispatch to the experts' ranks, their compute and the decode path
 * are experts.c's. */
#include "moe/experts_gate.h"
#include "moe/experts_state.h"

#include "core/comm/comm.h"
#include "core/kernels/matmul.h"
#include "core/rng/pcg32.h"
#include "core/rng/streams.h"
#include "core/util/ctx.h"
#include "mod/router.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void experts_stat_name(const experts_cfg *c, int col, char *buf, int len)
{
    int N = experts_columns(c);
    static const char *const tail[] = { "dropped", "balance_loss", "z_loss", "router_entropy" };
    int bias = c->bias_rate > 0.0 ? c->experts : 0;
    if (col < c->experts)
        snprintf(buf, (size_t)len, "tokens_%d", col);
    else if (col < N)
        snprintf(buf, (size_t)len, "tokens_noop");
    else if (col < N + 4)
        snprintf(buf, (size_t)len, "%s", tail[col - N]);
    else if (col == N + 4)
        snprintf(buf, (size_t)len, "maxvio");
    else if (col < N + 5 + bias)
        snprintf(buf, (size_t)len, "bias_%d", col - N - 5);
    else
        snprintf(buf, (size_t)len, "shared_share");
}

void experts_stat_sums(const experts *ex, double *sums)
{
    memcpy(sums, ex->sums, (size_t)experts_stat_sums_count(&ex->c) * sizeof(double));
}

void experts_stat_columns(const experts_cfg *c, const double *s, double *cols)
{
    int N = experts_columns(c);
    double tokens = s[N + 4], seqs = s[N + 5];
    for (int e = 0; e <= N; e++)
        cols[e] = s[e]; /* kept per column, then dropped: counts over the global batch */
    cols[N + 1] = seqs > 0 ? s[N + 1] / seqs : 0.0;
    cols[N + 2] = tokens > 0 ? s[N + 2] / tokens : 0.0;
    cols[N + 3] = tokens > 0 ? s[N + 3] / tokens : 0.0;
    /* MaxVio over the real experts' chosen assignments, before dropping */
    const double *chosen = s + N + 6;
    double mx = 0.0, all = 0.0;
    for (int e = 0; e < c->experts; e++) {
        mx = chosen[e] > mx ? chosen[e] : mx;
        all += chosen[e];
    }
    cols[N + 4] = all > 0 ? mx / (all / c->experts) - 1.0 : 0.0;
    int at = N + 5;
    const double *more = chosen + c->experts;
    if (c->bias_rate > 0.0) /* each rank added bias x its sequences */
        for (int e = 0; e < c->experts; e++)
            cols[at++] = seqs > 0 ? *more++ / seqs : 0.0;
    if (c->shared > 0)
        cols[at] = tokens > 0 ? *more / tokens : 0.0;
}

/* The log-sum-exp of the logits l[N] (the max taken out, summed in double). */
float experts_lse(const float *l, int N)
{
    float mx = l[0];
    for (int e = 1; e < N; e++)
        mx = l[e] > mx ? l[e] : mx;
    double s = 0.0;
    for (int e = 0; e < N; e++)
        s += exp((double)(l[e] - mx));
    return (float)((double)mx + log(s));
}

/* The chosen columns' weights: their probabilities, divided by their sum
 * with renormalize (a column of -1 adds nothing). */
static void set_weights(const experts_cfg *c, const float *p, const int32_t *col, float *weight)
{
    double sum = 0.0;
    for (int j = 0; j < c->top_k; j++) {
        weight[j] = col[j] >= 0 ? p[col[j]] : 0.0f;
        sum += (double)weight[j];
    }
    if (c->renormalize && sum > 0.0)
        for (int j = 0; j < c->top_k; j++)
            weight[j] = (float)((double)weight[j] / sum);
}

/* One token's gate (MODEL.md, and the [moe] score, bias and renormalize
 * keys): from the logits l[N] in p, their log-sum-exp, the logits kept in
 * logit (NULL: not kept), p = softmax(l) or sigmoid(l), the top_k columns
 * by p + bias (the real experts' bias, the no-op's noop_bias; ties to the
 * lower index) and their weights; used[N] is scratch.  The same code for
 * training and decoding. */
static void gate_row(const experts_cfg *c, float *p, float *logit, float *lse, int N,
                     const float *bias, int32_t *col, float *weight, unsigned char *used)
{
    int K = c->top_k;
    float noop_bias = (float)c->noop_bias; /* 0 but for integrated's no-op column */
    *lse = experts_lse(p, N);
    if (logit)
        memcpy(logit, p, (size_t)N * sizeof(float));
    for (int e = 0; e < N; e++)
        p[e] = c->score == MOE_SCORE_SIGMOID ? (float)(1.0 / (1.0 + exp(-(double)p[e])))
                                             : (float)exp((double)(p[e] - *lse));
    memset(used, 0, (size_t)N);
    for (int j = 0; j < K; j++) {
        int best = -1;
        float bv = 0.0f;
        for (int e = 0; e < N; e++) {
            float v = p[e] + (bias && e < c->experts ? bias[e] : 0.0f);
            if (noop_bias != 0.0f && e == c->experts)
                v += noop_bias;
            if (!used[e] && (best < 0 || v > bv))
                best = e, bv = v;
        }
        used[best] = 1;
        col[j] = best;
    }
    set_weights(c, p, col, weight);
}

/* The global index of sequence b: its evaluation window, else its place in
 * the step's batch. */
static long seq_id(const fwd_args *a, int b)
{
    return a->window ? a->window[b] : a->seq0 + b;
}

/* Hash routing (Hash Layers, Roller et al. 2021): the first K columns of a
 * permutation of the N drawn from the token id, the same for a token
 * everywhere in the run; weights 1/K, probabilities the same at those
 * columns (what the statistics read). */
static void hash_row(const experts *ex, uint64_t seed, token_t tok, float *p, float *lse,
                     int32_t *col, float *weight, int *perm)
{
    int N = ex->N, K = ex->c.top_k;
    pcg32 g;
    pcg32_keyed(&g, seed, PCG_KEY_HASH + (uint64_t)ex->layer, (uint64_t)tok, 0);
    for (int e = 0; e < N; e++) {
        perm[e] = e;
        p[e] = 0.0f;
    }
    for (int j = 0; j < K; j++) {
        int r = j + (int)pcg32_bounded(&g, (uint32_t)(N - j)), t = perm[j];
        perm[j] = perm[r];
        perm[r] = t;
        col[j] = perm[j];
        weight[j] = 1.0f / (float)K;
        p[perm[j]] = weight[j];
    }
    *lse = 0.0f;
}

/* The logits of row i (sequence b, position pos): the learned gate's, or
 * the random router's N(0, 1) draws keyed by seed, step, layer and token. */
static void random_logits(const experts *ex, const fwd_args *a, float *l, long seq, int pos)
{
    pcg32 g;
    pcg32_keyed(&g, a->ctx ? a->ctx->seed : 0, PCG_KEY_MOE_RANDOM + (uint64_t)ex->layer,
                (uint64_t)a->step, (uint64_t)seq * (uint64_t)a->seq_len + (uint64_t)pos);
    for (int e = 0; e < ex->N; e++)
        l[e] = pcg32_normal(&g);
}

/* A counterfactual policy (route.h) on row i's K choices before admission:
 * random real experts in place of each real one (the no-op's choices
 * stay), the no-op never or always; shuffle and replay set the choices
 * after admission (replayed). */
static void counterfactual_row(experts *ex, const route_plan *p, long win, int pos, int i)
{
    const experts_cfg *c = &ex->c;
    int N = ex->N, K = c->top_k, E = c->experts;
    int32_t *col = ex->col + (size_t)i * K;
    float *weight = ex->weight + (size_t)i * K, *pr = ex->probs + (size_t)i * N;
    unsigned char *used = ex->used;
    if (p->policy == ROUTE_NOOP_ALL) {
        for (int j = 0; j < K; j++)
            col[j] = E;
        set_weights(c, pr, col, weight);
        return;
    }
    memset(used, 0, (size_t)N);
    if (p->policy == ROUTE_NOOP_NONE) {
        used[E] = 1; /* the best K real columns */
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!used[e] && (best < 0 || pr[e] > pr[best]))
                    best = e;
            used[best] = 1;
            col[j] = best;
        }
        set_weights(c, pr, col, weight);
        return;
    }
    /* ROUTE_RANDOM: distinct real experts, drawn in choice order */
    pcg32 g;
    pcg32_keyed(&g, p->seed, PCG_KEY_COUNTERFACTUAL + (uint64_t)ex->layer, (uint64_t)win,
                (uint64_t)pos + 1);
    int real = 0;
    for (int j = 0; j < K; j++)
        real += col[j] != E;
    int *perm = ex->perm_scratch;
    for (int e = 0; e < E; e++)
        perm[e] = e;
    for (int j = 0, r = 0; j < K; j++) {
        if (col[j] == E)
            continue;
        int q = r + (int)pcg32_bounded(&g, (uint32_t)(E - r)), t = perm[r];
        perm[r] = perm[q];
        perm[q] = t;
        col[j] = perm[r++];
    }
    set_weights(c, pr, col, weight);
    (void)real;
}

/* Expert-choice (Zhou et al. 2022; docs/kinds/ec.md): p = softmax(l) per
 * token; in training and top-k evaluation expert e takes the `capacity`
 * tokens of each sequence of the highest p_ie (ties to the lower position),
 * in causal evaluation token i goes to the experts with l_ie > 0.  Slot e of
 * token i is expert e's: choice e or -1, weight p_ie.  The causal rule's
 * BCE of sigmoid(l_ie) against the pick is the auxiliary loss. */
/* shuffle, replay: the experts' picks of sequence b read back from the
 * book, slot e of a token e (expert e took it) or -1, any other value
 * refused; weights stay the gate's p. */
static int ec_replay(experts *ex, const fwd_args *a, const row_set *rs, const route_plan *rp,
                     int b)
{
    int E = ex->c.experts;
    long elems = (long)a->seq_len * E;
    const float *src = route_source(rp, ex->layer, "experts", seq_id(a, b), elems, 0, -1);
    if (!src)
        return -ENOENT;
    for (int i = rs->seq_start[b]; i < rs->seq_start[b + 1]; i++)
        for (int e = 0; e < E; e++) {
            float v = src[(size_t)rs->pos[i] * E + e];
            if (v != -1.0f && v != (float)e) {
                char expect[64];
                snprintf(expect, sizeof(expect), "-1 or %d (slot %d is expert %d's)", e, e, e);
                route_note_bad(rp, ex->layer, "experts", seq_id(a, b), elems, (double)v, -1, E - 1,
                               expect);
                return -EINVAL;
            }
            ex->choice[(size_t)i * E + e] = (int32_t)v;
        }
    return 0;
}

int experts_ec_gate(experts *ex, const fwd_args *a, const float *m, const row_set *rs,
                   const float *wg, int capacity)
{
    const experts_cfg *c = &ex->c;
    int n = rs->n, E = c->experts, rc;
    bool train = a->mode == FWD_TRAIN, causal = a->mode == FWD_EVAL_CAUSAL;
    linear_forward(NULL, ex->probs, m, wg, n, ex->d, E, 0.0f);
    for (int i = 0; i < n; i++) {
        float *p = ex->probs + (size_t)i * E;
        ex->lse[i] = experts_lse(p, E);
        for (int e = 0; e < E; e++) {
            ex->col[(size_t)i * E + e] = e;
            ex->choice[(size_t)i * E + e] = causal && p[e] > 0.0f ? e : -1;
            p[e] = (float)exp((double)(p[e] - ex->lse[i]));
            ex->weight[(size_t)i * E + e] = p[e];
        }
    }
    if (train)
        memset(ex->sums, 0, (size_t)experts_stat_sums_count(c) * sizeof(double));
    const route_plan *rp = !train && route_applies(a->route, ex->layer) ? a->route : NULL;
    bool replayed = rp && (rp->policy == ROUTE_SHUFFLE || rp->policy == ROUTE_REPLAY);
    for (int b = 0; b < rs->nseq; b++) {
        int r0 = rs->seq_start[b], nb = rs->seq_start[b + 1] - r0;
        if (!causal && !replayed)
            for (int e = 0; e < E && nb > 0; e++) {
                for (int j = 0; j < nb; j++)
                    ex->ec_scores[j] = ex->probs[(size_t)(r0 + j) * E + e];
                mod_topk(ex->ec_z, ex->ec_scores, nb, capacity < nb ? capacity : nb,
                         ex->ec_heap);
                for (int j = 0; j < nb; j++)
                    ex->choice[(size_t)(r0 + j) * E + e] = ex->ec_z[j] ? e : -1;
            }
        if (replayed && (rc = ec_replay(ex, a, rs, rp, b)))
            return rc;
        if (!train || nb == 0)
            continue;
        double bce = 0.0, ent = 0.0;
        for (int i = r0; i < r0 + nb; i++) {
            int any = 0;
            for (int e = 0; e < E; e++) {
                double pv = (double)ex->probs[(size_t)i * E + e];
                double l = log(pv > 0.0 ? pv : 1e-45) + (double)ex->lse[i];
                bool z = ex->choice[(size_t)i * E + e] >= 0;
                bce += fmax(l, 0.0) + log1p(exp(-fabs(l))) - (z ? l : 0.0);
                ent -= pv > 0.0 ? pv * log(pv) : 0.0;
                ex->sums[e] += z;
                any |= z;
            }
            ex->sums[E] += !any; /* tokens no expert took */
        }
        ex->sums[E + 3] += ent;
        ex->sums[E + 4] += nb;
        ex->sums[E + 5] += 1.0;
        if (a->aux_loss)
            *a->aux_loss += c->aux_weight * bce / nb * (double)a->seq_scale;
    }
    return 0;
}

/* The policies counterfactual_row applies (bottom is depth routing's). */
static bool per_row(const route_plan *p)
{
    return p->policy == ROUTE_RANDOM || p->policy == ROUTE_NOOP_NONE ||
           p->policy == ROUTE_NOOP_ALL;
}

/* The chosen assignments of this forward per column, and their total,
 * summed over the ranks (every rank's training forward calls it): the
 * load fractions of balance_scope = batch and the load the bias follows. */
static int global_load(experts *ex, const fwd_args *a, const row_set *rs)
{
    const experts_cfg *c = &ex->c;
    int N = ex->N, K = c->top_k;
    double *g = ex->global;
    memset(g, 0, ((size_t)N + 1) * sizeof(double));
    for (int i = 0; i < rs->n * K; i++)
        g[ex->col[i]] += 1.0;
    g[N] = (double)rs->n * K;
    double t0 = mode_now();
    int rc = comm_allreduce_sum_double(a->ctx ? a->ctx->comm : NULL, g, N + 1);
    mode_time_add(a->ctx, PHASE_COMM, t0);
    if (!rc)
        for (int e = 0; e < c->experts; e++)
            ex->load[e] += g[e];
    return rc;
}

/* The balance loss's load fraction of column e in a sequence of rows
 * [r0, r1): its own (Switch), or the global batch's. */
double experts_load_frac(const experts *ex, int e, int r0, int r1)
{
    int K = ex->c.top_k;
    if (ex->c.balance_scope == MOE_SCOPE_BATCH)
        return ex->global[ex->N] > 0 ? ex->global[e] / ex->global[ex->N] : 0.0;
    double chosen = 0.0;
    for (int i = r0; i < r1; i++)
        for (int j = 0; j < K; j++)
            chosen += ex->col[(size_t)i * K + j] == e;
    return r1 > r0 ? chosen / ((double)(r1 - r0) * K) : 0.0;
}

/* Gate, top-k and capacity for one row set; fills probs, lse, col, choice,
 * weight; statistics and auxiliary losses in training.  w: the experts'
 * tensors (the gate and the bias read from it). */
int experts_gate(experts *ex, const fwd_args *a, const float *m, const row_set *rs,
                float *const *w, int capacity)
{
    const experts_cfg *c = &ex->c;
    int n = rs->n, N = ex->N, K = c->top_k, E = c->experts;
    const float *bias = ex->slot.bias >= 0 ? w[ex->slot.bias] : NULL;
    if (c->router == MOE_ROUTER_LEARNED)
        /* NULL exec: the gate stays in fp32 under precision = bf16 */
        linear_forward(NULL, ex->probs, m, w[ex->slot.gate], n, ex->d, N, 0.0f);
    for (int b = 0; b < rs->nseq; b++)
        for (int i = rs->seq_start[b]; i < rs->seq_start[b + 1]; i++) {
            float *pi = ex->probs + (size_t)i * N;
            int32_t *ci = ex->col + (size_t)i * K;
            float *wi = ex->weight + (size_t)i * K;
            if (c->router == MOE_ROUTER_HASH) {
                token_t tok = a->tokens ? a->tokens[(size_t)b * a->seq_len + rs->pos[i]] : 0;
                hash_row(ex, a->ctx ? a->ctx->seed : 0, tok, pi, &ex->lse[i], ci, wi,
                         ex->perm_scratch);
                memset(ex->logit + (size_t)i * N, 0, (size_t)N * sizeof(float));
                continue;
            }
            if (c->router == MOE_ROUTER_RANDOM)
                random_logits(ex, a, pi, seq_id(a, b), rs->pos[i]);
            gate_row(c, pi, ex->logit + (size_t)i * N, &ex->lse[i], N, bias, ci, wi, ex->used);
        }
    const route_plan *rp = a->mode != FWD_TRAIN && route_applies(a->route, ex->layer)
                               ? a->route
                               : NULL;
    bool replayed = rp && (rp->policy == ROUTE_SHUFFLE || rp->policy == ROUTE_REPLAY);
    if (rp && per_row(rp))
        for (int b = 0; b < rs->nseq; b++)
            for (int i = rs->seq_start[b]; i < rs->seq_start[b + 1]; i++)
                counterfactual_row(ex, rp, seq_id(a, b), rs->pos[i], i);
    bool train = a->mode == FWD_TRAIN;
    if (train)
        memset(ex->sums, 0, (size_t)experts_stat_sums_count(c) * sizeof(double));
    int rc;
    if (train && (c->bias_rate > 0.0 || c->balance_scope == MOE_SCOPE_BATCH) &&
        (rc = global_load(ex, a, rs)))
        return rc;
    int *count = ex->count;
    for (int b = 0; b < rs->nseq; b++) {
        int r0 = rs->seq_start[b], r1 = rs->seq_start[b + 1], nb = r1 - r0;
        memset(count, 0, (size_t)N * sizeof(int));
        if (replayed) { /* the book's choices as they were admitted (-1 dropped) */
            /* the values this gate reads, each -1 (dropped) or a column:
             * any other is refused (staged's rows that skipped the block
             * hold -2 and are not read) */
            long elems = (long)a->seq_len * K;
            const float *src = route_source(rp, ex->layer, "experts", seq_id(a, b), elems, 0,
                                            -1);
            if (!src)
                return -ENOENT;
            for (int i = r0; i < r1; i++) {
                for (int j = 0; j < K; j++) {
                    float v = src[(size_t)rs->pos[i] * K + j];
                    if (!(v >= -1.0f && v <= (float)(N - 1) && v == floorf(v))) {
                        route_note_bad(rp, ex->layer, "experts", seq_id(a, b), elems, (double)v, -1,
                                       N - 1, NULL);
                        return -EINVAL;
                    }
                    int e = (int)v;
                    ex->choice[(size_t)i * K + j] = e;
                    ex->col[(size_t)i * K + j] = e >= 0 ? e : ex->col[(size_t)i * K + j];
                }
                /* weights as the gate gives them (renormalised over the
                 * columns chosen, dropped or not), a dropped one none */
                set_weights(c, ex->probs + (size_t)i * N, ex->col + (size_t)i * K,
                            ex->weight + (size_t)i * K);
                for (int j = 0; j < K; j++)
                    if (ex->choice[(size_t)i * K + j] < 0)
                        ex->weight[(size_t)i * K + j] = 0.0f;
            }
            continue;
        }
        /* admission in position order, first choice before second: a token's
         * fate never depends on later tokens */
        for (int i = r0; i < r1; i++) {
            for (int j = 0; j < K; j++) {
                int e = ex->col[(size_t)i * K + j];
                bool keep = e == E || count[e] < capacity; /* the no-op never drops */
                count[e] += keep;
                ex->choice[(size_t)i * K + j] = keep ? e : -1;
                if (train) {
                    ex->sums[keep ? e : N] += 1.0;
                    if (e < E)
                        ex->sums[N + 6 + e] += 1.0; /* chosen: MaxVio's load */
                }
            }
        }
        if (!train || nb == 0)
            continue;
        /* Switch balance loss N sum_e frac_e meanP_e, frac before dropping */
        double bl = 0.0, z = 0.0, ent = 0.0;
        for (int e = 0; e < N; e++) {
            double meanp = 0.0;
            for (int i = r0; i < r1; i++)
                meanp += (double)ex->probs[(size_t)i * N + e];
            bl += experts_load_frac(ex, e, r0, r1) * meanp / nb;
        }
        bl *= N;
        for (int i = r0; i < r1; i++) {
            z += (double)ex->lse[i] * (double)ex->lse[i];
            double tot = 0.0;
            for (int e = 0; e < N; e++)
                tot += (double)ex->probs[(size_t)i * N + e];
            for (int e = 0; e < N && tot > 0.0; e++) { /* of the probabilities normalised */
                double p = (double)ex->probs[(size_t)i * N + e] / tot;
                ent -= p > 0.0 ? p * log(p) : 0.0;
            }
        }
        ex->sums[N + 1] += bl;
        ex->sums[N + 2] += z;
        ex->sums[N + 3] += ent;
        ex->sums[N + 4] += nb;
        ex->sums[N + 5] += 1.0;
        if (a->aux_loss && c->router == MOE_ROUTER_LEARNED) /* no gate: nothing to balance */
            *a->aux_loss += (c->balance_weight * bl + c->z_weight * z / nb) * (double)a->seq_scale;
    }
    if (train && bias) { /* the bias as it chose, times this rank's sequences */
        double *sb = ex->sums + N + 6 + E;
        for (int e = 0; e < E; e++)
            sb[e] = (double)bias[e] * rs->nseq;
    }
    return 0;
}

/* Decoding's routing of one row m[d] (sequence seq, position pos): the
 * router's logits in p[N], their log-sum-exp, the chosen columns and their
 * weights in ex->dec_col and ex->dec_weight, a counterfactual policy's row
 * rule applied as the forward applies it. */
void experts_gate_token(experts *ex, const fwd_args *a, float *p, float *lse, const float *m,
                        float *const *w, long seq, int32_t pos)
{
    const experts_cfg *c = &ex->c;
    int d = ex->d, N = ex->N;
    if (c->router == MOE_ROUTER_HASH) {
        hash_row(ex, a->ctx ? a->ctx->seed : 0, a->tokens ? a->tokens[0] : 0, p, lse,
                 ex->dec_col, ex->dec_weight, ex->perm_scratch);
    } else {
        if (c->router == MOE_ROUTER_LEARNED)
            linear_forward(NULL, p, m, w[0], 1, d, N, 0.0f);
        else
            random_logits(ex, a, p, seq, pos);
        gate_row(c, p, NULL, lse, N, ex->slot.bias >= 0 ? w[ex->slot.bias] : NULL, ex->dec_col,
                 ex->dec_weight, ex->used);
    }
    if (route_applies(a->route, ex->layer) && per_row(a->route)) {
        /* the same row rules as the forward's, on a one-row copy */
        int32_t *col = ex->col;
        float *weight = ex->weight, *probs = ex->probs;
        ex->col = ex->dec_col;
        ex->weight = ex->dec_weight;
        ex->probs = p;
        counterfactual_row(ex, a->route, seq, pos, 0);
        ex->col = col;
        ex->weight = weight;
        ex->probs = probs;
    }
}

void experts_step_end(experts *ex, float *const *w, bool updated)
{
    const experts_cfg *c = &ex->c;
    if (ex->slot.bias < 0)
        return;
    if (!updated) { /* a skipped step moves nothing */
        memset(ex->load, 0, (size_t)c->experts * sizeof(double));
        return;
    }
    float *bias = w[ex->slot.bias];
    double mean = 0.0;
    for (int e = 0; e < c->experts; e++)
        mean += ex->load[e];
    mean /= c->experts;
    /* b_e += u sign(mean load - load_e): an expert that took more than its
     * share is chosen less next step, one that took less more */
    for (int e = 0; e < c->experts; e++) {
        double err = mean - ex->load[e];
        bias[e] += (float)(c->bias_rate * (err > 0.0 ? 1.0 : err < 0.0 ? -1.0 : 0.0));
    }
    memset(ex->load, 0, (size_t)c->experts * sizeof(double));
}
