#include "core/kernels/matmul.h"

#include "core/kernels/bf16.h"
#include "core/kernels/bf16_avx512.h"
#include "core/util/pool.h"

#include <stddef.h>
#include <stdlib.h>
#include <time.h>

/* The products' FLOPs, counted while a counter is set (matmul.h): the
 * one static variable of the kernels besides what bf16.c learns of the CPU
 * once, a test instrument (the kinds' contract test holds each kind's
 * executed FLOPs against the products it really ran), off unless a test
 * sets it.  Counted on the calling thread,
 * once a product: bands run the leaf sgemm, which does not count. */
static double *flop_counter;

void flops_count(double *counter)
{
    flop_counter = counter;
}

void flops_add(double flops)
{
    if (flop_counter)
        *flop_counter += flops;
}

static void count(int m, int n, int k)
{
    if (flop_counter && m > 0 && n > 0 && k > 0)
        *flop_counter += 2.0 * m * n * k;
}

void matmul(float *c, int ldc,
            const float *a, int lda, bool ta,
            const float *b, int ldb, bool tb,
            int m, int n, int k, float beta)
{
    count(m, n, k);
    sgemm(c, ldc, a, lda, ta, b, ldb, tb, m, n, k, beta);
}

/* The bands of a product.  C is cut along its rows, or along its columns
 * when A is the smaller operand to repeat (each band packs the whole of the
 * other operand), into bands whose bounds depend on the shape alone, never
 * on the thread count; each band is one call of the same shape whichever
 * thread runs it.  OpenBLAS may sum a row of C in another order for another
 * row count (its Haswell kernels do, ../shared/FACTS.md), so this is what
 * makes a product the same bits at any thread count, on every kernel set.
 * Bands of at most BAND rows (columns), bounds on multiples of 16 (sgemm's
 * blocking); at least two bands when the product is worth splitting, so
 * that two threads share the weight gradients (d x d with a long K). */
enum { BAND = 256, BAND_MIN = 64 };
#define BAND_MIN_MACS 1e6 /* below a million multiply-adds, one call */

static int band_count(int len, double macs)
{
    if (macs < BAND_MIN_MACS || len < 2 * BAND_MIN)
        return 1;
    int bands = (len + BAND - 1) / BAND;
    return bands < 2 ? 2 : bands;
}

static int band_bound(int len, int bands, int t)
{
    return t >= bands ? len : (int)((long)len * t / bands) / 16 * 16;
}

typedef struct band_job {
    float *c;
    const float *a, *b;
    int ldc, lda, ldb, m, n, k, bands;
    bool ta, tb, by_cols;
    float beta;
    struct thread_pool *pool; /* bf16 products: the workers' scratch */
    void *shared;             /* AVX512_BF16: the operand every band reads, packed */
} band_job;

/* On the AVX512_BF16 path, the operand that every band multiplies whole (B
 * for bands of rows, A for bands of columns: a weight, or the 4096-row
 * activations of a weight gradient) is packed once for the product, its
 * K blocks shared out on the pool, instead of once a band; each band packs
 * only its own slice.  Packing is exact rounding, so the bits are those of
 * matmul_bf16 on each band. */
enum { PACK_BLOCKS = 8 }; /* K blocks a packing task */

static void pack_task(void *arg, int t, int worker)
{
    const band_job *j = arg;
    int blocks = bf16_avx512_k_blocks(j->k), b0 = t * PACK_BLOCKS;
    int b1 = b0 + PACK_BLOCKS < blocks ? b0 + PACK_BLOCKS : blocks;
    if (j->by_cols)
        bf16_avx512_pack_a(j->shared, j->a, j->lda, j->ta, j->m, j->k, b0, b1);
    else
        bf16_avx512_pack_b(j->shared, j->b, j->ldb, j->tb, j->k, j->n, b0, b1);
}

/* A band against the shared packing; false when its own packing finds no
 * memory. */
static bool band_on_shared(const band_job *j, int worker, float *c, const float *a,
                           const float *b, int m, int n)
{
    void *own = pool_scratch(j->pool, worker, bf16_avx512_packed_bytes(j->by_cols ? n : m, j->k));
    if (!own)
        return false;
    if (j->by_cols)
        bf16_avx512_band(c, j->ldc, b, j->ldb, j->tb, false, j->shared, m, n, j->k, j->beta, own);
    else
        bf16_avx512_band(c, j->ldc, a, j->lda, j->ta, true, j->shared, m, n, j->k, j->beta, own);
    return true;
}

