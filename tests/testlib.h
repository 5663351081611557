/* Helpers shared by the model-level cmocka tests (test_model.c, test_mod.c,
 * test_moe.c, test_staged.c) and, those that never fail a cmocka test
 * (dimensions, tokens, weights, tl_rows_shift, the tolerances), the MPI
 * contract test_kinds.c: building a small model with a batch of random
 * tokens, scaling its weights up, the loss, routing records through a kind's
 * record hook, an independent reference of the experts' gate, and the
 * 4th-order finite-difference check of the gradient with the routing held
 * fixed.  The checks fail the calling cmocka test. */
#ifndef MODE_TESTS_TESTLIB_H
#define MODE_TESTS_TESTLIB_H

#include "core/model/model.h"
#include "core/rng/pcg32.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* Double-precision comparisons                                         */

/* |a - b| / max(|a|, |b|), 0 when both are 0. */
double tl_rel_err(double a, double b);

/* max |a - b| and that over max |b| (floored at 1e-30). */
void tl_max_diff(const float *a, const float *b, size_t n, double *abs_out, double *rel_out);

/* Causality is a statement about what a logit depends on, not about bits.
 * When later tokens change, a routed block or an expert takes another number
 * of rows, so the products holding earlier rows run with another row count,
 * and OpenBLAS may sum a row in another order for another row count (its
 * Haswell kernels do: ../shared/FACTS.md).  That moves a logit by a few
 * units in the last place (2^-24 = 6e-8 relative), carried through the
 * layers of these test models (weights scaled up to make routing depend on
 * content): at most 7.3e-7 of the row's largest logit seen under the
 * Haswell kernels, 0 under SkylakeX and Cooperlake.  TL_CAUSAL_TOL leaves
 * over a hundred times that.  A later token that reaches an earlier
 * position moves it by far more: a mask leaking one later key moved it by
 * 0.5 to 1.3, causal mode taking the top-k of the whole sequence by 0.2 to
 * 0.6 (both tried; every causal test failed). */
#define TL_CAUSAL_TOL 1e-4
/* The largest over rows of max |a - b| / max |b| of the row: rows of V. */
double tl_rows_shift(const float *a, const float *b, int rows, int V);

/* Fail (at the caller's line) unless x < bound (x <= bound with or_equal),
 * printing both; a NaN fails. */
void tl_assert_below(double x, double bound, bool or_equal, const char *x_expr,
                     const char *bound_expr, const char *file, int line);
/* Fail unless tl_rel_err(a, b) < tol, printing a, b and the error. */
void tl_assert_rel(double a, double b, double tol, const char *a_expr, const char *b_expr,
                   const char *file, int line);

