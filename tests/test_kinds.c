/* The contract every row of the kind table keeps, run over the table itself
 * (as dav1d's checkasm and ggml's test-backend-ops loop over their
 * functions): a kind is tested by being in moe/registry.h.  For every row, at
 * its keys' defaults, in a small model (dense, KIND, dense):
 *   - its keys' defaults parse, and its description's buffer and work-space
 *     sizes are those its layouts give;
 *   - finite-difference gradients of every tensor and of the layer's input
 *     against backward, the routing decisions held fixed;
 *   - decoding with the KV cache against the causal forward;
 *   - causality: changing later tokens leaves earlier logits (causal mode);
 *   - executed FLOPs against the products the forward really ran (every
 *     matmul counted, attention's n x n as MODEL.md counts it), nominal at
 *     least executed (training, top-k);
 *   - statistics and routing records written, finite, of their shapes;
 *   - a checkpoint round trip, bit for bit;
 *   - a canary after the work space: backward writes within its share;
 *   - under mpirun -n 4: one rank against two and four (data and expert
 *     parallelism), the losses and gradient norm within float rounding.
 * The checks of one row run on rank 0 (one rank, no MPI) first; then every
 * rank takes part in the rank comparison. */
#include "core/comm/comm.h"
#include "core/io/checkpoint.h"
#include "core/kernels/matmul.h"
#include "core/model/model.h"
#include "core/rng/pcg32.h"
#include "core/train/shard.h"
#include "moe/registry.h"
#include "mpi/check.h"
#include "testlib.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures, rank;

/* The row under test: a kind at its keys' defaults, or with one choice key
 * set to another of its choices (variant_key = variant_value). */
static char row_name[128];
static const char *variant_key, *variant_value;
/* The stack the row is tested in: dense, KIND, dense, or these kinds'
 * names (NULL-terminated; layer 1 the row under test), for a kind whose
 * layers work together (cla's groups). */
static const char *const *stack_names;

#define S_LEN 16
#define NSEQ 4

/* ---- a model of one row ------------------------------------------------------ */

typedef struct fixture {
    model *m;
    token_t tokens[NSEQ * (S_LEN + 1)];
    batch b;
    mode_ctx ctx;
    const layer_kind *kind;
} fixture;

/* dense, KIND, dense over P ranks (this one rank r of them). */
static int make(fixture *f, const kind_ops *ops, int P, int r, int nseq, uint64_t seed,
                comm *cm)
{
    memset(f, 0, sizeof(*f));
    f->kind = ops->kind;
    int L = 3;
    while (stack_names && stack_names[L])
        L++;
    model_dims dims = tl_small_dims(L, S_LEN);
    dims.ranks = P;
    dims.rank = r;
    layer_spec specs[8];
    for (int l = 0; l < L; l++)
        layer_spec_init(&specs[l], l == 1 ? ops->kind
                                   : stack_names ? layer_kind_lookup(mode_kinds, stack_names[l])
                                                 : &dense_kind);
    char err[512];
    if (variant_key &&
        layer_spec_set(&specs[1], ops->kind, variant_key, variant_value, err, sizeof(err))) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, row_name, err);
        return -1;
    }
    if (build_model(&f->m, &dims, specs, mode_kind_ops, nseq, err, sizeof(err))) {
        fprintf(stderr, "rank %d: %s: build_model: %s\n", rank, row_name, err);
        return -1;
    }
    model_init(f->m, seed);
    /* every gradient well above float noise, routing that depends on content */
    tl_scale_weights(f->m, 10.0f, seed);
    tl_draw_tokens(f->tokens, NSEQ * (S_LEN + 1), seed, dims.vocab);
    f->b = (batch){ .tokens = f->tokens + (size_t)r * nseq * (S_LEN + 1), .nseq = nseq,
                    .seq0 = (long)r * nseq, .global_seqs = NSEQ };
    f->ctx = (mode_ctx){ .rank = comm_rank(cm), .size = comm_size(cm), .comm = cm,
                         .seed = seed };
    return 0;
}

/* ---- the routing decisions a layer records ------------------------------- */

enum { MAX_ARRAYS = 16 };
typedef struct capture {
    int n;
    struct {
        char name[32];
        int type, ndim;
        unsigned long long dims[4];
        size_t bytes;
        unsigned char *data;
    } a[MAX_ARRAYS];
} capture;

static size_t elem_bytes(int type)
{
    return type == RECORD_UINT8 ? 1 : 4;
}

static int capture_put(record_sink *s, const char *name, int type, int ndim,
                       const unsigned long long *dims, const void *data)
{
    capture *c = s->user;
    if (c->n >= MAX_ARRAYS || ndim > 4)
        return -1;
    size_t n = elem_bytes(type);
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    int k = c->n++;
    snprintf(c->a[k].name, sizeof(c->a[k].name), "%s", name);
    c->a[k].type = type;
    c->a[k].ndim = ndim;
    memcpy(c->a[k].dims, dims, (size_t)ndim * sizeof(dims[0]));
    c->a[k].bytes = n;
    c->a[k].data = malloc(n ? n : 1);
    memcpy(c->a[k].data, data, n);
    return 0;
}

static void capture_free(capture *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->a[i].data);
    c->n = 0;
}

/* Layer l's record after the last forward (nothing for a kind without). */
static void capture_layer(model *m, int l, int nseq, capture *c)
{
    capture_free(c);
    layer *ly = &m->layers[l];
    if (!ly->ops->record)
        return;
    fwd_args a = { .dims = &m->dims, .nseq = nseq, .seq_len = m->dims.seq_len };
    record_sink sink = { .put = capture_put, .user = c };
    CHECK(ly->ops->record(ly, &a, &sink) == 0, "%s: record failed", ly->kind->name);
}

