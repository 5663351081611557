/* Matrix products in bfloat16, for `[run] precision = bf16`: the operands
 * are rounded to bf16 (to nearest, ties to even), their products summed in
 * fp32, and C = beta C + op(A) op(B) stays fp32, as do the master weights,
 * the gradients and the optimizer.  Three paths compute the same numbers up
 * to the order of the fp32 sums, chosen at run time by the CPU's features,
 * fastest first: Intel AMX tiles (AMX-BF16), AVX512_BF16's vdpbf16ps
 * (bf16_avx512.c: AMD Zen 4, Intel Cooper Lake, and every AMX CPU), and
 * the emulated path elsewhere (the rounded operands through cblas_sgemm,
 * slower than fp32).  matmul_bf16_ref is the plain loop all three are
 * checked against (tests/test_matmul.c). */
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


/* The paths of a bf16 product, slowest first. */
typedef enum bf16_path {
    BF16_PATH_EMULATED,
    BF16_PATH_AVX512,
    BF16_PATH_AMX,
    BF16_PATH_COUNT
} bf16_path;

/* "emulated", "avx512-bf16", "amx": the names mode-exp prints, run files'
 * provenance records (bf16_kernel) and MODE_BF16_KERNEL takes. */
const char *bf16_path_name(bf16_path path);
/* Whether this CPU (and, for AMX, the OS) lets the path run here. */
bool bf16_path_available(bf16_path path);
/* The path matmul_bf16 takes: the forced one, else the fastest available.
 * Like OpenBLAS's choice of kernels, a fact about the process: products on
 * any thread take it; the first call asks the CPU (and the OS for the AMX
 * tile state), so make it before the threads that run products exist. */
bf16_path bf16_path_current(void);
/* From now on matmul_bf16 takes path (for tests and benchmarks: each path
 * against the reference, AVX512_BF16 on an AMX machine too); -ENOTSUP,
 * and nothing changes, when the CPU lacks it. */
int bf16_force_path(bf16_path path);
/* MODE_BF16_KERNEL: unset or empty, the fastest path; else the path of
 * that name (bf16_force_path).  -EINVAL for a name that is no path and
 * -ENOTSUP for a path this CPU lacks, with a message in err. */
int bf16_path_from_env(char *err, size_t err_len);

/* Work space, in bytes, that matmul_bf16 needs for these sizes (on any
 * path). */
size_t matmul_bf16_work_bytes(int m, int n, int k);

/* matmul()'s contract (matmul.h) with bf16 operands, on
 * bf16_path_current(); work is matmul_bf16_work_bytes(m, n, k) bytes,
 * 64-byte aligned. */
void matmul_bf16(float *c, int ldc,
                 const float *a, int lda, bool ta,
                 const float *b, int ldb, bool tb,
                 int m, int n, int k, float beta, void *work);
/* The same on the given path, which must be available. */
void matmul_bf16_on(bf16_path path, float *c, int ldc,
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
