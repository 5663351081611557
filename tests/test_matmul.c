/* Tests for core/kernels/matmul: matmul() (cblas_sgemm) against matmul_ref()
 * (plain loops, double accumulation) for every transpose and beta
 * combination over random shapes and leading dimensions, and linear_forward /
 * linear_backward against expectations built with matmul_ref on explicitly
 * transposed operands (so the expectation does not share their transpose
 * flags).
 *
 * Tolerance: a float product of length k with N(0,1) inputs has rounding
 * error of order 2^-24 * sqrt(k) * |C|, so
 *     max |C - C_ref| <= 1e-4 * (1 + max |C_ref|) * sqrt(k)
 * leaves a margin of about 1000 for reordering (blocking, FMA) in the BLAS,
 * while a wrong element, a wrong transpose or a dropped beta term is off by
 * O(1) relative to |C_ref|. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/bf16.h"
#include "core/kernels/bf16_avx512.h"
#include "core/kernels/matmul.h"
#include "core/util/pool.h"
#include "core/rng/pcg32.h"

#define NSHAPES 36
#define MAXDIM 97
#define PAD_SENTINEL 1234.5f /* C's padding: must survive untouched */

/* rows x cols in a buffer of leading dimension ld; padding gets pad. */
static float *mat(pcg32 *rng, int rows, int cols, int ld, float pad)
{
    float *p = malloc((size_t)rows * ld * sizeof(float));
    assert_non_null(p);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < ld; j++)
            p[(size_t)i * ld + j] = j < cols ? pcg32_normal(rng) : pad;
    return p;
}

static float *copy(const float *p, size_t count)
{
    float *q = malloc(count * sizeof(float));
    assert_non_null(q);
    memcpy(q, p, count * sizeof(float));
    return q;
}

static float *transpose(const float *p, int rows, int cols)
{
    float *t = malloc((size_t)rows * cols * sizeof(float));
    assert_non_null(t);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            t[(size_t)j * rows + i] = p[(size_t)i * cols + j];
    return t;
}

/* Compare c with ref (rows x cols, leading dimension ld) under the tolerance
 * above for products of length k; padding columns of c must still hold
 * PAD_SENTINEL when check_pad.  Returns max |c - ref| / (1 + max |ref|). */
static double check_close(const char *what, const float *c, const float *ref, int rows,
                          int cols, int ld, int k, bool check_pad)
{
    double err = 0.0, refmax = 0.0;
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < ld; j++) {
            size_t o = (size_t)i * ld + j;
            if (j >= cols) {
                if (check_pad && c[o] != PAD_SENTINEL)
                    fail_msg("%s: padding of C written at (%d, %d)", what, i, j);
                continue;
            }
            double e = fabs((double)c[o] - (double)ref[o]);
            if (!(e <= err)) /* also catches NaN */
                err = isnan(e) ? (double)INFINITY : e;
            refmax = fmax(refmax, fabs((double)ref[o]));
        }
    }
    double tol = 1e-4 * (1.0 + refmax) * sqrt((double)(k > 1 ? k : 1));
    if (!(err <= tol))
        fail_msg("%s: max abs err %.3e > tol %.3e (rows %d cols %d k %d ld %d)", what, err,
                 tol, rows, cols, k, ld);
    return err / (1.0 + refmax);
}

static int pad(pcg32 *rng)
{
    /* about half the operands are views into wider rows */
    return pcg32_bounded(rng, 2) ? 0 : 1 + (int)pcg32_bounded(rng, 5);
}

/* One product's operands: combo picks the transpositions (bits 0, 1) and
 * beta (0, 1, 0.5); about half of them are views into wider rows.  The
 * operands' padding is NaN (reading it would poison C); C's padding holds
 * PAD_SENTINEL, and with beta = 0 C itself is NaN (it must be overwritten). */
typedef struct mm_case {
    float *a, *b, *c;
    int lda, ldb, ldc;
    bool ta, tb;
    float beta;
} mm_case;

