#include "core/kernels/parallel.h"

#include "core/kernels/ops.h"
#include "core/util/pool.h"

#include <stddef.h>

enum {
    ROW_CHUNK = 64,         /* rows a task */
    ELEMENT_CHUNK = 1 << 15 /* elements a task */
};

typedef struct row_job {
    float *y, *rstd, *dx;
    const float *x, *g, *dy, *crstd;
    const int32_t *pos;
    const struct rope_table *rope;
    int d, n_heads, dh;
} row_job;

static void rmsnorm_forward_rows(void *arg, long b, long e)
{
    const row_job *j = arg;
    size_t o = (size_t)b * j->d;
    rmsnorm_forward(j->y + o, j->rstd + b, j->x + o, j->g, (int)(e - b), j->d);
}

void rmsnorm_forward_pool(struct thread_pool *p, float *y, float *rstd, const float *x,
                          const float *g, int n, int d)
{
    row_job j = { .y = y, .rstd = rstd, .x = x, .g = g, .d = d };
    pool_for(p, n, ROW_CHUNK, rmsnorm_forward_rows, &j);
}

static void rmsnorm_backward_rows(void *arg, long b, long e)
{
    const row_job *j = arg;
    size_t o = (size_t)b * j->d;
    rmsnorm_backward_dx(j->dx + o, j->dy + o, j->x + o, j->g, j->crstd + b, (int)(e - b), j->d);
}

void rmsnorm_backward_pool(struct thread_pool *p, float *dx, float *dg, const float *dy,
                           const float *x, const float *g, const float *rstd, int n, int d)
{
    row_job j = { .dx = dx, .dy = dy, .x = x, .g = g, .crstd = rstd, .d = d };
    pool_for(p, n, ROW_CHUNK, rmsnorm_backward_rows, &j);
    rmsnorm_backward_dg(dg, dy, x, rstd, n, d);
}

static void rope_forward_rows(void *arg, long b, long e)
{
    const row_job *j = arg;
    rope_forward(j->y + (size_t)b * j->n_heads * j->dh, j->pos + b, j->rope, (int)(e - b),
                 j->n_heads, j->dh);
}

static void rope_backward_rows(void *arg, long b, long e)
{
    const row_job *j = arg;
    rope_backward(j->y + (size_t)b * j->n_heads * j->dh, j->pos + b, j->rope, (int)(e - b),
                  j->n_heads, j->dh);
}

void rope_forward_pool(struct thread_pool *p, float *x, const int32_t *pos,
                       const struct rope_table *t, int n, int n_heads, int dh)
{
    row_job j = { .y = x, .pos = pos, .rope = t, .n_heads = n_heads, .dh = dh };
    pool_for(p, n, ROW_CHUNK, rope_forward_rows, &j);
}

void rope_backward_pool(struct thread_pool *p, float *dx, const int32_t *pos,
                        const struct rope_table *t, int n, int n_heads, int dh)
{
    row_job j = { .y = dx, .pos = pos, .rope = t, .n_heads = n_heads, .dh = dh };
    pool_for(p, n, ROW_CHUNK, rope_backward_rows, &j);
}

typedef struct swiglu_job {
    float *g, *da, *db;
    const float *a, *b, *dg;
} swiglu_job;

static void swiglu_forward_range(void *arg, long b, long e)
{
    const swiglu_job *j = arg;
    swiglu_forward(j->g + b, j->a + b, j->b + b, e - b);
}

static void swiglu_backward_range(void *arg, long b, long e)
{
    const swiglu_job *j = arg;
    swiglu_backward(j->da + b, j->db + b, j->dg + b, j->a + b, j->b + b, e - b);
}

void swiglu_forward_pool(struct thread_pool *p, float *g, const float *a, const float *b,
                         long count)
{
    swiglu_job j = { .g = g, .a = a, .b = b };
    pool_for(p, count, ELEMENT_CHUNK, swiglu_forward_range, &j);
}

void swiglu_backward_pool(struct thread_pool *p, float *da, float *db, const float *dg,
                          const float *a, const float *b, long count)
{
    swiglu_job j = { .da = da, .db = db, .dg = dg, .a = a, .b = b };
    pool_for(p, count, ELEMENT_CHUNK, swiglu_backward_range, &j);
}
