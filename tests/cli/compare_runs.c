/* compare_runs A.h5 B.h5 RTOL [GRAD_RTOL]: the per-step metrics (loss, ce,
 * grad_norm) and evaluations of two run files must have the same steps and
 * agree within the relative tolerance RTOL (0 = bit for bit); the gradient
 * norm within GRAD_RTOL (default RTOL; "none": not compared): a near-tie in
 * a routing decision that float rounding flips moves one step's gradient
 * more than its loss.
 *
 * compare_runs --tensors A.h5 B.h5 TOL: every float32 dataset of two files
 * (checkpoints: parameters and Adam moments) must exist in both with the
 * same shape and agree within TOL, as max |a - b| over the dataset divided
 * by its max |a| (0 = bit for bit).
 *
 * compare_runs --values RUN.h5 DATASET: print a column (a run in progress
 * included).
 *
 * compare_runs --set FILE.h5 DATASET VALUE: replace DATASET by a float64 one
 * of the same shape holding VALUE throughout and reseal the file: a file
 * whose checksum holds and whose numbers are wrong, which readers must
 * refuse by range.
 *
 * Prints the largest difference; exits 0 when they agree, 1 when not, 2 on
 * unreadable input. */
#include "core/io/h5util.h"
#include "core/io/runfile.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
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

typedef struct tensor_walk {
    hid_t other;
    double tol, worst;
    char worst_name[256];
    int count, bad, unreadable;
} tensor_walk;

/* One dataset of A against its namesake in B. */
static herr_t compare_dataset(hid_t loc, const char *name, const H5O_info_t *info, void *arg)
{
    tensor_walk *w = arg;
    if (info->type != H5O_TYPE_DATASET)
        return 0;
    hid_t da = H5Dopen2(loc, name, H5P_DEFAULT);
    hid_t ta = da < 0 ? -1 : H5Dget_type(da);
    bool is_float = ta >= 0 && H5Tget_class(ta) == H5T_FLOAT && H5Tget_size(ta) == 4;
    if (ta >= 0)
        H5Tclose(ta);
    if (!is_float) {
        if (da >= 0)
            H5Dclose(da);
        return 0;
    }
    hid_t db = H5Dopen2(w->other, name, H5P_DEFAULT);
    hid_t sa = H5Dget_space(da), sb = db < 0 ? -1 : H5Dget_space(db);
    hssize_t na = H5Sget_simple_extent_npoints(sa);
    hssize_t nb = sb < 0 ? -1 : H5Sget_simple_extent_npoints(sb);
    int rank_a = H5Sget_simple_extent_ndims(sa), rank_b = sb < 0 ? -1 : H5Sget_simple_extent_ndims(sb);
    hsize_t dims_a[8] = { 0 }, dims_b[8] = { 0 };
    bool same_shape = rank_a == rank_b && rank_a >= 0 && rank_a <= 8 && na == nb;
    if (same_shape) {
        H5Sget_simple_extent_dims(sa, dims_a, NULL);
        H5Sget_simple_extent_dims(sb, dims_b, NULL);
        same_shape = !memcmp(dims_a, dims_b, sizeof(dims_a));
    }
    float *a = same_shape ? malloc((size_t)(na > 0 ? na : 1) * sizeof(float)) : NULL;
    float *b = same_shape ? malloc((size_t)(na > 0 ? na : 1) * sizeof(float)) : NULL;
    if (!same_shape) {
        printf("/%s: missing from B or of another shape\n", name);
        w->bad++;
    } else if (!a || !b || H5Dread(da, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a) < 0 ||
               H5Dread(db, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) < 0) {
        printf("/%s: unreadable\n", name);
        w->unreadable++;
    } else {
        double diff = 0.0, scale = 0.0;
        bool bits = true;
        for (hssize_t i = 0; i < na; i++) {
            bits &= !memcmp(&a[i], &b[i], sizeof(float));
            double d = fabs((double)a[i] - (double)b[i]);
            if (!(d <= diff))
                diff = d;
            scale = fmax(scale, fabs((double)a[i]));
        }
        double rel = bits ? 0.0 : scale > 0.0 ? diff / scale : HUGE_VAL;
        if (!(rel <= w->worst)) {
            w->worst = rel;
            snprintf(w->worst_name, sizeof(w->worst_name), "/%s", name);
        }
        w->bad += !(rel <= w->tol);
        w->count++;
    }
    free(a);
    free(b);
    if (sb >= 0)
        H5Sclose(sb);
    H5Sclose(sa);
    if (db >= 0)
        H5Dclose(db);
    H5Dclose(da);
    return 0;
}

