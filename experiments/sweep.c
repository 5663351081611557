/* mode-exp sweep: run every config of a sweep file (sweep.h), each in its
 * own folder, in this process with the current MPI world, or side by side
 * in groups of its ranks (--ranks-per-run) that take the runs from one
 * queue; check them all before the first step, skip complete runs, resume
 * interrupted ones, then hand the folder to `mode-analyze report`. */
#include "experiments/cli.h"

#include "core/util/file.h"
#include "core/comm/comm.h"
#include "core/data/data.h"
#include "core/io/checkpoint.h"
#include "core/io/h5util.h"
#include "core/io/runfile.h"
#include "core/train/trainer.h"
#include "core/util/lock.h"
#include "core/util/num.h"
#include "core/util/signals.h"
#include "experiments/sweep.h"
#include "core/data/data.h"
#include "moe/registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


static const char usage_sweep[] =
    "usage: mode-exp sweep SWEEP.ini [section.key=value ...] [--dry-run] [--progress]\n"
    "                      [--no-report] [--threads N] [--ranks-per-run K] [--only RUN]\n"
    "                      [--slurm-array OUT.sbatch] [--no-tensorboard]\n"
    "  Trains every config of a sweep file (a grid over config keys, or an isoFLOP\n"
    "  design of budgets x model sizes x kinds; the format is in experiments/sweeps.md\n"
    "  and atop experiments/capacity.ini and isoflop.ini), each into <out>/<run name>/,\n"
    "  in this process with the current MPI world (start it under mpirun for data\n"
    "  parallelism).  Every config is checked before the first run: a bad value stops\n"
    "  the sweep with the sweep file's line.  A run whose run.h5 reaches its planned\n"
    "  steps is skipped, one with a checkpoint short of them resumed, the others\n"
    "  trained; one line per run.  Then `mode-analyze report <out>` ($MODE_ANALYZE,\n"
    "  beside mode-exp, or on PATH).  Overrides apply to every run.\n"
    "  --dry-run    list the runs, their planned steps and what would happen to each\n"
    "  --progress   print the training progress of every run\n"
    "  --no-report  do not run mode-analyze report at the end\n"
    "  --threads N  threads per rank (default: $OPENBLAS_NUM_THREADS, else cores / ranks\n"
    "               on the node)\n"
    "  --ranks-per-run K  split the P ranks of the job (P a multiple of K) into P/K\n"
    "               groups that train runs side by side, each run on K ranks with the\n"
    "               bits of `mpirun -n K mode-exp CONFIG`; the runs are queued longest\n"
    "               planned (training FLOPs) first and each group takes the next one\n"
    "               when it is free.  A run that fails at an agreement point ends only\n"
    "               that run; the exit status is 1, naming it, and a second start\n"
    "               resumes it (a failure inside a step ends the job, naming the run).\n"
    "               Default: every run on all P ranks\n"
    "  --only RUN   train run RUN of the sweep alone, on every rank (a job array's task;\n"
    "               the run folder's lock keeps two tasks off one run; no report)\n"
    "  --slurm-array OUT.sbatch  train nothing: write a SLURM batch script of one array\n"
    "               task per run (K = --ranks-per-run ranks each, default 1), each\n"
    "               `mode-exp sweep SWEEP.ini --only RUN` of line $SLURM_ARRAY_TASK_ID of\n"
    "               the run list OUT.sbatch.runs written beside it; without srun a task\n"
    "               runs under mpirun (K > 1) or alone\n"
    "  --no-tensorboard  no TensorBoard event file beside each run's run.h5 (as\n"
    "               `mode-exp --no-tensorboard`; the array's tasks take it too)\n";

typedef enum run_action { ACT_TRAIN, ACT_RESUME, ACT_SKIP } run_action;
static const char *const action_names[] = { "train", "resume", "complete" };

typedef struct sweep_opts {
    const char *file;
    int n_over;
    char **over;
    bool dry_run, progress, no_report;
    bool no_tensorboard;     /* no event files beside the runs' run.h5 (every run, every task) */
    int threads;
    bool threads_set;        /* --threads given (the job array's tasks take it) */
    int ranks_per_run;       /* 0: every run on the whole world */
    const char *only, *slurm; /* --only RUN, --slurm-array OUT.sbatch */
} sweep_opts;

/* What a run folder holds: the last metrics row and evaluation of run.h5. */
typedef struct run_state {
    bool has_run, has_ckpt;
    long done;
    double loss, eval_topk, eval_causal, eval_step; /* eval_step: the last evaluated */
} run_state;

/* The options of sweep, one row each: a value-taking one reads the next
 * argument.  Each may be given once. */
