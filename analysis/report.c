/* mode-analyze report: every analysis of a folder of runs (a sweep's out)
 * on one HTML page that opens in a browser from the disk: the runs and
 * their state, the compare table, the loss curves, the isoFLOP analysis
 * when runs have training-FLOP budgets, and for every routed run its
 * routing heatmap, router weights and token classes.  Images are embedded
 * as base64 data URIs; the files they come from stay beside the page in
 * <out>/report/, with the tables as Markdown and CSV. */
#include "analysis/analyze.h"
#include "analysis/modelsize.h"
#include "analysis/rundir.h"
#include "analysis/stats.h"
#include "core/train/trainer.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the page says of one run. */
typedef struct report_run {
    const char *path;
    char name[128], kinds[256];
    char folder[RUN_PATH_LEN]; /* the run's folder name: its figures' sub-folder */
    char *config;            /* the resolved INI text */
    long done, planned, evals, heat_step;
    double budget;
    bool routed, labels, scores;
} report_run;

typedef struct report {
    const char *dir;
    char assets[RUN_PATH_LEN + 8]; /* <out>/report */
    report_run *runs;
    int n, failed;
} report;

/* ---- collecting ----------------------------------------------------------- */

static int read_report_run(const an_args *a, report_run *r)
{
    run_info *ri = NULL;
    char err[RUN_PATH_LEN + 512];
    if (build_run_info(&ri, r->path, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    snprintf(r->name, sizeof(r->name), "%s", ri->name);
    const char *slash = strrchr(ri->dir, '/');
    snprintf(r->folder, sizeof(r->folder), "%s", slash ? slash + 1 : ri->dir);
    const char *kind_names[MODE_MAX_LAYERS];
    for (int l = 0; l < ri->cfg.n_layers; l++) {
        kind_names[l] = ri->cfg.layers[l].kind;
        r->scores |= run_layer_has_key(ri, l, "capacity");
    }
    kinds_summary(r->kinds, (int)sizeof(r->kinds), kind_names, ri->cfg.n_layers);
    model_size size;
    if (run_model_size(ri, &size, err, (int)sizeof(err))) {
        free_run_info(&ri);
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    }
    r->planned = config_planned_steps(&ri->cfg, size.train_flops_per_step);
    double done = run_last_value(ri, "metrics/step", NULL);
    r->done = isfinite(done) ? (long)done : 0;
    run_last_value(ri, "eval/step", &r->evals);
    r->budget = ri->cfg.flops_budget;
    r->routed = ri->n_steps > 0 && ri->tokens;
    r->heat_step = r->routed ? ri->steps[ri->n_steps - 1] : 0;
    r->labels = r->routed && ri->labels && ri->n_classes > 0;
    r->scores &= r->routed;
    r->config = config_to_ini(&ri->cfg);
    free_run_info(&ri);
    return 0;
}

/* ---- running the other subcommands ------------------------------------------ */

/* Their printout would bury the page's path: stdout goes to /dev/null while
 * they run (their messages, on stderr, stay). */
static int quiet_begin(void)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), nul = open("/dev/null", O_WRONLY);
    if (nul >= 0) {
        dup2(nul, STDOUT_FILENO);
        close(nul);
    }
    return saved;
}

static void quiet_end(int saved)
{
    fflush(stdout);
    if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
}

static void sub_command(report *rp, int (*cmd)(const an_args *), const char *name,
                        const char *const *files, int n, const char *out)
{
    an_args s = { .cmd = name, .n_files = n, .out = out, .step = -1 };
    for (int i = 0; i < n; i++)
        s.files[i] = files[i];
    int saved = quiet_begin();
    int rc = cmd(&s);
    quiet_end(saved);
    rp->failed += rc != 0;
}

static int make_dir(const an_args *a, const char *dir)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return an_fail(a, EXIT_BAD_INPUT, "%s: cannot create the folder (%s)", dir,
                       strerror(errno));
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return an_fail(a, EXIT_BAD_INPUT, "%s: not a folder", dir);
    return 0;
}

