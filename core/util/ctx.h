/* The run context: what used to be globals in other codes (rank, the
 * communicator, the seed, timers) travels in this struct, passed down. */
#ifndef MODE_CORE_UTIL_CTX_H
#define MODE_CORE_UTIL_CTX_H

#include <stddef.h>
#include <stdint.h>

struct comm;
struct thread_pool;

typedef enum timer_phase {
    PHASE_MATMUL,    /* projections, MLP, head */
    PHASE_ATTENTION, /* scores, softmax, P V */
    PHASE_ROUTING,   /* routing scores, top-k, gather and scatter */
    PHASE_EXPERTS,   /* expert MLPs */
    PHASE_COMM,      /* MPI */
    PHASE_OPTIMIZER,
    PHASE_OTHER,
    PHASE_COUNT
} timer_phase;

typedef struct mode_ctx {
    int rank, size;      /* 0, 1 without MPI */
    struct comm *comm;   /* NULL without MPI */
    uint64_t seed;       /* the random routing's seed (run.init_seed); the other streams
                            take theirs from the config (core/rng/streams.h) */
    double timers[PHASE_COUNT]; /* seconds, accumulated */
    struct thread_pool *pool;   /* NULL: one thread outside BLAS */
} mode_ctx;

/* Monotonic wall clock in seconds. */
double mode_now(void);
/* "12.3s", "4m05s", "2h10m": a duration as the programs print it. */
void mode_format_duration(char *buf, size_t n, double seconds);

/* Adds the time since t0 to phase p of ctx's timers (no-op without ctx). */
static inline void mode_time_add(mode_ctx *ctx, timer_phase p, double t0)
{
    if (ctx)
        ctx->timers[p] += mode_now() - t0;
}

#endif
