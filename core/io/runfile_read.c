/* Reading a run record: run.h5 and the pieces it does not hold yet, as one
 * index of datasets (runfile.h, run_reader), and whole records in memory. */
#include "core/io/runfile.h"

#include "core/io/h5util.h"
#include "core/io/runfile_parts.h"
#include "core/util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- reading ------------------------------------------------------------- */

hid_t rf_entry_mem_type(int type)
{
    return type == RUN_BLOB_DOUBLE  ? H5T_NATIVE_DOUBLE
           : type == RUN_BLOB_FLOAT ? H5T_NATIVE_FLOAT
           : type == RUN_BLOB_UINT8 ? H5T_NATIVE_UINT8
           : type == RUN_BLOB_INT64 ? H5T_NATIVE_INT64
                                    : H5T_NATIVE_INT32;
}


static int entry_cmp(const void *a, const void *b)
{
    const run_entry *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : (x->file > y->file) - (x->file < y->file);
}

typedef struct visit_ctx {
    run_reader *r;
    int file, rc;
} visit_ctx;

static herr_t index_dataset(hid_t f, const char *name, const H5O_info_t *info, void *op)
{
    visit_ctx *v = op;
    if (info->type != H5O_TYPE_DATASET)
        return 0;
    run_reader *r = v->r;
    if (r->n_e == r->cap_e) {
        long cap = r->cap_e ? 2 * r->cap_e : 256;
        run_entry *p = realloc(r->e, (size_t)cap * sizeof(run_entry));
        if (!p) {
            v->rc = -ENOMEM;
            return -1;
        }
        r->e = p;
        r->cap_e = cap;
    }
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t space = ds < 0 ? -1 : H5Dget_space(ds), type = ds < 0 ? -1 : H5Dget_type(ds);
    run_entry *e = &r->e[r->n_e];
    memset(e, 0, sizeof(*e));
    e->file = v->file;
    e->ndim = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    if (e->ndim >= 1 && e->ndim <= 4) {
        hsize_t dims[4];
        H5Sget_simple_extent_dims(space, dims, NULL);
        for (int i = 0; i < e->ndim; i++)
            e->dims[i] = dims[i];
        size_t sz = H5Tget_size(type);
        H5T_class_t cls = H5Tget_class(type);
        e->type = cls == H5T_FLOAT ? (sz == 8 ? RUN_F64 : RUN_BLOB_FLOAT)
                  : sz == 1        ? RUN_BLOB_UINT8
                  : sz == 8        ? RUN_BLOB_INT64
                                   : RUN_BLOB_INT32;
        e->path = strdup(name);
        if (!e->path)
            v->rc = -ENOMEM;
        else
            r->n_e++;
    }
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    if (ds >= 0)
        H5Dclose(ds);
    return v->rc ? -1 : 0;
}

hid_t rf_reader_file(run_reader *r, int i)
{
    return i >= 0 && i < r->n_files ? r->held[i] : -1;
}

/* Every file the record spans, opened once each and held open until
 * close_run_reader: the seals are checked and every dataset read through
 * the same opens (h5util.h), so that a run gathering its pieces into run.h5
 * or writing a new piece meanwhile leaves this reader one consistent
 * version.  *again: a piece listed was gone when opened, or run.h5 was
 * replaced while the pieces were listed (the run gathered or rewound its
 * record meanwhile): read it all again. */
