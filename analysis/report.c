/* mode-analyze report: every analysis of a folder of runs (a sweep's out)
 * on one HTML page that opens in a browser from the disk, grouped by
 * replicates: the runs and their state, the compare table (n, mean, sd,
 * intervals, the baseline comparison), a sweep figure for every numeric key
 * that varies, the loss curves, the isoFLOP analysis when runs have
 * training-FLOP budgets, and for every routed group the routing heatmap and
 * router weights of its first replicate and the token classes over all of
 * them.  Images are embedded as base64 data URIs; the files they come from
 * stay beside the page in <out>/report/, with the tables as Markdown and
 * CSV. */
#include "analysis/html.h"
#include "analysis/rundir.h"
#include "analysis/runset.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the page says of one run beyond the compare table. */
typedef struct report_run {
    char *config;            /* the resolved INI text */
    long evals, heat_step;
    bool routed, labels, scores;
} report_run;

typedef struct report {
    const char *dir;
    char assets[RUN_PATH_LEN + 8]; /* <out>/report */
    an_runset rs;
    report_run *runs;
    char (*folders)[160];    /* [groups]: each group's figures' sub-folder */
    char (*sweep_keys)[RUN_KEY_LEN];
    int n_sweeps, failed;
    int n_curves;            /* runs drawn by curves (their groups evaluated in every replicate) */
    bool isoflop;
    struct timespec since;   /* when this report began, by the file system's clock */
} report;

/* ---- collecting ----------------------------------------------------------- */

