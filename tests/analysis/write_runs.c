/* write_runs DIR known|huge|iso|ladder|law|law-partial|started|cluster: the run files of tests/analysis/runfiles.h,
 * for test_analysis.sh. */
#include "tests/analysis/runfiles.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    char err[1024] = "";
    if (argc != 3 || (strcmp(argv[2], "known") && strcmp(argv[2], "huge") &&
                      strcmp(argv[2], "iso") && strcmp(argv[2], "ladder") &&
                      strcmp(argv[2], "law") && strcmp(argv[2], "law-partial") &&
                      strcmp(argv[2], "started") && strcmp(argv[2], "cluster"))) {
        fprintf(stderr, "usage: write_runs DIR known|huge|iso|ladder|law|law-partial|started|cluster\n");
        return 2;
    }
    int rc = !strcmp(argv[2], "known") ? write_known_runs(argv[1], err, (int)sizeof(err))
             : !strcmp(argv[2], "huge") ? write_huge_runs(argv[1], err, (int)sizeof(err))
             : !strcmp(argv[2], "iso")  ? write_iso_runs(argv[1], err, (int)sizeof(err))
             : !strcmp(argv[2], "law")  ? write_law_runs(argv[1], false, err, (int)sizeof(err))
             : !strcmp(argv[2], "law-partial") ? write_law_runs(argv[1], true, err, (int)sizeof(err))
             : !strcmp(argv[2], "cluster") ? write_cluster_runs(argv[1], err, (int)sizeof(err))
             : !strcmp(argv[2], "started") ? write_started_run(argv[1], err, (int)sizeof(err))
                                        : write_ladder_runs(argv[1], err, (int)sizeof(err));
    if (rc) {
        fprintf(stderr, "write_runs: %s (%d)\n", err, rc);
        return 1;
    }
    return 0;
}
