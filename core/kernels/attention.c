#include "core/kernels/attention.h"

#include "core/kernels/vexp.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* Register tiles: MR rows by NR columns of C stay in vector registers (16
 * zmm) while the contraction runs.  8 x 32 measured fastest on Zen 4 for
 * 64 x 64 x 64 tiles, as fast as cblas_sgemm there without its call and
 * packing costs; 16 columns did not vectorise (GCC 12), on any target.
 * Compiled for AVX2 (-march=haswell) 8 x 32 was still the fastest of 4
 * to 8 rows by 8 to 32 columns; for the x86-64 baseline (-Dnative=false,
 * SSE2 without FMA: attention 4x slower than native) 4 x 32 was 15%
 * faster, not worth a second shape.  VL is the widest vector in floats:
 * the element-wise loops run over whole multiples of it. */
enum { MR = 8, NR = 32, VL = 16 };
enum { BR = ATTN_ROWS, BC = ATTN_KEYS };
_Static_assert(BR % NR == 0 && BC % NR == 0 && NR % VL == 0 && VL % MR == 0,
               "tiles are whole register tiles, and register tiles whole vectors");

/* acc + a b: one fused instruction where the target has FMA (C11 does not
 * let the compiler contract a * b + c by itself); elsewhere fmaf would be
 * a slow library call, so a multiply and an add. */
static inline float madd(float a, float b, float acc)
{
#ifdef __FMA__
    return fmaf(a, b, acc);
#else
    return a * b + acc;
#endif
}

static int min_i(int a, int b)
{
    return a < b ? a : b;
}

static int max_i(int a, int b)
{
    return a > b ? a : b;
}

static int round_up(int x, int m)
{
    return (x + m - 1) / m * m;
}

/* The tiles are kept transposed, keys by rows: s[b][a] is the score of row
 * a against key b.  Then every per-row quantity (running max and sum, lse,
 * D) is a vector along a tile's row, and the softmax needs no horizontal
 * reduction.
 *
 * The causal rule inside a (row tile, key tile) pair whose first row sits
 * `off` positions after its first key: local row a may see local key b iff
 * a >= b - off.  Each tile product knows which of its dimensions the rule
 * cuts:
 *   COLS_FROM  C = s [keys][rows]: the register tiles left of the first
 *              row that sees their first key are skipped (left unwritten);
 *   K_TO       C [rows][..] = P [rows][keys] x ..: the contraction over
 *              keys stops after the last key the register tile's rows see;
 *   K_FROM     C [keys][..] = P^T x ..: the contraction over rows starts
 *              at the first row that sees the register tile's first key.
 * A tile below the diagonal (off >= keys - 1) is whole in all three. */
typedef enum { COLS_FROM, K_TO, K_FROM } causal_cut;

/* c[mr][NR] (+)= a[mr][k] b[k][NR], with a[i][p] at a[i rsa + p csa] (so
 * that a transposed operand is a view) and b's rows NR contiguous floats
 * ldb apart.  Inlined with mr a constant (MR, or 1 for a last partial
 * tile), so that acc lives in registers. */
