/* The one reader of MODE_FAULT, the tests' fault injection
 * (docs/robustness.md):
 *   SITE@RANK:STEP  comm_fault(SITE) fails once on that world rank, at
 *                   that step (SITE@RANK: the first time it is reached);
 *   error@RANK:STEP that rank fails at the step's agreement point;
 *   nan@STEP        a NaN in a gradient at that step (every rank). */
#ifndef MODE_CORE_UTIL_FAULT_H
#define MODE_CORE_UTIL_FAULT_H

#include <stdbool.h>

typedef struct fault_spec {
    bool set;
    char site[32]; /* "nan", "error", or a collective's site */
    int rank;      /* -1 for nan */
    long step;     /* -1: the first time (SITE@RANK) */
} fault_spec;

/* MODE_FAULT as set now (set false when absent or malformed). */
fault_spec fault_from_env(void);

#endif
