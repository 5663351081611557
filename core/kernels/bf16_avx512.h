/* The bf16 product on AVX512_BF16 (vdpbf16ps: two bf16 products summed
 * into each fp32 lane), for CPUs with AVX-512 but no AMX tiles (AMD Zen 4;
 * Intel Cooper Lake; also runnable on Sapphire Rapids).  Internal to
 * kernels/: the rest of the code reaches it through matmul_bf16 (bf16.h),
 * which chooses the path. */
#ifndef MODE_CORE_KERNELS_BF16_AVX512_H
#define MODE_CORE_KERNELS_BF16_AVX512_H

#include <stdbool.h>
#include <stddef.h>

/* Whether this CPU has AVX-512 (F, BW) with AVX512_BF16 and the OS saves
 * the AVX-512 state (asked once). */
bool bf16_avx512_ready(void);

/* Work space, in bytes, for these sizes: both operands packed. */
size_t bf16_avx512_work_bytes(int m, int n, int k);

/* matmul()'s contract (matmul.h) with bf16-rounded operands; only when
 * bf16_avx512_ready().  work: bf16_avx512_work_bytes bytes, 64-byte
 * aligned.  The order of the sums depends on (m, n, k) alone.  It packs
 * both operands, then runs bf16_avx512_product on them. */
void matmul_bf16_avx512(float *c, int ldc,
                        const float *a, int lda, bool ta,
                        const float *b, int ldb, bool tb,
                        int m, int n, int k, float beta, void *work);

/* The same in steps, so that an operand several products read whole (the
 * weight every band of matmul_pool multiplies) is packed once: op(A)
 * (m x k, matmul()'s layout) and op(B) (k x n) rounded to bf16 and packed
 * as pairs along K, each in bf16_avx512_packed_bytes(m or n, k) bytes,
 * 64-byte aligned.  A packing is cut along K into bf16_avx512_k_blocks(k)
 * blocks; a call packs blocks [block0, block1), so that threads can share
 * one out.  The packed operands are exact (bf16_from_float), so the
 * product's bits do not depend on who packed them. */
int bf16_avx512_k_blocks(int k);
size_t bf16_avx512_packed_bytes(int w, int k);
void bf16_avx512_pack_a(void *pa, const float *a, int lda, bool ta, int m, int k, int block0,
                        int block1);
void bf16_avx512_pack_b(void *pb, const float *b, int ldb, bool tb, int k, int n, int block0,
                        int block1);
/* bf16_avx512_product with one operand packed (shared) and the other, the
 * band's own (op(A) when own_is_a, stored as x with ldx and transposed when
 * xt, as matmul() takes it; else op(B)), packed here into own
 * (bf16_avx512_packed_bytes of its width and k) unit by unit: sub-blocks of
 * its width, chunks of K.  While the tiles of one unit run, the next unit's
 * source is prefetched, so that reading the operand from memory overlaps
 * the arithmetic instead of stalling the packing.  The same sums in the
 * same order as bf16_avx512_product. */
void bf16_avx512_band(float *c, int ldc, const float *x, int ldx, bool xt, bool own_is_a,
                      const void *shared, int m, int n, int k, float beta, void *own);

#endif
