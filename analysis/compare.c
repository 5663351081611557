/* mode-analyze compare: one row per group of replicates, printed and
 * written as Markdown (compare.md), with the runs themselves in compare.csv
 * and the groups in compare_groups.csv: what the model is, what it costs,
 * how well it does over its seeds (mean, sd, 95% interval, the difference to
 * a baseline and whether it exceeds the seed spread by Welch's test), and
 * how well the causal rule follows top-k (MoD paper, section 3.5). */
#include "analysis/runset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_legend(FILE *f, const an_runset *rs)
{
    fprintf(f, "Groups of replicates: runs whose configs differ only in [run] name, out, seed, "
               "init_seed or data_seed. Loss: the final held-out loss, mean ± sd over the n "
               "replicates, and the 95%% interval of the mean (Student's t, n - 1 degrees of "
               "freedom; - with one replicate). SE: the standard error of one run's loss over "
               "its evaluation windows (within-run precision; sd is the between-seed "
               "spread).");
    if (rs->baseline >= 0)
        fprintf(f, " Δ: the difference to the baseline group %s; p: Welch's two-sided t-test "
                   "of it (unequal variances, Welch-Satterthwaite degrees of freedom; - with "
                   "fewer than two replicates on either side).",
                rs->g.groups[rs->baseline].name);
    int executed = 0;
    for (int i = 0; i < rs->n; i++)
        executed += rs->runs[i].executed;
    fprintf(f, " Training FLOPs: %s, as %s.", executed == rs->n ? "executed (as routed)"
               : executed ? "nominal or executed, as each run's run.flops_count says"
                          : "nominal (MODEL.md)",
            executed ? "the runs' budgets counted them" : "the budgets count them");
    if (rs->ladder.n_points >= 2)
        fprintf(f, " x dense FLOPs: the training FLOPs dense would need for the group's mean "
                   "loss, over the group's own, from the line of log loss on log FLOPs through "
                   "%s (dense loss %.4f to %.4f), with a 95%% bootstrap interval over the "
                   "ladder's runs and the group's replicates; where the loss lies below every rung "
                   "of the ladder, > the largest rung's FLOPs over the group's (dense would need "
                   "more), above every rung < the smallest's (the line is not extrapolated).",
                rs->ladder.what, rs->ladder.l_lo,
                rs->ladder.l_hi);
    fprintf(f, "\n\n");
}

/* Seeds a side that would find group j's top-k difference to the baseline
 * with 80% power were it the true one (stats.h), at the two groups' pooled
 * sd; -1 without a test (one replicate on either side, the baseline itself)
 * or beyond 10000. */
static int power_seeds(const an_runset *rs, int j)
{
    if (rs->baseline < 0 || j == rs->baseline)
        return -1;
    const sample_summary *a = &rs->stats[j].topk, *b = &rs->stats[rs->baseline].topk;
    if (a->n < 2 || b->n < 2)
        return -1;
    return seeds_for_power(a->mean - b->mean, sqrt(0.5 * (a->sd * a->sd + b->sd * b->sd)), 0.8,
                           10000);
}

/* The power paragraph under the table: how many seeds each difference
 * would need. */
static void write_power(FILE *f, const an_runset *rs)
{
    bool first = true;
    for (int j = 0; j < rs->g.n_groups; j++) {
        const sample_summary *a = &rs->stats[j].topk, *b;
        if (rs->baseline < 0 || j == rs->baseline || a->n < 2 ||
            (b = &rs->stats[rs->baseline].topk)->n < 2)
            continue;
        if (first)
            fprintf(f, "\nPower: the seeds a side that would give Welch's test an 80%% chance "
                       "of p < 0.05 on Δ top-k, were the difference seen the true one and the "
                       "spread the two groups' pooled sd (two-sample t, equal seeds):");
        int n = power_seeds(rs, j);
        char nb[32];
        if (n > 0)
            snprintf(nb, sizeof(nb), "%d", n);
        else
            snprintf(nb, sizeof(nb), "%s", a->mean == b->mean ? "none would" : "over 10000");
        fprintf(f, "%s %s %s (Δ %+.4f, pooled sd %.4f)", first ? "" : ";", rs->g.groups[j].name,
                nb, a->mean - b->mean, sqrt(0.5 * (a->sd * a->sd + b->sd * b->sd)));
        first = false;
    }
    if (!first)
        fprintf(f, ".\n");
}

