/* C = beta C + op(A) op(B) with bf16 operands on AVX512_BF16.
 *
 * vdpbf16ps multiplies 16 pairs of bf16 by 16 pairs and adds both products
 * of a pair into one fp32 lane: 32 multiply-adds per instruction against 16
 * for an fp32 FMA, from half the operand bytes.  So both operands are
 * packed as pairs along K ("VNNI", as for the AMX tiles):
 *   - op(B) (k x n) in panels of 16 columns, each panel ceil(k / 2) rows of
 *     16 pairs (p, p + 1): one zmm a row;
 *   - op(A) (m x k) the same way, transposed: panels of 16 rows of C, each
 *     ceil(k / 2) rows of 16 pairs, so that the pair of row i at step q is
 *     one 32-bit word, broadcast to all 16 lanes.
 * A register tile of MR rows x NR_PANELS panels of C (16 zmm sums) takes
 * one A pair-word and NR_PANELS B rows per step of two k.  K is cut into
 * chunks of K_CHUNK so that the chunk of a B panel stays in L1 while every
 * row tile passes over it; each chunk's sums are added into C.
 *
 * The chunks and tiles depend on (m, n, k) alone, so a band of C is summed
 * in the same order whichever thread computes it (matmul_pool). */
#include "core/kernels/bf16_avx512.h"

#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MODE_AVX512_BF16 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#endif

/* PANEL: pairs a packed row (one zmm); MR x NR_PANELS: the register tile
 * (8 rows x 32 columns: 16 sums, 2 B rows, the A word broadcast from
 * memory; vdpbf16ps's latency wants at least 6 independent sums); K_CHUNK:
 * k per chunk (128 pair rows: 8 KiB of a B panel, 16 KiB for the two the
 * tile reads); K_ALIGN: K is packed in blocks of 32 (16 pair rows, one
 * 16 x 16 transpose). */
enum { PANEL = 16, MR = 8, NR_PANELS = 2, K_CHUNK = 256, K_ALIGN = 32, SUB_WIDTH = 64 };

static int round_up(int x, int r)
{
    return (x + r - 1) / r * r;
}

int bf16_avx512_k_blocks(int k)
{
    return round_up(k > 0 ? k : 1, K_ALIGN) / K_ALIGN;
}

size_t bf16_avx512_packed_bytes(int w, int k)
{
    /* pairs of bf16, one uint32 each; K padded to whole blocks (the
     * packing's transposes) */
    return sizeof(uint32_t) * (size_t)bf16_avx512_k_blocks(k) * (K_ALIGN / 2) *
           (size_t)round_up(w, PANEL);
}

size_t bf16_avx512_work_bytes(int m, int n, int k)
{
    return bf16_avx512_packed_bytes(m, k) + bf16_avx512_packed_bytes(n, k);
}

#ifdef MODE_AVX512_BF16
/* 1 ready, -1 not, 0 not asked yet: a fact about the machine. */
static atomic_int avx512_state;

bool bf16_avx512_ready(void)
{
    int s = atomic_load(&avx512_state);
    if (s == 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        bool has = false;
        /* the OS must save the AVX-512 state: XCR0 bits 1, 2 (SSE, AVX),
         * 5, 6, 7 (opmask, the upper halves of zmm0-15, zmm16-31) */
        if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1u) /* OSXSAVE */) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            (void)hi;
            unsigned max_sub = 0;
            if ((lo & 0xe6u) == 0xe6u && __get_cpuid_count(7, 0, &max_sub, &b, &c, &d) &&
                (b >> 16 & 1u) /* AVX512F */ && (b >> 30 & 1u) /* AVX512BW */ && max_sub >= 1 &&
                __get_cpuid_count(7, 1, &a, &b, &c, &d))
                has = a >> 5 & 1u; /* AVX512_BF16 */
        }
        s = has ? 1 : -1;
        atomic_store(&avx512_state, s);
    }
    return s == 1;
}

#define TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* 16 floats rounded to bf16 exactly as bf16_from_float does (to nearest,
 * ties to even; a NaN stays a quiet NaN; denormals are kept), the bf16 in
 * the high half of each 32-bit lane.  Not vcvtne2ps2bf16: it flushes
 * denormal inputs to zero, which bf16_from_float does not. */
