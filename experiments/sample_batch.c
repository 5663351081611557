/* mode-exp sample --batch B: B sequences decoded together, each token of
 * each sequence routed on its own (sample_batch.h, core/model/lanes.h). */
#include "experiments/sample_batch.h"
#include "core/kernels/matmul.h"
#include "core/model/lanes.h"
#include "core/model/route.h"
#include "core/rng/streams.h"
#include "core/util/ctx.h"
#include "core/util/finite.h"
#include "moe/registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sample_token(const float *logits, int V, double temperature, long top_k, pcg32 *rng,
                        double *p)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best])
            best = v;
    if (temperature <= 0.0)
        return best;
    /* the k-th largest logit bounds the candidates */
    double floor_logit = -HUGE_VAL;
    if (top_k > 0 && top_k < V) {
        for (int v = 0; v < V; v++)
            p[v] = (double)logits[v];
        for (long i = 0; i < top_k; i++) { /* k passes of selection: V is small */
            int m = -1;
            for (int v = 0; v < V; v++)
                if (p[v] != -HUGE_VAL && (m < 0 || p[v] > p[m]))
                    m = v;
            floor_logit = p[m];
            p[m] = -HUGE_VAL;
        }
    }
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        p[v] = (double)logits[v] >= floor_logit
                   ? exp(((double)logits[v] - (double)logits[best]) / temperature)
                   : 0.0;
        sum += p[v];
    }
    double u = (double)pcg32_uniform(rng) * sum;
    for (int v = 0; v < V; v++) {
        u -= p[v];
        if (u < 0.0 && p[v] > 0.0)
            return v;
    }
    return best;
}

/* Logits that are not finite would be sampled as token 0 (a NUL byte):
 * an error naming the position and the first bad logit, never output. */
int check_logits(const float *logits, int V, int32_t pos, char *err, int err_len)
{
    long bad = first_nonfinite(logits, (size_t)V);
    if (bad < 0)
        return 0;
    snprintf(err, (size_t)err_len, "decoding position %d: the logit of token %ld is %g, not a "
             "finite number: the model's outputs overflow (its weights, or the setting, make "
             "them non-finite); nothing more is generated", pos, bad, (double)logits[bad]);
    return -ERANGE;
}

void print_layer_shares(const run_config *cfg, const long *took, long ran)
{
    for (int l = 0; l < cfg->n_layers; l++) {
        const char *k = cfg->layers[l].kind;
        const layer_kind *kd = layer_kind_lookup(mode_kinds, k);
        double share = ran ? 100.0 * (double)took[l] / (double)ran : 0.0, capacity, most;
        const decision_decl *dd = &kd->decides;
        if (dd->decides & DECIDES_EXIT)
            printf("# layer %d (%s): %ld of %ld generated tokens left the stack here "
                   "(%.1f%%)\n", l, k, took[l], ran, share);
        else if (dd->decides & DECIDES_DEPTH &&
                 !layer_spec_number(&cfg->layers[l], kd, dd->most_key, &most))
            printf("# layer %d (%s): %.3f of at most %.0f recursions a generated token "
                   "(%ld of %ld)\n", l, k, ran ? (double)took[l] / (double)ran : 0.0, most,
                   took[l], ran * (long)most);
        else if (dd->decides & DECIDES_TAKE &&
                 !layer_spec_number(&cfg->layers[l], kd, dd->share_key, &capacity))
            printf("# layer %d (%s): %ld of %ld generated tokens took the block (%.1f%%), "
                   "capacity %.1f%%\n", l, k, took[l], ran, share, 100.0 * capacity);
        else if (dd->decides & DECIDES_EXPERTS)
            printf("# layer %d (%s): %ld of %ld generated tokens went to a real expert "
                   "first (%.1f%%)\n", l, k, took[l], ran, share);
        else if (dd->decides)
            printf("# layer %d (%s): %ld of %ld generated tokens ran the block (%.1f%%)\n", l,
                   k, took[l], ran, share);
    }
}

typedef struct lanes_run {
    int B, L, V;
    long gen;       /* tokens generated a lane */
    double flops;   /* the products run for generated tokens (matmul.h's count) */
    double seconds; /* from the step whose logits give the first new token */
} lanes_run;

/* One round: every lane from the prompt to c->tokens new tokens (out[B][n]
 * when not NULL), took[l] += the generated tokens that took layer l. */
