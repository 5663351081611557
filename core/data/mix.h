/* Difficulty-mixed batches (docs/data-mix.md; issue 45, item 4): every
 * training batch draws half its sequences from documents below the median
 * of a per-document difficulty score and half from those above, so the
 * router never sees a batch of only easy or only hard text.
 *
 * Documents.  A byte corpus (brown, a .txt) is a run of documents separated
 * by a blank line ("\n\n"): brown-convert writes one between Brown's files
 * and none inside one, so Brown's documents are its 500 files.  Token files
 * (.bin, .u32) keep no boundaries and are refused.
 *
 * The score file (SOURCE.difficulty beside the corpus, written once by
 * `mode-exp score SOURCE`): text, a header naming the corpus's fingerprint
 * (data.h, corpus_fingerprint) and the scorer, then one line a document:
 * its first token, its length, its score.  A file of another corpus or
 * scorer is stale and refused. */
#ifndef MODE_CORE_DATA_MIX_H
#define MODE_CORE_DATA_MIX_H

#include "core/data/data.h"
#include "core/data/mix_draw.h"

#include <stdint.h>

/* The one scorer: the document's mean bigram cross-entropy in bits per
 * token under the corpus's own add-one smoothed byte-bigram counts. */
#define MIX_SCORER "bigram-laplace-bits-v1"
#define MIX_FORMAT "mode-difficulty 1"



/* "SOURCE_PATH.difficulty": where the score file of corpus c lies. */
void mix_default_path(const corpus *c, char *out, int out_len);

/* Score every document of d's source (the whole file, both splits) and
 * write the score file to path.  err names the file and what is wrong (a
 * token file, a write that failed). */
int mix_score_write(const dataset *d, const char *path, long *n_docs, char *err, int err_len);

/* Read path's scores for d's source and split its training documents at
 * the median (each clipped to the training split; those with fewer than
 * seq_len + 1 tokens there hold no window and are left out; sorted by
 * score then by position, the first floor(n / 2) are below).  Refused with
 * err naming the file: missing, not a score file, stale (another corpus's
 * fingerprint or another scorer), documents that do not tile the corpus,
 * a half without a window.  Sets d->mix. */
int dataset_use_mix(dataset *d, const char *path, int seq_len, char *err, int err_len);


#endif
