#ifndef MODE_TRAIN_TRAINER_IMPL_H
#define MODE_TRAIN_TRAINER_IMPL_H

/* The trainer's state and the pieces of train() kept in files of their own
 * (core/train/): records.c writes what a run records (layer statistics,
 * routing decisions, the model's counts, a bad step's batch), folder.c
 * checks and clears run folders, evaluate.c runs held-out evaluations.
 * Private to core/train. */

#include "core/util/file.h"
#include "core/io/runfile.h"
#include "core/io/tfevents.h"
#include "core/train/shard.h"
#include "core/train/trainer.h"
#include "core/util/lock.h"

#include <stdbool.h>
#include <stddef.h>

/* Per-step statistics of the layers whose kind has them: one table each. */
typedef struct layer_stats {
    int n_sums;       /* raw sums of all layers, concatenated */
    int *sums;        /* [n_layers] the raw sums of each layer */
    int *cols;        /* [n_layers] its columns (0: no statistics) */
    int *table;       /* [n_layers] its table in rec->extra (rank 0), -1 without */
    int max_cols;
} layer_stats;

/* The held-out windows whose routing decisions are recorded. */
typedef struct routing_windows {
    int n;            /* windows (0: no routing records) */
    long *index;      /* [n] their indices in the held-out split */
    token_t *tokens;  /* [n][S+1] */
} routing_windows;

typedef struct trainer {
    const run_config *cfg;
    mode_ctx *ctx;
    model *m;
    shard_plan *shard; /* which gradients are summed and updated where */
    dataset *d;
    run_record *rec;   /* rank 0: the rows and records not yet written */
    tfevents *tb;      /* rank 0: the TensorBoard event file, or NULL (--no-tensorboard) */
    char *ini;
    char dir[MODE_PATH_MAX], run_h5[MODE_PATH_MAX], ckpt_h5[MODE_PATH_MAX];
    long total, start;
    double flops_per_seq;
    double flops_spent;    /* executed training FLOPs so far, every rank's (MODE_TRAIN_FLOPS_PER_FORWARD
                            * x the forwards' executed count) */
    layer_stats st;
    routing_windows rw;
    double wall0, skipped; /* the run's clock (continued over resumes) and skipped steps */
    folder_lock lock;      /* rank 0: the run folder is this run's */
    char data[2048];       /* dataset_fingerprint of what the run reads (every rank's, agreed) */
    int eval_pending;      /* resumed at a step whose evaluation a signal cut short */
    double last_eval;      /* the held-out loss (top-k) of the last evaluation, NaN before */
    long reached;          /* the last step done by this invocation (or resumed at) */
    long ckpt_step;        /* the step of the checkpoint this run wrote last or resumed
                            * from; 0: none yet */
} trainer;

/* folder.c: the run folder */
/* Creates dir (and its parents) and writes a probe file into it. */
int check_writable(const char *dir, char *err, int err_len);
/* Whether the folder may take this run (--resume, --overwrite). */
int check_folder(const trainer *t, const trainer_opts *o, char *err, int err_len);
/* Removes an earlier run's files (--overwrite). */
int clear_folder(const trainer *t);
/* "section.key (a -> b)" for every key whose value differs in two configs. */
void config_differences(const char *a, const char *b, char *buf, size_t len);

/* records.c: what the run file records.  record_stats and record_routing
 * are collective; the others touch t->rec (rank 0) only. */
int setup_stat_tables(trainer *t);
void free_layer_stats(layer_stats *st);
int record_stats(trainer *t, long done);
/* One row of a table of the run record (rank 0), and its values (but the
 * step) as scalars of the step's TensorBoard event, tagged as the run
 * file's datasets ("metrics/loss", "layer_stats/2/maxvio"). */
int record_row(trainer *t, run_table *tab, const double *row);
int setup_routing_windows(trainer *t, char *err, int err_len);
void free_routing_windows(routing_windows *rw);
int record_routing(trainer *t, long done);
int record_model(trainer *t);
int record_batch(trainer *t, long done, const char *group);

#endif
