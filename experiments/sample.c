/* mode-exp sample: generation with a KV cache per layer. */
#include "experiments/cli.h"
#include "experiments/sample_batch.h"
#include "experiments/speculative.h"
#include "core/data/tokenizer.h"
#include "core/kernels/matmul.h"
#include "core/model/lanes.h"
#include "core/train/counterfactual.h"
#include "moe/registry.h"

#include "core/rng/pcg32.h"
#include "core/rng/streams.h"
#include "core/util/finite.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_sample[] =
    "usage: mode-exp sample CKPT [section.key=value ...] (--prompt TEXT | --prompt-ids I,J,...)\n"
    "                       --tokens N [--temperature T] [--top-k K] [--seed S] [--ids]\n"
    "                       [--routing POLICY [--routing-layers L]] [--bench R] [--batch B]\n"
    "  Generate N tokens after the prompt with a KV cache per layer.  Routed layers\n"
    "  decide per token by the causal rule (MODEL.md); a token that skips a layer costs\n"
    "  nothing there and adds no K/V to its cache.  Prints the text, then per routed\n"
    "  layer the share of generated tokens that took the block against its capacity.\n"
    "  --temperature T  softmax temperature (default 1; 0 = greedy)\n"
    "  --top-k K        sample among the K most likely tokens (default 0 = all); not at\n"
    "                   temperature 0, where it would change nothing\n"
    "  --seed S         PCG32 seed of the sampler and of --routing random (default 1);\n"
    "                   not where nothing is drawn\n"
    "  --prompt TEXT    a text prompt: bytes for byte-level models (vocab 256), encoded\n"
    "                   by the run's tokenizer for subword models (data.tokenizer)\n"
    "  --prompt-ids L   the prompt as token ids, comma-separated, each below the vocab\n"
    "  --bench R        then the decode benchmark: R more sequences from the prompt, each\n"
    "                   of --tokens tokens, timed (tokens/s, ms a token, the routed\n"
    "                   layers' shares, the key-value cache's bytes a position as\n"
    "                   allocated); batch 1\n"
    "  --batch B        decode B sequences from the prompt at once (1..1024; default 1):\n"
    "                   every token of every sequence is routed on its own, the tokens\n"
    "                   that take a block share its products; sequence 1 draws as a\n"
    "                   sequence alone does, each other from its own stream of --seed;\n"
    "                   prints each; with --bench R, R rounds of B sequences timed.\n"
    "                   Early exit: at most data.seq_len sequences (refused, naming\n"
    "                   the layer)\n"
    "  --ids            print token ids (prompt and generated) instead of text; the\n"
    "                   only output of a model whose vocabulary is not bytes and whose\n"
    "                   run had no tokenizer (data.tokenizer)\n"
    "  section.key=value  a kind's key changed for sampling (mod.capacity=0.25, ...), as\n"
    "                   for eval (docs/instruments.md, the compute dial)\n"
    "  --routing P      counterfactual decisions while decoding: random (depth routing:\n"
    "                   each token takes the block with probability capacity; experts: a\n"
    "                   random real expert), noop-none, noop-all (integrated); --seed keys\n"
    "                   the draws; --routing-layers L only in layers L\n"
    "  --speculative E  self-speculative greedy decoding (LayerSkip; docs/speculative.md):\n"
    "                   layers 0..E and exit point E's head draft --draft K tokens (default\n"
    "                   4), the whole model (every layer, no token leaving at an exit)\n"
    "                   verifies them; its output equals the whole model's greedy tokens.\n"
    "                   auto: the deepest exit point before the last layer.  Needs\n"
    "                   --temperature 0, no --routing, and the prompt and tokens within S;\n"
    "                   prints the acceptance rate; with --bench R, tokens/s against the\n"
    "                   whole model decoding a token at a time\n"
    "  Generation goes on past the model's sequence length S: each layer then attends\n"
    "  to the last S positions (a sliding window), and the output says so.\n";

/* The decode benchmark (sample --bench R): R more sequences from the same
 * prompt, each decoded with the KV cache to --tokens tokens or the context's
 * end, timed from the first generated token's step to the last (sampling
 * included, the prompt not); tokens/s of each sequence, and the routed
 * layers' shares over all of them. */