/* The decisions a training forward depends on equal: the integer arrays
 * of the record (selections, chosen experts), but "causal", the causal
 * rule's decisions, which only a causal-mode forward uses (docs/hdf5.md
 * names the arrays of the record). */
static bool same_decisions(const capture *a, const capture *b)
{
    if (a->n != b->n)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->a[i].type != RECORD_FLOAT && strcmp(a->a[i].name, "causal") &&
            (a->a[i].bytes != b->a[i].bytes || memcmp(a->a[i].data, b->a[i].data, a->a[i].bytes)))
            return false;
    return true;
}

/* ---- finite differences ------------------------------------------------------ */

/* J = ce + aux (the training loss), + side when with_side (the predictor's
 * tensors, whose loss is reported apart). */
static double train_J(fixture *f, bool with_side, fwd_result *r)
{
    CHECK(model_forward(f->m, &f->ctx, &f->b, FWD_TRAIN, r) == 0, "forward");
    double J = r->ce_sum / (double)(f->b.nseq * S_LEN) + r->aux_loss;
    return with_side ? J + r->side_loss : J;
}

/* Along a random direction u of tensor range [off, off+n): the 4th-order
 * central difference of J against <grad, u>.  A direction moves at most
 * FD_ELEMS elements, so that a step of h seldom moves a routing decision
 * across its threshold; when one does, the derivative is not defined there
 * and another direction is drawn (up to 32), of half as many elements. */
enum { FD_ELEMS = 16, FD_CANDIDATES = 128 };
/* The rounding of a 4th-order difference of J (about 4 in float32 sums) at
 * step 2e-3: up to 2e-6 seen on directions of small <g,u>. */
#define FD_NOISE 4e-6
static double fd_direction(fixture *f, size_t off, size_t n, const float *grad, bool with_side,
                           const capture *base, pcg32 *r, double *an_out)
{
    const double h = TL_FD_STEP;
    model *m = f->m;
    float *p = m->params + off, *p0 = malloc(n * sizeof(float)), *u = malloc(n * sizeof(float));
    memcpy(p0, p, n * sizeof(float));
    capture now = { 0 };
    double err = HUGE_VAL, an = 0.0, gn = 0.0;
    for (size_t i = 0; i < n; i++)
        gn += (double)grad[i] * (double)grad[i];
    gn = sqrt(gn);
    int elems = FD_ELEMS; /* halved when a direction moves the routing */
    for (int tries = 0, draws = 0; tries < 32 && draws < 256 && !isfinite(err); draws++) {
        /* the FD_ELEMS elements of largest |grad| among FD_CANDIDATES random
         * ones: <grad, u> far above the rounding of J, which the difference
         * turns into about 1e-6 of the derivative (measured) */
        memset(u, 0, n * sizeof(float));
        size_t cand[FD_CANDIDATES];
        int nc = 0;
        for (int e = 0; e < FD_CANDIDATES && (size_t)e < n; e++)
            cand[nc++] = n <= FD_CANDIDATES ? (size_t)e : pcg32_bounded(r, (uint32_t)n);
        for (int e = 0; e < elems && e < nc; e++) {
            int best = e;
            for (int c = e + 1; c < nc; c++)
                if (fabs((double)grad[cand[c]]) > fabs((double)grad[cand[best]]))
                    best = c;
            size_t t = cand[e];
            cand[e] = cand[best];
            cand[best] = t;
            /* along the gradient's sign: <grad, u> = sum |g_i| of them */
            u[cand[e]] = grad[cand[e]] < 0.0f ? -1.0f : 1.0f;
        }
        an = 0.0;
        for (size_t i = 0; i < n; i++)
            an += (double)u[i] * (double)grad[i];
        if (fabs(an) < 1e-3 * gn) /* a tensor of tiny gradient here: another draw */
            continue;
        tries++;
        double J[4];
        const double steps[4] = { h, -h, 2 * h, -2 * h };
        bool same = true;
        for (int s = 0; s < 4; s++) {
            for (size_t i = 0; i < n; i++)
                p[i] = (float)((double)p0[i] + steps[s] * (double)u[i]);
            fwd_result res;
            J[s] = train_J(f, with_side, &res);
            capture_layer(m, 1, f->b.nseq, &now);
            same &= same_decisions(&now, base);
        }
        memcpy(p, p0, n * sizeof(float));
        if (!same) {
            elems = elems > 1 ? elems / 2 : 1;
            continue;
        }
        double fd = (8.0 * (J[0] - J[1]) - (J[2] - J[3])) / (12.0 * h);
        /* relative, with the difference's own rounding (FD_NOISE) allowed */
        err = fmax(fabs(fd - an) - FD_NOISE, 0.0) / fmax(fabs(an), 1e-30);
    }
    capture_free(&now);
    free(u);
    free(p0);
    *an_out = an;
    return err;
}

/* Every tensor's gradient; false (nothing judged) when some tensor had no
 * direction along which the routing held: a decision within a step of its
 * threshold at this point, which another seed avoids. */
