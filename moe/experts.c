/* Token-choice experts with expert parallelism (see experts.h).  The
 * forward pass, on the rank that holds the tokens ("token side") and on the
 * ranks that compute the experts ("expert side"):
 *   gate: l = m Wg, p = softmax(l), top_k columns (ties to the lower index);
 *   admission per sequence in position order under the expert capacity;
 *   dispatch: the kept rows go to their expert's rank, sorted by expert;
 *   experts: SwiGLU_e on the rows it received;
 *   combine: outputs go back, y += p_e out.
 * The backward pass sends the output gradients the same way and the input
 * gradients back: the four transfers are one routine, comm_alltoallv. */
#include "moe/experts.h"

#include "core/comm/comm.h"
#include "core/kernels/matmul.h"
#include "core/util/ctx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct experts {
    experts_cfg c;
    int d, N;
    /* expert parallelism (model_dims ranks, rank): this rank holds and
     * computes experts [first, first + local) */
    int ranks, rank, first, local;
    /* token side, per local row */
    int cap_rows;
    float *probs;       /* [rows][N] softmax of the gate logits */
    float *lse;         /* [rows] logsumexp of the gate logits */
    int32_t *col;       /* [rows][top_k] chosen column */
    int32_t *choice;    /* [rows][top_k] chosen column, -1 when dropped */
    float *weight;      /* [rows][top_k] p of the chosen column */
    float *dp;          /* [rows][N] gradient work */
    /* dispatch: kept assignments to real experts, sorted by expert */
    int n_assign, cap_assign;
    int *a_row, *a_slot;
    float *send;        /* [assign][d+1]: the row, then its expert */
    float *outs;        /* [assign][d] expert outputs, then their gradients */
    float *grads;       /* [assign][d] */
    int P;
    int *send_counts, *recv_counts; /* [P] */
    /* expert side */
    int n_recv, cap_recv;
    float *recv;        /* [recv][d+1] */
    float *xin, *yout;  /* [recv][d] gathered by expert */
    float *back;        /* [recv][d] in received order */
    int *perm;          /* [recv] received index of each gathered row */
    int *exp_start;     /* [local+1] gathered rows of each local expert */
    int *at;            /* [E+1] counting-sort cursors, by expert */
    ffn_cache *cache;   /* [local] */
    float *ws;          /* ffn_backward work space */
    long cap_ws;
    /* statistics of the last training forward */
    double *sums;
    int *count;         /* [N] admission counters */
    /* decoding */
    int *dec_counts;    /* [N] admitted so far in the sequence being decoded */
    float *dec;         /* [N + d] */
    int32_t *dec_col;   /* [top_k] */
    float *dec_weight;  /* [top_k] */
    unsigned char *used; /* [N] top-k's chosen columns */
    ffn_cache dec_cache;
};

int experts_capacity(const experts_cfg *c, int rows_per_seq)
{
    if (c->capacity_factor <= 0.0)
        return INT32_MAX;
    return (int)ceil(c->capacity_factor * c->top_k * rows_per_seq / c->experts);
}

int experts_stat_sums_count(const experts_cfg *c)
{
    return experts_columns(c) + 6; /* kept per column, dropped, balance, z, entropy, tokens, seqs */
}

int experts_stat_cols_count(const experts_cfg *c)
{
    return experts_columns(c) + 4;
}

void experts_stat_name(const experts_cfg *c, int col, char *buf, int len)
{
    int N = experts_columns(c);
    static const char *const tail[] = { "dropped", "balance_loss", "z_loss", "router_entropy" };
    if (col < c->experts)
        snprintf(buf, (size_t)len, "tokens_%d", col);
    else if (col < N)
        snprintf(buf, (size_t)len, "tokens_noop");
    else
        snprintf(buf, (size_t)len, "%s", tail[col - N]);
}

void experts_stat_sums(const experts *x, double *sums)
{
    memcpy(sums, x->sums, (size_t)experts_stat_sums_count(&x->c) * sizeof(double));
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
}

const int32_t *experts_choices(const experts *x)
{
    return x->choice;
}

const float *experts_weights(const experts *x)
{
    return x->weight;
}

