/* The layer-spec table: every layer kind is one row, in two halves.
 *
 * layer_kind, the description: the kind's name, its keys (keys.h), the
 * checks of its parameters, its tensors, its nominal FLOPs and its buffers.
 * That is all the config, mode-exp plan and the analysis need, and what
 * they link: a kind's description lives in files of its own (<kind>_kind.c)
 * that hold none of its compute.
 *
 * kind_ops, the compute: build, forward, backward, decoding, records,
 * statistics, pointing back at the description.  The model (model.c) only
 * ever calls through a row.
 *
 * The tables are NULL-terminated arrays the programs hand down: core offers
 * dense's rows, each kind's folder its own, and the top of the library
 * stack lists them all, so core never includes a kind's folder. */
#ifndef MODE_CORE_MODEL_KIND_H
#define MODE_CORE_MODEL_KIND_H

#include "core/data/token.h"
#include "core/kernels/matmul.h"
#include "core/model/buf.h"
#include "core/model/decision.h"
#include "core/model/keys.h"
#include "core/model/route.h"
#include "core/model/spec.h"

#include <stdint.h>

struct mode_ctx;
struct rope_table;
struct thread_pool;
struct layer;
struct record_sink;

typedef enum fwd_mode {
    FWD_TRAIN,       /* top-k routing, keep activations for backward */
    FWD_EVAL_TOPK,   /* top-k routing over the whole sequence (not causal) */
    FWD_EVAL_CAUSAL, /* the causal rule (MODEL.md, causal mode) */
    FWD_MODE_COUNT
} fwd_mode;

/* Everything a layer needs to know about the batch it is run on. */
typedef struct fwd_args {
    struct mode_ctx *ctx;
    matmul_exec mm; /* the products' pool and precision (matmul.h); mm.pool also
                     * splits the element-wise loops (NULL: one thread) */
    const model_dims *dims;
    const struct rope_table *rope;
    fwd_mode mode;
    int nseq;          /* local sequences in the batch */
    int seq_len;       /* rows per sequence */
    long step;         /* training step (keys per-step random streams) */
    long seq0;         /* global index of the first local sequence */
    const long *window; /* [nseq] evaluation: each sequence's global window index (the
                         * counterfactual draws and the book's rows); NULL in training */
    const token_t *tokens; /* [nseq*S] the input tokens (hash routing reads them) */
    const route_plan *route; /* evaluation: decisions to replace (route.h); NULL: as trained */
    float seq_scale;   /* 1 / global sequences: auxiliary losses average over these */
    float *ws;         /* work space, kind->ws_floats() floats: backward's, and attention's
                        * scratch in forward (block.h attn_forward) */
    /* outputs the layer adds to */
    double *aux_loss;       /* auxiliary losses that enter the training loss */
    double *side_loss;      /* losses reported apart, not trained on through the loss */
    double *flops_executed; /* forward FLOPs as routed, this rank */
} fwd_args;

typedef struct layer {
    const struct layer_kind *kind;
    const struct kind_ops *ops;
    layer_spec spec;
    int index;        /* position in the stack */
    int n_tensors;
    float **w;        /* [n_tensors] views into the parameter buffer */
    float **dw;       /* [n_tensors] views into the gradient buffer */
    void *state;      /* the kind's activations and buffers */
    void *shared;     /* what the stack's layers of this kind share (layer_kind
                       * shared_bytes; NULL: nothing) */
} layer;

/* What a kind that acts on the stack as a whole hears from the driver
 * (kind_ops stack): when the model is built, and at the points of every
 * forward and decoding step where the stack, not one layer, is concerned. */
typedef enum stack_event {
    STACK_BUILT, /* once, every layer built: the stack and the model's tensors (a: NULL) */
    STACK_BEGIN, /* a forward or a decoding step starts (rows: its rows) */
    STACK_LAYER, /* layer `at` has run: y its output rows, x its input rows */
    STACK_HEAD,  /* y: the rows the tied head reads (RMSNorm_final's output) */
} stack_event;

typedef struct stack_call {
    stack_event event;
    int rows;              /* rows of y and x: nseq * S in a forward, 1 in decoding */
    int at;                /* STACK_LAYER: the layer that ran */
    float *y;              /* [rows][d] */
    const float *x;        /* [rows][d] */
    /* STACK_LAYER in batched decoding: left[i] set to whether row i's token
     * has left the stack (its row frozen from here on); NULL: not asked */
    unsigned char *left;
    /* STACK_BUILT: the stack (a layer's peers are there) and the model's
     * tensors and buffers a kind may read in its passes */
    struct layer *layers;  /* [n_layers] */
    int n_layers;
    const float *tok_emb;  /* [V][d] the tied head */
    float *dtok_emb;       /* [V][d] its gradient */
    const token_t *targets; /* [max_seq*S] each forward's next tokens */
    char *err;             /* STACK_BUILT: where a kind that refuses the stack says why */
    int err_len;
} stack_call;

