/* mode-analyze tokens: how often each class of token takes each routed block
 * (the MoD paper's section 5 asks whether routing follows the content of
 * the token), how that depends on the position, and which share of the
 * decision each of the two explains (mutual information, in bits); over
 * one run or the replicates of one config, with 95% intervals. */
#include "analysis/token_counts.h"
#include "analysis/tokens_fig.h"

#include "analysis/groups.h"
#include "analysis/runset.h"
#include "moe/registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The replicates' take rates of a class (pos false) or position bucket. */
static void take_replicates(const tokens_report *t, const token_layer *tl, bool pos, int i,
                            sample_summary *s)
{
    double *v = malloc((size_t)t->n_runs * sizeof(double));
    int n = v ? t->n_runs : 0;
    for (int r = 0; r < n; r++)
        v[r] = take_rate(pos ? tl->run_pos[r][i] : tl->run_cls[r][i]);
    summarize(v, n, s);
    free(v);
}

/* "20.1% [19.2, 21.0]" of counts c, and "; 20.3 ± 0.8" for the replicates
 * (percentage points) when there are several. */
static void rate_cell(char *buf, int len, const tokens_report *t, const token_layer *tl,
                      const double *c, bool pos, int i)
{
    double r = take_rate(c), lo, hi;
    if (isnan(r)) {
        snprintf(buf, (size_t)len, "-");
        return;
    }
    take_interval(c, &lo, &hi);
    int w = snprintf(buf, (size_t)len, "%.1f%% [%.1f, %.1f]", 100.0 * r, 100.0 * lo, 100.0 * hi);
    if (t->n_runs > 1 && i >= 0 && w > 0 && w < len) {
        sample_summary s;
        take_replicates(t, tl, pos, i, &s);
        if (s.n > 1)
            snprintf(buf + w, (size_t)(len - w), "; %.1f ± %.1f", 100.0 * s.mean, 100.0 * s.sd);
    }
}

static void bucket_name(const tokens_report *t, int b, char *buf, int len)
{
    int lo = b * t->bucket_len, hi = (b + 1) * t->bucket_len - 1;
    snprintf(buf, (size_t)len, "%d-%d", lo, hi < t->ri->S - 1 ? hi : t->ri->S - 1);
}

/* The class or the position, whichever carries more information beyond
 * chance, where the permutation test finds it; else neither. */
static const char *follows(const token_layer *tl)
{
    bool cls = tl->p_class < TK_SIGNIFICANT, pos = tl->p_pos < TK_SIGNIFICANT;
    if (cls && pos)
        return tl->mi_class - tl->chance_class >= tl->mi_pos - tl->chance_pos ? "class, more"
                                                                              : "position, more";
    return cls ? "class" : pos ? "position" : "neither (chance)";
}

