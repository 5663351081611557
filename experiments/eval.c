/* mode-exp eval: a checkpoint's held-out loss; with --routing, its loss
 * under counterfactual routing decisions paired with the learned ones
 * (core/train/counterfactual.h); with --dial, the compute dial: the loss
 * against executed FLOPs as one routing key of the checkpoint takes a list
 * of values. */
#include "experiments/cli.h"
#include "core/data/tokenizer.h"

#include "core/comm/comm.h"
#include "core/io/checkpoint.h"
#include "core/kernels/matmul.h"
#include "core/train/counterfactual.h"
#include "core/train/trainer.h"
#include "core/util/outfile.h"
#include "core/util/file.h"
#include "experiments/json.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_eval[] =
    "usage: mode-exp eval CKPT [section.key=value ...] [--data PATH] [--mode topk|causal]\n"
    "                          [--windows N] [--json] [--routing LIST [--routing-layers L]\n"
    "                          [--seed S] [--record FILE] [--csv FILE]] [--dial KEY=V1,V2,...]\n"
    "  Mean next-token loss of the checkpoint over evaluation windows of S+1 tokens\n"
    "  (window w = tokens [w*S, w*S+S]).\n"
    "  section.key=value  a kind's key changed for this evaluation (the compute dial:\n"
    "                 mod.capacity=0.25, moe.capacity_factor=0, moe.top_k=2, layer.3.capacity=..);\n"
    "                 checked as in a config; keys that change tensors, the run's own\n"
    "                 ([run], [data], [model], [optim]) and those of a section no layer of\n"
    "                 the model reads are refused\n"
    "  --data PATH    a .txt, .bin or .u32 file: its windows, from the start of the file;\n"
    "                 brown or synthetic: the held-out split (default: the run's\n"
    "                 data.val_source, else the held-out split of its data.source)\n"
    "  --mode M       topk (routing over the whole sequence, as in training) or causal\n"
    "                 (the causal rule of MODEL.md; default)\n"
    "  --windows N    use N windows spread evenly over the data (default: all)\n"
    "  --json         print one JSON object a line\n"
    "  --routing LIST counterfactual routing, each policy against the learned decisions on\n"
    "                 the same windows (paired): random (as many tokens or choices as learned,\n"
    "                 drawn at random, --seed), bottom (as many tokens, the lowest scores),\n"
    "                 shuffle (the learned decisions of the window half the list away),\n"
    "                 replay:FILE[@STEP] (decisions of an eval --record file or a run's routing\n"
    "                 records), noop-none / noop-all (integrated: the no-op never / always)\n"
    "  --routing-layers L  only in layers L (\"1,3\"; default: every layer that takes it)\n"
    "  --record FILE  write the learned decisions, tokens and labels of every window\n"
    "  --csv FILE     with --routing, --record or --dial: write its table as CSV\n"
    "                 (policies, and per token class; or the dial's rows)\n"
    "  --dial KEY=V1,V2,...  evaluate once for each value of one kind's key; with --csv the\n"
    "                 rows for mode-analyze dial\n"
    "  The loss is the mean over windows of each window's mean loss, with its standard\n"
    "  error over windows.\n";

/* A text file as the tokens of the tokenizer at tpath, in a temporary
 * token file (unlinked once open: *d reads it through its descriptor). */