static bool check_gradients(fixture *f, pcg32 *r)
{
    model *m = f->m;
    const char *name = row_name;
    fwd_result res;
    model_zero_grad(m);
    train_J(f, false, &res);
    capture base = { 0 };
    capture_layer(m, 1, f->b.nseq, &base);
    CHECK(model_backward(m, &f->ctx, &f->b) == 0, "%s: backward", name);
    float *grad = malloc(m->n_params * sizeof(float));
    memcpy(grad, m->grads, m->n_params * sizeof(float));
    /* the predictor's tensors get the gradient of its own loss alone: the
     * backward of J with the side loss, computed apart */
    double worst = 0.0, err[MODE_MAX_LAYER_TENSORS * 3 + 2], an[MODE_MAX_LAYER_TENSORS * 3 + 2];
    bool held = true;
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        /* ... and mod's fitted threshold, of its quantile loss alone */
        bool pred = strstr(mt->path, "/pred_") != NULL || strstr(mt->path, "/threshold") != NULL;
        err[t] = fd_direction(f, mt->offset, (size_t)mt->numel, grad + mt->offset, pred, &base, r,
                              &an[t]);
        held &= isfinite(err[t]);
    }
    for (int t = 0; held && t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        if (mt->desc.no_grad) { /* moved by a rule: no gradient, the loss flat along it */
            bool zero = true;
            for (long i = 0; i < mt->numel; i++)
                zero &= grad[mt->offset + i] == 0.0f;
            CHECK(zero && err[t] == 0.0, "%s: %s is moved by a rule, yet has a gradient (or the "
                  "loss moves along it: %.2e)", name, mt->path, err[t]);
            continue;
        }
        worst = fmax(worst, err[t]);
        /* TL_FD_TOL (tests/testlib.h): 4th-order differences of steps
         * 2e-3 along directions of |<g,u>| well above the loss's rounding */
        CHECK(err[t] < TL_FD_TOL && fabs(an[t]) > 1e-6, "%s: gradient of %s: 4th-order "
              "difference off by %.2e relative (<g,u> = %.3e)", name, m->tensors[t].path, err[t],
              an[t]);
    }
    if (held)
        printf("[%s] gradients of %d tensors against finite differences: worst %.2e\n", name,
               m->n_tensors, worst);
    capture_free(&base);
    free(grad);
    return held;
}

/* The layer's own input gradient: y = layer(x) on a random x, J = <y, w> +
 * its auxiliary losses, against dx from backward with dy = w. */
static void check_input_gradient(fixture *f, pcg32 *r)
{
    model *m = f->m;
    layer *ly = &m->layers[1];
    const model_dims *dm = &m->dims;
    int n = f->b.nseq * S_LEN, d = dm->d_model;
    size_t nd = (size_t)n * d;
    float *x = malloc(nd * sizeof(float)), *y = malloc(nd * sizeof(float));
    float *w = malloc(nd * sizeof(float)), *dx = calloc(nd, sizeof(float));
    float *u = malloc(nd * sizeof(float)), *x0 = malloc(nd * sizeof(float));
    for (size_t i = 0; i < nd; i++) {
        x[i] = pcg32_normal(r);
        w[i] = pcg32_normal(r);
        u[i] = pcg32_normal(r);
    }
    memcpy(x0, x, nd * sizeof(float));
    double aux = 0.0, side = 0.0, fl = 0.0;
    fwd_args a = { .ctx = &f->ctx, .dims = dm, .rope = m->rope, .mode = FWD_TRAIN,
                   .nseq = f->b.nseq, .seq_len = S_LEN, .seq_scale = 1.0f / (float)f->b.nseq,
                   .ws = m->ws, .aux_loss = &aux, .side_loss = &side, .flops_executed = &fl,
                   .tokens = m->inputs };
    capture base = { 0 }, now = { 0 };
    CHECK(ly->ops->forward(ly, &a, y, x) == 0, "forward");
    capture_layer(m, 1, f->b.nseq, &base);
    model_zero_grad(m);
    CHECK(ly->ops->backward(ly, &a, dx, w, x) == 0, "backward");
    double an = 0.0, dx2 = 0.0;
    for (size_t i = 0; i < nd; i++) {
        an += (double)dx[i] * (double)u[i];
        dx2 += (double)dx[i] * (double)dx[i];
    }
    const double h = TL_FD_STEP, steps[4] = { h, -h, 2 * h, -2 * h };
    double J[4];
    bool same = true;
    for (int s = 0; s < 4; s++) {
        for (size_t i = 0; i < nd; i++)
            x[i] = (float)((double)x0[i] + steps[s] * (double)u[i]);
        aux = 0.0;
        CHECK(ly->ops->forward(ly, &a, y, x) == 0, "forward");
        double j = aux;
        for (size_t i = 0; i < nd; i++)
            j += (double)y[i] * (double)w[i];
        J[s] = j;
        capture_layer(m, 1, f->b.nseq, &now);
        same &= same_decisions(&now, &base);
    }
    double fd = (8.0 * (J[0] - J[1]) - (J[2] - J[3])) / (12.0 * h);
    /* Relative to the derivative's scale: <dx, u> over u ~ N(0, I) has sd
     * |dx|, and one draw can land near 0 (seen: -0.83 against |dx| ~ 45),
     * where J's float rounding (J ~ <x, w> ~ 45, 6e-8 of it over 12 h) is
     * 1e-3 of |<dx, u>| though the backward is right */
    double e = fabs(fd - an) / fmax(fmax(fabs(an), sqrt(dx2)), 1e-30);
    if (same)
        CHECK(e < 1e-3, "%s: input gradient off by %.2e relative (fd %.6e, <dx,u> %.6e)",
              row_name, e, fd, an);
    printf("[%s] input gradient against finite differences: %.2e%s\n", row_name, e,
           same ? "" : " (routing moved: not judged)");
    capture_free(&base);
    capture_free(&now);
    free(x);
    free(y);
    free(w);
    free(dx);
    free(u);
    free(x0);
}

