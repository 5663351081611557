/* The run file (HDF5), kept in memory on rank 0 and rewritten whole and
 * atomically at every flush, so a crash at any moment leaves the previous
 * complete file.  Layout (docs/hdf5.md):
 *   /            attribute config (resolved INI text)
 *   /provenance  attributes: version, commit, modified, openblas, mpi, hdf5,
 *                cpu, ranks, blas_threads, command_line, started, bf16_kernel
 *   /metrics/<column>   one value per training step
 *   /eval/<column>      one value per evaluation
 *   other datasets added by kinds (routing records, expert statistics). */
#ifndef MODE_CORE_IO_RUNFILE_H
#define MODE_CORE_IO_RUNFILE_H

#include <stdint.h>

/* A table of double columns, one row per step; column 0 is "step". */
typedef struct run_table {
    char group[32];
    int n_cols;
    const char *const *cols;
    double *rows; /* [n_rows][n_cols] */
    long n_rows, cap;
} run_table;

typedef struct run_blob {
    char path[160];
    int type;           /* RUN_BLOB_FLOAT, RUN_BLOB_INT32, RUN_BLOB_UINT8 */
    int ndim;
    unsigned long long dims[4];
    void *data;
    long step;          /* the step it belongs to (dropped on resume past it) */
} run_blob;
enum { RUN_BLOB_FLOAT, RUN_BLOB_INT32, RUN_BLOB_UINT8 };

typedef struct provenance {
    char version[32], commit[64], openblas[160], mpi[160], hdf5[32], cpu[160];
    int modified, ranks, blas_threads;
    char command_line[1024], started[64];
    char bf16_kernel[16]; /* the path of bf16 products (bf16_path_name) */
} provenance;

typedef struct run_record {
    char *config;
    provenance prov;
    run_table metrics, eval;
    run_table *extra;   /* more tables, e.g. per-layer routing statistics */
    int n_extra;
    run_blob *blobs;
    int n_blobs, cap_blobs;
} run_record;

extern const char *const run_metric_cols[];
extern const int run_metric_count;
extern const char *const run_eval_cols[];
extern const int run_eval_count;

int build_run_record(run_record **out, const char *config_text);
void free_run_record(run_record **r);
/* Add a table under group (e.g. "layer_stats/3") with columns cols[0..n)
 * (cols[0] must be "step"; the strings must outlive the record).  Returns
 * its index in r->extra, or a negative code. */
int run_record_add_table(run_record *r, const char *group, const char *const *cols, int n);
/* Append one row (values in the order of the table's columns). */
int run_table_append(run_table *t, const double *row);
/* Add a dataset (copied). */
int run_record_add_blob(run_record *r, const char *path, int type, int ndim,
                        const unsigned long long *dims, const void *data, long step);
/* Drop every row and blob of step >= step (resume). */
void run_record_truncate(run_record *r, long step);

int run_record_write(const run_record *r, const char *path, char *err, int err_len);
/* Read a run file back: metrics, eval, every table r already has (by group
 * name; all must exist), and every other dataset as a blob.  Used by resume
 * on a record built like the original. */
int run_record_load(run_record *r, const char *path, char *err, int err_len);
/* A record with metrics and eval and the file's config (build + load). */
int run_record_read(run_record **out, const char *path, char *err, int err_len);

/* Fill prov from the libraries, /proc/cpuinfo and the build. */
void provenance_collect(provenance *p, int ranks, int blas_threads, int argc, char **argv);

#endif