static int load_encoded_text(const char *src, const char *tpath, const run_config *cfg,
                             dataset **d, char *err, int err_len)
{
    tokenizer *tk = NULL;
    char *text = NULL, dir[64] = "/tmp/mode-eval-XXXXXX", tmp[96] = "";
    int32_t *ids = NULL;
    long n_ids = 0;
    size_t n = 0;
    int rc = tokenizer_load(&tk, tpath, err, err_len);
    if (!rc) /* through the one checked open: a FIFO is refused, not waited on */
        rc = file_read_all(src, &text, &n, err, err_len);
    if (!rc)
        rc = tokenizer_encode(tk, text, n, &ids, &n_ids, err, err_len);
    int fd = -1;
    if (!rc && mkdtemp(dir)) {
        snprintf(tmp, sizeof(tmp), "%s/tokens.bin", dir);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    }
    if (!rc && fd < 0) {
        snprintf(err, (size_t)err_len, "%s: %s", tmp, strerror(errno));
        rc = -EIO;
    }
    uint16_t *t16 = rc ? NULL : malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof(uint16_t));
    for (long i = 0; t16 && i < n_ids; i++)
        t16[i] = (uint16_t)ids[i];
    if (fd >= 0 && (!t16 || write(fd, t16, (size_t)n_ids * 2) != (ssize_t)(n_ids * 2))) {
        snprintf(err, (size_t)err_len, "%s: cannot write the encoded %s", tmp, src);
        rc = -EIO;
    }
    if (fd >= 0)
        close(fd);
    if (!rc)
        rc = load_eval_file(d, tmp, cfg->vocab, cfg->seq_len, err, err_len);
    if (!rc) /* messages and the ranks' agreement name the text, not the temporary */
        snprintf((*d)->source->path, sizeof((*d)->source->path), "%.400s (encoded by %.80s)",
                 src, tpath);
    if (fd >= 0)
        unlink(tmp);
    if (tmp[0])
        rmdir(dir);
    free(t16);
    free(ids);
    free(text);
    tokenizer_free(&tk);
    return rc;
}

/* The evaluation data of a checkpoint: --data, or the run's held-out split;
 * with the run's tokenizer (tpath, "" for none) a text file is encoded by
 * it, and the bytes it stands for give bits per byte. */
static int load_eval_data(const cli *c, const run_config *cfg, const char *tpath, dataset **d,
                          char *err, int err_len)
{
    bool held = !c->data && strcmp(cfg->val_source, "none") != 0;
    const char *src = held ? cfg->val_source : c->data ? c->data : cfg->source;
    size_t sl = strlen(src);
    bool tokens = sl > 4 && (!strcmp(src + sl - 4, ".bin") || !strcmp(src + sl - 4, ".u32"));
    if (tpath[0] && !tokens) {
        if (cfg->vocab > 65536) {
            snprintf(err, (size_t)err_len, "%s: encoding text for a vocab past 65536 is not "
                     "done here: give its tokens (.u32)", src);
            return -EINVAL;
        }
        int rc = load_encoded_text(src, tpath, cfg, d, err, err_len);
        return rc ? rc : dataset_use_tokenizer(*d, tpath, err, err_len);
    }
    if (tpath[0]) {
        int rc = load_eval_data(c, cfg, "", d, err, err_len);
        return rc ? rc : dataset_use_tokenizer(*d, tpath, err, err_len);
    }
    if (cfg->vocab != 256 && !tokens) {
        snprintf(err, (size_t)err_len, "%s: text is read as bytes (tokens of a 256-token "
                 "vocabulary), and this checkpoint's vocabulary is %d: give a token file "
                 "(.bin, .u32) of its tokens", src, cfg->vocab);
        return -EINVAL;
    }
    bool file = held || (c->data && strcmp(c->data, "brown") && strcmp(c->data, "synthetic"));
    return file ? load_eval_file(d, src, cfg->vocab, cfg->seq_len, err, err_len)
                : load_dataset(d, src, NULL, cfg->vocab, cfg->val_fraction, cfg->seq_len, NULL,
                               err, err_len);
}

/* The evaluation data's split and fingerprint, compared over the ranks. */
static int agree_eval_data(mode_ctx *ctx, const dataset *d, char *err, int err_len)
{
    if (ctx->size == 1) /* nothing to compare: no file read for it */
        return 0;
    char fp[2048], text[3072];
    int rc = dataset_fingerprint(d, fp, sizeof(fp), err, err_len);
    if ((rc = comm_agree(ctx->comm, rc, err, err_len)))
        return rc;
    dataset_describe(d, fp, text, sizeof(text));
    return comm_agree_text(ctx->comm, text, err, err_len);
}

static int load_model(mode_ctx *ctx, const cli *c, int n_over, char *const *over,
                      run_config *cfg, model **m, ckpt_meta *meta, char *err, int err_len)
{
    int rc = load_checkpoint_model(c->config, cfg, m, 16, ctx, true, n_over, over, meta, err,
                                   err_len);
    if (!rc && !strcmp(cfg->precision, "bf16")) { /* evaluated as it was trained */
        matmul_bf16_prepare();
        (*m)->bf16 = true;
    }
    ctx->seed = cfg->init_seed; /* a random router draws as in training */
    return rc;
}