/* ---- decoding and causality ---------------------------------------------------- */

static float *causal_logits(fixture *f)
{
    fwd_result res;
    CHECK(model_forward(f->m, &f->ctx, &f->b, FWD_EVAL_CAUSAL, &res) == 0, "forward");
    size_t n = (size_t)f->b.nseq * S_LEN * f->m->dims.vocab;
    float *l = malloc(n * sizeof(float));
    memcpy(l, f->m->logits, n * sizeof(float));
    return l;
}

static void check_decode(fixture *f)
{
    model *m = f->m;
    int V = m->dims.vocab;
    float *ref = causal_logits(f), *logits = malloc((size_t)V * sizeof(float));
    CHECK(model_decode_begin(m, S_LEN) == 0, "decode_begin");
    double worst = 0.0;
    int left = 0;
    /* a layer's decision each (cla's and attnres's fixtures have six and four layers) */
    unsigned char *taken = malloc((size_t)m->dims.n_layers);
    for (int pos = 0; pos < S_LEN; pos++) {
        CHECK(model_decode_step(m, &f->ctx, f->b.tokens[pos], pos, logits, taken) == 0, "decode");
        worst = fmax(worst, tl_rows_shift(logits, ref + (size_t)pos * V, 1, V));
        left += f->kind->exit_point && taken[1];
    }
    if (f->kind->exit_point) /* the later layers took those tokens' keys and values only */
        printf("[%s] %d of %d decoded tokens left the stack at the exit point\n", row_name, left,
               S_LEN);
    /* TL_CAUSAL_TOL (tests/testlib.h): a row count changes sums by a few
     * ulp carried through the layers; the tolerance leaves a hundred times
     * the largest seen */
    CHECK(worst < TL_CAUSAL_TOL, "%s: decoding differs from the causal forward by %.2e", row_name,
          worst);
    printf("[%s] decoding with the KV cache against the causal forward: %.2e\n", row_name,
           worst);
    free(taken);
    free(ref);
    free(logits);
}

/* Batched decoding (core/model/lanes.h): the fixture's NSEQ sequences as
 * NSEQ lanes decoded together; lane i's logits are sequence i's in the
 * causal forward (its own decisions, its own draws).  A kind without
 * batched decoding is refused by name (its layer's index). */
static void check_decode_lanes(fixture *f)
{
    model *m = f->m;
    int V = m->dims.vocab, L = m->dims.n_layers, bad = -1;
    const kind_ops *ops = m->layers[1].ops;
    int rc = model_decode_lanes(m, S_LEN, NSEQ, &bad);
    if (!ops->decode_rows || rc == -ENOTSUP) { /* a kind without (none today) */
        CHECK(rc == -ENOTSUP && bad == 1, "%s: batched decoding of a kind without it: rc %d, "
              "layer %d (want -ENOTSUP at layer 1)", row_name, rc, bad);
        printf("[%s] batched decoding refused at layer %d\n", row_name, bad);
        return;
    }
    CHECK(rc == 0, "%s: model_decode_lanes: %d (layer %d)", row_name, rc, bad);
    if (rc)
        return;
    float *ref = causal_logits(f), *logits = malloc((size_t)NSEQ * V * sizeof(float));
    unsigned char *taken = malloc((size_t)NSEQ * L);
    token_t tok[NSEQ];
    double worst = 0.0;
    long took = 0;
    for (int pos = 0; pos < S_LEN; pos++) {
        for (int i = 0; i < NSEQ; i++)
            tok[i] = f->b.tokens[(size_t)i * (S_LEN + 1) + pos];
        CHECK(model_decode_rows(m, &f->ctx, tok, pos, logits, taken) == 0, "decode_rows");
        for (int i = 0; i < NSEQ; i++) {
            worst = fmax(worst, tl_rows_shift(logits + (size_t)i * V,
                                              ref + ((size_t)i * S_LEN + pos) * V, 1, V));
            took += taken[(size_t)i * L + 1];
        }
    }
    /* TL_CAUSAL_TOL as check_decode: n rows' products add in another order
     * than one row's */
    CHECK(worst < TL_CAUSAL_TOL, "%s: batched decoding differs from the causal forward by %.2e",
          row_name, worst);
    CHECK(model_decode_rows(m, &f->ctx, tok, S_LEN, logits, taken) == -ERANGE,
          "%s: decode_rows past the lanes' length", row_name);
    printf("[%s] batched decoding of %d sequences against the causal forward: %.2e (layer 1 "
           "taken %ld of %d)\n", row_name, NSEQ, worst, took, NSEQ * S_LEN);
    free(taken);
    free(ref);
    free(logits);
}

static void check_causal(fixture *f, uint64_t seed)
{
    model *m = f->m;
    int V = m->dims.vocab, rows = f->b.nseq * S_LEN;
    token_t keep[NSEQ * (S_LEN + 1)];
    memcpy(keep, f->tokens, sizeof(keep));
    float *ref = causal_logits(f);
    pcg32 r;
    pcg32_seed(&r, seed, 3);
    double worst = 0.0, moved = 0.0;
    for (int t = 0; t < S_LEN - 1; t++) {
        /* sequence 1's tokens after position t, redrawn */
        for (int j = t + 1; j <= S_LEN; j++)
            f->tokens[(S_LEN + 1) + j] = (token_t)pcg32_bounded(&r, (uint32_t)V);
        float *now = causal_logits(f);
        for (int i = 0; i < rows; i++) {
            int sq = i / S_LEN, pos = i % S_LEN;
            double sh = tl_rows_shift(now + (size_t)i * V, ref + (size_t)i * V, 1, V);
            if (sq != 1 || pos <= t)
                worst = fmax(worst, sh);
            else
                moved = fmax(moved, sh);
        }
        free(now);
        memcpy(f->tokens, keep, sizeof(keep));
    }
    CHECK(worst < TL_CAUSAL_TOL, "%s: later tokens moved earlier logits by %.2e (causal mode)",
          row_name, worst);
    CHECK(moved > 1e-3, "%s: later tokens never moved their own logits (%.2e): the check "
          "would not tell", row_name, moved);
    printf("[%s] causality: earlier logits moved by at most %.2e, later ones by %.2e\n",
           row_name, worst, moved);
    free(ref);
}