static int open_reader_once(run_reader *r, const char *run_h5, bool *again, char *err,
                            int err_len)
{
    long *steps = NULL;
    int n_steps = 0, rc = -ENOMEM;
    *again = false;
    hid_t f = h5_open_checked(run_h5, err, err_len);
    if (f < 0)
        return -EINVAL;
    long through = 0;
    if (h5_attr_read_long(f, THROUGH_ATTR, &through))
        through = 0;
    r->config = h5_attr_read_string(f, "config");
    if (!r->config) {
        H5Fclose(f);
        snprintf(err, (size_t)err_len, "%s: not a mode run file (no config attribute)", run_h5);
        return -EINVAL;
    }
    if ((rc = rf_list_pieces(run_h5, &steps, &n_steps))) {
        H5Fclose(f);
        return rc;
    }
    r->files = malloc((size_t)(n_steps + 1) * sizeof(*r->files));
    r->held = malloc((size_t)(n_steps + 1) * sizeof(hid_t));
    if (!r->files || !r->held) {
        H5Fclose(f);
        free(steps);
        return -ENOMEM;
    }
    r->held[0] = f;
    snprintf(r->files[r->n_files++], sizeof(r->files[0]), "%s", run_h5);
    long reach = through; /* the last step of the records read so far */
    for (int i = 0; i < n_steps; i++) {
        if (steps[i] / 2 <= through) /* run.h5 holds it already */
            continue;
        char *piece = r->files[r->n_files];
        rf_piece_path(piece, sizeof(r->files[0]), run_h5, steps[i]);
        hid_t h = h5_open_checked(piece, err, err_len);
        struct stat st;
        if (h < 0 && stat(piece, &st) && errno == ENOENT) {
            *again = true; /* listed, then gathered or removed */
            rc = -EAGAIN;
            break;
        }
        if (h < 0) {
            size_t l = strlen(err);
            snprintf(err + l, (size_t)err_len - l, ": it held the records of steps %ld..%ld",
                     reach + 1, steps[i] / 2);
            rc = -EINVAL;
            break;
        }
        r->held[r->n_files] = h;
        r->n_files++;
        /* each piece follows the one before: a hole is a piece gone */
        long from = -1;
        if (h5_attr_read_long(h, FROM_ATTR, &from))
            from = -1; /* written before pieces said it */
        if (from >= 0 && from != reach) {
            snprintf(err, (size_t)err_len,
                     "%s: the records of steps %ld..%ld are missing: this piece follows step "
                     "%ld, but the records before it end at step %ld (a piece of "
                     "records/ was removed or lost)", piece, reach + 1, from, from, reach);
            rc = -EINVAL;
            break;
        }
        visit_ctx v = { .r = r, .file = r->n_files - 1 };
        H5Ovisit(h, H5_INDEX_NAME, H5_ITER_INC, index_dataset, &v);
        if ((rc = v.rc))
            break;
        reach = steps[i] / 2;
    }
    free(steps);
    /* run.h5 renamed over since it was opened (the pieces gathered into a
     * new one, then removed): the pieces listed may not be the old one's */
    int *hfd = NULL;
    struct stat was, now;
    if (!rc && (H5Fget_vfd_handle(f, H5P_DEFAULT, (void **)&hfd) < 0 || !hfd ||
                fstat(*hfd, &was) || stat(run_h5, &now) || was.st_ino != now.st_ino ||
                was.st_dev != now.st_dev)) {
        *again = true;
        rc = -EAGAIN;
    }
    if (rc)
        return rc;
    r->last_step = reach;
    visit_ctx v = { .r = r, .file = 0 };
    H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, index_dataset, &v);
    if ((rc = v.rc))
        return rc;
    if (r->n_e > 1) /* qsort's base may not be null, even for no elements */
        qsort(r->e, (size_t)r->n_e, sizeof(run_entry), entry_cmp);
    return 0;
}

/* What open_reader_once built, undone (for another try, or at close). */
static void reader_release(run_reader *r)
{
    for (int i = 0; r->held && i < r->n_files; i++)
        H5Fclose(r->held[i]);
    for (long i = 0; i < r->n_e; i++)
        free(r->e[i].path);
    free(r->e);
    free(r->files);
    free(r->held);
    free(r->config);
    r->e = NULL;
    r->n_e = r->cap_e = 0;
    r->files = NULL;
    r->held = NULL;
    r->config = NULL;
    r->n_files = 0;
}

int open_run_reader(run_reader **out, const char *run_h5, char *err, int err_len)
{
    *out = NULL;
    h5_quiet();
    run_reader *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    snprintf(r->path, sizeof(r->path), "%s", run_h5);
    for (int attempt = 1;; attempt++) {
        bool again = false;
        int rc = open_reader_once(r, run_h5, &again, err, err_len);
        if (!rc) {
            *out = r;
            return 0;
        }
        reader_release(r);
        if (!again || attempt == H5_OPEN_TRIES) {
            if (again)
                snprintf(err, (size_t)err_len, "%s: its records changed %d times while they "
                         "were being read (a live run is gathering or rewriting them): read "
                         "them again", run_h5, attempt);
            free(r);
            return rc;
        }
    }
}

