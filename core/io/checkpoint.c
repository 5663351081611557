#include "core/io/checkpoint.h"

#include "core/io/h5util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int write_root_attrs(hid_t f, const model *m, const char *config_text, long step,
                            uint64_t seed)
{
    const model_dims *d = &m->dims;
    int rc = 0;
    rc |= h5_attr_string(f, "config", config_text);
    rc |= h5_attr_long(f, "d_model", d->d_model);
    rc |= h5_attr_long(f, "n_heads", d->n_heads);
    rc |= h5_attr_long(f, "d_ff", d->d_ff);
    rc |= h5_attr_long(f, "vocab", d->vocab);
    rc |= h5_attr_long(f, "seq_len", d->seq_len);
    rc |= h5_attr_long(f, "n_layers", d->n_layers);
    rc |= h5_attr_long(f, "step", step);
    rc |= h5_attr_string(f, "rng", "pcg32 keyed by (seed, step, ...): seed and step are the state");
    char seed_s[32];
    snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)seed);
    rc |= h5_attr_string(f, "seed", seed_s);
    return rc ? -EIO : 0;
}

/* The parameters, then the Adam moments under optim/m/ and optim/v/, each
 * tensor under its MODEL.md path. */
static const char *const ckpt_prefix[3] = { "", "optim/m/", "optim/v/" };

int checkpoint_save(const char *path, const model *m, const char *config_text, long step,
                    uint64_t seed, char *err, int err_len)
{
    h5_out *o = NULL;
    const float *bufs[3] = { m->params, m->adam_m, m->adam_v };
    long *ds = malloc((size_t)(3 * m->n_tensors + 1) * sizeof(long));
    if (!ds)
        return -ENOMEM;
    int rc = h5_out_create(&o, path, 3 * (uint64_t)m->n_params * sizeof(float), err, err_len);
    if (rc)
        goto out;
    rc = write_root_attrs(h5_out_file(o), m, config_text, step, seed);
    for (int b = 0; !rc && b < 3; b++) {
        for (int t = 0; !rc && t < m->n_tensors; t++) {
            const model_tensor *mt = &m->tensors[t];
            hsize_t dims[3];
            for (int i = 0; i < mt->desc.ndim; i++)
                dims[i] = (hsize_t)mt->desc.shape[i];
            char name[MODE_TENSOR_PATH + 16];
            snprintf(name, sizeof(name), "%s%s", ckpt_prefix[b], mt->path);
            ds[b * m->n_tensors + t] = h5_out_dataset(o, name, H5T_IEEE_F32LE, mt->desc.ndim,
                                                      dims);
            if (ds[b * m->n_tensors + t] < 0)
                rc = -EIO;
        }
        if (!rc && b == 0)
            rc = write_layer_attrs(h5_out_file(o), m);
    }
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: writing the checkpoint failed", path);
        goto out;
    }
    if ((rc = h5_out_layout(o, err, err_len)))
        goto out;
    for (int b = 0; !rc && b < 3; b++)
        for (int t = 0; !rc && t < m->n_tensors; t++)
            rc = h5_out_write(o, ds[b * m->n_tensors + t], 0, bufs[b] + m->tensors[t].offset,
                              (uint64_t)m->tensors[t].numel * sizeof(float));
    if (rc) {
        snprintf(err, (size_t)err_len, "%s: writing the checkpoint failed: %s", path,
                 strerror(-rc));
        goto out;
    }
    rc = h5_out_finish(&o, NULL, 0, err, err_len);
out:
    h5_out_abandon(&o);
    free(ds);
    return rc;
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
