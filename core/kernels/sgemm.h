/* The leaf of the products: one cblas_sgemm, and the plain triple loop it
 * is checked against (tests/test_matmul.c).  Nothing above this file is
 * called from here: the pool dispatcher (matmul.h) and the bf16 products
 * (bf16.h) both call down into it. */
#ifndef MODE_CORE_KERNELS_SGEMM_H
#define MODE_CORE_KERNELS_SGEMM_H

#include <stdbool.h>

/* C = beta * C + op(A) op(B), row-major, with
 *   op(A) = A   (A is [M][K], leading dimension lda)   when !ta,
 *   op(A) = A^T (A is [K][M], leading dimension lda)   when  ta,
 *   op(B) = B   (B is [K][N], ldb)  or  B^T (B is [N][K], ldb),
 *   C is [M][N] with leading dimension ldc.
 * beta = 1 accumulates, which is how backward adds into gradients. */
void sgemm(float *c, int ldc,
           const float *a, int lda, bool ta,
           const float *b, int ldb, bool tb,
           int m, int n, int k, float beta);

/* The same contract, plain loops, double accumulation. */
void matmul_ref(float *c, int ldc,
                const float *a, int lda, bool ta,
                const float *b, int ldb, bool tb,
                int m, int n, int k, float beta);

/* BLAS threads for the products that follow (openblas_set_num_threads).
 * With a thread pool, BLAS keeps to one thread and matmul_pool() splits the
 * large products among the pool's threads instead. */
void matmul_set_threads(int threads);

#endif
