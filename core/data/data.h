/* Token data (MODEL.md "Data"): the corpora, the train / held-out split,
 * training samples and evaluation windows.
 *
 * Sources.
 *   .txt       bytes, one token each (V = 256).
 *   .bin       little-endian uint16 tokens, no header (MODEL.md; nanoGPT's
 *              train.bin and val.bin, mode-exp tokenize's); V is data.vocab,
 *              at most 65536.  A FILE.pos beside FILE.bin (or .u32) holds
 *              one Brown class per token (mode-exp tokenize --labels): the
 *              tokens' label classes.
 *   .bin       llm.c's token files, told from the above by their first int32:
 *              a header of 256 little-endian int32 (LLMC_HEADER_BYTES), [0]
 *              the magic, [1] the version, [2] the token count, then the
 *              tokens: magic 20240520 version 1, uint16 tokens (GPT-2's, V at
 *              most 65536); 20240801 version 7, uint32 tokens (Llama 3's, any
 *              V).  Refused at load: a version that is not its magic's, a
 *              size other than 1024 + count x width (truncated), and a header
 *              right in all but the magic (version 1 or 7 and a count that
 *              fills the file exactly).  A headerless file whose first two
 *              tokens read as a magic (55432, 308 or 55713, 308) cannot be
 *              told from llm.c's: neither is a GPT-2 token (V 50257).
 *   .u32       little-endian uint32 tokens, no header, for V > 65536 (any V
 *              up to 2^31 - 1).  The extension is the only declaration of the
 *              width: a .bin is never read as 32 bits nor a .u32 as 16.
 *   brown      brown.txt (bytes) and brown.pos (one POS class per byte) in the
 *              data folder, written by scripts/fetch-brown.sh.
 *   synthetic  1M byte tokens with difficulty labels, generated in memory
 *              (synthetic.c; small, so it is the one corpus held in a buffer).
 *
 * Memory.  Files are read in place, never copied whole: each sample and
 * window is read with pread() from the open file, so a rank's memory does
 * not grow with the file and the page cache holds one copy per node,
 * shared by its ranks.  The training region is advised random (no
 * read-ahead).  Samples and windows are widened to token_t as they are
 * read.  (Files used to be memory-mapped; a file truncated under a run then
 * killed it with SIGBUS on the next read of a vanished page.  A read now
 * meets the file's new end and fails with a message naming the file.)
 * Brown's labels (6 MB) are read whole at load.
 *
 * The held-out split.  Without val_source: the last floor(n * val_fraction)
 * tokens of the source, training samples from the rest.  With val_source (a
 * .txt, .bin, .u32 or brown, of the same kind as the source: text with text,
 * token files with token files): the held-out windows are the whole of that
 * file and training samples from the whole source; val_fraction does not
 * apply.
 *
 * Checks.  At load, what the file size tells: the file exists, is a regular
 * file (opened without blocking, so a FIFO is refused, never waited on), is
 * not empty, holds a whole number of tokens, and each split holds at
 * least one sample (S+1 tokens); Brown's labels are checked then too (6 MB).
 * Token values are checked against V as they are read (dataset_sample,
 * dataset_eval_window): scanning a 10 GB file at start would cost every rank
 * its time and its pages, so a token >= V fails the read that meets it with
 * the file, the token's index and byte offset; a token no sample reads is
 * never looked at (and never reaches the model). */
#ifndef MODE_CORE_DATA_DATA_H
#define MODE_CORE_DATA_DATA_H

#include "core/data/token.h"
#include "core/rng/streams.h"

#include <stdbool.h>
#include <stddef.h>
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

/* One corpus as stored, read in place: an open file, or (synthetic) a
 * buffer in memory. */
typedef struct corpus {
    char path[512];         /* the file messages name ("synthetic" for that one) */
    int fd;                 /* the file read with pread(), or -1 */
    uint8_t *bytes;         /* in memory: [n_tokens * width] little-endian tokens, or NULL */
    long n_tokens;
    int width;              /* bytes per token: 1 text, 2 .bin, 4 .u32 or llm.c version 7 */
    long header;            /* bytes before the first token: LLMC_HEADER_BYTES or 0 */
    uint8_t *labels;        /* [n_tokens] label class per token, or NULL */
    int n_label_classes;
    const char *const *label_names; /* [n_label_classes] */
} corpus;

/* What identifies a corpus's content cheaply (a run records it and a resume
 * on other data is refused): its size and a 64-bit FNV-1a hash of the whole
 * file when it is at most DATA_FINGERPRINT_WHOLE bytes, else of
 * DATA_FINGERPRINT_BLOCKS blocks of 64 KiB spread evenly over it (the first
 * at the start, the last ending at its end), about 16 MiB read. */
#define DATA_FINGERPRINT_WHOLE (16L << 20)
#define DATA_FINGERPRINT_BLOCKS 256
#define DATA_FINGERPRINT_LEN 96
/* The tag of a mixed run's part of the fingerprint ("; difficulty PATH:
 * ..."): the scores choose training windows, not the data (analysis leaves
 * it out when it compares runs' data). */
#define DATA_FP_DIFFICULTY "difficulty "

/* llm.c's token files (above): the header's size and the magics. */
#define LLMC_HEADER_BYTES 1024
#define LLMC_MAGIC_U16 20240520
#define LLMC_MAGIC_U32 20240801