void close_run_reader(run_reader **pr)
{
    run_reader *r = *pr;
    if (!r)
        return;
    reader_release(r);
    free(r);
    *pr = NULL;
}

const char *run_reader_config(const run_reader *r)
{
    return r->config;
}

int run_reader_files(const run_reader *r)
{
    return r->n_files;
}

long run_reader_last_step(const run_reader *r)
{
    return r->last_step;
}

/* The first entry of path (then the next files' ones follow), or -1. */
static long find_entry(const run_reader *r, const char *path)
{
    long lo = 0, hi = r->n_e;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        if (strcmp(r->e[mid].path, path) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_e && !strcmp(r->e[lo].path, path) ? lo : -1;
}

bool run_reader_has(const run_reader *r, const char *path)
{
    return find_entry(r, path) >= 0;
}

int rf_read_entry(run_reader *r, const run_entry *e, hid_t mem_type, void *buf, long *step)
{
    hid_t f = rf_reader_file(r, e->file);
    hid_t ds = f < 0 ? -1 : H5Dopen2(f, e->path, H5P_DEFAULT);
    if (ds < 0)
        return -EIO;
    int rc = H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0 ? -EIO : 0;
    if (step && (rc || h5_attr_read_long(ds, "step", step)))
        *step = 0;
    H5Dclose(ds);
    return rc;
}

int run_reader_column(run_reader *r, const char *path, double **out, long *n)
{
    *out = NULL;
    *n = 0;
    long first = find_entry(r, path), total = 0;
    if (first < 0)
        return -ENOENT;
    long k = first;
    for (; k < r->n_e && !strcmp(r->e[k].path, path); k++) {
        if (r->e[k].ndim != 1)
            return -EINVAL;
        total += (long)r->e[k].dims[0];
    }
    double *v = malloc((size_t)(total ? total : 1) * sizeof(double));
    if (!v)
        return -ENOMEM;
    long at = 0;
    for (long i = first; i < k; i++) {
        if (r->e[i].dims[0] && rf_read_entry(r, &r->e[i], H5T_NATIVE_DOUBLE, v + at, NULL)) {
            free(v);
            return -EIO;
        }
        at += (long)r->e[i].dims[0];
    }
    *out = v;
    *n = total;
    return 0;
}

int run_reader_array(run_reader *r, const char *path, hid_t mem_type, size_t elem, void **out,
                     int *ndim, unsigned long long *dims, long *step)
{
    *out = NULL;
    long i = find_entry(r, path);
    if (i < 0)
        return -ENOENT;
    const run_entry *e = &r->e[i];
    size_t n = 1;
    for (int d = 0; d < e->ndim; d++) {
        dims[d] = e->dims[d];
        n *= (size_t)e->dims[d];
    }
    *ndim = e->ndim;
    void *buf = malloc(n * elem + 1);
    if (!buf)
        return -ENOMEM;
    if (rf_read_entry(r, e, mem_type, buf, step)) {
        free(buf);
        return -EIO;
    }
    *out = buf;
    return 0;
}

int run_reader_children(const run_reader *r, const char *group, char ***names, int *n)
{
    size_t gl = strlen(group);
    int cap = 0;
    *names = NULL;
    *n = 0;
    /* entries are sorted: the children of group are consecutive */
    for (long i = 0; i < r->n_e; i++) {
        const char *p = r->e[i].path;
        if (strncmp(p, group, gl) || p[gl] != '/')
            continue;
        const char *c = p + gl + 1, *end = strchr(c, '/');
        size_t cl = end ? (size_t)(end - c) : strlen(c);
        if (*n > 0 && strlen((*names)[*n - 1]) == cl && !strncmp((*names)[*n - 1], c, cl))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 32;
            char **p2 = realloc(*names, (size_t)cap * sizeof(char *));
            if (!p2)
                return -ENOMEM;
            *names = p2;
        }
        (*names)[*n] = strndup(c, cl);
        if (!(*names)[*n])
            return -ENOMEM;
        (*n)++;
    }
    return 0;
}