static void band_task(void *arg, int t, int worker)
{
    const band_job *j = arg;
    int len = j->by_cols ? j->n : j->m;
    int x0 = band_bound(len, j->bands, t), x1 = band_bound(len, j->bands, t + 1);
    const float *a = j->a, *b = j->b;
    float *c = j->c;
    int m = j->m, n = j->n;
    if (j->by_cols) {
        b += j->tb ? (size_t)x0 * j->ldb : (size_t)x0;
        c += x0;
        n = x1 - x0;
    } else {
        a += j->ta ? (size_t)x0 : (size_t)x0 * j->lda;
        c += (size_t)x0 * j->ldc;
        m = x1 - x0;
    }
    if (j->shared && band_on_shared(j, worker, c, a, b, m, n))
        return;
    void *work = j->pool ? pool_scratch(j->pool, worker, matmul_bf16_work_bytes(m, n, j->k))
                         : NULL;
    if (work)
        matmul_bf16(c, j->ldc, a, j->lda, j->ta, b, j->ldb, j->tb, m, n, j->k, j->beta, work);
    else /* fp32, or out of memory for the bf16 packing: the same product in fp32 */
        sgemm(c, j->ldc, a, j->lda, j->ta, b, j->ldb, j->tb, m, n, j->k, j->beta);
}

void matmul_bf16_prepare(void)
{
    bf16_path_current();
}

int matmul_bands(int m, int n, int k, bool *by_cols)
{
    bool cols = n > m;
    if (by_cols)
        *by_cols = cols;
    return band_count(cols ? n : m, (double)m * n * k);
}

void matmul_pool(const matmul_exec *x, float *c, int ldc,
                 const float *a, int lda, bool ta,
                 const float *b, int ldb, bool tb,
                 int m, int n, int k, float beta)
{
    if (m <= 0 || n <= 0)
        return;
    count(m, n, k);
    struct thread_pool *p = x ? x->pool : NULL;
    band_job j = { .c = c, .a = a, .b = b, .ldc = ldc, .lda = lda, .ldb = ldb, .m = m, .n = n,
                   .k = k, .ta = ta, .tb = tb, .beta = beta, .pool = x && x->bf16 ? p : NULL };
    j.bands = matmul_bands(m, n, k, &j.by_cols);
    if (j.pool && j.bands > 1 && bf16_path_current() == BF16_PATH_AVX512) {
        j.shared = pool_shared_scratch(p, bf16_avx512_packed_bytes(j.by_cols ? m : n, k));
        int blocks = bf16_avx512_k_blocks(k);
        if (j.shared)
            pool_run(p, (blocks + PACK_BLOCKS - 1) / PACK_BLOCKS, pack_task, &j);
    }
    pool_run(p, j.bands, band_task, &j);
}

void linear_forward(const matmul_exec *e, float *y, const float *x, const float *w, int n, int in,
                    int out, float beta)
{
    matmul_pool(e, y, out, x, in, false, w, out, false, n, out, in, beta);
}

void linear_backward(const matmul_exec *e, float *dx, float *dw, const float *dy, const float *x,
                     const float *w, int n, int in, int out, float dx_beta)
{
    if (dx)
        matmul_pool(e, dx, in, dy, out, false, w, out, true, n, in, out, dx_beta);
    if (dw)
        matmul_pool(e, dw, out, x, in, true, dy, out, false, in, out, n, 1.0f);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double matmul_measure_gflops(const matmul_exec *x, int rows, int d, int f, int reps)
{
    /* every operand fits in max(rows, d, f)^2 floats */
    size_t w = (size_t)(d > f ? d : f), big = (size_t)rows > w ? (size_t)rows * w : w * w;
    float *a = malloc(big * sizeof(float)), *b = malloc(big * sizeof(float));
    float *c = malloc(big * sizeof(float));
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return 0.0;
    }
    for (size_t i = 0; i < big; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    const int shapes[4][4] = { /* m n k transA */
        { rows, d, d, 0 }, { rows, f, d, 0 }, { rows, d, f, 0 }, { d, f, rows, 1 } };
    double flops = 0.0, t = 0.0;
    for (int r = 0; r <= reps; r++) {
        for (int s = 0; s < 4; s++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            double t0 = now_s();
            if (x)
                matmul_pool(x, c, n, a, shapes[s][3] ? m : k, shapes[s][3], b, n, false, m, n, k,
                            0.0f);
            else
                matmul(c, n, a, shapes[s][3] ? m : k, shapes[s][3], b, n, false, m, n, k, 0.0f);
            if (r > 0) { /* round 0 warms the caches and the thread pool */
                t += now_s() - t0;
                flops += 2.0 * m * n * k;
            }
        }
    }
    free(a);
    free(b);
    free(c);
    return t > 0.0 ? flops / t * 1e-9 : 0.0;
}