/* A split: tokens [first, first + n_tokens) of a corpus. */
typedef struct token_split {
    const corpus *c;
    long first, n_tokens;
} token_split;

typedef struct dataset {
    int vocab;          /* every token read is checked against it */
    corpus *source;     /* what training samples from */
    corpus *held_out;   /* val_source's corpus, or NULL: a split of source */
    token_split train;  /* of source: all of it with val_source, else the head */
    token_split eval;   /* the tail of source, or all of held_out */
    /* The bytes of text each token id stands for ([vocab]: 1 for byte
     * sources, a tokenizer's pieces' lengths), what bits per byte divide
     * by; NULL for token files without a tokenizer (bits per byte unknown) */
    float *token_bytes;
    struct tokenizer *tok;     /* dataset_use_tokenizer's, or NULL */
    char tok_path[512];
    /* dataset_use_mix's halves (core/data/mix.h), or NULL: uniform samples */
    struct data_mix *mix;
} dataset;

/* source: "brown", "synthetic", or a path ending in .txt, .bin or .u32.
 * val_source: NULL or "none" (hold out the last val_fraction of source), or
 * a file (or "brown") whose whole content is held out; val_fraction is then
 * not used.  vocab is V for token files (uint16 tokens: at most 65536); text
 * sources have V = 256.  data_dir holds brown.txt and brown.pos (NULL: $MODE_DATA, else
 * "data").  Each split must hold at least one sample (seq_len+1 tokens).
 * On failure returns non-zero, leaves *out NULL, and err names the file and
 * what is wrong. */
int load_dataset(dataset **out, const char *source, const char *val_source, int vocab,
                 double val_fraction, int seq_len, const char *data_dir, char *err,
                 int err_len);
void free_dataset(dataset **d);
/* Subword tokens: the SentencePiece model at path (core/data/tokenizer.h)
 * is the one that wrote the token files: its pieces must number the
 * dataset's vocab, and the source must be a token file.  Sets token_bytes
 * from its pieces; dataset_fingerprint then adds the model file's.  err
 * names the file and what is wrong (missing, not a model, another vocab). */
int dataset_use_tokenizer(dataset *d, const char *path, char *err, int err_len);
/* The fingerprint of a file as corpus_fingerprint gives it: "bytes N
 * fnv1a64 H (whole)" (a tokenizer model, the data). */
int file_fingerprint(const char *path, char *out, int out_len, char *err, int err_len);
/* The fingerprint of corpus c's file, "bytes N fnv1a64 H (whole)". */
int corpus_fingerprint(const corpus *c, char *out, int out_len, char *err, int err_len);
/* The fingerprints of what a dataset reads (corpus_fingerprint), as
 * "PATH: bytes N fnv1a64 H (whole)", and "; " and the held-out file's with
 * val_source; "; difficulty PATH: ..." with a mix. */
int dataset_fingerprint(const dataset *d, char *out, int out_len, char *err, int err_len);
/* What ranks compare before they compute (comm_agree_text): one item a
 * line, the split first ("data.source=PATH with N tokens held out", or
 * "... held out in PATH"), then "data=" and fingerprint (as
 * dataset_fingerprint gives it). */
void dataset_describe(const dataset *d, const char *fingerprint, char *out, int out_len);
/* A .txt, .bin or .u32 file that is all evaluation data (no training split):
 * its windows start at its first token. */
int load_eval_file(dataset **out, const char *path, int vocab, int seq_len, char *err,
                   int err_len);

/* Tokens [at, at + n) of split s of d into out[n], each checked against
 * d->vocab.  Non-zero on a token >= V, with err naming the file, the token's
 * index in the file and its byte offset. */
int dataset_read(const dataset *d, const token_split *s, long at, long n, token_t *out,
                 char *err, int err_len);

/* Training sample: S+1 tokens from a uniformly random offset of the training
 * split, the offset drawn from pcg32_keyed(seed, DATA_KEY, step, global_seq).
 * With a mix (dataset_use_mix), from the same stream: uniformly among the
 * windows inside documents below the median for an even global_seq, above
 * it for an odd one (docs/data-mix.md).  Non-zero (and err) on a token >= V. */
#define DATA_KEY PCG_KEY_DATA
int dataset_sample(const dataset *d, token_t *out, int seq_len, uint64_t seed, long step,
                   long global_seq, char *err, int err_len);
/* Offset the sample above starts at, in the training split (for recording
 * which batch was used). */
long dataset_sample_offset(const dataset *d, int seq_len, uint64_t seed, long step,
                           long global_seq);

/* Evaluation windows of the held-out split: window w is tokens
 * [w*S, w*S + S] of the split (neighbours share one boundary token). */
long dataset_eval_windows(const dataset *d, int seq_len);
int dataset_eval_window(const dataset *d, token_t *out, int seq_len, long w, char *err,
                        int err_len);
/* Labels of the same window (S+1 values), or NULL when the held-out corpus
 * has none; its class names are d->eval.c->label_names. */
const uint8_t *dataset_eval_labels(const dataset *d, int seq_len, long w);

/* The synthetic corpus: n byte tokens and their difficulty labels from a
 * fixed generator (same output on every machine). */
int synthetic_generate(uint8_t *tokens, uint8_t *labels, long n, uint64_t gen_seed);

#endif
