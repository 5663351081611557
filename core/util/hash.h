/* FNV-1a, 64 bits: a cheap digest of bytes that are compared, not
 * defended (the data's fingerprint, what ranks agree on at start-up). */
#ifndef MODE_CORE_UTIL_HASH_H
#define MODE_CORE_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV1A64_OFFSET 0xcbf29ce484222325ULL

/* h (HASH_FNV1A64_OFFSET to start) extended by n bytes at p. */
static inline uint64_t hash_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

#endif
