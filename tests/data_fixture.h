/* The data tests' fixture: a fresh mkdtemp folder (cmocka state), removed
 * with what it holds, and the files the tests write into it. */
#ifndef MODE_TESTS_DATA_FIXTURE_H
#define MODE_TESTS_DATA_FIXTURE_H

#include "core/data/data.h"

#include <stddef.h>

typedef struct tmp_dir {
    char path[256];
} tmp_dir;

/* cmocka setup and teardown: *state becomes the tmp_dir. */
int setup_tmp(void **state);
int teardown_tmp(void **state);
/* Write bytes to dir/name; the full path goes to path. */
void write_file(const tmp_dir *t, const char *name, const void *bytes, size_t n,
                char *path, size_t path_len);
/* A text file of n bytes whose byte i is a function of i. */
void write_text(const tmp_dir *t, const char *name, long n, char *path, size_t path_len);
/* A .bin whose token i is i itself (so a sample shows its offset). */
void write_counting_bin(const tmp_dir *t, const char *name, long n, char *path,
                        size_t path_len);
/* Every token of d's corpus, training split then held-out split, through
 * dataset_read (n_tokens of them into a malloc'd array). */
token_t *read_all(const dataset *d);

#endif
