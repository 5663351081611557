/* Small HDF5 helpers shared by the checkpoint and run-file code.  Every
 * function returns 0 or a negative code; none prints (HDF5's own error stack
 * printing is switched off by h5_quiet()). */
#ifndef MODE_CORE_IO_H5UTIL_H
#define MODE_CORE_IO_H5UTIL_H

#include "core/util/file.h"

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void h5_quiet(void);

/* Groups along a path "a/b/c" are created as needed (link creation property). */
hid_t h5_lcpl(void);

/* Read a float dataset whose shape must be exactly dims (else -EINVAL and a
 * description of the mismatch in err), every element finite (else -EINVAL
 * naming the dataset, the value and its element). */
int h5_read_floats(hid_t loc, const char *name, float *data, int ndim, const hsize_t *dims,
                   char *err, int err_len);
/* Rows [row0, row0 + rows) of dimension 0 of a float dataset whose whole
 * shape must be dims (a rank's experts of an [E][...] tensor). */
int h5_read_floats_rows(hid_t loc, const char *name, float *data, int ndim, const hsize_t *dims,
                        hsize_t row0, hsize_t rows, char *err, int err_len);

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

/* Every HDF5 file mode reads is opened here (read-only): path is first
 * opened through file_open_regular (core/util/file.h), so a FIFO, a device
 * or a folder is refused at once, never handed to HDF5's own open, which
 * would block on a FIFO.  The seal is not checked (h5_open_checked does
 * both).  A negative id with err naming path on failure. */
hid_t h5_open_input(const char *path, char *err, int err_len);
/* Reading a file that another process may be replacing (a live run
 * rewrites its checkpoint and run file by rename): the file is opened ONCE,
 * its seal is checked through that descriptor, and the file HDF5 then opens
 * (HDF5 takes names, not descriptors) must be the same one (device and
 * inode), else it was replaced between the two and the reader opens it
 * again: the check and the read see one version.  Checking through one
 * open and reading through another said "corrupted (CRC-32 ...)" of a file
 * that was whole, 8 times in 40. */
#define H5_OPEN_TRIES 20
typedef struct h5_in {
    char path[MODE_PATH_MAX];
    int fd;
    uint8_t head[32];   /* the user block's first bytes: magic, body length, CRC-32 */
    uint64_t body;      /* bytes after the user block, as opened */
} h5_in;
/* Open path (a regular file, without blocking) and read its seal; err names
 * it when missing or unreadable.  h5_in_close in any case. */
int h5_in_open(h5_in *in, const char *path, char *err, int err_len);
void h5_in_close(h5_in *in);
/* "PATH=N bytes sealed with CRC-32 X": what was opened (ranks compare it). */
void h5_in_seal_text(const h5_in *in, char *out, int out_len);
/* Part p of parts of the body's CRC-32, through the descriptor: *crc over
 * *len bytes (parts combined in order with h5_crc32_combine). */
int h5_in_part_crc(const h5_in *in, int part, int parts, uint32_t *crc, uint64_t *len);
/* The seal against the body's CRC: 0, or -EINVAL and err saying what is
 * wrong (not HDF5, not written by mode, truncated, corrupted). */
int h5_in_seal_matches(const h5_in *in, uint32_t crc, char *err, int err_len);
/* Both: the whole body's CRC and the seal (one process). */
int h5_in_check(const h5_in *in, char *err, int err_len);
/* HDF5's handle on the same file (read-only), or a negative id and err;
 * *replaced: the path is another file now (open it again). */
hid_t h5_in_hdf5(const h5_in *in, bool *replaced, char *err, int err_len);

/* Seal path again as it is now (its body's length and CRC-32 in the user
 * block): for tools that edit a file mode wrote in place, the tests' way
 * of making a file whose checksum holds and whose numbers are wrong. */
int h5_reseal(const char *path, char *err, int err_len);