/* A forward failure on one rank only: the others may wait in a collective. */
static void fail_local(mode_ctx *ctx, bool local, const char *err)
{
    if (local && ctx->size > 1) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "eval: rank %d: %.1000s; stopping every rank", ctx->rank, err);
        cli_fatal_stop(ctx, msg);
    }
}

static const char *mode_name(fwd_mode mode)
{
    return mode == FWD_EVAL_TOPK ? "topk" : "causal";
}

/* A result that is not finite is an error, never an output
 * (docs/robustness.md): what names it ("the loss", "policy random's
 * difference"), of ckpt (and setting, may be NULL). */
static int finite_result(const char *ckpt, const char *setting, const char *what, double v,
                         char *err, int err_len)
{
    if (isfinite(v))
        return 0;
    snprintf(err, (size_t)err_len, "%s%s%s: %s is %g, not a finite number: the model's outputs "
             "overflow (its weights, or the setting, make them non-finite); nothing printed",
             ckpt, setting ? " with " : "", setting ? setting : "", what, v);
    return -ERANGE;
}

/* ",v" (%.6g), or "," when v is not finite (a standard error of one
 * window, a p-value without one): a CSV cell is a number or empty. */
static void csv_opt(FILE *f, double v)
{
    fputc(',', f);
    if (isfinite(v))
        fprintf(f, "%.6g", v);
}

/* ---- the counterfactual table ------------------------------------------------ */

static void print_p(FILE *f, double p)
{
    if (isnan(p))
        fprintf(f, "%9s", "-");
    else if (p < 1e-16)
        fprintf(f, "%9s", "<1e-16");
    else
        fprintf(f, "%9.2g", p);
}

static void print_cf(const cli *c, const run_config *cfg, fwd_mode mode, const cf_result *r,
                     const routing_cli *rt)
{
    char where[256] = "every layer that takes it";
    if (rt->has_layers) {
        snprintf(where, sizeof(where), "layers");
        for (int l = 0; l < cfg->n_layers; l++)
            if (rt->layers[l])
                snprintf(where + strlen(where), sizeof(where) - strlen(where), " %d (%s)", l,
                         cfg->layers[l].kind);
    }
    printf("%s: %ld windows of %d tokens (%s); counterfactual routing in %s, seed %ld\n",
           c->config, r->windows, cfg->seq_len, mode_name(mode), where, c->seed);
    printf("%-10s %10s %9s %11s %9s %9s %13s %16s\n", "policy", "loss", "se", "vs learned",
           "se", "p", "same windows", "fwd FLOPs/token");
    for (int a = 0; a < r->n_arms; a++) {
        const cf_arm *x = &r->arms[a];
        printf("%-10s %10.6f %9.6f ", route_policy_names[x->policy], x->loss, x->se);
        if (a == 0)
            printf("%11s %9s %9s", "", "", "");
        else {
            printf("%+11.6f %9.6f ", x->diff, x->diff_se);
            print_p(stdout, x->p);
        }
        printf(" %6.0f/%-6ld %16.4g\n", x->identical, r->windows, x->flops_per_token);
    }
    if (!r->n_classes)
        return;
    printf("by the class of the predicted token: the loss, and each policy's difference to "
           "learned (its se over windows; p)\n");
    printf("%-10s %10s %10s", "class", "tokens", "learned");
    for (int a = 1; a < r->n_arms; a++)
        printf("  %-30s", route_policy_names[r->arms[a].policy]);
    printf("\n");
    for (int k = 0; k < r->n_classes; k++) {
        const cf_class *l0 = &r->arms[0].cls[k];
        if (l0->tokens <= 0)
            continue;
        printf("%-10s %10.0f %10.4f", r->class_names[k], l0->tokens, l0->loss);
        for (int a = 1; a < r->n_arms; a++) {
            const cf_class *x = &r->arms[a].cls[k];
            char cell[64];
            if (isnan(x->p))
                snprintf(cell, sizeof(cell), "%+.4f (%.4f)", x->diff, x->diff_se);
            else
                snprintf(cell, sizeof(cell), "%+.4f (%.4f; p %.2g)", x->diff, x->diff_se, x->p);
            printf("  %-30s", cell);
        }
        printf("\n");
    }
}

