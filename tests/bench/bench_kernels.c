/* Each fast kernel against its plain reference, as dav1d's checkasm --bench
 * does: the same random inputs through both, the time of each, the speed-up
 * and the largest difference; and each bf16 path against sgemm at the
 * model's shapes.  Speed is reported, never asserted; the correctness of
 * each pair is asserted by the unit tests.
 *   bench_kernels [threads]      (default 2: the pooled kernels' threads) */
#include "core/kernels/attention.h"
#include "core/kernels/bf16.h"
#include "core/kernels/matmul.h"
#include "core/kernels/ops.h"
#include "core/kernels/parallel.h"
#include "core/kernels/vexp.h"
#include "core/rng/pcg32.h"
#include "core/util/ctx.h"
#include "core/util/pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*run_fn)(void *arg);

/* Seconds a call, over at least 0.3 s after one untimed call. */
static double time_of(run_fn fn, void *arg)
{
    fn(arg);
    int calls = 0;
    double t0 = mode_now(), t;
    do {
        fn(arg);
        calls++;
        t = mode_now() - t0;
    } while (t < 0.3);
    return t / calls;
}

static double max_rel_diff(const float *a, const float *b, long n)
{
    double worst = 0.0, scale = 0.0;
    for (long i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)b[i]));
    for (long i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    return worst / (scale > 0.0 ? scale : 1.0);
}

static void report(const char *name, double fast, double ref, double diff)
{
    printf("%-44s fast %10.3f ms  reference %10.3f ms  x%7.1f  max diff %.1e\n", name,
           fast * 1e3, ref * 1e3, ref / fast, diff);
}

static float *randn(pcg32 *r, long n)
{
    float *x = malloc((size_t)n * sizeof(float));
    for (long i = 0; i < n; i++)
        x[i] = pcg32_normal(r);
    return x;
}

/* matmul (cblas_sgemm) against matmul_ref */
typedef struct mm_case {
    float *c, *a, *b;
    int m, n, k;
    thread_pool *pool;
} mm_case;
static void mm_fast(void *p)
{
    mm_case *c = p;
    matmul(c->c, c->n, c->a, c->k, false, c->b, c->n, false, c->m, c->n, c->k, 0.0f);
}
static void mm_ref(void *p)
{
    mm_case *c = p;
    matmul_ref(c->c, c->n, c->a, c->k, false, c->b, c->n, false, c->m, c->n, c->k, 0.0f);
}
static void mm_pool(void *p)
{
    mm_case *c = p;
    matmul_pool(&(matmul_exec){ .pool = c->pool }, c->c, c->n, c->a, c->k, false, c->b, c->n,
                false, c->m, c->n, c->k, 0.0f);
}

/* A product as training runs it: matmul_pool (bands of C) on a pool, in
 * x's precision, any transposition. */
typedef struct shape_case {
    float *c, *a, *b;
    int m, n, k;
    bool ta, tb;
    matmul_exec x;
} shape_case;
static void shape_pool(void *p)
{
    shape_case *c = p;
    matmul_pool(&c->x, c->c, c->n, c->a, c->ta ? c->m : c->k, c->ta, c->b, c->tb ? c->k : c->n,
                c->tb, c->m, c->n, c->k, 0.0f);
}
static void shape_sgemm(void *p)
{
    shape_case *c = p;
    matmul(c->c, c->n, c->a, c->ta ? c->m : c->k, c->ta, c->b, c->tb ? c->k : c->n, c->tb, c->m,
           c->n, c->k, 0.0f);
}

/* Every bf16 path this CPU has against one cblas_sgemm call, one thread,
 * at the bench model's shapes (d 256, d_ff 704, 16 x 256 rows): the
 * projections, the MLP's two products, a backward product against a
 * transposed weight, and the weight-gradient form with its long K.  The
 * bf16 products run as training runs them: matmul_pool's bands, each
 * packing its operands.  max diff: against the emulated path (the same
 * rounded operands through sgemm), relative to the largest element. */