static mm_case make_case(pcg32 *rng, int m, int n, int k, int combo)
{
    static const float betas[] = { 0.0f, 1.0f, 0.5f };
    mm_case x = { .ta = combo & 1, .tb = (combo >> 1) & 1, .beta = betas[combo >> 2] };
    /* stored shapes: A is [m][k] or [k][m], B is [k][n] or [n][k] */
    int ar = x.ta ? k : m, ac = x.ta ? m : k, br = x.tb ? n : k, bc = x.tb ? k : n;
    x.lda = ac + pad(rng);
    x.ldb = bc + pad(rng);
    x.ldc = n + pad(rng);
    x.a = mat(rng, ar, ac, x.lda, NAN);
    x.b = mat(rng, br, bc, x.ldb, NAN);
    x.c = mat(rng, m, n, x.ldc, PAD_SENTINEL);
    if (x.beta == 0.0f)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                x.c[(size_t)i * x.ldc + j] = NAN;
    return x;
}

static void free_case(mm_case *x)
{
    free(x->a);
    free(x->b);
    free(x->c);
}

static void test_matmul_vs_ref(void **st)
{
    (void)st;
    static const int fixed[][3] = {
        { 1, 1, 1 },    { 1, 1, 97 },  { 97, 1, 1 },  { 1, 97, 1 },  { 97, 97, 97 },
        { 1, 97, 97 },  { 97, 1, 97 }, { 97, 97, 1 }, { 2, 3, 5 },   { 7, 1, 13 },
        { 31, 17, 1 },  { 64, 64, 64 }, { 33, 65, 9 },
    };
    const int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    pcg32 rng;
    pcg32_seed(&rng, 20240611u, 1u);
    double worst = 0.0;
    int cases = 0;
    for (int s = 0; s < NSHAPES; s++) {
        int m, n, k;
        if (s < nfixed) {
            m = fixed[s][0], n = fixed[s][1], k = fixed[s][2];
        } else {
            m = 1 + (int)pcg32_bounded(&rng, MAXDIM);
            n = 1 + (int)pcg32_bounded(&rng, MAXDIM);
            k = 1 + (int)pcg32_bounded(&rng, MAXDIM);
        }
        for (int combo = 0; combo < 12; combo++) {
            mm_case x = make_case(&rng, m, n, k, combo);
            float *ref = copy(x.c, (size_t)m * x.ldc);
            matmul(x.c, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb, m, n, k, x.beta);
            matmul_ref(ref, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb, m, n, k, x.beta);
            worst = fmax(worst, check_close("matmul", x.c, ref, m, n, x.ldc, k, true));
            cases++;
            free_case(&x);
            free(ref);
        }
    }
    print_message("matmul vs matmul_ref: max |C - ref| / (1 + max |ref|) = %.2e over %d cases "
                  "(tolerance 1e-4 sqrt(k))\n", worst, cases);
}

/* beta = 0 on a NaN-filled C, including k = 0 (no product at all), and
 * k = 0 with beta = 0.5 (C is only scaled). */
static void test_beta0_overwrites_nan(void **st)
{
    (void)st;
    pcg32 rng;
    pcg32_seed(&rng, 20240611u, 2u);
    const int m = 5, n = 4;
    for (int k = 0; k <= 3; k += 3) {
        for (int combo = 0; combo < 4; combo++) {
            bool ta = combo & 1, tb = combo >> 1;
            int kk = k > 0 ? k : 1; /* operand storage even when k = 0 */
            float *a = mat(&rng, ta ? kk : m, ta ? m : kk, ta ? m : kk, 0.0f);
            float *b = mat(&rng, tb ? n : kk, tb ? kk : n, tb ? kk : n, 0.0f);
            float c[5 * 4], ref[5 * 4];
            for (int i = 0; i < m * n; i++)
                c[i] = NAN;
            matmul(c, n, a, ta ? m : kk, ta, b, tb ? kk : n, tb, m, n, k, 0.0f);
            for (int i = 0; i < m * n; i++)
                assert_false(isnan(c[i]));
            for (int i = 0; i < m * n; i++)
                ref[i] = NAN;
            matmul_ref(ref, n, a, ta ? m : kk, ta, b, tb ? kk : n, tb, m, n, k, 0.0f);
            check_close("beta=0 on NaN", c, ref, m, n, n, k, false);
            free(a);
            free(b);
        }
    }
    float c[6], ref[6];
    for (int i = 0; i < 6; i++)
        c[i] = ref[i] = pcg32_normal(&rng);
    matmul(c, 3, c, 1, false, c, 1, false, 2, 3, 0, 0.5f);
    matmul_ref(ref, 3, ref, 1, false, ref, 1, false, 2, 3, 0, 0.5f);
    for (int i = 0; i < 6; i++)
        assert_true(c[i] == ref[i]);
}

