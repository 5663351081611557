/* A small pool of worker threads for the work outside the matrix products
 * when one rank has several cores (1 rank x 2 threads): attention per
 * (sequence, head) and the long element-wise loops.  The caller and
 * (threads - 1) workers share the tasks of one pool_run.  BLAS itself then
 * keeps to one thread (matmul_pool splits the large products on this pool):
 * OpenBLAS's own idle threads spin for a while after every call and would
 * take the core from a worker.  With one thread a pool runs its tasks in the
 * caller, in order.  A pool_run from inside a task runs serially.
 *
 * Results never depend on the thread count: every split of work (the bands
 * of a product, the chunks of a loop) has bounds that depend on the problem
 * alone, tasks write disjoint outputs, and a task computes its part the same
 * way whichever thread runs it. */
#ifndef MODE_CORE_UTIL_POOL_H
#define MODE_CORE_UTIL_POOL_H

#include <stdbool.h>
#include <stddef.h>

#define POOL_MAX_THREADS 16

typedef struct thread_pool thread_pool;

/* fn(arg, task, worker): worker in [0, threads) names the thread running the
 * task, so that a task can use per-worker scratch space. */
typedef void (*pool_task_fn)(void *arg, int task, int worker);

/* threads is clamped to [1, POOL_MAX_THREADS]. */
int build_thread_pool(thread_pool **out, int threads);
void free_thread_pool(thread_pool **p);
/* Runs fn for every task in [0, n_tasks) and returns when all are done.
 * A NULL pool runs them in the caller. */
void pool_run(thread_pool *p, int n_tasks, pool_task_fn fn, void *arg);

/* Work space of at least bytes for worker (64-byte aligned), kept and grown
 * across calls; NULL when it cannot grow. */
void *pool_scratch(thread_pool *p, int worker, size_t bytes);
/* The same, one for the whole pool: what the caller's tasks share (filled
 * by one pool_run, read by the next). */
void *pool_shared_scratch(thread_pool *p, size_t bytes);

/* Element-wise loops: fn(arg, begin, end) over [0, count) in chunks of
 * chunk elements (the last may be shorter), the same chunks at any thread
 * count. */
typedef void (*pool_range_fn)(void *arg, long begin, long end);
void pool_for(thread_pool *p, long count, long chunk, pool_range_fn fn, void *arg);

#endif
