/* Buffers described once (llm.c computes sizes once, then allocates and
 * points): a kind writes one layout function that takes each of its
 * buffers from a plan.  Counting (no base), the plan sums the bytes:
 * mode-exp plan's numbers.  With a base (one allocation of the counted
 * bytes, or the backward work space), the same calls point the buffers at
 * their slices.  So build, plan and the carving of the work space cannot
 * disagree: there is nothing to keep in step by hand.
 *
 *     buf_plan p = buf_counting(BUF_ALIGN);
 *     layout(&p, s, ...);              counts; s's pointers get NULL
 *     if (buf_alloc(&p, &s->block)) ... one allocation
 *     layout(&p, s, ...);              points */
#ifndef MODE_CORE_MODEL_BUF_H
#define MODE_CORE_MODEL_BUF_H

#include <stddef.h>

/* Slices of state buffers start on a cache line (and an AVX-512 vector);
 * the work space is carved float by float, as it always was. */
#define BUF_ALIGN 64

typedef struct buf_plan {
    char *base;   /* NULL: counting only */
    size_t used;  /* bytes taken so far */
    size_t align; /* each slice's start */
} buf_plan;

static inline buf_plan buf_counting(size_t align)
{
    buf_plan p = { .base = NULL, .used = 0, .align = align };
    return p;
}

/* A plan that carves the floats at base (a work space) contiguously. */
static inline buf_plan buf_carving(float *base)
{
    buf_plan p = { .base = (char *)base, .used = 0, .align = sizeof(float) };
    return p;
}

/* count elements of elem bytes: their slice, or NULL while counting. */
void *buf_take(buf_plan *p, size_t count, size_t elem);
/* Allocate the counted bytes (zeroed, aligned) into *block and make p
 * point from its start; 0 or -ENOMEM.  A plan of no bytes allocates a
 * minimal block, so that a layout is always pointed somewhere. */
int buf_alloc(buf_plan *p, void **block);

/* Typed takes. */
#define BUF_FLOATS(p, n) ((float *)buf_take((p), (size_t)(n), sizeof(float)))
#define BUF_INTS(p, n) ((int *)buf_take((p), (size_t)(n), sizeof(int)))
#define BUF_I32(p, n) ((int32_t *)buf_take((p), (size_t)(n), sizeof(int32_t)))
#define BUF_BYTES(p, n) ((unsigned char *)buf_take((p), (size_t)(n), 1))
#define BUF_DOUBLES(p, n) ((double *)buf_take((p), (size_t)(n), sizeof(double)))

#endif
