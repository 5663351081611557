/* Central finite-difference checks of every backward in core/kernels/ops.h
 * and of the sublayers in core/model/block.h.
 *
 * Method.  Each case has a scalar loss J, in general J = sum_i out_i R_i
 * with a fixed random R (accumulated in double; cross_entropy's J is its
 * returned sum times scale).  The analytic gradient comes from the backward
 * given dout = R, into gradient buffers prefilled with PREFILL and corrected
 * afterwards, so a backward that overwrites instead of adding fails too.
 * For each input or parameter tensor x (entries of typical size s) we take
 * one random direction u ~ N(0, I) and FD_ENTRIES unit vectors e_i, and with
 * h = FD_H * s and x(t) = x + t u rounded to float, compare the fourth-order
 * central difference (Richardson extrapolation of the h and 2h ones)
 *     fd = 8 [J(x(h)) - J(x(-h))] - [J(x(2h)) - J(x(-2h))]
 * with  an = <grad, delta>,  delta = 8 [x(h) - x(-h)] - [x(2h) - x(-2h)]
 * (both ~ 12 h <grad, u>; using the perturbations as actually rounded keeps
 * their rounding out of the error).  The relative error is
 *     rel = |fd - an| / max(|fd| + |an|, FD_FLOOR * rms(grad) * |delta|),
 * the floor being 10% of the size <grad, delta> typically has, so that an
 * entry whose true derivative is ~0 (e.g. the first attention row's dq) is
 * held to an absolute error of 1e-3 of the typical derivative instead of
 * dividing noise by noise.  Every check must give rel <= FD_TOL = 1e-2.
 * Choice of h: with the plain two-point difference, h = 1e-2 s left the
 * directional checks through the softmax at ~1e-2 (O(h^2) truncation) while
 * smaller h drowned single weight entries in the float rounding of the
 * outputs (O(eps / h)); the fourth-order stencil makes truncation O(h^4), so
 * h = 3e-2 s keeps both well below FD_TOL (worst 1.5e-3 over 50 seeds).
 * Inputs are N(0, 1), weights N(0, 0.3) and norm gains N(1, 0.3) at small
 * sizes, so no gradient is tiny. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/attention.h"
#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"
#include "core/model/block.h"
#include "core/rng/pcg32.h"

#define FD_H 3e-2
#define FD_TOL 1e-2
#define FD_FLOOR 1e-1
#define FD_ENTRIES 8
#define PREFILL 0.25f
#define WSTD 0.3f

/* ---- buffers: every test allocates through buf() and calls release() ---- */

#define MAX_BUFS 64
static float *bufs[MAX_BUFS];
static int nbufs;

static float *buf(long count)
{
    assert_true(nbufs < MAX_BUFS);
    float *p = malloc((size_t)count * sizeof(float));
    assert_non_null(p);
    return bufs[nbufs++] = p;
}

static void release(void)
{
    while (nbufs > 0)
        free(bufs[--nbufs]);
}

static float *randn(pcg32 *rng, long count, float mean, float std)
{
    float *p = buf(count);
    for (long i = 0; i < count; i++)
        p[i] = mean + std * pcg32_normal(rng);
    return p;
}

static float *filled(long count, float v)
{
    float *p = buf(count);
    for (long i = 0; i < count; i++)
        p[i] = v;
    return p;
}

/* Undo the PREFILL of gradient buffers after the backward added into them. */
static void unprefill(float *g, long count)
{
    for (long i = 0; i < count; i++)
        g[i] -= PREFILL;
}

static double dot_r(const float *y, const float *r, long count)
{
    double s = 0.0;
    for (long i = 0; i < count; i++)
        s += (double)y[i] * (double)r[i];
    return s;
}

/* ---- the generic check ---- */

typedef double (*loss_fn)(void *ctx);

/* x0 + t u as the float that J will see. */
static double at(const float *x0, const float *u, long i, double t)
{
    return (double)(float)((double)x0[i] + t * (double)u[i]);
}

static double eval_at(loss_fn J, void *ctx, float *x, const float *x0, const float *u,
                      long count, double t)
{
    for (long i = 0; i < count; i++)
        x[i] = (float)at(x0, u, i, t);
    return J(ctx);
}