typedef struct decode_bench {
    long seqs, tokens;
    double seconds, best, worst; /* tokens/s of the fastest and slowest sequence */
    long *took;                  /* [L] generated tokens that took layer l's block */
} decode_bench;

static int bench_decode(model *m, mode_ctx *ctx, const cli *c, const token_t *prompt, long plen,
                        int S, int V, pcg32 *rng, float *logits, double *p,
                        unsigned char *taken, decode_bench *out, char *err, int err_len)
{
    int L = m->dims.n_layers, rc = 0;
    for (long r = 0; r < c->bench && !rc; r++) {
        if ((rc = model_decode_begin(m, (int)(plen + c->tokens))))
            break;
        token_t tok = prompt[0];
        long gen = 0;
        double t0 = 0.0;
        for (int32_t pos = 0; pos < plen + c->tokens - 1 && gen < c->tokens; pos++) {
            if (pos == plen - 1)
                t0 = mode_now(); /* the step whose logits give the first new token */
            if ((rc = model_decode_step(m, ctx, tok, pos, logits, taken))) {
                snprintf(err, (size_t)err_len, "decode benchmark failed: %s", strerror(-rc));
                break;
            }
            if (pos + 1 < plen) {
                tok = prompt[pos + 1];
                continue;
            }
            if ((rc = check_logits(logits, V, pos, err, err_len)))
                break;
            if (pos >= plen)
                for (int l = 0; l < L; l++)
                    out->took[l] += taken[l];
            tok = (token_t)sample_token(logits, V, c->temperature, c->top_k, rng, p);
            gen++;
        }
        double dt = mode_now() - t0;
        if (rc || gen == 0 || dt <= 0.0)
            continue;
        double tps = (double)gen / dt;
        out->best = out->seqs ? fmax(out->best, tps) : tps;
        out->worst = out->seqs ? fmin(out->worst, tps) : tps;
        out->seqs++;
        out->tokens += gen;
        out->seconds += dt;
    }
    return rc;
}

static int refuse(const char *why, cli *c, model **m, token_t *prompt)
{
    fprintf(stderr, "mode-exp sample: %s\n", why);
    free_model(m);
    free(prompt);
    free(c->over);
    return 2;
}

/* sample --speculative: the tokens, the acceptance rate and, with --bench,
 * tokens/s against the whole model a token at a time. */
static int sample_speculative(model *m, mode_ctx *ctx, const cli *c, const char *spec,
                              long draft, const token_t *prompt, long plen, bool ids)
{
    char err[1024] = "";
    int E = spec_exit_layer(m, spec, err, sizeof(err));
    if (E < 0) {
        fprintf(stderr, "mode-exp sample: %s\n", err);
        return 2;
    }
    token_t *out = malloc((size_t)c->tokens * sizeof(token_t));
    spec_stats st, plain;
    int rc = out ? spec_generate(m, ctx, prompt, plen, c->tokens, E, (int)draft, out, &st, err,
                                 sizeof(err))
                 : -ENOMEM;
    if (rc == -ENOTSUP)
        rc = 2; /* a kind that cannot roll back its cache */
    for (long i = 0; !rc && i < plen; i++)
        ids ? printf("%s%u", i ? " " : "", (unsigned)prompt[i]) : putchar((int)prompt[i]);
    for (long i = 0; !rc && i < c->tokens; i++)
        ids ? printf(" %u", (unsigned)out[i]) : putchar((int)out[i]);
    if (!rc) {
        long ran = c->tokens > 0 ? c->tokens : 1;
        printf("\n# speculative decoding: exit point %d drafts %ld tokens a round: %ld rounds, "
               "%ld of %ld drafted tokens accepted (acceptance rate %.4f), %.3f tokens a round\n",
               E, draft, st.rounds, st.accepted, st.drafted,
               st.drafted ? (double)st.accepted / (double)st.drafted : 0.0,
               st.rounds ? (double)c->tokens / (double)st.rounds : 0.0);
        printf("# decoding ran %.4g FLOPs a generated token (counted at its products, drafts "
               "rolled back included)\n", st.flops / (double)ran);
        printf("# %ld tokens generated\n", c->tokens);
    }
    double ts = 0.0, tp = 0.0, fp = 0.0;
    for (long r = 0; !rc && r < c->bench; r++) {
        if (!(rc = spec_generate(m, ctx, prompt, plen, c->tokens, E, (int)draft, out, &st, err,
                                 sizeof(err))))
            rc = spec_generate(m, ctx, prompt, plen, c->tokens, E, 0, out, &plain, err,
                               sizeof(err));
        ts += st.seconds;
        tp += plain.seconds;
        fp = plain.flops;
    }
    if (!rc && c->bench > 0 && ts > 0.0 && tp > 0.0)
        printf("# decode benchmark: %ld sequences of batch 1, %ld generated tokens each from a "
               "%ld-token prompt: speculative %.1f tokens/s, whole model a token at a time %.1f "
               "tokens/s (%.3fx); FLOPs a token %.4g against %.4g\n", c->bench, c->tokens, plen,
               (double)c->bench * c->tokens / ts, (double)c->bench * c->tokens / tp, tp / ts,
               st.flops / (double)c->tokens, fp / (double)c->tokens);
    if (rc)
        fprintf(stderr, "mode-exp sample: --speculative %s: %s\n", spec, err);
    free(out);
    return rc == 2 ? 2 : rc ? 1 : 0;
}

