#include "core/util/heap.h"

#include <malloc.h>

#if defined(__SANITIZE_ADDRESS__)
#define MODE_HEAP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MODE_HEAP_ASAN 1
#endif
#endif

#ifdef MODE_HEAP_ASAN
#include <stddef.h>
/* The sanitizer runtime's interface (clang ships its header, gcc does not). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

double heap_bytes_in_use(void)
{
#ifdef MODE_HEAP_ASAN
    /* AddressSanitizer replaces malloc; glibc's mallinfo2 then reads its
     * own, empty arenas (zero).  Ask the sanitizer's allocator instead. */
    return (double)__sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
#endif
}
