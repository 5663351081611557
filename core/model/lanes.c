/* Batched decoding's lanes (lanes.h): a key-value cache a lane, the rows'
 * products shared. */
#include "core/model/lanes.h"
#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void free_decode_lanes(decode_lanes *dl)
{
    for (int i = 0; dl->kv && i < dl->lanes; i++)
        free_kv_cache(&dl->kv[i]);
    free(dl->kv);
    free_mlp_cache(&dl->mlp);
    free(dl->u); /* the [rows][d] buffers, rstd, gate, pos and lane: one block */
    free(dl->sc);
    memset(dl, 0, sizeof(*dl));
}

static int lanes_begin(decode_lanes *dl, const model_dims *dims, int f, int max_len, int lanes,
                       int kv_len)
{
    if (lanes < 1 || max_len < 1)
        return -EINVAL;
    if (dl->lanes < lanes || dl->f != f || dl->sc_floats < (long)dims->n_heads * max_len ||
        (dl->kv && dl->kv[0].cap < kv_len)) {
        const decode_lanes *read_from = dl->read_from;
        free_decode_lanes(dl);
        dl->read_from = read_from;
        size_t d = (size_t)dims->d_model, r = (size_t)lanes;
        dl->kv = calloc(r, sizeof(kv_cache));
        dl->sc_floats = (long)dims->n_heads * max_len;
        dl->sc = malloc((size_t)dl->sc_floats * sizeof(float));
        /* eight [rows][d] buffers, then rstd, gate (floats), pos, lane */
        dl->u = malloc(r * (8 * d + 2) * sizeof(float) + r * (sizeof(int32_t) + sizeof(int)));
        if (!dl->kv || !dl->u || !dl->sc || (f > 0 && build_mlp_cache(&dl->mlp, dims, lanes, f))) {
            free_decode_lanes(dl);
            return -ENOMEM;
        }
        dl->lanes = lanes;
        dl->f = f;
        float *p = dl->u;
        float **bufs[] = { &dl->u, &dl->q, &dl->k, &dl->v, &dl->att, &dl->h, &dl->xs, &dl->ys };
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++, p += r * d)
            *bufs[i] = p;
        dl->rstd = p;
        dl->gate = p + r;
        dl->pos = (int32_t *)(p + 2 * r);
        dl->lane = (int *)(dl->pos + r);
    }
    for (int i = 0; i < dl->lanes; i++) {
        int rc = kv_cache_begin(&dl->kv[i], dims, kv_len);
        if (rc)
            return rc;
    }
    return 0;
}

int decode_lanes_begin(decode_lanes *dl, const model_dims *dims, int f, int max_len, int lanes)
{
    return lanes_begin(dl, dims, f, max_len, lanes, max_len);
}

int decode_lanes_begin_reader(decode_lanes *dl, const model_dims *dims, int f, int max_len,
                              int lanes)
{
    return lanes_begin(dl, dims, f, max_len, lanes, 1);
}

fwd_args lane_args(const fwd_args *a, int lane)
{
    fwd_args r = *a;
    r.window = NULL;
    r.seq0 = a->seq0 + lane;
    r.tokens = a->tokens ? a->tokens + lane : NULL;
    return r;
}

matmul_exec decode_rows_exec(const fwd_args *a)
{
    return (matmul_exec){ .pool = a->mm.pool, .bf16 = false };
}

/* An attention that keeps its probabilities (block.h attn_core), for one
 * lane's row q[d]: attn_decode's scores and core decode, head by head, in
 * the lane's cache's own scratch; then att[d]. */
static void core_attend(kv_cache *c, float *att, const float *q, int lane, const model_dims *dm)
{
    int d = dm->d_model, dh = dm->d_head, n = c->n;
    float scale = 1.0f / sqrtf((float)dh);
    for (int hd = 0; hd < dm->n_heads; hd++) {
        matmul(c->scores, n, q + hd * dh, d, false, c->k + hd * dh, d, true, 1, n, dh, 0.0f);
        c->core->decode(c->core, c, lane, hd, n, scale);
    }
    memcpy(att, c->att, (size_t)d * sizeof(float));
}

int attn_decode_rows(decode_lanes *dl, float *h, const float *x, const int *lane, int n,
                     int32_t pos, const attn_weights *w, const fwd_args *a)
{
    const model_dims *dm = a->dims;
    int d = dm->d_model;
    bool reader = !w->wk;
    const decode_lanes *src = reader ? dl->read_from : dl;
    if (n < 0 || n > dl->lanes || !src)
        return -EINVAL;
    if (n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        kv_cache *c = lane[i] >= 0 && lane[i] < src->lanes ? &src->kv[lane[i]] : NULL;
        if (!c || (c->core && reader))
            return c ? -ENOTSUP : -EINVAL;
        if (reader) { /* the first layer has slid the cache and added this row */
            if (c->n == 0 || c->pos[c->n - 1] != pos)
                return -EINVAL;
        } else {
            kv_cache_slide(c, pos, dm->seq_len, d);
            /* a lane once a step, positions rising */
            if (c->n >= c->cap || (c->n > 0 && c->pos[c->n - 1] >= pos))
                return -EINVAL;
        }
        if (dl->sc_floats < c->n + !reader)
            return -EINVAL;
        dl->pos[i] = pos;
    }
    matmul_exec ex = decode_rows_exec(a);
    rmsnorm_forward(dl->u, dl->rstd, x, w->norm, n, d);
    linear_forward(&ex, dl->q, dl->u, w->wq, n, d, d, 0.0f);
    rope_forward(dl->q, dl->pos, a->rope, n, dm->n_heads, dm->d_head);
    if (!reader) {
        linear_forward(&ex, dl->k, dl->u, w->wk, n, d, d, 0.0f);
        linear_forward(&ex, dl->v, dl->u, w->wv, n, d, d, 0.0f);
        rope_forward(dl->k, dl->pos, a->rope, n, dm->n_heads, dm->d_head);
    }
    for (int i = 0; i < n; i++) {
        kv_cache *c = &src->kv[lane[i]];
        size_t at = (size_t)c->n * d, row = (size_t)i * d;
        if (!reader) {
            memcpy(c->k + at, dl->k + row, (size_t)d * sizeof(float));
            memcpy(c->v + at, dl->v + row, (size_t)d * sizeof(float));
            c->pos[c->n++] = pos;
        }
        if (c->core) /* attn_decode's path, head by head, as lane lane[i] */
            core_attend(c, dl->att + row, dl->q + row, lane[i], dm);
        else
            kv_cache_attend(c, dl->att + row, dl->q + row, dm, dl->sc, dl->sc_floats);
    }
    memcpy(h, x, (size_t)n * d * sizeof(float));
    linear_forward(&ex, h, dl->att, w->wo, n, d, d, 1.0f);
    return 0;
}

int block_decode_rows(decode_lanes *dl, float *y, const float *x, const int *lane, int n,
                      int32_t pos, const attn_weights *aw, const float *mlp_norm,
                      const ffn_weights *fw, const fwd_args *a)
{
    int rc = attn_decode_rows(dl, dl->h, x, lane, n, pos, aw, a);
    if (rc || n == 0)
        return rc;
    if (dl->f != a->dims->d_ff)
        return -EINVAL;
    matmul_exec ex = decode_rows_exec(a);
    mlp_forward(&ex, &dl->mlp, y, dl->h, n, mlp_norm, fw, a->dims->d_model, a->dims->d_ff);
    return 0;
}
