#include "core/io/h5util.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void h5_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

hid_t h5_lcpl(void)
{
    hid_t p = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(p, 1);
    return p;
}

static int write_any(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                     const void *data, int ndim, const hsize_t *dims)
{
    int rc = -EIO;
    hid_t space = H5Screate_simple(ndim, dims, NULL);
    hid_t lcpl = h5_lcpl();
    hid_t ds = H5Dcreate2(loc, name, file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (ds >= 0 && H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0)
        rc = 0;
    if (ds >= 0)
        H5Dclose(ds);
    H5Pclose(lcpl);
    H5Sclose(space);
    return rc;
}

int h5_write_floats(hid_t loc, const char *name, const float *data, int ndim, const hsize_t *dims)
{
    return write_any(loc, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data, ndim, dims);
}

int h5_write_doubles(hid_t loc, const char *name, const double *data, hsize_t n)
{
    return write_any(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data, 1, &n);
}

int h5_write_longs(hid_t loc, const char *name, const long *data, hsize_t n)
{
    return write_any(loc, name, H5T_STD_I64LE, H5T_NATIVE_LONG, data, 1, &n);
}

int h5_write_bytes(hid_t loc, const char *name, const uint8_t *data, int ndim, const hsize_t *dims)
{
    return write_any(loc, name, H5T_STD_U8LE, H5T_NATIVE_UINT8, data, ndim, dims);
}

int h5_write_ints(hid_t loc, const char *name, const int32_t *data, int ndim, const hsize_t *dims)
{
    return write_any(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, data, ndim, dims);
}

int h5_read_floats(hid_t loc, const char *name, float *data, int ndim, const hsize_t *dims,
                   char *err, int err_len)
{
    int rc = -EINVAL;
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (ds < 0) {
        snprintf(err, (size_t)err_len, "dataset '%s' is missing", name);
        return -ENOENT;
    }
    hid_t space = H5Dget_space(ds);
    hid_t type = H5Dget_type(ds);
    hsize_t got[8];
    int nd = H5Sget_simple_extent_ndims(space);
    if (H5Tget_class(type) != H5T_FLOAT) {
        snprintf(err, (size_t)err_len, "dataset '%s' is not floating point", name);
        goto out;
    }
    if (nd != ndim || nd > 8) {
        snprintf(err, (size_t)err_len, "dataset '%s' has %d dimensions, expected %d", name, nd,
                 ndim);
        goto out;
    }
    H5Sget_simple_extent_dims(space, got, NULL);
    for (int i = 0; i < nd; i++) {
        if (got[i] != dims[i]) {
            snprintf(err, (size_t)err_len,
                     "dataset '%s' has extent %llu in dimension %d, expected %llu", name,
                     (unsigned long long)got[i], i, (unsigned long long)dims[i]);
            goto out;
        }
    }
    if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
        snprintf(err, (size_t)err_len, "dataset '%s' cannot be read", name);
        rc = -EIO;
        goto out;
    }
    rc = 0;
out:
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(ds);
    return rc;
}

static int read_1d(hid_t loc, const char *name, hid_t mem_type, size_t size, void **out,
                   hsize_t *n)
{
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (ds < 0)
        return -ENOENT;
    int rc = -EINVAL;
    hid_t space = H5Dget_space(ds);
    if (H5Sget_simple_extent_ndims(space) == 1) {
        H5Sget_simple_extent_dims(space, n, NULL);
        *out = malloc((size_t)(*n ? *n : 1) * size);
        if (!*out)
            rc = -ENOMEM;
        else if (H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0) {
            free(*out);
            *out = NULL;
            rc = -EIO;
        } else
            rc = 0;
    }
    H5Sclose(space);
    H5Dclose(ds);
    return rc;
}

int h5_read_doubles_1d(hid_t loc, const char *name, double **out, hsize_t *n)
{
    return read_1d(loc, name, H5T_NATIVE_DOUBLE, sizeof(double), (void **)out, n);
}

int h5_read_longs_1d(hid_t loc, const char *name, long **out, hsize_t *n)
{
    return read_1d(loc, name, H5T_NATIVE_LONG, sizeof(long), (void **)out, n);
}

static int attr_write(hid_t loc, const char *name, hid_t type, hid_t mem, const void *v)
{
    if (H5Aexists(loc, name) > 0)
        H5Adelete(loc, name);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (a >= 0 && H5Awrite(a, mem, v) >= 0) ? 0 : -EIO;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(space);
    return rc;
}

int h5_attr_string(hid_t loc, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(value) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    H5Tset_cset(t, H5T_CSET_UTF8);
    int rc = attr_write(loc, name, t, t, value);
    H5Tclose(t);
    return rc;
}

int h5_attr_double(hid_t loc, const char *name, double value)
{
    return attr_write(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

int h5_attr_long(hid_t loc, const char *name, long value)
{
    return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_LONG, &value);
}

char *h5_attr_read_string(hid_t loc, const char *name)
{
    if (H5Aexists(loc, name) <= 0)
        return NULL;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    char *s = NULL;
    if (H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t)) {
        size_t n = H5Tget_size(t);
        s = calloc(n + 1, 1);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, n);
        H5Tset_cset(mt, H5Tget_cset(t)); /* ASCII and UTF-8 do not convert */
        if (s && H5Aread(a, mt, s) < 0) {
            free(s);
            s = NULL;
        }
        H5Tclose(mt);
    }
    H5Tclose(t);
    H5Aclose(a);
    return s;
}

