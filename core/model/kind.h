/* The layer-spec table: every layer kind is one row (a layer_kind).  The
 * driver (model.c) only ever calls through a row, and the table itself is a
 * NULL-terminated array that the program hands to build_model(): core offers
 * dense_kind, mod/ and moe/ offer theirs, and the programs list them all
 * (moe/kinds.c, the top of the stack), so core never includes mod/ or moe/. */
#ifndef MODE_CORE_MODEL_KIND_H
#define MODE_CORE_MODEL_KIND_H

#include "core/model/spec.h"

#include <stdint.h>

struct mode_ctx;
struct rope_table;
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
    struct thread_pool *pool; /* ctx's pool, or NULL: one thread */
    const model_dims *dims;
    const struct rope_table *rope;
    fwd_mode mode;
    int nseq;          /* local sequences in the batch */
    int seq_len;       /* rows per sequence */
    long step;         /* training step (keys the random router) */
    long seq0;         /* global index of the first local sequence */
    float seq_scale;   /* 1 / global sequences: auxiliary losses average over these */
    float *ws;         /* work space, kind->ws_floats() floats: backward's, and attention's
                        * scratch in forward (block.h attn_forward) */
    /* outputs the layer adds to */
    double *aux_loss;       /* auxiliary losses that enter the training loss */
    double *side_loss;      /* losses reported apart (e.g. the MoD predictor) */
    double *flops_executed; /* forward FLOPs as routed, this rank */
} fwd_args;

typedef struct layer {
    const struct layer_kind *kind;
    layer_spec spec;
    int index;        /* position in the stack */
    int n_tensors;
    float **w;        /* [n_tensors] views into the parameter buffer */
    float **dw;       /* [n_tensors] views into the gradient buffer */
    void *state;      /* the kind's activations and buffers */
} layer;

/* One row of the table. */
typedef struct layer_kind {
    const char *name;
    /* Config keys this kind reads from its spec ("capacity", "top_k", ...);
     * NULL-terminated.  Also the attributes written beside its checkpoint. */
    const char *const *keys;
    /* Check the spec against the dims; write a message (what was expected)
     * into err and return non-zero when it cannot be built. */
    int (*validate)(const layer_spec *spec, const model_dims *dims, char *err, int err_len);
    /* Write up to max tensor descriptors (out may be NULL to count); return
     * the count. */
    int (*tensors)(const layer_spec *spec, const model_dims *dims, tensor_desc *out, int max);
    /* Allocate l->state for batches of up to max_seq sequences. */
    int (*build)(layer *l, const model_dims *dims, int max_seq);
    void (*free)(layer *l);
    /* Floats of work space needed for max_seq sequences (fwd_args.ws). */
    long (*ws_floats)(const layer_spec *spec, const model_dims *dims, int max_seq);
    /* y[nseq*S][d] = layer(x).  y never aliases x; x stays valid until backward. */
    int (*forward)(layer *l, const fwd_args *a, float *y, const float *x);
    /* dx[nseq*S][d] += d loss / d x, parameter gradients += ..., given dy. */
    int (*backward)(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x);
    /* Bytes of the activations and buffers this kind keeps for batches of
     * max_seq sequences: what build() allocates and the training passes
     * grow (expert buffers as balanced routing fills them, the experts this
     * rank holds: dims ranks and rank), not the parameters nor the backward
     * work space (ws_floats).  For mode-exp plan, which never allocates. */
    double (*state_bytes)(const layer_spec *spec, const model_dims *dims, int max_seq);
    /* Nominal forward FLOPs of one sequence of S rows (MODEL.md "FLOPs"). */
    double (*flops)(const layer_spec *spec, const model_dims *dims);
    /* Incremental decoding (sampling with a KV cache).  decode_begin()
     * sizes the layer's caches for max_len positions and empties them;
     * decode() runs one new row x[d] at position pos (positions arrive in
     * increasing order) into y[d] and returns 1 when the row took the
     * layer's block, 0 when it skipped it (costing nothing there and adding
     * no K/V to the layer's cache), negative on error.  (moe and integrated
     * always run attention; for them 1 means the first choice was a real
     * expert, 0 the no-op.) */
    int (*decode_begin)(layer *l, const model_dims *dims, int max_len);
    int (*decode)(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos);
    /* Routing records: after a forward, describe the routing decisions of
     * the batch through the sink (NULL for kinds that do not route). */
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
} layer_kind;

/* Where record() puts its arrays: put() copies them under name (e.g.
 * "selected") into the run file, below a group the caller chose. */
typedef struct record_sink {
    int (*put)(struct record_sink *s, const char *name, int type, int ndim,
               const unsigned long long *dims, const void *data);
    void *user;
} record_sink;
enum { RECORD_FLOAT, RECORD_INT32, RECORD_UINT8 }; /* same values as RUN_BLOB_* */

/* The row called name in a NULL-terminated table, or NULL. */
const layer_kind *layer_kind_lookup(const layer_kind *const *table, const char *name);

/* The kinds core provides itself (dense). */
extern const layer_kind dense_kind;

#endif
