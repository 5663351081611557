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

/* Atomic file replacement: write to "<path>.tmp", fsync, rename over path. */
int h5_tmp_path(char *buf, size_t len, const char *path);
int h5_commit_tmp(const char *tmp, const char *path);

#endif
