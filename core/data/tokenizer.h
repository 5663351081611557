/* Subword tokens through SentencePiece (docs/tokens.md): a C face on its
 * C++ library.  A model trained by tokenizer_train round-trips any byte
 * string exactly: identity normalisation, no dummy prefix, no removal of
 * spaces, byte fallback for what its pieces do not cover, and text encoded
 * line by line with each newline as the byte piece <0x0A>.  So the bytes a
 * token sequence stands for are the sum of its pieces' bytes
 * (tokenizer_piece_bytes), which is what bits per byte divide by. */
#ifndef MODE_CORE_DATA_TOKENIZER_H
#define MODE_CORE_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tokenizer tokenizer;

/* Load a SentencePiece model file, read through the checked open
 * (core/util/file.h: a folder or a FIFO is refused at once); err names the
 * file and what is wrong (missing, not a regular file, not a model).  No
 * function here lets a C++ exception out: each is an error code. */
int tokenizer_load(tokenizer **out, const char *path, char *err, int err_len);
/* The same from a model's serialized bytes (tokenizer_train's); name is
 * what messages call it. */
int tokenizer_from_model(tokenizer **out, const void *model, size_t n, const char *name,
                         char *err, int err_len);
void tokenizer_free(tokenizer **t);
int tokenizer_vocab(const tokenizer *t);
/* The bytes piece id stands for inside a text: its UTF-8 with U+2581 (the
 * space mark) as one byte, 1 for a byte piece <0xNN>, 0 for control and
 * unknown pieces. */
int tokenizer_piece_bytes(const tokenizer *t, int id);
/* text[0, n) as ids (malloc'd into *ids, *n_ids of them). */
int tokenizer_encode(const tokenizer *t, const char *text, size_t n, int32_t **ids,
                     long *n_ids, char *err, int err_len);
/* The text of ids[0, n): malloc'd, NUL-terminated (*len bytes, may hold
 * NULs of byte pieces), or NULL. */
char *tokenizer_decode(const tokenizer *t, const int32_t *ids, long n, size_t *len);
/* Train a model of vocab pieces on text[0, n), a line a sentence as
 * SentencePiece reads a text file, type "bpe" or "unigram": its serialized
 * bytes malloc'd into *model (*model_len of them), for tokenizer_from_model
 * and to be written as OUT.model.  The caller reads the text (through the
 * checked open): no path reaches SentencePiece's flag parser, where ',' and
 * ' ' split it into other paths. */
int tokenizer_train(const char *text, size_t n, int vocab, const char *type, int threads,
                    char **model, size_t *model_len, char *err, int err_len);
/* "piece\tscore" a line for every piece (the OUT.vocab SentencePiece's
 * own training writes): malloc'd, *len bytes, or NULL. */
char *tokenizer_vocab_listing(const tokenizer *t, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
