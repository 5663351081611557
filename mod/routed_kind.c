/* What the routed block is, apart from what it computes (routed.c): the
 * layouts and bytes of its buffers and of its backward work space.  The
 * kinds' descriptions link this file alone. */
#include "mod/routed.h"

void routed_set_layout(buf_plan *p, routed_set *s, int max_seq, int S)
{
    size_t rows = (size_t)max_seq * S;
    s->sel = BUF_INTS(p, rows);
    s->seq_start = BUF_INTS(p, max_seq + 1);
    s->pos = BUF_I32(p, rows);
    s->gate = BUF_FLOATS(p, rows);
}

void routed_rows_layout(buf_plan *p, routed_rows *r, const model_dims *dims, int f, int rows)
{
    size_t rd = (size_t)rows * dims->d_model;
    r->cap_rows = rows;
    r->xs = BUF_FLOATS(p, rd);
    r->h = BUF_FLOATS(p, rd);
    r->ys = BUF_FLOATS(p, rd);
    attn_cache_layout(p, &r->attn, dims, rows);
    mlp_cache_layout(p, &r->mlp, dims, rows, f);
}

double routed_block_bytes(const model_dims *dims, int f, int max_seq, int seq_rows)
{
    routed_set s;
    routed_rows r;
    buf_plan p = buf_counting(BUF_ALIGN), q = buf_counting(BUF_ALIGN);
    routed_set_layout(&p, &s, max_seq, dims->seq_len);
    routed_rows_layout(&q, &r, dims, f, max_seq * seq_rows);
    return (double)p.used + (double)q.used;
}

void routed_ws_layout(buf_plan *p, routed_ws *w, const model_dims *dims, int f, long sel, int k)
{
    size_t nd = (size_t)sel * dims->d_model;
    long a = attn_ws_floats(dims, (int)sel, k);
    w->dys = BUF_FLOATS(p, nd);
    if (f > 0) { /* the block's own MLP */
        long m = mlp_ws_floats(dims, (int)sel, f);
        w->dxs = BUF_FLOATS(p, nd);
        w->dh = BUF_FLOATS(p, nd);
        w->dmm = NULL;
        w->dgate = BUF_FLOATS(p, sel);
        w->sub = BUF_FLOATS(p, a > m ? a : m);
    } else { /* staged: the experts, with their own work space */
        w->dh = BUF_FLOATS(p, nd);
        w->dmm = BUF_FLOATS(p, nd);
        w->dxs = BUF_FLOATS(p, nd);
        w->dgate = BUF_FLOATS(p, sel);
        w->sub = BUF_FLOATS(p, a);
    }
}

long routed_ws_floats(const model_dims *dims, int f, long sel, int k)
{
    routed_ws w;
    buf_plan p = buf_counting(sizeof(float));
    routed_ws_layout(&p, &w, dims, f, sel, k);
    return (long)(p.used / sizeof(float));
}

