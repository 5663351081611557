/* The experts' buffers, shared by their description (experts_kind.c:
 * layouts and bytes for mode-exp plan) and their compute (experts.c).
 * Private to moe/. */
#ifndef MODE_MOE_EXPERTS_STATE_H
#define MODE_MOE_EXPERTS_STATE_H

#include "moe/experts_kind.h"

#include "core/model/block.h"

struct experts {
    experts_cfg c;
    experts_slots slot; /* where the gate, experts, bias and shared experts are in w */
    int d, N;
    int layer;          /* the layer's index: random, hash and counterfactual streams */
    /* expert parallelism (model_dims ranks, rank): this rank holds and
     * computes experts [first, first + local) */
    int ranks, rank, first, local;
    void *fixed_block; /* the buffers of experts_fixed_layout */
    /* token side, per local row (experts_rows_layout, grown to the rows) */
    int cap_rows;
    void *rows_block;
    float *probs;       /* [rows][N] softmax of the gate logits */
    float *lse;         /* [rows] logsumexp of the gate logits */
    int32_t *col;       /* [rows][top_k] chosen column */
    int32_t *choice;    /* [rows][top_k] chosen column, -1 when dropped */
    float *weight;      /* [rows][top_k] p of the chosen column */
    float *dp;          /* [rows][N] gradient work */
    float *logit;       /* [rows][N] the gate's logits (sigmoid's z-loss) */
    float *dslot;       /* [rows][top_k] <dy, out> of each chosen column */
    float *sh_out;      /* [rows][d] shared experts' output (shared > 0) */
    float *sh_rout;     /* [rows][d] the routed experts' part of y (shared > 0) */
    /* dispatch: kept assignments to real experts, sorted by expert
     * (experts_assign_layout, grown) */
    int n_assign, cap_assign;
    void *assign_block;
    int *a_row, *a_slot;
    float *send;        /* [assign][d+1]: the row, then its expert */
    float *outs;        /* [assign][d] expert outputs, then their gradients */
    float *grads;       /* [assign][d] */
    int P;
    int *send_counts, *recv_counts; /* [P] */
    /* expert side (experts_recv_layout, grown) */
    int n_recv, cap_recv;
    void *recv_block;
    float *recv;        /* [recv][d+1] */
    float *xin, *yout;  /* [recv][d] gathered by expert */
    float *back;        /* [recv][d] in received order */
    int *perm;          /* [recv] received index of each gathered row */
    int *exp_start;     /* [local+1] gathered rows of each local expert */
    int *at;            /* [E+1] counting-sort cursors, by expert */
    ffn_cache *cache;   /* [local], each its own block (build_ffn_cache) */
    float *ws;          /* ffn_backward work space (experts_ws_layout) */
    long cap_ws;
    /* shared experts: their SwiGLU cache over the rows, backward work */
    ffn_cache sh_cache;
    float *sh_ws;       /* [3 rows s f] then dx [rows][d] */
    long cap_sh_ws;
    ffn_cache sh_dec_cache;
    /* balancing over the global batch: the step's chosen assignments per
     * column summed over ranks, then their total (frac of batch scope);
     * the load each real expert took since the last experts_step_end */
    double *global;     /* [N + 1] */
    double *load;       /* [E] */
    /* statistics of the last training forward */
    double *sums;
    int *count;         /* [N] admission counters */
    /* decoding */
    int *dec_counts;    /* [N] admitted so far in the sequence being decoded */
    float *dec;         /* [N + d] */
    int32_t *dec_col;   /* [top_k] */
    float *dec_weight;  /* [top_k] */
    unsigned char *used; /* [N] top-k's chosen columns */
    int *perm_scratch;   /* [N] hash and counterfactual draws */
    int S;               /* the sequence length: expert-choice's picks */
    float *ec_scores;    /* [S] one expert's probabilities over a sequence */
    unsigned char *ec_z; /* [S] its picks */
    int *ec_heap;        /* [S] */
    ffn_cache dec_cache;
    /* batched decoding (experts_decode_lanes): per lane its admission
     * counters, per row its kept assignments, one expert's gathered rows */
    int lanes;
    void *lane_block;
    int *lane_counts;    /* [lanes][N] */
    int *lane_row;       /* [lanes top_k] the row of each kept assignment */
    int *lane_exp;       /* [lanes top_k] its expert */
    float *lane_w;       /* [lanes top_k] its weight */
    float *lane_in;      /* [lanes][d] an expert's rows */
    float *lane_out;     /* [lanes][d] */
    int *lane_first;     /* [lanes] each row's first choice (E: the no-op) */
    ffn_cache lane_cache, sh_lane_cache; /* lanes rows */
};

/* The buffers of a fixed size; those that follow the rows of a batch, the
 * kept assignments, the received rows; one expert's backward work space
 * for cnt rows (ws: [3 cnt f] then dxin [cnt d]). */
void experts_fixed_layout(buf_plan *p, experts *ex);
void experts_rows_layout(buf_plan *p, experts *ex, int rows);
void experts_assign_layout(buf_plan *p, experts *ex, int n);
void experts_recv_layout(buf_plan *p, experts *ex, int n);
typedef struct experts_ws {
    float *ffn;  /* ffn_backward's */
    float *dxin; /* [cnt][d] */
} experts_ws;
void experts_ws_layout(buf_plan *p, experts_ws *w, const experts *ex, int cnt);
/* An experts struct of configuration c on dims, buffers unset. */
void experts_init(experts *ex, const experts_cfg *c, const model_dims *dims);

#endif
