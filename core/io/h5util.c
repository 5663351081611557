#include "core/io/h5util.h"

#include "core/util/file.h"
#include "core/util/outfile.h"
#include "core/util/finite.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

int h5_read_floats(hid_t loc, const char *name, float *data, int ndim, const hsize_t *dims,
                   char *err, int err_len)
{
    return h5_read_floats_rows(loc, name, data, ndim, dims, 0, ndim > 0 ? dims[0] : 1, err,
                               err_len);
}

int h5_read_floats_rows(hid_t loc, const char *name, float *data, int ndim, const hsize_t *dims,
                        hsize_t row0, hsize_t rows, char *err, int err_len)
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
    hid_t fspace = H5S_ALL, mspace = H5S_ALL;
    if (ndim > 0 && (row0 != 0 || rows != dims[0])) {
        hsize_t start[8] = { row0 }, count[8];
        for (int i = 0; i < nd; i++)
            count[i] = i ? dims[i] : rows;
        fspace = H5Scopy(space);
        mspace = H5Screate_simple(nd, count, NULL);
        if (row0 + rows > dims[0] ||
            H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0) {
            snprintf(err, (size_t)err_len, "dataset '%s': rows %llu to %llu do not exist", name,
                     (unsigned long long)row0, (unsigned long long)(row0 + rows));
            goto close_spaces;
        }
    }
    if (H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, data) < 0) {
        snprintf(err, (size_t)err_len, "dataset '%s' cannot be read", name);
        rc = -EIO;
        goto close_spaces;
    }
    /* a weight or a moment that is not finite poisons every result made
     * from it: refused here, naming the tensor, for every reader */
    size_t n = ndim > 0 ? (size_t)rows : 1;
    for (int i = 1; i < nd; i++)
        n *= (size_t)dims[i];
    long bad = first_nonfinite(data, n);
    if (bad >= 0) {
        snprintf(err, (size_t)err_len, "dataset '%s' holds a value that is not finite (%g at "
                 "element %ld%s): the file's numbers are unusable", name, (double)data[bad],
                 bad + (long)(ndim > 0 ? row0 * (n / (rows ? rows : 1)) : 0),
                 ndim > 0 && row0 ? " of the whole tensor" : "");
        goto close_spaces;
    }
    rc = 0;
close_spaces:
    if (fspace != H5S_ALL)
        H5Sclose(fspace);
    if (mspace != H5S_ALL)
        H5Sclose(mspace);
out:
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(ds);
    return rc;
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

/* A new file with the user block and checksummed metadata (HDF5 1.8
 * formats and later). */
static hid_t h5_create(const char *path)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    H5Pset_userblock(fcpl, H5_USERBLOCK);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fapl);
    H5Pclose(fcpl);
    return f;
}

/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), a byte at a time
 * through a table built on first use (I/O runs on the main thread). */
static uint32_t crc_table[256];
static bool crc_table_ready;

static void build_crc_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1u ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    crc_table_ready = true;
}

uint32_t h5_crc32(uint32_t crc, const void *data, size_t n)
{
    if (!crc_table_ready)
        build_crc_table();
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

/* The CRC register is linear over GF(2): appending len zero bytes to A is a
 * 32 x 32 bit matrix applied to crc(A), and crc(A B) = that of crc(A) xor
 * crc(B).  The matrix for len bytes is built by squaring the one-bit shift
 * (binary powers of len), so combining costs O(log len). */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1u)
            sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
    for (int i = 0; i < 32; i++)
        sq[i] = gf2_times(mat, mat[i]);
}

uint32_t h5_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    if (len_b == 0)
        return crc_a;
    uint32_t odd[32], even[32]; /* operators for an odd and an even power of two zero bits */
    odd[0] = 0xedb88320u;       /* one zero bit */
    for (int i = 1; i < 32; i++)
        odd[i] = 1u << (i - 1);
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    for (;;) {             /* then len_b bytes: 8, 16, 32, ... bits per square */
        gf2_square(even, odd);
        if (len_b & 1u)
            crc_a = gf2_times(even, crc_a);
        if (!(len_b >>= 1))
            break;
        gf2_square(odd, even);
        if (len_b & 1u)
            crc_a = gf2_times(odd, crc_a);
        if (!(len_b >>= 1))
            break;
    }
    return crc_a ^ crc_b;
}

