#include "core/io/checkpoint.h"

#include "core/io/h5util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_tensors(hid_t f, const model *m, const char *prefix, const float *buf)
{
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        hsize_t dims[3];
        for (int i = 0; i < mt->desc.ndim; i++)
            dims[i] = (hsize_t)mt->desc.shape[i];
        char name[MODE_TENSOR_PATH + 16];
        snprintf(name, sizeof(name), "%s%s", prefix, mt->path);
        if (h5_write_floats(f, name, buf + mt->offset, mt->desc.ndim, dims))
            return -EIO;
    }
    return 0;
}

static int write_layer_attrs(hid_t f, const model *m)
{
    for (int l = 0; l < m->dims.n_layers; l++) {
        const layer *ly = &m->layers[l];
        char name[32];
        snprintf(name, sizeof(name), "layers/%d", l);
        hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
        if (g < 0)
            return -EIO;
        int rc = h5_attr_string(g, "kind", ly->kind->name);
        for (int k = 0; !rc && ly->kind->keys[k]; k++) {
            double num;
            const char *str;
            if (layer_spec_get(&ly->spec, ly->kind->keys[k], &num, &str))
                continue;
            rc = str ? h5_attr_string(g, ly->kind->keys[k], str)
                     : h5_attr_double(g, ly->kind->keys[k], num);
        }
        H5Gclose(g);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct ckpt_write {
    const model *m;
    const char *config_text;
    long step;
    uint64_t seed;
} ckpt_write;

static int write_checkpoint(hid_t f, const void *ctx)
{
    const ckpt_write *w = ctx;
    const model_dims *d = &w->m->dims;
    int rc = 0;
    rc |= h5_attr_string(f, "config", w->config_text);
    rc |= h5_attr_long(f, "d_model", d->d_model);
    rc |= h5_attr_long(f, "n_heads", d->n_heads);
    rc |= h5_attr_long(f, "d_ff", d->d_ff);
    rc |= h5_attr_long(f, "vocab", d->vocab);
    rc |= h5_attr_long(f, "seq_len", d->seq_len);
    rc |= h5_attr_long(f, "n_layers", d->n_layers);
    rc |= h5_attr_long(f, "step", w->step);
    rc |= h5_attr_string(f, "rng", "pcg32 keyed by (seed, step, ...): seed and step are the state");
    char seed_s[32];
    snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)w->seed);
    rc |= h5_attr_string(f, "seed", seed_s);
    if (!rc)
        rc = write_tensors(f, w->m, "", w->m->params);
    if (!rc)
        rc = write_layer_attrs(f, w->m);
    if (!rc)
        rc = write_tensors(f, w->m, "optim/m/", w->m->adam_m);
    if (!rc)
        rc = write_tensors(f, w->m, "optim/v/", w->m->adam_v);
    return rc;
}

int checkpoint_save(const char *path, const model *m, const char *config_text, long step,
                    uint64_t seed, char *err, int err_len)
{
    ckpt_write w = { .m = m, .config_text = config_text, .step = step, .seed = seed };
    return h5_save_atomic(path, write_checkpoint, &w, "checkpoint", err, err_len);
}

static hid_t open_h5(const char *path, char *err, int err_len)
{
    return h5_open_checked(path, err, err_len);
}

void ckpt_meta_clear(ckpt_meta *meta)
{
    free(meta->config);
    memset(meta, 0, sizeof(*meta));
}

int checkpoint_read_meta(const char *path, ckpt_meta *meta, char *err, int err_len)
{
    memset(meta, 0, sizeof(*meta));
    hid_t f = open_h5(path, err, err_len);
    if (f < 0)
        return -EIO;
    int rc = 0;
    char *seed = h5_attr_read_string(f, "seed");
    meta->config = h5_attr_read_string(f, "config");
    if (!meta->config || !seed || h5_attr_read_long(f, "step", &meta->step)) {
        snprintf(err, (size_t)err_len,
                 "%s: not a mode checkpoint (missing attribute config, seed or step)", path);
        rc = -EINVAL;
        ckpt_meta_clear(meta);
    } else
        meta->seed = strtoull(seed, NULL, 10);
    free(seed);
    H5Fclose(f);
    return rc;
}

static int read_tensors(hid_t f, const char *path, model *m, const char *prefix, float *buf,
                        char *err, int err_len)
{
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        hsize_t dims[3];
        for (int i = 0; i < mt->desc.ndim; i++)
            dims[i] = (hsize_t)mt->desc.shape[i];
        char name[MODE_TENSOR_PATH + 16], why[256];
        snprintf(name, sizeof(name), "%s%s", prefix, mt->path);
        int rc = h5_read_floats(f, name, buf + mt->offset, mt->desc.ndim, dims, why, sizeof(why));
        if (rc) {
            snprintf(err, (size_t)err_len, "%s: %s", path, why);
            return rc;
        }
    }
    return 0;
}

int checkpoint_load(const char *path, model *m, bool with_optim, char *err, int err_len)
{
    hid_t f = open_h5(path, err, err_len);
    if (f < 0)
        return -EIO;
    int rc = read_tensors(f, path, m, "", m->params, err, err_len);
    if (!rc && with_optim)
        rc = read_tensors(f, path, m, "optim/m/", m->adam_m, err, err_len);
    if (!rc && with_optim)
        rc = read_tensors(f, path, m, "optim/v/", m->adam_v, err, err_len);
    H5Fclose(f);
    return rc;
}
