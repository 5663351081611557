/* The runs of a folder: a sweep's out (mode-exp sweep) or any folder of run
 * folders.  Used by mode-analyze isoflop and report. */
#ifndef MODE_ANALYSIS_RUNDIR_H
#define MODE_ANALYSIS_RUNDIR_H

/* Paths of <dir>/run.h5 (when there is one) and of <dir>/<name>/run.h5 for
 * every sub-folder holding one, sorted by name (malloc'd, *n of them).
 * Returns 0, or a negative code with a message naming dir in err; a
 * folder without any run is -ENOENT. */
int list_run_files(const char *dir, char ***paths, int *n, char *err, int err_len);
void free_run_files(char ***paths, int n);

#endif
