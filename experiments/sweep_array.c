/* The parts of `mode-exp sweep` around its loop: the queue its groups of
 * ranks take their runs from (--ranks-per-run) and their ETA, the SLURM job
 * array that trains one run per task (--slurm-array), --only, and the
 * report by mode-analyze at the end. */
#define _DEFAULT_SOURCE /* realpath */
#include "experiments/sweep.h"

#include "core/util/ctx.h"
#include "core/util/file.h"
#include "core/util/outfile.h"

#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void sweep_queue(int n, const double *cost, int *order)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    /* longest planned first, ties in the sweep's order: the same on every
     * rank (an insertion sort: a sweep has at most SWEEP_MAX_RUNS runs) */
    for (int i = 1; i < n; i++) {
        int x = order[i], j = i;
        while (j > 0 && cost[order[j - 1]] < cost[x]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
}

/* s in single quotes for bash ('\'' for a quote). */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    fputc('\'', f);
}

int sweep_write_slurm(const char *script, const sweep_plan *p, const int *order, int ranks,
                      int threads, bool no_tensorboard, int n_args, char *const *args, char *err,
                      int err_len)
{
    char list[MODE_PATH_MAX + 8], exe[MODE_PATH_MAX], file[MODE_PATH_MAX], cwd[MODE_PATH_MAX];
    snprintf(list, sizeof(list), "%s.runs", script);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0 || !realpath(p->path, file) || !getcwd(cwd, sizeof(cwd))) {
        snprintf(err, (size_t)err_len, "%s: cannot resolve mode-exp, the sweep file or the "
                 "working folder: %s", script, strerror(errno));
        return -EIO;
    }
    exe[n] = '\0';
    char abs_list[2 * MODE_PATH_MAX + 16];
    if (list[0] == '/')
        snprintf(abs_list, sizeof(abs_list), "%s", list);
    else
        snprintf(abs_list, sizeof(abs_list), "%s/%s", cwd, list);
    /* neither file may be the sweep file or its base config (the script
     * over the sweep file replaced the file it was written from) */
    const char *inputs[] = { p->path, p->base };
    int rc = out_check(list, inputs, 2, err, err_len);
    if (!rc)
        rc = out_check(script, inputs, 2, err, err_len);
    if (rc)
        return rc;
    out_file set[2] = { { .f = NULL }, { .f = NULL } };
    rc = out_open(&set[0], list, err, err_len);
    if (!rc && (rc = out_open(&set[1], script, err, err_len)))
        out_abort(&set[0]);
    if (rc)
        return rc;
    for (int q = 0; q < p->n_runs; q++)
        fprintf(set[0].f, "%s\n", p->runs[order[q]].name);
    FILE *f = set[1].f;
    fprintf(f, "#!/bin/bash\n"
               "# The sweep %s as a SLURM job array, one task per run (longest planned\n"
               "# first), each `mode-exp sweep --only RUN` of the run on line\n"
               "# $SLURM_ARRAY_TASK_ID of %s.  Written by mode-exp sweep --slurm-array;\n"
               "# submit with `sbatch %s`, or run a task by hand:\n"
               "#   SLURM_ARRAY_TASK_ID=1 bash %s\n"
               "# Without srun, a task runs under mpirun (or alone at one rank).  The run\n"
               "# folder's lock keeps two tasks off one run; run the sweep itself (or\n"
               "# mode-analyze report) for the report once every task has finished.\n",
            file, abs_list, script, script);
    fprintf(f, "#SBATCH --job-name=mode-sweep\n#SBATCH --array=1-%d\n#SBATCH --ntasks=%d\n",
            p->n_runs, ranks);
    if (threads > 0)
        fprintf(f, "#SBATCH --cpus-per-task=%d\n", threads);
    fprintf(f, "set -u\nlist=");
    put_quoted(f, abs_list);
    fprintf(f, "\ntask=${SLURM_ARRAY_TASK_ID:?\"set SLURM_ARRAY_TASK_ID to a line of $list "
               "(1-%d)\"}\n"
               "case $task in ''|*[!0-9]*) echo \"$0: SLURM_ARRAY_TASK_ID=$task: expected a "
               "line of $list (1-%d)\" >&2; exit 2;; esac\n"
               "run=$(sed -n \"${task}p\" \"$list\")\n"
               "if [ -z \"$run\" ]; then\n"
               "    echo \"$0: SLURM_ARRAY_TASK_ID=$task: no such line in $list (1-%d)\" >&2\n"
               "    exit 2\nfi\ncd ",
            p->n_runs, p->n_runs, p->n_runs);
    put_quoted(f, cwd);
    fprintf(f, " || exit 1\nset -- ");
    put_quoted(f, exe);
    fprintf(f, " sweep ");
    put_quoted(f, file);
    for (int i = 0; i < n_args; i++) {
        fputc(' ', f);
        put_quoted(f, args[i]);
    }
    if (threads > 0)
        fprintf(f, " --threads %d", threads);
    if (no_tensorboard)
        fprintf(f, " --no-tensorboard");
    fprintf(f, " --only \"$run\"\n"
               "if command -v srun >/dev/null 2>&1; then\n"
               "    exec srun --ntasks=%d \"$@\"\n"
               "elif [ %d -gt 1 ]; then\n"
               "    exec mpirun -n %d \"$@\"\n"
               "else\n"
               "    exec \"$@\"\n"
               "fi\n",
            ranks, ranks, ranks);
    return out_commit_set(set, 2, err, err_len);
}

