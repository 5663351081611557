/* compare_runs A.h5 B.h5 RTOL [GRAD_RTOL]: the per-step metrics (loss, ce,
 * grad_norm) and evaluations of two run files must have the same steps and
 * agree within the relative tolerance RTOL (0 = bit for bit); the gradient
 * norm within GRAD_RTOL (default RTOL): a near-tie in a routing decision that
 * float rounding flips moves one step's gradient more than its loss.  Prints the largest difference;
 * exits 0 when they agree, 1 when not, 2 on unreadable input. */
#include "core/io/runfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double worst_col(const run_table *a, const run_table *b, const char *col, int *ok)
{
    int c = -1;
    for (int i = 0; i < a->n_cols; i++)
        if (!strcmp(a->cols[i], col))
            c = i;
    if (c < 0 || a->n_rows != b->n_rows) {
        printf("%s: %ld rows against %ld\n", col, a->n_rows, b->n_rows);
        *ok = 0;
        return HUGE_VAL;
    }
    double worst = 0.0;
    for (long r = 0; r < a->n_rows; r++) {
        double x = a->rows[r * a->n_cols + c], y = b->rows[r * b->n_cols + c];
        double s0 = a->rows[r * a->n_cols], s1 = b->rows[r * b->n_cols];
        if (s0 != s1)
            *ok = 0;
        double d = x == y ? 0.0 : fabs(x - y) / fmax(fabs(x), fabs(y));
        if (!(d <= worst))
            worst = d;
    }
    return worst;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: compare_runs A.h5 B.h5 RTOL [GRAD_RTOL]\n");
        return 2;
    }
    run_record *a = NULL, *b = NULL;
    char err[512];
    if (run_record_read(&a, argv[1], err, sizeof(err)) ||
        run_record_read(&b, argv[2], err, sizeof(err))) {
        fprintf(stderr, "compare_runs: %s\n", err);
        return 2;
    }
    double tol = atof(argv[3]), gtol = argc == 5 ? atof(argv[4]) : tol;
    int ok = a->metrics.n_rows > 0;
    const char *mcols[] = { "loss", "ce", "grad_norm" };
    for (int i = 0; i < 3; i++) {
        double w = worst_col(&a->metrics, &b->metrics, mcols[i], &ok);
        printf("metrics/%-10s %ld steps, max relative difference %.3g\n", mcols[i],
               a->metrics.n_rows, w);
        ok &= w <= (i == 2 ? gtol : tol);
    }
    const char *ecols[] = { "loss_topk", "loss_causal" };
    for (int i = 0; i < 2; i++) {
        double w = worst_col(&a->eval, &b->eval, ecols[i], &ok);
        printf("eval/%-12s %ld evaluations, max relative difference %.3g\n", ecols[i],
               a->eval.n_rows, w);
        ok &= w <= tol;
    }
    free_run_record(&a);
    free_run_record(&b);
    printf("%s\n", ok ? "agree" : "DIFFER");
    return ok ? 0 : 1;
}
