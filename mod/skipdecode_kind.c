/* The `skipdecode` kind's description (its compute: skipdecode.c). */
#include "mod/skipdecode.h"
#include "mod/skipdecode_state.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>

_Static_assert(sizeof(skipdecode_params) <= MODE_PARAMS_BYTES,
               "skipdecode's keys fit a layer_spec");

static const char *const schedules[] = { [SKIPDECODE_LINEAR] = "linear", NULL };

#define P(f) offsetof(skipdecode_params, f)
static const kind_key skipdecode_keys[] = {
    { "max_layers", KEY_INT, P(max_layers), "0", 0, KEY_NO_MAX, 0, NULL,
      "layers position 0 computes, counted from the top of the stack; 0: every layer", 0 },
    { "min_layers", KEY_INT, P(min_layers), "1", 1, KEY_NO_MAX, 0, NULL,
      "layers the last position (S - 1) computes, counted from the top of the stack", 0 },
    { "schedule", KEY_CHOICE, P(schedule), "linear", 0, 0, 0, schedules,
      "linear: the layers a position computes fall linearly from max_layers at position 0 "
      "to min_layers at S - 1 (the paper's decay); layer l runs the positions t < T_l", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

/* A schedule that rises with position would make a later token compute a
 * layer an earlier one skipped, whose keys and values are not there. */
static int skipdecode_check(const void *values, key_problem *p)
{
    const skipdecode_params *v = values;
    if (v->max_layers && v->max_layers < v->min_layers) {
        *p = (key_problem){ "max_layers", ">=", "min_layers",
                            "(or 0: every layer): the layers a position computes never rise "
                            "with position" };
        return 1;
    }
    return 0;
}

const key_group skipdecode_group = {
    .section = "skipdecode", .keys = skipdecode_keys, .size = sizeof(skipdecode_params),
    .check = skipdecode_check,
};

static const kind_group skipdecode_groups[] = {
    { &skipdecode_group, 0 },
    { NULL, 0 },
};

int skipdecode_layers_at(const skipdecode_params *p, int L, int S, int t)
{
    int hi = p->max_layers ? p->max_layers : L, lo = p->min_layers;
    if (S <= 1 || t >= S - 1)
        return lo;
    /* nearest, halves down: (2 (hi - lo) t + S - 1) / (2 (S - 1)) */
    return hi - (int)(((long)(hi - lo) * 2 * t + S - 1) / (2L * (S - 1)));
}

int skipdecode_rows(const skipdecode_params *p, int l, int L, int S)
{
    int T = 0;
    while (T < S && skipdecode_layers_at(p, L, S, T) >= L - l)
        T++;
    return T;
}

int skipdecode_runs(const skipdecode_params *p, int l, int L, int S, int t)
{
    return skipdecode_layers_at(p, L, S, t < S ? t : S - 1) >= L - l;
}

static int skipdecode_validate(const layer_spec *spec, const model_dims *dims, char *err,
                               int err_len)
{
    const skipdecode_params *p = skipdecode_params_of(spec);
    int L = dims->n_layers;
    if (p->min_layers > L || p->max_layers > L) {
        snprintf(err, (size_t)err_len,
                 "[skipdecode] min_layers = %d, max_layers = %d: expected at most the model's "
                 "%d layers",
                 p->min_layers, p->max_layers, L);
        return -EINVAL;
    }
    return 0;
}

void skipdecode_layout(buf_plan *p, skipdecode_state *s, const model_dims *dims, int max_seq)
{
    size_t rows = (size_t)max_seq * dims->seq_len, d = (size_t)dims->d_model;
    s->xs = BUF_FLOATS(p, rows * d);
    s->h = BUF_FLOATS(p, rows * d);
    s->ys = BUF_FLOATS(p, rows * d);
    s->seq_start = BUF_INTS(p, max_seq + 1);
    s->pos = BUF_I32(p, rows);
    s->selected = BUF_BYTES(p, rows);
    attn_cache_layout(p, &s->attn, dims, (int)rows);
    mlp_cache_layout(p, &s->mlp, dims, (int)rows, dims->d_ff);
}

void skipdecode_ws_layout(buf_plan *p, skipdecode_ws *w, const model_dims *dims, int n)
{
    long a = attn_ws_floats(dims, n, dims->seq_len), m = mlp_ws_floats(dims, n, dims->d_ff);
    size_t nd = (size_t)n * dims->d_model;
    w->dys = BUF_FLOATS(p, nd);
    w->dh = BUF_FLOATS(p, nd);
    w->dxs = BUF_FLOATS(p, nd);
    w->sub = BUF_FLOATS(p, a > m ? a : m);
}

static int skipdecode_tensors(const layer_spec *spec, const model_dims *dims, tensor_desc *out,
                              int max)
{
    if (out && max < BLOCK_TENSORS)
        return -EINVAL;
    return block_tensors(out, dims, true);
}

static double skipdecode_state_bytes(const layer_spec *spec, const model_dims *dims, int li,
                                     int max_seq)
{
    skipdecode_state s;
    buf_plan p = buf_counting(BUF_ALIGN);
    skipdecode_layout(&p, &s, dims, max_seq);
    return (double)p.used;
}

static long skipdecode_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    skipdecode_ws w;
    buf_plan p = buf_counting(sizeof(float));
    skipdecode_ws_layout(&p, &w, dims, max_seq * dims->seq_len);
    return (long)(p.used / sizeof(float));
}

/* Nominal: the block on the T_l rows of a sequence the schedule gives layer
 * li, T_l^2 attention pairs: forward's executed count a sequence
 * (docs/kinds/skipdecode.md "FLOPs"). */
static double skipdecode_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    long T = skipdecode_rows(skipdecode_params_of(spec), li, dims->n_layers, dims->seq_len);
    return attn_flops_rows(dims, T, T * T) + ffn_flops_rows(dims->d_model, dims->d_ff, T);
}

const layer_kind skipdecode_kind = {
    .name = "skipdecode",
    .groups = skipdecode_groups,
    .validate = skipdecode_validate,
    .tensors = skipdecode_tensors,
    .flops = skipdecode_flops,
    .state_bytes = skipdecode_state_bytes,
    .ws_floats = skipdecode_ws_floats,
    .decides = { .decides = DECIDES_TAKE }, /* selected: t < T_l, the same in every sequence */
};