/* ---- FLOPs, statistics, records -------------------------------------------------- */

static void check_flops(fixture *f)
{
    model *m = f->m;
    const char *name = row_name;
    double nominal = model_flops_per_seq(m, NULL) * f->b.nseq;
    static const char *const modes[] = { "train", "topk", "causal" };
    for (int mode = 0; mode < FWD_MODE_COUNT; mode++) {
        double counted = 0.0;
        fwd_result res;
        flops_count(&counted);
        int rc = model_forward(m, &f->ctx, &f->b, (fwd_mode)mode, &res);
        flops_count(NULL);
        CHECK(rc == 0, "forward");
        CHECK(fabs(res.flops_executed - counted) <= 1e-9 * counted,
              "%s (%s): executed FLOPs %.6e, but the forward ran %.6e", name, modes[mode],
              res.flops_executed, counted);
        if (mode != FWD_EVAL_CAUSAL) /* the causal rule may take more than k rows */
            CHECK(res.flops_executed <= nominal * (1.0 + 1e-12),
                  "%s (%s): executed FLOPs %.6e above nominal %.6e", name, modes[mode],
                  res.flops_executed, nominal);
        printf("[%s] %s forward: executed %.6e FLOPs, counted %.6e, nominal %.6e\n", name,
               modes[mode], res.flops_executed, counted, nominal);
    }
}

static void check_stats_and_records(fixture *f)
{
    model *m = f->m;
    layer *ly = &m->layers[1];
    const char *name = row_name;
    fwd_result res;
    CHECK(model_forward(m, &f->ctx, &f->b, FWD_TRAIN, &res) == 0, "forward");
    if (ly->ops->stat_count) {
        int n_sums = 0, cols = ly->ops->stat_count(ly, &n_sums);
        CHECK(cols > 0 && n_sums > 0 && cols <= 256 && n_sums <= 256, "%s: %d columns, %d sums",
              name, cols, n_sums);
        double sums[256], vals[256];
        char names[256][64];
        ly->ops->stat_sums(ly, sums);
        ly->ops->stat_columns(ly, sums, vals);
        for (int c = 0; c < cols && c < 256; c++) {
            ly->ops->stat_name(ly, c, names[c], sizeof(names[c]));
            CHECK(names[c][0] && isfinite(vals[c]), "%s: column %d '%s' = %g", name, c, names[c],
                  vals[c]);
            for (int e = 0; e < c; e++)
                CHECK(strcmp(names[c], names[e]), "%s: column name %s twice", name, names[c]);
        }
        for (int s = 0; s < n_sums && s < 256; s++)
            CHECK(isfinite(sums[s]), "%s: sum %d = %g", name, s, sums[s]);
        printf("[%s] %d statistics columns, finite\n", name, cols);
    }
    capture c = { 0 };
    capture_layer(m, 1, f->b.nseq, &c);
    for (int i = 0; i < c.n; i++) {
        CHECK(c.a[i].ndim >= 2 && c.a[i].dims[0] == (unsigned long long)f->b.nseq &&
                  c.a[i].dims[1] == S_LEN,
              "%s: record %s of %d dimensions (%llu x %llu), expected sequences x positions",
              name, c.a[i].name, c.a[i].ndim, c.a[i].dims[0], c.a[i].dims[1]);
        if (c.a[i].type == RECORD_FLOAT)
            for (size_t k = 0; k < c.a[i].bytes / 4; k++)
                CHECK(isfinite((double)((const float *)(const void *)c.a[i].data)[k]),
                      "%s: record %s not finite", name, c.a[i].name);
    }
    if (c.n)
        printf("[%s] %d routing records of sequences x positions\n", name, c.n);
    capture_free(&c);
}

/* ---- buffers, checkpoints -------------------------------------------------------- */

static void check_buffers(fixture *f)
{
    model *m = f->m;
    const layer *ly = &m->layers[1];
    const char *name = row_name;
    /* the description's sizes, from the layouts the build allocated with */
    double bytes = ly->kind->state_bytes(&ly->spec, &m->dims, ly->index, m->max_seq);
    long ws = ly->kind->ws_floats(&ly->spec, &m->dims, m->max_seq);
    CHECK(bytes > 0 && ws > 0 && ws <= m->ws_floats, "%s: state %.0f bytes, work space %ld of %ld",
          name, bytes, ws, m->ws_floats);
    /* a canary after the work space: backward writes within its share */
    enum { CANARY = 1024 };
    float *own = aligned_alloc(64, ((size_t)m->ws_floats + CANARY) * sizeof(float));
    uint32_t pattern = 0x7fc0dead;
    for (long i = 0; i < m->ws_floats + CANARY; i++)
        memcpy(&own[i], &pattern, 4);
    float *was = m->ws;
    m->ws = own;
    fwd_result res;
    model_zero_grad(m);
    CHECK(model_forward(m, &f->ctx, &f->b, FWD_TRAIN, &res) == 0, "forward");
    CHECK(model_backward(m, &f->ctx, &f->b) == 0, "backward");
    int touched = 0;
    for (long i = m->ws_floats; i < m->ws_floats + CANARY; i++)
        touched += memcmp(&own[i], &pattern, 4) != 0;
    CHECK(!touched, "%s: %d floats written past the work space's %ld", name, touched,
          m->ws_floats);
    m->ws = was;
    free(own);
    printf("[%s] state %.0f bytes, work space %ld floats, canary whole\n", name, bytes, ws);
}