/* ---- HTML ------------------------------------------------------------------- */

static void html_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* An id for an anchor: letters, digits, '-' and '_'. */
static void html_id(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc(isalnum((unsigned char)*s) || *s == '-' || *s == '_' ? *s : '_', f);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* <img> of a PNG as a data URI; false when the file is missing. */
static bool html_image(FILE *f, const char *path, const char *alt)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return false;
    fputs("<p><img alt=\"", f);
    html_text(f, alt);
    fputs("\" src=\"data:image/png;base64,", f);
    unsigned char buf[3 * 1024];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) {
        for (size_t i = 0; i < n; i += 3) {
            unsigned v = (unsigned)buf[i] << 16;
            if (i + 1 < n)
                v |= (unsigned)buf[i + 1] << 8;
            if (i + 2 < n)
                v |= buf[i + 2];
            fputc(b64[(v >> 18) & 63], f);
            fputc(b64[(v >> 12) & 63], f);
            fputc(i + 1 < n ? b64[(v >> 6) & 63] : '=', f);
            fputc(i + 2 < n ? b64[v & 63] : '=', f);
        }
        if (n < sizeof(buf))
            break;
    }
    fclose(in);
    fputs("\"></p>\n", f);
    return true;
}

/* A Markdown file of the analyses (tables, headings, paragraphs) as HTML. */
static bool html_markdown(FILE *f, const char *path)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return false;
    char line[8192];
    bool table = false, header = false;
    while (fgets(line, sizeof(line), in)) {
        line[strcspn(line, "\n")] = '\0';
        bool row = line[0] == '|';
        if (table && !row) {
            fputs("</table>\n", f);
            table = false;
        }
        if (row) {
            if (!table) {
                fputs("<table>\n", f);
                table = header = true;
            }
            if (strspn(line, "|-: ") == strlen(line))
                continue; /* the alignment row */
            fputs("<tr>", f);
            char *cell = line + 1, *bar;
            while ((bar = strchr(cell, '|'))) {
                *bar = '\0';
                while (*cell == ' ')
                    cell++;
                size_t len = strlen(cell);
                while (len && cell[len - 1] == ' ')
                    cell[--len] = '\0';
                fputs(header ? "<th>" : "<td>", f);
                html_text(f, cell);
                fputs(header ? "</th>" : "</td>", f);
                cell = bar + 1;
            }
            fputs("</tr>\n", f);
            header = false;
        } else if (line[0] == '#') {
            int level = (int)strspn(line, "#");
            fprintf(f, "<h%d>", level + 2 > 6 ? 6 : level + 2);
            html_text(f, line + level + (line[level] == ' '));
            fprintf(f, "</h%d>\n", level + 2 > 6 ? 6 : level + 2);
        } else if (line[0]) {
            fputs("<p>", f);
            html_text(f, line);
            fputs("</p>\n", f);
        }
    }
    if (table)
        fputs("</table>\n", f);
    fclose(in);
    return true;
}

static void missing(FILE *f, const char *what)
{
    fputs("<p class=\"note\">", f);
    html_text(f, what);
    fputs("</p>\n", f);
}

static const char style[] =
    "body{font-family:sans-serif;color:#222;max-width:1420px;margin:1.5em auto;padding:0 1em}"
    "h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}"
    "table{border-collapse:collapse;margin:.8em 0;font-size:13px}"
    "th,td{border:1px solid #d0d0d0;padding:3px 8px;text-align:right}"
    "th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}"
    "img{max-width:100%;height:auto;border:1px solid #eee}"
    "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}"
    ".note{color:#777}nav a{margin-right:1em}";

static void asset(char *buf, size_t len, const report *rp, const char *sub, const char *file)
{
    if (sub)
        snprintf(buf, len, "%s/%s/%s", rp->assets, sub, file);
    else
        snprintf(buf, len, "%s/%s", rp->assets, file);
}

