/* The model: embedding, a stack of layers (each a row of the layer-spec
 * table), final RMSNorm and the tied head (MODEL.md).  Parameters, gradients
 * and both Adam moments are one flat buffer each with the same layout, sliced
 * into named views (model_tensor), so the optimizer, clipping, the all-reduce
 * and the checkpoint each walk one array. */
#ifndef MODE_CORE_MODEL_MODEL_H
#define MODE_CORE_MODEL_MODEL_H

#include "core/kernels/ops.h"
#include "core/model/kind.h"
#include "core/model/plan.h"
#include "core/model/spec.h"
#include "core/rng/streams.h"
#include "core/util/ctx.h"

#include <stddef.h>
#include <stdint.h>

#define MODE_TENSOR_PATH 80

typedef struct model_tensor {
    char path[MODE_TENSOR_PATH]; /* "tok_emb", "layers/3/wq", ... */
    tensor_desc desc;  /* the whole tensor's shape (shape[0] = E for experts) */
    int layer;         /* -1 for tok_emb and final_norm */
    size_t offset;     /* into the flat buffers */
    long numel;        /* what this rank holds */
    /* expert tensors (desc.expert_dim): this rank holds experts
     * [expert0, expert0 + experts) of shape[0], numel = experts x slice */
    int expert0, experts;
    long slice;        /* elements of one expert */
    /* the Adam moments this rank keeps: elements [mlo, mlo + mcount) of what
     * it holds, at moff in adam_m and adam_v (all of them, at offset, unless
     * the optimizer is sharded: model_shard_optim) */
    size_t moff;
    long mlo, mcount;
} model_tensor;

/* A run of elements of the flat buffers. */
typedef struct span {
    long offset, count;
} span;

typedef struct model {
    model_dims dims;
    layer *layers;           /* [n_layers] */
    int n_tensors;
    model_tensor *tensors;   /* [n_tensors], in buffer order */
    size_t n_params;         /* held by this rank (its experts only) */
    float *params, *grads;   /* [n_params] each */
    float *adam_m, *adam_v;  /* [n_moments] each (model_tensor moff, mlo, mcount) */
    size_t n_moments;        /* n_params unless the optimizer is sharded */
    int optim_shards;        /* ranks the shared tensors' moments are spread over (1: none) */
    float *tok_emb, *final_norm;   /* views into params */
    float *dtok_emb, *dfinal_norm; /* views into grads */
    int max_seq;             /* local sequences the activations are sized for */
    float *resid;            /* [n_layers+1][max_seq*S][d] the residual stream */
    float *dresid[2];        /* [max_seq*S][d] its gradient, double-buffered */
    float *final_u;          /* [max_seq*S][d] RMSNorm_final(x_L) */
    float *final_rstd;       /* [max_seq*S] */
    float *logits;           /* [max_seq*S][V], then d loss / d logits */
    token_t *inputs, *targets;  /* [max_seq*S] */
    float *ws;               /* backward work space */
    long ws_floats;
    rope_table *rope;
    float *dec_x[2];         /* [d] decoding: the residual row, double-buffered */
    float *dec_u;            /* [d] */
    int dec_len;             /* positions model_decode_begin allowed */
    float *lane_x[2], *lane_u, *lane_rstd; /* batched decoding: [lanes][d] rows, [lanes] */
    int lanes, lane_len;     /* what model_decode_lanes allowed */
    const route_plan *route; /* decoding's counterfactual routing (sample --routing), or NULL */
    bool bf16;               /* [run] precision bf16: the passes' products in bf16
                              * (matmul.h matmul_exec); decoding stays fp32 */
} model;

/* A batch of nseq sequences of S+1 tokens each (tokens[nseq][S+1]). */
typedef struct batch {
    const token_t *tokens;
    int nseq;
    long step;
    long seq0;        /* global index of the first sequence */
    long global_seqs; /* sequences over all ranks: the loss is their mean */
    int n_counted;    /* > 0: only the first n_counted sequences count in the loss
                         (the rest pad a rank's batch so every rank runs the same
                         forwards, as expert parallelism needs) */
    double *seq_ce;   /* not NULL (evaluation): the CE sum of each counted sequence */
    float *tok_ce;    /* not NULL (with seq_ce): each counted position's CE [nseq*S] */
    const long *window;      /* [nseq] evaluation: the windows' global indices, or NULL */
    const route_plan *route; /* evaluation: counterfactual routing, or NULL */
} batch;

typedef struct fwd_result {
    double ce_sum;         /* sum of next-token CE over this rank's positions */
    long n_positions;      /* nseq * S */
    double aux_loss;       /* auxiliary losses in the training loss (already averaged) */
    double side_loss;      /* reported apart (not in the training loss) */
    double flops_executed; /* forward, this rank */
} fwd_result;

/* Build a model for up to max_seq local sequences from one spec per layer;
 * kinds are looked up in table (their compute rows).  dims->ranks and dims->rank place the
 * experts: this rank allocates only its own (parameters, gradients, both
 * moments).  dims->shard_optim with ranks P > 1 (ZeRO stage 1,
 * docs/sharding.md): of the shared tensors' moments this rank allocates
 * piece `rank` of each shared run (model_shared_spans(m, MODEL_SPAN_CAP),
 * span_piece) only, and m->optim_shards is P; a shared tensor over
 * MODEL_SPAN_CAP elements is then refused (-EOVERFLOW).  On failure returns non-zero and writes what was wrong (layer
 * index, kind, expected) into err. */
int build_model(model **out, const model_dims *dims, const layer_spec *specs,
                const kind_ops *const *table, int max_seq, char *err, int err_len);
void free_model(model **m);

