/* Token data (MODEL.md "Data"): text files as bytes (V = 256), .bin files as
 * little-endian uint16 tokens, and two built-in sources, `brown` (fetched by
 * scripts/fetch-brown.sh into the data folder) and `synthetic` (generated in
 * memory, needs nothing).  The last val_fraction of the tokens is held out. */
#ifndef MODE_CORE_DATA_DATA_H
#define MODE_CORE_DATA_DATA_H

#include "core/data/token.h"

#include <stdint.h>

/* Per-token label classes.  Brown: the POS class of the word a byte belongs
 * to.  Synthetic: the difficulty of predicting that token. */
enum { LABEL_CLASSES_MAX = 16 };

/* Brown classes: the byte values of brown.pos, written by
 * experiments/brown-convert.c (which says how POS tags map to them). */
enum brown_class {
    BROWN_SPACE, BROWN_PUNCT, BROWN_FUNCTION, BROWN_NOUN, BROWN_VERB,
    BROWN_ADJ, BROWN_ADV, BROWN_NUMBER, BROWN_OTHER, BROWN_CLASSES
};
extern const char *const brown_label_names[BROWN_CLASSES];

/* Synthetic classes (core/data/synthetic.c describes the corpus). */
enum synthetic_class { SYNTH_EASY, SYNTH_MEDIUM, SYNTH_HARD, SYNTH_FILLER, SYNTH_CLASSES };
extern const char *const synthetic_label_names[SYNTH_CLASSES];

typedef struct dataset {
    char source[512];
    uint16_t *tokens;   /* [n_tokens] */
    long n_tokens;
    int vocab;
    long train_end;     /* tokens [0, train_end) train, [train_end, n_tokens) held out */
    uint8_t *labels;    /* [n_tokens] label class per token, or NULL */
    int n_label_classes;
    const char *const *label_names; /* [n_label_classes] */
} dataset;

/* source: "brown", "synthetic", or a path ending in .txt or .bin.  vocab is
 * used for .bin (every token must be below it); text sources have V = 256.
 * data_dir holds brown.txt and brown.pos (NULL: $MODE_DATA, else "data").
 * seq_len: the split must hold at least one sample (S+1 tokens) on each side.
 * On failure returns non-zero with err naming the file and what is wrong. */
int load_dataset(dataset **out, const char *source, int vocab, double val_fraction, int seq_len,
                 const char *data_dir, char *err, int err_len);
void free_dataset(dataset **d);
/* A .txt or .bin file that is all evaluation data (train_end = 0): its
 * windows start at its first token. */
int load_eval_file(dataset **out, const char *path, int vocab, int seq_len, char *err,
                   int err_len);

/* Training sample: S+1 tokens from a uniformly random offset of the training
 * split, the offset drawn from pcg32_keyed(seed, DATA_KEY, step, global_seq). */
#define DATA_KEY 0x44415441u
void dataset_sample(const dataset *d, token_t *out, int seq_len, uint64_t seed, long step,
                    long global_seq);
/* Offset the sample above starts at (for recording which batch was used). */
long dataset_sample_offset(const dataset *d, int seq_len, uint64_t seed, long step,
                           long global_seq);

/* Evaluation windows of the held-out split: window w is tokens
 * [w*S, w*S + S] of the split (neighbours share one boundary token). */
long dataset_eval_windows(const dataset *d, int seq_len);
void dataset_eval_window(const dataset *d, token_t *out, int seq_len, long w);
/* Labels of the same window (S+1 values), or NULL when the source has none. */
const uint8_t *dataset_eval_labels(const dataset *d, int seq_len, long w);

/* The synthetic corpus: n tokens and their difficulty labels from a fixed
 * generator (same output on every machine). */
int synthetic_generate(uint16_t *tokens, uint8_t *labels, long n, uint64_t gen_seed);

#endif