static void write_html(FILE *f, const report *rp, bool isoflop, bool capped)
{
    char path[3 * RUN_PATH_LEN];
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
    html_text(f, rp->dir);
    fprintf(f, " - mode report</title>\n<style>%s</style>\n</head>\n<body>\n<h1>Runs in ", style);
    html_text(f, rp->dir);
    fprintf(f, "</h1>\n<p>%d run%s. Written by <code>mode-analyze report</code>; the figures and "
               "tables are also in <code>", rp->n, rp->n == 1 ? "" : "s");
    html_text(f, rp->assets);
    fputs("/</code>.</p>\n<nav><a href=\"#runs\">runs</a><a href=\"#compare\">compare</a>"
          "<a href=\"#curves\">curves</a>", f);
    if (isoflop)
        fputs("<a href=\"#isoflop\">isoFLOP</a>", f);
    for (int i = 0; i < rp->n; i++)
        if (rp->runs[i].routed) {
            fputs("<a href=\"#run-", f);
            html_id(f, rp->runs[i].folder);
            fputs("\">", f);
            html_text(f, rp->runs[i].name);
            fputs("</a>", f);
        }
    fputs("</nav>\n", f);

    fputs("<h2 id=\"runs\">Runs</h2>\n<table>\n<tr><th>run</th><th>layers</th><th>steps</th>"
          "<th>state</th><th>training-FLOP budget</th><th>file</th></tr>\n", f);
    for (int i = 0; i < rp->n; i++) {
        const report_run *r = &rp->runs[i];
        char b[32] = "-";
        if (r->budget > 0)
            number_label(b, (int)sizeof(b), r->budget, 4);
        fputs("<tr><td>", f);
        html_text(f, r->name);
        fputs("</td><td>", f);
        html_text(f, r->kinds);
        fprintf(f, "</td><td>%ld / %ld</td><td>%s</td><td>%s</td><td>", r->done, r->planned,
                r->done >= r->planned ? "complete" : "incomplete", b);
        html_text(f, r->path);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);

    fputs("<h2 id=\"compare\">Compare</h2>\n", f);
    if (capped)
        fprintf(f, "<p class=\"note\">The first %d runs (by folder name).</p>\n", AN_MAX_FILES);
    asset(path, sizeof(path), rp, NULL, "compare.md");
    if (!html_markdown(f, path))
        missing(f, "compare failed (see its message)");
    fputs("<h2 id=\"curves\">Held-out loss</h2>\n", f);
    asset(path, sizeof(path), rp, NULL, "curves.png");
    if (!html_image(f, path, "held-out loss curves"))
        missing(f, "no curves: no run has a held-out evaluation yet");
    if (isoflop) {
        fputs("<h2 id=\"isoflop\">isoFLOP analysis</h2>\n", f);
        asset(path, sizeof(path), rp, NULL, "isoflop.png");
        if (!html_image(f, path, "isoFLOP analysis"))
            missing(f, "isoflop failed (see its message)");
        asset(path, sizeof(path), rp, NULL, "isoflop.md");
        html_markdown(f, path);
    }
    for (int i = 0; i < rp->n; i++) {
        const report_run *r = &rp->runs[i];
        fputs("<h2 id=\"run-", f);
        html_id(f, r->folder);
        fputs("\">", f);
        html_text(f, r->name);
        fputs("</h2>\n<p>", f);
        html_text(f, r->kinds);
        fprintf(f, "; %ld of %ld steps.</p>\n", r->done, r->planned);
        if (r->routed) {
            char file[96];
            snprintf(file, sizeof(file), "heatmap_step%ld_seq0.png", r->heat_step);
            asset(path, sizeof(path), rp, r->folder, file);
            if (!html_image(f, path, "routing heatmap"))
                missing(f, "heatmap failed (see its message)");
            asset(path, sizeof(path), rp, r->folder, "weights.png");
            if (r->scores && !html_image(f, path, "router weights"))
                missing(f, "weights failed (see its message)");
            asset(path, sizeof(path), rp, r->folder, "tokens.png");
            if (r->labels && !html_image(f, path, "take rate per token class"))
                missing(f, "tokens failed (see its message)");
            asset(path, sizeof(path), rp, r->folder, "tokens.md");
            if (r->labels && access(path, R_OK) == 0) {
                fputs("<details><summary>token classes and positions (tables)</summary>\n", f);
                html_markdown(f, path);
                fputs("</details>\n", f);
            }
        } else {
            missing(f, "no routing records (no routed layer, run.routing_every = 0, or none "
                       "recorded yet)");
        }
        if (r->config) {
            fputs("<details><summary>resolved config</summary>\n<pre>", f);
            html_text(f, r->config);
            fputs("</pre></details>\n", f);
        }
    }
    fputs("</body>\n</html>\n", f);
}