/* y = x W, dx = dy W^T, dW += x^T dy, with every beta and NULL combination,
 * against matmul_ref on explicit transposes. */
static void test_linear(void **st)
{
    (void)st;
    static const int shapes[][3] = { { 5, 7, 3 }, { 1, 13, 9 }, { 17, 4, 1 }, { 8, 8, 8 },
                                     { 33, 21, 40 } };
    pcg32 rng;
    pcg32_seed(&rng, 20240611u, 3u);
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *x = mat(&rng, n, in, in, 0.0f), *w = mat(&rng, in, out, out, 0.0f);
        float *dy = mat(&rng, n, out, out, 0.0f);
        float *wt = transpose(w, in, out), *xt = transpose(x, n, in);
        float *y0 = mat(&rng, n, out, out, 0.0f), *dx0 = mat(&rng, n, in, in, 0.0f);
        float *dw0 = mat(&rng, in, out, out, 0.0f);
        /* forward, beta 0 (over NaN) and 1 */
        for (int beta = 0; beta <= 1; beta++) {
            float *y = copy(y0, (size_t)n * out), *ye = copy(y0, (size_t)n * out);
            if (!beta)
                for (int i = 0; i < n * out; i++)
                    y[i] = ye[i] = NAN;
            linear_forward(NULL, y, x, w, n, in, out, (float)beta);
            matmul_ref(ye, out, x, in, false, w, out, false, n, out, in, (float)beta);
            worst = fmax(worst, check_close("linear_forward", y, ye, n, out, out, in, false));
            free(y);
            free(ye);
        }
        /* backward: mode 0 both, 1 dx only, 2 dw only; dx_beta 0 and 1 */
        for (int mode = 0; mode < 3; mode++) {
            for (int beta = 0; beta <= 1; beta++) {
                float *dx = copy(dx0, (size_t)n * in), *dxe = copy(dx0, (size_t)n * in);
                float *dw = copy(dw0, (size_t)in * out), *dwe = copy(dw0, (size_t)in * out);
                if (!beta)
                    for (int i = 0; i < n * in; i++)
                        dx[i] = dxe[i] = NAN;
                linear_backward(NULL, mode == 2 ? NULL : dx, mode == 1 ? NULL : dw, dy, x, w, n, in,
                                out, (float)beta);
                if (mode != 2) {
                    matmul_ref(dxe, in, dy, out, false, wt, in, false, n, in, out, (float)beta);
                    worst = fmax(worst, check_close("linear_backward dx", dx, dxe, n, in, in,
                                                    out, false));
                } else {
                    assert_memory_equal(dx, dxe, (size_t)n * in * sizeof(float));
                }
                if (mode != 1)
                    matmul_ref(dwe, out, xt, n, false, dy, out, false, in, out, n, 1.0f);
                /* dw only ever accumulates; untouched when NULL is passed for it */
                worst = fmax(worst, check_close("linear_backward dw", dw, dwe, in, out, out, n,
                                                false));
                free(dx);
                free(dxe);
                free(dw);
                free(dwe);
            }
        }
        free(x);
        free(w);
        free(dy);
        free(wt);
        free(xt);
        free(y0);
        free(dx0);
        free(dw0);
    }
    print_message("linear_forward/backward: max |out - ref| / (1 + max |ref|) = %.2e\n", worst);
}

/* Why a bf16 path cannot run here (the test of that path is skipped). */
static const char *bf16_missing(bf16_path path)
{
    return path == BF16_PATH_AMX ? "no AMX-BF16 tiles usable by this process"
                                 : "no AVX-512 with AVX512_BF16";
}

/* bf16 products (kernels/bf16.h) on every path this CPU has (AMX tiles,
 * AVX512_BF16, emulated), each against the plain loop on the same rounded
 * operands: only the order of the fp32 sums may differ.  Shapes span
 * several register tiles and 32 x 32 blocks, partial panels of rows and of
 * columns (not multiples of 8, 16 or 32), odd K and K of several 256-long
 * chunks, every transposition, beta 0 (over NaN), 1 and 0.5, and views
 * (whose NaN padding must stay unread). */
