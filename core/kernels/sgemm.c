#include "core/kernels/sgemm.h"

#include <cblas.h>
#include <stddef.h>

void matmul_set_threads(int threads)
{
    openblas_set_num_threads(threads);
}

void sgemm(float *c, int ldc,
           const float *a, int lda, bool ta,
           const float *b, int ldb, bool tb,
           int m, int n, int k, float beta)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        /* sgemm with k = 0 still scales C by beta; keep that meaning. */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void matmul_ref(float *c, int ldc,
                const float *a, int lda, bool ta,
                const float *b, int ldb, bool tb,
                int m, int n, int k, float beta)
{
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                float av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                float bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += (double)av * (double)bv;
            }
            float *cij = &c[(size_t)i * ldc + j];
            /* beta = 0 overwrites, even a NaN already in C (sgemm's rule). */
            *cij = (float)(beta == 0.0f ? s : (double)beta * (double)*cij + s);
        }
    }
}
