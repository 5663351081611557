#ifndef MODE_UTIL_HEAP_H
#define MODE_UTIL_HEAP_H

/* Bytes the C allocator holds in use (glibc's mallinfo2: the arenas' blocks
 * in use plus the mmapped ones), to measure what a call allocates as the
 * difference of two readings.  glibc counts a freed block it keeps in its
 * per-thread cache (tcache, blocks up to 1 KiB) as in use: a reading is
 * exact to the byte with GLIBC_TUNABLES=glibc.malloc.tcache_count=0 and no
 * other thread allocating.  Under AddressSanitizer (which replaces malloc)
 * the sanitizer allocator's own count is read instead, exact to the byte. */
double heap_bytes_in_use(void);

#endif
