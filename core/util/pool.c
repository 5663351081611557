#include "core/util/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct pool_worker {
    struct thread_pool *p;
    int index; /* 1 .. threads - 1; the caller is worker 0 */
    pthread_t tid;
} pool_worker;

struct thread_pool {
    int threads, started;
    pool_worker w[POOL_MAX_THREADS];
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    /* the current job; workers read it after seeing a new generation */
    pool_task_fn fn;
    void *arg;
    int n_tasks;
    atomic_int next;     /* the next task to take */
    int busy;            /* workers still in the current job (under lock) */
    unsigned generation; /* bumped by every pool_run (under lock) */
    int quit;
    /* one a worker, then the shared one */
    void *scratch[POOL_MAX_THREADS + 1];
    size_t scratch_bytes[POOL_MAX_THREADS + 1];
    atomic_int running; /* a pool_run is in progress: a nested one runs serially */
};

static void take_tasks(thread_pool *p, int worker)
{
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks)
            return;
        p->fn(p->arg, t, worker);
    }
}

static void *worker_main(void *arg)
{
    pool_worker *w = arg;
    thread_pool *p = w->p;
    unsigned seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->quit)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        take_tasks(p, w->index);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int build_thread_pool(thread_pool **out, int threads)
{
    thread_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->threads = threads < 1 ? 1 : threads > POOL_MAX_THREADS ? POOL_MAX_THREADS : threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->running, 0);
    for (int i = 1; i < p->threads; i++) {
        p->w[i].p = p;
        p->w[i].index = i;
        if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i])) {
            free_thread_pool(&p);
            return -EAGAIN;
        }
        p->started = i;
    }
    *out = p;
    return 0;
}

void free_thread_pool(thread_pool **pp)
{
    thread_pool *p = *pp;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i <= p->started; i++)
        pthread_join(p->w[i].tid, NULL);
    for (int i = 0; i <= POOL_MAX_THREADS; i++)
        free(p->scratch[i]);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p);
    *pp = NULL;
}

void *pool_scratch(thread_pool *p, int worker, size_t bytes)
{
    if (p->scratch_bytes[worker] < bytes) {
        free(p->scratch[worker]);
        size_t rounded = (bytes + 63) / 64 * 64;
        p->scratch[worker] = aligned_alloc(64, rounded);
        p->scratch_bytes[worker] = p->scratch[worker] ? rounded : 0;
    }
    return p->scratch[worker];
}

void *pool_shared_scratch(thread_pool *p, size_t bytes)
{
    return pool_scratch(p, POOL_MAX_THREADS, bytes);
}

void pool_run(thread_pool *p, int n_tasks, pool_task_fn fn, void *arg)
{
    if (!p || p->threads == 1 || n_tasks <= 1 || atomic_exchange(&p->running, 1)) {
        for (int t = 0; t < n_tasks; t++)
            fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    take_tasks(p, 0);
    pthread_mutex_lock(&p->lock);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    atomic_store(&p->running, 0);
}

typedef struct range_job {
    pool_range_fn fn;
    void *arg;
    long count, chunk;
} range_job;

static void range_task(void *arg, int task, int worker)
{
    const range_job *j = arg;
    long b = (long)task * j->chunk, e = b + j->chunk < j->count ? b + j->chunk : j->count;
    j->fn(j->arg, b, e);
}

void pool_for(thread_pool *p, long count, long chunk, pool_range_fn fn, void *arg)
{
    if (count <= 0)
        return;
    /* the same chunks at any thread count, one thread included */
    range_job j = { fn, arg, count, chunk };
    pool_run(p, (int)((count + chunk - 1) / chunk), range_task, &j);
}