static void bench_bf16(pcg32 *r)
{
    enum { ROWS = 4096, D = 256, F = 704 };
    static const struct {
        const char *what;
        int m, n, k;
        bool ta, tb;
    } shapes[] = {
        { "rows x d by d x d", ROWS, D, D, false, false },
        { "rows x d by d x f", ROWS, F, D, false, false },
        { "rows x f by f x d", ROWS, D, F, false, false },
        { "rows x f by (d x f)^T", ROWS, D, F, false, true },
        { "(rows x d)^T by rows x f", D, F, ROWS, true, false },
    };
    thread_pool *one = NULL;
    if (build_thread_pool(&one, 1))
        return;
    bf16_path best = bf16_path_current();
    printf("bf16 products, one thread, GFLOP/s (the fastest path here: %s):\n",
           bf16_path_name(best));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
        shape_case c = { malloc((size_t)m * n * sizeof(float)), randn(r, (long)m * k),
                         randn(r, (long)k * n), m, n, k, shapes[s].ta, shapes[s].tb,
                         { one, true } };
        float *emulated = malloc((size_t)m * n * sizeof(float));
        double flops = 2.0 * m * n * k, t32 = time_of(shape_sgemm, &c);
        bf16_force_path(BF16_PATH_EMULATED);
        shape_pool(&c);
        memcpy(emulated, c.c, (size_t)m * n * sizeof(float));
        char line[256];
        int len = snprintf(line, sizeof(line), "  %-26s %4dx%4dx%4d  sgemm %6.1f", shapes[s].what,
                           m, n, k, flops / t32 * 1e-9);
        for (int path = BF16_PATH_COUNT - 1; path >= 0; path--) {
            if (bf16_force_path((bf16_path)path))
                continue;
            double t = time_of(shape_pool, &c);
            len += snprintf(line + len, sizeof(line) - (size_t)len, "  %s %6.1f (x%.2f, diff %.0e)",
                            bf16_path_name((bf16_path)path), flops / t * 1e-9, t32 / t,
                            max_rel_diff(c.c, emulated, (long)m * n));
        }
        puts(line);
        free(c.c); free(c.a); free(c.b); free(emulated);
    }
    bf16_force_path(best);
    free_thread_pool(&one);
}

/* vexpf against expf */
typedef struct exp_case {
    float *x, *y;
    long n;
} exp_case;
static void exp_fast(void *p)
{
    exp_case *c = p;
    for (long i = 0; i < c->n; i++)
        c->y[i] = vexpf(c->x[i]);
}
static void exp_ref(void *p)
{
    exp_case *c = p;
    for (long i = 0; i < c->n; i++)
        c->y[i] = expf(c->x[i]);
}

/* causal attention (one head, forward and backward: FlashAttention's
 * tiles) against the plain loops */
typedef struct att_case {
    float *q, *k, *v, *g, *out, *lse, *dq, *dk, *dv, *scratch, *p, *dp;
    int n, dh;
} att_case;
static void att_zero_grads(att_case *c)
{
    size_t nd = (size_t)c->n * c->dh;
    memset(c->dq, 0, nd * sizeof(float));
    memset(c->dk, 0, nd * sizeof(float));
    memset(c->dv, 0, nd * sizeof(float));
}
static void att_fast(void *p)
{
    att_case *c = p;
    att_zero_grads(c);
    attention_forward(c->out, c->lse, c->scratch, c->q, c->k, c->v, c->n, 1, c->dh, c->dh);
    attention_backward(c->dq, c->dk, c->dv, c->scratch, c->g, c->out, c->q, c->k, c->v, c->lse,
                       c->n, 1, c->dh, c->dh);
}
/* Row i's probabilities over keys [0, i] into c->p. */
static void att_ref_row(att_case *c, int i)
{
    int dh = c->dh;
    float scale = 1.0f / sqrtf((float)dh), mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j <= i; j++) {
        float s = 0.0f;
        for (int e = 0; e < dh; e++)
            s += c->q[(size_t)i * dh + e] * c->k[(size_t)j * dh + e];
        c->p[j] = s * scale;
        mx = fmaxf(mx, c->p[j]);
    }
    for (int j = 0; j <= i; j++) {
        c->p[j] = expf(c->p[j] - mx);
        sum += c->p[j];
    }
    for (int j = 0; j <= i; j++)
        c->p[j] /= sum;
}
static void att_ref(void *p)
{
    att_case *c = p;
    int n = c->n, dh = c->dh;
    float scale = 1.0f / sqrtf((float)dh);
    att_zero_grads(c);
    for (int i = 0; i < n; i++) {
        att_ref_row(c, i);
        const float *gi = c->g + (size_t)i * dh;
        float dot = 0.0f;
        for (int e = 0; e < dh; e++) {
            float acc = 0.0f;
            for (int j = 0; j <= i; j++)
                acc += c->p[j] * c->v[(size_t)j * dh + e];
            c->out[(size_t)i * dh + e] = acc;
        }
        for (int j = 0; j <= i; j++) {
            float s = 0.0f;
            for (int e = 0; e < dh; e++) {
                s += gi[e] * c->v[(size_t)j * dh + e];
                c->dv[(size_t)j * dh + e] += c->p[j] * gi[e];
            }
            c->dp[j] = s;
            dot += c->p[j] * s;
        }
        for (int j = 0; j <= i; j++) {
            float ds = c->p[j] * (c->dp[j] - dot) * scale;
            for (int e = 0; e < dh; e++) {
                c->dq[(size_t)i * dh + e] += ds * c->k[(size_t)j * dh + e];
                c->dk[(size_t)j * dh + e] += ds * c->q[(size_t)i * dh + e];
            }
        }
    }
}
static void att_bench(pcg32 *r, int n, int dh)
{
    long nd = (long)n * dh;
    att_case c = { randn(r, nd), randn(r, nd), randn(r, nd), randn(r, nd),
                   malloc((size_t)nd * sizeof(float)), malloc((size_t)n * sizeof(float)),
                   malloc((size_t)nd * sizeof(float)), malloc((size_t)nd * sizeof(float)),
                   malloc((size_t)nd * sizeof(float)),
                   malloc((size_t)attention_scratch_floats(n, dh) * sizeof(float)),
                   malloc((size_t)n * sizeof(float)), malloc((size_t)n * sizeof(float)), n, dh };
    float *ref = malloc(4 * (size_t)nd * sizeof(float));
    float *outs[4] = { c.out, c.dq, c.dk, c.dv };
    double tr = time_of(att_ref, &c);
    for (int i = 0; i < 4; i++)
        memcpy(ref + i * nd, outs[i], (size_t)nd * sizeof(float));
    double tf = time_of(att_fast, &c), diff = 0.0;
    for (int i = 0; i < 4; i++)
        diff = fmax(diff, max_rel_diff(outs[i], ref + i * nd, nd));
    char name[64];
    snprintf(name, sizeof(name), "causal attention fwd+bwd, n %d, dh %d", n, dh);
    report(name, tf, tr, diff);
    free(c.q); free(c.k); free(c.v); free(c.g); free(c.out); free(c.lse); free(c.dq);
    free(c.dk); free(c.dv); free(c.scratch); free(c.p); free(c.dp); free(ref);
}