static int attr_read(hid_t loc, const char *name, hid_t mem, void *v)
{
    if (H5Aexists(loc, name) <= 0)
        return -ENOENT;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    int rc = H5Aread(a, mem, v) >= 0 ? 0 : -EIO;
    H5Aclose(a);
    return rc;
}

int h5_attr_read_long(hid_t loc, const char *name, long *value)
{
    return attr_read(loc, name, H5T_NATIVE_LONG, value);
}

int h5_attr_read_double(hid_t loc, const char *name, double *value)
{
    return attr_read(loc, name, H5T_NATIVE_DOUBLE, value);
}

hid_t h5_create(const char *path)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    H5Pset_userblock(fcpl, H5_USERBLOCK);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fapl);
    H5Pclose(fcpl);
    return f;
}

uint32_t h5_crc32(uint32_t crc, const void *data, size_t n)
{
    /* CRC-32 (IEEE 802.3, reflected 0xEDB88320), bit by bit per byte is slow;
     * a nibble table keeps it short and fast enough for checkpoints */
    static const uint32_t t[16] = {
        0x00000000, 0x1db71064, 0x3b6e20c8, 0x26d930ac, 0x76dc4190, 0x6b6b51f4,
        0x4db26158, 0x5005713c, 0xedb88320, 0xf00f9344, 0xd6d6a3e8, 0xcb61b38c,
        0x9b64c2b0, 0x86d3d2d4, 0xa00ae278, 0xbdbdf21c,
    };
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ t[crc & 15];
        crc = (crc >> 4) ^ t[crc & 15];
    }
    return ~crc;
}

/* CRC-32 and length of the bytes after the user block. */
static int body_crc(FILE *f, uint32_t *crc, uint64_t *len)
{
    uint8_t buf[1 << 16];
    size_t n;
    *crc = 0;
    *len = 0;
    if (fseek(f, H5_USERBLOCK, SEEK_SET))
        return -EIO;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        *crc = h5_crc32(*crc, buf, n);
        *len += n;
    }
    return ferror(f) ? -EIO : 0;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int h5_seal(const char *path)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        return -errno;
    uint32_t crc;
    uint64_t len;
    int rc = body_crc(f, &crc, &len);
    uint8_t head[32] = { 0 };
    memcpy(head, H5_MAGIC, 8);
    put_u64(head + 8, len);
    put_u64(head + 16, crc);
    if (!rc && (fseek(f, 0, SEEK_SET) || fwrite(head, 1, sizeof(head), f) != sizeof(head)))
        rc = -EIO;
    if (fclose(f) && !rc)
        rc = -EIO;
    return rc;
}

hid_t h5_open_checked(const char *path, char *err, int err_len)
{
    h5_quiet();
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    uint8_t head[32];
    uint32_t crc = 0;
    uint64_t len = 0;
    size_t got = fread(head, 1, sizeof(head), f);
    int rc = got == sizeof(head) && !memcmp(head, H5_MAGIC, 8) ? body_crc(f, &crc, &len) : -1;
    fclose(f);
    if (rc) {
        bool hdf5 = H5Fis_hdf5(path) > 0;
        snprintf(err, (size_t)err_len, "%s: %s", path,
                 hdf5 ? "an HDF5 file, but not one mode wrote (no checksum block)"
                      : "not an HDF5 file written by mode");
        return -1;
    }
    if (len != get_u64(head + 8)) {
        snprintf(err, (size_t)err_len, "%s: truncated or extended: %llu bytes after the header, "
                 "%llu written", path, (unsigned long long)len,
                 (unsigned long long)get_u64(head + 8));
        return -1;
    }
    if (crc != (uint32_t)get_u64(head + 16)) {
        snprintf(err, (size_t)err_len, "%s: corrupted (CRC-32 %08x, %08x written)", path,
                 (unsigned)crc, (unsigned)get_u64(head + 16));
        return -1;
    }
    hid_t h = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (h < 0)
        snprintf(err, (size_t)err_len, "%s: HDF5 cannot open it", path);
    return h;
}

int h5_tmp_path(char *buf, size_t len, const char *path)
{
    int n = snprintf(buf, len, "%s.tmp", path);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int h5_commit_tmp(const char *tmp, const char *path)
{
    /* The bytes must be on disk before the rename makes them the file, and
     * the rename must be on disk before we call it done. */
    int fd = open(tmp, O_RDONLY);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd);
    close(fd);
    if (rc)
        return -errno;
    if (rename(tmp, path))
        return -errno;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int h5_save_atomic(const char *path, h5_writer write, const void *ctx, const char *what,
                   char *err, int err_len)
{
    char tmp[4096];
    if (h5_tmp_path(tmp, sizeof(tmp), path)) {
        snprintf(err, (size_t)err_len, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    h5_quiet();
    hid_t f = h5_create(tmp);
    if (f < 0) {
        snprintf(err, (size_t)err_len,
                 "%s: cannot create it (is the folder writable, the disk full?)", tmp);
        return -EIO;
    }
    int rc = write(f, ctx);
    if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0)
        rc = -EIO;
    if (H5Fclose(f) < 0)
        rc = -EIO;
    if (!rc)
        rc = h5_seal(tmp);
    if (!rc)
        rc = h5_commit_tmp(tmp, path);
    if (rc) {
        remove(tmp);
        snprintf(err, (size_t)err_len, "%s: writing the %s failed (disk full?)", path, what);
    }
    return rc;
}