static int run_lanes(model *m, mode_ctx *ctx, const cli *c, const token_t *prompt, long plen,
                     pcg32 *rng, float *logits, double *p, unsigned char *taken, token_t *tok,
                     token_t *out, long *took, lanes_run *r, char *err, int err_len)
{
    int B = r->B, L = r->L, V = r->V, bad = -1;
    int rc = model_decode_lanes(m, (int)(plen + c->tokens), B, &bad);
    if (rc) {
        snprintf(err, (size_t)err_len, "cannot start batched decoding: %s", strerror(-rc));
        return rc;
    }
    for (int i = 0; i < B; i++)
        tok[i] = prompt[0];
    r->gen = 0;
    double t0 = 0.0;
    for (int32_t pos = 0; pos < plen + c->tokens - 1 && r->gen < c->tokens; pos++) {
        if (pos == plen - 1)
            t0 = mode_now();
        double f = 0.0;
        flops_count(&f);
        rc = model_decode_rows(m, ctx, tok, pos, logits, taken);
        flops_count(NULL);
        if (rc) {
            snprintf(err, (size_t)err_len, "decoding position %d of %d sequences failed: %s",
                     pos, B, strerror(-rc));
            return rc;
        }
        if (pos >= plen)
            r->flops += f;
        if (pos + 1 < plen) {
            for (int i = 0; i < B; i++)
                tok[i] = prompt[pos + 1];
            continue;
        }
        for (int i = 0; i < B; i++) {
            if ((rc = check_logits(logits + (size_t)i * V, V, pos, err, err_len)))
                return rc;
            if (pos >= plen) /* taken[] describes a generated token */
                for (int l = 0; l < L; l++)
                    took[l] += taken[(size_t)i * L + l];
            tok[i] = (token_t)sample_token(logits + (size_t)i * V, V, c->temperature, c->top_k,
                                           &rng[i], p);
            if (out)
                out[(size_t)i * c->tokens + r->gen] = tok[i];
        }
        r->gen++;
    }
    r->seconds = mode_now() - t0;
    return 0;
}

static void print_lane(const token_t *prompt, long plen, const token_t *gen, long n, bool ids,
                       tokenizer *tk)
{
    if (ids || !tk) {
        for (long i = 0; i < plen + n; i++) {
            token_t t = i < plen ? prompt[i] : gen[i - plen];
            if (ids)
                printf("%s%u", i ? " " : "", (unsigned)t);
            else
                putchar((int)t);
        }
        return;
    }
    int32_t *i32 = malloc(((size_t)plen + (size_t)n + 1) * sizeof(int32_t));
    for (long i = 0; i32 && i < plen + n; i++)
        i32[i] = (int32_t)(i < plen ? prompt[i] : gen[i - plen]);
    size_t tl = 0;
    char *text = i32 ? tokenizer_decode(tk, i32, plen + n, &tl) : NULL;
    if (text)
        fwrite(text, 1, tl, stdout);
    free(text);
    free(i32);
}

