/* The training driver: data-parallel steps over the ranks, evaluation,
 * checkpoints and the run file.  It never prints: progress goes to the
 * caller's log callback (rank 0 only), errors come back as a code and one
 * line in err. */
#ifndef MODE_CORE_TRAIN_TRAINER_H
#define MODE_CORE_TRAIN_TRAINER_H

#include "core/config/config.h"
#include "core/data/data.h"
#include "core/model/model.h"
#include "core/util/ctx.h"

#include <stdbool.h>

typedef struct train_log {
    long step, total;       /* step is 1-based here: updates done */
    double loss, ce, aux, side, lr, grad_norm;
    double tokens_per_s, gflops, eta_s, wall_s;
    bool has_eval;          /* an evaluation ran at this step */
    bool eval_late;         /* only the evaluation: a resume made the one a signal cut short,
                               whose step's line the stopped run printed */
    double eval_topk, eval_causal;
    double eval_se;         /* the standard error of eval_topk over its windows */
    double eval_bpb;        /* eval_topk's bits per byte (NaN: unknown) */
    long eval_windows;
} train_log;

typedef void (*train_log_fn)(const train_log *l, void *user);

typedef struct trainer_opts {
    bool resume;          /* continue the run in the folder from its checkpoint */
    bool overwrite;       /* a new run in a folder that holds one (else refused) */
    bool no_tensorboard;  /* no TensorBoard event file beside run.h5 (core/io/tfevents.h) */
    const char *init_from; /* a new run's parameters from this checkpoint, or NULL */
    /* upcycling from it (checkpoint_init_from): noise on the copied
     * experts, the share of their hidden units drawn afresh */
    double upcycle_noise, upcycle_reinit;
    /* told (rank 0) what --init-from read, upcycled and left fresh */
    void (*init_note)(const char *summary, void *user);
    train_log_fn log;   /* called on rank 0 every log_every steps and at evaluations */
    void *log_user;
    int argc;
    char **argv;
    int blas_threads;
    const char *data_dir; /* NULL: $MODE_DATA or ./data */
    long max_steps;       /* > 0: stop (with a checkpoint) after this many steps of this
                             invocation, as a time-sliced job would; --resume goes on */
    /* A failure inside a step, where other ranks may wait in a collective
     * this rank will not reach (docs/robustness.md): prints msg and ends
     * every rank; not called with one rank, where the error comes back. */
    void (*fatal)(mode_ctx *ctx, const char *msg);
    /* Called on rank 0 after each checkpoint, with its wall time (the run
     * file's piece, the sharded checkpoint, and at the end the gathering). */
    void (*checkpoint)(long step, double seconds, void *user);
} trainer_opts;


/* A held-out evaluation: the mean over windows of each window's mean
 * next-token loss (every window has S positions), the standard error of
 * that mean over windows (sd / sqrt(n), windows taken as independent), and
 * the windows used. */
typedef struct eval_result {
    double loss, se;
    long windows;
    double flops_per_token; /* executed forward FLOPs per position, as routed */
    /* bits per byte: the nats of every predicted token over the bytes of
     * text they stand for (dataset.token_bytes), / ln 2; NaN when unknown */
    double bpb;
    /* on failure: true when it was this rank's alone, inside a forward
     * whose collectives the other ranks may be waiting in (the caller must
     * end the job: docs/robustness.md); false when every rank agreed on it */
    bool local_failure;
} eval_result;

/* Evaluation over n_windows windows spread evenly over the held-out split
 * (window eval_window_index(i, n, avail) for i < n; all of them when
 * n_windows <= 0 or more than there are), spread over the ranks.
 * Collective.  On failure (a token >= V in a window) every rank returns
 * non-zero with the message of the lowest failing rank in err. */
int evaluate(model *m, mode_ctx *ctx, const dataset *d, long n_windows, fwd_mode mode,
             eval_result *out, char *err, int err_len);
/* The i-th of n windows spread evenly over avail: floor(i avail / n). */
long eval_window_index(long i, long n, long avail);
/* The windows an evaluation takes (*avail of d's held-out split, *n of
 * them as evaluate() chooses for n_windows), the same on every rank: every
 * loop and collective of an evaluation counts them, so ranks whose held-out
 * data differ would enter different collectives and hang.  -EINVAL on
 * every rank when they differ, err naming the rank and both counts.
 * Collective. */
int eval_windows_agreed(mode_ctx *ctx, const dataset *d, int seq_len, long n_windows,
                        long *avail, long *n, char *err, int err_len);

/* Output paths of a run: <out>/<name>/run.h5 and ckpt.h5. */
void run_paths(const run_config *c, char *dir, char *run_h5, char *ckpt_h5, size_t len);

/* The signal (SIGINT, SIGTERM) that stopped the last train() with -EINTR. */
int train_stop_signal(void);

int train(const run_config *cfg, const kind_ops *const *kinds, mode_ctx *ctx,
          const trainer_opts *o, char *err, int err_len);

#endif
