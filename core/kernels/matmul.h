/* Matrix products.  Every product of the model goes through matmul(), which
 * calls cblas_sgemm; matmul_ref() is the plain triple loop it is checked
 * against (tests/test_matmul.c) and benchmarked against (bench/). */
#ifndef MODE_CORE_KERNELS_MATMUL_H
#define MODE_CORE_KERNELS_MATMUL_H

#include <stdbool.h>

/* C = beta * C + op(A) op(B), row-major, with
 *   op(A) = A   (A is [M][K], leading dimension lda)   when !ta,
 *   op(A) = A^T (A is [K][M], leading dimension lda)   when  ta,
 *   op(B) = B   (B is [K][N], ldb)  or  B^T (B is [N][K], ldb),
 *   C is [M][N] with leading dimension ldc.
 * beta = 1 accumulates, which is how backward adds into gradients. */
void matmul(float *c, int ldc,
            const float *a, int lda, bool ta,
            const float *b, int ldb, bool tb,
            int m, int n, int k, float beta);

/* The same contract, plain loops, double accumulation. */
void matmul_ref(float *c, int ldc,
                const float *a, int lda, bool ta,
                const float *b, int ldb, bool tb,
                int m, int n, int k, float beta);

/* Shorthands for dense contiguous operands (ld = row length). */
/* y[n][out] (+)= x[n][in] W[in][out] */
void linear_forward(float *y, const float *x, const float *w, int n, int in, int out, float beta);
/* dx[n][in] (+)= dy[n][out] W^T ; dW[in][out] += x^T dy */
void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                     int n, int in, int out, float dx_beta);

/* sgemm GFLOP/s at a transformer's own shapes (rows x d by d x d, rows x d
 * by d x f, rows x f by f x d, and the weight-gradient form d x rows by
 * rows x f), reps timed rounds after one warm-up round, at the current
 * BLAS thread count.  The yardstick benchmarks report against. */
double matmul_measure_gflops(int rows, int d, int f, int reps);

#endif