int sample_batched(model *m, mode_ctx *ctx, const cli *c, int B, const token_t *prompt,
                   long plen, bool ids, tokenizer *tk, const run_config *cfg)
{
    int L = m->dims.n_layers, V = m->dims.vocab, S = m->dims.seq_len, bad = -1;
    char err[1024] = "";
    int rc = model_decode_lanes(m, (int)(plen + c->tokens), B, &bad);
    if (rc == -ENOTSUP && bad >= 0) {
        fprintf(stderr, "mode-exp sample: --batch %d: layer %d (%s) decodes one sequence at a "
                "time (its kind has no batched decoding); "
                "--batch 1 decodes it\n", B, bad, cfg->layers[bad].kind);
        return 1;
    }
    if (rc == -E2BIG && bad >= 0) {
        fprintf(stderr, "mode-exp sample: --batch %d: layer %d (%s) decodes at most %d sequences "
                "at once (the rows of a forward, data.seq_len); a smaller --batch decodes it\n",
                B, bad, cfg->layers[bad].kind, m->dims.seq_len * m->max_seq);
        return 1;
    }
    pcg32 *rng = malloc((size_t)B * sizeof(pcg32));
    float *logits = malloc((size_t)B * V * sizeof(float));
    double *p = malloc((size_t)V * sizeof(double));
    unsigned char *taken = calloc((size_t)B * L, 1);
    token_t *tok = malloc((size_t)B * sizeof(token_t));
    token_t *out = malloc((size_t)B * c->tokens * sizeof(token_t));
    long *took = calloc((size_t)L, sizeof(long)), *btook = calloc((size_t)L, sizeof(long));
    if (!rc && (!rng || !logits || !p || !taken || !tok || !out || !took || !btook))
        rc = -ENOMEM;
    if (rc && !err[0])
        snprintf(err, sizeof(err), "cannot start batched decoding: %s", strerror(-rc));
    /* lane 0 draws as one sequence does; lane i its own keyed stream */
    for (int i = 0; !rc && i < B; i++) {
        if (i == 0)
            pcg32_seed(&rng[i], (uint64_t)c->seed, PCG_STREAM_SAMPLE);
        else
            pcg32_keyed(&rng[i], (uint64_t)c->seed, PCG_KEY_SAMPLE_LANE, (uint64_t)i, 0);
    }
    lanes_run r = { .B = B, .L = L, .V = V };
    if (!rc)
        rc = run_lanes(m, ctx, c, prompt, plen, rng, logits, p, taken, tok, out, took, &r, err,
                       sizeof(err));
    for (int i = 0; !rc && i < B; i++) {
        printf("%s# sequence %d of %d\n", i ? "\n" : "", i + 1, B);
        print_lane(prompt, plen, out + (size_t)i * c->tokens, r.gen, ids, tk);
        putchar('\n');
    }
    /* the benchmark: R more rounds, timed */
    long rounds = 0, btokens = 0;
    double bsec = 0.0, best = 0.0, worst = 0.0;
    for (long k = 0; !rc && k < c->bench; k++) {
        lanes_run br = { .B = B, .L = L, .V = V };
        rc = run_lanes(m, ctx, c, prompt, plen, rng, logits, p, taken, tok, NULL, btook, &br, err,
                       sizeof(err));
        if (rc || br.gen == 0 || br.seconds <= 0.0)
            continue;
        double tps = (double)B * br.gen / br.seconds;
        best = rounds ? (tps > best ? tps : best) : tps;
        worst = rounds ? (tps < worst ? tps : worst) : tps;
        rounds++;
        btokens += (long)B * br.gen;
        bsec += br.seconds;
    }
    if (!rc) {
        /* the first token of each came from the prompt */
        long ran = r.gen > 0 ? (long)B * (r.gen - 1) : 0;
        printf("# decoding ran %.4g FLOPs a generated token (counted at its products, %d "
               "sequences at once; the model's nominal forward: %.4g a token)\n",
               ran ? r.flops / (double)ran : 0.0, B, model_flops_per_seq(m, NULL) / S);
        printf("# %d sequences of %ld tokens generated together%s\n", B, r.gen,
               plen + r.gen > S ? " (past the context: a sliding window of the last S)" : "");
        if (rounds > 0) {
            printf("# decode benchmark: %ld rounds of batch %d, %ld generated tokens from a "
                   "%ld-token prompt: %.1f tokens/s (rounds %.1f to %.1f), %.3f ms a step of "
                   "%d tokens\n", rounds, B, btokens, plen, (double)btokens / bsec, worst, best,
                   1e3 * bsec * B / (double)btokens, B);
            long ran_b = btokens - rounds * B;
            for (int l = 0; l < L; l++)
                if (layer_kind_lookup(mode_kinds, cfg->layers[l].kind)->decides.decides)
                    printf("# decode benchmark: layer %d (%s): %.4f of generated tokens took "
                           "its block\n", l, cfg->layers[l].kind,
                           ran_b > 0 ? (double)btook[l] / (double)ran_b : 0.0);
        }
        if (c->routing && m->route)
            printf("# routing decisions: %s%s%s (seed %ld), not the learned ones\n",
                   route_policy_names[m->route->policy], c->routing_layers ? " in layers " : "",
                   c->routing_layers ? c->routing_layers : "", c->seed);
        print_layer_shares(cfg, took, ran);
    } else {
        fprintf(stderr, "mode-exp sample: %s\n", err);
    }
    free(rng);
    free(logits);
    free(p);
    free(taken);
    free(tok);
    free(out);
    free(took);
    free(btook);
    return rc ? 1 : 0;
}
