/* Rows chosen by recursion steps (select_steps.h). */
#include "mod/select_steps.h"

#include "core/kernels/matmul.h"
#include "core/util/ctx.h"
#include "mod/router.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float sigm(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

static double bce(float s, int z)
{
    double x = (double)s;
    return fmax(x, 0.0) + log1p(exp(-fabs(x))) - (z ? x : 0.0);
}

int build_select_steps(select_steps *st, int max_seq, int S)
{
    memset(st, 0, sizeof(*st));
    buf_plan p = buf_counting(BUF_ALIGN);
    select_steps_layout(&p, st, max_seq, S);
    if (buf_alloc(&p, &st->block))
        return -ENOMEM;
    select_steps_layout(&p, st, max_seq, S);
    return 0;
}

void free_select_steps(select_steps *st)
{
    free(st->block);
    memset(st, 0, sizeof(*st));
}

float select_steps_score_row(const float *x, const float *w, int d)
{
    float acc = 0.0f;
    for (int e = 0; e < d; e++)
        acc += x[e] * w[e];
    return acc;
}

int select_steps_decide(const float *x, const float *w, int d, float *gate)
{
    float sc = select_steps_score_row(x, w, d);
    if (!(sc > 0.0f))
        return 0;
    *gate = sigm(sc);
    return 1;
}

long select_steps_score(select_steps *st, const float *x, const float *w, int n, int d)
{
    long eligible = 0;
    for (int i = 0; i < n; i++) {
        st->s[i] = 0.0f;
        if (!st->elig[i])
            continue;
        st->s[i] = select_steps_score_row(x + (size_t)i * d, w, d);
        eligible++;
    }
    flops_add(2.0 * (double)eligible * d);
    return eligible;
}

void select_steps_choose(select_steps *st, routed_set *set, int k, bool causal, int nseq, int S)
{
    routed_set_begin(set);
    for (int b = 0; b < nseq; b++) {
        const unsigned char *z = st->elig + (size_t)b * S;
        unsigned char *take = st->take + (size_t)b * S;
        const float *sc = st->s + (size_t)b * S;
        int eligible = 0;
        for (int i = 0; i < S; i++)
            eligible += z[i];
        if (causal) {
            for (int i = 0; i < S; i++)
                take[i] = z[i] && sc[i] > 0.0f;
        } else {
            int kk = k < eligible ? k : eligible;
            for (int i = 0; i < S; i++)
                st->tmp[i] = z[i] ? sc[i] : -HUGE_VALF;
            mod_topk(take, st->tmp, S, kk, st->heap);
        }
        for (int i = 0; i < S; i++)
            if (take[i])
                routed_set_add(set, b * S + i, i, sigm(sc[i]));
        routed_set_next_seq(set);
    }
}

void select_steps_bce(const select_steps *st, int n, double *aux)
{
    for (int i = 0; i < n; i++)
        if (st->elig[i])
            *aux += bce(st->s[i], st->take[i]);
}

void select_steps_backward(select_steps *st, const routed_set *set, const float *dgate,
                           double aux_weight, float bscale, const float *x, const float *w,
                           float *dw, float *dx, int n, int d)
{
    float *ds = st->ds;
    memset(ds, 0, (size_t)n * sizeof(float));
    for (int j = 0; j < set->n_sel; j++) {
        float g = set->gate[j];
        ds[set->sel[j]] += dgate[j] * g * (1.0f - g);
    }
    for (int i = 0; i < n; i++)
        if (st->elig[i])
            ds[i] += (float)aux_weight * bscale * (sigm(st->s[i]) - (float)st->take[i]);
    matmul(dw, 1, x, d, true, ds, 1, false, d, 1, n, 1.0f);
    matmul(dx, d, ds, 1, false, w, d, false, n, d, 1, 1.0f);
}
