#include "core/model/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void *buf_take(buf_plan *p, size_t count, size_t elem)
{
    size_t at = (p->used + p->align - 1) / p->align * p->align;
    p->used = at + count * elem;
    return p->base ? p->base + at : NULL;
}

int buf_alloc(buf_plan *p, void **block)
{
    size_t bytes = (p->used + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    void *b = aligned_alloc(BUF_ALIGN, bytes ? bytes : BUF_ALIGN);
    *block = b;
    if (!b)
        return -ENOMEM;
    memset(b, 0, bytes ? bytes : BUF_ALIGN);
    p->base = b;
    p->used = 0;
    return 0;
}
