/* The routed block (routed.h): gather, attention and the inner op on the
 * selected rows, scatter; their backward and decoding. */
#include "mod/routed.h"

#include "core/util/ctx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void routed_set_begin(routed_set *s)
{
    s->n_sel = 0;
    s->nseq = 0;
    s->sum_sq = 0;
    s->seq_start[0] = 0;
}

void routed_set_add(routed_set *s, int row, int32_t pos, float gate)
{
    s->sel[s->n_sel] = row;
    s->pos[s->n_sel] = pos;
    s->gate[s->n_sel] = gate;
    s->n_sel++;
}

void routed_set_next_seq(routed_set *s)
{
    long ns = s->n_sel - s->seq_start[s->nseq];
    s->sum_sq += ns * ns;
    s->seq_start[++s->nseq] = s->n_sel;
}

row_set routed_row_set(const routed_set *s)
{
    row_set rs = { .n = s->n_sel, .nseq = s->nseq, .seq_start = s->seq_start, .pos = s->pos };
    return rs;
}

void routed_gather(const routed_set *s, float *xs, const float *x, int d)
{
    for (int j = 0; j < s->n_sel; j++)
        memcpy(xs + (size_t)j * d, x + (size_t)s->sel[j] * d, (size_t)d * sizeof(float));
}

void routed_scatter(const routed_set *s, float *y, const float *x, const float *ys,
                    const float *xs, int n_rows, int d)
{
    memcpy(y, x, (size_t)n_rows * d * sizeof(float));
    for (int j = 0; j < s->n_sel; j++) {
        float *yr = y + (size_t)s->sel[j] * d, g = s->gate[j];
        const float *o = ys + (size_t)j * d, *i = xs + (size_t)j * d;
        for (int e = 0; e < d; e++)
            yr[e] += g * (o[e] - i[e]);
    }
}

void routed_scatter_backward(const routed_set *s, float *dys, float *dgate, float *dx,
                             const float *dy, const float *ys, const float *xs, int n_rows, int d)
{
    for (long i = 0; i < (long)n_rows * d; i++)
        dx[i] += dy[i]; /* every row's identity path */
    for (int j = 0; j < s->n_sel; j++) {
        const float *dyr = dy + (size_t)s->sel[j] * d;
        const float *o = ys + (size_t)j * d, *in = xs + (size_t)j * d;
        float *g_out = dys + (size_t)j * d, g = s->gate[j], dg = 0.0f;
        for (int e = 0; e < d; e++) {
            g_out[e] = g * dyr[e];
            dg += dyr[e] * (o[e] - in[e]);
        }
        dgate[j] = dg;
    }
}

void routed_gather_backward(const routed_set *s, float *dx, const float *dxs, const float *dys,
                            int d)
{
    /* D = Block(X~) - X~: the block's input gradient minus the direct one */
    for (int j = 0; j < s->n_sel; j++) {
        float *o = dx + (size_t)s->sel[j] * d;
        const float *p = dxs + (size_t)j * d, *q = dys + (size_t)j * d;
        for (int e = 0; e < d; e++)
            o[e] += p[e] - q[e];
    }
}

/* ---- buffers (their layouts: routed_kind.c) ---------------------------- */

static void free_rows(routed_rows *r)
{
    free(r->block);
    memset(r, 0, sizeof(*r));
}

/* Grown to rows, never shrunk. */
static int rows_ensure(routed_rows *r, const model_dims *dims, int f, int rows)
{
    if (rows <= r->cap_rows && r->block)
        return 0;
    free_rows(r);
    rows = rows ? rows : 1;
    buf_plan p = buf_counting(BUF_ALIGN);
    routed_rows_layout(&p, r, dims, f, rows);
    if (buf_alloc(&p, &r->block)) {
        free_rows(r);
        return -ENOMEM;
    }
    routed_rows_layout(&p, r, dims, f, rows);
    return 0;
}

int build_routed_block(routed_block *b, const routed_inner *inner, void *self,
                       const model_dims *dims, int max_seq, int seq_rows)
{
    memset(b, 0, sizeof(*b));
    b->inner = inner;
    b->self = self;
    b->f = inner->mlp ? dims->d_ff : 0;
    b->seq_rows = seq_rows;
    buf_plan p = buf_counting(BUF_ALIGN);
    routed_set_layout(&p, &b->set, max_seq, dims->seq_len);
    if (buf_alloc(&p, &b->set_block) ||
        rows_ensure(&b->rows, dims, b->f, max_seq * seq_rows)) {
        free_routed_block(b);
        return -ENOMEM;
    }
    routed_set_layout(&p, &b->set, max_seq, dims->seq_len);
    return 0;
}