/* The fourth-order central difference of J along u at x0 (x is the live
 * tensor J reads), against the analytic gradient g; see the top comment. */
static double fd_rel(loss_fn J, void *ctx, float *x, const float *x0, const float *g,
                     const float *u, long count, double h, double grms)
{
    double fd = 8.0 * (eval_at(J, ctx, x, x0, u, count, h) - eval_at(J, ctx, x, x0, u, count, -h))
                - (eval_at(J, ctx, x, x0, u, count, 2 * h)
                   - eval_at(J, ctx, x, x0, u, count, -2 * h));
    memcpy(x, x0, (size_t)count * sizeof(float));
    double an = 0.0, dnorm = 0.0;
    for (long i = 0; i < count; i++) {
        double delta = 8.0 * (at(x0, u, i, h) - at(x0, u, i, -h))
                       - (at(x0, u, i, 2 * h) - at(x0, u, i, -2 * h));
        an += (double)g[i] * delta;
        dnorm += delta * delta;
    }
    return fabs(fd - an) / fmax(fabs(fd) + fabs(an), FD_FLOOR * grms * sqrt(dnorm));
}

/* Check grad (count entries) of J with respect to x, whose entries are of
 * size scale: one random direction and FD_ENTRIES single entries. */
static void fd_check(const char *name, loss_fn J, void *ctx, float *x, const float *grad,
                     long count, float scale, pcg32 *rng)
{
    float *x0 = malloc((size_t)count * sizeof(float)), *u = malloc((size_t)count * sizeof(float));
    assert_true(x0 && u);
    memcpy(x0, x, (size_t)count * sizeof(float));
    double grms = sqrt(dot_r(grad, grad, count) / (double)count), h = FD_H * (double)scale;
    for (long i = 0; i < count; i++)
        u[i] = pcg32_normal(rng);
    double dir = fd_rel(J, ctx, x, x0, grad, u, count, h, grms), worst = dir;
    memset(u, 0, (size_t)count * sizeof(float));
    for (int e = 0; e < FD_ENTRIES; e++) {
        long i = (long)pcg32_bounded(rng, (uint32_t)count);
        u[i] = 1.0f;
        double r = fd_rel(J, ctx, x, x0, grad, u, count, h, grms);
        u[i] = 0.0f;
        if (!(r <= worst)) /* NaN sticks */
            worst = r;
    }
    free(x0);
    free(u);
    print_message("grad %-14s: max rel err %.1e (directional %.1e)\n", name, worst, dir);
    if (!(worst <= FD_TOL))
        fail_msg("grad %s: relative error %.3e > %.1e", name, worst, FD_TOL);
}

/* ---- ops.h ---- */

typedef struct rms_case {
    int n, d;
    float *x, *g, *y, *rstd, *r;
} rms_case;

static double rms_loss(void *p)
{
    rms_case *c = p;
    rmsnorm_forward(c->y, c->rstd, c->x, c->g, c->n, c->d);
    return dot_r(c->y, c->r, (long)c->n * c->d);
}

static void test_rmsnorm(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 1u);
    const int n = 5, d = 16;
    long nd = (long)n * d;
    rms_case c = { n, d, randn(&rng, nd, 0, 1), randn(&rng, d, 1, WSTD), buf(nd), buf(n),
                   randn(&rng, nd, 0, 1) };
    float *dx = filled(nd, PREFILL), *dg = filled(d, PREFILL);
    rms_loss(&c);
    rmsnorm_backward(dx, dg, c.r, c.x, c.g, c.rstd, n, d);
    unprefill(dx, nd);
    unprefill(dg, d);
    fd_check("rmsnorm dx", rms_loss, &c, c.x, dx, nd, 1.0f, &rng);
    fd_check("rmsnorm dg", rms_loss, &c, c.g, dg, d, 1.0f, &rng);
    /* y may alias x */
    float *y = buf(nd);
    memcpy(y, c.x, (size_t)nd * sizeof(float));
    rmsnorm_forward(y, c.rstd, y, c.g, n, d);
    rms_loss(&c);
    assert_memory_equal(y, c.y, (size_t)nd * sizeof(float));
    release();
}

