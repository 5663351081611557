/* mode-analyze tokens: how often each class of token takes each routed block
 * (the MoD paper's section 5 asks whether routing follows the content of
 * the token), how that depends on the position, and which share of the
 * decision each of the two explains (mutual information, in bits). */
#include "analysis/tokens.h"

#include "analysis/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double take_rate(const double *c)
{
    double n = c[TK_SKIPPED] + c[TK_TOOK];
    return n > 0 ? c[TK_TOOK] / n : (double)NAN;
}

/* Every token's class, position bucket and decision, for the permutation
 * tests (a class out of range is stored as 255 and left out). */
typedef struct token_samples {
    uint8_t *cls, *pos, *took;
    long n;
} token_samples;

/* Add one step's record of a layer into its counts and samples. */
static void count_record(const run_info *ri, const layer_record *rec, int bucket_len,
                         token_layer *tl, token_samples *ts)
{
    for (int r = 0; r < ri->R; r++)
        for (int i = 0; i < ri->S; i++) {
            int label = ri->labels[(long)r * (ri->S + 1) + i];
            int took = layer_record_taken(rec, ri->S, r, i) ? TK_TOOK : TK_SKIPPED;
            if (label < ri->n_classes)
                tl->cls[label][took] += 1.0;
            tl->pos[i / bucket_len][took] += 1.0;
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
    tl->jaccard = mean_pairwise_jaccard(sets, ri->R, ri->S);
    tl->jaccard_chance = p / (2.0 - p);
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

static void pct(char *buf, double v)
{
    if (isnan(v))
        snprintf(buf, 16, "-");
    else
        snprintf(buf, 16, "%.1f%%", 100.0 * v);
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
    char b[32];
    if (t->n_steps > 1)
        fprintf(f, "# Token classes and routing: %s, steps %ld to %ld (%d recorded steps "
                   "pooled)\n\n", ri->name, t->first, t->last, t->n_steps);
    else
        fprintf(f, "# Token classes and routing: %s, step %ld\n\n", ri->name, t->last);
    fprintf(f, "Take rate: the share of the tokens that took the layer's block, over %d "
               "held-out sequences x %d positions.\n\n| class | tokens |", ri->R, ri->S);
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
        fprintf(f, "\n| %s | %.0f |", total ? "all" : ri->class_names[c], tokens / t->n_steps);
        for (int k = 0; k < t->n_layers; k++) {
            double sum[2] = { 0, 0 };
            for (int cc = total ? 0 : c; cc < (total ? ri->n_classes : c + 1); cc++) {
                sum[0] += t->layers[k].cls[cc][0];
                sum[1] += t->layers[k].cls[cc][1];
            }
            pct(b, take_rate(sum));
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
            pct(b, take_rate(t->layers[k].pos[p]));
            fprintf(f, " %s |", b);
        }
    }
    fprintf(f, "\n\nWhat the decision follows: the mutual information (bits) of took/skipped "
               "with the class and with the position bucket, beside its chance level (the mean "
               "over %d shuffles of the decisions) and the permutation p-value; the variance "
               "of the take rate across classes and across buckets; the mean Jaccard overlap "
               "of the taken positions across the sequences at the last step (in brackets: for "
               "random sets of the same size).\n\n"
               "| layer | H(took) | MI class | chance | p | MI position | chance | p | "
               "var class | var position | follows | Jaccard (chance) |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n",
            TK_PERMUTATIONS);
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

static void write_csv(FILE *f, const tokens_report *t)
{
    const run_info *ri = t->ri;
    char name[32];
    fprintf(f, "layer,kind,group,name,tokens,took,take_rate\n");
    for (int k = 0; k < t->n_layers; k++) {
        const token_layer *tl = &t->layers[k];
        const char *kind = ri->cfg.layers[tl->layer].kind;
        for (int c = 0; c < ri->n_classes; c++)
            fprintf(f, "%d,%s,class,%s,%.0f,%.0f,%.6f\n", tl->layer, kind, ri->class_names[c],
                    tl->cls[c][0] + tl->cls[c][1], tl->cls[c][1],
                    isnan(take_rate(tl->cls[c])) ? 0.0 : take_rate(tl->cls[c]));
        for (int p = 0; p < TK_BUCKETS; p++) {
            bucket_name(t, p, name, (int)sizeof(name));
            fprintf(f, "%d,%s,position,%s,%.0f,%.0f,%.6f\n", tl->layer, kind, name,
                    tl->pos[p][0] + tl->pos[p][1], tl->pos[p][1],
                    isnan(take_rate(tl->pos[p])) ? 0.0 : take_rate(tl->pos[p]));
        }
    }
}

/* Count every routed layer over the steps [s0, s1] of ri->steps. */
static int count_layers(const an_args *a, tokens_report *t, int s0, int s1)
{
    const run_info *ri = t->ri;
    char err[RUN_PATH_LEN + 512];
    int rc = EXIT_BAD_INPUT;
    size_t n = (size_t)ri->R * (size_t)ri->S * (size_t)(s1 - s0 + 1);
    token_samples ts = { malloc(n), malloc(n), malloc(n), 0 };
    if (!ts.cls || !ts.pos || !ts.took) {
        an_fail(a, rc, "out of memory for %zu tokens", n);
        goto fail;
    }
    for (int l = 0; l < ri->cfg.n_layers; l++) {
        token_layer *tl = &t->layers[t->n_layers];
        memset(tl, 0, sizeof(*tl));
        tl->layer = l;
        tl->jaccard = -1.0;
        ts.n = 0;
        for (int s = s0; s <= s1; s++) {
            layer_record rec;
            if (read_layer_record(ri, ri->steps[s], l, &rec, err, (int)sizeof(err))) {
                an_fail(a, rc, "%s", err);
                goto fail;
            }
            if (layer_record_any(&rec)) {
                count_record(ri, &rec, t->bucket_len, tl, &ts);
                if (s == s1)
                    overlap(ri, &rec, tl);
            }
            free_layer_record(&rec);
        }
        if (ts.n) {
            summarise(ri, tl, &ts);
            t->n_layers++;
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

int cmd_tokens(const an_args *a)
{
    run_info *ri = NULL;
    tokens_report t = { 0 };
    an_text md = { 0 }, csv = { 0 };
    char path[RUN_PATH_LEN + 64], list[512];
    if (an_open_routed_run(a, &ri))
        return EXIT_BAD_INPUT;
    int rc = EXIT_BAD_INPUT;
    if (!ri->labels || ri->n_classes == 0) {
        bool held = strcmp(ri->cfg.val_source, "none") != 0;
        an_fail(a, rc, "%s: no token labels (data.%s = %s: only brown and synthetic have "
                "classes)", ri->path, held ? "val_source" : "source",
                held ? ri->cfg.val_source : ri->cfg.source);
        goto done;
    }
    int s1 = a->step >= 0 ? run_step_index(ri, a->step) : ri->n_steps - 1;
    if (s1 < 0) {
        run_steps_list(ri, list, (int)sizeof(list));
        an_fail(a, rc, "%s: step %ld is not recorded (recorded steps: %s)", ri->path, a->step,
                list);
        goto done;
    }
    int s0 = a->all_steps ? 0 : s1;
    t.ri = ri;
    t.first = ri->steps[s0];
    t.last = ri->steps[s1];
    t.n_steps = s1 - s0 + 1;
    t.bucket_len = (ri->S + TK_BUCKETS - 1) / TK_BUCKETS;
    t.layers = calloc((size_t)ri->cfg.n_layers, sizeof(token_layer));
    if (!t.layers || count_layers(a, &t, s0, s1))
        goto done;
    write_md(stdout, &t);
    if (an_out_path(a, ri, "tokens.md", path, (int)sizeof(path)) ||
        an_text_begin(a, &md, path))
        goto done;
    write_md(md.f, &t);
    if (an_text_commit(a, &md) || an_out_path(a, ri, "tokens.csv", path, (int)sizeof(path)) ||
        an_text_begin(a, &csv, path))
        goto done;
    write_csv(csv.f, &t);
    if (an_text_commit(a, &csv) || an_out_path(a, ri, "tokens.png", path, (int)sizeof(path)))
        goto done;
    rc = tokens_figure(a, &t, path);
done:
    an_text_abort(&md);
    an_text_abort(&csv);
    free(t.layers);
    free_run_info(&ri);
    return rc;
}