/* One row of the table: the description. */
typedef struct layer_kind {
    const char *name;
    /* The key groups the kind reads (keys.h), ending with { NULL }; NULL
     * for a kind without keys.  Also the attributes beside its checkpoint
     * tensors. */
    const kind_group *groups;
    /* Check the spec against the dims (checks between keys that need the
     * model's sizes); write what was expected into err and return non-zero
     * when it cannot be built.  NULL: nothing beyond the keys' own checks. */
    int (*validate)(const layer_spec *spec, const model_dims *dims, char *err, int err_len);
    /* Write up to max tensor descriptors (out may be NULL to count); return
     * the count. */
    int (*tensors)(const layer_spec *spec, const model_dims *dims, tensor_desc *out, int max);
    /* Nominal forward FLOPs of one sequence of S rows (MODEL.md "FLOPs") of
     * the stack's layer li (0 .. dims n_layers - 1: what a kind whose
     * work depends on its depth reads, as skipdecode's prefix does). */
    double (*flops)(const layer_spec *spec, const model_dims *dims, int li);
    /* Training's nominal forward FLOPs of one sequence at step (0-based)
     * of a kind whose work follows a schedule (mod's capacity_schedule);
     * *steady: the first step from which they are flops()'s (0: always).
     * NULL: flops() at every step. */
    double (*flops_at)(const layer_spec *spec, const model_dims *dims, long step, long *steady);
    /* Bytes of the activations and buffers the kind keeps for batches of
     * max_seq sequences, from the same layout functions build() allocates
     * with (buf.h): what build() allocates and what the training passes
     * grow (rows a layer selects, buffers as the batch's routing fills them,
     * the expert slices this rank holds: dims ranks and rank), not the
     * parameters nor the backward work space.  For mode-exp plan. */
    double (*state_bytes)(const layer_spec *spec, const model_dims *dims, int li, int max_seq);
    /* Floats of work space for max_seq sequences (fwd_args.ws), from the
     * layout its backward carves the work space with. */
    long (*ws_floats)(const layer_spec *spec, const model_dims *dims, int max_seq);
    /* An exit point: in evaluation and decoding it may take tokens out of
     * the stack (its kind_ops stack does it); what the analysis reads. */
    bool exit_point;
    /* The plain dense block (MODEL.md's): what a dense baseline, the
     * multiplier's ladder and isoFLOP's dense runs are made of.  A kind that
     * decides nothing is not therefore plain (cla, attnres change the
     * block). */
    bool plain;
    /* What the kind decides per row (decision.h), which its record()
     * writes: what the programs ask instead of the kind's name or keys. */
    decision_decl decides;
    /* Bytes the stack's layers of this kind share (layer.shared: one block
     * a kind, zeroed, allocated by the model), for max_seq sequences; NULL:
     * none.  For mode-exp plan as for build_model. */
    double (*shared_bytes)(const layer_spec *spec, const model_dims *dims, int max_seq);
} layer_kind;

