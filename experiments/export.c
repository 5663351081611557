/* mode-exp export: a checkpoint into the field's format and back
 * (docs/export.md).
 *   mode-exp export CKPT.h5 OUT [--with-optim]  OUT.safetensors + OUT.json
 *   mode-exp export X.safetensors OUT.h5        an HDF5 checkpoint again
 * Rank 0 does the work on a model holding every expert (a checkpoint holds
 * them whole whatever rank count wrote it); the other ranks wait for its
 * outcome. */
#include "experiments/cli.h"

#include "core/comm/comm.h"
#include "core/io/checkpoint_st.h"
#include "core/io/safetensors.h"
#include "core/util/file.h"
#include "core/util/outfile.h"
#include "moe/registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_export[] =
    "usage: mode-exp export CKPT OUT [--with-optim]\n"
    "  CKPT an HDF5 checkpoint: writes OUT.safetensors (every tensor under MODEL.md's\n"
    "  checkpoint names, float32, experts whole) and OUT.json (the config, the model's\n"
    "  sizes, each layer's kind and keys, the tensors, the tokenizer when there is one,\n"
    "  copied to OUT.tokenizer.model); --with-optim adds the Adam moments (optim/m/,\n"
    "  optim/v/).\n"
    "  CKPT a .safetensors checkpoint: writes the HDF5 checkpoint OUT (the moments\n"
    "  when the file has them, else zeros; --with-optim requires them).\n"
    "  docs/export.md describes the files.\n";

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

typedef struct attr_json {
    FILE *o;
    int n;
} attr_json;

static int json_attr(void *user, const char *name, const char *text, double number,
                     bool is_text)
{
    attr_json *a = user;
    fprintf(a->o, ", ");
    st_json_string(a->o, name);
    fprintf(a->o, ": ");
    if (is_text && (!strcmp(text, "true") || !strcmp(text, "false")))
        fputs(text, a->o);
    else if (is_text)
        st_json_string(a->o, text);
    else
        fprintf(a->o, "%.17g", number);
    return 0;
}

