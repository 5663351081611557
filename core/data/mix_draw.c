#include "core/data/mix_draw.h"

#include <stdlib.h>

void free_data_mix(data_mix **m)
{
    if (!*m)
        return;
    for (int h = 0; h < MIX_HALVES; h++) {
        free((*m)->first[h]);
        free((*m)->cum[h]);
    }
    free(*m);
    *m = NULL;
}

long mix_windows(const data_mix *m, int half)
{
    return m->cum[half][m->n_docs[half] - 1];
}

long mix_window_offset(const data_mix *m, int half, long r)
{
    /* the first document whose cumulative count passes r */
    const long *cum = m->cum[half];
    long lo = 0, hi = m->n_docs[half] - 1;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (cum[mid] > r)
            hi = mid;
        else
            lo = mid + 1;
    }
    long before = lo ? cum[lo - 1] : 0;
    return m->first[half][lo] + (r - before);
}