double experts_flops(const experts_cfg *c, const model_dims *dims, long rows)
{
    double d = dims->d_model;
    return 2.0 * rows * d * experts_columns(c) +
           (double)rows * c->top_k * 6.0 * d * c->d_ff;
}

int experts_tensors(tensor_desc *out, const experts_cfg *c, const model_dims *dims)
{
    if (!out)
        return EXPERTS_TENSORS;
    int d = dims->d_model, f = c->d_ff, E = c->experts;
    float out_std = 0.02f / sqrtf(2.0f * (float)dims->n_layers);
    out[0] = make_tensor_desc("gate", 2, d, experts_columns(c), 0, INIT_NORMAL, 0.02f);
    out[1] = make_tensor_desc("experts_w1", 3, E, d, f, INIT_NORMAL, 0.02f);
    out[2] = make_tensor_desc("experts_w3", 3, E, d, f, INIT_NORMAL, 0.02f);
    out[3] = make_tensor_desc("experts_w2", 3, E, f, d, INIT_NORMAL, out_std);
    for (int i = 1; i <= 3; i++)
        out[i].expert_dim = true;
    return EXPERTS_TENSORS;
}

void free_experts(experts **px)
{
    experts *x = *px;
    if (!x)
        return;
    free(x->probs);
    free(x->lse);
    free(x->col);
    free(x->choice);
    free(x->weight);
    free(x->dp);
    free(x->a_row);
    free(x->a_slot);
    free(x->send);
    free(x->outs);
    free(x->grads);
    free(x->send_counts);
    free(x->recv_counts);
    free(x->recv);
    free(x->xin);
    free(x->yout);
    free(x->back);
    free(x->perm);
    free(x->exp_start);
    free(x->at);
    if (x->cache)
        for (int e = 0; e < x->local; e++)
            free_ffn_cache(&x->cache[e]);
    free(x->cache);
    free(x->ws);
    free(x->sums);
    free(x->count);
    free(x->dec_counts);
    free(x->dec);
    free(x->dec_col);
    free(x->dec_weight);
    free(x->used);
    free_ffn_cache(&x->dec_cache);
    free(x);
    *px = NULL;
}

int build_experts(experts **out, const experts_cfg *c, const model_dims *dims)
{
    experts *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->c = *c;
    x->d = dims->d_model;
    x->N = experts_columns(c);
    x->ranks = dims->ranks > 1 ? dims->ranks : 1;
    x->rank = dims->ranks > 1 ? dims->rank : 0;
    x->first = experts_first(c->experts, x->ranks, x->rank);
    x->local = experts_local(c->experts, x->ranks);
    x->exp_start = calloc((size_t)x->local + 1, sizeof(int));
    x->at = calloc((size_t)c->experts + 1, sizeof(int));
    x->cache = calloc((size_t)x->local, sizeof(ffn_cache));
    x->sums = calloc((size_t)experts_stat_sums_count(c), sizeof(double));
    x->count = calloc((size_t)x->N, sizeof(int));
    x->dec_counts = calloc((size_t)x->N, sizeof(int));
    x->dec = malloc((size_t)(x->N + x->d) * sizeof(float));
    x->dec_col = malloc((size_t)c->top_k * sizeof(int32_t));
    x->dec_weight = malloc((size_t)c->top_k * sizeof(float));
    x->used = calloc((size_t)x->N, 1);
    if (!x->exp_start || !x->at || !x->cache || !x->sums || !x->count || !x->dec_counts ||
        !x->dec || !x->dec_col || !x->dec_weight || !x->used ||
        build_ffn_cache(&x->dec_cache, 1, c->d_ff)) {
        free_experts(&x);
        return -ENOMEM;
    }
    *out = x;
    return 0;
}

