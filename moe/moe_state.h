/* The state of the kinds on moe's layer (moe, integrated, ec), shared by
 * their descriptions (moe_kind.c, ec_kind.c) and their compute (moe.c,
 * ec.c).  Private to moe/. */
#ifndef MODE_MOE_MOE_STATE_H
#define MODE_MOE_MOE_STATE_H

#include "core/model/block.h"
#include "core/model/lanes.h"
#include "moe/experts_kind.h"

/* Their parameters: the [moe] keys, and integrated's [integrated] key. */
typedef struct moe_params {
    experts_params experts;
    double noop_bias; /* integrated: added to the no-op column's score for the choice */
} moe_params;

static inline const moe_params *moe_params_of(const layer_spec *s)
{
    return (const moe_params *)(const void *)s->params;
}

typedef struct moe_state {
    void *block;       /* the buffers below, one allocation (moe_layout) */
    experts_cfg ec;
    attn_cache attn;
    float *h;          /* [rows][d] x + Attn(x) */
    float *m, *rstd;   /* [rows][d], [rows]: RMSNorm_mlp(h) */
    int *seq_start;    /* [max_seq+1] */
    int32_t *pos;      /* [rows] */
    float *dec;        /* [3d] */
    experts *ex;       /* the experts' state (experts.c) */
    int nseq;
    kv_cache kv;       /* decoding */
    decode_lanes lanes; /* batched decoding (core/model/lanes.h) */
} moe_state;

void moe_layout(buf_plan *p, moe_state *s, const model_dims *dims, int max_seq);

/* The experts' configuration of a layer from its keys: each kind its own,
 * named by its rows (moe_kind.c, ec_kind.c; build in moe.c, ec.c). */
typedef experts_cfg (*moe_cfg_fn)(const layer_spec *s, const model_dims *dims);
experts_cfg moe_cfg(const layer_spec *s, const model_dims *dims);
experts_cfg integrated_cfg(const layer_spec *s, const model_dims *dims); /* with the no-op */
experts_cfg ec_cfg(const layer_spec *s, const model_dims *dims);

/* The description's functions (layer_kind) for the configuration cfg. */
int moe_tensors_of(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max,
                   moe_cfg_fn cfg);
double moe_state_bytes_of(const layer_spec *spec, const model_dims *dims, int max_seq,
                          moe_cfg_fn cfg);
double moe_flops_of(const layer_spec *spec, const model_dims *dims, moe_cfg_fn cfg);
long moe_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq);

/* Backward's work space: dh and dm, then attention's share (the experts
 * keep their own). */
typedef struct moe_ws {
    float *dh, *dm; /* [rows][d] */
    float *sub;
} moe_ws;
void moe_ws_layout(buf_plan *p, moe_ws *w, const model_dims *dims, int rows);

enum { T_MLP_NORM = BLOCK_ATTN_TENSORS, T_GATE = BLOCK_ATTN_TENSORS + 1 };

/* The compute (moe.c): build for the configuration cfg, then every kind on
 * the layer the same functions, its compute row MOE_OPS(its description,
 * its build, its counterfactual policies in forward and in decode). */
int moe_build_with(layer *l, const model_dims *dims, int max_seq, moe_cfg_fn cfg);
void moe_free(layer *l);
int moe_forward(layer *l, const fwd_args *a, float *y, const float *x);
int moe_backward(layer *l, const fwd_args *a, float *dx, const float *dy, const float *x);
int moe_decode_begin(layer *l, const model_dims *dims, int max_len);
int moe_decode(layer *l, const fwd_args *a, float *y, const float *x, int32_t pos);
int moe_decode_lanes(layer *l, const model_dims *dims, int max_len, int lanes);
int moe_decode_rows(layer *l, const fwd_args *a, float *y, const float *x, int n, int32_t pos,
                    unsigned char *taken);
int moe_record(const layer *l, const fwd_args *a, record_sink *sink);
int moe_stat_count(const layer *l, int *n_sums);
void moe_stat_name(const layer *l, int col, char *buf, int len);
void moe_stat_sums(const layer *l, double *sums);
void moe_stat_columns(const layer *l, const double *sums, double *cols);
void moe_step_end(layer *l, bool updated);

#define MOE_OPS(KIND, BUILD, ROUTES, DECODE_ROUTES)                                                \
    {                                                                                              \
        .kind = &KIND, .build = BUILD, .free = moe_free, .forward = moe_forward,                   \
        .backward = moe_backward, .decode_begin = moe_decode_begin, .decode = moe_decode,         \
        .decode_lanes = moe_decode_lanes, .decode_rows = moe_decode_rows,                         \
        .record = moe_record, .stat_count = moe_stat_count, .stat_name = moe_stat_name,           \
        .stat_sums = moe_stat_sums, .stat_columns = moe_stat_columns, .routes = ROUTES,           \
        .decode_routes = DECODE_ROUTES, .step_end = moe_step_end,                                 \
    }

#endif
