/* The counts behind mode-analyze tokens (token_counts.h): every routed
 * layer's decisions over the replicates and steps asked for, by token class
 * and position bucket, their overlap across sequences, and the information
 * each carries about the decision with its permutation test. */
#include "analysis/token_counts.h"

#include "analysis/groups.h"
#include "analysis/runset.h"
#include "moe/registry.h"

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

/* Every token's class, position bucket and decision, for the permutation
 * tests (a class out of range is stored as 255 and left out). */
typedef struct token_samples {
    uint8_t *cls, *pos, *took;
    long n;
} token_samples;

/* Whether position i of sequence r took the layer: its block or an expert,
 * or at an exit point (`exited`), left the stack there. */
static bool took_layer(const layer_record *rec, int S, int r, int i)
{
    if (!rec->selected && !rec->experts && rec->exited)
        return rec->exited[(long)r * S + i] != 0;
    return layer_record_taken(rec, S, r, i);
}

/* Add one step's record of a layer of replicate run into its counts and
 * samples; next: position i classed by the token it predicts, the window's
 * token i + 1 (a window holds S + 1 labels), else by the one it holds. */
static void count_record(const run_info *ri, const layer_record *rec, int bucket_len, int run,
                         bool next, token_layer *tl, token_samples *ts)
{
    for (int r = 0; r < ri->R; r++)
        for (int i = 0; i < ri->S; i++) {
            int label = ri->labels[(long)r * (ri->S + 1) + i + (next ? 1 : 0)];
            int took = took_layer(rec, ri->S, r, i) ? TK_TOOK : TK_SKIPPED;
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
            sets[(long)r * ri->S + i] = took_layer(rec, ri->S, r, i);
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
                if (layer_record_any(&rec) || rec.exited) {
                    count_record(rr, &rec, t->bucket_len, r, a->predicted, tl, &ts);
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

int tokens_count(const an_args *a, tokens_report *t)
{
    int rc = EXIT_BAD_INPUT;
    t->ris = calloc((size_t)a->n_files, sizeof(run_info *));
    if (!t->ris)
        return an_fail(a, rc, "out of memory");
    an_args one = *a;
    for (int r = 0; r < a->n_files; r++) {
        one.files = a->files + r;
        if (an_open_routed_run(&one, &t->ris[r]))
            return rc;
        t->n_runs++;
        const run_info *ri = t->ris[r];
        if (!ri->labels || ri->n_classes == 0) {
            bool held = strcmp(ri->cfg.val_source, "none") != 0;
            an_fail(a, rc, "%s: no token labels (data.%s = %s: only brown, synthetic and token "
                    "files with a .pos of classes beside them have classes)", ri->path, held ? "val_source" : "source",
                    held ? ri->cfg.val_source : ri->cfg.source);
            return rc;
        }
    }
    t->ri = t->ris[0];
    if ((rc = check_replicates(a, t)))
        return rc;
    rc = EXIT_BAD_INPUT;
    if (t->n_runs > 1)
        group_base_name(t->ri->name, t->name, (int)sizeof(t->name));
    else
        snprintf(t->name, sizeof(t->name), "%s", t->ri->name);
    int s0, s1;
    if (steps_of(a, t->ri, &s0, &s1))
        return rc;
    t->first = t->ri->steps[s0];
    t->last = t->ri->steps[s1];
    t->n_steps = s1 - s0 + 1;
    t->own_last = a->step < 0;
    t->predicted = a->predicted;
    t->bucket_len = (t->ri->S + TK_BUCKETS - 1) / TK_BUCKETS;
    t->layers = calloc((size_t)t->ri->cfg.n_layers, sizeof(token_layer));
    if (!t->layers || count_layers(a, t))
        return rc;
    return 0;
}

void free_tokens_report(tokens_report *t)
{
    for (int k = 0; t->layers && k < t->n_layers; k++) {
        free(t->layers[k].run_cls);
        free(t->layers[k].run_pos);
    }
    free(t->layers);
    for (int r = 0; r < t->n_runs; r++)
        free_run_info(&t->ris[r]);
    free(t->ris);
    memset(t, 0, sizeof(*t));
}