/* A table's group: the parent of a 1-D dataset that has a "step" sibling. */
bool rf_table_column(const run_reader *r, const run_entry *e, char *group, size_t len)
{
    const char *slash = strrchr(e->path, '/');
    if (!slash || e->ndim != 1)
        return false;
    snprintf(group, len, "%.*s", (int)(slash - e->path), e->path);
    char step[256];
    snprintf(step, sizeof(step), "%s/step", group);
    return run_reader_has(r, step);
}

/* Read every table into rec: metrics and eval into theirs, others into
 * extra; columns "step" first, then in name order (a table's columns are
 * consecutive entries: they share its group's prefix). */
static int read_tables(run_reader *rd, run_record *rec)
{
    char last[160] = "";
    for (long i = 0; i < rd->n_e; i++) {
        char group[160];
        if (!rf_table_column(rd, &rd->e[i], group, sizeof(group)) || !strcmp(group, last))
            continue;
        snprintf(last, sizeof(last), "%s", group);
        size_t gl = strlen(group);
        static char names[256][RUN_COL_LEN];
        const char *cols[256] = { "step" };
        int nc = 1;
        for (long j = i; j < rd->n_e && nc < 256; j++) {
            const char *p = rd->e[j].path, *c = p + gl + 1;
            if (strncmp(p, group, gl) || p[gl] != '/')
                break;
            if (strchr(c, '/') || !strcmp(c, "step") || rd->e[j].ndim != 1 ||
                (j > i && !strcmp(rd->e[j - 1].path, p)))
                continue;
            snprintf(names[nc], RUN_COL_LEN, "%s", c);
            cols[nc] = names[nc];
            nc++;
        }
        run_table *t;
        if (!strcmp(group, "metrics") || !strcmp(group, "eval")) {
            t = !strcmp(group, "metrics") ? &rec->metrics : &rec->eval;
            rf_table_free(t);
            if (rf_table_init(t, group, cols, nc))
                return -ENOMEM;
        } else {
            int idx = run_record_add_table(rec, group, cols, nc);
            if (idx < 0)
                return idx;
            t = &rec->extra[idx];
        }
        for (int c = 0; c < nc; c++) {
            char path[256];
            double *v;
            long n;
            snprintf(path, sizeof(path), "%s/%s", group, cols[c]);
            int rc = run_reader_column(rd, path, &v, &n);
            if (rc)
                return rc;
            if (c == 0) {
                t->rows = calloc((size_t)(n ? n : 1) * (size_t)nc, sizeof(double));
                t->n_rows = t->cap = t->rows ? n : 0;
            }
            bool ok = t->rows && n == t->n_rows;
            for (long j = 0; ok && j < n; j++)
                t->rows[(size_t)j * nc + c] = v[j];
            free(v);
            if (!ok)
                return t->rows ? -EINVAL : -ENOMEM;
        }
    }
    return 0;
}

static int read_blobs(run_reader *rd, run_record *rec)
{
    for (long i = 0; i < rd->n_e; i++) {
        char group[160];
        const run_entry *e = &rd->e[i];
        if (rf_table_column(rd, e, group, sizeof(group)) ||
            (i > 0 && !strcmp(rd->e[i - 1].path, e->path)))
            continue;
        hid_t mem = rf_entry_mem_type(e->type);
        void *buf;
        int nd;
        unsigned long long dims[4];
        long step;
        int rc = run_reader_array(rd, e->path, mem, rf_blob_elem(e->type), &buf, &nd, dims, &step);
        if (!rc)
            rc = run_record_add_blob(rec, e->path, e->type, nd, dims, buf, step);
        free(buf);
        if (rc)
            return rc;
    }
    return 0;
}

int run_record_read(run_record **out, const char *path, bool with_blobs, char *err, int err_len)
{
    *out = NULL;
    run_reader *rd = NULL;
    run_record *r = NULL;
    int rc = open_run_reader(&rd, path, err, err_len);
    if (rc)
        return rc;
    rc = build_run_record(&r, rd->config);
    if (!rc)
        rc = read_tables(rd, r);
    if (!rc && with_blobs)
        rc = read_blobs(rd, r);
    if (rc) {
        if (rc != -ENOMEM)
            snprintf(err, (size_t)err_len, "%s: a record dataset cannot be read", path);
        free_run_record(&r);
    }
    close_run_reader(&rd);
    *out = r;
    return rc;
}
