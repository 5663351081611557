/* mode-analyze tokens: how often each class of token takes each routed block
 * (the MoD paper's section 5 asks whether routing follows the content of
 * the token), how that depends on the position, and which share of the
 * decision each of the two explains (mutual information, in bits); over
 * one run or the replicates of one config, with 95% intervals. */
#include "analysis/tokens.h"

#include "analysis/groups.h"
#include "analysis/runset.h"
#include "moe/kinds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double take_rate(const double *c)
{
    double n = c[TK_SKIPPED] + c[TK_TOOK];
    return n > 0 ? c[TK_TOOK] / n : (double)NAN;
}

void take_interval(const double *c, double *lo, double *hi)
{
    wilson_interval(c[TK_TOOK], c[TK_SKIPPED] + c[TK_TOOK], STATS_Z95, lo, hi);
}

void take_replicates(const tokens_report *t, const token_layer *tl, bool pos, int i,
                     sample_summary *s)
{
    double *v = malloc((size_t)t->n_runs * sizeof(double));
    int n = v ? t->n_runs : 0;
    for (int r = 0; r < n; r++)
        v[r] = take_rate(pos ? tl->run_pos[r][i] : tl->run_cls[r][i]);
    summarize(v, n, s);
    free(v);
}

/* Every token's class, position bucket and decision, for the permutation
 * tests (a class out of range is stored as 255 and left out). */
typedef struct token_samples {
    uint8_t *cls, *pos, *took;
    long n;
} token_samples;

/* Add one step's record of a layer of replicate run into its counts and
 * samples. */
static void count_record(const run_info *ri, const layer_record *rec, int bucket_len, int run,
                         token_layer *tl, token_samples *ts)
{
    for (int r = 0; r < ri->R; r++)
        for (int i = 0; i < ri->S; i++) {
            int label = ri->labels[(long)r * (ri->S + 1) + i];
            int took = layer_record_taken(rec, ri->S, r, i) ? TK_TOOK : TK_SKIPPED;
            if (label < ri->n_classes) {
                tl->cls[label][took] += 1.0;
                tl->run_cls[run][label][took] += 1.0;
            }
            tl->pos[i / bucket_len][took] += 1.0;
            tl->run_pos[run][i / bucket_len][took] += 1.0;
            ts->cls[ts->n] = label < ri->n_classes ? (uint8_t)label : 255;
            ts->pos[ts->n] = (uint8_t)(i / bucket_len);
            ts->took[ts->n++] = (uint8_t)took;
        }
}

/* Overlap of the taken position sets of the recorded sequences, and what
 * sets of the same share p drawn at random would give, about p / (2 - p). */
static void overlap(const run_info *ri, const layer_record *rec, token_layer *tl)
{
    uint8_t *sets = malloc((size_t)ri->R * (size_t)ri->S);
    if (!sets)
        return;
    long taken = 0;
    for (int r = 0; r < ri->R; r++) {
        for (int i = 0; i < ri->S; i++) {
            sets[(long)r * ri->S + i] = layer_record_taken(rec, ri->S, r, i);
            taken += sets[(long)r * ri->S + i];
        }
    }
    double p = (double)taken / ((double)ri->R * ri->S);
    /* summed over the replicates here, divided by their count in count_layers */
    tl->jaccard += mean_pairwise_jaccard(sets, ri->R, ri->S);
    tl->jaccard_chance += p / (2.0 - p);
    free(sets);
}

