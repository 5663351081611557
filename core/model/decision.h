/* A routing decision as data: what every row of a batch got from a routed
 * layer, the one thing a kind's record() writes into the run file's
 * routing records (route_decision_record) and the one thing the analysis
 * reads back (analysis/runinfo.h, read_layer_record).
 *
 * Each kind declares in its row (layer_kind.decides) which decisions it
 * makes, so that the programs ask the declaration what a layer does, never
 * a kind's name or keys: take/skip (MoD, arXiv:2404.02258 section 3.3),
 * expert slots (MoE: dropped, no-op), depth (recursions), exit. */
#ifndef MODE_CORE_MODEL_DECISION_H
#define MODE_CORE_MODEL_DECISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The element types of records (same values as RUN_BLOB_*). */
enum { RECORD_FLOAT, RECORD_INT32, RECORD_UINT8 };

/* What a kind decides per row; the bits of decision_decl.decides. */
enum {
    DECIDES_TAKE = 1u << 0,    /* took the block or skipped it: selected, causal, scores */
    DECIDES_EXPERTS = 1u << 1, /* n_slots expert slots and their gates: experts, weights */
    DECIDES_DEPTH = 1u << 2,   /* how many times it ran the block: depth */
    DECIDES_EXIT = 1u << 3,    /* whether it left the stack here: exited, confidence */
    DECIDES_DRAW = 1u << 4,    /* skips the block by a random draw that is not recorded */
};
/* The decisions a forward records (route_decision_record). */
#define DECIDES_RECORDED (DECIDES_TAKE | DECIDES_EXPERTS | DECIDES_DEPTH | DECIDES_EXIT)

/* A kind's declaration: its decisions, and which of its keys bound them
 * (NULL where it has none), so that a figure reads a layer's capacity or
 * most recursions without knowing the kind. */
typedef struct decision_decl {
    unsigned decides;        /* DECIDES_* bits; 0: every row takes the block once */
    const char *share_key;   /* DECIDES_TAKE: the share of rows that take the block (NULL: it
                              * follows from the layer's depth, as skipdecode's) */
    const char *most_key;    /* DECIDES_DEPTH: the most times a row runs the block */
    const char *experts_key; /* DECIDES_EXPERTS: the experts a row chooses among */
    const char *split_key;   /* the parts each expert is split in (granularity), or NULL */
} decision_decl;

/* The parts of a decision, as the routing records name them (docs/hdf5.md
 * "routing"): X(name, element type, RECORD_*, per slot, the DECIDES_* bit
 * it belongs to).  Every part is
 * [nseq][S], or [nseq][S][n_slots] per slot. */
#define ROUTE_DECISION_PARTS(X)                                                                    \
    X(selected, uint8_t, RECORD_UINT8, false, DECIDES_TAKE) /* took the block (top-k) */        \
    X(scores, float, RECORD_FLOAT, false, DECIDES_TAKE)     /* router logits */                  \
    X(causal, uint8_t, RECORD_UINT8, false, DECIDES_TAKE)   /* the causal rule's decision */     \
    X(pred_prob, float, RECORD_FLOAT, false, DECIDES_TAKE)  /* the causal predictor's p */       \
    X(experts, int32_t, RECORD_INT32, true, DECIDES_EXPERTS) /* -1 dropped, -2 skipped, E no-op */\
    X(weights, float, RECORD_FLOAT, true, DECIDES_EXPERTS)  /* the slots' gate values */         \
    X(depth, int32_t, RECORD_INT32, false, DECIDES_DEPTH)   /* blocks a recursion ran */         \
    X(exited, uint8_t, RECORD_UINT8, false, DECIDES_EXIT)   /* left the stack at this exit */    \
    X(confidence, float, RECORD_FLOAT, false, DECIDES_EXIT) /* the exit head's confidence */

typedef enum decision_part_id {
#define DECISION_PART_ID(name, type, code, slots, bit) DECISION_PART_##name,
    ROUTE_DECISION_PARTS(DECISION_PART_ID)
#undef DECISION_PART_ID
    DECISION_PART_COUNT
} decision_part_id;

/* One batch's decisions, viewing the kind's arrays; a NULL part is one the
 * kind does not make. */
typedef struct route_decision {
    int nseq, seq_len; /* rows: nseq x seq_len */
    int n_slots;       /* slots per row of the per-slot parts */
#define DECISION_PART_FIELD(name, type, code, slots, bit) const type *name;
    ROUTE_DECISION_PARTS(DECISION_PART_FIELD)
#undef DECISION_PART_FIELD
} route_decision;

typedef struct decision_part {
    const char *name; /* the dataset's name in a layer's routing record */
    int type;         /* RECORD_* */
    bool slots;       /* [nseq][S][n_slots] rather than [nseq][S] */
    unsigned decides; /* the decision it records (DECIDES_*) */
    size_t offset;    /* of its pointer in route_decision */
} decision_part;
extern const decision_part decision_parts[DECISION_PART_COUNT];

/* The part id's array of d (NULL when d does not make it). */
const void *route_decision_get(const route_decision *d, decision_part_id id);

struct record_sink;
/* The one writer of routing records: every part d holds, under its name,
 * through the sink (kind.h), in the order of ROUTE_DECISION_PARTS. */
int route_decision_record(const route_decision *d, struct record_sink *sink);

#endif