static void json_cf(fwd_mode mode, const cf_result *r)
{
    for (int a = 0; a < r->n_arms; a++) {
        const cf_arm *x = &r->arms[a];
        json_line j = json_begin(stdout, ", ");
        json_str(&j, "policy", route_policy_names[x->policy]);
        json_num(&j, "loss", 9, x->loss);
        json_num(&j, "se", 6, x->se);
        json_num(&j, "diff", 9, x->diff);
        json_num(&j, "diff_se", 6, x->diff_se);
        json_num(&j, "p", 4, x->p);
        json_int(&j, "identical_windows", (long)x->identical);
        json_int(&j, "windows", r->windows);
        json_num(&j, "flops_per_token", 6, x->flops_per_token);
        json_str(&j, "mode", mode_name(mode));
        json_end(&j);
    }
}

static int csv_cf(const char *path, const char *ckpt, fwd_mode mode, int S, const cf_result *r,
                  char *err, int err_len)
{
    out_file o;
    int rc = out_open(&o, path, err, err_len);
    if (rc)
        return rc;
    FILE *f = o.f;
    fprintf(f, "checkpoint,mode,policy,class,tokens,windows,loss,se,diff,diff_se,p,"
               "identical_windows,flops_per_token\n");
    for (int a = 0; a < r->n_arms; a++) {
        const cf_arm *x = &r->arms[a];
        fprintf(f, "%s,%s,%s,all,%.0f,%ld,%.9g", ckpt, mode_name(mode),
                route_policy_names[x->policy], (double)r->windows * S, r->windows, x->loss);
        csv_opt(f, x->se);
        fprintf(f, ",%.9g", x->diff);
        csv_opt(f, x->diff_se);
        csv_opt(f, x->p);
        fprintf(f, ",%.0f,%.6g\n", x->identical, x->flops_per_token);
        for (int k = 0; k < r->n_classes; k++) {
            const cf_class *cl = &x->cls[k];
            if (cl->tokens <= 0)
                continue;
            fprintf(f, "%s,%s,%s,%s,%.0f,%ld,%.9g,,%.9g", ckpt, mode_name(mode),
                    route_policy_names[x->policy], r->class_names[k], cl->tokens, r->windows,
                    cl->loss, cl->diff);
            csv_opt(f, cl->diff_se);
            csv_opt(f, cl->p);
            fprintf(f, ",,\n");
        }
    }
    return out_commit(&o, err, err_len);
}

/* --record and --csv: refused when one is an input of this evaluation (the
 * checkpoint, the data, the run's corpus and tokenizer, a replayed record;
 * by path or inode) or one of a run's own files (core/util/outfile.h), before
 * anything is evaluated.  Rank 0 checks; every rank agrees. */
static int check_outputs(mode_ctx *ctx, const cli *c, const run_config *cfg, const char *replay,
                         char *err, int err_len)
{
    const char *in[] = { c->config, c->data, cfg->source, cfg->val_source, cfg->tokenizer,
                         replay };
    int rc = 0;
    if (ctx->rank == 0) {
        const char *outs[] = { c->record, c->csv };
        for (int i = 0; !rc && i < 2; i++)
            if (outs[i])
                rc = out_check(outs[i], in, (int)(sizeof(in) / sizeof(in[0])), err, err_len);
    }
    return comm_agree(ctx->comm, rc, err, err_len);
}

