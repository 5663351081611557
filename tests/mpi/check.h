#ifndef MODE_TESTS_MPI_CHECK_H
#define MODE_TESTS_MPI_CHECK_H

#include <stdio.h>

/* CHECK(cond, fmt, ...): when cond is false, counts a failure in the
 * including file's `failures` and prints the first 20 with the rank (an
 * int `rank` in scope), the file and the line.  The MPI tests go on after
 * a failure, so that one run shows every rank's. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            if (failures <= 20) {                                                                  \
                fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);                     \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fputc('\n', stderr);                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#endif
