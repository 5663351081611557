/* Matrix products in bfloat16, for `[run] precision = bf16`: the operands
 * are rounded to bf16 (to nearest, ties to even), their products summed in
 * fp32, and C = beta C + op(A) op(B) stays fp32, as do the master weights,
 * the gradients and the optimizer.  On a CPU with Intel AMX (AMX-BF16) the
 * products run on the tile unit; elsewhere they are emulated as defined,
 * the rounded operands through cblas_sgemm (slower than fp32, the same
 * numbers up to the order of the fp32 sums).  matmul_bf16_ref is the plain
 * loop both are checked against (tests/test_matmul.c). */
#ifndef MODE_CORE_KERNELS_BF16_H
#define MODE_CORE_KERNELS_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_from_float(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static inline float bf16_round(float x)
{
    return bf16_to_float(bf16_from_float(x));
}

/* Whether this machine has AMX-BF16 and the kernel lets this process use
 * it (asked once; call before the threads that will use it exist). */
bool bf16_amx_ready(void);

/* Work space, in bytes, that matmul_bf16 needs for these sizes. */
size_t matmul_bf16_work_bytes(int m, int n, int k);

/* matmul()'s contract (matmul.h) with bf16 operands; work is
 * matmul_bf16_work_bytes(m, n, k) bytes, 64-byte aligned. */
void matmul_bf16(float *c, int ldc,
                 const float *a, int lda, bool ta,
                 const float *b, int ldb, bool tb,
                 int m, int n, int k, float beta, void *work);
/* The same on the emulated path whatever the machine (for tests). */
void matmul_bf16_emulated(float *c, int ldc,
                          const float *a, int lda, bool ta,
                          const float *b, int ldb, bool tb,
                          int m, int n, int k, float beta, void *work);
/* matmul_ref (plain loops, double sums) on the bf16-rounded operands;
 * -ENOMEM when their copies cannot be made. */
int matmul_bf16_ref(float *c, int ldc,
                    const float *a, int lda, bool ta,
                    const float *b, int ldb, bool tb,
                    int m, int n, int k, float beta);

#endif