static void write_md(FILE *f, const tokens_report *t)
{
    const run_info *ri = t->ri;
    char b[128];
    if (t->n_steps > 1)
        fprintf(f, "# Token classes and routing: %s, steps %ld to %ld (%d recorded steps "
                   "pooled)\n\n", t->name, t->first, t->last, t->n_steps);
    else
        fprintf(f, "# Token classes and routing: %s, step %ld\n\n", t->name, t->last);
    if (t->n_runs > 1) {
        bool same = true; /* the replicates' own last steps, where they differ */
        for (int r = 1; r < t->n_runs; r++)
            same &= t->ris[r]->steps[t->ris[r]->n_steps - 1] == t->ri->steps[t->ri->n_steps - 1];
        fprintf(f, "%d replicates pooled:", t->n_runs);
        for (int r = 0; r < t->n_runs; r++) {
            fprintf(f, "%s %s", r ? "," : "", t->ris[r]->name);
            if (!same && t->own_last)
                fprintf(f, " (step %ld)", t->ris[r]->steps[t->ris[r]->n_steps - 1]);
        }
        fprintf(f, ".\n\n");
    }
    if (t->predicted)
        fprintf(f, "Classes: each position's class is that of the token it predicts (the "
                   "next one), not of the token it holds.\n\n");
    fprintf(f, "Take rate: the share of the tokens that took the layer's block (at an exit "
               "point: that left the stack there), over %d "
               "recorded held-out windows x %d positions%s, with its 95%% Wilson interval "
               "(the tokens taken as independent: the precision of the counts)%s.\n\n"
               "| class | tokens |", ri->R, ri->S, t->n_runs > 1 ? " of each replicate" : "",
            t->n_runs > 1 ? "; after the semicolon, the replicates' own rates as mean ± sd "
                            "(percentage points: the spread between seeds)"
                          : "");
    for (int k = 0; k < t->n_layers; k++)
        fprintf(f, " layer %d %s |", t->layers[k].layer, ri->cfg.layers[t->layers[k].layer].kind);
    fprintf(f, "\n| --- | ---: |");
    for (int k = 0; k < t->n_layers; k++)
        fprintf(f, " ---: |");
    for (int c = 0; c <= ri->n_classes; c++) {
        double tokens = 0;
        bool total = c == ri->n_classes;
        for (int cc = total ? 0 : c; cc < (total ? ri->n_classes : c + 1); cc++)
            tokens += t->layers[0].cls[cc][0] + t->layers[0].cls[cc][1];
        fprintf(f, "\n| %s | %.0f |", total ? "all" : ri->class_names[c],
                tokens / t->n_steps / t->n_runs);
        for (int k = 0; k < t->n_layers; k++) {
            double sum[2] = { 0, 0 };
            for (int cc = total ? 0 : c; cc < (total ? ri->n_classes : c + 1); cc++) {
                sum[0] += t->layers[k].cls[cc][0];
                sum[1] += t->layers[k].cls[cc][1];
            }
            rate_cell(b, (int)sizeof(b), t, &t->layers[k], sum, false, total ? -1 : c);
            fprintf(f, " %s |", b);
        }
    }
    fprintf(f, "\n\nTake rate by position:\n\n| positions |");
    for (int k = 0; k < t->n_layers; k++)
        fprintf(f, " layer %d |", t->layers[k].layer);
    fprintf(f, "\n| --- |");
    for (int k = 0; k < t->n_layers; k++)
        fprintf(f, " ---: |");
    for (int p = 0; p < TK_BUCKETS; p++) {
        bucket_name(t, p, b, (int)sizeof(b));
        fprintf(f, "\n| %s |", b);
        for (int k = 0; k < t->n_layers; k++) {
            rate_cell(b, (int)sizeof(b), t, &t->layers[k], t->layers[k].pos[p], true, p);
            fprintf(f, " %s |", b);
        }
    }
    fprintf(f, "\n\nWhat the decision follows: the mutual information (bits) of took/skipped "
               "with the class and with the position bucket, beside its chance level (the mean "
               "over %d shuffles of the decisions) and the permutation p-value; the variance "
               "of the take rate across classes and across buckets; the mean Jaccard overlap "
               "of the taken positions across the sequences at the last step (in brackets: for "
               "random sets of the same size)%s.\n\n"
               "| layer | H(took) | MI class | chance | p | MI position | chance | p | "
               "var class | var position | follows | Jaccard (chance) |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n",
            TK_PERMUTATIONS, t->n_runs > 1 ? "; all over the pooled replicates" : "");
    for (int k = 0; k < t->n_layers; k++) {
        const token_layer *tl = &t->layers[k];
        if (tl->jaccard < 0)
            snprintf(b, sizeof(b), "-");
        else
            snprintf(b, sizeof(b), "%.3f (%.3f)", tl->jaccard, tl->jaccard_chance);
        fprintf(f, "| %d | %.3f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %s | %s |\n",
                tl->layer, tl->h_take, tl->mi_class, tl->chance_class, tl->p_class, tl->mi_pos,
                tl->chance_pos, tl->p_pos, tl->var_class, tl->var_pos, follows(tl), b);
    }
    fprintf(f, "\n");
    for (int k = 0; k < t->n_layers; k++) {
        const token_layer *tl = &t->layers[k];
        if (tl->jaccard > TK_DEGENERATE)
            fprintf(f, "layer %d: degenerate: selects the same positions in every sequence "
                       "(Jaccard %.3f; %.3f for random sets of the same size)\n", tl->layer,
                    tl->jaccard, tl->jaccard_chance);
        else if (tl->h_take < 1e-6)
            fprintf(f, "layer %d: degenerate: every token gets the same decision\n", tl->layer);
    }
}

