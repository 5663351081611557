#include "analysis/modelsize.h"

#include "core/model/model.h"
#include "moe/registry.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int count_model_size(const run_config *c, const layer_kind *const *kinds, model_size *out,
                     char *err, int err_len)
{
    model_dims dims = config_dims(c);
    /* MODEL.md: tok_emb [V][d] (tied with the head) and final_norm [d] */
    int64_t params = (int64_t)dims.vocab * dims.d_model + dims.d_model;
    tensor_desc *descs = NULL;
    int cap = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_kind *k = layer_kind_lookup(kinds, c->layers[l].kind);
        if (!k) {
            snprintf(err, (size_t)err_len, "layer %d: unknown kind '%s'", l, c->layers[l].kind);
            free(descs);
            return -EINVAL;
        }
        /* the descriptors only: a few hundred bytes, whatever the shapes */
        int n = k->tensors(&c->layers[l], &dims, NULL, 0);
        if (n > cap) {
            tensor_desc *grown = realloc(descs, (size_t)n * sizeof(tensor_desc));
            if (!grown) {
                free(descs);
                return -ENOMEM;
            }
            descs = grown;
            cap = n;
        }
        n = k->tensors(&c->layers[l], &dims, descs, cap);
        for (int t = 0; t < n; t++)
            params += tensor_numel(&descs[t]);
    }
    free(descs);
    out->params = params;
    out->forward_flops = config_flops_per_seq(c, NULL);
    out->train_flops_per_step = config_train_flops_per_step(c);
    out->recorded = false;
    return 0;
}

/* The records, when the run file has them and they fit its config. */
static int read_recorded(const run_info *ri, model_size *out)
{
    int64_t *p = NULL;
    int nd = 0;
    unsigned long long dims[4];
    int rc = run_reader_array(ri->rd, "model/parameters", H5T_NATIVE_INT64, sizeof(int64_t),
                              (void **)&p, &nd, dims, NULL);
    if (rc)
        return rc;
    bool ok = nd == 1 && dims[0] == 1 && p[0] > 0;
    out->params = ok ? p[0] : 0;
    free(p);
    double *f = NULL;
    long n = 0;
    if (!ok || run_read_column(ri, "model/forward_flops", &f, &n) || n != ri->cfg.n_layers + 1) {
        free(f);
        return -EINVAL;
    }
    /* summed as the trainer does (model_flops_per_seq: the head, then the
     * layers in order), so that the same budget plans the same steps */
    out->forward_flops = f[n - 1];
    for (long i = 0; i + 1 < n; i++)
        out->forward_flops += f[i];
    free(f);
    double step = run_last_value(ri, "model/train_flops_per_step", NULL);
    out->train_flops_per_step =
        isfinite(step) ? step : MODE_TRAIN_FLOPS_PER_FORWARD * out->forward_flops * ri->cfg.batch;
    out->recorded = isfinite(out->forward_flops);
    return out->recorded ? 0 : -EINVAL;
}

int run_model_size(const run_info *ri, model_size *out, char *err, int err_len)
{
    if (run_has_dataset(ri, "model/parameters") && !read_recorded(ri, out))
        return 0;
    int rc = count_model_size(&ri->cfg, mode_kinds, out, err, err_len);
    if (rc == -EINVAL) {
        char why[256];
        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, (size_t)err_len, "%s: its config does not describe a model: %s", ri->path,
                 why);
    }
    return rc;
}
