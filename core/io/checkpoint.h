/* Checkpoints (HDF5): MODEL.md's tensor names at the root and under
 * layers/l/, each layer group with its `kind` and hyper-parameters as
 * attributes; the root with the resolved config and the model sizes; the
 * Adam moments under optim/m/ and optim/v/ with the same paths; the step.
 * Every random draw is keyed by (seed, step, ...), so seed and step are the
 * whole RNG state.  Written atomically: a crash leaves the previous file;
 * the CRC-32 of the whole file is combined from every writer's pieces
 * (docs/hdf5.md). */
#ifndef MODE_CORE_IO_CHECKPOINT_H
#define MODE_CORE_IO_CHECKPOINT_H

#include "core/io/ckpt_meta.h"
#include "core/model/model.h"

#include <stdbool.h>

struct comm;


/* Write the checkpoint, collectively over cm (NULL: one process): one file,
 * MODEL.md's names and whole shapes (experts_w1 is [E][d][f] whatever the
 * rank count).  Rank 0 lays the file out (h5util.h, h5_out); every rank
 * writes its share: its own experts' slices, and the shared tensors spread
 * over the ranks (tensor t by rank t mod P); rank 0 gathers the pieces'
 * CRCs and seals the file.  No rank ever holds another's experts.  Every
 * rank returns the same code; err holds the failing rank's message. */
int checkpoint_save(const char *path, const model *m, const ckpt_header *h, struct comm *cm,
                    char *err, int err_len);
/* Reading a checkpoint that a live run may be replacing (by rename): each
 * rank opens it ONCE, and the seal check, the metadata and every tensor are
 * read through that open, so all of it is one version (h5util.h, h5_in);
 * the ranks compare the seals they opened and open again when a rename came
 * between their opens (ranks that read different files are refused naming
 * the rank and both seals). */
typedef struct ckpt_file ckpt_file;
/* Open path on every rank, check its seal (every rank CRCs a 1/P slice of
 * it, rank 0 combines the CRCs), and read the metadata (config text, step,
 * seed, the data's fingerprint) into meta.  Collective over cm. */
int checkpoint_open(ckpt_file **f, const char *path, ckpt_meta *meta, struct comm *cm,
                    char *err, int err_len);
void checkpoint_close(ckpt_file **f);
/* Fill m's parameters (and the Adam moments when with_optim) from f: the
 * shared tensors whole, and only the experts m holds (m->dims ranks and
 * rank), whatever rank count wrote the file: resharding is reading other
 * rows.  Every tensor must exist with the model's whole shape.  Collective
 * over cm. */
int checkpoint_read(ckpt_file *f, model *m, bool with_optim, struct comm *cm, char *err,
                    int err_len);
/* Whether f holds the Adam moments (an HDF5 checkpoint always; a
 * safetensors one when exported --with-optim). */
bool checkpoint_has_moments(const ckpt_file *f);
/* Each hyper-parameter of layer ly as a checkpoint names it (MODEL.md: like
 * the config key): fn gets the name and, for a choice or a boolean, its
 * text (is_text), else its number; its first non-zero return stops the
 * walk and is returned. */
typedef int (*ckpt_attr_fn)(void *user, const char *name, const char *text, double number,
                            bool is_text);
int checkpoint_layer_attrs(const layer *ly, ckpt_attr_fn fn, void *user);
/* Each through one checkpoint_open: the metadata alone, the tensors alone
 * (the seal checked too). */
int checkpoint_read_meta(const char *path, ckpt_meta *meta, struct comm *cm, char *err,
                         int err_len);
int checkpoint_load(const char *path, model *m, bool with_optim, struct comm *cm, char *err,
                    int err_len);

/* A new run's parameters from another model's checkpoint (--init-from),
 * which may lack some of m's tensors (docs/upcycling.md):
 *   - a tensor the file has is read as checkpoint_load reads it (its shape
 *     must be the model's);
 *   - one it lacks whose description names an upcycle_from tensor the file
 *     has in the same layer (experts_w1 from the dense MLP's w1) starts as
 *     that tensor: every expert e a copy, cut to the expert's hidden width h
 *     as slice (e mod (f0 / h)) of the source's f0 hidden units; then a
 *     share `reinit` of each expert's hidden units (the same in its three
 *     tensors, drawn by seed, layer and expert) drawn afresh from the
 *     tensor's initialisation (Drop-Upcycling), and noise of standard
 *     deviation `noise` times the initialisation's added to every weight;
 *   - any other keeps m's fresh initialisation (a gate, a router).
 * Draws are keyed by the expert's global index: the same model at any
 * rank count.  summary (may be NULL) lists what was upcycled and what
 * started fresh.  Collective over cm. */
typedef struct ckpt_upcycle {
    double noise, reinit;
    uint64_t seed;
} ckpt_upcycle;
int checkpoint_upcycle(ckpt_file *f, model *m, const ckpt_upcycle *u, struct comm *cm,
                       char *summary, int summary_len, char *err, int err_len);
/* The same through its own checkpoint_open of path. */
int checkpoint_init_from(const char *path, model *m, const ckpt_upcycle *u, struct comm *cm,
                         char *summary, int summary_len, char *err, int err_len);

#endif