typedef struct rope_case {
    int n, heads, dh;
    const int32_t *pos;
    const rope_table *t;
    float *x, *y, *r;
} rope_case;

static double rope_loss(void *p)
{
    rope_case *c = p;
    long count = (long)c->n * c->heads * c->dh;
    memcpy(c->y, c->x, (size_t)count * sizeof(float));
    rope_forward(c->y, c->pos, c->t, c->n, c->heads, c->dh);
    return dot_r(c->y, c->r, count);
}

static void test_rope(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 2u);
    static const int32_t pos[] = { 0, 1, 5, 17, 63 };
    const int n = 5, heads = 2, dh = 8;
    long count = (long)n * heads * dh;
    rope_table *t = NULL;
    assert_int_equal(build_rope_table(&t, 64, dh), 0);
    rope_case c = { n, heads, dh, pos, t, randn(&rng, count, 0, 1), buf(count),
                    randn(&rng, count, 0, 1) };
    rope_loss(&c);
    /* a rotation: every head keeps its norm */
    for (long hrow = 0; hrow < (long)n * heads; hrow++) {
        double a = dot_r(c.x + hrow * dh, c.x + hrow * dh, dh);
        double b = dot_r(c.y + hrow * dh, c.y + hrow * dh, dh);
        assert_true(fabs(a - b) <= 1e-5 * a);
    }
    /* backward undoes forward */
    float *z = buf(count);
    memcpy(z, c.y, (size_t)count * sizeof(float));
    rope_backward(z, pos, t, n, heads, dh);
    for (long i = 0; i < count; i++)
        assert_true(fabsf(z[i] - c.x[i]) <= 1e-5f);
    /* and is the gradient of the linear functional <R, rope(x)> (in place) */
    float *dx = buf(count);
    memcpy(dx, c.r, (size_t)count * sizeof(float));
    rope_backward(dx, pos, t, n, heads, dh);
    fd_check("rope dx", rope_loss, &c, c.x, dx, count, 1.0f, &rng);
    free_rope_table(&t);
    release();
}

typedef struct swiglu_case {
    long count;
    float *a, *b, *g, *r;
} swiglu_case;

static double swiglu_loss(void *p)
{
    swiglu_case *c = p;
    swiglu_forward(c->g, c->a, c->b, c->count);
    return dot_r(c->g, c->r, c->count);
}

static void test_swiglu(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 3u);
    const long count = 40;
    /* a ~ N(0, 2) covers both tails of the sigmoid */
    swiglu_case c = { count, randn(&rng, count, 0, 2), randn(&rng, count, 0, 1), buf(count),
                      randn(&rng, count, 0, 1) };
    /* written, not added: whatever was there before must not matter */
    float *da = filled(count, NAN), *db = filled(count, NAN);
    swiglu_backward(da, db, c.r, c.a, c.b, count);
    fd_check("swiglu da", swiglu_loss, &c, c.a, da, count, 2.0f, &rng);
    fd_check("swiglu db", swiglu_loss, &c, c.b, db, count, 1.0f, &rng);
    release();
}

typedef struct att_case {
    int n, heads, dh, ld;
    float *q, *k, *v, *out, *lse, *scratch, *r;
} att_case;

static double att_loss(void *p)
{
    att_case *c = p;
    attention_forward(c->out, c->lse, c->scratch, c->q, c->k, c->v, c->n, c->heads, c->dh,
                      c->ld);
    double s = 0.0;
    for (int j = 0; j < c->n; j++)
        s += dot_r(c->out + (size_t)j * c->ld, c->r + (size_t)j * c->ld, c->heads * c->dh);
    return s;
}

/* n rows of heads x dh in buffers of leading dimension ld = d + 3 (views,
 * whose padding the backward must leave alone). */