enum { OPT_DRY_RUN, OPT_PROGRESS, OPT_NO_REPORT, OPT_THREADS, OPT_RANKS_PER_RUN, OPT_ONLY,
       OPT_SLURM_ARRAY, OPT_NO_TENSORBOARD, OPT_COUNT };
static const struct { const char *name; bool value; } sweep_options[OPT_COUNT] = {
    { "--dry-run", false }, { "--progress", false }, { "--no-report", false },
    { "--threads", true }, { "--ranks-per-run", true }, { "--only", true },
    { "--slurm-array", true }, { "--no-tensorboard", false },
};

static int parse_sweep_args(sweep_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof(*o));
    o->over = calloc((size_t)argc + 1, sizeof(char *));
    if (!o->over)
        return -ENOMEM;
    const char *seen[OPT_COUNT] = { 0 };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_sweep, stdout);
            exit(0);
        }
        int k = 0;
        while (k < OPT_COUNT && strcmp(a, sweep_options[k].name))
            k++;
        if (k == OPT_COUNT && a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "mode-exp sweep: unknown option %s (it takes --dry-run, --progress, "
                    "--no-report, --threads, --ranks-per-run, --only, --slurm-array, "
                    "--no-tensorboard)\n%s", a,
                    usage_sweep);
            return -EINVAL;
        }
        if (k == OPT_COUNT) {
            if (!o->file) {
                o->file = a;
                continue;
            }
            for (int j = 0; j < o->n_over; j++)
                if (cli_same_key(o->over[j], a)) {
                    fprintf(stderr, "mode-exp sweep: %s, then %s: one key given twice (the "
                            "last would win): give it once\n", o->over[j], a);
                    return -EINVAL;
                }
            o->over[o->n_over++] = argv[i];
            continue;
        }
        const char *v = sweep_options[k].value ? (i + 1 < argc ? argv[i + 1] : NULL) : a;
        if (seen[k]) {
            /* the last would win over the first without a word */
            if (sweep_options[k].value)
                fprintf(stderr, "mode-exp sweep: %s given twice (%s, then %s): give each "
                        "option once\n", a, seen[k], v ? v : "(missing)");
            else
                fprintf(stderr, "mode-exp sweep: %s given twice: give each option once\n", a);
            return -EINVAL;
        }
        if (sweep_options[k].value && !v) {
            fprintf(stderr, "mode-exp sweep: %s (missing): expected a value\n", a);
            return -EINVAL;
        }
        seen[k] = v;
        long t = 0;
        switch (k) {
        case OPT_DRY_RUN: o->dry_run = true; break;
        case OPT_PROGRESS: o->progress = true; break;
        case OPT_NO_REPORT: o->no_report = true; break;
        case OPT_THREADS:
        case OPT_RANKS_PER_RUN: {
            long hi = k == OPT_THREADS ? CLI_MAX_THREADS : 1 << 20;
            if (!num_parse_long(v, 1, hi, &t)) {
                fprintf(stderr, "mode-exp sweep: %s %s: expected a positive integer up to "
                        "%ld\n", a, v, hi);
                return -EINVAL;
            }
            *(k == OPT_THREADS ? &o->threads : &o->ranks_per_run) = (int)t;
            o->threads_set = o->threads_set || k == OPT_THREADS;
            break;
        }
        case OPT_ONLY: o->only = v; break;
        case OPT_SLURM_ARRAY: o->slurm = v; break;
        case OPT_NO_TENSORBOARD: o->no_tensorboard = true; break;
        default: break;
        }
        if (sweep_options[k].value)
            i++;
    }
    if (!o->file) {
        fputs(usage_sweep, stderr);
        return -EINVAL;
    }
    /* combinations that would ignore one of them */
    if (o->only && o->slurm) {
        fprintf(stderr, "mode-exp sweep: --only and --slurm-array: the script trains every "
                "run, one a task; give one of them\n");
        return -EINVAL;
    }
    if (o->only && o->ranks_per_run) {
        fprintf(stderr, "mode-exp sweep: --only %s and --ranks-per-run %d: one run trains on "
                "every rank of the job; give one of them\n", o->only, o->ranks_per_run);
        return -EINVAL;
    }
    if (o->slurm && (o->dry_run || o->progress || o->no_report)) {
        fprintf(stderr, "mode-exp sweep: --slurm-array writes a script and trains nothing: "
                "--dry-run, --progress and --no-report would change nothing\n");
        return -EINVAL;
    }
    if (o->dry_run && o->no_tensorboard) {
        fprintf(stderr, "mode-exp sweep: --dry-run trains nothing: --no-tensorboard would change "
                "nothing\n");
        return -EINVAL;
    }
    return o->threads ? 0 : cli_env_threads(&o->threads);
}

