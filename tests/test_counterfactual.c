/* Counterfactual evaluation (core/train/counterfactual.h) on small models
 * built with known answers, under mpirun -n 2:
 *   - replaying a model's own decisions gives its losses bit for bit,
 *     window by window; so does every policy at capacity 1 (every token
 *     takes the block);
 *   - a router made to tie every score picks the first k positions, and so
 *     does "bottom" (the k lowest scores, ties to the lower position): no
 *     change, bit for bit; "random" must change the loss;
 *   - integrated's noop-all is the model whose experts output nothing
 *     (W2 = 0), bit for bit; its noop-none and the experts' random change
 *     the loss;
 *   - the per-class sums cover every token, learned's differences are 0;
 *   - one rank against two: every arm's loss and paired difference within
 *     float rounding (the draws are keyed by window, not rank);
 *   - a replay book without the evaluated windows, and a policy a named
 *     layer cannot take, are refused with a message. */
#include "core/comm/comm.h"
#include "core/data/data.h"
#include "core/model/model.h"
#include "core/train/counterfactual.h"
#include "moe/registry.h"
#include "mpi/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, rank;

#define S_LEN 32
#define WINDOWS 24

static model *build(const char *mid, const char *key, const char *value, mode_ctx *ctx,
                    bool sharded)
{
    model_dims dims = { .vocab = 256, .d_model = 16, .n_heads = 2, .d_head = 8, .d_ff = 24,
                        .n_layers = 3, .seq_len = S_LEN, .ranks = 1, .rank = 0 };
    if (sharded) {
        dims.ranks = ctx->size;
        dims.rank = ctx->rank;
    }
    layer_spec specs[3];
    const layer_kind *k = layer_kind_lookup(mode_kinds, mid);
    layer_spec_init(&specs[0], &dense_kind);
    layer_spec_init(&specs[1], k);
    layer_spec_init(&specs[2], &dense_kind);
    char err[512];
    if (key && layer_spec_set(&specs[1], k, key, value, err, sizeof(err))) {
        CHECK(0, "%s %s = %s: %s", mid, key, value, err);
        return NULL;
    }
    if (!strcmp(mid, "moe") || !strcmp(mid, "integrated"))
        layer_spec_set(&specs[1], k, "experts", "2", err, sizeof(err));
    model *m = NULL;
    if (build_model(&m, &dims, specs, mode_kind_ops, 4, err, sizeof(err))) {
        CHECK(0, "build %s: %s", mid, err);
        return NULL;
    }
    model_init(m, 3);
    /* larger weights than the initialisation's: routing that depends on
     * the content, losses that move when the decisions do */
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].desc.init == INIT_NORMAL)
            for (long i = 0; i < m->tensors[t].numel; i++)
                m->params[m->tensors[t].offset + i] *= 8.0f;
    return m;
}

static float *param(model *m, int l, const char *name)
{
    char path[64];
    snprintf(path, sizeof(path), "layers/%d/%s", l, name);
    const model_tensor *t = model_find_tensor(m, path);
    return t ? m->params + t->offset : NULL;
}

static void fill(model *m, int l, const char *name, float v)
{
    char path[64];
    snprintf(path, sizeof(path), "layers/%d/%s", l, name);
    const model_tensor *t = model_find_tensor(m, path);
    CHECK(t != NULL, "no tensor %s", path);
    for (long i = 0; t && i < t->numel; i++)
        m->params[t->offset + i] = v;
}

static int run(model *m, mode_ctx *ctx, const dataset *d, fwd_mode mode, const int *pol, int n,
               const route_book *replay, bool keep, cf_result *r, char *err)
{
    cf_opts o = { .mode = mode, .windows = WINDOWS, .policies = pol, .n_policies = n, .seed = 7,
                  .replay = replay, .keep_book = keep };
    return evaluate_counterfactual(m, ctx, d, &o, r, err, 512);
}

/* Arm a of r against learned: identical window by window, or not. */
static void expect(const cf_result *r, int a, bool same, const char *what)
{
    const cf_arm *x = &r->arms[a];
    if (same)
        CHECK(x->identical == (double)r->windows && x->diff == 0.0,
              "%s: %s should equal learned bit for bit: %g of %ld windows the same, diff %g",
              what, route_policy_names[x->policy], x->identical, r->windows, x->diff);
    else
        CHECK(x->identical < (double)r->windows && fabs(x->diff) > 1e-7,
              "%s: %s should change the loss: %g of %ld windows the same, diff %g", what,
              route_policy_names[x->policy], x->identical, r->windows, x->diff);
    if (rank == 0)
        printf("[%s] %-9s loss %.6f, vs learned %+.6f (se %.6f, p %.3g), %g/%ld windows the "
               "same\n", what, route_policy_names[x->policy], x->loss, x->diff, x->diff_se, x->p,
               x->identical, r->windows);
}