/* One row of tokens.csv: counts c of run (NULL: pooled, with the
 * replicates' mean and sd). */
static void csv_row(FILE *f, const tokens_report *t, const token_layer *tl, const run_info *run,
                    const char *group, const char *name, const double *c, bool pos, int i)
{
    double r = take_rate(c), lo, hi;
    take_interval(c, &lo, &hi);
    if (run) {
        csv_field(f, run->name);
        fprintf(f, ",%llu", (unsigned long long)run->cfg.seed);
    } else {
        fputs("pooled,", f);
    }
    fprintf(f, ",%d,%s,%s,", tl->layer, t->ri->cfg.layers[tl->layer].kind, group);
    csv_field(f, name);
    fprintf(f, ",%.0f,%.0f", c[0] + c[1], c[1]);
    csv_num(f, r);
    csv_num(f, lo);
    csv_num(f, hi);
    sample_summary s = { 0 };
    s.mean = s.sd = (double)NAN;
    if (!run)
        take_replicates(t, tl, pos, i, &s);
    csv_num(f, s.mean);
    csv_num(f, s.sd);
    fputc('\n', f);
}

static void write_csv(FILE *f, const tokens_report *t)
{
    const run_info *ri = t->ri;
    char name[32];
    fprintf(f, "run,seed,layer,kind,group,name,tokens,took,take_rate,wilson_lo,wilson_hi,"
               "replicate_mean,replicate_sd\n");
    /* each run, then (for replicates) the pooled counts */
    for (int r = 0; r <= t->n_runs; r++) {
        if (r == t->n_runs && t->n_runs == 1)
            break;
        const run_info *run = r < t->n_runs ? t->ris[r] : NULL;
        for (int k = 0; k < t->n_layers; k++) {
            const token_layer *tl = &t->layers[k];
            for (int c = 0; c < ri->n_classes; c++)
                csv_row(f, t, tl, run, "class", ri->class_names[c],
                        run ? tl->run_cls[r][c] : tl->cls[c], false, c);
            for (int p = 0; p < TK_BUCKETS; p++) {
                bucket_name(t, p, name, (int)sizeof(name));
                csv_row(f, t, tl, run, "position", name, run ? tl->run_pos[r][p] : tl->pos[p],
                        true, p);
            }
        }
    }
}

int cmd_tokens(const an_args *a)
{
    tokens_report t = { 0 };
    an_text md = { 0 }, csv = { 0 };
    char path[RUN_PATH_LEN + 64];
    int rc = tokens_count(a, &t);
    if (rc)
        goto done;
    rc = EXIT_BAD_INPUT;
    write_md(stdout, &t);
    if (an_out_path(a, t.ri->dir, "tokens.md", path, (int)sizeof(path)) ||
        an_text_begin(a, &md, path))
        goto done;
    write_md(md.f, &t);
    if (an_text_commit(a, &md) || an_out_path(a, t.ri->dir, "tokens.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &csv, path))
        goto done;
    write_csv(csv.f, &t);
    if (an_text_commit(a, &csv) ||
        an_out_path(a, t.ri->dir, "tokens.png", path, (int)sizeof(path)))
        goto done;
    rc = tokens_figure(a, &t, path);
done:
    an_text_abort(&md);
    an_text_abort(&csv);
    free_tokens_report(&t);
    return rc;
}