/* OUT.json: what a reader outside this program needs beside the tensors. */
static void write_json(FILE *o, const char *st_name, const model *m, const ckpt_header *h,
                       const char *tokenizer, bool with_optim)
{
    const model_dims *d = &m->dims;
    fprintf(o, "{\n  \"format\": \"mode\",\n  \"safetensors\": ");
    st_json_string(o, st_name);
    fprintf(o, ",\n  \"step\": %ld,\n  \"seed\": \"%llu\",\n  \"train_flops_executed\": %.17g,\n",
            h->step, (unsigned long long)h->seed, h->train_flops_executed);
    fprintf(o, "  \"model\": {\"d_model\": %d, \"n_heads\": %d, \"d_ff\": %d, \"vocab\": %d, "
            "\"seq_len\": %d, \"n_layers\": %d},\n", d->d_model, d->n_heads, d->d_ff, d->vocab,
            d->seq_len, d->n_layers);
    fprintf(o, "  \"layers\": [\n");
    for (int l = 0; l < d->n_layers; l++) {
        attr_json a = { o, 0 };
        fprintf(o, "    {\"kind\": ");
        st_json_string(o, m->layers[l].kind->name);
        checkpoint_layer_attrs(&m->layers[l], json_attr, &a);
        fprintf(o, "}%s\n", l + 1 < d->n_layers ? "," : "");
    }
    fprintf(o, "  ],\n  \"tensors\": [\n");
    for (int t = 0; t < m->n_tensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        fprintf(o, "    {\"name\": ");
        st_json_string(o, mt->path);
        fprintf(o, ", \"dtype\": \"F32\", \"shape\": [");
        for (int i = 0; i < mt->desc.ndim; i++)
            fprintf(o, "%s%d", i ? ", " : "", mt->desc.shape[i]);
        fprintf(o, "]}%s\n", t + 1 < m->n_tensors ? "," : "");
    }
    fprintf(o, "  ],\n  \"adam_moments\": %s,\n  \"tokenizer\": ", with_optim ? "true" : "false");
    if (tokenizer) {
        fprintf(o, "{\"type\": \"sentencepiece\", \"file\": ");
        st_json_string(o, tokenizer);
        fprintf(o, "}");
    } else {
        fprintf(o, "null");
    }
    fprintf(o, ",\n  \"data\": ");
    if (h->data)
        st_json_string(o, h->data);
    else
        fprintf(o, "null");
    fprintf(o, ",\n  \"config\": ");
    st_json_string(o, h->config);
    fprintf(o, "\n}\n");
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* OUT.safetensors, OUT.json and, when the run has a tokenizer (found and
 * checked by checkpoint_tokenizer), its copy OUT.tokenizer.model, where
 * eval and sample of OUT.safetensors look: committed as one set. */
static int write_export(const char *in, const char *stem, const model *m, const ckpt_header *h,
                        const run_config *cfg, bool moments, char *err, int err_len)
{
    char path[3][MODE_PATH_MAX], tok[MODE_PATH_MAX];
    static const char *const suffix[3] = { ".safetensors", ".json", ".tokenizer.model" };
    for (int i = 0; i < 3; i++)
        snprintf(path[i], sizeof(path[i]), "%.*s%s", MODE_PATH_MAX - 20, stem, suffix[i]);
    int rc = checkpoint_tokenizer(in, cfg, h->data, tok, sizeof(tok), err, err_len);
    int n = tok[0] ? 3 : 2;
    out_file set[3] = { 0 };
    for (int i = 0; !rc && i < n; i++) {
        const char *inputs[2] = { in, tok[0] ? tok : NULL };
        rc = out_check(path[i], inputs, 2, err, err_len);
        if (!rc)
            rc = out_open(&set[i], path[i], err, err_len);
    }
    if (!rc)
        rc = ckpt_st_write(set[0].f, path[0], m, h, moments, err, err_len);
    if (!rc)
        write_json(set[1].f, base_name(path[0]), m, h, n == 3 ? base_name(path[2]) : NULL,
                   moments);
    if (!rc && n == 3) {
        char *bytes = NULL;
        size_t len = 0;
        rc = file_read_all(tok, &bytes, &len, err, err_len);
        if (!rc && fwrite(bytes, 1, len, set[2].f) != len) {
            snprintf(err, (size_t)err_len, "%.900s: cannot be written", path[2]);
            rc = -EIO;
        }
        free(bytes);
    }
    if (!rc)
        return out_commit_set(set, n, err, err_len);
    for (int i = 0; i < n; i++)
        out_abort(&set[i]);
    return rc;
}

/* Rank 0's work: one process, no collective. */
static int export_one(const cli *c, char *err, int err_len)
{
    const char *in = c->config, *out = c->over[0];
    bool to_st = !st_is_safetensors(in);
    ckpt_meta meta;
    ckpt_file *f = NULL;
    model *m = NULL;
    run_config *cfg = malloc(sizeof(*cfg));
    if (!cfg)
        return -ENOMEM;
    int rc = checkpoint_open(&f, in, &meta, NULL, err, err_len);
    char label[MODE_PATH_MAX + 64];
    snprintf(label, sizeof(label), "%s (config)", in);
    if (!rc)
        rc = config_load_string(cfg, meta.config, label, 0, NULL, &mode_schema, 0, err, err_len);
    if (!rc) {
        model_dims dims = config_dims(cfg); /* one rank: every expert */
        rc = build_model(&m, &dims, cfg->layers, mode_kind_ops, 1, err, err_len);
    }
    bool moments = to_st ? c->with_optim : !rc && checkpoint_has_moments(f);
    if (!rc && !to_st && c->with_optim && !moments) {
        snprintf(err, (size_t)err_len, "%s: --with-optim: the file has no Adam moments "
                 "(optim/m/...): it was exported without --with-optim", in);
        rc = -EINVAL;
    }
    if (!rc)
        rc = checkpoint_read(f, m, moments, NULL, err, err_len);
    checkpoint_close(&f);
    ckpt_header h = { .config = meta.config, .step = meta.step, .seed = meta.seed,
                      .data = meta.data, .train_flops_executed = meta.train_flops_executed };
    char stem[MODE_PATH_MAX];
    snprintf(stem, sizeof(stem), "%.*s", (int)strlen(out) - (has_suffix(out, ".safetensors") ? 12 : 0),
             out);
    const char *inputs[1] = { in };
    if (!rc && to_st)
        rc = write_export(in, stem, m, &h, cfg, moments, err, err_len);
    else if (!rc && !(rc = out_check(out, inputs, 1, err, err_len)))
        rc = checkpoint_save(out, m, &h, NULL, err, err_len);
    free_model(&m);
    ckpt_meta_clear(&meta);
    free(cfg);
    return rc;
}

int cmd_export(mode_ctx *ctx, int argc, char **argv)
{
    cli c;
    static const cli_opts opts = { "export", CLI_WITH_OPTIM };
    if (parse_cli(&c, argc - 2, argv + 2, usage_export, &opts, ctx->rank))
        return 2;
    if (c.n_over != 1) {
        if (ctx->rank == 0)
            fprintf(stderr, "mode-exp export: expected CKPT and OUT, got %d argument%s after "
                    "CKPT\n%s", c.n_over, c.n_over == 1 ? "" : "s", usage_export);
        free(c.over);
        return 2;
    }
    char err[1024] = "";
    int rc = ctx->rank == 0 ? export_one(&c, err, sizeof(err)) : 0;
    rc = comm_agree(ctx->comm, rc, err, sizeof(err));
    if (rc && ctx->rank == 0)
        fprintf(stderr, "mode-exp export: %s\n", err);
    free(c.over);
    return rc ? 1 : 0;
}