void free_routed_block(routed_block *b)
{
    free(b->set_block);
    free_rows(&b->rows);
    free_kv_cache(&b->kv);
    free_mlp_cache(&b->mlp1);
    free(b->dec);
    free_decode_lanes(&b->lanes);
    memset(b, 0, sizeof(*b));
}

/* ---- compute ---------------------------------------------------------- */

double routed_flops(const routed_block *b, const model_dims *dims)
{
    const routed_set *s = &b->set;
    double f = attn_flops_rows(dims, s->n_sel, s->sum_sq);
    return b->inner->flops ? f + b->inner->flops(dims, s->n_sel) : f;
}

int routed_forward(routed_block *b, float *const *w, const fwd_args *a, float *y,
                   const float *x)
{
    const routed_set *s = &b->set;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len;
    double t0 = mode_now();
    int rc = rows_ensure(&b->rows, dm, b->f, s->n_sel);
    if (rc)
        return rc;
    routed_gather(s, b->rows.xs, x, d);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    if (s->n_sel) {
        row_set rs = routed_row_set(s);
        attn_weights aw = attn_weights_at(w);
        attn_forward(&b->rows.attn, b->rows.h, b->rows.xs, &rs, &aw, a);
    }
    /* the inner op runs on every rank even on no rows: the experts' exchanges */
    rc = b->inner->forward(b, a, w + BLOCK_ATTN_TENSORS);
    if (rc)
        return rc;
    t0 = mode_now();
    routed_scatter(s, y, x, b->rows.ys, b->rows.xs, n, d);
    if (a->flops_executed)
        *a->flops_executed += routed_flops(b, dm);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

int routed_backward(routed_block *b, float *const *w, float *const *dw, const fwd_args *a,
                    float *dx, const float *dy, const float **dgate)
{
    const routed_set *s = &b->set;
    const model_dims *dm = a->dims;
    int d = dm->d_model, n = a->nseq * a->seq_len, ns = s->n_sel;
    routed_ws v;
    buf_plan wp = buf_carving(a->ws);
    routed_ws_layout(&wp, &v, dm, b->f, ns, b->seq_rows);
    double t0 = mode_now();
    routed_scatter_backward(s, v.dys, v.dgate, dx, dy, b->rows.ys, b->rows.xs, n, d);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    *dgate = v.dgate;
    int rc = b->inner->backward(b, a, w + BLOCK_ATTN_TENSORS, dw + BLOCK_ATTN_TENSORS, &v);
    if (rc || !ns)
        return rc;
    row_set rs = routed_row_set(s);
    attn_weights aw = attn_weights_at(w), daw = attn_weights_at(dw);
    memset(v.dxs, 0, (size_t)ns * d * sizeof(float));
    attn_backward(v.dxs, &daw, v.dh, b->rows.xs, &b->rows.attn, &rs, &aw, a, v.sub);
    t0 = mode_now();
    routed_gather_backward(s, dx, v.dxs, v.dys, d);
    mode_time_add(a->ctx, PHASE_ROUTING, t0);
    return 0;
}

int routed_decode_begin(routed_block *b, const model_dims *dims, int max_len)
{
    if (!b->dec) {
        b->dec = malloc(3 * (size_t)dims->d_model * sizeof(float));
        if (!b->dec || (b->f > 0 && build_mlp_cache(&b->mlp1, dims, 1, b->f)))
            return -ENOMEM;
    }
    return kv_cache_begin(&b->kv, dims, max_len);
}

int routed_decode(routed_block *b, float *const *w, const fwd_args *a, float *y, const float *x,
                  int32_t pos, float g)
{
    int d = a->dims->d_model;
    float *h = b->dec, *ys = h + d;
    attn_weights aw = attn_weights_at(w);
    int rc = attn_decode(&b->kv, h, x, pos, &aw, a);
    if (rc)
        return rc;
    rc = b->inner->decode(b, a, w + BLOCK_ATTN_TENSORS, ys, h, pos);
    if (rc < 0)
        return rc;
    for (int e = 0; e < d; e++)
        y[e] = x[e] + g * (ys[e] - x[e]);
    return 0;
}

int routed_decode_lanes(routed_block *b, const model_dims *dims, int max_len, int lanes)
{
    if (!b->inner->decode_rows)
        return -ENOTSUP;
    int rc = decode_lanes_begin(&b->lanes, dims, b->f, max_len, lanes);
    if (!rc && b->inner->decode_lanes)
        rc = b->inner->decode_lanes(b, dims, lanes);
    return rc;
}

int routed_decode_rows(routed_block *b, float *const *w, const fwd_args *a, float *y,
                       const float *x, int n, int32_t pos, const unsigned char *take,
                       const float *g)
{
    decode_lanes *dl = &b->lanes;
    size_t d = (size_t)a->dims->d_model;
    if (n > dl->lanes)
        return -EINVAL;
    int nt = 0; /* the taking rows, gathered in lane order */
    for (int i = 0; i < n; i++) {
        if (!take[i]) {
            if (y != x)
                memcpy(y + i * d, x + i * d, d * sizeof(float));
            continue;
        }
        dl->lane[nt] = i;
        dl->gate[nt] = g[i];
        memcpy(dl->xs + nt * d, x + i * d, d * sizeof(float));
        nt++;
    }
    if (nt == 0)
        return 0;
    attn_weights aw = attn_weights_at(w);
    int rc = attn_decode_rows(dl, dl->h, dl->xs, dl->lane, nt, pos, &aw, a);
    if (!rc)
        rc = b->inner->decode_rows(b, a, w + BLOCK_ATTN_TENSORS, dl->ys, dl->h, dl->lane, nt,
                                   pos);
    if (rc < 0)
        return rc;
    for (int t = 0; t < nt; t++) {
        float *yr = y + (size_t)dl->lane[t] * d;
        const float *xr = dl->xs + t * d, *sr = dl->ys + t * d;
        for (size_t e = 0; e < d; e++)
            yr[e] = xr[e] + dl->gate[t] * (sr[e] - xr[e]);
    }
    return 0;
}

int routed_decode_kv(routed_block *b, float *const *w, const fwd_args *a, const float *x,
                     int32_t pos)
{
    attn_weights aw = attn_weights_at(w);
    return attn_decode_kv(&b->kv, x, pos, &aw, a);
}

/* ---- the dense inner op: RMSNorm and SwiGLU with the residual (mlp_*) -- */

static int dense_forward(routed_block *b, const fwd_args *a, float *const *w)
{
    int n = b->set.n_sel, d = a->dims->d_model;
    if (!n)
        return 0;
    ffn_weights fw = ffn_weights_at(w + 1);
    double t0 = mode_now();
    mlp_forward(&a->mm, &b->rows.mlp, b->rows.ys, b->rows.h, n, w[0], &fw, d, a->dims->d_ff);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    return 0;
}

static int dense_backward(routed_block *b, const fwd_args *a, float *const *w, float *const *dw,
                          const routed_ws *v)
{
    int n = b->set.n_sel, d = a->dims->d_model;
    if (!n)
        return 0;
    ffn_weights fw = ffn_weights_at(w + 1), dfw = ffn_weights_at(dw + 1);
    double t0 = mode_now();
    memset(v->dh, 0, (size_t)n * d * sizeof(float));
    mlp_backward(&a->mm, v->dh, dw[0], &dfw, v->dys, b->rows.h, &b->rows.mlp, n, w[0], &fw, d,
                 a->dims->d_ff, v->sub);
    mode_time_add(a->ctx, PHASE_MATMUL, t0);
    return 0;
}

static double dense_flops(const model_dims *dims, long rows)
{
    return ffn_flops_rows(dims->d_model, dims->d_ff, rows);
}

static int dense_decode(routed_block *b, const fwd_args *a, float *const *w, float *ys,
                        const float *h, int32_t pos)
{
    ffn_weights fw = ffn_weights_at(w + 1);
    mlp_forward(&a->mm, &b->mlp1, ys, h, 1, w[0], &fw, a->dims->d_model, a->dims->d_ff);
    return 0;
}

static int dense_decode_rows(routed_block *b, const fwd_args *a, float *const *w, float *ys,
                             const float *h, const int *lane, int n, int32_t pos)
{
    (void)lane;
    (void)pos;
    ffn_weights fw = ffn_weights_at(w + 1);
    matmul_exec ex = decode_rows_exec(a);
    mlp_forward(&ex, &b->lanes.mlp, ys, h, n, w[0], &fw, a->dims->d_model, a->dims->d_ff);
    return 0;
}

const routed_inner routed_dense = {
    .mlp = true,
    .forward = dense_forward,
    .backward = dense_backward,
    .flops = dense_flops,
    .decode = dense_decode,
    .decode_rows = dense_decode_rows,
};