static void attention_case(pcg32 *rng, int n, int heads, int dh)
{
    const int d = heads * dh, ld = d + 3;
    long cnt = (long)n * ld;
    att_case c = { n, heads, dh, ld, randn(rng, cnt, 0, 1), randn(rng, cnt, 0, 1),
                   randn(rng, cnt, 0, 1), filled(cnt, 0), buf((long)heads * n),
                   buf(attention_scratch_floats(n, dh)), randn(rng, cnt, 0, 1) };
    att_loss(&c);
    /* the backward reads the forward's output and lse, as the block keeps them */
    float *out = buf(cnt), *lse = buf((long)heads * n);
    memcpy(out, c.out, (size_t)cnt * sizeof(float));
    memcpy(lse, c.lse, (size_t)heads * n * sizeof(float));
    float *dq = filled(cnt, PREFILL), *dk = filled(cnt, PREFILL), *dv = filled(cnt, PREFILL);
    attention_backward(dq, dk, dv, c.scratch, c.r, out, c.q, c.k, c.v, lse, n, heads, dh, ld);
    float *grads[3] = { dq, dk, dv }, *ins[3] = { c.q, c.k, c.v };
    static const char *const names[3] = { "attention dq", "attention dk", "attention dv" };
    for (int t = 0; t < 3; t++) {
        unprefill(grads[t], cnt);
        for (int j = 0; j < n; j++) /* the views' padding is left alone */
            for (int i = d; i < ld; i++)
                assert_true(grads[t][(size_t)j * ld + i] == 0.0f);
        fd_check(names[t], att_loss, &c, ins[t], grads[t], cnt, 1.0f, rng);
    }
    release();
}

static void test_attention(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 4u);
    attention_case(&rng, 6, 2, 4);
    /* past a tile of rows and of keys (ATTN_ROWS, ATTN_KEYS): the online
     * softmax across key tiles and the backward's recomputation from lse,
     * with partial last tiles */
    attention_case(&rng, ATTN_ROWS + ATTN_KEYS + 3, 2, 4);
}

typedef struct emb_case {
    int n, d;
    const token_t *tokens;
    float *emb, *x, *r;
} emb_case;

static double emb_loss(void *p)
{
    emb_case *c = p;
    embedding_forward(c->x, c->emb, c->tokens, c->n, c->d);
    return dot_r(c->x, c->r, (long)c->n * c->d);
}

static void test_embedding(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 5u);
    const int V = 7, d = 5, n = 12; /* n > V: tokens repeat, rows accumulate */
    token_t tokens[12];
    for (int i = 0; i < n; i++)
        tokens[i] = (token_t)pcg32_bounded(&rng, (uint32_t)V);
    emb_case c = { n, d, tokens, randn(&rng, (long)V * d, 0, 1), buf((long)n * d),
                   randn(&rng, (long)n * d, 0, 1) };
    float *demb = filled((long)V * d, PREFILL);
    embedding_backward(demb, c.r, tokens, n, d);
    unprefill(demb, (long)V * d);
    fd_check("embedding", emb_loss, &c, c.emb, demb, (long)V * d, 1.0f, &rng);
    release();
}

typedef struct ce_case {
    int n, V;
    const token_t *targets;
    float scale;
    float *logits;
} ce_case;

static double ce_loss(void *p)
{
    ce_case *c = p;
    return (double)c->scale * cross_entropy(NULL, c->logits, c->targets, c->n, c->V, c->scale);
}

static void test_cross_entropy(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 6u);
    const int n = 6, V = 9;
    long nv = (long)n * V;
    token_t targets[6];
    for (int i = 0; i < n; i++)
        targets[i] = (token_t)pcg32_bounded(&rng, (uint32_t)V);
    ce_case c = { n, V, targets, 0.37f, randn(&rng, nv, 0, 2) };
    float *dl = filled(nv, NAN); /* receives, does not add */
    double loss = cross_entropy(dl, c.logits, targets, n, V, c.scale);
    assert_true(fabs(loss * (double)c.scale - ce_loss(&c)) <= 1e-12 * fabs(loss));
    /* dlogits may alias logits */
    float *al = buf(nv);
    memcpy(al, c.logits, (size_t)nv * sizeof(float));
    assert_true(cross_entropy(al, al, targets, n, V, c.scale) == loss);
    for (long i = 0; i < nv; i++)
        assert_true(fabsf(al[i] - dl[i]) <= 1e-7f);
    fd_check("cross_entropy", ce_loss, &c, c.logits, dl, nv, 2.0f, &rng);
    release();
}

