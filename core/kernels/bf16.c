/* syscall() for the AMX permission request */
#define _GNU_SOURCE
#include "core/kernels/bf16.h"

#include "core/kernels/bf16_avx512.h"
#include "core/kernels/sgemm.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MODE_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* Tiles: C in 32 x 32 blocks of four 16 x 16 fp32 tiles; A in 16 x 32 bf16
 * tiles; B in 16 x 16 pairs ("VNNI": the two bf16 of a pair are
 * consecutive k).  Operands are packed and zero-padded to these sizes. */
enum { BLOCK = 32, TILE_K = 32, K_CHUNK = 256 };

static int round_up(int x, int r)
{
    return (x + r - 1) / r * r;
}

size_t matmul_bf16_work_bytes(int m, int n, int k)
{
    size_t mp = (size_t)round_up(m, BLOCK), np = (size_t)round_up(n, BLOCK);
    size_t kp = (size_t)round_up(k, TILE_K);
    size_t amx = 2 * (mp * kp + kp * np) + sizeof(float) * mp * np;
    size_t emulated = sizeof(float) * ((size_t)m * k + (size_t)k * n);
    size_t avx512 = bf16_avx512_work_bytes(m, n, k);
    size_t most = amx > emulated ? amx : emulated;
    return most > avx512 ? most : avx512;
}

/* 1 ready, -1 not, 0 not asked yet.  A fact about the machine and the
 * process, like OpenBLAS's choice of kernels. */
static atomic_int amx_state;

/* Whether this machine has AMX-BF16 and the kernel lets this process use
 * it (asked once; call before the threads that will use it exist). */
static bool bf16_amx_ready(void)
{
#ifdef MODE_AMX
    int s = atomic_load(&amx_state);
    if (s == 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        bool has = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u) /* AMX-BF16 */ &&
                   (d >> 24 & 1u) /* AMX-TILE */;
        /* Linux hands out the tile state only on request (ARCH_REQ_XCOMP_PERM
         * for XFEATURE_XTILEDATA) */
        s = has && syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
        atomic_store(&amx_state, s);
    }
    return s == 1;
#else
    return false;
#endif
}

static const char *const path_names[] = { "emulated", "avx512-bf16", "amx" };
_Static_assert(sizeof(path_names) / sizeof(path_names[0]) == BF16_PATH_COUNT,
               "a name for every bf16 path");

const char *bf16_path_name(bf16_path path)
{
    return path >= 0 && path < BF16_PATH_COUNT ? path_names[path] : "?";
}

bool bf16_path_available(bf16_path path)
{
    switch (path) {
    case BF16_PATH_EMULATED:
        return true;
    case BF16_PATH_AVX512:
        return bf16_avx512_ready();
    case BF16_PATH_AMX:
        return bf16_amx_ready();
    default:
        return false;
    }
}

/* The forced path, or -1: the fastest available. */
static atomic_int forced_path = -1;

bf16_path bf16_path_current(void)
{
    int f = atomic_load(&forced_path);
    if (f >= 0)
        return (bf16_path)f;
    bf16_path best = BF16_PATH_EMULATED;
    for (int p = BF16_PATH_COUNT - 1; p > BF16_PATH_EMULATED; p--)
        if (bf16_path_available((bf16_path)p)) {
            best = (bf16_path)p;
            break;
        }
    return best;
}

int bf16_force_path(bf16_path path)
{
    if (!bf16_path_available(path))
        return -ENOTSUP;
    atomic_store(&forced_path, (int)path);
    return 0;
}

int bf16_path_from_env(char *err, size_t err_len)
{
    const char *v = getenv("MODE_BF16_KERNEL");
    if (!v || !*v) {
        atomic_store(&forced_path, -1);
        return 0;
    }
    int path = -1;
    for (int p = 0; p < BF16_PATH_COUNT; p++)
        if (!strcmp(v, path_names[p]))
            path = p;
    if (!strcmp(v, "avx512bf16")) /* the CPU flag's spelling */
        path = BF16_PATH_AVX512;
    if (path < 0) {
        snprintf(err, err_len, "MODE_BF16_KERNEL=%s: expected amx, avx512-bf16 or emulated", v);
        return -EINVAL;
    }
    if (bf16_force_path((bf16_path)path)) {
        char here[64] = "";
        for (int p = BF16_PATH_COUNT - 1; p >= 0; p--)
            if (bf16_path_available((bf16_path)p))
                snprintf(here + strlen(here), sizeof(here) - strlen(here), "%s%s",
                         here[0] ? ", " : "", path_names[p]);
        snprintf(err, err_len,
                 "MODE_BF16_KERNEL=%s: this CPU has no %s (the bf16 paths here: %s)", v,
                 path == BF16_PATH_AMX ? "AMX-BF16 tiles usable by this process"
                                       : "AVX-512 with AVX512_BF16",
                 here);
        return -ENOTSUP;
    }
    return 0;
}