static void write_md(FILE *f, const an_runset *rs)
{
    write_legend(f, rs);
    bool vs = rs->baseline >= 0;
    bool lad = rs->ladder.n_points >= 2;
    fprintf(f, "| group | n | layers | capacity | params | FLOPs/fwd/seq | train FLOPs | steps/s | "
               "loss top-k | 95%% CI | SE |%s%s loss causal | 95%% CI | SE |%s precision | "
               "recall | causal capacity | bits per byte (top-k) |\n",
            vs ? " Δ top-k | p |" : "", lad ? " x dense FLOPs |" : "",
            vs ? " Δ causal | p |" : "");
    fprintf(f, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |%s%s "
               "---: | ---: | ---: |%s ---: | ---: | ---: | ---: |\n",
            vs ? " ---: | ---: |" : "", lad ? " ---: |" : "", vs ? " ---: | ---: |" : "");
    for (int j = 0; j < rs->g.n_groups; j++) {
        const run_group *grp = &rs->g.groups[j];
        const an_group_stats *st = &rs->stats[j];
        const an_run *r = &rs->runs[grp->members[0]];
        char b[16][64];
        fmt_params(b[0], 64, (double)r->size.params);
        number_label(b[1], 64, r->size.forward_flops, 3);
        fmt_mean_sd(b[2], 64, &st->topk, 4);
        fmt_interval(b[3], 64, &st->topk, 4);
        fmt_mean_sd(b[4], 64, &st->causal, 4);
        fmt_interval(b[5], 64, &st->causal, 4);
        char fl[32];
        number_label(fl, sizeof(fl), st->train_flops, 3);
        fprintf(f, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |", grp->name,
                st->used, r->kinds, r->capacity, b[0], b[1], fl,
                fmt_num(b[6], 64, st->steps_per_s, 2, false), b[2], b[3],
                fmt_num(b[7], 64, st->se_topk, 4, false));
        if (vs) {
            fmt_p(b[8], 64, st->vs_topk.p);
            fprintf(f, " %s | %s |",
                    j == rs->baseline ? "baseline" : fmt_num(b[9], 64, st->vs_topk.diff, 4, true),
                    j == rs->baseline ? "" : b[8]);
        }
        if (lad) {
            char mb[64];
            fmt_multiplier(mb, sizeof(mb), &st->mult);
            fprintf(f, " %s |", mb);
        }
        fprintf(f, " %s | %s | %s |", b[4], b[5], fmt_num(b[15], 64, st->se_causal, 4, false));
        if (vs) {
            fmt_p(b[10], 64, st->vs_causal.p);
            fprintf(f, " %s | %s |",
                    j == rs->baseline ? "baseline"
                                      : fmt_num(b[11], 64, st->vs_causal.diff, 4, true),
                    j == rs->baseline ? "" : b[10]);
        }
        char bpb[64];
        fprintf(f, " %s | %s | %s | %s |\n", fmt_num(b[12], 64, st->rule[RT_PRECISION], 3, false),
                fmt_num(b[13], 64, st->rule[RT_RECALL], 3, false),
                fmt_num(b[14], 64, st->rule[RT_CAUSAL_CAP], 3, false),
                fmt_num(bpb, sizeof(bpb), st->bpb_topk, 4, false));
    }
    write_power(f, rs);
    /* what the statistics are over, where not every replicate is complete */
    bool first = true;
    for (int j = 0; j < rs->g.n_groups; j++) {
        const run_group *grp = &rs->g.groups[j];
        const an_group_stats *st = &rs->stats[j];
        int complete = 0;
        for (int m = 0; m < grp->n; m++)
            complete += rs->runs[grp->members[m]].complete;
        if (complete == grp->n)
            continue;
        fprintf(f, "%s%s: ", first ? "\n" : "", grp->name);
        first = false;
        if (st->in_progress)
            fprintf(f, "no replicate is complete; the %d with an evaluation are at their latest "
                       "(steps %ld to %ld)\n", st->used, st->eval_lo, st->eval_hi);
        else
            fprintf(f, "%d of %d replicates complete; the statistics are over those\n", complete,
                    grp->n);
    }
}

/* One row per run: its group, the keys that vary, its seeds, its numbers. */
static void write_runs_csv(FILE *f, const an_runset *rs)
{
    fputs("group", f);
    for (int k = 0; k < rs->g.n_varying; k++) {
        fputc(',', f);
        csv_field(f, rs->g.varying[k]);
    }
    fputs(",seed,init_seed,data_seed,run,layers,capacity,params,params_from,flops_per_seq,"
          "steps,planned,complete,steps_per_s,eval_step,loss_topk,se_topk,loss_causal,"
          "se_causal,eval_windows,precision,recall,causal_capacity,bpb_topk,used,file\n", f);
    for (int i = 0; i < rs->n; i++) {
        const an_run *r = &rs->runs[i];
        csv_field(f, rs->g.groups[rs->g.group_of[i]].name);
        for (int k = 0; k < rs->g.n_varying; k++) {
            fputc(',', f);
            csv_field(f, run_key_value(&r->keys, rs->g.varying[k]));
        }
        fprintf(f, ",%llu,%llu,%llu,", (unsigned long long)r->cfg->seed,
                (unsigned long long)r->cfg->init_seed, (unsigned long long)r->cfg->data_seed);
        csv_field(f, r->name);
        fputc(',', f);
        csv_field(f, r->kinds);
        fputc(',', f);
        csv_field(f, r->capacity);
        fprintf(f, ",%lld,%s", (long long)r->size.params, r->size.recorded ? "record" : "config");
        csv_num(f, r->size.forward_flops);
        fprintf(f, ",%ld,%ld,%d", r->done, r->planned, r->complete);
        csv_num(f, r->steps_per_s);
        if (r->eval_step >= 0)
            fprintf(f, ",%ld", r->eval_step);
        else
            fputs(",", f);
        csv_num(f, r->loss_topk);
        csv_num(f, r->se_topk);
        csv_num(f, r->loss_causal);
        csv_num(f, r->se_causal);
        csv_num(f, r->windows);
        for (int k = 0; k < RT_COUNT; k++)
            csv_num(f, r->rule[k]);
        csv_num(f, r->bpb_topk);
        fprintf(f, ",%d,", an_run_used(rs, i));
        csv_field(f, r->path);
        fputc('\n', f);
    }
}

