/* Counterfactual evaluation (docs/instruments.md): a trained model over the
 * evaluation windows with its learned routing decisions and with others in
 * their place (core/model/route.h), each policy's loss with its standard
 * error, and its paired difference to the learned decisions over the same
 * windows (the windows' differences spread far less than retrained runs
 * do), overall and per token class, with a paired t-test.
 *
 * Window k of the n evaluated is eval_window_index(k, n, avail), taken by
 * rank k mod P as in evaluate(); every policy runs on the same windows and
 * every random draw is keyed by the window, so the numbers do not depend
 * on the rank count beyond float rounding. */
#ifndef MODE_CORE_TRAIN_COUNTERFACTUAL_H
#define MODE_CORE_TRAIN_COUNTERFACTUAL_H

#include "core/data/data.h"
#include "core/model/model.h"
#include "core/util/ctx.h"

#include <stdbool.h>

/* One token class (of the predicted token), over the windows. */
typedef struct cf_class {
    double tokens;              /* its targets over the windows */
    double loss;                /* their mean next-token loss */
    double diff, diff_se, p;    /* paired with learned: the mean difference over its
                                 * tokens, its standard error over windows (a ratio
                                 * estimator's), the two-sided t-test's p */
} cf_class;

/* One policy. */
typedef struct cf_arm {
    int policy;                 /* ROUTE_* */
    double loss, se;            /* the mean over windows of each window's mean loss, and
                                 * its standard error over windows */
    double diff, diff_se, p;    /* paired with learned: the mean over windows of the
                                 * difference (this - learned), its standard error, the
                                 * paired t-test's two-sided p (n - 1 degrees of freedom);
                                 * 0, 0, 1 for learned itself */
    double identical;           /* windows whose mean loss equals learned's bit for bit */
    double flops_per_token;     /* executed forward FLOPs per position */
    cf_class cls[LABEL_CLASSES_MAX];
} cf_arm;

typedef struct cf_opts {
    fwd_mode mode;              /* FWD_EVAL_TOPK or FWD_EVAL_CAUSAL */
    long windows;               /* <= 0: every window */
    const int *policies;        /* the policies besides learned (learned is arm 0) */
    int n_policies;
    uint64_t seed;              /* ROUTE_RANDOM's draws */
    const unsigned char *layers; /* [n_layers]: where the policies apply; NULL: every layer
                                  * whose kind takes them */
    const route_book *replay;   /* ROUTE_REPLAY's decisions */
    bool keep_book;             /* return the learned decisions (eval --record) */
} cf_opts;

typedef struct cf_result {
    long windows;
    int n_classes;
    const char *const *class_names;
    int n_arms;
    cf_arm arms[ROUTE_COUNT + 1];
    route_book *book;           /* keep_book: the learned decisions, tokens and labels of
                                 * every window on every rank (free_route_book) */
    bool local_failure;         /* as eval_result's */
} cf_result;

/* Which policies the model's layers take: a layer l where layers[l] (or
 * every layer when layers is NULL) whose kind does not take policy is
 * refused when layers names it, skipped otherwise; no layer at all that
 * takes it is refused too.  decoding: the kinds' decode_routes. */
int route_check(const model *m, int policy, const unsigned char *layers, bool decoding,
                char *err, int err_len);

/* Collective.  Errors as evaluate()'s. */
int evaluate_counterfactual(model *m, mode_ctx *ctx, const dataset *d, const cf_opts *o,
                            cf_result *out, char *err, int err_len);

/* A book as a run file would hold it: config_text, routing/windows,
 * routing/tokens, routing/labels, routing/loss (each position's next-token
 * loss, [n][S]) and routing/step_<step>/layer_<l>/<name> (what record()
 * writes), written to path (rank 0).  Its layer -1 holds the tokens,
 * labels and losses. */
int route_book_save(const route_book *b, const char *path, const char *config_text, long step,
                    int seq_len, char *err, int err_len);
/* The decisions of a run file's routing records (its last recorded step,
 * or step when >= 0), or of a file route_book_save wrote: every array
 * below routing/step_N/layer_<l>/ for the windows routing/windows names. */
int route_book_load(route_book **out, const char *path, long step, int seq_len, char *err,
                    int err_len);

#endif