static void check_classes(const cf_result *r, const char *what)
{
    double tokens = 0.0;
    for (int c = 0; c < r->n_classes; c++) {
        tokens += r->arms[0].cls[c].tokens;
        CHECK(r->arms[0].cls[c].tokens <= 0 || r->arms[0].cls[c].diff == 0.0,
              "%s: learned's own difference in class %d is %g", what, c, r->arms[0].cls[c].diff);
    }
    CHECK(r->n_classes > 0 && tokens == (double)r->windows * S_LEN,
          "%s: the classes hold %g tokens of %ld", what, tokens, r->windows * S_LEN);
}

static void mod_cases(mode_ctx *ctx, const dataset *d)
{
    char err[512];
    cf_result r, rr;
    /* replay of its own decisions, in both modes */
    for (int mode = FWD_EVAL_TOPK; mode <= FWD_EVAL_CAUSAL; mode++) {
        model *m = build("mod", NULL, NULL, ctx, false);
        if (!m)
            return;
        int pol[] = { ROUTE_RANDOM, ROUTE_SHUFFLE };
        CHECK(run(m, ctx, d, (fwd_mode)mode, pol, 2, NULL, true, &r, err) == 0, "mod: %s", err);
        int rp[] = { ROUTE_REPLAY };
        CHECK(run(m, ctx, d, (fwd_mode)mode, rp, 1, r.book, false, &rr, err) == 0, "replay: %s",
              err);
        const char *what = mode == FWD_EVAL_TOPK ? "mod, topk" : "mod, causal";
        expect(&rr, 1, true, what);
        expect(&r, 1, false, what);
        check_classes(&r, what);
        free_route_book(&r.book);
        free_model(&m);
    }
    /* every score tied: top-k takes the first k, and so does bottom */
    model *m = build("mod", NULL, NULL, ctx, false);
    if (!m)
        return;
    fill(m, 1, "router", 0.0f);
    int pol[] = { ROUTE_BOTTOM, ROUTE_RANDOM };
    CHECK(run(m, ctx, d, FWD_EVAL_TOPK, pol, 2, NULL, false, &r, err) == 0, "tied: %s", err);
    expect(&r, 1, true, "mod, tied scores");
    expect(&r, 2, false, "mod, tied scores");
    free_model(&m);
    /* capacity 1: every token takes the block whatever the policy */
    m = build("mod", "capacity", "1", ctx, false);
    if (!m)
        return;
    int all[] = { ROUTE_RANDOM, ROUTE_BOTTOM, ROUTE_SHUFFLE };
    CHECK(run(m, ctx, d, FWD_EVAL_TOPK, all, 3, NULL, false, &r, err) == 0, "cap 1: %s", err);
    for (int a = 1; a <= 3; a++)
        expect(&r, a, true, "mod, capacity 1");
    free_model(&m);
}

static void expert_cases(mode_ctx *ctx, const dataset *d)
{
    char err[512];
    cf_result r, rr;
    model *m = build("integrated", NULL, NULL, ctx, true);
    if (!m)
        return;
    int pol[] = { ROUTE_NOOP_NONE, ROUTE_RANDOM, ROUTE_NOOP_ALL };
    CHECK(run(m, ctx, d, FWD_EVAL_TOPK, pol, 3, NULL, true, &r, err) == 0, "integrated: %s",
          err);
    expect(&r, 1, false, "integrated");
    expect(&r, 2, false, "integrated");
    int rp[] = { ROUTE_REPLAY };
    CHECK(run(m, ctx, d, FWD_EVAL_TOPK, rp, 1, r.book, false, &rr, err) == 0, "replay: %s", err);
    expect(&rr, 1, true, "integrated replay");
    /* noop-all is the model whose experts add nothing */
    double noop_all = r.arms[3].loss;
    free_route_book(&r.book);
    float *w2 = param(m, 1, "experts_w2");
    char path[64];
    snprintf(path, sizeof(path), "layers/1/experts_w2");
    const model_tensor *t = model_find_tensor(m, path);
    for (long i = 0; w2 && t && i < t->numel; i++)
        w2[i] = 0.0f;
    CHECK(run(m, ctx, d, FWD_EVAL_TOPK, NULL, 0, NULL, false, &rr, err) == 0, "w2 0: %s", err);
    CHECK(rr.arms[0].loss == noop_all, "integrated: noop-all %.9g, experts that add nothing "
          "%.9g: they should be the same bits", noop_all, rr.arms[0].loss);
    free_model(&m);
}

