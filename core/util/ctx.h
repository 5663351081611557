/* The run context: what used to be globals in other codes (rank, the
 * communicator, the seed, timers) travels in this struct, passed down. */
#ifndef MODE_CORE_UTIL_CTX_H
#define MODE_CORE_UTIL_CTX_H

#include <stdint.h>

struct comm;
struct thread_pool;

typedef enum timer_phase {
    PHASE_MATMUL,    /* projections, MLP, head */
    PHASE_ATTENTION, /* scores, softmax, P V */
    PHASE_ROUTING,   /* routers, top-k, gather and scatter */
    PHASE_EXPERTS,   /* expert MLPs */
    PHASE_COMM,      /* MPI */
    PHASE_OPTIMIZER,
    PHASE_OTHER,
    PHASE_COUNT
} timer_phase;

typedef struct mode_ctx {
    int rank, size;      /* 0, 1 without MPI */
    struct comm *comm;   /* NULL without MPI */
    uint64_t seed;       /* the run's seed: every PCG stream is keyed from it */
    double timers[PHASE_COUNT]; /* seconds, accumulated */
    struct thread_pool *pool;   /* NULL: one thread outside BLAS */
} mode_ctx;

/* Monotonic wall clock in seconds. */
double mode_now(void);

/* Adds the time since t0 to phase p of ctx's timers (no-op without ctx). */
static inline void mode_time_add(mode_ctx *ctx, timer_phase p, double t0)
{
    if (ctx)
        ctx->timers[p] += mode_now() - t0;
}

#endif
