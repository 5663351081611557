/* What a checkpoint says about itself beside its tensors, in either format
 * (checkpoint.h's HDF5, checkpoint_st.h's safetensors): kept apart from
 * both so that neither reaches the other for it. */
#ifndef MODE_CORE_IO_CKPT_META_H
#define MODE_CORE_IO_CKPT_META_H

#include <stdint.h>

typedef struct ckpt_meta {
    long step;      /* optimizer updates done */
    uint64_t seed;
    char *config;   /* malloc'd resolved INI text */
    char *data;     /* malloc'd fingerprint of the data the run read, or NULL
                       (files written before it was kept) */
    double train_flops_executed; /* spent by the step (0 in files written before) */
} ckpt_meta;

/* What a checkpoint says about itself beside the tensors. */
typedef struct ckpt_header {
    const char *config; /* the resolved INI text */
    long step;
    uint64_t seed;
    const char *data;   /* dataset_fingerprint of what the run reads, or NULL */
    double train_flops_executed; /* the executed training FLOPs spent so far (every rank's) */
} ckpt_header;

/* Free meta's strings and zero it. */
void ckpt_meta_clear(ckpt_meta *meta);

#endif
