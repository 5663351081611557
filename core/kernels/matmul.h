/* Matrix products: the pool dispatcher above the leaf sgemm (sgemm.h) and
 * the bf16 products (bf16.h).  Every product of the model goes through
 * matmul() or matmul_pool(); matmul_ref() (sgemm.h) is the plain triple
 * loop they are checked against (tests/test_matmul.c) and benchmarked
 * against (bench/). */
#ifndef MODE_CORE_KERNELS_MATMUL_H
#define MODE_CORE_KERNELS_MATMUL_H

#include "core/kernels/sgemm.h"

#include <stdbool.h>

/* sgemm() (sgemm.h), its FLOPs counted (flops_count). */
void matmul(float *c, int ldc,
            const float *a, int lda, bool ta,
            const float *b, int ldb, bool tb,
            int m, int n, int k, float beta);

/* Counting: while counter is not NULL, every matmul() and matmul_pool()
 * adds its 2 m n k to *counter, and flops_add() what other kernels report
 * (attention's n x n products, as MODEL.md counts them).  NULL stops it.
 * One thread at a time: a test instrument. */
void flops_count(double *counter);
void flops_add(double flops);

struct thread_pool;
/* How the products of a pass run: on pool's threads (NULL: on the caller's
 * thread alone) and in which precision.  bf16: the products in bf16
 * (bf16.h, on bf16_path_current()); the bf16 packing lives in the pool's
 * scratch, so with a NULL pool the products are fp32 whatever bf16 says.
 * The precision belongs to whoever runs a model (model.bf16, [run]
 * precision), not to the pool, which only lends threads. */
typedef struct matmul_exec {
    struct thread_pool *pool;
    bool bf16;
} matmul_exec;

/* matmul() with C cut into bands of rows or of columns whose bounds depend
 * on (m, n, k) alone (matmul_bands), each band one single-threaded sgemm
 * (or bf16 product when x says so) of the same shape whichever thread runs
 * it: the pool's threads share the bands, and the result is the same bits
 * for any thread count.  x NULL: fp32 on the caller's thread. */
/* Asks the CPU, and the OS for the AMX tile state, which bf16 path runs
 * (bf16_path_current()), so that the workers never ask first: whoever
 * turns bf16 on calls it once before the products. */
void matmul_bf16_prepare(void);
/* The number of bands of an m x n x k product; *by_cols (when not NULL)
 * says whether they cut C's columns rather than its rows. */
int matmul_bands(int m, int n, int k, bool *by_cols);
void matmul_pool(const matmul_exec *x, float *c, int ldc,
                 const float *a, int lda, bool ta,
                 const float *b, int ldb, bool tb,
                 int m, int n, int k, float beta);

/* Shorthands for dense contiguous operands (ld = row length). */
/* y[n][out] (+)= x[n][in] W[in][out] */
void linear_forward(const matmul_exec *e, float *y, const float *x, const float *w, int n, int in,
                    int out, float beta);
/* dx[n][in] (+)= dy[n][out] W^T ; dW[in][out] += x^T dy */
void linear_backward(const matmul_exec *e, float *dx, float *dw, const float *dy, const float *x,
                     const float *w, int n, int in, int out, float dx_beta);

/* GFLOP/s of the products at a transformer's own shapes (rows x d by d x
 * d, rows x d by d x f, rows x f by f x d, and the weight-gradient form
 * d x rows by rows x f), reps timed rounds after one warm-up round: with a
 * NULL x cblas_sgemm at the current BLAS thread count (the yardstick
 * benchmarks report against), else matmul_pool on x's pool, in x's
 * precision. */
double matmul_measure_gflops(const matmul_exec *x, int rows, int d, int f, int reps);

#endif
