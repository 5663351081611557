/* Gathering a run's pieces into one run.h5 when the run ends (runfile.h,
 * run_record_finish): every table column as long as all its parts, every
 * other dataset as its first file has it. */
#include "core/io/runfile.h"

#include "core/io/h5util.h"
#include "core/io/runfile_parts.h"
#include "core/util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- gathering the pieces ------------------------------------------------- */


static int copy_provenance(hid_t dst, run_reader *rd)
{
    hid_t src = rf_reader_file(rd, 0);
    if (src < 0)
        return -EIO;
    if (H5Lexists(src, "provenance", H5P_DEFAULT) <= 0)
        return 0;
    return H5Ocopy(src, "provenance", dst, "provenance", H5P_DEFAULT, H5P_DEFAULT) < 0 ? -EIO
                                                                                       : 0;
}

int run_record_finish(const char *run_h5, char *err, int err_len)
{
    run_reader *rd = NULL;
    int rc = open_run_reader(&rd, run_h5, err, err_len);
    if (rc)
        return rc;
    if (rd->n_files == 1) { /* nothing to gather */
        close_run_reader(&rd);
        return 0;
    }
    long *ds = NULL, last = rd->last_step;
    h5_out *o = NULL;
    uint64_t bytes = 0;
    for (long i = 0; i < rd->n_e; i++) {
        uint64_t n = rf_blob_elem(rd->e[i].type);
        for (int d = 0; d < rd->e[i].ndim; d++)
            n *= rd->e[i].dims[d];
        bytes += n;
    }
    ds = malloc((size_t)(rd->n_e ? rd->n_e : 1) * sizeof(long));
    if (!ds || (rc = h5_out_create(&o, run_h5, bytes, err, err_len)))
        goto fail;
    hid_t f = h5_out_file(o);
    rc = h5_attr_string(f, "config", rd->config);
    if (!rc)
        rc = h5_attr_long(f, THROUGH_ATTR, last);
    if (!rc)
        rc = copy_provenance(f, rd);
    /* one dataset a path: a table column as long as all its parts; any other
     * dataset as its first file has it, with its step attribute */
    for (long i = 0; !rc && i < rd->n_e; i++) {
        const run_entry *e = &rd->e[i];
        ds[i] = -1;
        if (i > 0 && !strcmp(rd->e[i - 1].path, e->path))
            continue;
        char group[160];
        hsize_t dims[4];
        for (int d = 0; d < e->ndim; d++)
            dims[d] = e->dims[d];
        bool column = rf_table_column(rd, e, group, sizeof(group));
        for (long j = i + 1; column && j < rd->n_e && !strcmp(rd->e[j].path, e->path); j++)
            dims[0] += rd->e[j].dims[0];
        ds[i] = h5_out_dataset(o, e->path, rf_blob_file_type(e->type), e->ndim, dims);
        if (ds[i] < 0) {
            rc = -EIO;
            break;
        }
        if (!column) {
            long step = 0;
            hid_t src = rf_reader_file(rd, e->file);
            hid_t sd = src < 0 ? -1 : H5Dopen2(src, e->path, H5P_DEFAULT);
            if (sd >= 0 && !h5_attr_read_long(sd, "step", &step))
                rc = h5_attr_long(h5_out_dataset_id(o, ds[i]), "step", step);
            if (sd >= 0)
                H5Dclose(sd);
        }
    }
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: gathering the run file failed", run_h5);
        goto fail;
    }
    if ((rc = h5_out_layout(o, err, err_len)))
        goto fail;
    uint64_t at = 0;
    for (long i = 0; !rc && i < rd->n_e; i++) {
        const run_entry *e = &rd->e[i];
        long target = ds[i];
        if (target >= 0)
            at = 0;
        else /* a further part of the column before it */
            for (long j = i; j > 0 && target < 0; j--)
                target = ds[j - 1];
        uint64_t n = rf_blob_elem(e->type);
        for (int d = 0; d < e->ndim; d++)
            n *= e->dims[d];
        if (ds[i] < 0) {
            char group[160];
            if (!rf_table_column(rd, e, group, sizeof(group)))
                continue; /* a duplicate of a record: the first stands */
        }
        void *buf = malloc(n ? n : 1);
        if (!buf) {
            rc = -ENOMEM;
            break;
        }
        if (n)
            rc = rf_read_entry(rd, e, rf_entry_mem_type(e->type), buf, NULL);
        if (!rc && n)
            rc = h5_out_write(o, target, at, buf, n);
        at += n;
        free(buf);
    }
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: gathering the run file failed: %s", run_h5,
                 strerror(-rc));
        goto fail;
    }
    close_run_reader(&rd);
    free(ds);
    if ((rc = h5_out_finish(&o, NULL, 0, err, err_len)))
        return rc;
    /* run.h5 holds every piece now (records_through): removing them is
     * tidying, and a crash before it loses nothing */
    return run_record_remove_pieces(run_h5);
fail:
    h5_out_abandon(&o);
    close_run_reader(&rd);
    free(ds);
    return rc;
}