double experts_bytes(const experts_cfg *c, const model_dims *dims, long rows)
{
    double n = (double)rows, d = dims->d_model, f = c->d_ff, N = experts_columns(c), K = c->top_k;
    int P = dims->ranks > 1 ? dims->ranks : 1, L = experts_local(c->experts, P);
    double assign = n * K; /* every assignment to a real expert kept */
    /* probs dp [rows][N], lse [rows], col choice weight [rows][top_k] */
    double gate = 4.0 * n * (2.0 * N + 1.0 + 3.0 * K);
    /* a_row a_slot, send [d+1], outs grads [d] per assignment */
    double dispatch = assign * (8.0 + 4.0 * (3.0 * d + 1.0));
    /* recv [d+1], xin yout back [d], perm per received row; the caches
     * a1 a3 g [f]; backward work for the busiest local expert: 3 f + d */
    double received = assign;
    double expert_side = received * (4.0 * (4.0 * d + 1.0) + 4.0) + received * 12.0 * f +
                         received / L * 4.0 * (3.0 * f + d);
    /* counters, decoding's one row */
    double fixed = 4.0 * (2.0 * (c->experts + 1.0) + 3.0 * N + d + 3.0 * f + 2.0 * K) + 8.0 * 10;
    return gate + dispatch + expert_side + fixed;
}

/* Buffers whose size follows the routing: grown (never shrunk) together,
 * contents not kept. */
static int regrow(int n, int *cap, int count, void ***bufs, const size_t *sizes)
{
    if (n <= *cap && *cap > 0)
        return 0;
    int c = n > 2 * *cap ? n : 2 * *cap;
    c = c > 0 ? c : 16; /* never NULL, even when no row moves */
    *cap = 0;
    for (int i = 0; i < count; i++) {
        free(*bufs[i]);
        *bufs[i] = malloc((size_t)c * sizes[i] + 1);
        if (!*bufs[i])
            return -ENOMEM;
    }
    *cap = c;
    return 0;
}

static int ensure_assign(experts *x, int n)
{
    size_t d = (size_t)x->d;
    void **bufs[] = { (void **)&x->a_row, (void **)&x->a_slot, (void **)&x->send,
                      (void **)&x->outs, (void **)&x->grads };
    const size_t sizes[] = { sizeof(int), sizeof(int), (d + 1) * sizeof(float),
                             d * sizeof(float), d * sizeof(float) };
    return regrow(n, &x->cap_assign, 5, bufs, sizes);
}

static int ensure_recv(experts *x, int n)
{
    size_t d = (size_t)x->d;
    void **bufs[] = { (void **)&x->recv, (void **)&x->xin, (void **)&x->yout, (void **)&x->back,
                      (void **)&x->perm };
    const size_t sizes[] = { (d + 1) * sizeof(float), d * sizeof(float), d * sizeof(float),
                             d * sizeof(float), sizeof(int) };
    return regrow(n, &x->cap_recv, 5, bufs, sizes);
}

static int ensure_rows(experts *x, int n)
{
    if (n <= x->cap_rows)
        return 0;
    int cap = n, K = x->c.top_k, N = x->N;
    free(x->probs);
    free(x->lse);
    free(x->col);
    free(x->choice);
    free(x->weight);
    free(x->dp);
    x->probs = malloc((size_t)cap * N * sizeof(float));
    x->lse = malloc((size_t)cap * sizeof(float));
    x->col = malloc((size_t)cap * K * sizeof(int32_t));
    x->choice = malloc((size_t)cap * K * sizeof(int32_t));
    x->weight = malloc((size_t)cap * K * sizeof(float));
    x->dp = malloc((size_t)cap * N * sizeof(float));
    x->cap_rows = cap;
    if (!x->probs || !x->lse || !x->col || !x->choice || !x->weight || !x->dp) {
        x->cap_rows = 0;
        return -ENOMEM;
    }
    return 0;
}

static int ensure_ranks(experts *x, int P)
{
    if (x->P == P)
        return 0;
    free(x->send_counts);
    free(x->recv_counts);
    x->send_counts = calloc((size_t)P, sizeof(int));
    x->recv_counts = calloc((size_t)P, sizeof(int));
    x->P = P;
    return x->send_counts && x->recv_counts ? 0 : -ENOMEM;
}

/* The rank that computes expert e for this rank's tokens (experts_held). */
static int owner(const experts_cfg *c, int P, int rank, int e)
{
    if (P <= c->experts)
        return e / (c->experts / P);
    return (rank / c->experts) * c->experts + e; /* the expert's replica in our group */
}