/* The shared tensors (every tensor with one rank: those the ranks sum
 * their gradients of) as runs of the flat buffers, adjacent tensors merged
 * and no run longer than cap elements; into out (room for the count that
 * out NULL returns).  The runs follow from the tensor sizes and the rank
 * count only. */
#define MODEL_SPAN_CAP (1L << 30) /* sharded runs: a rank's piece fits an MPI count */
int model_shared_spans(const model *m, long cap, span *out);
/* Piece r of P of a run: [offset + count r / P, offset + count (r+1) / P). */
span span_piece(span s, int P, int r);

/* MODEL.md "Init"; tensor t draws from pcg32_keyed(seed, MODEL_INIT_KEY, t, 0)
 * in row-major order, a rank's experts from their place in that stream, so
 * a sharded model starts from the bits of the whole one. */
#define MODEL_INIT_KEY PCG_KEY_INIT
void model_init(model *m, uint64_t seed);
void model_zero_grad(model *m);
/* After an optimizer step, every layer's kind_ops.step_end (updated: the
 * parameters changed). */
void model_step_end(model *m, bool updated);

/* Forward over the batch.  In FWD_TRAIN mode the logits buffer is turned into
 * d loss / d logits (scaled by 1/(global_seqs*S)) ready for model_backward. */
int model_forward(model *m, mode_ctx *ctx, const batch *b, fwd_mode mode, fwd_result *r);
/* Gradients of the last FWD_TRAIN forward, added into m->grads. */
int model_backward(model *m, mode_ctx *ctx, const batch *b);
/* Told as the backward goes: layer_done(user, l) after layer l's backward
 * (l = L - 1 down to 0), when no later part of the backward adds to the
 * gradients of layer l's tensors (model_tensor layer); then the embedding's
 * backward ends it (tok_emb and final_norm, layer -1, are final only at the
 * end).  A non-zero return ends the backward with it. */
typedef struct backward_hook {
    int (*layer_done)(void *user, int layer);
    void *user;
} backward_hook;
int model_backward_hooked(model *m, mode_ctx *ctx, const batch *b, const backward_hook *h);

/* Sampling with a KV cache per layer: decode_begin() empties the caches for
 * up to max_len positions; decode_step() runs the token at position pos
 * (0, 1, 2, ... in order) and writes the next-token logits[V].  taken[l]
 * (when not NULL) says whether layer l's block ran for this token (at an
 * exit point: whether the token left the stack there; once a layer's stack
 * op says it left, no later layer runs it, each only takes its keys and
 * values: kind.h decode_kv, 0 in taken).  The logits equal
 * those of a FWD_EVAL_CAUSAL forward over the whole prefix.  max_len may
 * pass the training length S: past it each layer attends to a sliding
 * window, the rows of the last S positions (RoPE is relative: the window
 * sees what a sequence of S would), and the experts' capacity counters
 * start again every S positions. */
int model_decode_begin(model *m, int max_len);
int model_decode_step(model *m, mode_ctx *ctx, token_t token, int32_t pos, float *logits,
                      unsigned char *taken);
/* The decoding caches' bytes a position, measured at the allocator
 * (core/util/heap.h): what model_decode_begin allocates for S positions
 * less what it allocates for S/2, over S - S/2 (the caches grow with the
 * positions, the rest is fixed).  Before the model's first
 * model_decode_begin (-EINVAL after: its caches only grow); leaves the
 * caches sized for S positions. */
int model_decode_cache_bytes(model *m, double *bytes);

/* Self-speculative decoding (docs/speculative.md) takes the stack in
 * parts, after model_decode_begin, every layer running its block (the
 * whole model: an exit point passes the stream on, no token leaves).
 * decode_part() runs layers [from, to) on the row x[d] at position pos
 * (from == 0: x is first the embedding of token); decode_head() writes
 * logits[V] from x[d], the output of layer at (at < 0: of the last layer,
 * through the final norm; else through exit point at's norm, the draft
 * head), both through the tied embedding; decode_truncate() forgets the
 * positions >= pos in layers [from, to).  -ENOTSUP when a layer's kind
 * cannot (no decode_truncate, or at not an exit point). */
/* Batched decoding (core/model/lanes.h, sample --batch): lanes() sizes
 * every layer's caches for `lanes` sequences of up to max_len positions
 * (past S, the last S: a sliding window) and empties them; -ENOTSUP when a
 * layer's kind has no batched decoding (*bad: its index).  rows() runs
 * tokens[lanes], lane i's token at position pos (every lane at the same
 * position, positions rising), into logits[lanes][V] and, when taken is not
 * NULL, taken[i*L + l]: what decode_step's taken[l] would say for lane i.
 * Lane i's logits are model_decode_step's on lane i's tokens alone, to
 * float rounding. */
int model_decode_lanes(model *m, int max_len, int lanes, int *bad);
int model_decode_rows(model *m, mode_ctx *ctx, const token_t *tokens, int32_t pos, float *logits,
                      unsigned char *taken);
int model_decode_part(model *m, mode_ctx *ctx, token_t token, float *x, int from, int to,
                      int32_t pos);
int model_decode_head(model *m, const float *x, int at, float *logits);
int model_decode_truncate(model *m, int from, int to, int32_t pos);

/* Where the last forward first went non-finite, for nseq sequences: the
 * index l+1 of the first layer whose output has a NaN or infinity, L+1 for
 * the logits, 0 when everything is finite. */
int model_first_nonfinite_activation(const model *m, int nseq);
/* The first tensor (in buffer order) whose gradient is not finite, or NULL. */
const model_tensor *model_first_nonfinite_grad(const model *m);

const model_tensor *model_find_tensor(const model *m, const char *path);

/* The same for a built model's layers. */
double model_flops_per_seq(const model *m, double *per_layer);

#endif
