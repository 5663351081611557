/* libFuzzer targets for the HDF5 loaders: the input is written to a file and
 * read as a checkpoint (FUZZ_CHECKPOINT) or as a run file (FUZZ_RUNFILE).
 * Whatever the bytes, the loaders must return an error or a result, never
 * crash or leak. */
#include "core/config/config.h"
#include "core/io/checkpoint.h"
#include "core/io/runfile.h"
#include "moe/registry.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int load(const char *path)
{
    char err[512];
#ifdef FUZZ_CHECKPOINT
    ckpt_meta meta;
    if (checkpoint_read_meta(path, &meta, NULL, err, sizeof(err)))
        return 0;
    run_config c;
    model *m = NULL;
    if (config_load_string(&c, meta.config, path, 0, NULL, &mode_schema, 0, err, sizeof(err)) == 0 &&
        c.d_model * (long)c.d_ff * c.n_layers < (1L << 22) && c.seq_len <= 1024) {
        model_dims dims = config_dims(&c);
        if (build_model(&m, &dims, c.layers, mode_kind_ops, 1, err, sizeof(err)) == 0)
            checkpoint_load(path, m, true, NULL, err, sizeof(err));
        free_model(&m);
    }
    ckpt_meta_clear(&meta);
#else
    run_record *r = NULL;
    if (run_record_read(&r, path, true, err, sizeof(err)) == 0)
        free_run_record(&r);
#endif
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/mode-fuzz-%d.h5", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    load(path);
    unlink(path);
    return 0;
}