static inline __attribute__((always_inline)) void register_tile(
    float *restrict c, long ldc, const float *restrict a, long rsa, long csa,
    const float *restrict b, long ldb, int k, bool add, const int mr)
{
    float acc[MR][NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR; j++)
            acc[i][j] = 0.0f;
    for (int p = 0; p < k; p++) {
        const float *ap = a + p * csa, *bp = b + p * ldb;
        for (int i = 0; i < mr; i++) {
            float ai = ap[i * rsa];
            for (int j = 0; j < NR; j++)
                acc[i][j] = madd(ai, bp[j], acc[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR; j++)
            c[i * ldc + j] = add ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

/* C[m][n] (+)= A[m][k] B[k][n] (n a multiple of NR; A and B as in
 * register_tile), cut by the causal rule at offset off along `cut`. */
static void tile_product(float *c, long ldc, const float *a, long rsa, long csa, const float *b,
                         long ldb, int m, int n, int k, bool add, causal_cut cut, int off)
{
    for (int i0 = 0; i0 < m; i0 += MR) {
        int mr = min_i(MR, m - i0), k0 = 0, k1 = k, j_from = 0;
        if (cut == COLS_FROM)
            j_from = min_i(n, max_i(0, i0 - off) / NR * NR);
        else if (cut == K_TO)
            k1 = min_i(k, max_i(0, i0 + mr + off));
        else
            k0 = min_i(k, max_i(0, i0 - off));
        for (int j0 = j_from; j0 < n; j0 += NR) {
            float *cc = c + i0 * ldc + j0;
            const float *aa = a + i0 * rsa + k0 * csa, *bb = b + k0 * ldb + j0;
            if (mr == MR)
                register_tile(cc, ldc, aa, rsa, csa, bb, ldb, k1 - k0, add, MR);
            else
                for (int i = 0; i < mr; i++)
                    register_tile(cc + i * ldc, ldc, aa + i * rsa, rsa, csa, bb, ldb, k1 - k0,
                                  add, 1);
        }
    }
}

/* The rows [first, end) of key b's line of a transposed tile that the
 * element-wise loops visit: whole vectors that COLS_FROM computed, from
 * below the first row that sees the first key of b's register tile, which
 * covers every entry K_TO and K_FROM read (rows that do not see b get an
 * exact zero there); end = m rounded up to a vector. */
static int first_row(int b, int off)
{
    return max_i(0, b / MR * MR - off) / VL * VL;
}

/* One head's [n][dh] slice (leading dimension ld) as the B operand of
 * tile_product: itself when dh is whole register tiles, else a copy with
 * its rows padded by zeros to dp = round_up(dh, NR). */
typedef struct view {
    const float *p;
    long ld;
} view;

static view padded(float *buf, const float *x, int n, int dh, int ld)
{
    int dp = round_up(dh, NR);
    if (dp == dh)
        return (view){ x, ld };
    for (int i = 0; i < n; i++) {
        memcpy(buf + (size_t)i * dp, x + (size_t)i * ld, (size_t)dh * sizeof(float));
        memset(buf + (size_t)i * dp + dh, 0, (size_t)(dp - dh) * sizeof(float));
    }
    return (view){ buf, dp };
}

#ifdef __AVX512F__
/* xt[16][ldt] = the transpose of x[16][ld] (16 x 16 floats), in registers:
 * pairs of rows interleaved, then pairs of pairs, then 128-bit lanes
 * twice. */
static void transpose16(float *xt, long ldt, const float *x, long ld)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(x + i * ld);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
    for (int j = 0; j < 16; j++)
        _mm512_storeu_ps(xt + j * ldt, r[j]);
}
#endif

/* xt[dh][BR]: rows [r0, r0 + m) of x[n][dh] (leading dimension ld)
 * transposed, so that a row tile's rows are contiguous (the vector
 * dimension of the transposed scores); rows past m are zero.  With
 * AVX-512, whole 16 x 16 blocks go through registers (3x faster than the
 * loop); the loop takes the rest, reading x's rows in order and writing
 * down the tile (in L1), 3x faster than the other way round.  Either
 * moves the same floats. */
static void pack_transposed(float *xt, const float *x, int r0, int m, int dh, int ld)
{
    int m16 = 0, dh16 = 0;
#ifdef __AVX512F__
    m16 = m / 16 * 16, dh16 = dh / 16 * 16;
    for (int a = 0; a < m16; a += 16)
        for (int e = 0; e < dh16; e += 16)
            transpose16(xt + (size_t)e * BR + a, BR, x + (size_t)(r0 + a) * ld + e, ld);
#endif
    for (int a = 0; a < m; a++)
        for (int e = a < m16 ? dh16 : 0; e < dh; e++)
            xt[e * BR + a] = x[(size_t)(r0 + a) * ld + e];
    for (int e = 0; e < dh; e++)
        for (int a = m; a < BR; a++)
            xt[e * BR + a] = 0.0f;
}

static long rows_floats(int n, int dh)
{
    return (long)round_up(n, BR) * dh;
}

long attention_fwd_scratch_floats(int n, int dh)
{
    long dp = round_up(dh, NR), pad = dp == dh ? 0 : (long)n * dp;
    /* qt; scores; output tile; max, sum, new max, new sum; v padded */
    return (long)dh * BR + (long)BC * BR + BR * dp + 4L * BR + pad;
}

long attention_scratch_floats(int n, int dh)
{
    long dp = round_up(dh, NR), pad = dp == dh ? 0 : 4L * n * dp + 2L * BC * dp;
    /* qt, dout t; D, lse; P and dS tiles; dq, dK and dV tiles, q, k, dout padded */
    return 2 * rows_floats(n, dh) + 2L * round_up(n, BR) + 2L * BC * BR + pad;
}

/* Online softmax of one row tile against one key tile (FlashAttention-2,
 * Algorithm 1, lines 8-10): st[kb][BR] holds the raw scores of m rows
 * against kb keys (as far as COLS_FROM computed them).  Each row's running
 * max mx and sum l move to the new max, its output o[m][dp] is rescaled by
 * exp(old max - new max), and st becomes exp(scale s - max) where the row
 * may look and exact zeros elsewhere (the mask is a select, so that the
 * loops vectorise whole).  top and sum are [BR] work space. */
static void online_softmax(float *st, float *o, float *mx, float *l, float *top, float *sum,
                           int m, int kb, int off, int dp, float scale)
{
    int end = round_up(m, VL);
    for (int a = 0; a < end; a++) {
        top[a] = mx[a];
        sum[a] = 0.0f;
    }
    for (int b = 0; b < kb; b++) {
        const float *s = st + (size_t)b * BR;
        for (int a = first_row(b, off); a < end; a++) {
            float x = a >= b - off ? s[a] * scale : -INFINITY;
            top[a] = x > top[a] ? x : top[a];
        }
    }
    for (int b = 0; b < kb; b++) {
        float *s = st + (size_t)b * BR;
        for (int a = first_row(b, off); a < end; a++) {
            float e = vexpf(s[a] * scale - top[a]);
            e = a >= b - off ? e : 0.0f;
            s[a] = e;
            sum[a] += e;
        }
    }
    for (int a = 0; a < m; a++) {
        /* the first key tile has nothing to rescale (exp(-inf) is 0); a
         * row that sees none of these keys keeps its max (alpha 1) */
        float alpha = mx[a] == -INFINITY ? 0.0f : vexpf(mx[a] - top[a]);
        l[a] = alpha * l[a] + sum[a];
        mx[a] = top[a];
        if (alpha != 1.0f) {
            float *oa = o + (size_t)a * dp;
            for (int e = 0; e < dp; e++)
                oa[e] *= alpha;
        }
    }
}

void attention_forward_head(float *out, float *lse, float *scratch, const float *q,
                            const float *k, const float *v, int n, int h, int dh, int ld)
{
    const float scale = 1.0f / sqrtf((float)dh);
    const int dp = round_up(dh, NR);
    float *qt = scratch;                 /* [dh][BR] the row tile's q, transposed */
    float *st = qt + (size_t)dh * BR;    /* [BC][BR] scores, then probabilities */
    float *o = st + BC * BR;             /* [BR][dp] output of a row tile, unnormalised */
    float *mx = o + (size_t)BR * dp;     /* [BR] running max of the scaled scores */
    float *l = mx + BR;                  /* [BR] running sum of exp(score - max) */
    float *top = l + BR, *sum = top + BR; /* [BR] each, work space */
    float *vbuf = sum + BR;              /* [n][dp] when dh is not whole register tiles */
    q += h * dh, k += h * dh, v += h * dh, out += h * dh;
    view vv = padded(vbuf, v, n, dh, ld);
    for (int r0 = 0; r0 < n; r0 += BR) {
        int m = min_i(BR, n - r0);
        pack_transposed(qt, q, r0, m, dh, ld);
        for (int a = 0; a < BR; a++) {
            mx[a] = -INFINITY;
            l[a] = 0.0f;
        }
        memset(o, 0, (size_t)m * dp * sizeof(float));
        /* the key tiles that hold a key some row of the tile sees, each
         * cut after the last row's position */
        for (int c0 = 0; c0 < r0 + m; c0 += BC) {
            int kb = min_i(BC, r0 + m - c0), off = r0 - c0;
            tile_product(st, BR, k + (size_t)c0 * ld, ld, 1, qt, BR, kb, round_up(m, NR), dh,
                         false, COLS_FROM, off);
            online_softmax(st, o, mx, l, top, sum, m, kb, off, dp, scale);
            tile_product(o, dp, st, 1, BR, vv.p + (size_t)c0 * vv.ld, vv.ld, m, dp, kb, true,
                         K_TO, off);
        }
        /* Algorithm 1, lines 12-13: normalise; lse = max + log(sum) */
        for (int a = 0; a < m; a++) {
            float inv = 1.0f / l[a];
            float *oa = out + (size_t)(r0 + a) * ld;
            for (int e = 0; e < dh; e++)
                oa[e] = o[(size_t)a * dp + e] * inv;
            lse[r0 + a] = mx[a] + logf(l[a]);
        }
    }
}

void attention_backward_head(float *dq, float *dk, float *dv, float *scratch,
                             const float *dout, const float *out, const float *q,
                             const float *k, const float *v, const float *lse, int n, int h,
                             int dh, int ld)
{
    const float scale = 1.0f / sqrtf((float)dh);
    const int dp = round_up(dh, NR);
    const long rf = rows_floats(n, dh);
    float *qt = scratch, *gt = qt + rf;   /* [nt][dh][BR] q and dout, tile by tile transposed */
    float *dd = gt + rf;                  /* [round_up(n, BR)] D = rowsum(dO * O) */
    float *ls = dd + round_up(n, BR);     /* [round_up(n, BR)] lse */
    float *pt = ls + round_up(n, BR);     /* [BC][BR] probabilities of a tile */
    float *dst = pt + BC * BR;            /* [BC][BR] dP, then dS */
    /* when dh is not whole register tiles: dQ [n][dp], dK and dV of a key
     * tile [BC][dp], q, k and dout padded [n][dp]; else the products add
     * into dq, dk and dv in place */
    float *dqa = dst + BC * BR, *dkt = dqa + (size_t)n * dp, *dvt = dkt + (size_t)BC * dp;
    float *pads = dvt + (size_t)BC * dp;
    const bool in_place = dp == dh;
    q += h * dh, k += h * dh, v += h * dh, out += h * dh, dout += h * dh;
    dq += h * dh, dk += h * dh, dv += h * dh;
    long ldq = in_place ? ld : dp, ldkv = in_place ? ld : dp;
    if (in_place)
        dqa = dq;
    for (int r0 = 0; r0 < n; r0 += BR) {
        int m = min_i(BR, n - r0);
        pack_transposed(qt + (size_t)r0 * dh, q, r0, m, dh, ld);
        pack_transposed(gt + (size_t)r0 * dh, dout, r0, m, dh, ld);
    }
    view qv = padded(pads, q, n, dh, ld);
    view kv = padded(pads + (size_t)n * dp, k, n, dh, ld);
    view gv = padded(pads + 2 * (size_t)n * dp, dout, n, dh, ld);
    /* FlashAttention-2, Algorithm 2, line 4 (done once, before the tiles):
     * D_i = rowsum(dO_i * O_i), which is sum_m P_im dP_im. */
    for (int a = 0; a < n; a++) {
        const float *oa = out + (size_t)a * ld, *ga = dout + (size_t)a * ld;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int e = 0; e < dh; e++)
            sum += oa[e] * ga[e];
        dd[a] = sum;
    }
    /* per-row vectors padded to whole tiles: the loops run over vectors */
    memcpy(ls, lse, (size_t)n * sizeof(float));
    for (int a = n; a < round_up(n, BR); a++)
        dd[a] = ls[a] = 0.0f;
    if (!in_place)
        memset(dqa, 0, (size_t)n * dp * sizeof(float));
    /* Algorithm 2's loops: key tiles outside (their dK, dV rows stay in
     * cache), inside the row tiles that see some of their keys */
    for (int c0 = 0; c0 < n; c0 += BC) {
        int kt_rows = min_i(BC, n - c0);
        float *dkc = in_place ? dk + (size_t)c0 * ld : dkt;
        float *dvc = in_place ? dv + (size_t)c0 * ld : dvt;
        if (!in_place) {
            memset(dkt, 0, (size_t)kt_rows * dp * sizeof(float));
            memset(dvt, 0, (size_t)kt_rows * dp * sizeof(float));
        }
        for (int r0 = c0 / BR * BR; r0 < n; r0 += BR) {
            int m = min_i(BR, n - r0), off = r0 - c0, end = round_up(m, VL);
            int kb = min_i(kt_rows, r0 + m - c0), mp = round_up(m, NR);
            const float *qti = qt + (size_t)r0 * dh, *gti = gt + (size_t)r0 * dh;
            const float *lr = ls + r0, *dr = dd + r0;
            /* S = q k^T and dP = dO_i V_j^T (lines 8 and 11) */
            tile_product(pt, BR, k + (size_t)c0 * ld, ld, 1, qti, BR, kb, mp, dh, false,
                         COLS_FROM, off);
            tile_product(dst, BR, v + (size_t)c0 * ld, ld, 1, gti, BR, kb, mp, dh, false,
                         COLS_FROM, off);
            /* P = exp(scale S - lse), recomputed (line 9), and dS = P (dP - D)
             * (line 12) with the scale of the scores folded in, in one pass */
            for (int b = 0; b < kb; b++) {
                float *p = pt + (size_t)b * BR, *g = dst + (size_t)b * BR;
                for (int a = first_row(b, off); a < end; a++) {
                    float e = vexpf(p[a] * scale - lr[a]);
                    e = a >= b - off ? e : 0.0f;
                    p[a] = e;
                    g[a] = e * (g[a] - dr[a]) * scale;
                }
            }
            /* dV_j += P^T dO_i (line 10) */
            tile_product(dvc, ldkv, pt, BR, 1, gv.p + (size_t)r0 * gv.ld, gv.ld, kb, dp, m, true,
                         K_FROM, off);
            /* dQ_i += dS K_j; dK_j += dS^T Q_i (lines 13-14) */
            tile_product(dqa + (size_t)r0 * ldq, ldq, dst, 1, BR, kv.p + (size_t)c0 * kv.ld,
                         kv.ld, m, dp, kb, true, K_TO, off);
            tile_product(dkc, ldkv, dst, BR, 1, qv.p + (size_t)r0 * qv.ld, qv.ld, kb, dp, m,
                         true, K_FROM, off);
        }
        for (int b = 0; !in_place && b < kt_rows; b++) {
            float *dkb = dk + (size_t)(c0 + b) * ld, *dvb = dv + (size_t)(c0 + b) * ld;
            for (int e = 0; e < dh; e++) {
                dkb[e] += dkt[(size_t)b * dp + e];
                dvb[e] += dvt[(size_t)b * dp + e];
            }
        }
    }
    for (int a = 0; !in_place && a < n; a++)
        for (int e = 0; e < dh; e++)
            dq[(size_t)a * ld + e] += dqa[(size_t)a * dp + e];
}

void attention_forward(float *out, float *lse, float *scratch, const float *q, const float *k,
                       const float *v, int n, int n_heads, int dh, int ld)
{
    for (int h = 0; h < n_heads; h++)
        attention_forward_head(out, lse + (size_t)h * n, scratch, q, k, v, n, h, dh, ld);
}

void attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                        const float *out, const float *q, const float *k, const float *v,
                        const float *lse, int n, int n_heads, int dh, int ld)
{
    for (int h = 0; h < n_heads; h++)
        attention_backward_head(dq, dk, dv, scratch, dout, out, q, k, v, lse + (size_t)h * n, n,
                                h, dh, ld);
}