/* CRC-32 of bytes [from, to) of the file, read back. */
static int crc_range(int fd, uint64_t from, uint64_t to, uint32_t *crc)
{
    static uint8_t buf[1 << 16];
    *crc = 0;
    while (from < to) {
        size_t want = to - from < sizeof(buf) ? (size_t)(to - from) : sizeof(buf);
        ssize_t got = pread(fd, buf, want, (off_t)from);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -EIO;
        *crc = h5_crc32(*crc, buf, (size_t)got);
        from += (uint64_t)got;
    }
    return 0;
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

int h5_in_open(h5_in *in, const char *path, char *err, int err_len)
{
    memset(in, 0, sizeof(*in));
    snprintf(in->path, sizeof(in->path), "%s", path);
    in->fd = file_open_regular(path, err, err_len);
    if (in->fd < 0)
        return in->fd;
    struct stat st;
    if (fstat(in->fd, &st)) {
        int e = errno;
        snprintf(err, (size_t)err_len, "%s: cannot stat it (%s)", path, strerror(e));
        return -e;
    }
    in->body = (uint64_t)st.st_size > H5_USERBLOCK ? (uint64_t)st.st_size - H5_USERBLOCK : 0;
    /* a short file keeps a zero head: h5_in_seal_matches says what it is */
    ssize_t got = pread(in->fd, in->head, sizeof(in->head), 0);
    if (got != (ssize_t)sizeof(in->head))
        memset(in->head, 0, sizeof(in->head));
    return 0;
}

void h5_in_close(h5_in *in)
{
    if (in->fd >= 0)
        close(in->fd);
    in->fd = -1;
}

void h5_in_seal_text(const h5_in *in, char *out, int out_len)
{
    snprintf(out, (size_t)out_len, "%s=%llu bytes sealed with CRC-32 %08x", in->path,
             (unsigned long long)in->body, (unsigned)get_u64(in->head + 16));
}

int h5_in_part_crc(const h5_in *in, int part, int parts, uint32_t *crc, uint64_t *len)
{
    uint64_t from = H5_USERBLOCK + in->body * (uint64_t)part / (uint64_t)parts;
    uint64_t to = H5_USERBLOCK + in->body * (uint64_t)(part + 1) / (uint64_t)parts;
    *len = to - from;
    return crc_range(in->fd, from, to, crc);
}

int h5_in_seal_matches(const h5_in *in, uint32_t crc, char *err, int err_len)
{
    const uint8_t *head = in->head;
    if (memcmp(head, H5_MAGIC, 8)) {
        bool hdf5 = H5Fis_hdf5(in->path) > 0;
        snprintf(err, (size_t)err_len, "%s: %s", in->path,
                 hdf5 ? "an HDF5 file, but not one mode wrote (no checksum block)"
                      : "not an HDF5 file written by mode");
        return -EINVAL;
    }
    if (in->body != get_u64(head + 8)) {
        snprintf(err, (size_t)err_len, "%s: truncated or extended: %llu bytes after the header, "
                 "%llu written", in->path, (unsigned long long)in->body,
                 (unsigned long long)get_u64(head + 8));
        return -EINVAL;
    }
    if (crc != (uint32_t)get_u64(head + 16)) {
        snprintf(err, (size_t)err_len, "%s: corrupted (CRC-32 %08x, %08x written)", in->path,
                 (unsigned)crc, (unsigned)get_u64(head + 16));
        return -EINVAL;
    }
    return 0;
}

int h5_in_check(const h5_in *in, char *err, int err_len)
{
    uint32_t crc = 0;
    uint64_t len = 0;
    if (!memcmp(in->head, H5_MAGIC, 8) && h5_in_part_crc(in, 0, 1, &crc, &len)) {
        snprintf(err, (size_t)err_len, "%s: cannot be read", in->path);
        return -EIO;
    }
    return h5_in_seal_matches(in, crc, err, err_len);
}

hid_t h5_in_hdf5(const h5_in *in, bool *replaced, char *err, int err_len)
{
    h5_quiet();
    *replaced = false;
    /* HDF5 opens names, not descriptors (and /proc/self/fd/N of a file
     * renamed over fails in its realpath): it opens the path, and the file
     * it holds must be the one checked, else a rename came between */
    hid_t h = H5Fopen(in->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int *hfd = NULL;
    struct stat a, b;
    if (h >= 0 && (H5Fget_vfd_handle(h, H5P_DEFAULT, (void **)&hfd) < 0 || !hfd ||
                   fstat(*hfd, &a) || fstat(in->fd, &b) || a.st_dev != b.st_dev ||
                   a.st_ino != b.st_ino)) {
        H5Fclose(h);
        h = -1;
        *replaced = true;
        snprintf(err, (size_t)err_len, "%s: replaced while it was being opened, again and "
                 "again (another process is rewriting it): read it again", in->path);
    } else if (h < 0) {
        /* gone or replaced by something else meanwhile, or not HDF5 after all */
        struct stat now, was;
        *replaced = stat(in->path, &now) || fstat(in->fd, &was) || now.st_ino != was.st_ino ||
                    now.st_dev != was.st_dev;
        snprintf(err, (size_t)err_len, "%s: HDF5 cannot open it%s", in->path,
                 *replaced ? " (another process replaced it meanwhile)" : "");
    }
    return h;
}

hid_t h5_open_input(const char *path, char *err, int err_len)
{
    h5_quiet();
    int fd = file_open_regular(path, err, err_len);
    if (fd < 0)
        return -1;
    close(fd);
    hid_t h = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (h < 0 && err && err_len > 0)
        snprintf(err, (size_t)err_len, "%s: HDF5 cannot open it", path);
    return h;
}

int h5_reseal(const char *path, char *err, int err_len)
{
    h5_in in;
    uint32_t crc = 0;
    uint64_t len = 0;
    int rc = h5_in_open(&in, path, err, err_len);
    if (!rc && (rc = h5_in_part_crc(&in, 0, 1, &crc, &len)))
        snprintf(err, (size_t)err_len, "%s: cannot be read (%s)", path, strerror(-rc));
    uint64_t body = in.body;
    h5_in_close(&in);
    uint8_t head[16];
    put_u64(head, body);
    put_u64(head + 8, crc);
    int fd = rc ? -1 : open(path, O_WRONLY | O_CLOEXEC);
    if (!rc && (fd < 0 || pwrite(fd, head, sizeof(head), 8) != (ssize_t)sizeof(head))) {
        rc = -errno;
        snprintf(err, (size_t)err_len, "%s: sealing it failed (%s)", path, strerror(errno));
    }
    if (fd >= 0 && close(fd) && !rc)
        rc = -EIO;
    return rc;
}

hid_t h5_open_checked(const char *path, char *err, int err_len)
{
    h5_in in;
    hid_t h = -1;
    bool replaced = true;
    for (int attempt = 0; h < 0 && replaced && attempt < H5_OPEN_TRIES; attempt++) {
        replaced = false;
        if (!h5_in_open(&in, path, err, err_len) && !h5_in_check(&in, err, err_len))
            h = h5_in_hdf5(&in, &replaced, err, err_len);
        h5_in_close(&in);
    }
    return h;
}

/* The temporary beside path (committed by out_replace: fsync, rename, the
 * folder fsync'd, core/util/outfile.h). */
static int h5_tmp_path(char *buf, size_t len, const char *path)
{
    int n = snprintf(buf, len, "%s.tmp", path);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* ---- h5_out: HDF5 lays a file out, mode fills it (h5util.h) ---------- */

struct h5_out {
    char path[MODE_PATH_MAX], tmp[MODE_PATH_MAX];
    hid_t f;
    long n, cap;
    hid_t *ids;             /* open datasets, until h5_out_layout */
    uint64_t *off, *bytes;  /* [n] where each dataset's data lies */
    uint64_t size;          /* of the whole file */
    int fd;
    h5_piece *pieces;
    int n_pieces, cap_pieces;
};

static const char *human_bytes(char *buf, size_t len, double b)
{
    const char *unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

int h5_out_create(h5_out **out, const char *path, uint64_t data_bytes, char *err, int err_len)
{
    *out = NULL;
    h5_out *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    o->f = -1;
    o->fd = -1;
    snprintf(o->path, sizeof(o->path), "%s", path);
    if (h5_tmp_path(o->tmp, sizeof(o->tmp), path)) {
        snprintf(err, (size_t)err_len, "%s: path too long", path);
        free(o);
        return -ENAMETOOLONG;
    }
    /* room for the data and the metadata (a few kilobytes per dataset,
     * bounded generously), so that HDF5's own metadata writes cannot meet
     * a full disk */
    char dir[MODE_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    struct statvfs vfs;
    uint64_t need = data_bytes + data_bytes / 64 + (1u << 20);
    if (!statvfs(dirname(dir), &vfs) && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        char a[32], b[32];
        snprintf(err, (size_t)err_len, "%s: no room to write it: it needs about %s, the disk has %s free "
                 "(disk full?)", path, human_bytes(a, sizeof(a), (double)need),
                 human_bytes(b, sizeof(b), (double)vfs.f_bavail * (double)vfs.f_frsize));
        free(o);
        return -ENOSPC;
    }
    h5_quiet();
    /* a temporary already there is what a crash left: never written into
     * (nor followed, were it a link) */
    unlink(o->tmp);
    o->f = h5_create(o->tmp);
    if (o->f < 0) {
        snprintf(err, (size_t)err_len, "%s: cannot create it (is the folder writable?)", o->tmp);
        free(o);
        return -EIO;
    }
    *out = o;
    return 0;
}

hid_t h5_out_file(const h5_out *o)
{
    return o->f;
}

long h5_out_dataset(h5_out *o, const char *name, hid_t file_type, int ndim, const hsize_t *dims)
{
    if (o->n == o->cap) {
        long cap = o->cap ? 2 * o->cap : 64;
        hid_t *ids = realloc(o->ids, (size_t)cap * sizeof(hid_t));
        if (ids)
            o->ids = ids;
        uint64_t *off = realloc(o->off, (size_t)cap * sizeof(uint64_t));
        if (off)
            o->off = off;
        uint64_t *bytes = realloc(o->bytes, (size_t)cap * sizeof(uint64_t));
        if (bytes)
            o->bytes = bytes;
        if (!ids || !off || !bytes)
            return -ENOMEM;
        o->cap = cap;
    }
    hid_t space = H5Screate_simple(ndim, dims, NULL);
    hid_t lcpl = h5_lcpl(), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    /* space now, so that its offset is known; never filled by HDF5 */
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hid_t ds = H5Dcreate2(o->f, name, file_type, space, lcpl, dcpl, H5P_DEFAULT);
    hssize_t points = H5Sget_simple_extent_npoints(space);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(space);
    if (ds < 0 || points < 0)
        return -EIO;
    o->ids[o->n] = ds;
    o->bytes[o->n] = (uint64_t)points * H5Tget_size(file_type);
    o->off[o->n] = 0;
    return o->n++;
}

hid_t h5_out_dataset_id(const h5_out *o, long i)
{
    return i >= 0 && i < o->n ? o->ids[i] : -1;
}

int h5_out_layout(h5_out *o, char *err, int err_len)
{
    int rc = 0;
    for (long i = 0; i < o->n; i++) {
        haddr_t a = o->bytes[i] ? H5Dget_offset(o->ids[i]) : 0;
        if (a == HADDR_UNDEF)
            rc = -EIO;
        o->off[i] = (uint64_t)a;
        H5Dclose(o->ids[i]);
    }
    if (H5Fclose(o->f) < 0)
        rc = -EIO;
    o->f = -1;
    struct stat st;
    if (!rc && stat(o->tmp, &st))
        rc = -errno;
    o->size = rc ? 0 : (uint64_t)st.st_size;
    for (long i = 0; !rc && i < o->n; i++)
        if (o->bytes[i] && (o->off[i] < H5_USERBLOCK || o->off[i] + o->bytes[i] > o->size))
            rc = -EIO; /* not the layout this writer relies on */
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: HDF5 could not lay the file out", o->tmp);
        return rc;
    }
    o->fd = open(o->tmp, O_RDWR);
    if (o->fd < 0) {
        snprintf(err, (size_t)err_len, "%s: cannot open: %s", o->tmp, strerror(errno));
        return -EIO;
    }
    /* every block of the file now, so that a full disk is an error here */
    rc = posix_fallocate(o->fd, 0, (off_t)o->size);
    if (rc) {
        char a[32];
        snprintf(err, (size_t)err_len, "%s: cannot reserve its %s: %s", o->path,
                 human_bytes(a, sizeof(a), (double)o->size), strerror(rc));
        return -rc;
    }
    return 0;
}

uint64_t h5_out_offset(const h5_out *o, long i)
{
    return o->off[i];
}

uint64_t h5_out_bytes(const h5_out *o, long i)
{
    return o->bytes[i];
}

int h5_write_piece(int fd, uint64_t off, const void *data, uint64_t bytes, h5_piece *piece)
{
    const uint8_t *p = data;
    piece->off = off;
    piece->len = bytes;
    piece->crc = h5_crc32(0, data, (size_t)bytes);
    while (bytes > 0) {
        ssize_t w = pwrite(fd, p, bytes > (1u << 30) ? (1u << 30) : (size_t)bytes, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        off += (uint64_t)w;
        bytes -= (uint64_t)w;
    }
    return 0;
}

int h5_out_write(h5_out *o, long i, uint64_t at, const void *data, uint64_t bytes)
{
    if (i < 0 || i >= o->n || at + bytes > o->bytes[i] || o->fd < 0)
        return -EINVAL;
    if (bytes == 0)
        return 0;
    if (o->n_pieces == o->cap_pieces) {
        int cap = o->cap_pieces ? 2 * o->cap_pieces : 64;
        h5_piece *p = realloc(o->pieces, (size_t)cap * sizeof(h5_piece));
        if (!p)
            return -ENOMEM;
        o->pieces = p;
        o->cap_pieces = cap;
    }
    int rc = h5_write_piece(o->fd, o->off[i] + at, data, bytes, &o->pieces[o->n_pieces]);
    if (!rc)
        o->n_pieces++;
    return rc;
}

static int cmp_piece(const void *a, const void *b)
{
    uint64_t x = ((const h5_piece *)a)->off, y = ((const h5_piece *)b)->off;
    return (x > y) - (x < y);
}

int h5_out_finish(h5_out **po, const h5_piece *more, int n_more, char *err, int err_len)
{
    h5_out *o = *po;
    int n = o->n_pieces + n_more, rc = 0;
    h5_piece *all = malloc((size_t)(n ? n : 1) * sizeof(h5_piece));
    if (!all) {
        snprintf(err, (size_t)err_len, "%s: out of memory", o->path);
        h5_out_abandon(po);
        return -ENOMEM;
    }
    if (o->n_pieces)
        memcpy(all, o->pieces, (size_t)o->n_pieces * sizeof(h5_piece));
    if (n_more)
        memcpy(all + o->n_pieces, more, (size_t)n_more * sizeof(h5_piece));
    qsort(all, (size_t)n, sizeof(h5_piece), cmp_piece);
    /* the body's CRC in file order: the pieces as written, the metadata
     * between them read back */
    uint32_t crc = 0, part;
    uint64_t at = H5_USERBLOCK;
    for (int i = 0; !rc && i <= n; i++) {
        uint64_t next = i < n ? all[i].off : o->size;
        if (next < at || (i < n && all[i].off + all[i].len > o->size)) {
            rc = -EIO; /* overlapping or outside the file */
            break;
        }
        if (next > at) {
            rc = crc_range(o->fd, at, next, &part);
            crc = h5_crc32_combine(crc, part, next - at);
        }
        if (i < n) {
            crc = h5_crc32_combine(crc, all[i].crc, all[i].len);
            at = all[i].off + all[i].len;
        }
    }
    free(all);
    uint8_t head[32] = { 0 };
    memcpy(head, H5_MAGIC, 8);
    put_u64(head + 8, o->size - H5_USERBLOCK);
    put_u64(head + 16, crc);
    h5_piece hp;
    if (!rc)
        rc = h5_write_piece(o->fd, 0, head, sizeof(head), &hp);
    if (!rc && fsync(o->fd))
        rc = -errno;
    if (close(o->fd) && !rc)
        rc = -EIO;
    o->fd = -1;
    if (!rc)
        rc = out_replace(o->tmp, o->path);
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: finishing the file failed: %s", o->path,
                 strerror(-rc));
        h5_out_abandon(po);
        return rc;
    }
    free(o->ids);
    free(o->off);
    free(o->bytes);
    free(o->pieces);
    free(o);
    *po = NULL;
    return 0;
}

void h5_out_abandon(h5_out **po)
{
    h5_out *o = *po;
    if (!o)
        return;
    if (o->f >= 0) {
        for (long i = 0; i < o->n; i++)
            if (o->ids[i] >= 0)
                H5Dclose(o->ids[i]);
        H5Fclose(o->f);
    }
    if (o->fd >= 0)
        close(o->fd);
    remove(o->tmp);
    free(o->ids);
    free(o->off);
    free(o->bytes);
    free(o->pieces);
    free(o);
    *po = NULL;
}