static double last_value(run_reader *rd, const char *name)
{
    double *v = NULL, x = (double)NAN;
    long n = 0;
    if (!run_reader_column(rd, name, &v, &n) && n > 0)
        x = v[n - 1];
    free(v);
    return x;
}

/* Read <dir>/run.h5 and see whether <dir>/ckpt.h5 exists.  A run file or a
 * checkpoint of another config is an error: the folder is some other run
 * (one written by a build without keys added since, at their defaults, is
 * this run: config_same_as). */
static int inspect_run(const char *dir, const run_config *cfg, const char *ini, run_state *s,
                       char *err, int err_len)
{
    char path[SWEEP_PATH_LEN + SWEEP_NAME_LEN + 32], ckpt[sizeof(path)];
    struct stat st;
    memset(s, 0, sizeof(*s));
    s->loss = s->eval_topk = s->eval_causal = s->eval_step = (double)NAN;
    snprintf(path, sizeof(path), "%s/run.h5", dir);
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt.h5", dir);
    s->has_ckpt = !stat(ckpt, &st);
    if (s->has_ckpt) {
        ckpt_meta meta;
        if (checkpoint_read_meta(ckpt, &meta, NULL, err, err_len))
            return -EIO;
        bool same = config_same_as(cfg, ini, meta.config);
        ckpt_meta_clear(&meta);
        if (!same) {
            snprintf(err, (size_t)err_len, "%s: a checkpoint of another config (the sweep "
                     "file or its base changed?): move the folder away or set [sweep] out "
                     "elsewhere", ckpt);
            return -EEXIST;
        }
    }
    if (stat(path, &st))
        return 0;
    run_reader *rd = NULL;
    if (open_run_reader(&rd, path, err, err_len))
        return -EIO;
    bool same = config_same_as(cfg, ini, run_reader_config(rd));
    double done = same ? last_value(rd, "metrics/step") : (double)NAN;
    s->done = isfinite(done) ? (long)done : 0;
    s->has_run = true;
    s->loss = last_value(rd, "metrics/loss");
    s->eval_topk = last_value(rd, "eval/loss_topk");
    s->eval_causal = last_value(rd, "eval/loss_causal");
    s->eval_step = last_value(rd, "eval/step");
    close_run_reader(&rd);
    if (!same) {
        snprintf(err, (size_t)err_len, "%s: a run of another config (the sweep file or its "
                 "base changed?): move the folder away or set [sweep] out elsewhere", path);
        return -EEXIST;
    }
    return 0;
}


/* The resolved config of run r: the base and the run's overrides. */
static int load_run_config(const sweep_plan *p, const sweep_run *r, run_config *cfg, int ranks,
                           char *err, int err_len)
{
    char *over[SWEEP_MAX_OVER], msg[1024];
    for (int i = 0; i < r->n_over; i++)
        over[i] = (char *)r->over[i].text;
    int rc = config_load(cfg, p->base, r->n_over, over, &mode_schema, ranks, msg, (int)sizeof(msg));
    if (rc)
        sweep_config_error(p, r, msg, err, err_len);
    return rc;
}

/* The where of a budget's message: the budgets line of an isoFLOP run. */
static int budget_line(const sweep_run *r)
{
    for (int i = 0; i < r->n_over; i++)
        if (!strncmp(r->over[i].text, "run.flops_budget=", 17))
            return r->over[i].line;
    return 0;
}

/* Runs a and b of the plan resolve to one config (their names apart): the
 * same run twice, which the report would count as two replicates (sd 0).
 * err names the overrides that differ only in spelling (lr = 1e-3 and
 * 0.001, seeds 1 and 01). */
