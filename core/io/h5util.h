/* Small HDF5 helpers shared by the checkpoint and run-file code.  Every
 * function returns 0 or a negative code; none prints (HDF5's own error stack
 * printing is switched off by h5_quiet()). */
#ifndef MODE_CORE_IO_H5UTIL_H
#define MODE_CORE_IO_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

void h5_quiet(void);

/* Groups along a path "a/b/c" are created as needed (link creation property). */
hid_t h5_lcpl(void);

int h5_write_floats(hid_t loc, const char *name, const float *data, int ndim,
                    const hsize_t *dims);
int h5_write_doubles(hid_t loc, const char *name, const double *data, hsize_t n);
int h5_write_longs(hid_t loc, const char *name, const long *data, hsize_t n);
int h5_write_bytes(hid_t loc, const char *name, const uint8_t *data, int ndim,
                   const hsize_t *dims);
int h5_write_ints(hid_t loc, const char *name, const int32_t *data, int ndim,
                  const hsize_t *dims);

/* Read a float dataset whose shape must be exactly dims (else -EINVAL and a
 * description of the mismatch in err). */
int h5_read_floats(hid_t loc, const char *name, float *data, int ndim, const hsize_t *dims,
                   char *err, int err_len);
/* Read a 1-D dataset of n values into a malloc'd array (*out), any length. */
int h5_read_doubles_1d(hid_t loc, const char *name, double **out, hsize_t *n);
int h5_read_longs_1d(hid_t loc, const char *name, long **out, hsize_t *n);

int h5_attr_string(hid_t loc, const char *name, const char *value);
int h5_attr_double(hid_t loc, const char *name, double value);
int h5_attr_long(hid_t loc, const char *name, long value);
/* malloc'd copy of a string attribute, or NULL. */
char *h5_attr_read_string(hid_t loc, const char *name);
int h5_attr_read_long(hid_t loc, const char *name, long *value);
int h5_attr_read_double(hid_t loc, const char *name, double *value);

/* Every file mode writes starts with a 512-byte HDF5 user block holding a
 * magic string, the file's length and the CRC-32 of everything after the
 * block.  HDF5 itself skips the block (h5dump, h5py and the rest read the
 * files as usual); mode checks it before handing a file to HDF5, so a
 * truncated or corrupted file is refused by a checksum instead of being
 * parsed by a library that is not hardened against malformed input. */
#define H5_USERBLOCK 512
#define H5_MAGIC "mode-h5\n"

/* A new file with the user block and checksummed metadata (HDF5 1.8
 * formats and later). */
hid_t h5_create(const char *path);
/* After H5Fclose: fill the user block of path (length and CRC-32). */
int h5_seal(const char *path);
/* Open a file mode wrote, read-only, after checking its seal.  On failure
 * returns a negative id and says what is wrong (missing, not HDF5, not
 * written by mode, truncated, corrupted) in err, naming path. */
hid_t h5_open_checked(const char *path, char *err, int err_len);
uint32_t h5_crc32(uint32_t crc, const void *data, size_t n);

/* Write a file atomically: write(f, ctx) fills a new sealed file at
 * "<path>.tmp", which is flushed, closed, sealed, fsync'ed and renamed over
 * path.  On any failure the temporary is removed, path is untouched, and err
 * says what failed (what: "checkpoint", "run file"). */
typedef int (*h5_writer)(hid_t f, const void *ctx);
int h5_save_atomic(const char *path, h5_writer write, const void *ctx, const char *what,
                   char *err, int err_len);

/* Atomic file replacement: write to "<path>.tmp", fsync, rename over path. */
int h5_tmp_path(char *buf, size_t len, const char *path);
int h5_commit_tmp(const char *tmp, const char *path);

#endif
