/* What the run file's three parts share (runfile.h is their interface):
 * runfile.c writes (the record in memory, run.h5's header, the pieces,
 * provenance), runfile_read.c reads (run_reader over run.h5 and its
 * pieces, run_record_read), runfile_gather.c gathers the pieces into one
 * run.h5 (run_record_finish).  Private to core/io. */
#ifndef MODE_CORE_IO_RUNFILE_PARTS_H
#define MODE_CORE_IO_RUNFILE_PARTS_H

#include "core/io/runfile.h"
#include "core/util/file.h"

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

#define PIECES_DIR "records"
#define THROUGH_ATTR "records_through"
#define FROM_ATTR "from_step"

/* One dataset of one file of the record, as the reader indexed it. */
typedef struct run_entry {
    char *path;
    int file;
    int type;       /* RUN_BLOB_*, or RUN_F64 */
    int ndim;
    unsigned long long dims[4];
} run_entry;
enum { RUN_F64 = RUN_BLOB_DOUBLE };

struct run_reader {
    char path[MODE_PATH_MAX];
    long last_step;     /* what the records reach */
    int n_files;
    char (*files)[MODE_PATH_MAX + 128];
    char *config;
    run_entry *e;       /* sorted by path, then file */
    long n_e, cap_e;
    hid_t *held;    /* [n_files] each file open once, for the reader's life */
};

/* ---- runfile.c ---- */
int rf_table_init(run_table *t, const char *group, const char *const *cols, int n);
void rf_table_free(run_table *t);
/* Bytes of one element of a RUN_BLOB_* type, and its type in the file. */
size_t rf_blob_elem(int type);
hid_t rf_blob_file_type(int type);
/* Pieces are known by codes 2 step + late: a late piece sorts after the
 * piece of its step. */
void rf_piece_path(char *buf, size_t len, const char *run_h5, long code);
int rf_list_pieces(const char *run_h5, long **codes, int *n);

/* ---- runfile_read.c ---- */
hid_t rf_entry_mem_type(int type);
/* File i of the reader, opened once; negative on failure. */
hid_t rf_reader_file(run_reader *r, int i);
int rf_read_entry(run_reader *r, const run_entry *e, hid_t mem_type, void *buf, long *step);
/* Whether e is a table's column (a 1-D dataset with a "step" sibling);
 * its group into group. */
bool rf_table_column(const run_reader *r, const run_entry *e, char *group, size_t len);

#endif