static void check_checkpoint(fixture *f, const char *dir)
{
    model *m = f->m;
    const char *name = row_name;
    char path[512], err[1024] = "";
    snprintf(path, sizeof(path), "%s/%s.h5", dir, name);
    for (size_t i = 0; i < m->n_params; i++) { /* moments that show */
        m->adam_m[i] = (float)sin(0.3 * (double)i);
        m->adam_v[i] = (float)(1.5 + cos(0.7 * (double)i));
    }
    ckpt_header h = { .config = "[run]\n", .step = 3, .seed = 9, .data = NULL };
    CHECK(checkpoint_save(path, m, &h, NULL, err, sizeof(err)) == 0, "%s: save: %s", name, err);
    fixture g;
    if (make(&g, kind_ops_lookup(mode_kind_ops, f->kind->name), 1, 0, NSEQ, 99, NULL))
        return;
    ckpt_meta meta;
    CHECK(checkpoint_read_meta(path, &meta, NULL, err, sizeof(err)) == 0 && meta.step == 3,
          "%s: read_meta: %s", name, err);
    ckpt_meta_clear(&meta);
    CHECK(checkpoint_load(path, g.m, true, NULL, err, sizeof(err)) == 0, "%s: load: %s", name,
          err);
    /* tensor by tensor: the buffers' alignment gaps between tensors are
     * nobody's (the moments above filled them too) */
    CHECK(g.m->n_params == m->n_params && g.m->n_tensors == m->n_tensors,
          "%s: the model read back has %zu parameters in %d tensors, not %zu in %d", name,
          g.m->n_params, g.m->n_tensors, m->n_params, m->n_tensors);
    for (int t = 0; g.m->n_tensors == m->n_tensors && t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        bool same = !memcmp(g.m->params + mt->offset, m->params + mt->offset,
                            (size_t)mt->numel * sizeof(float)) &&
                    !memcmp(g.m->adam_m + mt->offset, m->adam_m + mt->offset,
                            (size_t)mt->numel * sizeof(float)) &&
                    !memcmp(g.m->adam_v + mt->offset, m->adam_v + mt->offset,
                            (size_t)mt->numel * sizeof(float));
        CHECK(same, "%s: the checkpoint does not read %s back bit for bit", name, mt->path);
    }
    free_model(&g.m);
    unlink(path);
    printf("[%s] checkpoint round trip bit for bit\n", name);
}

/* ---- ranks ----------------------------------------------------------------------- */

static int layer_done(void *user, int l)
{
    return shard_layer_done(user, l);
}

/* The summed gradients of the backward again, overlapped: every layer its
 * own bucket, started as the backward leaves it (what [optim] overlap does
 * with small buckets): the bits of the blocking sum in *want, or a layer's
 * backward writes into a layer's gradients already on their way. */
static void check_overlap(fixture *f, int P, const float *want)
{
    shard_plan *sp = NULL;
    fwd_result res;
    if (build_shard_plan(&sp, f->m, &f->ctx, 1)) {
        CHECK(0, "build_shard_plan");
        return;
    }
    backward_hook h = { layer_done, sp };
    model_zero_grad(f->m);
    CHECK(model_forward(f->m, &f->ctx, &f->b, FWD_TRAIN, &res) == 0, "forward");
    CHECK(model_backward_hooked(f->m, &f->ctx, &f->b, &h) == 0, "backward, overlapped");
    CHECK(shard_reduce_grads(sp, &f->ctx, f->m) == 0, "reduce, overlapped");
    long first = -1;
    for (size_t i = 0; i < f->m->n_params && first < 0; i++)
        if (memcmp(&want[i], &f->m->grads[i], sizeof(float)))
            first = (long)i;
    CHECK(first < 0, "%s: %d ranks, overlapped: the gradient differs from the blocking sum's "
          "at element %ld", row_name, P, first);
    free_shard_plan(&sp);
}

/* A training forward and backward of the global batch over P ranks of
 * world (those of rank < P; the others wait): the losses summed over the
 * ranks and the gradient's global norm.  Collective over world. */
static void over_ranks(const kind_ops *ops, comm *world, int P, double out[3])
{
    comm *sub = NULL;
    int in = rank < P;
    out[0] = out[1] = out[2] = 0.0;
    if (comm_split(world, in ? 0 : 1, &sub)) {
        CHECK(0, "comm_split");
        return;
    }
    if (in) {
        fixture f;
        shard_plan *sp = NULL;
        int sr = comm_rank(sub);
        if (!make(&f, ops, P, sr, NSEQ / P, 5, sub) &&
            !build_shard_plan(&sp, f.m, &f.ctx, 1L << 40)) {
            fwd_result res;
            model_zero_grad(f.m);
            CHECK(model_forward(f.m, &f.ctx, &f.b, FWD_TRAIN, &res) == 0, "forward");
            CHECK(model_backward(f.m, &f.ctx, &f.b) == 0, "backward");
            double sums[2] = { res.ce_sum, res.aux_loss };
            CHECK(shard_reduce_grads(sp, &f.ctx, f.m) == 0, "reduce");
            CHECK(comm_allreduce_sum_double(sub, sums, 2) == 0, "allreduce");
            double norm = 0.0;
            CHECK(shard_grad_norm(sp, &f.ctx, f.m, &norm) == 0, "norm");
            out[0] = sums[0] / (NSEQ * S_LEN);
            out[1] = sums[1];
            out[2] = norm;
            float *want = malloc(f.m->n_params * sizeof(float));
            if (want && P > 1) {
                memcpy(want, f.m->grads, f.m->n_params * sizeof(float));
                check_overlap(&f, P, want);
            }
            free(want);
        }
        free_shard_plan(&sp);
        free_model(&f.m);
    }
    comm_free(&sub);
}

