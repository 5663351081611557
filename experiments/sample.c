/* mode-exp sample: generation with a KV cache per layer. */
#include "experiments/cli.h"

#include "core/rng/pcg32.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_sample[] =
    "usage: mode-exp sample CKPT --prompt TEXT --tokens N [--temperature T] [--top-k K]\n"
    "                       [--seed S]\n"
    "  Generate N tokens after the prompt with a KV cache per layer.  Routed layers\n"
    "  decide per token by the causal rule (MODEL.md); a token that skips a layer costs\n"
    "  nothing there and adds no K/V to its cache.  Prints the text, then per routed\n"
    "  layer the share of generated tokens that took the block against its capacity.\n"
    "  --temperature T  softmax temperature (default 1; 0 = greedy)\n"
    "  --top-k K        sample among the K most likely tokens (default 0 = all)\n"
    "  --seed S         PCG32 seed of the sampler (default 1)\n"
    "  Generation stops at the model's sequence length.\n";

/* Next token from logits[V]: greedy at temperature 0, else softmax(l / T)
 * over the top_k most likely (all when top_k <= 0), drawn with PCG32. */
static int sample_token(const float *logits, int V, double temperature, long top_k, pcg32 *rng,
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

int cmd_sample(mode_ctx *ctx, int argc, char **argv)
{
    cli c;
    if (parse_cli(&c, argc - 2, argv + 2, usage_sample))
        return 2;
    if (!c.prompt || !c.prompt[0] || c.tokens <= 0) {
        fprintf(stderr, "mode-exp sample: --prompt TEXT (not empty) and --tokens N (> 0) are "
                        "needed\n%s", usage_sample);
        free(c.over);
        return 2;
    }
    choose_threads(&c, ctx);
    char err[1024] = "";
    run_config cfg;
    model *m = NULL;
    int rc = load_checkpoint_model(c.config, &cfg, &m, 1, ctx, false, err, sizeof(err));
    int S = cfg.seq_len, V = cfg.vocab, L = cfg.n_layers;
    if (!rc && V != 256) {
        snprintf(err, sizeof(err), "%s: vocab %d: a text prompt needs a byte-level model (256)",
                 c.config, V);
        rc = -EINVAL;
    }
    long plen = (long)strlen(c.prompt);
    if (!rc && plen >= S) {
        snprintf(err, sizeof(err), "prompt of %ld bytes: the model's context is %d", plen, S);
        rc = -EINVAL;
    }
    if (!rc && (rc = model_decode_begin(m, S)))
        snprintf(err, sizeof(err), "cannot start decoding: %s", strerror(-rc));
    float *logits = malloc((size_t)V * sizeof(float));
    double *p = malloc((size_t)V * sizeof(double));
    unsigned char *taken = calloc((size_t)L, 1);
    long *took = calloc((size_t)L, sizeof(long)), generated = 0;
    if (!rc && (!logits || !p || !taken || !took))
        rc = -ENOMEM;
    pcg32 rng;
    pcg32_seed(&rng, (uint64_t)c.seed, 0x53414d50u);
    if (!rc)
        fwrite(c.prompt, 1, (size_t)plen, stdout);
    token_t tok = (uint8_t)c.prompt[0];
    for (int32_t pos = 0; !rc && pos < S - 1 && generated < c.tokens; pos++) {
        rc = model_decode_step(m, ctx, tok, pos, logits, taken);
        if (rc) {
            snprintf(err, sizeof(err), "decoding position %d failed: %s", pos, strerror(-rc));
            break;
        }
        if (pos + 1 < plen) {
            tok = (uint8_t)c.prompt[pos + 1];
            continue;
        }
        if (pos >= plen) /* taken[] describes a generated token */
            for (int l = 0; l < L; l++)
                took[l] += taken[l];
        tok = (token_t)sample_token(logits, V, c.temperature, c.top_k, &rng, p);
        putchar(tok);
        generated++;
    }
    if (!rc) {
        printf("\n# %ld tokens generated%s\n", generated,
               generated < c.tokens ? " (stopped at the model's context length)" : "");
        /* the first generated token is sampled from the prompt's last
         * position, so the counts cover generated - 1 tokens run through */
        long ran = generated > 0 ? generated - 1 : 0;
        for (int l = 0; l < L; l++) {
            const char *k = cfg.layers[l].kind;
            double share = ran ? 100.0 * (double)took[l] / (double)ran : 0.0;
            if (!strcmp(k, "mod") || !strcmp(k, "staged"))
                printf("# layer %d (%s): %ld of %ld generated tokens took the block (%.1f%%), "
                       "capacity %.1f%%\n", l, k, took[l], ran, share,
                       100.0 * cfg.layers[l].capacity);
            else if (strcmp(k, "dense")) /* moe, integrated: a real expert as first choice */
                printf("# layer %d (%s): %ld of %ld generated tokens went to a real expert "
                       "first (%.1f%%)\n", l, k, took[l], ran, share);
        }
    } else {
        fprintf(stderr, "mode-exp sample: %s\n", err);
    }
    free(logits);
    free(p);
    free(taken);
    free(took);
    free_model(&m);
    free(c.over);
    return rc ? 1 : 0;
}

