/* Checkpoints as safetensors (docs/export.md): the tensors under MODEL.md's
 * checkpoint names (the Adam moments, when kept, under optim/m/ and
 * optim/v/), float32 little-endian, experts whole; __metadata__ holds what
 * an HDF5 checkpoint's root attributes hold (format, config, step, seed,
 * data, train_flops_executed, the model sizes, each layer's kind).
 * checkpoint.c reads a file through these when st_is_safetensors says so:
 * --init-from, eval and sample take either format. */
#ifndef MODE_CORE_IO_CHECKPOINT_ST_H
#define MODE_CORE_IO_CHECKPOINT_ST_H

#include "core/io/ckpt_meta.h"
#include "core/model/model.h"
#include "core/io/safetensors.h"

#include <stdbool.h>
#include <stdio.h>

struct comm;

/* Every rank opens path once and checks it (safetensors.h); the ranks
 * agree that they read one file (its size and digest, comm_agree_text),
 * then the metadata into meta.  Collective over cm; st_close *f in any
 * case. */
int ckpt_st_open(st_file **f, const char *path, ckpt_meta *meta, struct comm *cm, char *err,
                 int err_len);
/* The shape of tensor name (at most 3 dims), or -ENOENT. */
int ckpt_st_shape(const st_file *f, const char *name, int *nd, long dims[3]);
/* Whether the file holds the Adam moments (optim/m/ and optim/v/). */
bool ckpt_st_has_optim(const st_file *f);
/* m's tensors (a model holding every expert: one rank's build) and, with
 * with_optim, its Adam moments, with h's metadata, onto o (an out_file's
 * stream; path names it in err).  One process. */
int ckpt_st_write(FILE *o, const char *path, const model *m, const ckpt_header *h,
                  bool with_optim, char *err, int err_len);

#endif