/* One token's gate (MODEL.md): p = softmax(l) over the N columns in place
 * of the logits l[N], its log-sum-exp, and the top_k columns by probability
 * (ties to the lower index) with their weights p_e; used[N] is scratch.
 * The same code for training and decoding. */
static void gate_row(float *p, float *lse, int N, int K, int32_t *col, float *weight,
                     unsigned char *used)
{
    float mx = p[0];
    for (int e = 1; e < N; e++)
        mx = p[e] > mx ? p[e] : mx;
    double s = 0.0;
    for (int e = 0; e < N; e++)
        s += exp((double)(p[e] - mx));
    *lse = (float)((double)mx + log(s));
    for (int e = 0; e < N; e++)
        p[e] = (float)exp((double)(p[e] - *lse));
    memset(used, 0, (size_t)N);
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < N; e++)
            if (!used[e] && (best < 0 || p[e] > p[best]))
                best = e;
        used[best] = 1;
        col[j] = best;
        weight[j] = p[best];
    }
}

/* Gate, top-k and capacity for one row set; fills probs, lse, col, choice,
 * weight; statistics and auxiliary losses in training. */
static void gate(experts *x, const fwd_args *a, const float *m, const row_set *rs,
                 const float *wg, int capacity)
{
    const experts_cfg *c = &x->c;
    int n = rs->n, N = x->N, K = c->top_k, E = c->experts;
    /* NULL pool: the gate stays in fp32 under precision = bf16 */
    linear_forward(NULL, x->probs, m, wg, n, x->d, N, 0.0f);
    for (int i = 0; i < n; i++)
        gate_row(x->probs + (size_t)i * N, &x->lse[i], N, K, x->col + (size_t)i * K,
                 x->weight + (size_t)i * K, x->used);
    bool train = a->mode == FWD_TRAIN;
    if (train)
        memset(x->sums, 0, (size_t)experts_stat_sums_count(c) * sizeof(double));
    int *count = x->count;
    for (int b = 0; b < rs->nseq; b++) {
        int r0 = rs->seq_start[b], r1 = rs->seq_start[b + 1], nb = r1 - r0;
        memset(count, 0, (size_t)N * sizeof(int));
        /* admission in position order, first choice before second: a token's
         * fate never depends on later tokens */
        for (int i = r0; i < r1; i++) {
            for (int j = 0; j < K; j++) {
                int e = x->col[(size_t)i * K + j];
                bool keep = e == E || count[e] < capacity; /* the no-op never drops */
                count[e] += keep;
                x->choice[(size_t)i * K + j] = keep ? e : -1;
                if (train)
                    x->sums[keep ? e : N] += 1.0;
            }
        }
        if (!train || nb == 0)
            continue;
        /* Switch balance loss N sum_e frac_e meanP_e, frac before dropping */
        double bl = 0.0, z = 0.0, ent = 0.0;
        for (int e = 0; e < N; e++) {
            double chosen = 0.0, meanp = 0.0;
            for (int i = r0; i < r1; i++) {
                meanp += (double)x->probs[(size_t)i * N + e];
                for (int j = 0; j < K; j++)
                    chosen += x->col[(size_t)i * K + j] == e;
            }
            bl += chosen / ((double)nb * K) * meanp / nb;
        }
        bl *= N;
        for (int i = r0; i < r1; i++) {
            z += (double)x->lse[i] * (double)x->lse[i];
            for (int e = 0; e < N; e++) {
                double p = (double)x->probs[(size_t)i * N + e];
                ent -= p > 0.0 ? p * log(p) : 0.0;
            }
        }
        x->sums[N + 1] += bl;
        x->sums[N + 2] += z;
        x->sums[N + 3] += ent;
        x->sums[N + 4] += nb;
        x->sums[N + 5] += 1.0;
        if (a->aux_loss)
            *a->aux_loss += (c->balance_weight * bl + c->z_weight * z / nb) * (double)a->seq_scale;
    }
}

/* The three matrices of local expert l (expert first + l): the tensors
 * hold this rank's experts only. */
static ffn_weights expert_w(const experts *x, float *const *w, int l)
{
    size_t df = (size_t)x->d * x->c.d_ff;
    ffn_weights fw = { .w1 = w[1] + l * df, .w3 = w[2] + l * df, .w2 = w[3] + l * df };
    return fw;
}

