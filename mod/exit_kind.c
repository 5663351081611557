/* The `exit` kind's description (its compute: exit.c). */
#include "mod/exit.h"
#include "mod/exit_state.h"

#include <errno.h>
#include <stddef.h>

_Static_assert(sizeof(exit_params) <= MODE_PARAMS_BYTES, "exit's keys fit a layer_spec");

static const char *const measures[] = { [EXIT_MAX] = "max", [EXIT_ENTROPY] = "entropy",
                                        [EXIT_DIVERGENCE] = "divergence", NULL };

#define P(f) offsetof(exit_params, f)
static const kind_key exit_keys[] = {
    { "weight", KEY_REAL, P(weight), "1", 0, KEY_NO_MAX, 0, NULL,
      "the exit point's next-token cross-entropy in the training loss, times this (the final "
      "head's has weight 1)", 0 },
    { "confidence", KEY_CHOICE, P(confidence), "max", 0, 0, 0, measures,
      "when a token leaves at this exit (evaluation, sampling): max, its top softmax "
      "probability above threshold; entropy, the softmax's entropy (nats) below it; "
      "divergence, KL(previous exit's softmax || this one's) below it (never at the first)",
      0 },
    { "threshold", KEY_REAL, P(threshold), "0.9", 0, KEY_NO_MAX, 0, NULL,
      "the confidence measure's threshold: the dial of depth against loss", 0 },
    { NULL, KEY_INT, 0, NULL, 0, 0, 0, NULL, NULL, 0 },
};
#undef P

const key_group exit_group = {
    .section = "exit", .keys = exit_keys, .size = sizeof(exit_params), .check = NULL,
};

static const kind_group exit_groups[] = {
    { &exit_group, 0 },
    { NULL, 0 },
};

void exit_layout(buf_plan *p, exit_state *s, const model_dims *dims, int max_seq)
{
    size_t rows = (size_t)max_seq * dims->seq_len, d = (size_t)dims->d_model;
    size_t V = (size_t)dims->vocab;
    s->u = BUF_FLOATS(p, rows * d);
    s->rstd = BUF_FLOATS(p, rows);
    s->logits = BUF_FLOATS(p, rows * V);
    s->logp = BUF_FLOATS(p, rows * V);
    s->left = BUF_BYTES(p, rows);
    s->conf = BUF_FLOATS(p, rows);
    s->dec = BUF_FLOATS(p, d + 2 * V);
    s->rows = (int)rows;
}

void exit_shared_layout(exit_state *s, void *shared, const model_dims *dims, int max_seq)
{
    size_t rows = (size_t)max_seq * dims->seq_len;
    s->head_in = shared;
    s->active = (unsigned char *)shared + rows * (size_t)dims->d_model * sizeof(float);
}

/* Each token's head input, and whether it left: (4 d + 1) bytes a row. */
static double exit_shared_bytes(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    double rows = (double)max_seq * dims->seq_len;
    return rows * (4.0 * dims->d_model + 1.0);
}

static int exit_tensors(const layer_spec *s, const model_dims *dims, tensor_desc *out, int max)
{
    if (out) {
        if (max < 1)
            return -EINVAL;
        out[0] = make_tensor_desc("exit_norm", 1, dims->d_model, 0, 0, INIT_ONES, 0.0f);
    }
    return 1;
}

static double exit_state_bytes(const layer_spec *spec, const model_dims *dims, int li, int max_seq)
{
    exit_state s;
    buf_plan p = buf_counting(BUF_ALIGN);
    exit_layout(&p, &s, dims, max_seq);
    return (double)p.used;
}

static long exit_ws_floats(const layer_spec *spec, const model_dims *dims, int max_seq)
{
    return (long)max_seq * dims->seq_len * dims->d_model; /* d u */
}

/* The exit's head: 2 S d V a sequence. */
static double exit_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    return 2.0 * dims->seq_len * (double)dims->d_model * dims->vocab;
}

const layer_kind exit_kind = {
    .name = "exit",
    .groups = exit_groups,
    .tensors = exit_tensors,
    .flops = exit_flops,
    .state_bytes = exit_state_bytes,
    .ws_floats = exit_ws_floats,
    .exit_point = true,
    .decides = { .decides = DECIDES_EXIT },
    .shared_bytes = exit_shared_bytes,
};
