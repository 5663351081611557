/* The run record (HDF5, docs/hdf5.md): config, provenance, per-step
 * metrics, evaluations, per-layer statistics and routing records.
 *
 * Written in pieces, each once, so that the bytes written over a run grow
 * with its length (not with its square) and rank 0 holds only what is not
 * yet written:
 *   <dir>/run.h5                       the config, provenance (with the bf16
 *                                      path, bf16_kernel) and the arrays
 *                                      fixed for the run (routing windows);
 *   <dir>/records/step_NNNNNNNN.h5     at every checkpoint, the rows and
 *                                      records of the steps since the last;
 * and when the run ends, the pieces are gathered into run.h5 (one
 * self-contained file, the layout of docs/hdf5.md) and removed.  Every
 * piece is written atomically (h5util.h, h5_out), so a crash at any moment
 * leaves whole files only; run.h5's attribute records_through says which
 * pieces it already holds.  Readers (run_reader) see the same record in
 * every state: run.h5, then the pieces newer than it, tables concatenated.
 * Each piece says which steps it follows (attribute from_step): a reader
 * refuses records with a hole (a piece missing or unreadable), naming the
 * piece and the steps it held. */
#ifndef MODE_CORE_IO_RUNFILE_H
#define MODE_CORE_IO_RUNFILE_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RUN_COL_LEN 48

/* A table of double columns, one row per step; column 0 is "step". */
typedef struct run_table {
    char group[64];
    int n_cols;
    char (*cols)[RUN_COL_LEN];
    double *rows; /* [n_rows][n_cols] */
    long n_rows, cap;
} run_table;

typedef struct run_blob {
    char path[160];
    int type;           /* RUN_BLOB_FLOAT, _INT32, _UINT8, _INT64, _DOUBLE */
    int ndim;
    unsigned long long dims[4];
    void *data;
    long step;          /* the step it belongs to (its "step" attribute) */
} run_blob;
enum { RUN_BLOB_FLOAT, RUN_BLOB_INT32, RUN_BLOB_UINT8, RUN_BLOB_INT64, RUN_BLOB_DOUBLE };

typedef struct provenance {
    char version[32], commit[64], openblas[160], mpi[160], hdf5[32], cpu[160];
    int modified, ranks, blas_threads;
    char command_line[1024], started[64];
    char init_from[1024]; /* the checkpoint a new run's parameters came from, or "" */
    char bf16_kernel[16]; /* the path of bf16 products (bf16_path_name) */
    char data[2048];      /* the fingerprint of the data read (dataset_fingerprint), or "" */
} provenance;

typedef struct run_record {
    char *config;
    provenance prov;
    run_table metrics, eval;
    run_table *extra;   /* more tables, e.g. per-layer routing statistics */
    int n_extra;
    run_blob *blobs;
    int n_blobs, cap_blobs;
    long flushed_through; /* the step the records written so far reach (the last
                             piece's, or the resumed checkpoint's): the next
                             piece holds the steps after it */
} run_record;

/* The metrics table's columns, one row per training step (docs/hdf5.md):
 * a row is double[RUN_METRIC_COUNT] indexed by these, and run_metric_cols
 * names them in the same order (runfile.c asserts the count). */
typedef enum run_metric_col {
    RUN_METRIC_STEP, RUN_METRIC_LOSS, RUN_METRIC_CE, RUN_METRIC_AUX_LOSS,
    RUN_METRIC_SIDE_LOSS, RUN_METRIC_LR, RUN_METRIC_GRAD_NORM, RUN_METRIC_TOKENS_PER_S,
    RUN_METRIC_TRAIN_FLOPS, RUN_METRIC_TRAIN_FLOPS_EXECUTED, RUN_METRIC_WALL_S,
    RUN_METRIC_COMM_BYTES, RUN_METRIC_COMM_S, RUN_METRIC_COMPUTE_S, RUN_METRIC_SKIPPED,
    RUN_METRIC_COUNT
} run_metric_col;
/* The evaluation table's columns, one row per held-out evaluation. */
typedef enum run_eval_col {
    RUN_EVAL_STEP, RUN_EVAL_LOSS_TOPK, RUN_EVAL_LOSS_CAUSAL, RUN_EVAL_SE_TOPK,
    RUN_EVAL_SE_CAUSAL, RUN_EVAL_WINDOWS, RUN_EVAL_BPB_TOPK, RUN_EVAL_BPB_CAUSAL,
    RUN_EVAL_COUNT
} run_eval_col;

