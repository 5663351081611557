/* safetensors, the field's checkpoint format (docs/export.md): an 8-byte
 * little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
 *    "__metadata__": {"KEY": "VALUE", ...}}
 * then the data; offsets are relative to the data's start, and the tensors
 * tile the data exactly (no hole, no overlap, nothing past the end).
 *
 * The reader is strict: the header is parsed by a JSON parser of our own
 * that accepts only this shape (an unknown key, a duplicate name, a number
 * that is not a non-negative integer, trailing bytes other than spaces are
 * refused), and every refusal names the file and the tensor.  The file is
 * opened once and every byte is read through that descriptor, so a file
 * replaced by rename meanwhile is never mixed with its successor. */
#ifndef MODE_CORE_IO_SAFETENSORS_H
#define MODE_CORE_IO_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#define ST_MAX_DIMS 8
/* The longest header accepted (the format's own readers take 100 MB). */
#define ST_MAX_HEADER (100u << 20)

typedef struct st_tensor {
    char *name;
    char dtype[8];       /* "F32", "BF16", ... (one of the format's names) */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets in the data */
} st_tensor;

typedef struct st_file {
    char *path;
    int fd;
    uint64_t size;       /* of the whole file, as opened */
    uint64_t data_start; /* 8 + N */
    uint64_t digest;     /* fnv1a64 of every byte of the file */
    int n;               /* tensors */
    st_tensor *t;
    int n_meta;
    char **meta_key, **meta_val;
} st_file;

/* Open and check path: the header parsed and every tensor's place checked
 * (err names the file and the tensor: "past the end", "overlaps", "a hole
 * before", "dtype F32 of shape [2][3] takes 24 bytes, its offsets 20");
 * the whole file is read once for its digest.  st_close in any case. */
int st_open(st_file **f, const char *path, char *err, int err_len);
void st_close(st_file **f);
/* Whether the file at path looks like safetensors (by its name, or by a
 * header length followed by '{'). */
int st_is_safetensors(const char *path);
const st_tensor *st_find(const st_file *f, const char *name);
/* The value of a __metadata__ key, or NULL. */
const char *st_meta(const st_file *f, const char *key);
/* Rows [row0, row0 + rows) along the first dimension of tensor name into
 * out, which must be F32 of exactly ndim dims shape: err names the tensor
 * and what differs (missing, dtype, shape). */
int st_read_f32(const st_file *f, const char *name, float *out, int ndim, const int64_t *shape,
                int64_t row0, int64_t rows, char *err, int err_len);

/* Writing: tensors in the order given, laid out one after the other, all
 * F32; the metadata's keys and values (n_meta pairs); onto o (an
 * out_file's stream: the caller commits it whole or not at all).  0, or
 * -EIO / -ENOMEM. */
typedef struct st_out {
    const char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const float *data;
} st_out;
int st_write(FILE *o, const st_out *t, int n, const char *const *meta_key,
             const char *const *meta_val, int n_meta);

/* s as a JSON string (quoted, escaped) on o: what the header's writer uses,
 * for the files written beside it. */
void st_json_string(FILE *o, const char *s);

#endif
