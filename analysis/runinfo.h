/* Reading a run file (docs/hdf5.md) for the analysis: its config (parsed
 * with the programs' kinds table), the kind of every layer, the recorded
 * routing steps and windows, and the routing datasets of one layer at one
 * step.  Every function returns 0 or a negative code and writes one line
 * naming the file and what is wrong into err; none prints. */
#ifndef MODE_ANALYSIS_RUNINFO_H
#define MODE_ANALYSIS_RUNINFO_H

#include "core/util/file.h"
#include "core/config/config.h"
#include "core/io/runfile.h"
#include "core/model/decision.h"
#include "core/model/kind.h"

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>

#define RUN_PATH_LEN MODE_PATH_MAX

typedef struct run_info {
    char path[RUN_PATH_LEN];
    char dir[RUN_PATH_LEN];      /* the folder holding the file */
    char name[128];              /* [run] name, else the folder's name */
    run_config cfg;
    run_reader *rd;              /* run.h5 and its pieces (a run in progress) */
    int n_steps;
    long *steps;                 /* [n_steps] recorded routing steps, ascending */
    int R, S;                    /* recorded windows, positions (0, 0 without) */
    int32_t *tokens;             /* [R][S+1] the windows' tokens, or NULL */
    uint8_t *labels;             /* [R][S+1] their label classes, or NULL */
    int n_classes;               /* label classes the [data] source defines */
    const char *const *class_names;
    char *data;                  /* provenance/data: the fingerprint of the data the run
                                    read (dataset_fingerprint), malloc'd; NULL without */
} run_info;

/* Open path as a run file: missing, not HDF5 and foreign files (no config
 * attribute) are told apart in err. */
int build_run_info(run_info **out, const char *path, char *err, int err_len);
void free_run_info(run_info **ri);

/* The kind row of layer l (NULL for an unknown kind). */
const layer_kind *run_layer_kind(const run_info *ri, int l);
/* What layer l decides per row: its kind's declaration (DECIDES_* bits,
 * core/model/decision.h); 0 for an unknown kind. */
unsigned run_layer_decides(const run_info *ri, int l);
/* Layer l's value of key as a number (a choice's index), NaN when its kind
 * has no such key (or key is NULL). */
double run_layer_value(const run_info *ri, int l, const char *key);
/* The share of rows layer l sends through its block (DECIDES_TAKE: its
 * declared share_key, the capacity); NaN for the others. */
double run_layer_capacity(const run_info *ri, int l);
/* How many times layer l may apply its block (DECIDES_DEPTH); NaN for the
 * others. */
double run_layer_recursions(const run_info *ri, int l);
/* The experts layer l's tensors hold: experts x granularity (each expert
 * split in granularity, docs/kinds/moe-routing.md); NaN without experts. */
double run_layer_experts(const run_info *ri, int l);

/* Whether runs of configs a and b, with the fingerprints of their data
 * fa and fb (run_info.data, NULL when a file has none), were trained and
 * evaluated on other data, so that their losses (nats per token) are not
 * comparable: another data.vocab; with both fingerprints, other bytes of
 * the corpus, held-out file or tokenizer (the files' paths aside); without,
 * another data.source, data.val_source or data.tokenizer (compared by
 * their last component, so a path spelt relative or absolute is the same);
 * another data.val_fraction where it splits the corpus.  When they
 * differ, what holds the first difference ("data.vocab is 512 against
 * 256"). */
bool run_data_differs(const run_config *a, const char *fa, const run_config *b, const char *fb,
                      char *what, int len);

/* Why the file holds no routing record, for a message: "the model has no
 * routed layer (layers = dense x 4)" or "run.routing_every = 0". */
void run_no_routing_reason(const run_info *ri, char *buf, int len);

/* Index of step among the recorded steps, or -1.  run_steps_list() writes
 * them as "12, 24, 36" (shortened in the middle when long). */
int run_step_index(const run_info *ri, long step);
void run_steps_list(const run_info *ri, char *buf, int len);

/* A 1-D column such as "metrics/wall_s" or "layer_stats/3/recall" as
 * doubles (malloc'd into *out).  -ENOENT when absent. */
int run_read_column(const run_info *ri, const char *name, double **out, long *n);
/* The last value of such a column (NaN when it is absent or empty); count,
 * when not NULL, receives its length. */
double run_last_value(const run_info *ri, const char *name, long *count);
/* provenance/ranks: the MPI ranks the run trained on, or -1 when the file
 * does not say. */
long run_ranks(const run_info *ri);
/* Whether the file holds a dataset at name. */
bool run_has_dataset(const run_info *ri, const char *name);

/* The routing record of one layer at one step: any of the arrays may be
 * NULL (the layer's kind did not write it). */
typedef struct layer_record {
    int layer;
    long step;
    /* the parts of a routing decision (decision.h, route_decision), owned:
     * selected, scores, causal, pred_prob [R][S]; experts, weights
     * [R][S][top_k]; depth, exited, confidence [R][S] */
#define LAYER_RECORD_PART(name, type, code, slots, bit) type *name;
    ROUTE_DECISION_PARTS(LAYER_RECORD_PART)
#undef LAYER_RECORD_PART
    int top_k;
    int n_experts;      /* E (0 for a layer without experts) */
} layer_record;

/* Read what exists of layer l's record at step (one of ri->steps); a layer
 * without any record gives an all-NULL record and returns 0. */
int read_layer_record(const run_info *ri, long step, int l, layer_record *rec, char *err,
                      int err_len);
void free_layer_record(layer_record *rec);
/* The record has anything to draw. */
bool layer_record_any(const layer_record *rec);
/* Whether token (r, i) took the block: top-k membership where recorded,
 * else a real expert took it (layer_record_expert). */
bool layer_record_taken(const layer_record *rec, int S, int r, int i);
/* The first real expert among token (r, i)'s slots (not dropped, skipped
 * or no-op): its first choice for the token-choice kinds, the lowest
 * expert that picked it for expert-choice (`ec`, slot e = e or -1); -1 for
 * none. */
int layer_record_expert(const layer_record *rec, int S, int r, int i);

#endif