extern const char *const run_metric_cols[RUN_METRIC_COUNT];
extern const int run_metric_count;
extern const char *const run_eval_cols[RUN_EVAL_COUNT];
extern const int run_eval_count;

int build_run_record(run_record **out, const char *config_text);
void free_run_record(run_record **r);
/* Add a table under group (e.g. "layer_stats/3") with columns cols[0..n)
 * (cols[0] must be "step"; names are copied).  Returns its index in
 * r->extra, or a negative code. */
int run_record_add_table(run_record *r, const char *group, const char *const *cols, int n);
/* Append one row (values in the order of the table's columns). */
int run_table_append(run_table *t, const double *row);
/* The index of the column called name, or -1. */
int run_table_col(const run_table *t, const char *name);
/* Add a dataset (copied). */
int run_record_add_blob(run_record *r, const char *path, int type, int ndim,
                        const unsigned long long *dims, const void *data, long step);

/* ---- writing (rank 0) ---------------------------------------------------- */

/* run.h5 anew: config, provenance and the blobs r holds now (the arrays
 * fixed for the run), which then leave r.  Pieces already written stay. */
int run_record_write_header(run_record *r, const char *run_h5, char *err, int err_len);
/* The rows and blobs r holds into the piece of step (records/step_N.h5
 * beside run_h5); r is then empty (its tables keep their columns).
 * Nothing is written when r holds nothing. */
int run_record_flush(run_record *r, const char *run_h5, long step, char *err, int err_len);
/* Where the piece of step lies (records/step_NNNNNNNN.h5 beside run_h5). */
void run_record_piece_path(char *buf, size_t len, const char *run_h5, long step);
/* Rows of steps up to step that were made after its piece was written (an
 * evaluation a signal cut short, made again on resume) into a piece of
 * their own, records/step_NNNNNNNN.late.h5, read after step's piece. */
int run_record_flush_late(run_record *r, const char *run_h5, long step, char *err,
                          int err_len);
/* Gather run.h5 and its pieces into one run.h5, then remove the pieces. */
int run_record_finish(const char *run_h5, char *err, int err_len);
/* Resuming at step: remove the pieces of later steps (written before a
 * crash or a stop that the checkpoint does not cover).  Refused when run.h5
 * already holds later steps. */
int run_record_rewind(const char *run_h5, long step, char *err, int err_len);
/* Remove run.h5's pieces (a new run in the folder). */
int run_record_remove_pieces(const char *run_h5);

/* ---- reading --------------------------------------------------------------- */

/* run.h5 and the pieces it does not hold yet, every file's seal checked;
 * datasets are read on demand. */
typedef struct run_reader run_reader;
int open_run_reader(run_reader **out, const char *run_h5, char *err, int err_len);
void close_run_reader(run_reader **r);
const char *run_reader_config(const run_reader *r);
/* The files: run.h5 first, then the pieces in step order. */
int run_reader_files(const run_reader *r);
/* The last step the records reach: the last piece's step, or what run.h5
 * holds (records_through) when no piece is newer. */
long run_reader_last_step(const run_reader *r);
/* Whether any file holds a dataset at path. */
bool run_reader_has(const run_reader *r, const char *path);
/* A 1-D column (e.g. "metrics/wall_s"), every file's part in order, as
 * doubles (malloc'd into *out); -ENOENT when absent. */
int run_reader_column(run_reader *r, const char *path, double **out, long *n);
/* A whole dataset of up to 4 dimensions as mem_type (elem bytes each) into
 * a malloc'd array; its step attribute into *step when not NULL (0 when
 * it has none); -ENOENT when absent. */
int run_reader_array(run_reader *r, const char *path, hid_t mem_type, size_t elem, void **out,
                     int *ndim, unsigned long long *dims, long *step);
/* The distinct names directly below group ("routing" -> "tokens",
 * "step_000100", ...), sorted; *names is malloc'd (free each and it). */
int run_reader_children(const run_reader *r, const char *group, char ***names, int *n);

/* A whole record in memory: config, every table (metrics, eval, then the
 * others in r->extra), and, with with_blobs, every other dataset. */
int run_record_read(run_record **out, const char *path, bool with_blobs, char *err,
                    int err_len);

/* Fill prov from the libraries, /proc/cpuinfo and the build; bf16_kernel
 * is the caller's bf16 path (bf16_path_name), so that reading run files
 * links no kernel. */
void provenance_collect(provenance *p, int ranks, int blas_threads, const char *bf16_kernel,
                        int argc, char **argv);

#endif
