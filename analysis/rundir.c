#include "analysis/rundir.h"

#include "core/io/runfile.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_if_run(char ***paths, int *n, const char *dir, const char *name)
{
    int dl = (int)strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') /* "out/" and "out" give the same paths */
        dl--;
    size_t len = (size_t)dl + (name ? strlen(name) + 1 : 0) + sizeof("/run.h5");
    char *p = malloc(len);
    if (!p)
        return -ENOMEM;
    if (name)
        snprintf(p, len, "%.*s/%s/run.h5", dl, dir, name);
    else
        snprintf(p, len, "%.*s/run.h5", dl, dir);
    struct stat st;
    if (stat(p, &st) || !S_ISREG(st.st_mode)) {
        free(p);
        return 0;
    }
    /* a run that has just started (no step recorded yet) is left out with a
     * note, so that a sweep's folder can be analysed while it runs */
    run_reader *rd = NULL;
    char err[64];
    if (!open_run_reader(&rd, p, err, (int)sizeof(err))) {
        bool started = run_reader_has(rd, "metrics/step") || run_reader_has(rd, "routing/loss");
        close_run_reader(&rd);
        if (!started) {
            fprintf(stderr, "mode-analyze: %s: no step recorded yet; left out\n", p);
            free(p);
            return 0;
        }
    }
    char **grown = realloc(*paths, (size_t)(*n + 1) * sizeof(char *));
    if (!grown) {
        free(p);
        return -ENOMEM;
    }
    *paths = grown;
    (*paths)[(*n)++] = p;
    return 0;
}

int list_run_files(const char *dir, char ***paths, int *n, char *err, int err_len)
{
    *paths = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        snprintf(err, (size_t)err_len, "%s: %s", dir,
                 e == ENOENT ? "no such folder" : e == ENOTDIR ? "not a folder" : strerror(e));
        return -e;
    }
    int rc = add_if_run(paths, n, dir, NULL);
    int first_sub = *n;
    struct dirent *ent;
    while (!rc && (ent = readdir(d)))
        if (ent->d_name[0] != '.')
            rc = add_if_run(paths, n, dir, ent->d_name);
    closedir(d);
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: out of memory listing the runs", dir);
        free_run_files(paths, *n);
        *n = 0;
        return rc;
    }
    if (*n == 0) {
        snprintf(err, (size_t)err_len, "%s: no runs (expected %s/NAME/run.h5, as mode-exp sweep "
                 "writes them)", dir, dir);
        return -ENOENT;
    }
    qsort(*paths + first_sub, (size_t)(*n - first_sub), sizeof(char *), cmp_path);
    return 0;
}

void free_run_files(char ***paths, int n)
{
    for (int i = 0; *paths && i < n; i++)
        free((*paths)[i]);
    free(*paths);
    *paths = NULL;
}
