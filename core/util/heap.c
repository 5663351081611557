#include "core/util/heap.h"

#include <malloc.h>

double heap_bytes_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
}