/* One rank (each alone) against all of them. */
static void rank_cases(mode_ctx *world_ctx, const dataset *d)
{
    char err[512];
    int pol[] = { ROUTE_RANDOM, ROUTE_BOTTOM, ROUTE_SHUFFLE };
    const char *kinds[] = { "mod", "staged" };
    for (int k = 0; k < 2; k++) {
        cf_result many, one;
        model *m = build(kinds[k], NULL, NULL, world_ctx, true);
        if (!m)
            return;
        int np = 3;
        CHECK(run(m, world_ctx, d, FWD_EVAL_TOPK, pol, np, NULL, false, &many, err) == 0,
              "%s on %d ranks: %s", kinds[k], world_ctx->size, err);
        free_model(&m);
        comm *self = NULL;
        CHECK(comm_split(world_ctx->comm, world_ctx->rank, &self) == 0, "split");
        mode_ctx solo = { .rank = 0, .size = 1, .comm = self, .seed = world_ctx->seed };
        m = build(kinds[k], NULL, NULL, &solo, true);
        if (m && self)
            CHECK(run(m, &solo, d, FWD_EVAL_TOPK, pol, np, NULL, false, &one, err) == 0,
                  "%s on one rank: %s", kinds[k], err);
        free_model(&m);
        comm_free(&self);
        /* a window's forward runs in float32 in a batch of another size
         * (OpenBLAS may sum a row in another order for another row count,
         * FACTS.md): its loss moves by float32 rounding, about 1e-7
         * relative (1e-9 seen); a draw keyed by the rank instead of the
         * window would move it by the policies' own effect, 1e-3 here */
        for (int a = 0; a <= np; a++) {
            CHECK(fabs(many.arms[a].loss - one.arms[a].loss) <= 1e-6 * fabs(one.arms[a].loss) &&
                      fabs(many.arms[a].diff - one.arms[a].diff) <= 1e-6,
                  "%s %s: %d ranks give %.12g (%+.3g), one rank %.12g (%+.3g)", kinds[k],
                  route_policy_names[many.arms[a].policy], world_ctx->size, many.arms[a].loss,
                  many.arms[a].diff, one.arms[a].loss, one.arms[a].diff);
        }
        if (rank == 0)
            printf("[%s] %d ranks against one: every policy within float rounding\n", kinds[k],
                   world_ctx->size);
    }
}

static void refusals(mode_ctx *ctx, const dataset *d)
{
    char err[512] = "";
    cf_result r;
    model *m = build("mod", NULL, NULL, ctx, false);
    if (!m)
        return;
    long win[2] = { 100000, 100001 };
    route_book *book = NULL;
    CHECK(build_route_book(&book, win, 2) == 0, "book");
    int rp[] = { ROUTE_REPLAY };
    CHECK(run(m, ctx, d, FWD_EVAL_TOPK, rp, 1, book, false, &r, err) != 0 &&
              strstr(err, "not window"),
          "a book of other windows is not refused (%s)", err);
    unsigned char layers[3] = { 0, 1, 0 };
    CHECK(route_check(m, ROUTE_NOOP_NONE, layers, false, err, sizeof(err)) != 0 &&
              strstr(err, "layer 1 (mod) does not take it"),
          "noop-none on a mod layer is not refused (%s)", err);
    CHECK(route_check(m, ROUTE_BOTTOM, NULL, true, err, sizeof(err)) != 0,
          "bottom in decoding is not refused");
    CHECK(route_check(m, ROUTE_RANDOM, NULL, true, err, sizeof(err)) == 0,
          "random in decoding is refused: %s", err);
    free_route_book(&book);
    free_model(&m);
}

int main(int argc, char **argv)
{
    comm *world = NULL;
    if (comm_init(&world, &argc, &argv)) {
        fprintf(stderr, "MPI initialisation failed\n");
        return 1;
    }
    rank = comm_rank(world);
    mode_ctx ctx = { .rank = rank, .size = comm_size(world), .comm = world, .seed = 5 };
    dataset *d = NULL;
    char err[512];
    if (load_dataset(&d, "synthetic", NULL, 256, 0.05, S_LEN, NULL, err, sizeof(err))) {
        fprintf(stderr, "synthetic: %s\n", err);
        return 1;
    }
    /* the single-model cases on every rank of the world: the windows spread */
    mod_cases(&ctx, d);
    expert_cases(&ctx, d);
    rank_cases(&ctx, d);
    refusals(&ctx, d);
    free_dataset(&d);
    int all = failures;
    comm_allreduce_max_int(world, &all);
    if (rank == 0)
        printf("counterfactual routing: %s\n", all ? "FAILED" : "every check passed");
    comm_finalize(&world);
    return all ? 1 : 0;
}
