/* h5poke FILE DATASET INDEX|all VALUE: set element INDEX (in row-major
 * order), or every element, of a numeric dataset of a file mode wrote to VALUE ("nan", "inf", 1e30, 99),
 * then seal the file again (its user block's length and CRC-32), so that
 * the file passes the checksum and what is tested is the reader's check of
 * the numbers themselves (tests/robust/test_trust.sh). */
#include "core/io/h5util.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int reseal(const char *path)
{
    char err[600];
    int rc = h5_reseal(path, err, sizeof(err));
    if (rc)
        fprintf(stderr, "h5poke: %s\n", err);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: h5poke FILE DATASET INDEX|all VALUE\n");
        return 2;
    }
    h5_quiet();
    bool every = !strcmp(argv[3], "all");
    long at = every ? 0 : atol(argv[3]);
    double value = strtod(argv[4], NULL);
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = f >= 0 ? H5Dopen2(f, argv[2], H5P_DEFAULT) : -1;
    if (ds < 0) {
        fprintf(stderr, "h5poke: %s: no dataset %s\n", argv[1], argv[2]);
        return 1;
    }
    hid_t sp = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    double *all = n > 0 ? malloc((size_t)n * sizeof(double)) : NULL;
    int rc = all && at >= 0 && at < n ? 0 : 1;
    if (!rc && H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) < 0)
        rc = 1;
    if (!rc) {
        for (hssize_t i = every ? 0 : at; i < (every ? n : at + 1); i++)
            all[i] = value;
        rc = H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) < 0;
    }
    free(all);
    H5Sclose(sp);
    H5Dclose(ds);
    if (H5Fclose(f) < 0)
        rc = 1;
    if (!rc && reseal(argv[1]))
        rc = 1;
    if (rc)
        fprintf(stderr, "h5poke: %s: cannot set %s[%ld] (%lld elements)\n", argv[1], argv[2], at,
                (long long)n);
    return rc;
}
