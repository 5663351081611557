/* Counterfactual routing (docs/instruments.md): at evaluation, a trained
 * model's routing decisions replaced by others at the same capacity, in
 * every routed layer or in chosen ones, to ask what the learned choices
 * contribute to the trained model without retraining it.
 *
 * A plan names the policy; each kind says which policies its decisions
 * take (kind_ops.routes) and applies them in its forward when
 * route_applies() says so.  The decisions a policy reads back (shuffle,
 * replay) are a book: per layer and per evaluation window, the arrays a
 * kind's record() writes ("selected", "causal", "experts"), kept as floats
 * (every decision is a small integer). */
#ifndef MODE_CORE_MODEL_ROUTE_H
#define MODE_CORE_MODEL_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum route_policy {
    ROUTE_LEARNED,   /* the decisions as trained */
    ROUTE_RANDOM,    /* as many tokens (choices) as the learned decisions take, drawn at
                      * random: keyed by the seed, layer and window */
    ROUTE_BOTTOM,    /* depth routing: as many tokens as learned, those of the lowest scores */
    ROUTE_SHUFFLE,   /* the learned decisions of another window (route_source) */
    ROUTE_REPLAY,    /* decisions read back from a book */
    ROUTE_NOOP_NONE, /* a no-op expert: never chosen (the best real column instead) */
    ROUTE_NOOP_ALL,  /* a no-op expert: every token's choice */
    ROUTE_COUNT
} route_policy;

extern const char *const route_policy_names[ROUTE_COUNT];
/* The policy called name ("random"), or -1. */
int route_policy_lookup(const char *name);

typedef struct route_book route_book;

/* What a plan's book lacked when a kind asked for it (route_source), or
 * (bad) the first value it held outside the kind's range [lo, hi]. */
typedef struct route_miss {
    bool any, bad;
    int layer;
    char name[32];
    long window, elems;
    double value;
    char expect[64]; /* what the value should have been */
} route_miss;

typedef struct route_plan {
    int policy;                  /* ROUTE_* */
    uint64_t seed;               /* ROUTE_RANDOM's draws */
    const unsigned char *layers; /* [n_layers] 1 where the policy applies; NULL: every layer
                                  * whose kind takes it */
    const route_book *book;      /* ROUTE_SHUFFLE (the learned decisions) and ROUTE_REPLAY */
    route_miss *miss;            /* not NULL: route_source notes there what it lacked */
} route_plan;

/* Whether plan replaces the decisions of layer l (plan NULL: never). */
static inline bool route_applies(const route_plan *p, int layer)
{
    return p && p->policy != ROUTE_LEARNED && (!p->layers || p->layers[layer]);
}

/* The decisions plan reads for window (the book's row of that window, or
 * under ROUTE_SHUFFLE the row of its partner, route_partner), elems values,
 * each an integer in [lo, hi] (a 0/1 pick); NULL when the book has no such
 * array or window, or (miss->bad) a value of the row is outside the range:
 * a record read from a file is checked where its range is known, never
 * taken as a drop or a pick.  lo > hi: no check here, the caller checks
 * each value it reads (route_note_bad). */
const float *route_source(const route_plan *p, int layer, const char *name, long window,
                          long elems, int lo, int hi);
/* Note in p->miss (the first only) that value, read from name of layer for
 * window, is not an integer in [lo, hi] (expect NULL), or not what expect
 * says. */
void route_note_bad(const route_plan *p, int layer, const char *name, long window, long elems,
                    double value, int lo, int hi, const char *expect);

/* ---- the book ------------------------------------------------------------- */

/* An empty book for the windows win[0..n) (global evaluation window
 * indices, as eval_window_index gives them; strictly increasing). */
int build_route_book(route_book **out, const long *win, long n);
void free_route_book(route_book **b);
long route_book_windows(const route_book *b, const long **win);
/* The array name of layer with elems values a window, of record type type
 * (RECORD_*, what it is written back as); created (zeros) on first use.
 * Returns its base ([n][elems]) or NULL (out of memory, or the same name
 * with another size). */
float *route_book_array(route_book *b, int layer, const char *name, long elems, int type);
/* The k-th array: its layer, name, elems, type; false past the last. */
bool route_book_entry(const route_book *b, int k, int *layer, const char **name, long *elems,
                      int *type, float **data);
/* Where the book was read from ("FILE: routing/step_N"), for messages;
 * "" for one built in memory. */
void route_book_set_source(route_book *b, const char *source);
const char *route_book_source(const route_book *b);
/* The row of window (its index in the book), or -1. */
long route_book_row(const route_book *b, long window);
/* ROUTE_SHUFFLE's partner of row k among n: row (k + n/2) mod n, a window
 * half the list away (another window whenever n >= 2). */
long route_partner(long k, long n);

/* Seeds of the counterfactual draws: pcg32_keyed(seed, PCG_KEY_COUNTERFACTUAL
 * + layer, window, 0), the same on any rank count. */

#endif