static int counterfactual(mode_ctx *ctx, const cli *c, fwd_mode mode, model *m,
                          const run_config *cfg, long step, const dataset *d, char *err,
                          int err_len)
{
    routing_cli rt;
    if (parse_routing(c, cfg->n_layers, &rt))
        return 2;
    int rc = 0;
    if (mode == FWD_EVAL_CAUSAL)
        for (int p = 0; p < rt.n; p++)
            if (rt.policies[p] == ROUTE_BOTTOM) {
                snprintf(err, (size_t)err_len, "--routing bottom: the lowest scores of a whole "
                         "sequence are top-k's counterpart: give --mode topk");
                rc = -EINVAL;
            }
    for (int p = 0; !rc && p < rt.n; p++)
        rc = route_check(m, rt.policies[p], rt.has_layers ? rt.layers : NULL, false, err,
                         err_len);
    if (!rc)
        rc = check_outputs(ctx, c, cfg, rt.replay, err, err_len);
    route_book *replay = NULL;
    for (int p = 0; !rc && p < rt.n; p++)
        if (rt.policies[p] == ROUTE_REPLAY)
            rc = route_book_load(&replay, rt.replay, rt.replay_step, cfg->seq_len, err, err_len);
    if (rc) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp eval: %s\n", err);
        free_route_book(&replay);
        return 2;
    }
    cf_opts o = { .mode = mode, .windows = c->windows, .policies = rt.policies,
                  .n_policies = rt.n, .seed = (uint64_t)c->seed,
                  .layers = rt.has_layers ? rt.layers : NULL, .replay = replay,
                  .keep_book = c->record != NULL };
    cf_result r;
    rc = evaluate_counterfactual(m, ctx, d, &o, &r, err, err_len);
    fail_local(ctx, rc && r.local_failure, err);
    for (int a = 0; !rc && a < r.n_arms; a++) { /* every number of the table */
        const cf_arm *x = &r.arms[a];
        char what[96];
        const char *pn = route_policy_names[x->policy];
        snprintf(what, sizeof(what), "policy %s's loss", pn);
        rc = finite_result(c->config, NULL, what, x->loss, err, err_len);
        snprintf(what, sizeof(what), "policy %s's difference to learned", pn);
        if (!rc)
            rc = finite_result(c->config, NULL, what, x->diff, err, err_len);
        snprintf(what, sizeof(what), "policy %s's FLOPs a token", pn);
        if (!rc)
            rc = finite_result(c->config, NULL, what, x->flops_per_token, err, err_len);
        for (int k = 0; !rc && k < r.n_classes; k++) {
            if (x->cls[k].tokens <= 0)
                continue;
            snprintf(what, sizeof(what), "policy %s's loss on class %s", pn, r.class_names[k]);
            rc = finite_result(c->config, NULL, what, x->cls[k].loss, err, err_len);
            snprintf(what, sizeof(what), "policy %s's difference on class %s", pn,
                     r.class_names[k]);
            if (!rc)
                rc = finite_result(c->config, NULL, what, x->cls[k].diff, err, err_len);
        }
    }
    if (!rc && ctx->rank == 0) {
        if (c->json)
            json_cf(mode, &r);
        else
            print_cf(c, cfg, mode, &r, &rt);
        if (c->csv)
            rc = csv_cf(c->csv, c->config, mode, cfg->seq_len, &r, err, err_len);
    }
    if (c->record) { /* every rank: rank 0's CSV may have failed alone */
        /* the step of the version evaluated (one open: load_checkpoint_model) */
        char *ini = rc ? NULL : config_to_ini(cfg);
        if (!rc && ctx->rank == 0)
            rc = ini ? route_book_save(r.book, c->record, ini, step, cfg->seq_len, err, err_len)
                     : -ENOMEM;
        free(ini);
        rc = comm_agree(ctx->comm, rc, err, err_len);
        if (!rc && ctx->rank == 0 && !c->json)
            printf("# wrote the learned decisions of %ld windows to %s\n", r.windows, c->record);
    }
    if (rc && ctx->rank == 0)
        fprintf(stderr, "mode-exp eval: %s\n", err);
    free_route_book(&r.book);
    free_route_book(&replay);
    return rc ? 1 : 0;
}

/* ---- the dial ------------------------------------------------------------------- */