static void test_bf16_vs_ref(void **st)
{
    (void)st;
    static const int shapes[][3] = {
        { 1, 1, 1 },      { 1, 97, 1 },    { 97, 1, 97 },    { 16, 16, 32 },   { 32, 32, 32 },
        { 33, 65, 9 },    { 64, 64, 64 },  { 70, 50, 600 },  { 97, 97, 97 },   { 5, 300, 257 },
        { 257, 31, 33 },  { 128, 704, 256 }, { 200, 48, 1000 }, { 9, 17, 2 },   { 15, 33, 31 },
        { 24, 48, 513 },  { 40, 40, 1101 }, { 8, 16, 3 },
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    bool ran = false;
    for (int path = BF16_PATH_COUNT - 1; path >= 0; path--) {
        const char *name = bf16_path_name((bf16_path)path);
        if (!bf16_path_available((bf16_path)path)) {
            print_message("bf16 %s: skipped, %s on this CPU\n", name,
                          bf16_missing((bf16_path)path));
            continue;
        }
        pcg32 rng;
        pcg32_seed(&rng, 20261130u, 5u);
        double worst = 0.0;
        int cases = 0;
        for (int s = 0; s < nshapes; s++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            void *work = aligned_alloc(64, (matmul_bf16_work_bytes(m, n, k) + 63) / 64 * 64);
            assert_non_null(work);
            for (int combo = 0; combo < 12; combo++) {
                mm_case x = make_case(&rng, m, n, k, combo);
                float *ref = copy(x.c, (size_t)m * x.ldc);
                assert_int_equal(matmul_bf16_ref(ref, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb,
                                                 m, n, k, x.beta), 0);
                matmul_bf16_on((bf16_path)path, x.c, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb,
                               m, n, k, x.beta, work);
                worst = fmax(worst, check_close(name, x.c, ref, m, n, x.ldc, k, true));
                cases++;
                free_case(&x);
                free(ref);
            }
            free(work);
        }
        print_message("bf16 %s vs ref: max |C - ref| / (1 + max |ref|) = %.2e over %d cases\n",
                      name, worst, cases);
        ran = true;
    }
    assert_true(ran); /* the emulated path runs everywhere */
    /* and they are bf16 products: far from fp32 ones on the same operands */
    pcg32 rng;
    pcg32_seed(&rng, 20261130u, 6u);
    float *a = mat(&rng, 8, 64, 64, 0.0f), *b = mat(&rng, 64, 8, 8, 0.0f);
    float c[64], f32[64];
    assert_int_equal(matmul_bf16_ref(c, 8, a, 64, false, b, 8, false, 8, 8, 64, 0.0f), 0);
    matmul_ref(f32, 8, a, 64, false, b, 8, false, 8, 8, 64, 0.0f);
    double diff = 0.0;
    for (int i = 0; i < 64; i++)
        diff = fmax(diff, fabs((double)c[i] - (double)f32[i]));
    assert_true(diff > 1e-3);
    free(a);
    free(b);
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static uint32_t to_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

/* Every path rounds its operands exactly as bf16_from_float does: with
 * k = 1 and the other operand 1, C is the rounded operand itself (a
 * product of two bf16 is exact in fp32), so C must be the reference's bits:
 * ties to even, the carry into the exponent, overflow to infinity, NaN kept
 * quiet.  Each value goes through A and through B, stored both ways (the
 * packings differ).  A value whose rounding is a bf16 denormal may also
 * come out as a zero of its sign: vdpbf16ps and the AMX tiles treat
 * denormal inputs as zero (Intel's definition).  Also k = 0: beta 0 writes
 * zeros over NaN, beta 0.5 scales C. */
static void test_bf16_rounding(void **st)
{
    (void)st;
    static const uint32_t specials[] = {
        0x3f808000u, /* 1 + 2^-8: a tie, to even (down) */
        0x3f818000u, /* 1 + 3 2^-8: a tie, to even (up) */
        0x3f808001u, /* just above the tie: up */
        0x3f807fffu, /* just below: down */
        0xbf808000u, /* negative tie */
        0x3fffff00u, /* carries into the exponent: 2 */
        0x7f7fffffu, /* FLT_MAX: rounds to infinity */
        0x7f7f7fffu, /* stays finite */
        0x7f800000u, 0xff800000u, /* infinities */
        0x7fc00001u, 0xffc12345u, /* quiet NaNs */
        0x7f800001u, /* a signalling NaN: quiet after rounding */
        0x80000000u, 0x00000000u, /* zeros */
        0x00800000u, /* FLT_MIN */
        0x007fffffu, /* the largest denormal: rounds up to FLT_MIN */
        0x00018000u, /* a denormal, a tie */
        0x3e2aaaabu, 0xc0490fdbu, /* 1/6, -pi */
    };
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    float col[32], ones[32], c[32 * 32], ref[32 * 32];
    for (int i = 0; i < 32; i++) {
        col[i] = from_bits(specials[i % ns]);
        ones[i] = 1.0f;
    }
    void *work = aligned_alloc(64, (matmul_bf16_work_bytes(32, 32, 1) + 63) / 64 * 64);
    assert_non_null(work);
    for (int path = 0; path < BF16_PATH_COUNT; path++) {
        if (!bf16_path_available((bf16_path)path))
            continue;
        for (int combo = 0; combo < 8; combo++) {
            /* A (ns x 1, or 1 x ns when ta) holds the values, B ones, or the
             * other way round; ld 1 for a column, ns for a row */
            bool ta = combo & 1, tb = combo & 2, in_b = combo & 4;
            int m = in_b ? 4 : ns, n = in_b ? ns : 4;
            const float *a = in_b ? ones : col, *b = in_b ? col : ones;
            int lda = ta ? m : 1, ldb = tb ? 1 : n;
            for (int i = 0; i < m * n; i++)
                c[i] = ref[i] = NAN;
            matmul_bf16_on((bf16_path)path, c, n, a, lda, ta, b, ldb, tb, m, n, 1, 0.0f, work);
            assert_int_equal(matmul_bf16_ref(ref, n, a, lda, ta, b, ldb, tb, m, n, 1, 0.0f), 0);
            for (int i = 0; i < m * n; i++) {
                uint32_t got = to_bits(c[i]), want = to_bits(ref[i]);
                bool flushed = fpclassify(ref[i]) == FP_SUBNORMAL && (got & 0x7fffffffu) == 0 &&
                               (got >> 31) == (want >> 31);
                if (isnan(ref[i]) ? !isnan(c[i]) : got != want && !flushed)
                    fail_msg("bf16 %s, ta %d tb %d, value in %s: %08x rounds to %08x, expected "
                             "%08x", bf16_path_name((bf16_path)path), ta, tb, in_b ? "B" : "A",
                             to_bits(col[(in_b ? i % n : i / n) % ns]), got, want);
            }
        }
        /* k = 0 */
        for (int i = 0; i < 16; i++)
            c[i] = NAN;
        matmul_bf16_on((bf16_path)path, c, 4, ones, 1, false, ones, 4, false, 4, 4, 0, 0.0f, work);
        for (int i = 0; i < 16; i++)
            assert_true(c[i] == 0.0f);
        for (int i = 0; i < 16; i++)
            c[i] = (float)i;
        matmul_bf16_on((bf16_path)path, c, 4, ones, 1, false, ones, 4, false, 4, 4, 0, 0.5f, work);
        for (int i = 0; i < 16; i++)
            assert_true(c[i] == 0.5f * (float)i);
    }
    free(work);
}

/* Forcing a path: matmul_bf16 then takes it (the same bits as that path
 * called by name), a path the CPU lacks is refused and changes nothing, and
 * MODE_BF16_KERNEL names a path or is refused with a message. */
static void test_bf16_force(void **st)
{
    (void)st;
    const int m = 40, n = 50, k = 70;
    pcg32 rng;
    pcg32_seed(&rng, 20261130u, 8u);
    float *a = mat(&rng, m, k, k, 0.0f), *b = mat(&rng, k, n, n, 0.0f);
    float *c = malloc((size_t)m * n * sizeof(float)), *d = malloc((size_t)m * n * sizeof(float));
    void *work = aligned_alloc(64, (matmul_bf16_work_bytes(m, n, k) + 63) / 64 * 64);
    assert_non_null(c);
    assert_non_null(d);
    assert_non_null(work);
    bf16_path best = bf16_path_current();
    print_message("bf16 products here: %s (the fastest path this CPU has)\n", bf16_path_name(best));
    for (int path = 0; path < BF16_PATH_COUNT; path++) {
        if (!bf16_path_available((bf16_path)path)) {
            assert_int_equal(bf16_force_path((bf16_path)path), -ENOTSUP);
            assert_int_equal(bf16_path_current(), best);
            continue;
        }
        assert_int_equal(bf16_force_path((bf16_path)path), 0);
        assert_int_equal(bf16_path_current(), path);
        matmul_bf16(c, n, a, k, false, b, n, false, m, n, k, 0.0f, work);
        matmul_bf16_on((bf16_path)path, d, n, a, k, false, b, n, false, m, n, k, 0.0f, work);
        assert_memory_equal(c, d, (size_t)m * n * sizeof(float));
        /* the forced path stays until the environment says otherwise */
        assert_int_equal(unsetenv("MODE_BF16_KERNEL"), 0);
        char err[256] = "";
        assert_int_equal(bf16_path_from_env(err, sizeof(err)), 0);
        assert_int_equal(bf16_path_current(), best);
        assert_int_equal(setenv("MODE_BF16_KERNEL", bf16_path_name((bf16_path)path), 1), 0);
        assert_int_equal(bf16_path_from_env(err, sizeof(err)), 0);
        assert_int_equal(bf16_path_current(), path);
    }
    char err[256] = "";
    assert_int_equal(setenv("MODE_BF16_KERNEL", "fp8", 1), 0);
    assert_int_equal(bf16_path_from_env(err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "MODE_BF16_KERNEL=fp8"));
    for (int path = 0; path < BF16_PATH_COUNT; path++) {
        if (bf16_path_available((bf16_path)path))
            continue;
        assert_int_equal(setenv("MODE_BF16_KERNEL", bf16_path_name((bf16_path)path), 1), 0);
        assert_int_equal(bf16_path_from_env(err, sizeof(err)), -ENOTSUP);
        print_message("refused: %s\n", err);
    }
    assert_int_equal(unsetenv("MODE_BF16_KERNEL"), 0);
    assert_int_equal(bf16_path_from_env(err, sizeof(err)), 0);
    assert_int_equal(bf16_path_current(), best);
    free(a);
    free(b);
    free(c);
    free(d);
    free(work);
}

/* matmul_pool's band on AVX512_BF16 (the shared operand packed once, the
 * band's own packed unit by unit while the next unit's source is
 * prefetched) sums as the whole product does: the same bits as
 * matmul_bf16 on that path, with A or B the band's own operand, every
 * transposition and beta, views, K of one chunk and of several (odd),
 * widths of several sub-blocks with a partial panel. */
static void test_avx512_band(void **st)
{
    (void)st;
    if (!bf16_path_available(BF16_PATH_AVX512)) {
        print_message("bf16 avx512-bf16 bands: skipped, %s on this CPU\n",
                      bf16_missing(BF16_PATH_AVX512));
        return;
    }
    static const int shapes[][3] = { { 200, 72, 256 }, { 70, 300, 700 }, { 130, 40, 1101 },
                                     { 16, 16, 1 },    { 9, 150, 33 } };
    pcg32 rng;
    pcg32_seed(&rng, 20261130u, 9u);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        int blocks = bf16_avx512_k_blocks(k);
        void *work = aligned_alloc(64, (matmul_bf16_work_bytes(m, n, k) + 63) / 64 * 64);
        void *pa = aligned_alloc(64, (bf16_avx512_packed_bytes(m, k) + 63) / 64 * 64);
        void *pb = aligned_alloc(64, (bf16_avx512_packed_bytes(n, k) + 63) / 64 * 64);
        assert_non_null(work);
        assert_non_null(pa);
        assert_non_null(pb);
        for (int combo = 0; combo < 12; combo++) {
            mm_case x = make_case(&rng, m, n, k, combo);
            size_t cn = (size_t)m * x.ldc;
            float *whole = copy(x.c, cn), *band_a = copy(x.c, cn), *band_b = copy(x.c, cn);
            matmul_bf16_on(BF16_PATH_AVX512, whole, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb, m,
                           n, k, x.beta, work);
            bf16_avx512_pack_b(pb, x.b, x.ldb, x.tb, k, n, 0, blocks);
            bf16_avx512_band(band_a, x.ldc, x.a, x.lda, x.ta, true, pb, m, n, k, x.beta, pa);
            assert_memory_equal(band_a, whole, cn * sizeof(float));
            bf16_avx512_pack_a(pa, x.a, x.lda, x.ta, m, k, 0, blocks);
            bf16_avx512_band(band_b, x.ldc, x.b, x.ldb, x.tb, false, pa, m, n, k, x.beta, pb);
            assert_memory_equal(band_b, whole, cn * sizeof(float));
            free_case(&x);
            free(whole);
            free(band_a);
            free(band_b);
        }
        free(work);
        free(pa);
        free(pb);
    }
}

/* matmul_pool cuts C into bands whose bounds depend on the shape alone, each
 * band one call of the same shape on whichever thread: a NULL pool and pools
 * of 1, 2 and 3 threads give the same bits, in fp32 and in bf16 on every
 * path this CPU has (on AVX512_BF16 with the operand all bands read packed
 * once, by whichever threads), whatever OpenBLAS's kernels do with other
 * row counts; and the result is the product (within check_close's
 * rounding bound).  Shapes cut by rows and by columns, with partial bands,
 * and one too small to cut; transposed operands and views. */
static void test_pool_bits(void **st)
{
    (void)st;
    /* m, n, k, make_case's combo (transpositions, beta); the last two are
     * weight-gradient forms (A transposed, long K) */
    static const int shapes[][4] = { { 256, 96, 300, 0 }, { 1000, 64, 48, 1 },
                                     { 64, 700, 200, 2 }, { 300, 300, 40, 3 },
                                     { 20, 30, 40, 4 },   { 256, 704, 1000, 5 },
                                     { 704, 256, 600, 9 } };
    pcg32 rng;
    pcg32_seed(&rng, 20261130u, 7u);
    thread_pool *pools[3] = { NULL, NULL, NULL };
    for (int t = 0; t < 3; t++)
        assert_int_equal(build_thread_pool(&pools[t], t + 1), 0);
    /* bf: 0 fp32, else bf16 on path bf - 1 (those this CPU has) */
    for (int bf = 0; bf <= BF16_PATH_COUNT; bf++) {
        if (bf && bf16_force_path((bf16_path)(bf - 1))) {
            print_message("bf16 %s: skipped, %s on this CPU\n", bf16_path_name((bf16_path)(bf - 1)),
                          bf16_missing((bf16_path)(bf - 1)));
            continue;
        }
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            mm_case x = make_case(&rng, m, n, k, shapes[s][3]);
            size_t cn = (size_t)m * x.ldc;
            float *ref = copy(x.c, cn);
            if (bf)
                assert_int_equal(matmul_bf16_ref(ref, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb, m,
                                                 n, k, x.beta), 0);
            else
                matmul_ref(ref, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb, m, n, k, x.beta);
            float *first = NULL;
            for (int t = 0; t < 4; t++) { /* t = 3: a NULL pool, fp32 on one thread */
                if (t == 3 && bf)
                    break;
                float *c = copy(x.c, cn);
                matmul_exec e = { .pool = t < 3 ? pools[t] : NULL, .bf16 = bf };
                matmul_pool(t < 3 ? &e : NULL, c, x.ldc, x.a, x.lda, x.ta, x.b, x.ldb, x.tb,
                            m, n, k, x.beta);
                check_close(bf ? bf16_path_name((bf16_path)(bf - 1)) : "matmul_pool", c, ref, m, n,
                            x.ldc, k, true);
                if (first) {
                    assert_memory_equal(c, first, cn * sizeof(float));
                    free(c);
                } else {
                    first = c;
                }
            }
            bool by_cols;
            int bands = matmul_bands(m, n, k, &by_cols);
            if (!bf)
                print_message("%d x %d x %d (ta %d tb %d): %d band(s) of %s, the same bits on 1, "
                              "2, 3 threads\n", m, n, k, x.ta, x.tb, bands,
                              by_cols ? "columns" : "rows");
            free(first);
            free_case(&x);
            free(ref);
        }
    }
    for (int t = 0; t < 3; t++)
        free_thread_pool(&pools[t]);
    char err[256];
    assert_int_equal(bf16_path_from_env(err, sizeof(err)), 0); /* back to the fastest */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_vs_ref),
        cmocka_unit_test(test_bf16_vs_ref),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_force),
        cmocka_unit_test(test_avx512_band),
        cmocka_unit_test(test_pool_bits),
        cmocka_unit_test(test_beta0_overwrites_nan),
        cmocka_unit_test(test_linear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
