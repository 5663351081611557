#include "analysis/clustermodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double eff_at(const cm_fit *f, double P)
{
    return P <= f->p0 ? f->c0 * f->p0 / P : f->c0 * f->p0 / (P * f->e);
}

static double amdahl_at(const cm_fit *f, double P)
{
    return f->a + f->b / P;
}

double cm_compute(const cm_fit *f, double P)
{
    return f->form == CM_EFF ? eff_at(f, P) : amdahl_at(f, P);
}

int cm_fit_points(const cm_point *pts, int n, long batch, int n_a2a, double shared_bytes,
                  cm_fit *f, char *err, int err_len)
{
    *f = (cm_fit){ 0 };
    if (n < 2) {
        snprintf(err, (size_t)err_len, "runs at %d rank count%s: the fit needs at least 2",
                 n, n == 1 ? "" : "s");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!(pts[i].ranks >= 1 && pts[i].compute_s > 0 && isfinite(pts[i].compute_s) &&
              pts[i].comm_bytes >= 0 && pts[i].comm_s >= 0) || (i && pts[i].ranks <= pts[i - 1].ranks)) {
            snprintf(err, (size_t)err_len, "the point at %d ranks: expected compute_s > 0, "
                     "comm_s and comm_bytes >= 0, rank counts ascending", pts[i].ranks);
            return -1;
        }
    }
    f->p0 = pts[0].ranks;
    f->c0 = pts[0].compute_s;
    double sl = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 1; i < n; i++)
        sl += log(f->c0 * f->p0 / (pts[i].ranks * pts[i].compute_s));
    f->e = exp(sl / (n - 1));
    for (int i = 0; i < n; i++) {
        double x = 1.0 / pts[i].ranks, y = pts[i].compute_s;
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    f->b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    f->a = (sy - f->b * sx) / n;
    double re = 0, ra = 0;
    for (int i = 0; i < n; i++) {
        double y = pts[i].compute_s, de = (eff_at(f, pts[i].ranks) - y) / y,
               da = (amdahl_at(f, pts[i].ranks) - y) / y;
        re += de * de, ra += da * da;
    }
    f->rms_eff = sqrt(re / n);
    f->rms_amdahl = sqrt(ra / n);
    f->form = n >= 3 && f->rms_amdahl < f->rms_eff ? CM_AMDAHL : CM_EFF;
    int m = 0;
    double k = 0, bw = 0, al = 0;
    f->n_a2a = n_a2a;
    for (int i = 0; i < n; i++) {
        int P = pts[i].ranks;
        if (P < 2)
            continue;
        double ring = 2.0 * (P - 1) / P, q = (double)batch / P;
        if (n_a2a > 0) /* the all-to-alls: what the bytes hold beyond the all-reduce */
            al += (pts[i].comm_bytes - ring * shared_bytes) / (q * (P - 1) / P);
        else
            k += pts[i].comm_bytes / ring;
        /* waits for a slower rank only lower the apparent rate: the highest
         * is the nearest to the transfer's */
        if (pts[i].comm_s > 0 && pts[i].comm_bytes / pts[i].comm_s > bw)
            bw = pts[i].comm_bytes / pts[i].comm_s;
        m++;
    }
    if (n_a2a > 0)
        k = m * shared_bytes;
    if (!m || !(k > 0) || !(bw > 0)) {
        snprintf(err, (size_t)err_len, "no run at 2 ranks or more that sent bytes and spent "
                 "time communicating: the communication cannot be fitted");
        return -1;
    }
    f->grad_bytes = k / m;
    f->a2a_bytes = al > 0 ? al / m : 0;
    f->shm_bytes_s = bw;
    return 0;
}

cm_pred cm_predict(const cm_fit *f, const cm_net *net, int nodes, long batch, double scale,
                   double a2a_scale)
{
    cm_pred p = { 0 };
    p.ranks = nodes * net->cores;
    long q = (batch + p.ranks - 1) / p.ranks; /* sequences a rank */
    p.batch = q * p.ranks;
    p.compute_s = scale * cm_compute(f, (double)batch / (double)q);
    double K = scale * f->grad_bytes, C = net->cores < p.ranks ? net->cores : p.ranks, N = nodes;
    p.comm_s = (C > 1 ? 2.0 * (C - 1) / C * K / f->shm_bytes_s : 0) +
               (N > 1 ? 2.0 * (N - 1) / N * K / net->bytes_s + 2.0 * (N - 1) * net->latency_s
                      : 0);
    if (f->n_a2a > 0 && p.ranks > 1) {
        double P = p.ranks, A = a2a_scale * f->a2a_bytes * (double)q * (P - 1) / P;
        p.comm_s += A * (C - 1) / (P - 1) / f->shm_bytes_s +
                    (N > 1 ? A * (P - C) / (P - 1) * C / net->bytes_s +
                                 f->n_a2a * (N - 1) * net->latency_s
                           : 0);
    }
    p.step_s = p.compute_s + p.comm_s;
    /* one rank alone doing the same sequences, over P ranks' time */
    double one = scale * cm_compute(f, 1.0) * (double)p.batch / (double)batch;
    p.efficiency = one / (p.ranks * p.step_s);
    return p;
}

static int by_length_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

double cm_lpt_makespan(const double *secs, int n, int g)
{
    if (n <= 0 || g <= 0)
        return 0;
    double *s = malloc((size_t)n * sizeof(double)), *free_at = calloc((size_t)g, sizeof(double));
    if (!s || !free_at) {
        free(s);
        free(free_at);
        return (double)NAN;
    }
    for (int i = 0; i < n; i++)
        s[i] = secs[i];
    qsort(s, (size_t)n, sizeof(double), by_length_desc);
    double end = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int j = 1; j < g; j++)
            if (free_at[j] < free_at[best])
                best = j;
        free_at[best] += s[i];
        if (free_at[best] > end)
            end = free_at[best];
    }
    free(s);
    free(free_at);
    return end;
}