/* ---- block.h ---- */

static const model_dims DIMS = { .vocab = 16, .d_model = 8, .n_heads = 2, .d_head = 4,
                                 .d_ff = 12, .n_layers = 2, .seq_len = 10 };

/* Check the three FFN weight gradients. */
static void check_ffn_weights(const char *prefix, loss_fn J, void *ctx, const ffn_weights *w,
                              const ffn_weights *dw, int d, int f, pcg32 *rng)
{
    float *const ws[3] = { w->w1, w->w3, w->w2 }, *const dws[3] = { dw->w1, dw->w3, dw->w2 };
    static const char *const names[3] = { "w1", "w3", "w2" };
    char name[64];
    for (int t = 0; t < 3; t++) {
        unprefill(dws[t], (long)d * f);
        snprintf(name, sizeof name, "%s %s", prefix, names[t]);
        fd_check(name, J, ctx, ws[t], dws[t], (long)d * f, WSTD, rng);
    }
}

static void make_ffn(pcg32 *rng, ffn_weights *w, ffn_weights *dw, int d, int f)
{
    long df = (long)d * f;
    *w = (ffn_weights){ randn(rng, df, 0, WSTD), randn(rng, df, 0, WSTD),
                        randn(rng, df, 0, WSTD) };
    *dw = (ffn_weights){ filled(df, PREFILL), filled(df, PREFILL), filled(df, PREFILL) };
}

typedef struct attn_case {
    attn_cache cache;
    const row_set *rs;
    const attn_weights *w;
    const fwd_args *a;
    float *x, *h, *r;
} attn_case;

static double attn_loss(void *p)
{
    attn_case *c = p;
    attn_forward(&c->cache, c->h, c->x, c->rs, c->w, c->a);
    return dot_r(c->h, c->r, (long)c->rs->n * c->a->dims->d_model);
}

static void test_attn_block(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 7u);
    /* two sequences (4 and 3 rows) at non-contiguous increasing positions,
     * as MoD hands the block a subset of each sequence */
    static const int seq_start[] = { 0, 4, 7 };
    static const int32_t pos[] = { 0, 3, 4, 9, 1, 2, 6 };
    const row_set rs = { .n = 7, .nseq = 2, .seq_start = seq_start, .pos = pos };
    const int d = DIMS.d_model, n = rs.n;
    long nd = (long)n * d, dd = (long)d * d;
    rope_table *rope = NULL;
    assert_int_equal(build_rope_table(&rope, DIMS.seq_len, DIMS.d_head), 0);
    float *ws = buf(attn_ws_floats(&DIMS, n, 4));
    const fwd_args a = { .ctx = NULL, .dims = &DIMS, .rope = rope, .ws = ws };
    attn_weights w = { randn(&rng, d, 1, WSTD), randn(&rng, dd, 0, WSTD),
                       randn(&rng, dd, 0, WSTD), randn(&rng, dd, 0, WSTD),
                       randn(&rng, dd, 0, WSTD) };
    attn_weights dw = { filled(d, PREFILL), filled(dd, PREFILL), filled(dd, PREFILL),
                        filled(dd, PREFILL), filled(dd, PREFILL) };
    attn_case c = { .rs = &rs, .w = &w, .a = &a, .x = randn(&rng, nd, 0, 1), .h = buf(nd),
                    .r = randn(&rng, nd, 0, 1) };
    assert_int_equal(build_attn_cache(&c.cache, &DIMS, n), 0);
    float *dx = filled(nd, PREFILL);
    attn_loss(&c);
    attn_backward(dx, &dw, c.r, c.x, &c.cache, &rs, &w, &a, ws);
    unprefill(dx, nd);
    fd_check("attn dx", attn_loss, &c, c.x, dx, nd, 1.0f, &rng);
    float *const ps[5] = { w.norm, w.wq, w.wk, w.wv, w.wo };
    float *const gs[5] = { dw.norm, dw.wq, dw.wk, dw.wv, dw.wo };
    static const char *const names[5] = { "attn norm", "attn wq", "attn wk", "attn wv",
                                          "attn wo" };
    for (int t = 0; t < 5; t++) {
        long cnt = t ? dd : d;
        unprefill(gs[t], cnt);
        fd_check(names[t], attn_loss, &c, ps[t], gs[t], cnt, t ? WSTD : 1.0f, &rng);
    }
    free_attn_cache(&c.cache);
    free_rope_table(&rope);
    release();
}

