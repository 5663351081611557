/* The element-wise and row-wise kernels of ops.h split on a thread pool
 * (core/util/pool.h): rows, or runs of elements, in fixed chunks, each chunk
 * computed exactly as the serial kernel computes it, so results do not depend
 * on the thread count.  A NULL pool runs the serial kernel.  Arguments as in
 * ops.h after the pool. */
#ifndef MODE_CORE_KERNELS_PARALLEL_H
#define MODE_CORE_KERNELS_PARALLEL_H

#include <stdint.h>

struct thread_pool;
struct rope_table;

void rmsnorm_forward_pool(struct thread_pool *p, float *y, float *rstd, const float *x,
                          const float *g, int n, int d);
/* dx by rows on the pool; dg, a sum over rows, in the caller in row order. */
void rmsnorm_backward_pool(struct thread_pool *p, float *dx, float *dg, const float *dy,
                           const float *x, const float *g, const float *rstd, int n, int d);
void rope_forward_pool(struct thread_pool *p, float *x, const int32_t *pos,
                       const struct rope_table *t, int n, int n_heads, int dh);
void rope_backward_pool(struct thread_pool *p, float *dx, const int32_t *pos,
                        const struct rope_table *t, int n, int n_heads, int dh);
void swiglu_forward_pool(struct thread_pool *p, float *g, const float *a, const float *b,
                         long count);
void swiglu_backward_pool(struct thread_pool *p, float *da, float *db, const float *dg,
                          const float *a, const float *b, long count);

#endif
