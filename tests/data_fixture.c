/* The data tests' fixture (data_fixture.h). */
#include "data_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int setup_tmp(void **state)
{
    tmp_dir *t = calloc(1, sizeof(*t));
    if (!t)
        return -1;
    const char *base = getenv("TMPDIR");
    snprintf(t->path, sizeof(t->path), "%s/mode-data-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t->path)) {
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

/* Remove dir and everything in it (the tests make at most one level of
 * sub-folders, empty ones). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[512];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            if (unlink(p) != 0)
                rmdir(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

int teardown_tmp(void **state)
{
    tmp_dir *t = *state;
    remove_tree(t->path);
    free(t);
    return 0;
}

/* Write bytes to dir/name; the full path goes to path. */
void write_file(const tmp_dir *t, const char *name, const void *bytes, size_t n,
                char *path, size_t path_len)
{
    snprintf(path, path_len, "%s/%s", t->path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n > 0)
        assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A text file of n bytes whose byte i is a function of i. */
void write_text(const tmp_dir *t, const char *name, long n, char *path, size_t path_len)
{
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    for (long i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 7 + 3);
    write_file(t, name, b, (size_t)n, path, path_len);
    free(b);
}

/* A .bin whose token i is i itself (so a sample shows its offset). */
void write_counting_bin(const tmp_dir *t, const char *name, long n, char *path,
                        size_t path_len)
{
    uint8_t *b = malloc(2 * (size_t)n + 1);
    assert_non_null(b);
    for (long i = 0; i < n; i++) {
        b[2 * i] = (uint8_t)(i & 0xff);
        b[2 * i + 1] = (uint8_t)(i >> 8);
    }
    write_file(t, name, b, 2 * (size_t)n, path, path_len);
    free(b);
}

/* Every token of d's corpus, training split then held-out split, through
 * dataset_read (n_tokens of them into a malloc'd array). */
token_t *read_all(const dataset *d)
{
    char err[512];
    token_t *all = malloc((size_t)d->source->n_tokens * sizeof(token_t) + 1);
    assert_non_null(all);
    assert_int_equal(d->train.first, 0);
    assert_int_equal(d->eval.first, d->train.n_tokens);
    assert_int_equal(d->train.n_tokens + d->eval.n_tokens, d->source->n_tokens);
    if (dataset_read(d, &d->train, 0, d->train.n_tokens, all, err, sizeof(err)) ||
        dataset_read(d, &d->eval, 0, d->eval.n_tokens, all + d->train.n_tokens, err,
                     sizeof(err)))
        fail_msg("%s", err);
    return all;
}
