/* The order of the kind tables' rows (kinds.c, kind_ops.c): adding a kind
 * is one name here and one row in each. */
#ifndef MODE_MOE_KIND_ORDER_H
#define MODE_MOE_KIND_ORDER_H

enum { KIND_DENSE, KIND_MOD, KIND_MOE, KIND_INTEGRATED, KIND_STAGED, KIND_TCMOD, KIND_DROP, KIND_EC, KIND_MOR, KIND_EXIT, KIND_COUNT };

#endif