static int ensure_cache(experts *x, int e, int rows)
{
    if (rows <= x->cache[e].cap_rows)
        return 0;
    free_ffn_cache(&x->cache[e]);
    int cap = rows < 16 ? 16 : rows + rows / 2;
    return build_ffn_cache(&x->cache[e], cap, x->c.d_ff);
}

/* Rows [o0, o0 + cnt) of src, in the experts' gathered order, to back in
 * the order they were received. */
static void to_received(experts *x, const float *src, int o0, int cnt)
{
    size_t d = (size_t)x->d;
    for (int o = 0; o < cnt; o++)
        memcpy(x->back + (size_t)x->perm[o0 + o] * d, src + (size_t)o * d, d * sizeof(float));
}

/* The rows in back (received order) to the ranks they came from, into dst
 * in the order they were sent: the combine's transfer and its gradient's. */
static int return_rows(experts *x, const fwd_args *a, float *dst, const char *site)
{
    double t0 = mode_now();
    comm *cm = a->ctx ? a->ctx->comm : NULL;
    int rc = comm_fault(cm, site);
    if (!rc)
        rc = comm_alltoallv(cm, x->back, x->recv_counts, dst, x->send_counts, NULL,
                            (size_t)x->d * sizeof(float));
    mode_time_add(a->ctx, PHASE_COMM, t0);
    return rc;
}

int experts_forward(experts *x, const fwd_args *a, float *y, const float *m, const row_set *rs,
                    float *const *w, int capacity)
{
    const experts_cfg *c = &x->c;
    comm *cm = a->ctx ? a->ctx->comm : NULL;
    int P = comm_size(cm), rank = comm_rank(cm), d = x->d, K = c->top_k, E = c->experts;
    int n = rs->n, rc;
    double t0 = mode_now();
    if (P != x->ranks) /* the experts were placed for another rank count */
        return -EINVAL;
    if ((rc = ensure_rows(x, n)) || (rc = ensure_ranks(x, P)))
        return rc;
    gate(x, a, m, rs, w[0], capacity);

    /* dispatch order: by expert (so by destination rank), rows in order,
     * first choice before second: a counting sort, in time n top_k + E */
    int *at = x->at;
    memset(at, 0, ((size_t)E + 1) * sizeof(int));
    for (int i = 0; i < n * K; i++)
        if (x->choice[i] >= 0 && x->choice[i] < E)
            at[x->choice[i] + 1]++;
    memset(x->send_counts, 0, (size_t)P * sizeof(int));
    for (int e = 0; e < E; e++) {
        x->send_counts[owner(c, P, rank, e)] += at[e + 1];
        at[e + 1] += at[e];
    }
    x->n_assign = at[E];
    if ((rc = ensure_assign(x, x->n_assign)))
        return rc;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < K; j++) {
            int e = x->choice[(size_t)i * K + j];
            if (e < 0 || e >= E)
                continue;
            int k = at[e]++;
            x->a_row[k] = i;
            x->a_slot[k] = j;
            float *s = x->send + (size_t)k * (d + 1);
            memcpy(s, m + (size_t)i * d, (size_t)d * sizeof(float));
            s[d] = (float)e;
        }
    }
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    t0 = mode_now();
    if ((rc = comm_fault(cm, "dispatch")))
        return rc;
    rc = comm_exchange_counts(cm, x->send_counts, x->recv_counts);
    x->n_recv = 0;
    for (int p = 0; !rc && p < P; p++)
        x->n_recv += x->recv_counts[p];
    if (!rc)
        rc = ensure_recv(x, x->n_recv);
    if (!rc)
        rc = comm_alltoallv(cm, x->send, x->send_counts, x->recv, x->recv_counts, NULL,
                            (size_t)(d + 1) * sizeof(float));
    mode_time_add(a->ctx, PHASE_COMM, t0);
    if (rc)
        return rc;

    /* expert side: gather by local expert (received order within each: a
     * counting sort), SwiGLU_e, back to received order */
    t0 = mode_now();
    int L = x->local, *start = x->exp_start;
    memset(start, 0, ((size_t)L + 1) * sizeof(int));
    for (int r = 0; r < x->n_recv; r++) {
        int l = (int)x->recv[(size_t)r * (d + 1) + d] - x->first;
        if (l < 0 || l >= L) /* a row for an expert this rank does not hold */
            return -EPROTO;
        start[l + 1]++;
    }
    for (int l = 0; l < L; l++)
        start[l + 1] += start[l];
    memcpy(at, start, (size_t)L * sizeof(int));
    for (int r = 0; r < x->n_recv; r++) {
        int o = at[(int)x->recv[(size_t)r * (d + 1) + d] - x->first]++;
        x->perm[o] = r;
        memcpy(x->xin + (size_t)o * d, x->recv + (size_t)r * (d + 1), (size_t)d * sizeof(float));
    }
    double flops = 0.0;
    for (int e = 0; e < L && !rc; e++) {
        int r0 = x->exp_start[e], cnt = x->exp_start[e + 1] - r0;
        if (cnt == 0)
            continue;
        if ((rc = ensure_cache(x, e, cnt)))
            break;
        ffn_weights fw = expert_w(x, w, e);
        ffn_forward(a->pool, &x->cache[e], x->yout + (size_t)r0 * d, x->xin + (size_t)r0 * d,
                    cnt, &fw, d, c->d_ff, 0.0f);
    }
    to_received(x, x->yout, 0, x->n_recv);
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    if (rc)
        return rc;
    if ((rc = return_rows(x, a, x->outs, "combine")))
        return rc;

    /* combine: y += p_e out */
    t0 = mode_now();
    for (int q = 0; q < x->n_assign; q++) {
        int i = x->a_row[q];
        float wgt = x->weight[(size_t)i * K + x->a_slot[q]];
        float *yr = y + (size_t)i * d;
        const float *o = x->outs + (size_t)q * d;
        for (int e = 0; e < d; e++)
            yr[e] += wgt * o[e];
    }
    flops = 2.0 * n * d * x->N + (double)x->n_assign * 6.0 * d * c->d_ff;
    if (a->flops_executed)
        *a->flops_executed += flops;
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

