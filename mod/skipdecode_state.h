/* The `skipdecode` kind's state, shared by its description
 * (skipdecode_kind.c) and its compute (skipdecode.c).  Private to mod/. */
#ifndef MODE_MOD_SKIPDECODE_STATE_H
#define MODE_MOD_SKIPDECODE_STATE_H

#include "core/model/block.h"
#include "core/model/lanes.h"

#include <stdint.h>

enum { SKIPDECODE_LINEAR, SKIPDECODE_SCHEDULE_COUNT };

/* The [skipdecode] keys' values: the model's schedule, the same in every
 * skipdecode layer (the stack refuses layers that disagree). */
typedef struct skipdecode_params {
    int max_layers; /* layers position 0 computes, counted from the top; 0: every layer */
    int min_layers; /* layers the last position (S - 1) computes, from the top */
    int schedule;   /* SKIPDECODE_LINEAR */
} skipdecode_params;

/* Activations for max_seq sequences (the rows a layer runs are at most
 * every row: the description has no layer index, so no T_l, to size them
 * by), laid out by skipdecode_layout. */
typedef struct skipdecode_state {
    void *block;
    int seq_len;       /* S, the schedule's span */
    int T;             /* the rows of each sequence the last forward ran (T_l) */
    int nseq;          /* its sequences */
    float *xs;         /* [rows][d] the rows that run the block, gathered */
    float *h;          /* [rows][d] after attention */
    float *ys;         /* [rows][d] the block's output */
    int *seq_start;    /* [max_seq + 1] */
    int32_t *pos;      /* [rows] */
    uint8_t *selected; /* [max_seq S] took the block (t < T_l): the record */
    attn_cache attn;
    mlp_cache mlp;
    /* decoding */
    kv_cache kv;       /* T_l rows (every position when T_l = S) */
    mlp_cache mlp1;
    float *dec;        /* [d] */
    decode_lanes lanes; /* batched decoding (core/model/lanes.h) */
} skipdecode_state;

/* The backward's work space for n gathered rows. */
typedef struct skipdecode_ws {
    float *dys, *dh, *dxs; /* [n][d] */
    float *sub;            /* attention's or the MLP's own work space */
} skipdecode_ws;

static inline const skipdecode_params *skipdecode_params_of(const layer_spec *s)
{
    return (const skipdecode_params *)(const void *)s->params;
}

/* The schedule's layers at position t (counted from the top of L, at most
 * L): n(t) = max - round((max - min) t / (S - 1)) (halves down), n = min
 * from t = S - 1 on. */
int skipdecode_layers_at(const skipdecode_params *p, int L, int S, int t);
/* T_l: the positions t < T_l that layer l of L computes (n(t) >= L - l). */
int skipdecode_rows(const skipdecode_params *p, int l, int L, int S);
/* Whether layer l computes position t (decoding too, t >= S reading n(S - 1)). */
int skipdecode_runs(const skipdecode_params *p, int l, int L, int S, int t);

void skipdecode_layout(buf_plan *p, skipdecode_state *s, const model_dims *dims, int max_seq);
void skipdecode_ws_layout(buf_plan *p, skipdecode_ws *w, const model_dims *dims, int n);

#endif