static void check_ranks(const kind_ops *ops, comm *world)
{
    int W = comm_size(world);
    double one[3], many[3];
    over_ranks(ops, world, 1, one);
    for (int P = 2; P <= 4 && P <= W; P *= 2) {
        over_ranks(ops, world, P, many);
        if (rank != 0)
            continue;
        /* data parallelism sums the sequences' losses and gradients in
         * another order: float rounding, far below 1e-5 relative */
        for (int i = 0; i < 3; i++)
            CHECK(fabs(many[i] - one[i]) <= 1e-5 * fmax(fabs(one[i]), 1e-6),
                  "%s: %d ranks give %s %.9g, one rank %.9g", row_name, P,
                  i == 0 ? "CE" : i == 1 ? "aux loss" : "gradient norm", many[i], one[i]);
        printf("[%s] %d ranks against one: CE %.9g / %.9g, aux %.6g / %.6g, |g| %.9g / %.9g\n",
               row_name, P, many[0], one[0], many[1], one[1], many[2], one[2]);
    }
}

/* ---- the table ------------------------------------------------------------------- */

static void check_row(const kind_ops *ops, const char *dir)
{
    const layer_kind *k = ops->kind;
    /* the two tables agree, the keys' defaults parse */
    for (const kind_group *g = k->groups; g && g->group; g++)
        for (const kind_key *key = g->group->keys; key->name; key++) {
            unsigned char values[MODE_PARAMS_BYTES];
            char why[256];
            CHECK(key_parse(key, values, key->def, why, sizeof(why)) == 0,
                  "%s: [%s] %s's default '%s': %s", k->name, g->group->section, key->name,
                  key->def, why);
            CHECK(key->meaning && key->meaning[0], "%s: %s has no meaning", k->name, key->name);
        }
    fixture f;
    pcg32 r;
    pcg32_seed(&r, 11, 12);
    bool held = false;
    for (uint64_t seed = 1; seed <= 8 && !held; seed++) {
        if (make(&f, ops, 1, 0, NSEQ, seed, NULL))
            return;
        if (!(held = check_gradients(&f, &r)))
            free_model(&f.m);
    }
    CHECK(held, "%s: no model of 8 seeds where the routing held for a gradient check", row_name);
    if (!held && make(&f, ops, 1, 0, NSEQ, 1, NULL))
        return;
    check_input_gradient(&f, &r);
    check_flops(&f);
    check_stats_and_records(&f);
    check_buffers(&f);
    check_checkpoint(&f, dir);
    check_decode(&f);
    check_decode_lanes(&f);
    check_causal(&f, 21);
    free_model(&f.m);
}