static int compare_tensors(const char *pa, const char *pb, double tol)
{
    char err[512];
    h5_quiet();
    hid_t fa = h5_open_checked(pa, err, sizeof(err));
    if (fa < 0) {
        fprintf(stderr, "compare_runs: %s\n", err);
        return 2;
    }
    hid_t fb = h5_open_checked(pb, err, sizeof(err));
    if (fb < 0) {
        fprintf(stderr, "compare_runs: %s\n", err);
        H5Fclose(fa);
        return 2;
    }
    tensor_walk w = { .other = fb, .tol = tol };
    H5Ovisit(fa, H5_INDEX_NAME, H5_ITER_NATIVE, compare_dataset, &w);
    H5Fclose(fa);
    H5Fclose(fb);
    printf("%d float tensors, max |a - b| / max |a| %.3g%s%s\n", w.count, w.worst,
           w.worst_name[0] ? " at " : "", w.worst_name);
    if (w.unreadable)
        return 2;
    bool ok = w.count > 0 && w.bad == 0;
    printf("%s\n", ok ? "agree" : "DIFFER");
    return ok ? 0 : 1;
}

/* compare_runs --values RUN.h5 DATASET: a column of a run file (its pieces
 * included, as a run in progress has them), one value a line. */
static int print_values(const char *path, const char *name)
{
    char err[512];
    run_reader *rd = NULL;
    if (open_run_reader(&rd, path, err, sizeof(err))) {
        fprintf(stderr, "compare_runs: %s\n", err);
        return 2;
    }
    double *v = NULL;
    long n = 0;
    int rc = run_reader_column(rd, name, &v, &n);
    for (long i = 0; !rc && i < n; i++)
        printf("%.17g\n", v[i]);
    free(v);
    close_run_reader(&rd);
    if (rc)
        fprintf(stderr, "compare_runs: %s: no column %s\n", path, name);
    return rc ? 2 : 0;
}

static int set_dataset(const char *path, const char *name, double value)
{
    h5_quiet();
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), d = -1, sp = -1, nd = -1;
    double *buf = NULL;
    int rc = 2;
    if (f < 0 || (d = H5Dopen2(f, name, H5P_DEFAULT)) < 0 || (sp = H5Dget_space(d)) < 0)
        goto done;
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    if (n <= 0 || !(buf = malloc((size_t)n * sizeof(double))))
        goto done;
    for (hssize_t i = 0; i < n; i++)
        buf[i] = value;
    H5Dclose(d);
    d = -1;
    if (H5Ldelete(f, name, H5P_DEFAULT) < 0 ||
        (nd = H5Dcreate2(f, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) <
            0 ||
        H5Dwrite(nd, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        goto done;
    rc = 0;
done:
    free(buf);
    if (nd >= 0)
        H5Dclose(nd);
    if (d >= 0)
        H5Dclose(d);
    if (sp >= 0)
        H5Sclose(sp);
    if (f >= 0 && H5Fclose(f) < 0)
        rc = 2;
    char why[600];
    if (!rc && h5_reseal(path, why, sizeof(why))) {
        fprintf(stderr, "compare_runs: %s\n", why);
        rc = 2;
    }
    if (rc)
        fprintf(stderr, "compare_runs: --set %s %s: failed\n", path, name);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--set"))
        return set_dataset(argv[2], argv[3], atof(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "--values"))
        return print_values(argv[2], argv[3]);
    if (argc == 5 && !strcmp(argv[1], "--tensors"))
        return compare_tensors(argv[2], argv[3], atof(argv[4]));
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: compare_runs A.h5 B.h5 RTOL [GRAD_RTOL]\n"
                        "       compare_runs --tensors A.h5 B.h5 TOL\n");
        return 2;
    }
    run_record *a = NULL, *b = NULL;
    char err[512];
    if (run_record_read(&a, argv[1], false, err, sizeof(err)) ||
        run_record_read(&b, argv[2], false, err, sizeof(err))) {
        fprintf(stderr, "compare_runs: %s\n", err);
        return 2;
    }
    double tol = atof(argv[3]), gtol = argc == 5 ? atof(argv[4]) : tol;
    bool grads = argc != 5 || strcmp(argv[4], "none");
    int ok = a->metrics.n_rows > 0;
    const char *mcols[] = { "loss", "ce", "grad_norm" };
    for (int i = 0; i < 3; i++) {
        double w = worst_col(&a->metrics, &b->metrics, mcols[i], &ok);
        printf("metrics/%-10s %ld steps, max relative difference %.3g%s\n", mcols[i],
               a->metrics.n_rows, w, i == 2 && !grads ? " (not compared)" : "");
        ok &= w <= (i == 2 ? gtol : tol) || (i == 2 && !grads);
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