static int dial(mode_ctx *ctx, const cli *c, const run_config *cfg0, fwd_mode mode,
                const dataset *d, char *err, int err_len)
{
    const char *eq = strchr(c->dial, '=');
    if (!eq || eq == c->dial || !eq[1]) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp eval: --dial %s: expected KEY=V1,V2,... (one kind's key, "
                            "e.g. mod.capacity=0.0625,0.125,0.25)\n", c->dial);
        return 2;
    }
    if (check_outputs(ctx, c, cfg0, NULL, err, err_len)) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp eval: %s\n", err);
        return 2;
    }
    size_t klen = (size_t)(eq - c->dial);
    char **over = calloc((size_t)c->n_over + 1, sizeof(char *));
    char item[512];
    FILE *csv = NULL;
    out_file out = { 0 };
    int rc = over ? 0 : -ENOMEM, rows = 0;
    for (int i = 0; over && i < c->n_over; i++)
        over[i] = c->over[i];
    if (!rc && ctx->rank == 0 && c->csv && !(rc = out_open(&out, c->csv, err, err_len)))
        csv = out.f;
    rc = comm_agree(ctx->comm, rc, err, err_len);
    if (!rc && csv)
        fprintf(csv, "checkpoint,mode,key,value,windows,loss,se,flops_per_token\n");
    if (!rc && ctx->rank == 0 && !c->json)
        printf("%s: the dial of %.*s (%s)\n%-14s %10s %9s %16s %8s\n", c->config, (int)klen,
               c->dial, mode_name(mode), "value", "loss", "se", "fwd FLOPs/token", "windows");
    for (const char *v = eq + 1; !rc && *v;) {
        const char *e = strchr(v, ',');
        int vlen = (int)(e ? e - v : (long)strlen(v));
        snprintf(item, sizeof(item), "%.*s=%.*s", (int)klen, c->dial, vlen, v);
        over[c->n_over] = item;
        run_config cfg;
        model *m = NULL;
        eval_result ev = { 0 };
        rc = load_model(ctx, c, c->n_over + 1, over, &cfg, &m, NULL, err, err_len);
        if (!rc) {
            rc = evaluate(m, ctx, d, c->windows, mode, &ev, err, err_len);
            fail_local(ctx, rc && ev.local_failure, err);
        }
        if (!rc)
            rc = finite_result(c->config, item, "the loss", ev.loss, err, err_len);
        if (!rc)
            rc = finite_result(c->config, item, "the FLOPs a token", ev.flops_per_token, err,
                               err_len);
        if (!rc && ctx->rank == 0) {
            if (c->json) {
                json_line j = json_begin(stdout, ", ");
                json_str(&j, "setting", item);
                json_num(&j, "loss", 9, ev.loss);
                json_num(&j, "se", 6, ev.se);
                json_num(&j, "flops_per_token", 6, ev.flops_per_token);
                json_int(&j, "windows", ev.windows);
                json_str(&j, "mode", mode_name(mode));
                json_end(&j);
            } else {
                printf("%-14.*s %10.6f %9.6f %16.6g %8ld\n", vlen, v, ev.loss, ev.se,
                       ev.flops_per_token, ev.windows);
            }
            if (csv) {
                fprintf(csv, "%s,%s,%.*s,%.*s,%ld,%.9g", c->config, mode_name(mode), (int)klen,
                        c->dial, vlen, v, ev.windows, ev.loss);
                csv_opt(csv, ev.se);
                fprintf(csv, ",%.9g\n", ev.flops_per_token);
            }
        }
        free_model(&m);
        rows++;
        v += vlen + (e ? 1 : 0);
    }
    if (csv && !rc)
        rc = out_commit(&out, err, err_len);
    else if (csv)
        out_abort(&out);
    if (rc && ctx->rank == 0)
        fprintf(stderr, "mode-exp eval: %s\n", err);
    free(over);
    return rc ? 1 : 0;
}