/* op(A) as ar[m][k] and op(B) as br[k][n], rounded to bf16 (in floats). */
static void round_operands(float *ar, float *br, const float *a, int lda, bool ta,
                           const float *b, int ldb, bool tb, int m, int n, int k)
{
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++)
            ar[(size_t)i * k + p] =
                bf16_round(ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);
    for (int p = 0; p < k; p++)
        for (int j = 0; j < n; j++)
            br[(size_t)p * n + j] =
                bf16_round(tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
}

/* The rounded operands through cblas_sgemm: bf16 products on any CPU. */
static void emulated_product(float *c, int ldc,
                             const float *a, int lda, bool ta,
                             const float *b, int ldb, bool tb,
                             int m, int n, int k, float beta, void *work)
{
    if (m <= 0 || n <= 0)
        return;
    float *ar = work, *br = ar + (size_t)m * k;
    round_operands(ar, br, a, lda, ta, b, ldb, tb, m, n, k);
    sgemm(c, ldc, ar, k, false, br, n, false, m, n, k, beta);
}

#ifdef MODE_AMX
/* 32 floats to 32 bf16 (round to nearest even; AVX512-BF16, which every
 * AMX-BF16 CPU has; it reads denormal inputs as zero). */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static inline void cvt32(uint16_t *dst, const float *src)
{
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16), _mm512_loadu_ps(src));
    _mm512_storeu_si512(dst, (__m512i)v);
}

/* op(A)[m][k] into pa[mp][kp], rows of kp bf16, zero-padded. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void pack_a(uint16_t *pa, const float *a, int lda, bool ta, int m, int k, int mp, int kp)
{
    if (m < mp || k < kp)
        memset(pa, 0, (size_t)mp * kp * sizeof(uint16_t));
    if (!ta) {
        for (int i = 0; i < m; i++) {
            const float *ar = a + (size_t)i * lda;
            uint16_t *row = pa + (size_t)i * kp;
            int p = 0;
            for (; p + 32 <= k; p += 32)
                cvt32(row + p, ar + p);
            for (; p < k; p++)
                row[p] = bf16_from_float(ar[p]);
        }
        return;
    }
    /* A^T: 16 x 16 blocks through a small buffer, read by rows of a and
     * written by rows of pa */
    float blk[16][16];
    for (int p0 = 0; p0 < k; p0 += 16) {
        int pn = k - p0 < 16 ? k - p0 : 16;
        for (int i0 = 0; i0 < m; i0 += 16) {
            int in = m - i0 < 16 ? m - i0 : 16;
            for (int p = 0; p < pn; p++)
                for (int i = 0; i < in; i++)
                    blk[i][p] = a[(size_t)(p0 + p) * lda + i0 + i];
            for (int i = 0; i < in; i++) {
                uint16_t *row = pa + (size_t)(i0 + i) * kp + p0;
                for (int p = 0; p < pn; p++)
                    row[p] = bf16_from_float(blk[i][p]);
            }
        }
    }
}

/* op(B)[k][n] into pb: for each 16 columns, kp/2 rows of 16 pairs. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void pack_b(uint16_t *pb, const float *b, int ldb, bool tb, int k, int n, int kp, int np)
{
    if (k < kp || n < np)
        memset(pb, 0, (size_t)kp * np * sizeof(uint16_t));
    /* rows p and p + 1 of 16 columns, converted, then interleaved */
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                           24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                           16, 0);
    for (int j0 = 0; j0 < n; j0 += 16) {
        uint16_t *panel = pb + (size_t)(j0 / 16) * (kp / 2) * 32;
        int cols = n - j0 < 16 ? n - j0 : 16;
        int p = 0;
        if (!tb && cols == 16) {
            for (; p + 2 <= k; p += 2) {
                const float *r0 = b + (size_t)p * ldb + j0;
                __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(r0 + ldb), _mm512_loadu_ps(r0));
                _mm512_storeu_si512(panel + (size_t)(p / 2) * 32,
                                    _mm512_permutexvar_epi16(pairs, (__m512i)v));
            }
        }
        if (tb) {
            /* B^T: a pair (p, p + 1) of column j is two neighbours in row
             * j of b; read each row once, write its pairs down the panel */
            for (int j = 0; j < cols; j++) {
                const float *row = b + (size_t)(j0 + j) * ldb;
                for (int q = 0; 2 * q < k; q++) {
                    uint16_t *pair = panel + (size_t)q * 32 + 2 * j;
                    pair[0] = bf16_from_float(row[2 * q]);
                    pair[1] = 2 * q + 1 < k ? bf16_from_float(row[2 * q + 1]) : 0;
                }
            }
            continue;
        }
        for (; p < k; p++) {
            uint16_t *pair = panel + (size_t)(p / 2) * 32 + p % 2;
            for (int j = 0; j < cols; j++)
                pair[2 * j] = bf16_from_float(b[(size_t)p * ldb + j0 + j]);
        }
    }
}

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

/* C[rows][cols] = beta C + t (beta 0 overwrites, NaN included). */
static void add_block(float *c, int ldc, const float *t, int ldt, int rows, int cols, float beta)
{
    for (int r = 0; r < rows; r++) {
        float *cr = c + (size_t)r * ldc;
        const float *tr = t + (size_t)r * ldt;
        if (beta == 0.0f)
            memcpy(cr, tr, (size_t)cols * sizeof(float));
        else
            for (int q = 0; q < cols; q++)
                cr[q] = beta * cr[q] + tr[q];
    }
}