int cmd_sample(mode_ctx *ctx, int argc, char **argv)
{
    cli c;
    /* --speculative E|auto and --draft K, sample's own */
    const char *spec = NULL, *draft_s = NULL, *batch_s = NULL;
    int kept = 2;
    for (int i = 2; i < argc; i++) {
        bool sp = !strcmp(argv[i], "--speculative"), dr = !strcmp(argv[i], "--draft"),
             ba = !strcmp(argv[i], "--batch");
        if ((sp || dr || ba) && i + 1 >= argc) {
            fprintf(stderr, "mode-exp sample: %s needs a value\n%s", argv[i], usage_sample);
            return 2;
        }
        if (sp || dr || ba) {
            *(sp ? &spec : dr ? &draft_s : &batch_s) = argv[++i];
            continue;
        }
        argv[kept++] = argv[i];
    }
    argc = kept;
    long n_batch = 1;
    if (batch_s) {
        char *end = NULL;
        errno = 0;
        n_batch = strtol(batch_s, &end, 10);
        if (end == batch_s || *end || errno || n_batch < 1 || n_batch > MODE_MAX_LANES || spec) {
            if (spec)
                fprintf(stderr, "mode-exp sample: --batch %s: not with --speculative (which "
                                "decodes one sequence)\n", batch_s);
            else
                fprintf(stderr, "mode-exp sample: --batch %s: expected sequences decoded at "
                                "once, 1..%d\n", batch_s, MODE_MAX_LANES);
            return 2;
        }
    }
    long draft = 4;
    if (draft_s) {
        char *end = NULL;
        errno = 0;
        draft = strtol(draft_s, &end, 10);
        if (!spec || end == draft_s || *end || errno || draft < 1 || draft > 64) {
            fprintf(stderr, "mode-exp sample: --draft %s: %s\n", draft_s,
                    spec ? "expected draft tokens a round, 1..64"
                         : "goes with --speculative E|auto");
            return 2;
        }
    }
    static const cli_opts opts = { "sample", CLI_THREADS | CLI_PROMPT | CLI_PROMPT_IDS |
                                   CLI_TOKENS | CLI_TEMPERATURE | CLI_TOP_K | CLI_SEED | CLI_IDS |
                                   CLI_ROUTING | CLI_ROUTING_LAYERS | CLI_BENCH };
    if (parse_cli(&c, argc - 2, argv + 2, usage_sample, &opts, ctx->rank))
        return 2;
    /* the rule broken, by name */
    const char *why = c.prompt && c.prompt_ids   ? "--prompt TEXT or --prompt-ids I,J,..., not both"
                      : c.prompt && !c.prompt[0]   ? "--prompt TEXT: an empty prompt"
                      : !c.prompt && !c.prompt_ids ? "--prompt TEXT or --prompt-ids I,J,... is needed"
                      : c.tokens <= 0              ? "--tokens N (> 0) is needed"
                                                   : NULL;
    if (why) {
        fprintf(stderr, "mode-exp sample: %s\n%s", why, usage_sample);
        free(c.over);
        return 2;
    }
    /* the prompt as tokens: bytes of the text, or the ids given */
    long plen = 0;
    token_t *prompt = NULL;
    if (c.prompt) {
        plen = (long)strlen(c.prompt);
        prompt = malloc((size_t)plen * sizeof(token_t));
        for (long i = 0; prompt && i < plen; i++)
            prompt[i] = (uint8_t)c.prompt[i];
    } else {
        prompt = malloc((strlen(c.prompt_ids) / 2 + 2) * sizeof(token_t));
        for (const char *q = c.prompt_ids; prompt && *q;) {
            char *end = NULL;
            errno = 0;
            unsigned long v = strtoul(q, &end, 10);
            if (end == q || errno || v > 0x7fffffffUL || (*end && *end != ',') || *q == '-') {
                fprintf(stderr, "mode-exp sample: --prompt-ids %s: expected token ids (integers "
                                ">= 0) separated by commas\n", c.prompt_ids);
                free(prompt);
                free(c.over);
                return 2;
            }
            prompt[plen++] = (token_t)v;
            q = *end ? end + 1 : end;
        }
    }
    if (!prompt || plen == 0) {
        fprintf(stderr, "mode-exp sample: %s\n", prompt ? "an empty prompt" : "out of memory");
        free(prompt);
        free(c.over);
        return prompt ? 2 : 1;
    }
    choose_threads(&c, ctx);
    char err[1024] = "";
    run_config cfg;
    model *m = NULL;
    ckpt_meta meta = { 0 };
    int rc = load_checkpoint_model(c.config, &cfg, &m, 1, ctx, false, c.n_over, c.over, &meta,
                                   err, sizeof(err));
    int S = cfg.seq_len, V = cfg.vocab, L = cfg.n_layers;
    /* a subword model: its run's tokenizer encodes the prompt and decodes
     * what is printed */
    char tpath[MODE_PATH_MAX] = "";
    tokenizer *tk = NULL;
    if (!rc)
        rc = checkpoint_tokenizer(c.config, &cfg, meta.data, tpath, sizeof(tpath), err,
                                  sizeof(err));
    ckpt_meta_clear(&meta);
    if (!rc && tpath[0])
        rc = tokenizer_load(&tk, tpath, err, sizeof(err));
    if (!rc && tk && c.prompt) {
        int32_t *enc = NULL;
        long n_enc = 0;
        rc = tokenizer_encode(tk, c.prompt, strlen(c.prompt), &enc, &n_enc, err, sizeof(err));
        token_t *np = !rc && n_enc > 0 ? malloc((size_t)n_enc * sizeof(token_t)) : NULL;
        if (!rc && !np) {
            snprintf(err, sizeof(err), "the prompt encodes to no token");
            rc = -EINVAL;
        }
        for (long i = 0; np && i < n_enc; i++)
            np[i] = (token_t)enc[i];
        free(enc);
        if (np) {
            free(prompt);
            prompt = np;
            plen = n_enc;
        }
    }
    bool ids = c.ids || (V != 256 && !tk); /* text from a byte-level model or a tokenizer */
    if (!rc && c.prompt && V != 256 && !tk) {
        snprintf(err, sizeof(err), "%s: vocab %d: a text prompt is bytes, for a byte-level "
                 "model (vocab 256), and the run had no tokenizer (data.tokenizer); give this "
                 "model's token ids with --prompt-ids", c.config, V);
        rc = -EINVAL;
    }
    /* with a tokenizer the text is printed whole at the end: a piece alone
     * may be part of a character */
    token_t *seq = tk ? malloc(((size_t)plen + (size_t)c.tokens + 1) * sizeof(token_t)) : NULL;
    long n_seq = 0;
    if (!rc && tk && !seq)
        rc = -ENOMEM;
    for (long i = 0; !rc && i < plen; i++) {
        if (prompt[i] >= (token_t)V) {
            snprintf(err, sizeof(err), "--prompt-ids: token %ld is %u, not below the model's "
                     "vocabulary of %d", i, (unsigned)prompt[i], V);
            rc = -EINVAL;
        }
    }
    if (!rc && plen + c.tokens > (1L << 30)) {
        snprintf(err, sizeof(err), "prompt of %ld tokens and --tokens %ld: expected at most "
                 "%ld positions in all", plen, c.tokens, 1L << 30);
        rc = -EINVAL;
    }
    if (!rc && spec) {
        /* the whole model's greedy tokens, so nothing drawn or steered */
        const char *no = c.temperature > 0.0
                              ? "--speculative: needs --temperature 0 (greedy decoding, the "
                                "whole model's tokens it reproduces)"
                          : c.routing ? "--speculative: not with --routing (the whole model's "
                                        "learned decisions are what it reproduces)"
                          : tk ? "--speculative: a model with a tokenizer (use a byte-level or "
                                 "--prompt-ids model)"
                          : plen + c.tokens > S ? "--speculative: the prompt and --tokens must "
                                                  "fit the model's sequence length S (a "
                                                  "sliding window cannot roll back)"
                                                : NULL;
        if (no) {
            tokenizer_free(&tk);
            free(seq);
            return refuse(no, &c, &m, prompt);
        }
        rc = sample_speculative(m, ctx, &c, spec, draft, prompt, plen, ids);
        tokenizer_free(&tk);
        free_model(&m);
        free(prompt);
        free(c.over);
        return rc;
    }
    routing_cli rt;
    route_plan plan = { .seed = (uint64_t)c.seed };
    if (!rc && c.routing) {
        if (parse_routing(&c, L, &rt)) {
            free_model(&m);
            free(prompt);
            free(c.over);
            return 2;
        }
        if (rt.n != 1) {
            snprintf(err, sizeof(err), "--routing %s: sampling takes one policy", c.routing);
            rc = -EINVAL;
        } else {
            plan.policy = rt.policies[0];
            plan.layers = rt.has_layers ? rt.layers : NULL;
            rc = route_check(m, plan.policy, plan.layers, true, err, sizeof(err));
            m->route = &plan;
        }
    }
    if (!rc && n_batch > 1) {
        rc = sample_batched(m, ctx, &c, (int)n_batch, prompt, plen, ids, tk, &cfg);
        tokenizer_free(&tk);
        free(seq);
        free_model(&m);
        free(prompt);
        free(c.over);
        return rc;
    }
    /* the benchmark's key-value cache a position, measured at the allocator
     * before the caches' first use (they are then sized for S positions:
     * the same numbers, the caches only grow) */
    double cache_bytes = 0.0;
    if (!rc && c.bench > 0 && (rc = model_decode_cache_bytes(m, &cache_bytes)))
        snprintf(err, sizeof(err), "cannot measure the decoding caches: %s", strerror(-rc));
    /* past the context (S) each layer attends to the last S positions */
    if (!rc && (rc = model_decode_begin(m, (int)(plen + c.tokens))))
        snprintf(err, sizeof(err), "cannot start decoding: %s", strerror(-rc));
    float *logits = malloc((size_t)V * sizeof(float));
    double *p = malloc((size_t)V * sizeof(double));
    unsigned char *taken = calloc((size_t)L, 1);
    long *took = calloc((size_t)L, sizeof(long)), generated = 0;
    if (!rc && (!logits || !p || !taken || !took))
        rc = -ENOMEM;
    pcg32 rng;
    pcg32_seed(&rng, (uint64_t)c.seed, PCG_STREAM_SAMPLE);
    for (long i = 0; !rc && i < plen; i++) {
        if (ids)
            printf("%s%u", i ? " " : "", (unsigned)prompt[i]);
        else if (tk)
            seq[n_seq++] = prompt[i];
        else
            putchar((int)prompt[i]);
    }
    token_t tok = prompt[0];
    double flops = 0.0, gen_flops = 0.0;
    for (int32_t pos = 0; !rc && pos < plen + c.tokens - 1 && generated < c.tokens; pos++) {
        /* the products decoding really runs, counted (matmul.h) */
        flops = 0.0;
        flops_count(&flops);
        rc = model_decode_step(m, ctx, tok, pos, logits, taken);
        flops_count(NULL);
        if (pos >= plen)
            gen_flops += flops;
        if (rc) {
            snprintf(err, sizeof(err), "decoding position %d failed: %s", pos, strerror(-rc));
            break;
        }
        if (pos + 1 < plen) {
            tok = prompt[pos + 1];
            continue;
        }
        if ((rc = check_logits(logits, V, pos, err, sizeof(err))))
            break;
        if (pos >= plen) /* taken[] describes a generated token */
            for (int l = 0; l < L; l++)
                took[l] += taken[l];
        tok = (token_t)sample_token(logits, V, c.temperature, c.top_k, &rng, p);
        if (ids)
            printf(" %u", (unsigned)tok);
        else if (tk)
            seq[n_seq++] = tok;
        else
            putchar((int)tok);
        generated++;
    }
    if (!rc && tk && !ids) {
        int32_t *i32 = malloc(((size_t)n_seq + 1) * sizeof(int32_t));
        for (long i = 0; i32 && i < n_seq; i++)
            i32[i] = (int32_t)seq[i];
        size_t tl = 0;
        char *text = i32 ? tokenizer_decode(tk, i32, n_seq, &tl) : NULL;
        if (text)
            fwrite(text, 1, tl, stdout);
        else
            rc = -ENOMEM;
        free(text);
        free(i32);
    }
    decode_bench db = { .took = calloc((size_t)L, sizeof(long)) };
    if (!rc && c.bench > 0) {
        if (!db.took)
            rc = -ENOMEM;
        else
            rc = bench_decode(m, ctx, &c, prompt, plen, S, V, &rng, logits, p, taken, &db, err,
                              sizeof(err));
    }
    if (!rc) {
        if (tk)
            printf("\n# tokenizer %s: %ld prompt tokens", tpath, plen);
        long ran_tokens = generated > 0 ? generated - 1 : 0;
        double nominal = model_flops_per_seq(m, NULL) / S;
        printf("\n# decoding ran %.4g FLOPs a generated token (counted at its products; the "
               "model's nominal forward: %.4g a token)\n",
               ran_tokens ? gen_flops / (double)ran_tokens : 0.0, nominal);
        printf("# %ld tokens generated%s\n", generated,
               plen + generated > S ? " (past the context: a sliding window of the last S)" : "");
        if (db.seqs > 0) {
            printf("# decode benchmark: %ld sequences of batch 1, %ld generated tokens from a "
                   "%ld-token prompt: %.1f tokens/s (sequences %.1f to %.1f), %.3f ms a "
                   "token\n", db.seqs, db.tokens, plen, (double)db.tokens / db.seconds,
                   db.worst, db.best, 1e3 * db.seconds / (double)db.tokens);
            printf("# decode benchmark: key-value cache %.1f bytes a position (what decoding "
                   "allocates for %d positions less for %d, measured at the allocator)\n",
                   cache_bytes, S, S / 2);
            long ran_b = db.tokens - db.seqs; /* the first token of each came from the prompt */
            for (int l = 0; l < L; l++) {
                const char *k = cfg.layers[l].kind;
                if (layer_kind_lookup(mode_kinds, k)->decides.decides)
                    printf("# decode benchmark: layer %d (%s): %.4f of generated tokens took "
                           "its block\n", l, k,
                           ran_b > 0 ? (double)db.took[l] / (double)ran_b : 0.0);
            }
        }
        if (c.routing)
            printf("# routing decisions: %s%s%s (seed %ld), not the learned ones\n",
                   route_policy_names[plan.policy], c.routing_layers ? " in layers " : "",
                   c.routing_layers ? c.routing_layers : "", c.seed);
        /* the first generated token is sampled from the prompt's last
         * position, so the counts cover generated - 1 tokens run through */
        print_layer_shares(&cfg, took, generated > 0 ? generated - 1 : 0);
    } else {
        fprintf(stderr, "mode-exp sample: %s\n", err);
    }
    free(db.took);
    free(prompt);
    free(seq);
    tokenizer_free(&tk);
    free(logits);
    free(p);
    free(taken);
    free(took);
    free_model(&m);
    free(c.over);
    return rc ? 1 : 0;
}

