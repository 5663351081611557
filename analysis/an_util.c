/* What the analysis subcommands share (analyze.h): the one message and
 * exit code of a failure, the run a routing figure reads, output paths and
 * files written whole (a temporary renamed into place), figures. */
#include "analysis/analyze.h"
#include "analysis/rundir.h"
#include "core/util/outfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int an_fail(const an_args *a, int code, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "mode-analyze %s: ", a->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

/* "--opt VALUE" or "--opt=VALUE": the value, or NULL when i is not --opt. */
int an_open_routed_run(const an_args *a, run_info **ri)
{
    char err[RUN_PATH_LEN + 512];
    if (build_run_info(ri, a->files[0], err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    if ((*ri)->n_steps == 0 || !(*ri)->tokens) {
        char why[1200];
        run_no_routing_reason(*ri, why, (int)sizeof(why));
        an_fail(a, EXIT_BAD_INPUT, "%s: no routing records: %s", (*ri)->path, why);
        free_run_info(ri);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

int an_out_path(const an_args *a, const char *dir, const char *name, char *path, int len)
{
    char first[RUN_PATH_LEN];
    if (a->out) {
        dir = a->out;
    } else if (!dir) { /* the first run file's folder */
        snprintf(first, sizeof(first), "%s", a->n_files ? a->files[0] : ".");
        char *slash = strrchr(first, '/');
        if (slash)
            *(slash == first ? slash + 1 : slash) = '\0';
        else
            snprintf(first, sizeof(first), ".");
        dir = first;
    }
    struct stat st;
    if (stat(dir, &st) && mkdir(dir, 0777) && errno != EEXIST)
        return an_fail(a, EXIT_BAD_INPUT, "%s: cannot create the output folder (%s)", dir,
                       strerror(errno));
    if (!stat(dir, &st) && !S_ISDIR(st.st_mode))
        return an_fail(a, EXIT_BAD_INPUT, "%s: not a folder", dir);
    int n = snprintf(path, (size_t)len, "%s/%s", dir, name);
    if (n < 0 || n >= len)
        return an_fail(a, EXIT_BAD_INPUT, "%s: path too long", dir);
    return 0;
}

/* Say that path was written (stdout). */
static void an_wrote(const char *path)
{
    printf("wrote %s\n", path);
}

/* An output that is one of the command's inputs (its run files or CSVs,
 * --ladder), by path or inode, or a run's own file, is refused before it is
 * written (core/util/outfile.h). */
static int an_check_output(const an_args *a, const char *path)
{
    const char **in = malloc((size_t)(a->n_files + 1) * sizeof(char *));
    char err[2 * RUN_PATH_LEN + 512];
    if (!in)
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    for (int i = 0; i < a->n_files; i++)
        in[i] = a->files[i];
    in[a->n_files] = a->ladder;
    int rc = out_check(path, in, a->n_files + 1, err, (int)sizeof(err));
    free(in);
    return rc ? an_fail(a, EXIT_USAGE, "%s", err) : 0;
}

int an_text_begin(const an_args *a, an_text *t, const char *path)
{
    char err[RUN_PATH_LEN + 256];
    int rc = an_check_output(a, path);
    if (rc)
        return rc;
    if (out_open(&t->o, path, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    t->f = t->o.f;
    return 0;
}

int an_text_commit(const an_args *a, an_text *t)
{
    char err[RUN_PATH_LEN + 256];
    t->f = NULL;
    if (out_commit(&t->o, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    an_wrote(t->o.path);
    return 0;
}

void an_text_abort(an_text *t)
{
    t->f = NULL;
    out_abort(&t->o);
}

int an_save_figure(const an_args *a, const char *path, int w, int h, plot_draw_fn draw,
                   void *user)
{
    char err[RUN_PATH_LEN + 256];
    char svg[RUN_PATH_LEN + 64];
    size_t n = strlen(path);
    snprintf(svg, sizeof(svg), "%.*s.svg", (int)(n > 4 && !strcmp(path + n - 4, ".png") ? n - 4 : n),
             path);
    int rc = an_check_output(a, path);
    if (!rc && a->svg)
        rc = an_check_output(a, svg);
    if (rc)
        return rc;
    if (plot_save(path, w, h, draw, user, a->svg, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    an_wrote(path);
    if (a->svg)
        an_wrote(svg);
    return 0;
}


int an_routing_step(const an_args *a, const run_info *ri, long *step)
{
    int si = a->step >= 0 ? run_step_index(ri, a->step) : ri->n_steps - 1;
    if (si < 0) {
        char list[512];
        run_steps_list(ri, list, (int)sizeof(list));
        return an_fail(a, EXIT_BAD_INPUT, "%s: step %ld is not recorded (recorded steps: %s)",
                       ri->path, a->step, list);
    }
    *step = ri->steps[si];
    return 0;
}

int an_write_outputs(const an_args *a, const char *dir, const char *stem, an_write_fn md,
                     an_write_fn csv, int w, int h, plot_draw_fn draw, void *user)
{
    md(stdout, user);
    char name[64], path[RUN_PATH_LEN + 64];
    an_text t = { 0 };
    snprintf(name, sizeof(name), "%s.md", stem);
    if (an_out_path(a, dir, name, path, (int)sizeof(path)) || an_text_begin(a, &t, path))
        return EXIT_BAD_INPUT;
    md(t.f, user);
    snprintf(name, sizeof(name), "%s.csv", stem);
    if (an_text_commit(a, &t) || an_out_path(a, dir, name, path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        return EXIT_BAD_INPUT;
    csv(t.f, user);
    snprintf(name, sizeof(name), "%s.png", stem);
    if (an_text_commit(a, &t) || an_out_path(a, dir, name, path, (int)sizeof(path)))
        return EXIT_BAD_INPUT;
    return an_save_figure(a, path, w, h, draw, user);
}