TARGET static inline __m512i round16(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    /* (u | 0x400000) >> 16 is bf16_from_float's (u >> 16) | 0x40 */
    return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
}

/* 32 floats to 32 bf16, lo's 16 then hi's 16, rounded as bf16_from_float.
 * vcvtne2ps2bf16 rounds the same way (to nearest even, NaN kept quiet) in
 * one instruction, but reads denormal inputs as zero; the largest of them
 * round up to FLT_MIN, so 32 floats holding a denormal take the integer
 * rounding instead. */
TARGET static inline __m512i bf16x32(__m512 lo, __m512 hi)
{
    const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x007fffff);
    const __m512i ul = _mm512_castps_si512(lo), uh = _mm512_castps_si512(hi);
    __mmask16 dl = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(ul, expo), ul, mant);
    __mmask16 dh = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(uh, expo), uh, mant);
    if (__builtin_expect((dl | dh) == 0, 1))
        return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    const __m512i high_halves = _mm512_set_epi16(
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19,
        17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(round16(lo), high_halves, round16(hi));
}

/* The bits of mask for the first n of 16 lanes (n may be <= 0 or >= 16). */
static inline __mmask16 first_lanes(int n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* 16 x 16 32-bit words: r[i] lane j becomes r[j] lane i. */
TARGET static void transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) { /* 32-bit pairs of neighbouring rows */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* r[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c */
    for (int g = 0; g < 16; g += 4) {
        r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    /* a 4 x 4 transpose of 128-bit lanes for each c */
    for (int c = 0; c < 4; c++) {
        __m512i x0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
        __m512i x1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
        __m512i y0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
        __m512i y1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
        t[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
        t[8 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
    }
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* X (k x w, element (p, j) at x[p * ldx + j], or at x[j * ldx + p] when
 * w_major) into panels of PANEL along w: panel t is kq rows of 16 words
 * (kq = 16 x the K blocks), word j of row q the pair (X[2q][16t + j],
 * X[2q + 1][16t + j]), the first in the low half; zero beyond k and w.
 * Only the rows of K blocks [block0, block1), so that a packing can be
 * shared out.  Reads nothing outside X (masked loads): views' padding
 * stays unread. */
TARGET static void pack_pairs(uint32_t *dst, const float *x, int ldx, bool w_major, int k, int w,
                              int block0, int block1)
{
    const size_t kq = (size_t)bf16_avx512_k_blocks(k) * (K_ALIGN / 2);
    if (!w_major) {
        /* rows p and p + 1, 16 columns at a time, interleaved (row p in
         * the low halves); along the rows of X, so that its lines are read
         * in order (the prefetchers follow) and once, whatever the panel
         * count */
        const __m512i interleave = _mm512_set_epi16(
            31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20,
            4, 19, 3, 18, 2, 17, 1, 16, 0);
        for (int q = block0 * K_ALIGN / 2; q < block1 * K_ALIGN / 2; q++) {
            const int p = 2 * q;
            const float *x0 = x + (size_t)p * ldx, *x1 = x0 + ldx;
            for (int j0 = 0; j0 < w; j0 += PANEL) {
                const __mmask16 cols = first_lanes(w - j0);
                __m512 r0 = _mm512_setzero_ps(), r1 = _mm512_setzero_ps();
                if (p < k)
                    r0 = _mm512_maskz_loadu_ps(cols, x0 + j0);
                if (p + 1 < k)
                    r1 = _mm512_maskz_loadu_ps(cols, x1 + j0);
                _mm512_store_si512(dst + ((size_t)(j0 / PANEL) * kq + (size_t)q) * PANEL,
                                   _mm512_permutexvar_epi16(interleave, bf16x32(r0, r1)));
            }
        }
        return;
    }
    /* w-major: 32 consecutive k of each of 16 rows j make that row's 16
     * pairs; a transpose turns them into 16 packed rows */
    for (int j0 = 0; j0 < w; j0 += PANEL) {
        uint32_t *panel = dst + (size_t)(j0 / PANEL) * kq * PANEL;
        for (int p0 = block0 * K_ALIGN; p0 < block1 * K_ALIGN; p0 += K_ALIGN) {
            const __mmask16 lo = first_lanes(k - p0), hi = first_lanes(k - p0 - 16);
            __m512i r[16];
            for (int j = 0; j < PANEL; j++) {
                r[j] = _mm512_setzero_si512();
                if (j0 + j < w && lo) {
                    const float *row = x + (size_t)(j0 + j) * ldx + p0;
                    r[j] = bf16x32(_mm512_maskz_loadu_ps(lo, row),
                                   _mm512_maskz_loadu_ps(hi, row + 16));
                }
            }
            transpose16(r);
            for (int q = 0; q < 16; q++)
                _mm512_store_si512(panel + (size_t)(p0 / 2 + q) * PANEL, r[q]);
        }
    }
}

/* The register tile: C[i0 .. i0 + rows)[j0 .. j0 + cols) (+)= the sums over
 * pair rows [0, nq) of a (MR words a row, at stride PANEL) against panels
 * b, b + bstride, ... (NP of them).  first: the first chunk of K, where beta
 * applies (beta 0 overwrites, NaN included); later chunks add. */
TARGET static inline __attribute__((always_inline)) void
tile(float *c, int ldc, const uint32_t *a, const uint32_t *b, size_t bstride, int nq, int rows,
     int cols, float beta, bool first, const int NP)
{
    __m512 acc[MR][NR_PANELS];
    for (int r = 0; r < MR; r++)
        for (int t = 0; t < NP; t++)
            acc[r][t] = _mm512_setzero_ps();
    for (int q = 0; q < nq; q++) {
        __m512bh bv[NR_PANELS];
        for (int t = 0; t < NP; t++)
            bv[t] = (__m512bh)_mm512_load_si512(b + (size_t)t * bstride + (size_t)q * PANEL);
        for (int r = 0; r < MR; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[(size_t)q * PANEL + r]);
            for (int t = 0; t < NP; t++)
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], av, bv[t]);
        }
    }
    const __m512 vbeta = _mm512_set1_ps(beta);
    for (int r = 0; r < rows; r++) {
        float *cr = c + (size_t)r * ldc;
        for (int t = 0; t < NP; t++) {
            __mmask16 mk = first_lanes(cols - 16 * t);
            __m512 v = acc[r][t];
            if (!first || beta == 1.0f)
                v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, cr + 16 * t), v);
            else if (beta != 0.0f)
                v = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(mk, cr + 16 * t), v);
            _mm512_mask_storeu_ps(cr + 16 * t, mk, v);
        }
    }
}