/* --only RUN: the plan cut to that run (it keeps its folder and config). */
int sweep_keep_only(sweep_plan *p, const char *name, char *err, int err_len)
{
    for (int i = 0; i < p->n_runs; i++)
        if (!strcmp(p->runs[i].name, name)) {
            if (i)
                memcpy(&p->runs[0], &p->runs[i], sizeof(p->runs[0]));
            p->n_runs = 1;
            return 0;
        }
    int at = snprintf(err, (size_t)err_len, "%s: --only %s: no run of that name (its runs: ",
                      p->path, name);
    for (int i = 0; i < p->n_runs && at > 0 && at < err_len - 8; i++)
        at += snprintf(err + at, (size_t)(err_len - at), "%s%s", i ? ", " : "", p->runs[i].name);
    if (at > 0 && at < err_len - 2)
        snprintf(err + at, (size_t)(err_len - at), ")");
    return -EINVAL;
}

/* The sweep's ETA after this group's runs so far: every group is taken to
 * go at this group's rate (planned FLOPs a second) through its queue. */
void sweep_format_eta(char *buf, size_t len, double done_cost, double elapsed,
                      double left_cost, int groups)
{
    if (done_cost <= 0.0 || elapsed <= 0.0) {
        buf[0] = '\0';
        return;
    }
    double left = left_cost / (done_cost / elapsed) / (double)groups;
    char t[32];
    mode_format_duration(t, sizeof(t), left);
    snprintf(buf, len, "  sweep ETA %s", t);
}

/* mode-analyze: $MODE_ANALYZE, else beside mode-exp in the install (same
 * folder) or the build tree (../analysis/), else on PATH. */
static bool find_analyze(char *path, size_t len)
{
    const char *env = getenv("MODE_ANALYZE");
    if (env) {
        snprintf(path, len, "%s", env);
        return access(path, X_OK) == 0;
    }
    char exe[MODE_PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) { /* <dir>/mode-analyze, then <dir>/../analysis/mode-analyze */
            *slash = '\0';
            snprintf(path, len, "%s/mode-analyze", exe);
            if (!access(path, X_OK))
                return true;
            slash = strrchr(exe, '/');
            if (slash) {
                *slash = '\0';
                snprintf(path, len, "%s/analysis/mode-analyze", exe);
                if (!access(path, X_OK))
                    return true;
            }
        }
    }
    const char *dirs = getenv("PATH");
    while (dirs && *dirs) {
        const char *colon = strchr(dirs, ':');
        int dl = colon ? (int)(colon - dirs) : (int)strlen(dirs);
        snprintf(path, len, "%.*s/mode-analyze", dl, dirs);
        if (dl > 0 && !access(path, X_OK))
            return true;
        dirs = colon ? colon + 1 : NULL;
    }
    return false;
}

int sweep_run_report(const char *out)
{
    char exe[MODE_PATH_MAX + 128];
    if (!find_analyze(exe, sizeof(exe))) {
        printf("# mode-analyze not found (it is built with cairo, -Danalysis=enabled); make the "
               "report with: mode-analyze report %s\n", out);
        return 0;
    }
    printf("# %s report %s\n", exe, out);
    fflush(stdout);
    char *argv[] = { exe, (char *)"report", (char *)out, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, exe, NULL, NULL, argv, environ);
    if (rc) {
        fprintf(stderr, "mode-exp sweep: cannot start %s: %s\n", exe, strerror(rc));
        return 1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "mode-exp sweep: %s report %s failed\n", exe, out);
        return 1;
    }
    return 0;
}
