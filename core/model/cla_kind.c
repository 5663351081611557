/* The `cla` kind's description (Cross-Layer Attention, Brandon et al.
 * 2024, arXiv 2405.12981; docs/kinds/cla.md): a dense block whose
 * attention computes queries alone and reads the keys and values of the
 * first layer of its group, the nearest dense layer below it.  Its compute
 * is cla.c, over dense.c's. */
#include "core/model/dense.h"

#include <errno.h>
#include <string.h>

static int cla_tensors(const layer_spec *spec, const model_dims *dims, tensor_desc *out, int max)
{
    (void)spec;
    if (!out)
        return CLA_TENSORS;
    if (max < CLA_TENSORS)
        return -EINVAL;
    tensor_desc t[BLOCK_TENSORS];
    block_tensors(t, dims, true);
    /* attn_norm wq [no wk wv] wo mlp_norm w1 w3 w2 */
    out[0] = t[0];
    out[1] = t[1];
    memcpy(out + 2, t + 4, (BLOCK_TENSORS - 4) * sizeof(tensor_desc));
    return CLA_TENSORS;
}

static double cla_state_bytes(const layer_spec *spec, const model_dims *dims, int li,
                              int max_seq)
{
    (void)spec, (void)li;
    return dense_layout_bytes(dims, max_seq, true);
}

/* dense's, less the two products it does not run: u Wk and u Wv, 2 S d^2 each. */
static double cla_flops(const layer_spec *spec, const model_dims *dims, int li)
{
    (void)spec;
    long S = dims->seq_len;
    double d = dims->d_model;
    return dense_flops(spec, dims, li) - 2.0 * 2.0 * (double)S * d * d;
}

const layer_kind cla_kind = {
    .name = "cla",
    .groups = NULL,
    .tensors = cla_tensors,
    .flops = cla_flops,
    .state_bytes = cla_state_bytes,
    .ws_floats = dense_ws_floats,
};