TARGET static void tile_wide(float *c, int ldc, const uint32_t *a, const uint32_t *b,
                             size_t bstride, int nq, int rows, int cols, float beta, bool first)
{
    tile(c, ldc, a, b, bstride, nq, rows, cols, beta, first, NR_PANELS);
}

TARGET static void tile_narrow(float *c, int ldc, const uint32_t *a, const uint32_t *b,
                               size_t bstride, int nq, int rows, int cols, float beta, bool first)
{
    tile(c, ldc, a, b, bstride, nq, rows, cols, beta, first, 1);
}

void bf16_avx512_pack_a(void *pa, const float *a, int lda, bool ta, int m, int k, int block0,
                        int block1)
{
    /* op(A)[i][p] is element (p, i) of an operand stored K-major when ta */
    pack_pairs(pa, a, lda, !ta, k, m, block0, block1);
}

void bf16_avx512_pack_b(void *pb, const float *b, int ldb, bool tb, int k, int n, int block0,
                        int block1)
{
    pack_pairs(pb, b, ldb, tb, k, n, block0, block1);
}

/* One register tile of C at (i, j), rows x cols of it, over len pair rows
 * of K from pair row q0 of the packed operands (panels of stride words). */
static inline void run_tile(float *c, int ldc, const uint32_t *pa, const uint32_t *pb,
                            size_t stride, int q0, int len, int i, int j, int rows, int cols,
                            float beta, bool first)
{
    const uint32_t *ap = pa + (size_t)(i / PANEL) * stride + (size_t)q0 * PANEL +
                         (size_t)(i % PANEL);
    const uint32_t *bp = pb + (size_t)(j / PANEL) * stride + (size_t)q0 * PANEL;
    float *ct = c + (size_t)i * ldc + j;
    if (cols > PANEL)
        tile_wide(ct, ldc, ap, bp, stride, len, rows, cols, beta, first);
    else
        tile_narrow(ct, ldc, ap, bp, stride, len, rows, cols, beta, first);
}