/* ---- the command ---------------------------------------------------------- */

int cmd_report(const an_args *a)
{
    report rp = { .dir = a->files[0] };
    char **paths = NULL, err[RUN_PATH_LEN + 256], out_dir[RUN_PATH_LEN], page[RUN_PATH_LEN + 64];
    int n_paths = 0, rc = EXIT_BAD_INPUT;
    an_text t = { 0 };
    if (list_run_files(rp.dir, &paths, &n_paths, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    rp.runs = calloc((size_t)n_paths, sizeof(report_run));
    if (!rp.runs)
        goto done;
    for (int i = 0; i < n_paths; i++) {
        rp.runs[i].path = paths[i];
        if (read_report_run(a, &rp.runs[i]))
            goto done;
        rp.n++;
    }
    snprintf(out_dir, sizeof(out_dir), "%s", a->out ? a->out : rp.dir);
    snprintf(rp.assets, sizeof(rp.assets), "%s/report", out_dir);
    if (make_dir(a, out_dir) || make_dir(a, rp.assets))
        goto done;
    /* the tables and figures over runs: at most AN_MAX_FILES of them */
    const char *files[AN_MAX_FILES];
    int n_files = 0, n_curves = 0;
    bool isoflop = false;
    for (int i = 0; i < rp.n && n_files < AN_MAX_FILES; i++)
        files[n_files++] = rp.runs[i].path;
    sub_command(&rp, cmd_compare, "compare", files, n_files, rp.assets);
    for (int i = 0; i < rp.n && n_curves < AN_MAX_FILES; i++)
        if (rp.runs[i].evals > 0)
            files[n_curves++] = rp.runs[i].path;
    if (n_curves)
        sub_command(&rp, cmd_curves, "curves", files, n_curves, rp.assets);
    for (int i = 0; i < rp.n; i++)
        isoflop |= rp.runs[i].budget > 0;
    if (isoflop)
        sub_command(&rp, cmd_isoflop, "isoflop", &rp.dir, 1, rp.assets);
    for (int i = 0; i < rp.n; i++) {
        const report_run *r = &rp.runs[i];
        if (!r->routed)
            continue;
        char sub[2 * RUN_PATH_LEN + 16];
        snprintf(sub, sizeof(sub), "%s/%s", rp.assets, r->folder);
        const char *one[1] = { r->path };
        sub_command(&rp, cmd_heatmap, "heatmap", one, 1, sub);
        if (r->scores)
            sub_command(&rp, cmd_weights, "weights", one, 1, sub);
        if (r->labels)
            sub_command(&rp, cmd_tokens, "tokens", one, 1, sub);
    }
    snprintf(page, sizeof(page), "%s/report.html", out_dir);
    if (an_text_begin(a, &t, page))
        goto done;
    write_html(t.f, &rp, isoflop, rp.n > AN_MAX_FILES);
    if (an_text_commit(a, &t))
        goto done;
    printf("%d run%s; figures and tables in %s/\n", rp.n, rp.n == 1 ? "" : "s", rp.assets);
    if (rp.failed)
        an_fail(a, EXIT_BAD_INPUT, "%d of the analyses failed (their messages are above); the "
                "page says which", rp.failed);
    rc = rp.failed ? EXIT_BAD_INPUT : 0;
done:
    an_text_abort(&t);
    for (int i = 0; i < rp.n; i++)
        free(rp.runs[i].config);
    free(rp.runs);
    free_run_files(&paths, n_paths);
    return rc;
}