#define assert_below(x, bound) \
    tl_assert_below((x), (bound), false, #x, #bound, __FILE__, __LINE__)
#define assert_at_most(x, bound) \
    tl_assert_below((x), (bound), true, #x, #bound, __FILE__, __LINE__)
#define assert_rel_below(a, b, tol) tl_assert_rel((a), (b), (tol), #a, #b, __FILE__, __LINE__)

/* ------------------------------------------------------------------ */
/* Layer specs and model dimensions                                     */

/* Kind kind of table (compute rows) with every key at its default. */
layer_spec tl_spec(const kind_ops *const *table, const char *kind);
/* One key of s (whose kind is in table) from text; the test fails on a bad
 * value or a key the kind lacks. */
void tl_set(layer_spec *s, const kind_ops *const *table, const char *key, const char *value);
/* An integer key's value of a layer (top_k, experts); the test fails when
 * its kind has no such key. */
int tl_key(const layer *ly, const char *key);
/* The routed-block settings (mod, staged). */
void tl_spec_routed(layer_spec *s, const kind_ops *const *table, double capacity,
                    const char *router, const char *gate, const char *causal, double aux_weight);
/* The experts' settings (moe, integrated, staged). */
void tl_spec_experts(layer_spec *s, const kind_ops *const *table, int experts, int top_k,
                     double capacity_factor, int d_ff, double balance_weight, double z_weight);

/* V 23, d 16, 2 heads of 8, d_ff 24. */
model_dims tl_small_dims(int n_layers, int seq_len);

/* MODEL.md: ceil(capacity_factor * top_k * rows / E); 0 means no dropping
 * (INT32_MAX). */
int tl_capacity(double capacity_factor, int top_k, int rows, int E);

/* ------------------------------------------------------------------ */
/* Fixtures                                                             */

typedef struct tl_fixture {
    model *m;
    token_t *tokens; /* [nseq][S+1], uniform over the vocabulary */
    batch b;          /* all of them, step 0, seq0 0 */
    mode_ctx ctx;     /* one rank (comm NULL), ctx.seed = seed */
} tl_fixture;

/* n tokens uniform over [0, V) from stream (seed, 7): the fixtures' batch
 * (tl_make's, and tests/test_kinds.c's). */
void tl_draw_tokens(token_t *t, int n, uint64_t seed, int V);

/* Build from kinds (NULL-terminated) and one spec per layer (NULL: the
 * defaults for every layer), model_init(seed), tokens from stream (seed, 7). */
void tl_make(tl_fixture *f, const kind_ops *const *kinds, model_dims dims,
             const layer_spec *specs, int nseq, uint64_t seed);
void tl_unmake(tl_fixture *f);

/* Normal-init tensors x mult (std 0.02 -> 0.2 for mult 10), gains
 * 1 + 0.3 N(0,1), biases 0.3 N(0,1) (tensor t from stream (seed, t)), so
 * that every gradient is well above float32 noise. */
void tl_scale_weights(model *m, float mult, uint64_t seed);

/* Tensors by layer and name ("layers/<l>/<name>"); l < 0: name is the whole
 * path.  tl_tensor fails the test when the model has no such tensor. */
const model_tensor *tl_tensor(const model *m, int l, const char *name);
float *tl_param(model *m, int l, const char *name);
void tl_fill(model *m, int l, const char *name, float v);
void tl_scale(model *m, int l, const char *name, float mult);
/* tl_scale when the model has the tensor; whether it has. */
bool tl_scale_if(model *m, int l, const char *name, float mult);
/* sqrt(sum grad^2) of one tensor. */
double tl_grad_norm(const model *m, int l, const char *name);
/* Copy every tensor of src that dst has under the same path (and must have
 * the same size), but those whose path contains skip (NULL: none); the count
 * copied. */
int tl_copy_by_name(model *dst, const model *src, const char *skip);

/* ------------------------------------------------------------------ */
/* Forward, loss, gradient                                              */

/* model_forward of the fixture's batch, which must succeed (r may be NULL). */
void tl_forward(tl_fixture *f, fwd_mode mode, fwd_result *r);
/* ce_sum / n_positions + aux_loss + side_loss of a forward in mode (the aux
 * and side losses are only there in training mode). */
double tl_loss(tl_fixture *f, fwd_mode mode, fwd_result *r);
/* Zeroed gradients, a FWD_TRAIN forward and backward; tl_loss's J. */
double tl_train_grad(tl_fixture *f, fwd_result *r);

/* ------------------------------------------------------------------ */
/* Routing records through the kind's record hook                       */

#define TL_MAX_ROWS 4096
#define TL_MAX_SLOTS 4096

enum {
    TL_SELECTED = 1, /* [nseq][S] uint8: the top-k selection */
    TL_SCORES = 2,   /* [nseq][S] float: router scores */
    TL_CAUSAL = 4,   /* [nseq][S] uint8: the causal rule's decision */
    TL_PRED = 8,     /* [nseq][S] float: the predictor's probability */
    TL_EXPERTS = 16, /* [nseq][S][K] int32: column; -1 dropped; -2 the row skipped the block */
    TL_WEIGHTS = 32, /* [nseq][S][K] float: p of the chosen column */
};
#define TL_ROUTER_RECORD (TL_SELECTED | TL_SCORES | TL_CAUSAL)
#define TL_EXPERT_RECORD (TL_EXPERTS | TL_WEIGHTS)

typedef struct tl_routing {
    int nseq, S, K, n, nk; /* n = nseq S rows, nk = n K slots */
    unsigned has;          /* the arrays put, TL_* bits */
    unsigned char selected[TL_MAX_ROWS], causal[TL_MAX_ROWS];
    float scores[TL_MAX_ROWS], pred_prob[TL_MAX_ROWS];
    int32_t experts[TL_MAX_SLOTS];
    float weights[TL_MAX_SLOTS];
} tl_routing;

/* Zeroed, on the heap (free()). */
tl_routing *tl_routing_new(void);
/* The record of layer l after the last forward over nseq sequences: every
 * array of need must be there, and none but those of need and allow; each
 * must have the shape above. */
void tl_read_routing(model *m, int l, int nseq, tl_routing *out, unsigned need, unsigned allow);
/* Slots whose experts entry is v. */
int tl_count_value(const tl_routing *r, int32_t v);
/* Per sequence, the k-th best router score minus the (k+1)-th (min over
 * sequences; HUGE_VAL when k >= S): how far the top-k selection is from
 * flipping. */
double tl_router_gap(const tl_routing *r, int k);

/* ------------------------------------------------------------------ */
/* Causality and decoding                                               */

/* Restore the tokens from keep, then redraw those of sequence sq after
 * position t (1 <= t + 1 <= S) uniformly from r. */
void tl_redraw_after(tl_fixture *f, const token_t *keep, int sq, int t, pcg32 *r);

/* Causality of forwards in mode, layer l being routed with drops (checked
 * on the unchanged tokens): for every t < S - 1, three times, the tokens of
 * sequence 1 after t are redrawn (tl_redraw_after, from stream (seed, 3));
 * the logits must stay within TL_CAUSAL_TOL (tl_rows_shift) at positions
 * <= t of sequence 1 and everywhere in the other sequences, and layer l's
 * decisions in hold (TL_CAUSAL, TL_EXPERTS; need and allow as
 * tl_read_routing) the same there (a decision could flip only on a score
 * within rounding of its threshold, which these seeds do not have), while layer l's experts
 * after t must change in more than half of the changes (else the check would
 * not tell much).  Prints "[label] what: ..." with the counts; the tokens are
 * restored. */
void tl_check_causal(tl_fixture *f, fwd_mode mode, int l, unsigned need, unsigned allow,
                     unsigned hold, uint64_t seed, const char *label, const char *what);

/* The logits of the last forward over the fixture's batch, copied (free()). */
float *tl_logits_copy(const tl_fixture *f);

/* Decoding with the KV cache: model_decode_begin, then model_decode_step
 * over the first sequence's S tokens; every position's logits within 1e-4,
 * relative to the row's largest, of ref's row (a causal-mode forward's).
 * taken (NULL: not asked for): [S][n_layers], what each layer reported.
 * Returns the largest relative error, and in *worst_abs the absolute one. */
double tl_decode_pass(tl_fixture *f, const float *ref, unsigned char *taken, double *worst_abs,
                      const char *label);

/* ------------------------------------------------------------------ */
/* The reference routing of the experts                                 */

/* The gate of a moe, integrated or staged layer recomputed from the layer's
 * input and a row selection: h = x + Attn(x) among the selected rows (block.h's
 * attention sublayer), then RMSNorm_mlp, logits, softmax and top-k in
 * double. */
typedef struct tl_gate_ref {
    int nseq, S, K, E, N, nsel; /* N = E, + 1 with the no-op (column E) */
    bool noop;
    int *row, *ss;    /* [nsel] row of each selected row; [nseq+1] */
    int32_t *pos;     /* [nsel] original positions */
    float *h;         /* [nsel][d] x + Attn(x) among the selected rows */
    double *logits;   /* [nsel][N] RMSNorm_mlp(h) Wg */
    double *p, *lse;  /* [nsel][N] softmax; [nsel] */
    int32_t *col;     /* [nsel][K] top_k columns before capacity, ties to the lower index */
    double min_gap;   /* min over rows and k <= K of the k-th largest logit minus the (k+1)-th */
} tl_gate_ref;

/* Layer l after the last forward over nseq sequences, with the rows
 * take[nseq S] (NULL: every row) taking the block: its input is m->resid's
 * layer l slice.  noop: the gate has the no-op column E. */
void tl_gate_ref_build(model *m, int l, int nseq, const unsigned char *take, bool noop,
                       tl_gate_ref *g);
void tl_gate_ref_free(tl_gate_ref *g);
/* The record against the reference: choices against MODEL.md's admission
 * written out again (per sequence in position order, first choice before
 * second, at most capacity per real expert, the no-op never dropped; -2 for
 * rows not selected), and weights (p of the chosen column, kept or dropped)
 * within 2e-5.  Returns the largest weight error. */
double tl_check_record(const tl_gate_ref *g, const tl_routing *r, int capacity,
                       const char *label);
/* The experts' auxiliary statistics from the reference: the Switch balance
 * loss of each sequence over its selected rows and all N columns, averaged
 * over the sequences; lse^2 (the z-loss) and the gate entropy averaged over
 * all selected rows. */
void tl_aux_reference(const tl_gate_ref *g, double *bl, double *z, double *ent);

/* An evaluation forward in mode over other tokens (every token + 7 mod V)
 * has no aux loss and leaves layer l's training statistics as sums[n_sums]
 * (from the kind's stat_sums after the training forward). */
void tl_check_stats_kept(tl_fixture *f, int l, fwd_mode mode, const double *sums, int n_sums);

/* ------------------------------------------------------------------ */
/* Finite-difference gradients, routing held fixed                      */

typedef struct tl_fd_env tl_fd_env;

/* Whether the routing after the last forward (at a perturbed point) is that
 * of the base point; scratch is a routing record to read it into. */
typedef bool (*tl_routing_same_fn)(const tl_fd_env *env, tl_routing *scratch);

struct tl_fd_env {
    tl_fixture *f;
    const float *grad;       /* the gradient checked, [n_params] (f->m->grads or another) */
    int with_side;           /* J includes side_loss */
    int aux_only;            /* J is aux_loss alone */
    tl_routing_same_fn same; /* NULL: nothing held */
    /* for tl_record_same: */
    int layer;               /* the routed layer */
    unsigned need, allow;    /* its record, as tl_read_routing */
    unsigned hold;           /* the arrays that must not change (TL_SELECTED, TL_EXPERTS) */
    const tl_routing *base;  /* its record at the base point */
    const void *user;        /* for a caller's same */
};

/* The record of env->layer against env->base on env->hold. */
bool tl_record_same(const tl_fd_env *env, tl_routing *scratch);

/* The step and tolerance of the routed kinds' checks (test_mod.c,
 * test_moe.c, test_staged.c): step h = 2e-3 along N(0,1) directions (weights
 * ~0.2, gains ~1 after tl_scale_weights), the 4th-order difference within
 * 5e-3 relative of <grad, u>, as test_model.c asks of its 2nd-order one. */
#define TL_FD_STEP 2e-3
#define TL_FD_TOL 5e-3

typedef struct tl_fd_out {
    double e2, e4; /* relative errors of the 2nd- and 4th-order central differences */
    double an;     /* <grad, u> */
    double fd4;    /* the 4th-order difference */
    int tries;     /* directions evaluated */
} tl_fd_out;

/* Directional derivative of J (a FWD_TRAIN forward, env->with_side,
 * env->aux_only) along a random N(0,1) u within [off, off+n) (times mask[i]
 * when mask is not NULL) against <grad, u>, by (8[J(h)-J(-h)] - [J(2h)-J(-2h)])
 * / (12h).  Directions with |<grad,u>| < 0.5 |grad| are redrawn first (they
 * measure rounding noise); when a perturbed evaluation changes the routing
 * (env->same false), another direction is drawn, up to 8 tries, and the test
 * fails when none keeps it.  The parameters are restored to the bit. */
void tl_fd_check(const tl_fd_env *env, size_t off, size_t n, const float *mask, pcg32 *r,
                 double h, tl_fd_out *o);

/* tl_fd_check along every tensor on its own (step h; J with side_loss for
 * the predictor's tensors, "/pred_", without it for the others): |<g,u>| >
 * 1e-4 and the error below tol; then every tensor but the predictor's at once
 * (step h_all, J without side_loss), below tol too.  Prints each; returns the
 * worst tensor's error. */
double tl_fd_tensors(tl_fd_env *env, const char *label, pcg32 *r, double h, double h_all,
                     double tol);

/* The MoD predictor of layer l reads stop-gradient(x).  Forward side: a
 * change of its weights moves side_loss but neither ce_sum nor aux_loss, to
 * the bit (r0: the forward at the base point).  Backward side: side_loss does
 * depend on tok_emb, but backward's tok_emb gradient is that of J without
 * side_loss: along one direction (from r, step h) the derivative of
 * J - side_loss agrees with <grad, u> within tol, and the full J's differs
 * from it by more than 1e-3 |<grad, u>|. */
void tl_check_side_stop_gradient(tl_fd_env *env, int l, const fwd_result *r0, pcg32 *r, double h,
                                 double tol, const char *label);

#endif
