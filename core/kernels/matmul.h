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

/* BLAS threads for the products that follow (openblas_set_num_threads).
 * With a thread pool, BLAS keeps to one thread and matmul_pool() splits the
 * large products among the pool's threads instead. */
void matmul_set_threads(int threads);

/* matmul() with C cut into bands of rows or of columns whose bounds depend
 * on (m, n, k) alone (matmul_bands), each band one single-threaded sgemm
 * (or bf16 product when the pool says so) of the same shape whichever
 * thread runs it: the pool's threads share the bands, and the result is
 * the same bits for any thread count and for a NULL pool (one thread). */
struct thread_pool;
/* [run] precision on the pool: bf16 products from now on when on (on
 * bf16_path_current(), chosen first, once), fp32 when off. */
void matmul_use_bf16(struct thread_pool *p, bool on);
/* The number of bands of an m x n x k product; *by_cols (when not NULL)
 * says whether they cut C's columns rather than its rows. */
int matmul_bands(int m, int n, int k, bool *by_cols);
void matmul_pool(struct thread_pool *p, float *c, int ldc,
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
void linear_forward(struct thread_pool *p, float *y, const float *x, const float *w, int n, int in,
                    int out, float beta);
/* dx[n][in] (+)= dy[n][out] W^T ; dW[in][out] += x^T dy */
void linear_backward(struct thread_pool *p, float *dx, float *dw, const float *dy, const float *x,
                     const float *w, int n, int in, int out, float dx_beta);

/* GFLOP/s of the products at a transformer's own shapes (rows x d by d x
 * d, rows x d by d x f, rows x f by f x d, and the weight-gradient form
 * d x rows by rows x f), reps timed rounds after one warm-up round: with a
 * NULL pool cblas_sgemm at the current BLAS thread count (the yardstick
 * benchmarks report against), else matmul_pool on p, in p's precision. */
double matmul_measure_gflops(struct thread_pool *p, int rows, int d, int f, int reps);

#endif