int cmd_eval(mode_ctx *ctx, int argc, char **argv)
{
    cli c;
    static const cli_opts opts = { "eval", CLI_THREADS | CLI_DATA | CLI_MODE | CLI_WINDOWS |
                                   CLI_JSON | CLI_ROUTING | CLI_ROUTING_LAYERS | CLI_SEED |
                                   CLI_RECORD | CLI_CSV | CLI_DIAL };
    if (parse_cli(&c, argc - 2, argv + 2, usage_eval, &opts, ctx->rank))
        return 2;
    fwd_mode mode = FWD_EVAL_CAUSAL;
    if (c.mode && !strcmp(c.mode, "topk"))
        mode = FWD_EVAL_TOPK;
    else if (c.mode && strcmp(c.mode, "causal")) {
        fprintf(stderr, "mode-exp eval: --mode %s: expected topk or causal\n", c.mode);
        free(c.over);
        return 2;
    }
    if (c.csv && !c.routing && !c.record && !c.dial) {
        fprintf(stderr, "mode-exp eval: --csv %s writes the table of --routing, --record or "
                        "--dial: give one (the plain evaluation's line is --json's)\n", c.csv);
        free(c.over);
        return 2;
    }
    if (c.dial && (c.routing || c.record)) {
        fprintf(stderr, "mode-exp eval: --dial evaluates learned routing at each setting: it "
                        "goes with neither --routing nor --record\n");
        free(c.over);
        return 2;
    }
    choose_threads(&c, ctx);
    char err[1024] = "";
    model *m = NULL;
    dataset *d = NULL;
    run_config cfg;
    /* the checkpoint with the overrides (a bad key of --dial is refused at its
     * first value, before any evaluation) */
    ckpt_meta meta = { 0 };
    int rc = load_model(ctx, &c, c.n_over, c.over, &cfg, &m, &meta, err, sizeof(err));
    char tpath[MODE_PATH_MAX] = "";
    if (!rc)
        rc = checkpoint_tokenizer(c.config, &cfg, meta.data, tpath, sizeof(tpath), err,
                                  sizeof(err));
    long step = meta.step;
    ckpt_meta_clear(&meta);
    if (!rc)
        rc = load_eval_data(&c, &cfg, tpath, &d, err, sizeof(err));
    /* every rank the same data (docs/robustness.md, "Ranks that disagree"),
     * or none evaluates: a rank that failed alone, or read other data, would
     * leave the others in the evaluation's collectives */
    if (!(rc = comm_agree(ctx->comm, rc, err, sizeof(err))))
        rc = agree_eval_data(ctx, d, err, sizeof(err));
    if (rc) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp eval: %s\n", err);
        free_model(&m);
        free_dataset(&d);
        free(c.over);
        return 1;
    }
    int code;
    if (c.dial) {
        free_model(&m);
        code = dial(ctx, &c, &cfg, mode, d, err, sizeof(err));
    } else if (c.routing || c.record) {
        code = counterfactual(ctx, &c, mode, m, &cfg, step, d, err, sizeof(err));
    } else {
        eval_result ev = { 0 };
        rc = evaluate(m, ctx, d, c.windows, mode, &ev, err, sizeof(err));
        if (rc && !err[0])
            snprintf(err, sizeof(err), "evaluation failed: %s", strerror(-rc));
        fail_local(ctx, rc && ev.local_failure, err);
        if (!rc)
            rc = finite_result(c.config, NULL, "the loss", ev.loss, err, sizeof(err));
        if (!rc)
            rc = finite_result(c.config, NULL, "the FLOPs a token", ev.flops_per_token, err,
                               sizeof(err));
        if (rc && ctx->rank == 0)
            fprintf(stderr, "mode-exp eval: %s\n", err);
        if (!rc && ctx->rank == 0) {
            if (c.json) {
                json_line j = json_begin(stdout, ", ");
                json_num(&j, "loss", 9, ev.loss);
                json_num(&j, "se", 6, ev.se); /* null for one window */
                json_int(&j, "windows", ev.windows);
                json_str(&j, "mode", mode_name(mode));
                json_num(&j, "flops_per_token", 6, ev.flops_per_token);
                json_num(&j, "bpb", 6, ev.bpb); /* null when the bytes are unknown */
                json_end(&j);
            } else {
                char bpb[64] = "";
                if (isfinite(ev.bpb))
                    snprintf(bpb, sizeof(bpb), "; %.4f bits per byte", ev.bpb);
                printf("%s: loss %.6f +- %.6f (standard error over windows) over %ld windows of "
                       "%d tokens (%s); %.4g executed forward FLOPs a token%s\n", c.config,
                       ev.loss, ev.se, ev.windows, cfg.seq_len, mode_name(mode),
                       ev.flops_per_token, bpb);
            }
        }
        code = rc ? 1 : 0;
    }
    free_model(&m);
    free_dataset(&d);
    free(c.over);
    return code;
}