typedef struct mlp_case {
    mlp_cache cache;
    int n, d, f;
    const ffn_weights *w;
    float *norm, *h, *y, *r;
} mlp_case;

static double mlp_loss(void *p)
{
    mlp_case *c = p;
    mlp_forward(NULL, &c->cache, c->y, c->h, c->n, c->norm, c->w, c->d, c->f);
    return dot_r(c->y, c->r, (long)c->n * c->d);
}

static void test_mlp_block(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 8u);
    const int n = 5, d = DIMS.d_model, f = DIMS.d_ff;
    long nd = (long)n * d;
    ffn_weights w, dw;
    make_ffn(&rng, &w, &dw, d, f);
    mlp_case c = { .n = n, .d = d, .f = f, .w = &w, .norm = randn(&rng, d, 1, WSTD),
                   .h = randn(&rng, nd, 0, 1), .y = buf(nd), .r = randn(&rng, nd, 0, 1) };
    assert_int_equal(build_mlp_cache(&c.cache, &DIMS, n, f), 0);
    float *dh = filled(nd, PREFILL), *dnorm = filled(d, PREFILL);
    float *ws = buf(mlp_ws_floats(&DIMS, n, f));
    mlp_loss(&c);
    mlp_backward(NULL, dh, dnorm, &dw, c.r, c.h, &c.cache, n, c.norm, &w, d, f, ws);
    unprefill(dh, nd);
    unprefill(dnorm, d);
    fd_check("mlp dh", mlp_loss, &c, c.h, dh, nd, 1.0f, &rng);
    fd_check("mlp norm", mlp_loss, &c, c.norm, dnorm, d, 1.0f, &rng);
    check_ffn_weights("mlp", mlp_loss, &c, &w, &dw, d, f, &rng);
    free_mlp_cache(&c.cache);
    release();
}

typedef struct ffn_case {
    ffn_cache cache;
    int n, d, f;
    const ffn_weights *w;
    float *m, *out, *r;
} ffn_case;

static double ffn_loss(void *p)
{
    ffn_case *c = p;
    ffn_forward(NULL, &c->cache, c->out, c->m, c->n, c->w, c->d, c->f, 0.0f);
    return dot_r(c->out, c->r, (long)c->n * c->d);
}

static void test_ffn(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 42u, 9u);
    const int n = 5, d = DIMS.d_model, f = DIMS.d_ff;
    long nd = (long)n * d;
    ffn_weights w, dw;
    make_ffn(&rng, &w, &dw, d, f);
    ffn_case c = { .n = n, .d = d, .f = f, .w = &w, .m = randn(&rng, nd, 0, 1),
                   .out = filled(nd, NAN), .r = randn(&rng, nd, 0, 1) };
    assert_int_equal(build_ffn_cache(&c.cache, n, f), 0);
    float *dm = filled(nd, NAN), *ws = buf(3L * n * f); /* dm is written, not added to */
    ffn_loss(&c); /* beta = 0 over NaN */
    /* beta = 1 adds onto out */
    float *acc = randn(&rng, nd, 0, 1), *base = buf(nd);
    memcpy(base, acc, (size_t)nd * sizeof(float));
    ffn_forward(NULL, &c.cache, acc, c.m, n, &w, d, f, 1.0f);
    for (long i = 0; i < nd; i++)
        assert_true(fabsf(acc[i] - (base[i] + c.out[i])) <= 1e-5f);
    ffn_backward(NULL, dm, &dw, c.r, c.m, &c.cache, n, &w, d, f, ws);
    fd_check("ffn dm", ffn_loss, &c, c.m, dm, nd, 1.0f, &rng);
    check_ffn_weights("ffn", ffn_loss, &c, &w, &dw, d, f, &rng);
    free_ffn_cache(&c.cache);
    release();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),       cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_embedding),     cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_attn_block),    cmocka_unit_test(test_mlp_block),
        cmocka_unit_test(test_ffn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