static int ensure_ws(experts *x, long n)
{
    if (n <= x->cap_ws)
        return 0;
    free(x->ws);
    x->ws = malloc((size_t)n * sizeof(float));
    x->cap_ws = x->ws ? n : 0;
    return x->ws ? 0 : -ENOMEM;
}

int experts_backward(experts *x, const fwd_args *a, float *dm, const float *dy, const float *m,
                     const row_set *rs, float *const *w, float *const *dw)
{
    const experts_cfg *c = &x->c;
    comm *cm = a->ctx ? a->ctx->comm : NULL;
    int d = x->d, K = c->top_k, N = x->N, n = rs->n, rc;
    double t0 = mode_now();
    memset(x->dp, 0, (size_t)n * N * sizeof(float));
    /* y_i += p out: d out = p dy, d p = <dy, out> */
    for (int q = 0; q < x->n_assign; q++) {
        int i = x->a_row[q], j = x->a_slot[q];
        const float *dyr = dy + (size_t)i * d, *o = x->outs + (size_t)q * d;
        float wgt = x->weight[(size_t)i * K + j], dot = 0.0f;
        float *g = x->grads + (size_t)q * d;
        for (int e = 0; e < d; e++) {
            g[e] = wgt * dyr[e];
            dot += dyr[e] * o[e];
        }
        x->dp[(size_t)i * N + x->col[(size_t)i * K + j]] += dot;
    }
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    t0 = mode_now();
    /* the gradients of the outputs travel like the rows did */
    rc = comm_fault(cm, "dispatch-grad");
    if (!rc)
        rc = comm_alltoallv(cm, x->grads, x->send_counts, x->back, x->recv_counts, NULL,
                            (size_t)d * sizeof(float));
    mode_time_add(a->ctx, PHASE_COMM, t0);
    if (rc)
        return rc;
    t0 = mode_now();
    /* expert side: gather dy by expert (yout is free now), backward; every
     * received row belongs to one expert, so back is wholly rewritten */
    for (int o = 0; o < x->n_recv; o++)
        memcpy(x->yout + (size_t)o * d, x->back + (size_t)x->perm[o] * d,
               (size_t)d * sizeof(float));
    for (int e = 0; e < x->local && !rc; e++) {
        int r0 = x->exp_start[e], cnt = x->exp_start[e + 1] - r0;
        if (cnt == 0)
            continue;
        if ((rc = ensure_ws(x, 3L * cnt * c->d_ff + (long)cnt * d)))
            break;
        float *dxin = x->ws + 3L * cnt * c->d_ff;
        ffn_weights fw = expert_w(x, w, e), dfw = expert_w(x, dw, e);
        ffn_backward(a->pool, dxin, &dfw, x->yout + (size_t)r0 * d, x->xin + (size_t)r0 * d,
                     &x->cache[e], cnt, &fw, d, c->d_ff, x->ws);
        to_received(x, dxin, r0, cnt);
    }
    mode_time_add(a->ctx, PHASE_EXPERTS, t0);
    if (rc)
        return rc;
    if ((rc = return_rows(x, a, x->grads, "combine-grad")))
        return rc;
    t0 = mode_now();
    for (int q = 0; q < x->n_assign; q++) {
        float *o = dm + (size_t)x->a_row[q] * d;
        const float *g = x->grads + (size_t)q * d;
        for (int e = 0; e < d; e++)
            o[e] += g[e];
    }
    /* gate: balance loss through meanP, z-loss through lse, softmax backward */
    for (int b = 0; b < rs->nseq; b++) {
        int r0 = rs->seq_start[b], r1 = rs->seq_start[b + 1], nb = r1 - r0;
        if (nb == 0)
            continue;
        double sc = (double)a->seq_scale;
        for (int e = 0; e < N; e++) {
            double chosen = 0.0;
            for (int i = r0; i < r1; i++)
                for (int j = 0; j < K; j++)
                    chosen += x->col[(size_t)i * K + j] == e;
            float g = (float)(c->balance_weight * N * chosen / ((double)nb * K) / nb * sc);
            for (int i = r0; i < r1; i++)
                x->dp[(size_t)i * N + e] += g;
        }
        for (int i = r0; i < r1; i++) {
            float *dpi = x->dp + (size_t)i * N;
            const float *p = x->probs + (size_t)i * N;
            float dot = 0.0f, zg = (float)(c->z_weight * 2.0 * (double)x->lse[i] / nb * sc);
            for (int e = 0; e < N; e++)
                dot += p[e] * dpi[e];
            for (int e = 0; e < N; e++) /* d l = p (dp - <p, dp>) + z-loss's 2 lse p / nb */
                dpi[e] = p[e] * (dpi[e] - dot) + zg * p[e];
        }
    }
    linear_backward(NULL, dm, dw[0], x->dp, m, w[0], n, d, N, 1.0f);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

void experts_decode_reset(experts *x)
{
    memset(x->dec_counts, 0, (size_t)x->N * sizeof(int));
}

int experts_decode(experts *x, const fwd_args *a, float *y, const float *m, float *const *w,
                   int capacity)
{
    const experts_cfg *c = &x->c;
    int d = x->d, N = x->N, K = c->top_k, E = c->experts;
    if (x->local != E) /* decoding computes every expert here */
        return -EINVAL;
    float *p = x->dec, lse;
    linear_forward(NULL, p, m, w[0], 1, d, N, 0.0f);
    gate_row(p, &lse, N, K, x->dec_col, x->dec_weight, x->used);
    for (int j = 0; j < K; j++) {
        int best = x->dec_col[j];
        /* the same admission as the forward: position order, capacity; the
         * no-op costs nothing and is never dropped */
        if (best == E || x->dec_counts[best] >= capacity)
            continue;
        x->dec_counts[best]++;
        ffn_weights fw = expert_w(x, w, best);
        float *out = x->dec + N;
        ffn_forward(NULL, &x->dec_cache, out, m, 1, &fw, d, c->d_ff, 0.0f);
        for (int e = 0; e < d; e++)
            y[e] += x->dec_weight[j] * out[e];
    }
    (void)a;
    return x->dec_col[0];
}
