/* What the recursion steps' selector is, apart from what it computes
 * (select_steps.c): its buffers' layout and bytes.  mor's description
 * links this file alone. */
#include "mod/select_steps.h"

void select_steps_layout(buf_plan *p, select_steps *st, int max_seq, int S)
{
    size_t rows = (size_t)max_seq * S;
    st->s = BUF_FLOATS(p, rows);
    st->ds = BUF_FLOATS(p, rows);
    st->elig = BUF_BYTES(p, rows);
    st->take = BUF_BYTES(p, rows);
    st->tmp = BUF_FLOATS(p, S);
    st->heap = BUF_INTS(p, S);
}

double select_steps_bytes(int max_seq, int S)
{
    select_steps st;
    buf_plan p = buf_counting(BUF_ALIGN);
    select_steps_layout(&p, &st, max_seq, S);
    return (double)p.used;
}
