#include "core/kernels/matmul.h"

#include <cblas.h>
#include <stddef.h>

void matmul(float *c, int ldc,
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

void linear_forward(float *y, const float *x, const float *w, int n, int in, int out, float beta)
{
    matmul(y, out, x, in, false, w, out, false, n, out, in, beta);
}

void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                     int n, int in, int out, float dx_beta)
{
    if (dx)
        matmul(dx, in, dy, out, false, w, out, true, n, in, out, dx_beta);
    if (dw)
        matmul(dw, out, x, in, true, dy, out, false, in, out, n, 1.0f);
}