static int same_runs(const sweep_plan *p, const sweep_run *a, const sweep_run *b, char *err,
                     int err_len)
{
    char diff[1024] = "";
    size_t used = 0;
    for (int i = 0; i < a->n_over; i++) {
        const char *ta = a->over[i].text, *eq = strchr(ta, '=');
        if (!eq || !strncmp(ta, "run.name=", 9))
            continue;
        for (int j = 0; j < b->n_over; j++) {
            const char *tb = b->over[j].text;
            if (strncmp(ta, tb, (size_t)(eq - ta + 1)) || !strcmp(ta, tb) || used >= sizeof(diff))
                continue;
            int w = snprintf(diff + used, sizeof(diff) - used, "%s%s (line %d) and %s (line %d)",
                             used ? ", " : "", ta, a->over[i].line, tb, b->over[j].line);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    snprintf(err, (size_t)err_len, "%s: runs %s and %s resolve to the same config%s%.900s: one "
             "run twice, which the report would count as two replicates; list each value once",
             p->path, a->name, b->name, diff[0] ? ", the same numbers spelt two ways: " : "",
             diff);
    return -EINVAL;
}

/* Every config, its planned steps and what its folder holds, before any
 * work.  Rank 0 reads the folders and tells the others. */
/* A command-line override of a kind's section that no layer of any run
 * reads would change nothing (as in training): refused naming it. */
static int check_overrides_read(const sweep_plan *p, const sweep_opts *o, int ranks, char *err,
                                int err_len)
{
    run_config *cfg = malloc(sizeof(run_config));
    char why[1024];
    int rc = cfg ? 0 : -ENOMEM;
    for (int i = 0; !rc && i < o->n_over; i++) {
        bool read = false;
        for (int r = 0; !rc && !read && r < p->n_runs; r++) {
            rc = load_run_config(p, &p->runs[r], cfg, ranks, err, err_len);
            read = !rc && !cli_check_overrides(cfg, 1, &o->over[i], why, (int)sizeof(why));
        }
        if (!rc && !read) {
            size_t len = strcspn(o->over[i], "=");
            while (len > 0 && o->over[i][len - 1] != '.')
                len--;
            snprintf(err, (size_t)err_len, "command line: %s: no layer of any run of the sweep "
                     "reads [%.*s], so it would change nothing", o->over[i],
                     len > 0 ? (int)len - 1 : 0, o->over[i]);
            rc = -EINVAL;
        }
    }
    free(cfg);
    return rc;
}

static int check_all(mode_ctx *ctx, const sweep_plan *p, int ranks, long *planned,
                     double *cost, run_action *act, char *err, int err_len)
{
    run_config *cfg = malloc(sizeof(run_config));
    char **resolved = calloc((size_t)(p->n_runs > 0 ? p->n_runs : 1), sizeof(char *));
    if (!cfg || !resolved) {
        free(cfg);
        free(resolved);
        return -ENOMEM;
    }
    int rc = 0;
    for (int i = 0; i < p->n_runs && !rc; i++) {
        const sweep_run *r = &p->runs[i];
        if ((rc = load_run_config(p, r, cfg, ranks, err, err_len)))
            break;
        /* the config but its name: no two runs may be the same */
        char name[sizeof(cfg->name)];
        memcpy(name, cfg->name, sizeof(name));
        cfg->name[0] = '\0';
        if (!(resolved[i] = config_to_ini(cfg))) {
            rc = -ENOMEM;
            break;
        }
        memcpy(cfg->name, name, sizeof(name));
        for (int j = 0; j < i && !rc; j++)
            if (!strcmp(resolved[j], resolved[i]))
                rc = same_runs(p, &p->runs[j], r, err, err_len);
        if (rc)
            break;
        double step_flops = config_train_flops_per_step(cfg);
        planned[i] = config_planned_steps(cfg, step_flops);
        cost[i] = step_flops * (double)planned[i];
        if (planned[i] <= 0) {
            char where[SWEEP_PATH_LEN + 32];
            int line = budget_line(r);
            if (line > 0)
                snprintf(where, sizeof(where), "%s:%d", p->path, line);
            else
                snprintf(where, sizeof(where), "%s", line < 0 ? "command line" : p->base);
            snprintf(err, (size_t)err_len, "%s: run.flops_budget = %g buys %s of run %s "
                     "(one step costs %.4g FLOPs): expected a %s budget", where,
                     cfg->flops_budget, planned[i] < 0 ? "more than 10^12 steps" : "no step",
                     r->name, step_flops, planned[i] < 0 ? "smaller" : "larger");
            rc = -EINVAL;
            break;
        }
        act[i] = ACT_TRAIN;
        if (ctx->rank == 0) {
            char dir[SWEEP_PATH_LEN + SWEEP_NAME_LEN + 8], *ini = config_to_ini(cfg);
            run_state s;
            snprintf(dir, sizeof(dir), "%s/%s", p->out, r->name);
            rc = ini ? inspect_run(dir, cfg, ini, &s, err, err_len) : -ENOMEM;
            free(ini);
            /* complete: every step, and the last step's evaluation (a stop
             * signal in it leaves the step done and the evaluation to the
             * resume: counted complete, the run's result was nan) */
            bool evaluated = cfg->eval_every <= 0 || !s.has_ckpt ||
                             (isfinite(s.eval_step) && s.eval_step >= (double)s.done);
            if (!rc && s.has_run && s.done >= planned[i] && evaluated)
                act[i] = ACT_SKIP;
            else if (!rc && s.has_run && s.has_ckpt)
                act[i] = ACT_RESUME;
        }
    }
    free(cfg);
    for (int i = 0; i < p->n_runs; i++)
        free(resolved[i]);
    free(resolved);
    /* rank 0 alone read the folders: its verdict and its message go to all
     * (every rank checked the configs; the first failure's message wins) */
    if (!rc && (rc = comm_fault(ctx->comm, "sweep-plan")))
        snprintf(err, (size_t)err_len, "planning the sweep failed (injected)");
    if (!(rc = comm_agree(ctx->comm, rc, err, err_len)) && p->n_runs > 0)
        rc = comm_bcast(ctx->comm, act, (size_t)p->n_runs * sizeof(run_action), 0);
    return rc;
}

typedef struct progress {
    const char *name;
} progress;

static void print_progress(const train_log *l, void *user)
{
    const progress *pr = user;
    if (!l->eval_late) /* a late evaluation's step had its line before the stop */
        printf("  %s step %ld/%ld  loss %.4f  lr %.2e  %.0f tok/s\n", pr->name, l->step,
               l->total, l->loss, l->lr, l->tokens_per_s);
    if (l->has_eval)
        printf("  %s eval %ld  held-out loss: topk %.4f  causal %.4f\n", pr->name, l->step,
               l->eval_topk, l->eval_causal);
    fflush(stdout);
}

/* The run this process trains now, and where, for the message of a failure
 * inside a step (sweep_fatal). */
static const char *fatal_run;
static int fatal_group = -1;

/* A rank failed where the other ranks of its group wait in a collective it
 * will not reach: MPI cannot end one group's ranks alone (Open MPI's
 * MPI_Abort, on any communicator, ends every rank of the job), so the
 * whole sweep stops, naming the run; a second start resumes it. */
static void sweep_fatal(mode_ctx *ctx, const char *msg)
{
    char why[3600];
    if (fatal_group >= 0)
        snprintf(why, sizeof(why), "run %s (group %d, world rank %d): %s; a failure inside "
                 "a step ends the whole sweep (MPI cannot stop one group alone): run it "
                 "again to resume", fatal_run ? fatal_run : "?", fatal_group,
                 comm_world_rank(ctx ? ctx->comm : NULL), msg);
    else
        snprintf(why, sizeof(why), "run %s: %s", fatal_run ? fatal_run : "?", msg);
    cli_fatal_stop(ctx, why);
}

/* Train (or resume) one run; the run's line comes after. */
static int do_run(mode_ctx *ctx, const sweep_plan *p, const sweep_run *r, bool resume,
                  const sweep_opts *o, int threads, int argc, char **argv, char *err,
                  int err_len)
{
    run_config *cfg = malloc(sizeof(run_config));
    if (!cfg)
        return -ENOMEM;
    int rc = load_run_config(p, r, cfg, ctx->size, err, err_len);
    if (!rc) {
        ctx->seed = cfg->seed;
        memset(ctx->timers, 0, sizeof(ctx->timers));
        progress pr = { r->name };
        trainer_opts to = { .resume = resume, .log = o->progress ? print_progress : NULL,
                            .no_tensorboard = o->no_tensorboard,
                            .log_user = &pr, .argc = argc, .argv = argv,
                            .blas_threads = threads, .fatal = sweep_fatal,
                            /* the sweep inspected the folder: a run to train anew goes
                             * over whatever an earlier try of it left */
                            .overwrite = !resume };
        fatal_run = r->name;
        rc = train(cfg, mode_kind_ops, ctx, &to, err, err_len);
        fatal_run = NULL;
        if (rc && !err[0])
            snprintf(err, (size_t)err_len, "%s", strerror(-rc));
    }
    free(cfg);
    return rc;
}

/* One line per run: what happened, steps, the last training loss and
 * held-out losses from its run file, the time it took. */
static void report_run(const sweep_plan *p, int i, int outcome, long planned, double secs,
                       const char *why, const char *tail)
{
    static const char *const outcome_names[] = { "trained", "resumed", "skipped", "failed" };
    const sweep_run *r = &p->runs[i];
    int w = p->n_runs >= 100 ? 3 : p->n_runs >= 10 ? 2 : 1, nw = 0;
    for (int k = 0; k < p->n_runs; k++)
        nw = nw > (int)strlen(p->runs[k].name) ? nw : (int)strlen(p->runs[k].name);
    if (outcome == 3) {
        printf("[%*d/%d] %-*s  failed: %s%s\n", w, i + 1, p->n_runs, nw, r->name, why, tail);
        fflush(stdout);
        return;
    }
    char dir[SWEEP_PATH_LEN + SWEEP_NAME_LEN + 8], msg[1024], t[32] = "";
    snprintf(dir, sizeof(dir), "%s/%s", p->out, r->name);
    run_state s = { .loss = (double)NAN, .eval_topk = (double)NAN, .eval_causal = (double)NAN };
    run_config *cfg = malloc(sizeof(run_config));
    char *ini = NULL;
    if (cfg && !load_run_config(p, r, cfg, 0, msg, (int)sizeof(msg)))
        ini = config_to_ini(cfg);
    if (ini)
        inspect_run(dir, cfg, ini, &s, msg, (int)sizeof(msg));
    free(ini);
    free(cfg);
    if (secs >= 0)
        mode_format_duration(t, sizeof(t), secs);
    printf("[%*d/%d] %-*s  %-7s %6ld/%ld steps  loss %.4f  held-out %.4f (causal %.4f)%s%s%s\n",
           w, i + 1, p->n_runs, nw, r->name, outcome_names[outcome], s.done, planned, s.loss,
           s.eval_topk, s.eval_causal, t[0] ? "  " : "", t, tail);
    fflush(stdout);
}

/* The plan, a run a line (its name and overrides), compared over the ranks;
 * each run's resolved config and data are compared again as it starts
 * (train). */
static int agree_plan(mode_ctx *ctx, const sweep_plan *p, char *err, int err_len)
{
    size_t cap = 2 * SWEEP_PATH_LEN + 64;
    for (int i = 0; i < p->n_runs; i++) {
        cap += SWEEP_NAME_LEN + 32;
        for (int k = 0; k < p->runs[i].n_over; k++)
            cap += strlen(p->runs[i].over[k].text) + 2;
    }
    char *text = malloc(cap);
    if (!text) {
        snprintf(err, (size_t)err_len, "out of memory");
        return -ENOMEM;
    }
    /* the base config's bytes too: the same path may hold another file on
     * another node (its overrides' keys are compared again per run) */
    char fp[DATA_FINGERPRINT_LEN] = "", why[256];
    if (file_fingerprint(p->base, fp, sizeof(fp), why, sizeof(why)))
        snprintf(fp, sizeof(fp), "unreadable");
    size_t at = (size_t)snprintf(text, cap, "sweep base=%s (%s)\nsweep runs=%d\n", p->base, fp,
                                 p->n_runs);
    for (int i = 0; i < p->n_runs; i++) {
        at += (size_t)snprintf(text + at, cap - at, "sweep run %d=%s:", i + 1, p->runs[i].name);
        for (int k = 0; k < p->runs[i].n_over; k++)
            at += (size_t)snprintf(text + at, cap - at, " %s", p->runs[i].over[k].text);
        at += (size_t)snprintf(text + at, cap - at, "\n");
    }
    int rc = comm_agree_text(ctx->comm, text, err, err_len);
    free(text);
    return rc;
}

int cmd_sweep(mode_ctx *ctx, int argc, char **argv)
{
    sweep_opts o;
    if (parse_sweep_args(&o, argc - 2, argv + 2)) {
        free(o.over);
        return 2;
    }
    /* ranks per run: groups of k ranks each train runs of their own */
    int k = o.ranks_per_run ? o.ranks_per_run : o.slurm ? 1 : ctx->size;
    if (!o.slurm && ctx->size % k) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp sweep: --ranks-per-run %d: the job's %d rank(s) do not "
                    "split into groups of %d: start a multiple of %d ranks\n", k, ctx->size, k,
                    k);
        free(o.over);
        return 2;
    }
    int groups = o.slurm ? 1 : ctx->size / k;
    h5_quiet();
    sweep_plan p;
    char err[2048] = "";
    long *planned = NULL;
    double *cost = NULL, *outcomes = NULL;
    int *order = NULL;
    comm_counter *next = NULL;
    run_action *act = NULL;
    comm *gcomm = NULL;
    int rc = sweep_plan_load(&p, o.file, o.n_over, o.over, err, (int)sizeof(err)), code = 2;
    folder_lock lock = folder_lock_none();
    if (!rc && o.only)
        rc = sweep_keep_only(&p, o.only, err, (int)sizeof(err));
    /* every rank the same plan (docs/robustness.md, "Ranks that disagree"):
     * a sweep file that differs on one rank would give it other runs, or
     * another number of them */
    if (!(rc = comm_agree(ctx->comm, rc, err, (int)sizeof(err))) &&
        (rc = agree_plan(ctx, &p, err, (int)sizeof(err))))
        code = 1; /* not a bad sweep file: ranks that were started apart */
    if (!rc) {
        size_t n = (size_t)(p.n_runs > 0 ? p.n_runs : 1);
        planned = calloc(n, sizeof(long));
        act = calloc(n, sizeof(run_action));
        cost = calloc(n, sizeof(double));
        outcomes = calloc(n, sizeof(double));
        order = calloc(n, sizeof(int));
        rc = planned && act && cost && outcomes && order
                 ? check_all(ctx, &p, k, planned, cost, act, err, (int)sizeof(err))
                 : -ENOMEM;
    }
    if (!rc)
        rc = check_overrides_read(&p, &o, k, err, (int)sizeof(err));
    if (!rc)
        sweep_queue(p.n_runs, cost, order);
    if (!rc && o.slurm) { /* the job array's script, and no training */
        if (ctx->rank == 0)
            rc = sweep_write_slurm(o.slurm, &p, order, k, o.threads_set ? o.threads : 0,
                                   o.no_tensorboard, o.n_over, o.over, err, (int)sizeof(err));
        if (!(rc = comm_agree(ctx->comm, rc, err, (int)sizeof(err))) && ctx->rank == 0)
            printf("# %s: %d array tasks of %d rank(s), one per run of %s (run list %s.runs)\n",
                   o.slurm, p.n_runs, k, p.path, o.slurm);
        else
            code = 1;
        if (!rc) {
            code = 0;
            goto done;
        }
    }
    /* the out folder is this sweep's while it runs: a second sweep there is
     * refused at once, naming this one (a dry run writes nothing; a sweep
     * refused above created nothing).  One run (--only, a job array's task)
     * is kept off its folder by the run's own lock, so that the tasks of
     * one sweep go side by side. */
    if (!rc && !o.dry_run) {
        if (ctx->rank == 0 && (rc = file_make_dirs(p.out)))
            snprintf(err, sizeof(err), "%s: cannot create the sweep's folder: %s", p.out,
                     strerror(-rc));
        else if (ctx->rank == 0 && !o.only)
            rc = folder_lock_take(&lock, p.out, "sweep", err, (int)sizeof(err));
        if ((rc = comm_agree(ctx->comm, rc, err, (int)sizeof(err))))
            code = 1; /* not a bad sweep file: a folder in use or unwritable */
    }
    if (rc) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp sweep: %s\n", err[0] ? err : strerror(-rc));
        goto done;
    }
    cli c = { .threads = o.threads };
    int threads = choose_threads(&c, ctx), counts[3] = { 0, 0, 0 };
    for (int i = 0; i < p.n_runs; i++)
        counts[act[i]]++;
    if (ctx->rank == 0) {
        char shape[96];
        if (groups > 1)
            snprintf(shape, sizeof(shape), "%d groups of %d rank(s)", groups, k);
        else
            snprintf(shape, sizeof(shape), "%d rank(s)", k);
        printf("# sweep %s (%s over %s): %d runs into %s/: %d to train, %d to resume, %d "
               "complete; %s x %d thread(s)\n", p.path,
               p.isoflop ? "isoFLOP design" : "grid", p.base, p.n_runs, p.out,
               counts[ACT_TRAIN], counts[ACT_RESUME], counts[ACT_SKIP], shape, threads);
        if (o.dry_run)
            for (int q = 0; q < p.n_runs; q++) { /* in the queue's order */
                int i = order[q];
                printf("%-32s %7ld steps  %-8s", p.runs[i].name, planned[i],
                       action_names[act[i]]);
                for (int j = 0; j < p.runs[i].n_over - 2; j++) /* not run.out, run.name */
                    printf("  %s", p.runs[i].over[j].text);
                printf("\n");
            }
        fflush(stdout);
    }
    code = 0;
    if (o.dry_run)
        goto done;
    /* the group's communicator: its ranks in the world's order; a run's
     * collectives stay within it, so that it trains as `mpirun -n k`; the
     * groups take their runs from one queue by a shared counter (world
     * rank 0's), so that a group free early takes the next run */
    mode_ctx g = *ctx;
    int me = ctx->rank / k;
    if (groups > 1) {
        if (!(rc = comm_split(ctx->comm, me, &gcomm)))
            rc = comm_counter_create(ctx->comm, &next);
        if ((rc = comm_agree(ctx->comm, rc, err, (int)sizeof(err)))) {
            if (ctx->rank == 0)
                fprintf(stderr, "mode-exp sweep: splitting the ranks into groups failed: %s\n",
                        err[0] ? err : strerror(-rc));
            code = 1;
            goto done;
        }
        fatal_group = me;
        g.comm = gcomm;
        g.rank = comm_rank(gcomm);
        g.size = comm_size(gcomm);
    }
    double t_all = mode_now(), done_cost = 0.0;
    int sig = 0;
    long q = 0, taken = 0; /* the queue's position of this group's run; runs it took */
    /* a stop signal between runs, or during one (train), ends the group's
     * queue; the others stop at their next run */
    stop_signals_install();
    for (;;) {
        sig = stop_signal_pending();
        comm_allreduce_max_int(g.comm, &sig);
        if (sig)
            break;
        /* the next run: group rank 0 takes it, its group learns which */
        if (groups == 1)
            q = taken;
        else if (g.rank == 0 && comm_counter_next(next, &q))
            q = -1; /* cannot take one: this group stops; its runs are not reached */
        if (comm_bcast(g.comm, &q, sizeof(q), 0) || q < 0 || q >= p.n_runs)
            break;
        taken++;
        int i = order[q];
        const sweep_run *r = &p.runs[i];
        double t0 = mode_now();
        err[0] = '\0';
        rc = act[i] == ACT_SKIP ? 0
                                : do_run(&g, &p, r, act[i] == ACT_RESUME, &o, threads, argc,
                                         argv, err, (int)sizeof(err));
        int outcome = rc ? 3 : act[i] == ACT_SKIP ? 2 : act[i] == ACT_RESUME ? 1 : 0;
        done_cost += cost[i];
        if (rc == -EINTR) { /* a signal: the checkpoint is written */
            sig = train_stop_signal();
            sig = sig ? sig : 2;
            break;
        }
        if (g.rank == 0) {
            /* the runs not yet taken: about those past the one each group
             * took last (the groups go through the queue about together) */
            double left = 0.0;
            for (long x = q + groups; x < p.n_runs; x++)
                left += cost[order[x]];
            char tail[96] = "";
            sweep_format_eta(tail, sizeof(tail), done_cost, mode_now() - t_all, left, groups);
            if (groups > 1) {
                size_t at = strlen(tail);
                snprintf(tail + at, sizeof(tail) - at, "  (group %d)", me);
            }
            outcomes[i] = outcome + 1;
            report_run(&p, i, outcome, planned[i], outcome == 2 ? -1.0 : mode_now() - t0, err,
                       tail);
        }
    }
    /* every group done (or stopped): what became of each run, and a signal
     * of any, to world rank 0; a group that waits here for the others keeps
     * the stop handlers, so that a signal meanwhile ends it with them */
    comm_allreduce_max_int(ctx->comm, &sig);
    rc = p.n_runs > 0 ? comm_allreduce_sum_double(ctx->comm, outcomes, p.n_runs) : 0;
    int late = stop_signal_pending(); /* one that came while this group waited */
    comm_allreduce_max_int(ctx->comm, &late);
    sig = sig ? sig : late;
    stop_signals_restore();
    if (rc) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp sweep: gathering the groups' outcomes failed\n");
        code = 1;
        goto done;
    }
    int done_as[5] = { 0, 0, 0, 0, 0 }; /* trained, resumed, skipped, failed, not reached */
    for (int i = 0; i < p.n_runs; i++)
        done_as[outcomes[i] >= 1.0 && outcomes[i] <= 4.0 ? (int)outcomes[i] - 1 : 4]++;
    if (sig) {
        if (ctx->rank == 0)
            printf("# stopped by signal %d with %d run(s) not finished; run the sweep again to "
                   "go on\n", sig, done_as[4]);
        code = 128 + sig;
        goto done;
    }
    if (ctx->rank == 0) {
        char t[32];
        mode_format_duration(t, sizeof(t), mode_now() - t_all);
        printf("# %d runs: %d trained, %d resumed, %d skipped, %d failed in %s\n", p.n_runs,
               done_as[0], done_as[1], done_as[2], done_as[3], t);
        fflush(stdout);
        if (done_as[3] || done_as[4]) {
            /* one write: unbuffered stderr written in pieces was cut by
             * another line in mpirun's merged output */
            char names[4096] = "";
            size_t at = 0;
            for (int i = 0; i < p.n_runs && at < sizeof(names); i++)
                if (!(outcomes[i] >= 1.0 && outcomes[i] <= 3.0))
                    at += (size_t)snprintf(names + at, sizeof(names) - at, " %s",
                                           p.runs[i].name);
            fprintf(stderr, "mode-exp sweep: %d run(s) failed:%s; run the sweep again to resume "
                    "them\n", done_as[3] + done_as[4], names);
        }
    }
    code = done_as[3] || done_as[4] ? 1 : 0;
    if (ctx->rank == 0 && !o.no_report && !o.only && sweep_run_report(p.out))
        code = 1;
done:
    comm_counter_free(&next);
    comm_free(&gcomm);
    folder_lock_release(&lock);
    free(planned);
    free(act);
    free(cost);
    free(outcomes);
    free(order);
    sweep_plan_free(&p);
    free(o.over);
    return code;
}
