#include "core/kernels/ops.h"

#include "core/kernels/vexp.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

void rmsnorm_forward(float *y, float *rstd, const float *x, const float *g, int n, int d)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d;
        float *yi = y + (size_t)i * d;
        float ss = 0.0f;
        for (int j = 0; j < d; j++)
            ss += xi[j] * xi[j];
        float r = 1.0f / sqrtf(ss / (float)d + RMSNORM_EPS);
        rstd[i] = r;
        for (int j = 0; j < d; j++)
            yi[j] = xi[j] * r * g[j];
    }
}

void rmsnorm_backward_dx(float *dx, const float *dy, const float *x, const float *g,
                         const float *rstd, int n, int d)
{
    /* y_j = x_j r g_j, r = (mean(x^2)+eps)^-1/2, dr/dx_j = -r^3 x_j / d:
     * dx_j = r g_j dy_j - x_j r^3 / d * sum_m(dy_m g_m x_m). */
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d;
        const float *dyi = dy + (size_t)i * d;
        float *dxi = dx + (size_t)i * d;
        float r = rstd[i];
        float dot = 0.0f;
        for (int j = 0; j < d; j++)
            dot += dyi[j] * g[j] * xi[j];
        float c = dot * r * r * r / (float)d;
        for (int j = 0; j < d; j++)
            dxi[j] += r * g[j] * dyi[j] - c * xi[j];
    }
}

void rmsnorm_backward_dg(float *dg, const float *dy, const float *x, const float *rstd, int n,
                         int d)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d;
        const float *dyi = dy + (size_t)i * d;
        float r = rstd[i];
        for (int j = 0; j < d; j++)
            dg[j] += dyi[j] * xi[j] * r;
    }
}

void rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                      const float *rstd, int n, int d)
{
    rmsnorm_backward_dx(dx, dy, x, g, rstd, n, d);
    rmsnorm_backward_dg(dg, dy, x, rstd, n, d);
}

int build_rope_table(rope_table **out, int max_pos, int dh)
{
    rope_table *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->max_pos = max_pos;
    t->half = dh / 2;
    size_t count = (size_t)max_pos * (size_t)t->half;
    t->cos = malloc(count * sizeof(float));
    t->sin = malloc(count * sizeof(float));
    if (!t->cos || !t->sin) {
        free_rope_table(&t);
        return -ENOMEM;
    }
    for (int p = 0; p < max_pos; p++) {
        for (int i = 0; i < t->half; i++) {
            double theta = pow(ROPE_BASE, -2.0 * i / dh);
            double angle = p * theta;
            t->cos[(size_t)p * t->half + i] = (float)cos(angle);
            t->sin[(size_t)p * t->half + i] = (float)sin(angle);
        }
    }
    *out = t;
    return 0;
}

void free_rope_table(rope_table **t)
{
    if (!*t)
        return;
    free((*t)->cos);
    free((*t)->sin);
    free(*t);
    *t = NULL;
}

static void rope_rotate(float *x, const int32_t *pos, const rope_table *t, int n, int n_heads,
                        int dh, float sign)
{
    int half = dh / 2;
    for (int j = 0; j < n; j++) {
        const float *c = t->cos + (size_t)pos[j] * t->half;
        const float *s = t->sin + (size_t)pos[j] * t->half;
        for (int h = 0; h < n_heads; h++) {
            float *xh = x + ((size_t)j * n_heads + h) * dh;
            for (int i = 0; i < half; i++) {
                float a = xh[i], b = xh[i + half];
                float si = sign * s[i];
                xh[i] = a * c[i] - b * si;
                xh[i + half] = b * c[i] + a * si;
            }
        }
    }
}

void rope_forward(float *x, const int32_t *pos, const rope_table *t, int n, int n_heads, int dh)
{
    rope_rotate(x, pos, t, n, n_heads, dh, 1.0f);
}

void rope_backward(float *dx, const int32_t *pos, const rope_table *t, int n, int n_heads, int dh)
{
    /* A rotation's transpose is the rotation by the opposite angle. */
    rope_rotate(dx, pos, t, n, n_heads, dh, -1.0f);
}

void swiglu_forward(float *g, const float *a, const float *b, long count)
{
    for (long i = 0; i < count; i++)
        g[i] = a[i] * vsigmoidf(a[i]) * b[i];
}

void swiglu_backward(float *da, float *db, const float *dg, const float *a, const float *b,
                     long count)
{
    for (long i = 0; i < count; i++) {
        float s = vsigmoidf(a[i]);
        float silu = a[i] * s;
        da[i] = dg[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
        db[i] = dg[i] * silu;
    }
}

void softmax_scaled(float *row, int n, float scale)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int m = 0; m < n; m++) {
        row[m] *= scale;
        mx = row[m] > mx ? row[m] : mx;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int m = 0; m < n; m++) {
        row[m] = vexpf(row[m] - mx);
        sum += row[m];
    }
    float inv = 1.0f / sum;
    for (int m = 0; m < n; m++)
        row[m] *= inv;
}

void embedding_forward(float *x, const float *tok_emb, const token_t *tokens, int n, int d)
{
    for (int i = 0; i < n; i++) {
        const float *e = tok_emb + (size_t)tokens[i] * d;
        float *xi = x + (size_t)i * d;
        for (int j = 0; j < d; j++)
            xi[j] = e[j];
    }
}

void embedding_backward(float *dtok_emb, const float *dx, const token_t *tokens, int n, int d)
{
    for (int i = 0; i < n; i++) {
        float *e = dtok_emb + (size_t)tokens[i] * d;
        const float *dxi = dx + (size_t)i * d;
        for (int j = 0; j < d; j++)
            e[j] += dxi[j];
    }
}

double cross_entropy(float *dlogits, const float *logits, const token_t *targets, int n, int V,
                     float scale)
{
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        const float *li = logits + (size_t)i * V;
        float mx = li[0];
        for (int c = 1; c < V; c++)
            if (li[c] > mx)
                mx = li[c];
        double sum = 0.0;
        for (int c = 0; c < V; c++)
            sum += exp((double)(li[c] - mx));
        double lse = (double)mx + log(sum);
        total += lse - (double)li[targets[i]];
        if (dlogits) {
            float *di = dlogits + (size_t)i * V;
            for (int c = 0; c < V; c++)
                di[c] = scale * (float)exp((double)li[c] - lse);
            di[targets[i]] -= scale;
        }
    }
    return total;
}