/* The other half of a row: the compute. */
typedef struct kind_ops {
    const layer_kind *kind;
    /* Allocate l->state for batches of up to max_seq sequences. */
    int (*build)(layer *l, const model_dims *dims, int max_seq);
    void (*free)(layer *l);
    /* y[nseq*S][d] = layer(x).  y never aliases x; x stays valid until backward. */
    int (*forward)(layer *l, const fwd_args *a, float *y, const float *x);
    /* dx[nseq*S][d] += d loss / d x, parameter gradients += ..., given dy. */
    int (*backward)(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x);
    /* A token that left the stack (a layer's stack op said so), at a later
     * layer: its frozen state x[d] at position pos gives this layer's cache
     * what the layer's decode() would have put there (keys and values),
     * nothing else.  NULL: model.c runs decode() (and the kind that took
     * the token out keeps its state). */
    int (*decode_kv)(layer *l, const fwd_args *a, const float *x, int32_t pos);
    /* Incremental decoding (sampling with a KV cache).  decode_begin()
     * sizes the layer's caches for max_len positions and empties them;
     * decode() runs one new row x[d] at position pos (positions arrive in
     * increasing order) into y[d] and returns how many times the row took
     * the layer's block: 1, or 0 when it skipped it (costing nothing there
     * and adding no K/V to the layer's cache), more for a kind that applies
     * its block repeatedly (at most 255); negative on error.  (A kind that
     * always runs attention says in its docs what its 1 and 0 mean.) */
    int (*decode_begin)(layer *l, const model_dims *dims, int max_len);
    int (*decode)(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos);
    /* Forget what decode() cached for positions >= pos (self-speculative
     * decoding rolls back a rejected draft, docs/speculative.md): the
     * layer's state is then as if decoding had stopped before pos.  NULL:
     * the kind cannot roll back (sample --speculative refuses it). */
    int (*decode_truncate)(layer *l, int32_t pos);
    /* Batched decoding (core/model/lanes.h, sample --batch): decode_lanes()
     * sizes caches for `lanes` independent sequences of max_len positions
     * and empties them; decode_rows() runs row i of x[n][d] as lane i's
     * token (n = lanes), every lane at position pos, into y[n][d], writing
     * in taken[i] what decode() would return for it (the rows that take the
     * block share its products; lane i's decisions and maths are decode()'s
     * on that lane alone); 0, or negative on error.  Both NULL: the kind
     * decodes one sequence at a time (sample --batch refuses it). */
    int (*decode_lanes)(layer *l, const model_dims *dims, int max_len, int lanes);
    int (*decode_rows)(layer *l, const fwd_args *a, float *y, const float *x, int n, int32_t pos,
                       unsigned char *taken);
    /* Routing records: after a forward, the batch's decisions (the parts
     * layer_kind.decides declares) through route_decision_record (NULL for
     * kinds that record none). */
    int (*record)(const layer *l, const fwd_args *a, struct record_sink *sink);
    /* Per-step statistics of the last FWD_TRAIN forward: stat_count() gives
     * the number of columns and (in *n_sums) of raw sums; stat_sums() writes
     * the raw sums (counts, sums of losses...) that add up over ranks;
     * stat_columns() turns the summed values into the columns, named by
     * stat_name().  All NULL for kinds without. */
    int (*stat_count)(const layer *l, int *n_sums);
    void (*stat_name)(const layer *l, int col, char *buf, int len);
    void (*stat_sums)(const layer *l, double *sums);
    void (*stat_columns)(const layer *l, const double *sums, double *cols);
    /* The counterfactual policies the kind's decisions take (bits 1u <<
     * ROUTE_*, route.h), applied in forward (FWD_EVAL_*) and decode when
     * fwd_args.route says so; 0 for kinds that do not route. */
    unsigned routes;
    unsigned decode_routes; /* the same in decode() */
    /* After the optimizer step (updated: it changed the parameters), on
     * every rank: state a kind moves by a rule rather than a gradient (the
     * experts' balancing bias) from what the step's forwards saw.  NULL:
     * nothing. */
    void (*step_end)(layer *l, bool updated);
    /* The stack's points (stack_event), on every layer that has this op,
     * in layer order: a kind that reads other layers of its kind (its
     * peers, found at STACK_BUILT) or the model's tensors, or that acts on
     * rows beyond its own layer (exit: a token that leaves keeps its state
     * through the later layers and gives the head its input), does it
     * here.  Returns, at STACK_LAYER, how many of the rows have left the
     * stack (in decoding, its one row: later layers then take only its
     * keys and values, decode_kv); otherwise 0; negative on error.  NULL:
     * the kind acts on its own rows alone. */
    int (*stack)(layer *l, const fwd_args *a, const stack_call *c);
} kind_ops;

/* Where record() puts its arrays: put() copies them under name (e.g.
 * "selected") into the run file, below a group the caller chose. */
typedef struct record_sink {
    int (*put)(struct record_sink *s, const char *name, int type, int ndim,
               const unsigned long long *dims, const void *data);
    void *user;
} record_sink;

/* The row called name in a NULL-terminated table, or NULL. */
const layer_kind *layer_kind_lookup(const layer_kind *const *table, const char *name);
const kind_ops *kind_ops_lookup(const kind_ops *const *table, const char *name);

/* ---- a layer's parameters through the kind's keys -------------------------- */

/* spec = kind name, every key of the kind at its default. */
void layer_spec_init(layer_spec *spec, const layer_kind *k);
/* The key of k called name, and its group (NULL when k has no such key):
 * "key", the first of its groups that has one, or "section.key", that
 * group's.  A key whose name an earlier group of the kind also has (staged's
 * [mod] router and [moe] router) is known by its section-qualified name
 * (layer_key_name) in [layer.N] sections, checkpoint attributes and
 * messages. */
const kind_key *layer_key(const layer_kind *k, const char *name, const kind_group **group);
void layer_key_name(const layer_kind *k, const kind_group *g, const kind_key *key, char *out,
                    size_t n);
/* Set key name of spec from text (keys.h key_parse); -ENOENT when the kind
 * has no such key, -EINVAL with why on a bad value. */
int layer_spec_set(layer_spec *spec, const layer_kind *k, const char *name, const char *text,
                   char *why, size_t why_len);
/* A key's value as text, or as a number (a choice's index); -ENOENT when
 * the kind has no such key. */
int layer_spec_text(const layer_spec *spec, const layer_kind *k, const char *name, char *out,
                    size_t n);
int layer_spec_number(const layer_spec *spec, const layer_kind *k, const char *name,
                      double *out);
/* The values of group g within spec's parameters (a kind's own access). */
static inline void *layer_group_values(layer_spec *spec, const kind_group *g)
{
    return spec->params + g->offset;
}
static inline const void *layer_group_cvalues(const layer_spec *spec, const kind_group *g)
{
    return spec->params + g->offset;
}

/* The kinds core provides itself. */
extern const layer_kind dense_kind;
extern const kind_ops dense_ops;
extern const layer_kind cla_kind; /* Cross-Layer Attention's reader (cla.c) */
extern const kind_ops cla_ops;
extern const layer_kind attnres_kind; /* attention residual (attnres.c) */
extern const kind_ops attnres_ops;

#endif