static void bf16_avx512_product(float *c, int ldc, const void *packed_a, const void *packed_b,
                                int m, int n, int k, float beta)
{
    if (m <= 0 || n <= 0)
        return;
    const uint32_t *pa = packed_a, *pb = packed_b;
    const int nq = (k + 1) / 2; /* pair rows with data */
    const size_t stride = (size_t)bf16_avx512_k_blocks(k) * (K_ALIGN / 2) * PANEL; /* a panel */
    /* k = 0: one empty chunk, so that beta still applies */
    for (int q0 = 0; q0 < nq || q0 == 0; q0 += K_CHUNK / 2) {
        int len = nq - q0 < K_CHUNK / 2 ? nq - q0 : K_CHUNK / 2;
        for (int j = 0; j < n; j += NR_PANELS * PANEL) {
            int cols = n - j < NR_PANELS * PANEL ? n - j : NR_PANELS * PANEL;
            for (int i = 0; i < m; i += MR)
                run_tile(c, ldc, pa, pb, stride, q0, len, i, j, m - i < MR ? m - i : MR, cols,
                         beta, q0 == 0);
        }
    }
}

/* A region of an operand in memory, rows of row_bytes at stride bytes,
 * walked line by line by prefetches. */
typedef struct prefetch_walk {
    const char *base;
    size_t stride, row_bytes;
    int rows, row;
    uintptr_t line, last; /* the row's next line and its last */
} prefetch_walk;

static void walk_start(prefetch_walk *w, const float *base, size_t stride, size_t row_bytes,
                       int rows)
{
    *w = (prefetch_walk){ .base = (const char *)base, .stride = stride,
                          .row_bytes = row_bytes, .rows = row_bytes ? rows : 0, .row = -1 };
    w->line = 1, w->last = 0; /* past the end: the first call opens row 0 */
}

/* Asks for up to count more lines of the region into L2 (a hint: it never
 * faults, nor changes what is read). */
TARGET static void walk_prefetch(prefetch_walk *w, int count)
{
    for (; count > 0; count--) {
        if (w->line > w->last) {
            if (++w->row >= w->rows)
                return;
            uintptr_t start = (uintptr_t)(w->base + (size_t)w->row * w->stride);
            w->line = start & ~(uintptr_t)63;
            w->last = (start + w->row_bytes - 1) & ~(uintptr_t)63;
        }
        _mm_prefetch((const char *)w->line, _MM_HINT_T1);
        w->line += 64;
    }
}

/* The unit (sub-block [s0, s1) of the own operand's width, K chunk from
 * k0) of a band: its source region. */
static void unit_region(prefetch_walk *w, const float *x, int ldx, bool w_major, int k, int s0,
                        int s1, int k0)
{
    int k1 = k - k0 < K_CHUNK ? k : k0 + K_CHUNK;
    size_t stride = (size_t)ldx * sizeof(float);
    if (w_major)
        walk_start(w, x + (size_t)s0 * ldx + k0, stride, (size_t)(k1 - k0) * sizeof(float),
                   s1 - s0);
    else
        walk_start(w, x + (size_t)k0 * ldx + s0, stride, (size_t)(s1 - s0) * sizeof(float),
                   k1 - k0);
}