/* C = beta C + op(A) op(B) on the tiles.  When K fits one chunk of K_CHUNK,
 * each 32 x 32 block goes through a small buffer straight into C; longer K
 * runs in chunks, so that the chunk of B stays in L2 while every block of
 * rows passes over it, summing in acc[mp][np], then into C. */
__attribute__((target("amx-tile,amx-bf16")))
static void amx_product(float *c, int ldc, const uint16_t *pa, const uint16_t *pb, int m, int n,
                        int mp, int np, int kp, float beta, float *acc)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.rows[i] = 16;
        cfg.colsb[i] = 64;
    }
    _tile_loadconfig(&cfg);
    bool one_chunk = kp <= K_CHUNK;
    const int ldt = one_chunk ? BLOCK : np; /* floats */
    const size_t bytes = (size_t)ldt * sizeof(float);
    for (int k0 = 0; k0 < kp; k0 += K_CHUNK) {
        int k1 = k0 + K_CHUNK < kp ? k0 + K_CHUNK : kp;
        for (int i = 0; i < mp; i += BLOCK) {
            const uint16_t *a0 = pa + (size_t)i * kp, *a1 = a0 + (size_t)16 * kp;
            for (int j = 0; j < np; j += BLOCK) {
                const uint16_t *b0 = pb + (size_t)(j / 16) * (kp / 2) * 32;
                const uint16_t *b1 = b0 + (size_t)(kp / 2) * 32;
                float *t = one_chunk ? acc : acc + (size_t)i * np + j;
                if (k0 == 0) {
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                } else {
                    _tile_loadd(0, t, bytes);
                    _tile_loadd(1, t + 16, bytes);
                    _tile_loadd(2, t + 16 * (size_t)ldt, bytes);
                    _tile_loadd(3, t + 16 * (size_t)ldt + 16, bytes);
                }
                for (int p = k0; p < k1; p += TILE_K) {
                    _tile_loadd(4, a0 + p, kp * 2);
                    _tile_loadd(5, a1 + p, kp * 2);
                    _tile_loadd(6, b0 + (size_t)p * 16, 64);
                    _tile_loadd(7, b1 + (size_t)p * 16, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, t, bytes);
                _tile_stored(1, t + 16, bytes);
                _tile_stored(2, t + 16 * (size_t)ldt, bytes);
                _tile_stored(3, t + 16 * (size_t)ldt + 16, bytes);
                if (one_chunk)
                    add_block(c + (size_t)i * ldc + j, ldc, t, BLOCK,
                              m - i < BLOCK ? m - i : BLOCK, n - j < BLOCK ? n - j : BLOCK, beta);
            }
        }
    }
    _tile_release();
    if (!one_chunk)
        add_block(c, ldc, acc, np, m, n, beta);
}
#endif

void matmul_bf16(float *c, int ldc,
                 const float *a, int lda, bool ta,
                 const float *b, int ldb, bool tb,
                 int m, int n, int k, float beta, void *work)
{
    matmul_bf16_on(bf16_path_current(), c, ldc, a, lda, ta, b, ldb, tb, m, n, k, beta, work);
}

void matmul_bf16_on(bf16_path path, float *c, int ldc,
                    const float *a, int lda, bool ta,
                    const float *b, int ldb, bool tb,
                    int m, int n, int k, float beta, void *work)
{
    if (m <= 0 || n <= 0)
        return;
    if (path == BF16_PATH_AVX512) {
        matmul_bf16_avx512(c, ldc, a, lda, ta, b, ldb, tb, m, n, k, beta, work);
        return;
    }
#ifdef MODE_AMX
    if (path == BF16_PATH_AMX && k > 0) {
        int mp = round_up(m, BLOCK), np = round_up(n, BLOCK), kp = round_up(k, TILE_K);
        uint16_t *pa = work, *pb = pa + (size_t)mp * kp;
        float *acc = (float *)(pb + (size_t)kp * np);
        pack_a(pa, a, lda, ta, m, k, mp, kp);
        pack_b(pb, b, ldb, tb, k, n, kp, np);
        amx_product(c, ldc, pa, pb, m, n, mp, np, kp, beta, acc);
        return;
    }
#endif
    emulated_product(c, ldc, a, lda, ta, b, ldb, tb, m, n, k, beta, work);
}

int matmul_bf16_ref(float *c, int ldc,
                    const float *a, int lda, bool ta,
                    const float *b, int ldb, bool tb,
                    int m, int n, int k, float beta)
{
    if (m <= 0 || n <= 0)
        return 0;
    float *ar = malloc(((size_t)m * k + (size_t)k * n + 1) * sizeof(float));
    if (!ar)
        return -ENOMEM;
    float *br = ar + (size_t)m * k;
    round_operands(ar, br, a, lda, ta, b, ldb, tb, m, n, k);
    matmul_ref(c, ldc, ar, k, false, br, n, false, m, n, k, beta);
    free(ar);
    return 0;
}