static int read_report_run(const an_args *a, const char *path, report_run *r)
{
    run_info *ri = NULL;
    char err[RUN_PATH_LEN + 512];
    if (build_run_info(&ri, path, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    for (int l = 0; l < ri->cfg.n_layers; l++)
        /* a router's scores: take/skip with a share a router fills (not a
         * share fixed by depth, as skipdecode's) */
        r->scores |= (run_layer_decides(ri, l) & DECIDES_TAKE) && !isnan(run_layer_capacity(ri, l));
    run_last_value(ri, "eval/step", &r->evals);
    r->routed = ri->n_steps > 0 && ri->tokens;
    r->heat_step = r->routed ? ri->steps[ri->n_steps - 1] : 0;
    r->labels = r->routed && ri->labels && ri->n_classes > 0;
    r->scores &= r->routed;
    r->config = config_to_ini(&ri->cfg);
    free_run_info(&ri);
    return 0;
}

/* A group's sub-folder: its name with what a path must not hold replaced. */
static void folder_name(const char *group, char *out, int len)
{
    int w = 0;
    for (const char *c = group; *c && w < len - 1; c++)
        out[w++] = (char)((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                                  (*c >= '0' && *c <= '9') || *c == '.' || *c == '-' || *c == '_'
                              ? *c
                              : '_');
    out[w] = '\0';
}

/* An isoFLOP design: runs with training-FLOP budgets whose budgets or
 * model sizes vary (one budget and one size, as in a capacity sweep at
 * equal compute, has no isoFLOP curve to draw). */
static bool is_isoflop(const an_runset *rs)
{
    bool budget = false, design = false;
    for (int i = 0; i < rs->n; i++)
        budget |= rs->runs[i].cfg->flops_budget > 0;
    for (int k = 0; k < rs->g.n_varying; k++)
        design |= !strcmp(rs->g.varying[k], "run.flops_budget") ||
                  (!strncmp(rs->g.varying[k], "model.", 6) &&
                   strcmp(rs->g.varying[k], "model.layers"));
    return budget && design;
}

/* The keys of the sweep figures: every numeric key that varies, but not in
 * an isoFLOP design, where the sizes and budgets vary and the isoFLOP
 * analysis is the figure. */
static int sweep_keys(report *rp)
{
    const an_runset *rs = &rp->rs;
    rp->sweep_keys = calloc((size_t)(rs->g.n_varying ? rs->g.n_varying : 1), RUN_KEY_LEN);
    run_keys *keys = malloc((size_t)(rs->n ? rs->n : 1) * sizeof(run_keys));
    if (!rp->sweep_keys || !keys) {
        free(keys);
        return -ENOMEM;
    }
    for (int i = 0; i < rs->n; i++)
        keys[i] = rs->runs[i].keys;
    for (int k = 0; !rp->isoflop && k < rs->g.n_varying; k++)
        if (key_is_numeric(keys, rs->n, rs->g.varying[k]))
            snprintf(rp->sweep_keys[rp->n_sweeps++], RUN_KEY_LEN, "%s", rs->g.varying[k]);
    free(keys);
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

static void sub_command(report *rp, const an_args *a, int (*cmd)(const an_args *),
                        const char *name, const char *const *files, int n, const char *out,
                        const char *key)
{
    an_args s = { .cmd = name, .files = files, .n_files = n, .out = out, .step = -1,
                  .baseline = a->baseline, .key = key, .ladder = a->ladder };
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

/* The file system's time now (a stamp file's mtime), so that an asset can
 * be told from one an earlier report left in report/. */
static int stamp_time(const an_args *a, const char *dir, struct timespec *t)
{
    char path[RUN_PATH_LEN + 16];
    snprintf(path, sizeof(path), "%s/.stamp", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    struct stat st;
    int rc = fd < 0 || fstat(fd, &st) ? -errno : 0;
    if (fd >= 0)
        close(fd);
    unlink(path);
    if (rc)
        return an_fail(a, EXIT_BAD_INPUT, "%s: cannot write in it (%s)", dir, strerror(-rc));
    *t = st.st_mtim;
    return 0;
}

/* ---- the page ------------------------------------------------------------------ */

/* Whether this report wrote path: the page shows what its analyses made, not
 * a figure or table an earlier report left under the same name. */
static bool fresh(const report *rp, const char *path)
{
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode))
        return false;
    return st.st_mtim.tv_sec > rp->since.tv_sec ||
           (st.st_mtim.tv_sec == rp->since.tv_sec && st.st_mtim.tv_nsec >= rp->since.tv_nsec);
}

static bool image(const report *rp, FILE *f, const char *path, const char *alt)
{
    return fresh(rp, path) && html_image(f, path, alt);
}

static bool markdown(const report *rp, FILE *f, const char *path)
{
    return fresh(rp, path) && html_markdown(f, path);
}

static void asset(char *buf, size_t len, const report *rp, const char *sub, const char *file)
{
    if (sub)
        snprintf(buf, len, "%s/%s/%s", rp->assets, sub, file);
    else
        snprintf(buf, len, "%s/%s", rp->assets, file);
}

static bool group_routed(const report *rp, int j)
{
    return rp->runs[rp->rs.g.groups[j].members[0]].routed;
}

static void write_nav(FILE *f, const report *rp)
{
    fputs("<nav><a href=\"#runs\">runs</a><a href=\"#compare\">compare</a>", f);
    if (rp->n_sweeps)
        fputs("<a href=\"#sweep\">sweep</a>", f);
    fputs("<a href=\"#curves\">curves</a>", f);
    if (rp->isoflop)
        fputs("<a href=\"#isoflop\">isoFLOP</a>", f);
    for (int j = 0; j < rp->rs.g.n_groups; j++)
        if (group_routed(rp, j)) {
            fputs("<a href=\"#group-", f);
            html_id(f, rp->folders[j]);
            fputs("\">", f);
            html_text(f, rp->rs.g.groups[j].name);
            fputs("</a>", f);
        }
    fputs("</nav>\n", f);
}

static void write_runs_table(FILE *f, const report *rp)
{
    const an_runset *rs = &rp->rs;
    fprintf(f, "<h2 id=\"runs\">Runs</h2>\n<p>%d run%s in %d group%s of replicates (runs whose "
               "configs differ only in [run] name, out, seed, init_seed or data_seed).</p>\n"
               "<table>\n<tr><th>run</th><th>group</th><th>seed</th><th>layers</th><th>steps</th>"
               "<th>state</th><th>training-FLOP budget</th><th>file</th></tr>\n",
            rs->n, rs->n == 1 ? "" : "s", rs->g.n_groups, rs->g.n_groups == 1 ? "" : "s");
    for (int i = 0; i < rs->n; i++) {
        const an_run *r = &rs->runs[i];
        char b[32] = "-";
        if (r->cfg->flops_budget > 0)
            number_label(b, (int)sizeof(b), r->cfg->flops_budget, 4);
        fputs("<tr><td>", f);
        html_text(f, r->name);
        fputs("</td><td>", f);
        html_text(f, rs->g.groups[rs->g.group_of[i]].name);
        fprintf(f, "</td><td>%llu</td><td>", (unsigned long long)r->cfg->seed);
        html_text(f, r->kinds);
        fprintf(f, "</td><td>%ld / %ld</td><td>%s</td><td>%s</td><td>", r->done, r->planned,
                r->complete ? "complete" : "incomplete", b);
        html_text(f, r->path);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void write_group(FILE *f, const report *rp, int j)
{
    const run_group *grp = &rp->rs.g.groups[j];
    const an_run *first = &rp->rs.runs[grp->members[0]];
    const report_run *r = &rp->runs[grp->members[0]];
    char path[3 * RUN_PATH_LEN];
    fputs("<h2 id=\"group-", f);
    html_id(f, rp->folders[j]);
    fputs("\">", f);
    html_text(f, grp->name);
    fputs("</h2>\n<p>", f);
    html_text(f, first->kinds);
    fprintf(f, "; %d replicate%s:", grp->n, grp->n == 1 ? "" : "s");
    for (int m = 0; m < grp->n; m++) {
        const an_run *rm = &rp->rs.runs[grp->members[m]];
        fputs(m ? ", " : " ", f);
        html_text(f, rm->name);
        fprintf(f, " (seed %llu, %ld of %ld steps)", (unsigned long long)rm->cfg->seed, rm->done,
                rm->planned);
    }
    fputs(".</p>\n", f);
    if (r->routed) {
        char file[96];
        fprintf(f, "<p>Routing of the first replicate, ");
        html_text(f, first->name);
        fprintf(f, ", at step %ld:</p>\n", r->heat_step);
        snprintf(file, sizeof(file), "heatmap_step%ld_seq0.png", r->heat_step);
        asset(path, sizeof(path), rp, rp->folders[j], file);
        if (!image(rp, f, path, "routing heatmap"))
            html_note(f, "heatmap failed (see its message)");
        asset(path, sizeof(path), rp, rp->folders[j], "weights.png");
        if (r->scores && !image(rp, f, path, "router weights"))
            html_note(f, "weights failed (see its message)");
        asset(path, sizeof(path), rp, rp->folders[j], "tokens.png");
        if (r->labels && !image(rp, f, path, "take rate per token class"))
            html_note(f, "tokens failed (see its message)");
        asset(path, sizeof(path), rp, rp->folders[j], "routing.png");
        if (!image(rp, f, path, "routing analytics"))
            html_note(f, "routing analytics failed (see its message)");
        asset(path, sizeof(path), rp, rp->folders[j], "routing.md");
        if (fresh(rp, path)) {
            fputs("<details><summary>routing analytics (tables)</summary>\n", f);
            markdown(rp, f, path);
            fputs("</details>\n", f);
        }
        asset(path, sizeof(path), rp, rp->folders[j], "depth.png");
        if (!image(rp, f, path, "compute per token"))
            html_note(f, "compute per token failed (see its message)");
        asset(path, sizeof(path), rp, rp->folders[j], "tokens.md");
        if (r->labels && fresh(rp, path)) {
            fputs("<details><summary>token classes and positions (tables)</summary>\n", f);
            markdown(rp, f, path);
            fputs("</details>\n", f);
        }
    } else {
        html_note(f, "no routing records (no routed layer, run.routing_every = 0, or none "
                     "recorded yet)");
    }
    if (r->config) {
        fputs("<details><summary>resolved config (first replicate)</summary>\n<pre>", f);
        html_text(f, r->config);
        fputs("</pre></details>\n", f);
    }
}

static void write_html(FILE *f, const report *rp)
{
    char path[3 * RUN_PATH_LEN];
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
    html_text(f, rp->dir);
    fprintf(f, " - mode report</title>\n<style>%s</style>\n</head>\n<body>\n<h1>Runs in ",
            html_style);
    html_text(f, rp->dir);
    fprintf(f, "</h1>\n<p>%d run%s. Written by <code>mode-analyze report</code>; the figures and "
               "tables are also in <code>", rp->rs.n, rp->rs.n == 1 ? "" : "s");
    html_text(f, rp->assets);
    fputs("/</code>.</p>\n", f);
    write_nav(f, rp);
    write_runs_table(f, rp);

    fputs("<h2 id=\"compare\">Compare</h2>\n", f);
    asset(path, sizeof(path), rp, NULL, "compare.md");
    if (!markdown(rp, f, path))
        html_note(f, "compare failed (see its message)");
    if (rp->n_sweeps)
        fputs("<h2 id=\"sweep\">Held-out loss against the swept keys</h2>\n", f);
    for (int k = 0; k < rp->n_sweeps; k++) {
        char file[RUN_KEY_LEN + 16];
        snprintf(file, sizeof(file), "sweep_%s.png", rp->sweep_keys[k]);
        asset(path, sizeof(path), rp, NULL, file);
        if (!image(rp, f, path, rp->sweep_keys[k]))
            html_note(f, "a sweep figure failed (see its message)");
        snprintf(file, sizeof(file), "sweep_%s.md", rp->sweep_keys[k]);
        asset(path, sizeof(path), rp, NULL, file);
        if (fresh(rp, path)) {
            fputs("<details><summary>the table</summary>\n", f);
            markdown(rp, f, path);
            fputs("</details>\n", f);
        }
    }
    fputs("<h2 id=\"curves\">Held-out loss</h2>\n", f);
    asset(path, sizeof(path), rp, NULL, "curves.png");
    if (!rp->n_curves) /* nothing drawn: an earlier report's figure is not this one */
        html_note(f, "no curves: no group has a held-out evaluation in every replicate yet");
    else if (!image(rp, f, path, "held-out loss curves"))
        html_note(f, "curves failed (see its message)");
    if (rp->isoflop) {
        fputs("<h2 id=\"isoflop\">isoFLOP analysis</h2>\n", f);
        asset(path, sizeof(path), rp, NULL, "isoflop.png");
        if (!image(rp, f, path, "isoFLOP analysis"))
            html_note(f, "isoflop failed (see its message)");
        asset(path, sizeof(path), rp, NULL, "isoflop_law.png");
        image(rp, f, path, "compute-optimal size and loss by both approaches");
        asset(path, sizeof(path), rp, NULL, "isoflop.md");
        markdown(rp, f, path);
    }
    for (int j = 0; j < rp->rs.g.n_groups; j++)
        write_group(f, rp, j);
    fputs("</body>\n</html>\n", f);
}

/* ---- the command ---------------------------------------------------------- */

/* The per-group figures: the first replicate's heatmap and weights, the
 * token classes over all replicates. */
static void group_figures(report *rp, const an_args *a, int j, const char **files)
{
    const run_group *grp = &rp->rs.g.groups[j];
    const report_run *r = &rp->runs[grp->members[0]];
    if (!r->routed)
        return;
    char sub[2 * RUN_PATH_LEN + 16];
    snprintf(sub, sizeof(sub), "%s/%s", rp->assets, rp->folders[j]);
    files[0] = rp->rs.runs[grp->members[0]].path;
    sub_command(rp, a, cmd_heatmap, "heatmap", files, 1, sub, NULL);
    if (r->scores)
        sub_command(rp, a, cmd_weights, "weights", files, 1, sub, NULL);
    sub_command(rp, a, cmd_routing, "routing", files, 1, sub, NULL);
    sub_command(rp, a, cmd_depth, "depth", files, 1, sub, NULL);
    if (!r->labels)
        return;
    /* the replicates compare's statistics are over (the complete ones when
     * there are any: in-progress runs are at other steps), with records */
    int n = 0;
    for (int pass = 0; pass < 2 && !n; pass++)
        for (int m = 0; m < grp->n; m++)
            if (rp->runs[grp->members[m]].labels && (pass || an_run_used(&rp->rs, grp->members[m])))
                files[n++] = rp->rs.runs[grp->members[m]].path;
    sub_command(rp, a, cmd_tokens, "tokens", files, n, sub, NULL);
}

int cmd_report(const an_args *a)
{
    report rp = { .dir = a->files[0] };
    char **paths = NULL, err[RUN_PATH_LEN + 256], out_dir[RUN_PATH_LEN], page[RUN_PATH_LEN + 64];
    const char **files = NULL;
    int n_paths = 0, rc = EXIT_BAD_INPUT;
    an_text t = { 0 };
    if (list_run_files(rp.dir, &paths, &n_paths, err, (int)sizeof(err)))
        return an_fail(a, EXIT_BAD_INPUT, "%s", err);
    if (an_read_run_paths(a, (const char *const *)paths, n_paths, &rp.rs))
        goto done;
    int n = rp.rs.n, G = rp.rs.g.n_groups;
    rp.runs = calloc((size_t)n, sizeof(report_run));
    rp.folders = calloc((size_t)G, sizeof(*rp.folders));
    files = malloc((size_t)n * sizeof(char *));
    rp.isoflop = is_isoflop(&rp.rs);
    if (!rp.runs || !rp.folders || !files || sweep_keys(&rp)) {
        an_fail(a, rc, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (read_report_run(a, rp.rs.runs[i].path, &rp.runs[i]))
            goto done;
    for (int j = 0; j < G; j++)
        folder_name(rp.rs.g.groups[j].name, rp.folders[j], (int)sizeof(rp.folders[j]));
    snprintf(out_dir, sizeof(out_dir), "%s", a->out ? a->out : rp.dir);
    snprintf(rp.assets, sizeof(rp.assets), "%s/report", out_dir);
    if (make_dir(a, out_dir) || make_dir(a, rp.assets) || stamp_time(a, rp.assets, &rp.since))
        goto done;
    for (int i = 0; i < n; i++)
        files[i] = rp.rs.runs[i].path;
    sub_command(&rp, a, cmd_compare, "compare", files, n, rp.assets, NULL);
    for (int k = 0; k < rp.n_sweeps; k++)
        sub_command(&rp, a, cmd_sweep, "sweep", files, n, rp.assets, rp.sweep_keys[k]);
    int n_curves = 0;
    for (int i = 0; i < n; i++) /* groups whose every replicate has an evaluation */
        if (rp.runs[i].evals > 0) {
            const run_group *grp = &rp.rs.g.groups[rp.rs.g.group_of[i]];
            bool all = true;
            for (int m = 0; m < grp->n; m++)
                all &= rp.runs[grp->members[m]].evals > 0;
            if (all)
                files[n_curves++] = rp.rs.runs[i].path;
        }
    rp.n_curves = n_curves;
    if (n_curves)
        sub_command(&rp, a, cmd_curves, "curves", files, n_curves, rp.assets, NULL);
    if (rp.isoflop)
        sub_command(&rp, a, cmd_isoflop, "isoflop", &rp.dir, 1, rp.assets, NULL);
    for (int j = 0; j < G; j++)
        group_figures(&rp, a, j, files);
    snprintf(page, sizeof(page), "%s/report.html", out_dir);
    if (an_text_begin(a, &t, page))
        goto done;
    write_html(t.f, &rp);
    if (an_text_commit(a, &t))
        goto done;
    printf("%d run%s in %d group%s; figures and tables in %s/\n", n, n == 1 ? "" : "s", G,
           G == 1 ? "" : "s", rp.assets);
    if (rp.failed)
        an_fail(a, EXIT_BAD_INPUT, "%d of the analyses failed (their messages are above); the "
                "page says which", rp.failed);
    rc = rp.failed ? EXIT_BAD_INPUT : 0;
done:
    an_text_abort(&t);
    for (int i = 0; rp.runs && i < rp.rs.n; i++)
        free(rp.runs[i].config);
    free(rp.runs);
    free(rp.folders);
    free(rp.sweep_keys);
    free(files);
    an_free_runs(&rp.rs);
    free_run_files(&paths, n_paths);
    return rc;
}
