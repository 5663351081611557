#include "core/model/spec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int layer_spec_get(const layer_spec *s, const char *key, double *num, const char **str)
{
    *str = NULL;
    *num = 0.0;
    if (!strcmp(key, "capacity")) *num = s->capacity;
    else if (!strcmp(key, "router")) *str = s->router;
    else if (!strcmp(key, "gate")) *str = s->gate;
    else if (!strcmp(key, "causal")) *str = s->causal;
    else if (!strcmp(key, "aux_weight")) *num = s->aux_weight;
    else if (!strcmp(key, "experts")) *num = s->experts;
    else if (!strcmp(key, "top_k")) *num = s->top_k;
    else if (!strcmp(key, "capacity_factor")) *num = s->capacity_factor;
    else if (!strcmp(key, "d_ff")) *num = s->expert_d_ff;
    else if (!strcmp(key, "balance_weight")) *num = s->balance_weight;
    else if (!strcmp(key, "z_weight")) *num = s->z_weight;
    else return -ENOENT;
    return 0;
}

tensor_desc make_tensor_desc(const char *name, int ndim, int s0, int s1, int s2,
                             tensor_init init, float std)
{
    tensor_desc t;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.ndim = ndim;
    t.shape[0] = s0;
    t.shape[1] = s1;
    t.shape[2] = s2;
    t.init = init;
    t.init_std = std;
    t.decay = ndim >= 2;
    return t;
}
