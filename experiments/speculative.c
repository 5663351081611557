/* Self-speculative greedy decoding (speculative.h, docs/speculative.md). */
#include "experiments/speculative.h"

#include "core/kernels/matmul.h"
#include "core/util/ctx.h"
#include "core/util/finite.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int spec_exit_layer(const model *m, const char *value, char *why, int why_len)
{
    int L = m->dims.n_layers, E = -1;
    if (!strcmp(value, "auto")) {
        for (int l = 0; l < L - 1; l++)
            if (m->layers[l].kind->exit_point)
                E = l;
        if (E < 0)
            snprintf(why, (size_t)why_len, "--speculative auto: the model has no exit point "
                     "before its last layer (layers of kind exit): nothing drafts");
        return E;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (end == value || *end || errno || v < 0 || v >= L - 1) {
        snprintf(why, (size_t)why_len, "--speculative %s: expected auto or a layer index "
                 "0..%d (an exit point before the last layer)", value, L - 2);
        return -1;
    }
    if (!m->layers[v].kind->exit_point) {
        snprintf(why, (size_t)why_len, "--speculative %s: layer %ld is a %s layer, not an "
                 "exit point (kind exit): its state has no draft head", value, v,
                 m->layers[v].kind->name);
        return -1;
    }
    return (int)v;
}

static int argmax(const float *logits, int V)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best])
            best = v;
    return best;
}

/* The whole model's greedy token after the row x (layers < from already
 * run into x) at position pos. */
static int full_token(model *m, mode_ctx *ctx, token_t tok, float *x, int from, int32_t pos,
                      float *logits, char *err, int err_len)
{
    int rc = model_decode_part(m, ctx, tok, x, from, m->dims.n_layers, pos);
    if (!rc)
        rc = model_decode_head(m, x, -1, logits);
    if (rc) {
        snprintf(err, (size_t)err_len, "decoding position %d failed: %s", pos, strerror(-rc));
        return rc;
    }
    long bad = first_nonfinite(logits, (size_t)m->dims.vocab);
    if (bad >= 0) {
        snprintf(err, (size_t)err_len, "decoding position %d: the logit of token %ld is not "
                 "finite; nothing more is generated", pos, bad);
        return -ERANGE;
    }
    return argmax(logits, m->dims.vocab);
}

int spec_generate(model *m, mode_ctx *ctx, const token_t *prompt, long plen, long n, int E,
                  int draft, token_t *out, spec_stats *st, char *err, int err_len)
{
    int d = m->dims.d_model, V = m->dims.vocab, rc;
    int K = draft > 0 ? draft : 1;
    float *x = malloc((size_t)d * sizeof(float));
    float *hs = malloc((size_t)K * d * sizeof(float)); /* the drafts' layer-E states */
    float *logits = malloc((size_t)V * sizeof(float));
    token_t *dtok = malloc((size_t)K * sizeof(token_t));
    memset(st, 0, sizeof(*st));
    if (!x || !hs || !logits || !dtok) {
        snprintf(err, (size_t)err_len, "out of memory");
        rc = -ENOMEM;
        goto done;
    }
    if ((rc = model_decode_begin(m, (int)(plen + n)))) {
        snprintf(err, (size_t)err_len, "cannot start decoding: %s", strerror(-rc));
        goto done;
    }
    /* the prompt through the whole model, as plain decoding runs it */
    for (int32_t pos = 0; pos + 1 < plen; pos++)
        if ((rc = model_decode_part(m, ctx, prompt[pos], x, 0, m->dims.n_layers, pos))) {
            snprintf(err, (size_t)err_len, "decoding position %d failed: %s", pos, strerror(-rc));
            goto done;
        }
    double flops = 0.0, t0 = mode_now();
    flops_count(&flops);
    token_t cur = prompt[plen - 1];
    int32_t p = (int32_t)plen - 1; /* the position cur is at */
    long gen = 0;
    while (gen < n) {
        if (draft == 0) { /* the whole model, a token at a time */
            if ((rc = full_token(m, ctx, cur, x, 0, p, logits, err, err_len)) < 0)
                break;
            out[gen++] = cur = (token_t)rc;
            p++;
            continue;
        }
        int k = (int)(n - gen < K ? n - gen : K);
        /* draft: layers 0..E and the exit head, k positions */
        token_t t = cur;
        for (int i = 0; i < k; i++) {
            float *h = hs + (size_t)i * d;
            if ((rc = model_decode_part(m, ctx, t, h, 0, E + 1, p + i)) ||
                (rc = model_decode_head(m, h, E, logits))) {
                snprintf(err, (size_t)err_len, "drafting position %d failed: %s", p + i,
                         strerror(-rc));
                goto stop;
            }
            dtok[i] = t = (token_t)argmax(logits, V);
        }
        st->rounds++;
        st->drafted += k;
        /* verify: layers E+1.. from each draft state, in order, until the
         * whole model's token differs from the draft's */
        int kept = 0;
        for (int i = 0; i < k; i++) {
            memcpy(x, hs + (size_t)i * d, (size_t)d * sizeof(float));
            if ((rc = full_token(m, ctx, 0, x, E + 1, p + i, logits, err, err_len)) < 0)
                goto stop;
            out[gen++] = (token_t)rc;
            kept++;
            if ((token_t)rc != dtok[i])
                break;
            st->accepted++;
        }
        /* the rejected drafts' keys and values in layers 0..E */
        if (kept < k && (rc = model_decode_truncate(m, 0, E + 1, p + kept))) {
            snprintf(err, (size_t)err_len, "rolling back position %d failed: %s", p + kept,
                     strerror(-rc));
            break;
        }
        cur = out[gen - 1];
        p += kept;
    }
stop:
    flops_count(NULL);
    st->seconds = mode_now() - t0;
    st->flops = flops;
    if (rc > 0)
        rc = 0;
done:
    free(x);
    free(hs);
    free(logits);
    free(dtok);
    return rc;
}