/* SwiGLU on the pool against the serial loop */
typedef struct sw_case {
    float *g, *a, *b;
    long n;
    thread_pool *pool;
} sw_case;
static void sw_pool(void *p)
{
    sw_case *c = p;
    swiglu_forward_pool(c->pool, c->g, c->a, c->b, c->n);
}
static void sw_serial(void *p)
{
    sw_case *c = p;
    swiglu_forward(c->g, c->a, c->b, c->n);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    pcg32 r;
    pcg32_seed(&r, 11, 3);
    matmul_set_threads(1);
    thread_pool *pool = NULL;
    if (threads > 1 && build_thread_pool(&pool, threads))
        return 1;

    {   /* one sgemm at a size the triple loop finishes */
        int m = 256, n = 256, k = 256;
        mm_case c = { malloc((size_t)m * n * sizeof(float)), randn(&r, (long)m * k),
                      randn(&r, (long)k * n), m, n, k, pool };
        float *ref = malloc((size_t)m * n * sizeof(float));
        double tr = time_of(mm_ref, &c);
        memcpy(ref, c.c, (size_t)m * n * sizeof(float));
        double tf = time_of(mm_fast, &c);
        report("matmul 256x256x256 (sgemm, 1 thread)", tf, tr, max_rel_diff(c.c, ref, (long)m * n));
        free(c.c); free(c.a); free(c.b); free(ref);
    }
    {   /* the pool's row split against one single-threaded sgemm */
        int m = 4096, n = 704, k = 256;
        mm_case c = { malloc((size_t)m * n * sizeof(float)), randn(&r, (long)m * k),
                      randn(&r, (long)k * n), m, n, k, pool };
        float *ref = malloc((size_t)m * n * sizeof(float));
        double tr = time_of(mm_fast, &c);
        memcpy(ref, c.c, (size_t)m * n * sizeof(float));
        double tf = time_of(mm_pool, &c);
        char name[64];
        snprintf(name, sizeof(name), "matmul_pool 4096x704x256, %d threads", threads);
        report(name, tf, tr, max_rel_diff(c.c, ref, (long)m * n));
        free(c.c); free(c.a); free(c.b); free(ref);
    }
    {
        long n = 1L << 20;
        exp_case c = { randn(&r, n), malloc((size_t)n * sizeof(float)), n };
        for (long i = 0; i < n; i++)
            c.x[i] *= 10.0f;
        float *ref = malloc((size_t)n * sizeof(float));
        double tr = time_of(exp_ref, &c);
        memcpy(ref, c.y, (size_t)n * sizeof(float));
        double tf = time_of(exp_fast, &c);
        double worst = 0.0;
        for (long i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)c.y[i] - (double)ref[i]) / (double)ref[i]);
        report("vexpf, 2^20 values (relative error)", tf, tr, worst);
        free(c.x); free(c.y); free(ref);
    }
    att_bench(&r, 256, 64);
    att_bench(&r, 1024, 64);
    att_bench(&r, 2048, 64);
    {
        long n = 4096L * 704;
        sw_case c = { malloc((size_t)n * sizeof(float)), randn(&r, n), randn(&r, n), n, pool };
        float *ref = malloc((size_t)n * sizeof(float));
        double tr = time_of(sw_serial, &c);
        memcpy(ref, c.g, (size_t)n * sizeof(float));
        double tf = time_of(sw_pool, &c);
        char name[64];
        snprintf(name, sizeof(name), "swiglu_forward_pool 4096x704, %d threads", threads);
        report(name, tf, tr, max_rel_diff(c.g, ref, n));
        free(c.g); free(c.a); free(c.b); free(ref);
    }
    bench_bf16(&r);
    free_thread_pool(&pool);
    return 0;
}