void bf16_avx512_band(float *c, int ldc, const float *x, int ldx, bool xt, bool own_is_a,
                      const void *shared, int m, int n, int k, float beta, void *own)
{
    if (m <= 0 || n <= 0)
        return;
    /* the own operand as X (k x w), as pack_pairs reads it */
    const bool w_major = own_is_a ? !xt : xt;
    const int w = own_is_a ? m : n, nq = (k + 1) / 2;
    const int chunks = nq > 0 ? (nq + K_CHUNK / 2 - 1) / (K_CHUNK / 2) : 1;
    const int sub = chunks > 1 ? w : SUB_WIDTH;
    const size_t stride = (size_t)bf16_avx512_k_blocks(k) * (K_ALIGN / 2) * PANEL; /* a panel */
    const uint32_t *pa = own_is_a ? own : shared, *pb = own_is_a ? shared : own;
    prefetch_walk next;
    walk_start(&next, x, 0, 0, 0);
    for (int s0 = 0; s0 < w; s0 += sub) {
        int s1 = w - s0 < sub ? w : s0 + sub;
        for (int ch = 0; ch < chunks; ch++) {
            int q0 = ch * (K_CHUNK / 2), len = nq - q0 < K_CHUNK / 2 ? nq - q0 : K_CHUNK / 2;
            /* pack this unit (its source mostly in L2 by now) and ask for
             * the next one's while the tiles run */
            int b0 = ch * (K_CHUNK / K_ALIGN), b1 = ch + 1 < chunks ? b0 + K_CHUNK / K_ALIGN
                                                                    : bf16_avx512_k_blocks(k);
            pack_pairs((uint32_t *)own + (size_t)(s0 / PANEL) * stride,
                       w_major ? x + (size_t)s0 * ldx : x + s0, ldx, w_major, k, s1 - s0, b0, b1);
            if (ch + 1 < chunks)
                unit_region(&next, x, ldx, w_major, k, s0, s1, (ch + 1) * K_CHUNK);
            else if (s1 < w)
                unit_region(&next, x, ldx, w_major, k, s1, w - s1 < sub ? w : s1 + sub, 0);
            else
                walk_start(&next, x, 0, 0, 0);
            int i0 = own_is_a ? s0 : 0, i1 = own_is_a ? s1 : m;
            int j0 = own_is_a ? 0 : s0, j1 = own_is_a ? n : s1;
            int tiles = ((i1 - i0 + MR - 1) / MR) * ((j1 - j0 + NR_PANELS * PANEL - 1) /
                                                      (NR_PANELS * PANEL));
            int lines = (int)((next.rows * (next.row_bytes / 64 + 2) + tiles - 1) / tiles);
            for (int j = j0; j < j1; j += NR_PANELS * PANEL) {
                int cols = j1 - j < NR_PANELS * PANEL ? j1 - j : NR_PANELS * PANEL;
                for (int i = i0; i < i1; i += MR) {
                    run_tile(c, ldc, pa, pb, stride, q0, len, i, j, i1 - i < MR ? i1 - i : MR,
                             cols, beta, ch == 0);
                    walk_prefetch(&next, lines);
                }
            }
        }
    }
}

void matmul_bf16_avx512(float *c, int ldc,
                        const float *a, int lda, bool ta,
                        const float *b, int ldb, bool tb,
                        int m, int n, int k, float beta, void *work)
{
    if (m <= 0 || n <= 0)
        return;
    int blocks = bf16_avx512_k_blocks(k);
    char *pb = (char *)work + bf16_avx512_packed_bytes(m, k);
    bf16_avx512_pack_a(work, a, lda, ta, m, k, 0, blocks);
    bf16_avx512_pack_b(pb, b, ldb, tb, k, n, 0, blocks);
    bf16_avx512_product(c, ldc, work, pb, m, n, k, beta);
}
#else
bool bf16_avx512_ready(void)
{
    return false;
}

void bf16_avx512_pack_a(void *pa, const float *a, int lda, bool ta, int m, int k, int block0,
                        int block1)
{
    (void)pa, (void)a, (void)lda, (void)ta, (void)m, (void)k, (void)block0, (void)block1;
}

void bf16_avx512_pack_b(void *pb, const float *b, int ldb, bool tb, int k, int n, int block0,
                        int block1)
{
    (void)pb, (void)b, (void)ldb, (void)tb, (void)k, (void)n, (void)block0, (void)block1;
}

void bf16_avx512_band(float *c, int ldc, const float *x, int ldx, bool xt, bool own_is_a,
                      const void *shared, int m, int n, int k, float beta, void *own)
{
    (void)c, (void)ldc, (void)x, (void)ldx, (void)xt, (void)own_is_a, (void)shared, (void)m;
    (void)n, (void)k, (void)beta, (void)own;
}

void matmul_bf16_avx512(float *c, int ldc,
                        const float *a, int lda, bool ta,
                        const float *b, int ldb, bool tb,
                        int m, int n, int k, float beta, void *work)
{
    (void)c, (void)ldc, (void)a, (void)lda, (void)ta, (void)b, (void)ldb, (void)tb;
    (void)m, (void)n, (void)k, (void)beta, (void)work;
}
#endif