/* Open a file mode wrote, read-only, after checking its seal, through one
 * open (h5_in; opened again, up to H5_OPEN_TRIES times, while it is being
 * replaced).  On failure returns a negative id and says what is wrong
 * (missing, not HDF5, not written by mode, truncated, corrupted) in err,
 * naming path. */
hid_t h5_open_checked(const char *path, char *err, int err_len);
/* CRC-32 (IEEE 802.3) of n bytes, continuing crc (0 to start). */
uint32_t h5_crc32(uint32_t crc, const void *data, size_t n);
/* The CRC-32 of A followed by B, from crc(A), crc(B) and B's length. */
uint32_t h5_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* Writing files: HDF5 lays them out, mode fills them.
 *
 * HDF5 1.10 does not survive a full disk: after a failed write its file
 * close fails, and at exit the library tries again and crashes (seen:
 * H5F__close_cb under MPI_Finalize).  So HDF5 never writes a file's data
 * here.  h5_out creates "<path>.tmp" with every dataset contiguous and its
 * space allocated but not filled, attributes written; closing it writes
 * only the metadata (kilobytes) into a file checked beforehand to have room
 * for the whole.  Then the file's full size is reserved (posix_fallocate:
 * a full disk is an error code here, not a crash later), the data written
 * with pwrite at each dataset's offset, by one process or by many (each
 * its own bytes: sharded checkpoints), each piece's CRC-32 taken as it is
 * written.  Sealing takes the CRC of the metadata between the pieces,
 * combines everything in file order into the CRC-32 of the bytes after the
 * user block, writes the user block, fsyncs, and the rename makes the file.
 * A crash at any moment leaves the previous file whole.  Files must be
 * little-endian (x86-64): data bytes are written as they are in memory. */
typedef struct h5_piece {
    uint64_t off, len; /* bytes [off, off + len) of the file */
    uint32_t crc;
} h5_piece;

typedef struct h5_out h5_out;

/* Start path: checks that its folder has room for about data_bytes (plus
 * the metadata), creates "<path>.tmp" in HDF5.  err says what failed. */
int h5_out_create(h5_out **out, const char *path, uint64_t data_bytes, char *err, int err_len);
/* The open HDF5 file, for groups and attributes (until h5_out_layout). */
hid_t h5_out_file(const h5_out *o);
/* A contiguous dataset of file_type (one of the little-endian H5T_IEEE_*LE
 * and H5T_STD_*LE types) and shape dims; returns its index (>= 0) for the
 * writes, or a negative code.  attrs of a dataset: h5_out_dataset_id(). */
long h5_out_dataset(h5_out *o, const char *name, hid_t file_type, int ndim, const hsize_t *dims);
/* An open id of dataset i, for its attributes (close it with H5Dclose). */
hid_t h5_out_dataset_id(const h5_out *o, long i);
/* Close the HDF5 side (metadata written), reserve the whole file. */
int h5_out_layout(h5_out *o, char *err, int err_len);
/* Where dataset i starts in the file and its bytes (after h5_out_layout). */
uint64_t h5_out_offset(const h5_out *o, long i);
uint64_t h5_out_bytes(const h5_out *o, long i);
/* bytes of data into dataset i from byte at of it (pieces may be written
 * in any order; each is recorded with its CRC). */
int h5_out_write(h5_out *o, long i, uint64_t at, const void *data, uint64_t bytes);
/* Writing into a file another process laid out: pwrite at offset, the
 * piece's CRC into piece (fd open on the .tmp file). */
int h5_write_piece(int fd, uint64_t off, const void *data, uint64_t bytes, h5_piece *piece);
/* Seal: the CRC of every byte after the user block from the pieces written
 * here and the n_more written elsewhere (read back only where no piece
 * covers: the metadata), the user block, fsync; then the rename.  Any
 * failure removes the temporary. */
int h5_out_finish(h5_out **o, const h5_piece *more, int n_more, char *err, int err_len);
/* Give up: remove the temporary, free. */
void h5_out_abandon(h5_out **o);


#endif
