/* Cross-Layer Attention (docs/kinds/cla.md) beyond the contract test (which
 * runs cla's groups through finite differences, decoding and ranks):
 *   1. the key-value cache that decoding allocates, measured at the
 *      allocator (glibc's mallinfo2, every block on the heap), per token:
 *      a stack of groups of s keeps 1/s of the plain stack's;
 *   2. the stacks cla refuses, each with a message that names the layer
 *      and what it found: a cla layer at the bottom, above a routed layer
 *      (mod: its keys are the selected rows' only) and above moe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/model/model.h"
#include "moe/registry.h"
#include "testlib.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { L = 4, S = 1024 };

/* Bytes the decoding caches of a fresh model of the stack take per
 * position, as model_decode_cache_bytes measures them at the allocator. */
static double cache_bytes_per_token(const char *const *kinds)
{
    layer_spec specs[L];
    for (int l = 0; l < L; l++)
        specs[l] = tl_spec(mode_kind_ops, kinds[l]);
    tl_fixture f;
    tl_make(&f, mode_kind_ops, tl_small_dims(L, S), specs, 1, 3);
    double bytes = 0.0;
    assert_int_equal(model_decode_cache_bytes(f.m, &bytes), 0);
    /* measured once: the caches only grow */
    assert_int_equal(model_decode_cache_bytes(f.m, &bytes), -EINVAL);
    tl_unmake(&f);
    return bytes;
}

static void test_cache_bytes(void **state)
{
    (void)state;
    static const char *const plain[L] = { "dense", "dense", "dense", "dense" };
    static const char *const s2[L] = { "dense", "cla", "dense", "cla" };
    static const char *const s4[L] = { "dense", "cla", "cla", "cla" };
    double b1 = cache_bytes_per_token(plain), b2 = cache_bytes_per_token(s2);
    double b4 = cache_bytes_per_token(s4);
    int d = tl_small_dims(L, S).d_model;
    printf("key-value cache per token: plain %.1f bytes, s = 2 %.1f, s = 4 %.1f\n", b1, b2, b4);
    /* the plain stack's holds at least every layer's k and v */
    assert_true(b1 >= (double)L * 2 * d * sizeof(float));
    assert_true(b2 > 0.0 && b4 > 0.0);
    /* docs/kinds/cla.md: a cache keeps 2 d floats, a score and a position
     * a position; measured on threads of their own (model.c), the reading
     * is within a few bytes of S/2 positions' */
    double want = 2.0 * d * sizeof(float) + 8.0;
    assert_true(fabs(b1 / (L * want) - 1.0) < 1e-3);
    assert_true(fabs(b2 / (L / 2 * want) - 1.0) < 1e-3);
    assert_true(fabs(b4 / (L / 4 * want) - 1.0) < 1e-3);
}

/* The stack of n layers must not build; its message names want1 and want2. */
static void refused(const char *const *kinds, int n, const char *want1, const char *want2)
{
    layer_spec specs[8];
    for (int l = 0; l < n; l++)
        specs[l] = tl_spec(mode_kind_ops, kinds[l]);
    model_dims dims = tl_small_dims(n, 16);
    model *m = NULL;
    char err[1024] = "";
    int rc = build_model(&m, &dims, specs, mode_kind_ops, 1, err, sizeof(err));
    printf("refused: %s\n", err);
    assert_true(rc < 0);
    assert_null(m);
    assert_non_null(strstr(err, want1));
    assert_non_null(strstr(err, want2));
}

static void test_refusals(void **state)
{
    (void)state;
    static const char *const bottom[] = { "cla", "dense" };
    static const char *const routed[] = { "dense", "mod", "cla" };
    static const char *const group_over_routed[] = { "dense", "mod", "cla", "cla" };
    static const char *const experts[] = { "dense", "moe", "cla" };
    refused(bottom, 2, "layer 0 (cla)", "bottom of the stack");
    refused(routed, 3, "layer 2 (cla)", "found mod");
    refused(group_over_routed, 4, "layer 2 (cla)", "found mod");
    refused(experts, 3, "layer 2 (cla)", "found moe");
}

int main(int argc, char **argv)
{
    (void)argc;
    /* mallinfo2 counts a block in glibc's per-thread cache (tcache) as in
     * use: run again with the cache off, so that a block the previous
     * model freed is not counted when the next model takes it */
    if (!getenv("GLIBC_TUNABLES")) {
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
        execv("/proc/self/exe", argv);
        perror("test_cla: execv");
        return 1;
    }
    /* every allocation on the heap and out of the fast bins, where
     * mallinfo2 counts it to the byte */
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_MXFAST, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_bytes),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
