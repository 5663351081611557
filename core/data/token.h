/* A token: an index into the vocabulary, below model_dims.vocab.  32 bits,
 * so that token files of vocabularies past 65536 (.u32, core/data/data.h)
 * reach the model unchanged; the data layer hands tokens out in this type
 * whatever width the file stores them in. */
#ifndef MODE_CORE_DATA_TOKEN_H
#define MODE_CORE_DATA_TOKEN_H

#include <stdint.h>

typedef uint32_t token_t;

#endif