int main(int argc, char **argv)
{
    comm *world = NULL;
    if (comm_init(&world, &argc, &argv)) {
        fprintf(stderr, "MPI initialisation failed\n");
        return 1;
    }
    rank = comm_rank(world);
    /* test_kinds NAME: the rows of that kind alone (while working on one) */
    const char *only = argc > 1 ? argv[1] : NULL;
    char dir[64] = "/tmp/mode-kinds-XXXXXX";
    int rows = 0;
    for (int i = 0; mode_kind_ops[i]; i++, rows++)
        CHECK(mode_kind_ops[i]->kind == mode_kinds[i], "row %d: its compute row describes %s, "
              "the description table has %s", i, mode_kind_ops[i]->kind->name,
              mode_kinds[i] ? mode_kinds[i]->name : "nothing");
    CHECK(mode_kinds[rows] == NULL, "the description table is longer than the compute table");
    CHECK(rows == KIND_COUNT, "%d rows in the tables, the registry has %d", rows, KIND_COUNT);
    for (int i = 0; i < rows; i++) /* a row's name is its description's (moe/registry.h) */
        CHECK(strcmp(mode_kind_names[i], mode_kinds[i]->name) == 0 &&
                  layer_kind_lookup(mode_kinds, mode_kind_names[i]) == mode_kinds[i],
              "registry row %d is called %s, its description %s", i, mode_kind_names[i],
              mode_kinds[i]->name);
    bool made = rank == 0 && mkdtemp(dir);
    int variants = 0;
    /* every row at its defaults, then with each choice key at each of its
     * other choices and each boolean flipped (the routers, gates, causal
     * rules, flags: every way a kind can compute), so that an option is
     * tested by being declared */
    for (int i = 0; mode_kind_ops[i]; i++) {
        const layer_kind *k = mode_kind_ops[i]->kind;
        if (only && strcmp(only, k->name))
            continue;
        variant_key = variant_value = NULL;
        snprintf(row_name, sizeof(row_name), "%s", k->name);
        if (made)
            check_row(mode_kind_ops[i], dir);
        check_ranks(mode_kind_ops[i], world);
        for (const kind_group *g = k->groups; g && g->group; g++)
            for (const kind_key *key = g->group->keys; key->name; key++) {
                static const char *const flags[] = { "true", "false", NULL };
                if (key->type != KEY_CHOICE && key->type != KEY_BOOL)
                    continue;
                for (const char *const *c = key->type == KEY_BOOL ? flags : key->choices; *c;
                     c++) {
                    if (!strcmp(*c, key->def))
                        continue;
                    static char qualified[96];
                    layer_key_name(k, g, key, qualified, sizeof(qualified));
                    variant_key = qualified;
                    variant_value = *c;
                    snprintf(row_name, sizeof(row_name), "%s, %s = %s", k->name, qualified, *c);
                    if (made)
                        check_row(mode_kind_ops[i], dir);
                    check_ranks(mode_kind_ops[i], world);
                    variants++;
                }
            }
    }
    /* numeric keys that change what a kind computes, at a value that does:
     * shared experts, split experts, the balancing bias (its tensor drawn
     * like a bias, so it moves the choice), dropless evaluation, the no-op
     * bias (at 0.2 the test model's executed FLOPs fall 4%: decoding then
     * differs by 0.19 when it ignores the bias that the forward adds) */
    static const char *const numeric[][2] = {
        { "shared_experts", "1" }, { "granularity", "2" }, { "bias_rate", "0.01" },
        { "eval_capacity_factor", "0" }, { "noop_bias", "0.2" }, { NULL, NULL },
    };
    for (int i = 0; mode_kind_ops[i]; i++) {
        const layer_kind *k = mode_kind_ops[i]->kind;
        for (int v = 0; numeric[v][0] && (!only || !strcmp(only, k->name)); v++) {
            const kind_group *g = NULL;
            const kind_key *key = layer_key(k, numeric[v][0], &g);
            if (!key)
                continue;
            static char qualified[96];
            layer_key_name(k, g, key, qualified, sizeof(qualified));
            variant_key = qualified;
            variant_value = numeric[v][1];
            snprintf(row_name, sizeof(row_name), "%s, %s = %s", k->name, qualified,
                     numeric[v][1]);
            if (made)
                check_row(mode_kind_ops[i], dir);
            check_ranks(mode_kind_ops[i], world);
            variants++;
        }
    }
    /* an exit point whose tokens leave: all of them (threshold 0) and some:
     * decoding with the keys and values of their frozen states against the
     * causal forward, causality, FLOPs, gradients */
    for (int i = 0; mode_kind_ops[i]; i++) {
        const layer_kind *k = mode_kind_ops[i]->kind;
        static const char *const thresholds[] = { "0", "0.1" };
        for (int t = 0; k->exit_point && t < 2 && (!only || !strcmp(only, k->name)); t++) {
            variant_key = "threshold";
            variant_value = thresholds[t];
            snprintf(row_name, sizeof(row_name), "%s, threshold = %s", k->name, thresholds[t]);
            if (made)
                check_row(mode_kind_ops[i], dir);
            variants++;
        }
    }
    /* Cross-Layer Attention's groups in a dense stack (s = 2) and in a
     * mixed one: a routed layer between groups, a group of three whose
     * readers' d k, d v meet in the first layer's backward */
    static const char *const cla_dense[] = { "dense", "cla", "dense", "cla", NULL };
    static const char *const cla_mixed[] = { "dense", "cla", "mod", "dense", "cla", "cla", NULL };
    /* attention residual's run of three (alpha fixed): the top's d A into
     * the middle's, the middle's into the first's q, k */
    static const char *const attnres_run[] = { "dense", "attnres", "attnres", "attnres", NULL };
    /* two exit points with two layers above the last, at a threshold most
     * tokens pass: a token that left keeps its state frozen through both
     * (its keys and values there from it), in the forward and in decoding,
     * batched too */
    static const char *const exit_two[] = { "dense", "exit", "dense", "exit", "dense", "dense",
                                            NULL };
    static const struct {
        const char *kind;
        const char *const *stack;
        const char *key, *value;
    } stacks[] = { { "cla", cla_dense, NULL, NULL },
                   { "cla", cla_mixed, NULL, NULL },
                   { "attnres", attnres_run, NULL, NULL },
                   { "exit", exit_two, "threshold", "0.15" } };
    for (size_t i = 0; i < sizeof(stacks) / sizeof(stacks[0]); i++) {
        variant_key = stacks[i].key;
        variant_value = stacks[i].value;
        const kind_ops *ops = kind_ops_lookup(mode_kind_ops, stacks[i].kind);
        if (only && strcmp(only, stacks[i].kind))
            continue;
        stack_names = stacks[i].stack;
        int n = snprintf(row_name, sizeof(row_name), "%s in", stacks[i].kind);
        for (int l = 0; stack_names[l] && n < (int)sizeof(row_name); l++)
            n += snprintf(row_name + n, sizeof(row_name) - (size_t)n, " %s", stack_names[l]);
        if (variant_key && n < (int)sizeof(row_name))
            snprintf(row_name + n, sizeof(row_name) - (size_t)n, ", %s = %s", variant_key,
                     variant_value);
        if (made)
            check_row(ops, dir);
        check_ranks(ops, world);
        variants++;
    }
    stack_names = NULL;
    variant_key = variant_value = NULL;
    if (made)
        rmdir(dir);
    int all = failures;
    comm_allreduce_max_int(world, &all);
    if (rank == 0)
        printf("%d kinds and %d variants of their choice, boolean and numeric keys, %s\n", rows, variants,
               all ? "FAILED" : "every check passed");
    comm_finalize(&world);
    return all ? 1 : 0;
}