static void summarise(const run_info *ri, token_layer *tl, const token_samples *ts)
{
    double all[2] = { 0, 0 }, rate[LABEL_CLASSES_MAX], w[LABEL_CLASSES_MAX];
    double prate[TK_BUCKETS], pw[TK_BUCKETS];
    for (int c = 0; c < ri->n_classes; c++) {
        all[0] += tl->cls[c][0];
        all[1] += tl->cls[c][1];
        rate[c] = take_rate(tl->cls[c]);
        w[c] = tl->cls[c][0] + tl->cls[c][1];
    }
    for (int b = 0; b < TK_BUCKETS; b++) {
        prate[b] = take_rate(tl->pos[b]);
        pw[b] = tl->pos[b][0] + tl->pos[b][1];
    }
    tl->h_take = entropy_bits(all, 2);
    tl->mi_class = mutual_info_bits(&tl->cls[0][0], ri->n_classes, 2);
    tl->mi_pos = mutual_info_bits(&tl->pos[0][0], TK_BUCKETS, 2);
    tl->p_class = mutual_info_permutation(ts->cls, ts->took, ts->n, ri->n_classes,
                                          TK_PERMUTATIONS, ri->cfg.seed, &tl->chance_class);
    tl->p_pos = mutual_info_permutation(ts->pos, ts->took, ts->n, TK_BUCKETS, TK_PERMUTATIONS,
                                        ri->cfg.seed, &tl->chance_pos);
    tl->var_class = group_variance(rate, w, ri->n_classes);
    tl->var_pos = group_variance(prate, pw, TK_BUCKETS);
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
    fprintf(f, "Take rate: the share of the tokens that took the layer's block, over %d "
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

/* The steps [s0, s1] of run r to pool (--step, --all-steps); -1 and a
 * message when --step is not recorded there. */
static int steps_of(const an_args *a, const run_info *ri, int *s0, int *s1)
{
    char list[512];
    *s1 = a->step >= 0 ? run_step_index(ri, a->step) : ri->n_steps - 1;
    if (*s1 < 0) {
        run_steps_list(ri, list, (int)sizeof(list));
        an_fail(a, EXIT_BAD_INPUT, "%s: step %ld is not recorded (recorded steps: %s)", ri->path,
                a->step, list);
        return -1;
    }
    *s0 = a->all_steps ? 0 : *s1;
    return 0;
}

/* Count every routed layer over the replicates and their steps. */
static int count_layers(const an_args *a, tokens_report *t)
{
    const run_info *ri = t->ri;
    char err[RUN_PATH_LEN + 512];
    int rc = EXIT_BAD_INPUT, s0, s1;
    size_t n = 0;
    for (int r = 0; r < t->n_runs; r++) {
        if (steps_of(a, t->ris[r], &s0, &s1))
            return rc;
        n += (size_t)t->ris[r]->R * (size_t)t->ris[r]->S * (size_t)(s1 - s0 + 1);
    }
    token_samples ts = { malloc(n), malloc(n), malloc(n), 0 };
    if (!ts.cls || !ts.pos || !ts.took) {
        an_fail(a, rc, "out of memory for %zu tokens", n);
        goto fail;
    }
    for (int l = 0; l < ri->cfg.n_layers; l++) {
        token_layer *tl = &t->layers[t->n_layers];
        memset(tl, 0, sizeof(*tl));
        tl->layer = l;
        tl->run_cls = calloc((size_t)t->n_runs, sizeof(*tl->run_cls));
        tl->run_pos = calloc((size_t)t->n_runs, sizeof(*tl->run_pos));
        if (!tl->run_cls || !tl->run_pos) {
            an_fail(a, rc, "out of memory");
            t->n_layers++; /* freed with the others */
            goto fail;
        }
        ts.n = 0;
        int overlaps = 0;
        for (int r = 0; r < t->n_runs; r++) {
            const run_info *rr = t->ris[r];
            steps_of(a, rr, &s0, &s1);
            for (int s = s0; s <= s1; s++) {
                layer_record rec;
                if (read_layer_record(rr, rr->steps[s], l, &rec, err, (int)sizeof(err))) {
                    an_fail(a, rc, "%s", err);
                    t->n_layers++;
                    goto fail;
                }
                if (layer_record_any(&rec)) {
                    count_record(rr, &rec, t->bucket_len, r, tl, &ts);
                    if (s == s1) {
                        overlap(rr, &rec, tl);
                        overlaps++;
                    }
                }
                free_layer_record(&rec);
            }
        }
        if (ts.n) {
            /* the replicates' mean; -1 (no pairs) with one sequence */
            tl->jaccard = ri->R < 2 || !overlaps ? -1.0 : tl->jaccard / overlaps;
            tl->jaccard_chance = overlaps ? tl->jaccard_chance / overlaps : 0.0;
            summarise(ri, tl, &ts);
            t->n_layers++;
        } else {
            free(tl->run_cls);
            free(tl->run_pos);
        }
    }
    if (!t->n_layers)
        an_fail(a, rc, "%s: no routed layer has a record (layers = %s)", ri->path,
                ri->cfg.layers_text);
    else
        rc = 0;
fail:
    free(ts.cls);
    free(ts.pos);
    free(ts.took);
    return rc;
}

/* The runs must be replicates of one config: the layers, windows and
 * classes of the first stand for all. */
static int check_replicates(const an_args *a, const tokens_report *t)
{
    run_keys first, other;
    if (config_run_keys(&t->ri->cfg, mode_kinds, &first))
        return an_fail(a, EXIT_BAD_INPUT, "out of memory");
    int rc = 0;
    for (int r = 1; !rc && r < t->n_runs; r++) {
        const run_info *rr = t->ris[r];
        const char *diff = NULL;
        if (config_run_keys(&rr->cfg, mode_kinds, &other)) {
            rc = an_fail(a, EXIT_BAD_INPUT, "out of memory");
            break;
        }
        if (!same_config(&first, &other, &diff))
            rc = an_fail(a, EXIT_USAGE, "%s and %s are not replicates of one config (%s: %s "
                         "against %s); give the runs of one group", t->ri->path, rr->path, diff,
                         run_key_value(&first, diff), run_key_value(&other, diff));
        else if (rr->R != t->ri->R || rr->S != t->ri->S || !rr->labels)
            rc = an_fail(a, EXIT_BAD_INPUT, "%s: its routing records differ in shape from %s's",
                         rr->path, t->ri->path);
        free_run_keys(&other);
    }
    free_run_keys(&first);
    return rc;
}

int cmd_tokens(const an_args *a)
{
    tokens_report t = { 0 };
    an_text md = { 0 }, csv = { 0 };
    char path[RUN_PATH_LEN + 64];
    int rc = EXIT_BAD_INPUT;
    t.ris = calloc((size_t)a->n_files, sizeof(run_info *));
    if (!t.ris)
        return an_fail(a, rc, "out of memory");
    an_args one = *a;
    for (int r = 0; r < a->n_files; r++) {
        one.files = a->files + r;
        if (an_open_routed_run(&one, &t.ris[r]))
            goto done;
        t.n_runs++;
        const run_info *ri = t.ris[r];
        if (!ri->labels || ri->n_classes == 0) {
            bool held = strcmp(ri->cfg.val_source, "none") != 0;
            an_fail(a, rc, "%s: no token labels (data.%s = %s: only brown and synthetic have "
                    "classes)", ri->path, held ? "val_source" : "source",
                    held ? ri->cfg.val_source : ri->cfg.source);
            goto done;
        }
    }
    t.ri = t.ris[0];
    if ((rc = check_replicates(a, &t))) {
        goto done;
    }
    rc = EXIT_BAD_INPUT;
    if (t.n_runs > 1)
        group_base_name(t.ri->name, t.name, (int)sizeof(t.name));
    else
        snprintf(t.name, sizeof(t.name), "%s", t.ri->name);
    int s0, s1;
    if (steps_of(a, t.ri, &s0, &s1))
        goto done;
    t.first = t.ri->steps[s0];
    t.last = t.ri->steps[s1];
    t.n_steps = s1 - s0 + 1;
    t.own_last = a->step < 0;
    t.bucket_len = (t.ri->S + TK_BUCKETS - 1) / TK_BUCKETS;
    t.layers = calloc((size_t)t.ri->cfg.n_layers, sizeof(token_layer));
    if (!t.layers || count_layers(a, &t))
        goto done;
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
    for (int k = 0; t.layers && k < t.n_layers; k++) {
        free(t.layers[k].run_cls);
        free(t.layers[k].run_pos);
    }
    free(t.layers);
    for (int r = 0; r < t.n_runs; r++)
        free_run_info(&t.ris[r]);
    free(t.ris);
    return rc;
}