static void csv_summary(FILE *f, const sample_summary *s, double se)
{
    csv_num(f, s->mean);
    csv_num(f, s->sd);
    csv_num(f, s->ci_lo);
    csv_num(f, s->ci_hi);
    csv_num(f, se);
}

static void csv_welch(FILE *f, const welch_result *w)
{
    csv_num(f, w->diff);
    csv_num(f, w->t);
    csv_num(f, w->df);
    csv_num(f, w->p);
}

static void write_groups_csv(FILE *f, const an_runset *rs)
{
    fputs("group,n", f);
    for (int k = 0; k < rs->g.n_varying; k++) {
        fputc(',', f);
        csv_field(f, rs->g.varying[k]);
    }
    fputs(",layers,capacity,params,flops_per_seq,steps_per_s,loss_topk_mean,loss_topk_sd,"
          "loss_topk_ci_lo,loss_topk_ci_hi,se_topk,loss_causal_mean,loss_causal_sd,"
          "loss_causal_ci_lo,loss_causal_ci_hi,se_causal,baseline,diff_topk,t_topk,df_topk,"
          "p_topk,diff_causal,t_causal,df_causal,p_causal,precision,recall,causal_capacity,"
          "in_progress,train_flops,flops_count,dense_multiplier,dense_multiplier_lo,"
          "dense_multiplier_hi,dense_multiplier_extrapolated,dense_multiplier_bound,"
          "seeds_for_80pct_power\n", f);
    for (int j = 0; j < rs->g.n_groups; j++) {
        const an_group_stats *st = &rs->stats[j];
        const an_run *r = &rs->runs[rs->g.groups[j].members[0]];
        csv_field(f, rs->g.groups[j].name);
        fprintf(f, ",%d", st->used);
        for (int k = 0; k < rs->g.n_varying; k++) {
            fputc(',', f);
            csv_field(f, run_key_value(&r->keys, rs->g.varying[k]));
        }
        fputc(',', f);
        csv_field(f, r->kinds);
        fputc(',', f);
        csv_field(f, r->capacity);
        fprintf(f, ",%lld", (long long)r->size.params);
        csv_num(f, r->size.forward_flops);
        csv_num(f, st->steps_per_s);
        csv_summary(f, &st->topk, st->se_topk);
        csv_summary(f, &st->causal, st->se_causal);
        fputc(',', f);
        if (rs->baseline >= 0)
            csv_field(f, rs->g.groups[rs->baseline].name);
        csv_welch(f, &st->vs_topk);
        csv_welch(f, &st->vs_causal);
        for (int k = 0; k < RT_COUNT; k++)
            csv_num(f, st->rule[k]);
        fprintf(f, ",%d", st->in_progress);
        csv_num(f, st->train_flops);
        fprintf(f, ",%s", r->executed ? "executed" : "nominal");
        csv_multiplier(f, &st->mult);
        fputc(',', f);
        int n80 = power_seeds(rs, j);
        if (n80 > 0)
            fprintf(f, "%d", n80);
        fputc('\n', f);
    }
}

int cmd_compare(const an_args *a)
{
    an_runset rs;
    char path[RUN_PATH_LEN + 64];
    an_text t = { 0 };
    if (an_read_runs(a, &rs))
        return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT;
    write_md(stdout, &rs);
    if (an_out_path(a, NULL, "compare.md", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        goto done;
    write_md(t.f, &rs);
    if (an_text_commit(a, &t) || an_out_path(a, NULL, "compare.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        goto done;
    write_runs_csv(t.f, &rs);
    if (an_text_commit(a, &t) ||
        an_out_path(a, NULL, "compare_groups.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &t, path))
        goto done;
    write_groups_csv(t.f, &rs);
    if (an_text_commit(a, &t))
        goto done;
    rc = 0;
done:
    an_text_abort(&t);
    an_free_runs(&rs);
    return rc;
}
