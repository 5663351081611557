/* The drawing half of difficulty-mixed batches (mix.h): the two halves'
 * windows and the offset of one, which the sampler (data.c) reads; mix.c
 * fills them from the score file.  Apart from both so that the sampler does
 * not reach the scoring, nor the scoring the sampler. */
#ifndef MODE_CORE_DATA_MIX_DRAW_H
#define MODE_CORE_DATA_MIX_DRAW_H

/* The two halves of a mix: 0 below the median, 1 at or above it. */
enum { MIX_EASY, MIX_HARD, MIX_HALVES };

typedef struct data_mix {
    char path[512];             /* the score file */
    char fingerprint[96];       /* of the score file itself (DATA_FINGERPRINT_LEN: mix.c) */
    long n_docs[MIX_HALVES];    /* documents that hold a window, per half */
    long *first[MIX_HALVES];    /* [n_docs]: each one's first window, in the training split */
    long *cum[MIX_HALVES];      /* [n_docs]: windows of documents 0..i together */
} data_mix;

void free_data_mix(data_mix **m);

/* Windows (offsets in the training split) of one half, and the offset of
 * its window r (0 <= r < mix_windows). */
long mix_windows(const data_mix *m, int half);
long mix_window_offset(const data_mix *m, int half, long r);

#endif
