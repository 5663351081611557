/* A model of data-parallel step time on a cluster, fitted to measured runs
 * of one config at several rank counts (mode-analyze cluster).  Pure: no
 * I/O, nothing prints.
 *
 * Compute per rank per step against the sequences a rank holds (q = batch
 * / P at the measured global batch):
 *   form "eff": c(P) = c0 P0 / (P e) for P > P0, c0 at P0 (the smallest P
 *               measured); e, the parallel efficiency of compute beyond P0,
 *               is the geometric mean over the other points;
 *   form "amdahl": c(P) = a + b / P, least squares in 1/P.
 * Bytes each rank sends per step: K x 2 (P-1)/P, a ring all-reduce of K
 * bytes, plus, with expert layers, the all-to-alls' alpha q (P-1)/P (q the
 * sequences a rank holds: its tokens, of which (P-1)/P go to other ranks).
 * Without experts K is fitted from the measured comm_bytes; with them K is
 * given (4 bytes a shared parameter: the experts are sharded, not reduced)
 * and alpha is what the measured bytes hold beyond the all-reduce.
 * Communication at N nodes of C ranks, hierarchical: within the node
 * 2 (C-1)/C K / bw_shm (bw_shm: the highest of the measured points'
 * bytes over comm seconds: their waits for a slower rank only lower it), across nodes 2 (N-1)/N K / bw_net +
 * 2 (N-1) latency; the all-to-alls' bytes to the C-1 other ranks of the
 * node at bw_shm, those to the P-C ranks of other nodes through the node's
 * link (C ranks sharing it), and (N-1) latencies for each of them. */
#ifndef MODE_ANALYSIS_CLUSTERMODEL_H
#define MODE_ANALYSIS_CLUSTERMODEL_H

#include <stdbool.h>

typedef struct cm_point {
    int ranks;
    double compute_s, comm_s, comm_bytes; /* per step, rank 0 */
} cm_point;

enum { CM_EFF, CM_AMDAHL };

typedef struct cm_fit {
    int form;                /* CM_EFF or CM_AMDAHL */
    int p0;                  /* eff: the base rank count */
    double c0, e;            /* eff: compute at p0, efficiency beyond it */
    double a, b;             /* amdahl: a + b / P */
    double rms_eff, rms_amdahl; /* relative rms residuals of both forms (0 with 2 points) */
    double grad_bytes;       /* K */
    double a2a_bytes;        /* alpha: all-to-all bytes a rank a step per sequence it holds,
                                over (P-1)/P (0 without experts) */
    int n_a2a;               /* all-to-alls a step (4 an expert layer) */
    double shm_bytes_s;      /* bw_shm */
} cm_fit;

/* Fit n points at distinct rank counts (at least 2, sorted ascending) of a
 * run of batch sequences a step.  n_a2a: the all-to-alls a step (0 without
 * expert layers: K from the bytes); shared_bytes: K with experts.
 * The form: the smaller residual with 3 or more rank counts, else eff
 * (both fit 2 points exactly; eff extrapolates the measured loss of
 * efficiency, amdahl a serial part that two noisy points make up).
 * Returns 0, or -1 with a reason in err. */
int cm_fit_points(const cm_point *pts, int n, long batch, int n_a2a, double shared_bytes,
                  cm_fit *f, char *err, int err_len);
/* Compute seconds per step of one rank at P ranks (P may be fractional:
 * batch / sequences a rank holds). */
double cm_compute(const cm_fit *f, double P);

typedef struct cm_net {
    int cores;               /* ranks a node */
    double bytes_s;          /* network bandwidth, bytes/s */
    double latency_s;
} cm_net;

typedef struct cm_pred {
    int ranks;
    long batch;              /* global: the measured one, or one sequence a rank */
    double compute_s, comm_s, step_s, efficiency;
} cm_pred;

/* At nodes nodes, the measured batch (raised to a multiple of P when P
 * exceeds it: one sequence a rank, weak scaling); scale multiplies compute
 * and the all-reduce's bytes, a2a_scale the all-to-alls' (a bigger model at
 * the same tokens a step). */
cm_pred cm_predict(const cm_fit *f, const cm_net *net, int nodes, long batch, double scale,
                   double a2a_scale);

/* Longest-first packing of n jobs of the given seconds onto g groups:
 * each job to the group that frees first.  The makespan. */
double cm_lpt_makespan(const double *secs, int n, int g);

#endif
