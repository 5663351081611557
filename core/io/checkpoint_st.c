#include "core/io/checkpoint_st.h"

#include "core/comm/comm.h"
#include "core/config/config.h"
#include "core/util/file.h"
#include "core/util/num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The metadata an HDF5 checkpoint keeps as root attributes, from
 * __metadata__ (all strings there), checked as read_meta checks them. */
static int read_meta(const st_file *f, ckpt_meta *meta, char *err, int err_len)
{
    const char *config = st_meta(f, "config"), *seed = st_meta(f, "seed");
    const char *step = st_meta(f, "step"), *data = st_meta(f, "data");
    const char *flops = st_meta(f, "train_flops_executed");
    if (!config || !seed || !step) {
        snprintf(err, (size_t)err_len, "%s: not a mode checkpoint (its __metadata__ lacks "
                 "config, seed or step; docs/export.md)", f->path);
        return -EINVAL;
    }
    if (!num_parse_long(step, 0, MODE_MAX_STEPS, &meta->step)) {
        snprintf(err, (size_t)err_len, "%s: __metadata__ step = %.40s: expected a step in [0, "
                 "10^12]", f->path, step);
        return -EINVAL;
    }
    if (!num_parse_u64(seed, &meta->seed)) {
        snprintf(err, (size_t)err_len, "%s: __metadata__ seed = %.40s: expected an integer in "
                 "[0, 2^64 - 1]", f->path, seed);
        return -EINVAL;
    }
    if (flops && !num_parse_double(flops, 0.0, HUGE_VAL, &meta->train_flops_executed)) {
        snprintf(err, (size_t)err_len, "%s: __metadata__ train_flops_executed = %.40s: expected "
                 "a finite count >= 0", f->path, flops);
        return -EINVAL;
    }
    meta->config = strdup(config);
    meta->data = data ? strdup(data) : NULL;
    if (!meta->config || (data && !meta->data)) {
        snprintf(err, (size_t)err_len, "%s: out of memory", f->path);
        return -ENOMEM;
    }
    return 0;
}

int ckpt_st_open(st_file **f, const char *path, ckpt_meta *meta, comm *cm, char *err,
                 int err_len)
{
    memset(meta, 0, sizeof(*meta));
    int rc = comm_agree(cm, st_open(f, path, err, err_len), err, err_len);
    if (!rc) {
        /* one file on every rank: a checkpoint of another run under the same
         * path on another node would evaluate other parameters */
        char text[MODE_PATH_MAX + 96];
        snprintf(text, sizeof(text), "checkpoint=%s: bytes %llu fnv1a64 %016llx\n", path,
                 (unsigned long long)(*f)->size, (unsigned long long)(*f)->digest);
        rc = comm_agree_text(cm, text, err, err_len);
    }
    if (!rc)
        rc = comm_agree(cm, read_meta(*f, meta, err, err_len), err, err_len);
    if (rc) {
        ckpt_meta_clear(meta);
        st_close(f);
    }
    return rc;
}

int ckpt_st_shape(const st_file *f, const char *name, int *nd, long dims[3])
{
    const st_tensor *t = st_find(f, name);
    if (!t)
        return -ENOENT;
    if (t->ndim < 1 || t->ndim > 3)
        return -EINVAL;
    *nd = t->ndim;
    for (int i = 0; i < t->ndim; i++)
        dims[i] = (long)t->shape[i];
    return 0;
}

bool ckpt_st_has_optim(const st_file *f)
{
    for (int i = 0; i < f->n; i++)
        if (!strncmp(f->t[i].name, "optim/", 6))
            return true;
    return false;
}

/* The parameters, then the moments: MODEL.md's paths, optim/m/ and optim/v/
 * before them as in the HDF5 file. */
static const char *const st_prefix[3] = { "", "optim/m/", "optim/v/" };

int ckpt_st_write(FILE *o, const char *path, const model *m, const ckpt_header *h,
                  bool with_optim, char *err, int err_len)
{
    int nb = with_optim ? 3 : 1, n = m->n_tensors, rc = 0;
    const float *bufs[3] = { m->params, m->adam_m, m->adam_v };
    st_out *t = calloc((size_t)(nb * n + 1), sizeof(st_out));
    char (*names)[MODE_TENSOR_PATH + 16] = calloc((size_t)(nb * n + 1), sizeof(*names));
    enum { N_FIXED = 12 }; /* format, config, step, seed, flops, 6 sizes, data */
    const char *key[N_FIXED + MODE_MAX_LAYERS], *val[N_FIXED + MODE_MAX_LAYERS];
    char (*lk)[32] = calloc(MODE_MAX_LAYERS, 32);
    char num[9][32];
    if (!t || !names || !lk) {
        snprintf(err, (size_t)err_len, "%s: out of memory", path);
        rc = -ENOMEM;
        goto done;
    }
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < n; i++) {
            const model_tensor *mt = &m->tensors[i];
            if (mt->desc.expert_dim && mt->experts != mt->desc.shape[0]) {
                snprintf(err, (size_t)err_len, "%s: the model holds experts [%d, %d) of %d of "
                         "%s: export writes them whole", path, mt->expert0,
                         mt->expert0 + mt->experts, mt->desc.shape[0], mt->path);
                rc = -EINVAL;
                goto done;
            }
            st_out *so = &t[b * n + i];
            snprintf(names[b * n + i], sizeof(names[0]), "%s%s", st_prefix[b], mt->path);
            so->name = names[b * n + i];
            so->ndim = mt->desc.ndim;
            for (int k = 0; k < so->ndim; k++)
                so->shape[k] = mt->desc.shape[k];
            so->data = bufs[b] + (b ? mt->moff : mt->offset);
        }
    const model_dims *d = &m->dims;
    int nm = 0;
    key[nm] = "format", val[nm++] = "mode";
    key[nm] = "config", val[nm++] = h->config;
    snprintf(num[0], 32, "%ld", h->step);
    key[nm] = "step", val[nm++] = num[0];
    snprintf(num[1], 32, "%llu", (unsigned long long)h->seed);
    key[nm] = "seed", val[nm++] = num[1];
    /* %.17g: the double's bits come back through strtod */
    snprintf(num[2], 32, "%.17g", h->train_flops_executed);
    key[nm] = "train_flops_executed", val[nm++] = num[2];
    const long sizes[6] = { d->d_model, d->n_heads, d->d_ff, d->vocab, d->seq_len, d->n_layers };
    static const char *const size_names[6] = { "d_model", "n_heads", "d_ff", "vocab", "seq_len",
                                               "n_layers" };
    for (int i = 0; i < 6; i++) {
        snprintf(num[3 + i], 32, "%ld", sizes[i]);
        key[nm] = size_names[i], val[nm++] = num[3 + i];
    }
    for (int l = 0; l < d->n_layers && l < MODE_MAX_LAYERS; l++) {
        snprintf(lk[l], 32, "layers/%d/kind", l);
        key[nm] = lk[l], val[nm++] = m->layers[l].kind->name;
    }
    if (h->data)
        key[nm] = "data", val[nm++] = h->data;
    if ((rc = st_write(o, t, nb * n, key, val, nm)))
        snprintf(err, (size_t)err_len, "%s: cannot be written: %s", path, strerror(-rc));
done:
    free(t);
    free(names);
    free(lk);
    return rc;
}
